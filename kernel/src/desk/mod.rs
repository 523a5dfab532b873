//! The desk: everything the machine keeps besides its state and counters, and the outbox of
//! finished commands. Through [`Cx`] it is the context of the state machine in [`crate::core`].
//!
//! What it keeps, by concern (each field of [`Desk`] names one):
//!
//! - the tools: the ledger of calls, refusals and exclusions per tool, the calls in flight, the
//!   repeat detector;
//! - the work: the todo list (and what `write_todos` calls in flight would make it), the partial
//!   result, the verifier's missing items;
//! - what the model was told: the last kind of no-op turn, the calls it wrote as text, the share
//!   of the token budget it was warned about;
//! - the clock and the host: the latest clock reading, events not accepted, budgets raised and
//!   the step a budget stop pre-empted;
//! - the outbox.
//!
//! It does two things, in this order, for every event:
//!
//! 1. [`Desk::classify`] (pure, `classify.rs`): the concrete event and what the desk knows become
//!    one abstract [`Input`] and an [`Arrival`] that borrows what the event would change.
//! 2. The state that accepts the input commits the arrival (`Cx::accept_*`, `accept.rs`; the
//!    ledger's upkeep as calls go out and results come back, `calls.rs`) and pushes the commands
//!    of its transition (`call_model`, `verify`, `stop`, notices: `outbox.rs`). A state that does
//!    not accept the input commits nothing, and the event is left as it came.
//!
//! Nothing of an event is copied or moved on the way: the arrival borrows it, so the per-event
//! cost does not grow with the payload. What the machine keeps is taken out of it only when a
//! state commits (a turn's text becomes the partial result, its calls go out in `RunTools`).

mod accept;
mod calls;
mod classify;
mod outbox;

use crate::answer::Said;
use crate::command::{BudgetWarning, Command};
use crate::event::{ModelTurn, ToolResult, Verdict};
use crate::input::NoOpKind;
use crate::ledger::{Exclusion, Ledger};
use crate::loops::{Loops, Repetition};
use crate::phase::{Ignored, Phase};
use crate::policy::Policy;
use crate::raise::Preempted;
use crate::rule::Rule;
use crate::step::Handled;
use crate::todo::Todo;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// The tool calls in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Pending {
    /// Executed calls whose results are awaited.
    pub(crate) executed: u32,
    /// Sum of the fingerprints of their ids (order-independent, allocation-free matching).
    pub(crate) ids: u64,
    /// Fingerprint of the calls (name + canonical arguments).
    pub(crate) calls: u64,
}

/// What a classified event would change, borrowed from the event; committed only if a state
/// accepts its input.
#[derive(Debug)]
pub(crate) enum Arrival<'e> {
    /// A model turn, and for a tool turn what becomes of each call.
    Turn { turn: &'e mut ModelTurn, plan: Plan },
    /// Tool results: the turn's fingerprint for the detector (`None`: a call failed, which
    /// breaks every window), and the repetition it makes; a poll's fingerprint is the poll's,
    /// kept apart from the detector.
    Results {
        results: &'e [ToolResult],
        fingerprint: Option<u64>,
        /// A poll of declared pollers, with how many polls in a row got these results.
        poll: Option<u32>,
        /// The fingerprint is in no slot of the detector's ring (see [`Loops::push_new`]).
        new: bool,
        repetition: Repetition,
    },
    /// A verdict.
    Verdict(&'e Verdict),
    /// A clock reading (the later of it and the last one).
    Tick(u64),
    /// Nothing to commit (model errors, cancel, abstract inputs).
    Nothing,
    /// The raised policy of a raise (see [`crate::Machine::raise`]).
    Raised(Box<Policy>),
}

/// What becomes of each call of a tool turn: refused (excluded tool, or its budget reached) or run,
/// possibly with a budget warning. The one place that decides it.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub(crate) refused: Vec<(usize, Exclusion)>,
    pub(crate) warnings: Vec<(usize, BudgetWarning)>,
    pub(crate) runnable: u32,
    /// Refusals by a bound of a tool budget (the others are exclusions for failures).
    pub(crate) blocked: u32,
}

/// The last poll of declared pollers (see [`Desk::last_poll`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LastPoll {
    /// The poll's calls and results, as the repeat detector fingerprints a turn.
    pub(crate) fingerprint: u64,
    /// Polls in a row with that fingerprint, counting the first.
    pub(crate) times: u32,
}

/// A declared poller's latest successful result (see [`Desk::poller_said`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PollerSaid {
    /// The poller's name.
    pub(crate) name: String,
    /// Its result's text (a string result as it is, any other JSON written out), cut to
    /// [`POLLER_SAID_CHARS`] characters.
    pub(crate) result: String,
    /// How many polls in a row had got the same results when it came (the poll streak, 0 when
    /// it came in a turn that was not a poll); set to 0 by a later tool turn without a poller.
    /// From 2 on, what the poller waits for is still going on: the nudge says to poll again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) same: u32,
}

/// How much of a poller's result the nudges quote.
pub(crate) const POLLER_SAID_CHARS: usize = 200;

/// The desk (see the module documentation). The fields keep the order of the snapshot's JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Desk {
    /// Per tool: calls, successes, failures, refusals, an exclusion, where its budget counts from.
    pub(crate) ledger: Ledger,
    /// The todo list the agent keeps with `write_todos`.
    pub(crate) todos: Vec<Todo>,
    /// `write_todos` calls in flight: (id fingerprint, todos), applied when their result is ok.
    pub(crate) staged_todos: Vec<(u64, Vec<Todo>)>,
    /// The partial result: the latest substantive text of the model.
    pub(crate) result: Option<String>,
    /// What the verifier said is missing, for the nudge after a rejection.
    pub(crate) missing_items: Vec<String>,
    /// The calls of the batch in flight, matched against the results that answer them.
    pub(crate) pending: Pending,
    /// The repeat detector: fingerprints of recent tool turns.
    pub(crate) loops: Loops,
    /// The last poll of declared pollers (`policy.pollers`): its fingerprint (calls and
    /// results) and how many polls in a row got those results. Absent from the JSON form
    /// before the first poll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_poll: Option<LastPoll>,
    /// The latest successful result of a declared poller (`policy.pollers`), in any tool turn,
    /// for the nudges: a model that stops polling is told what its poller said last. Absent
    /// from the JSON form before the first such result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) poller_said: Option<Box<PollerSaid>>,
    /// The latest clock reading (ms since the run started); readings never go back.
    pub(crate) now_ms: u64,
    /// Events not accepted (counted, otherwise without effect).
    pub(crate) ignored: u32,
    /// The kind of the last turn that did nothing, for the nudge that answers it.
    pub(crate) last_no_op: NoOpKind,
    /// The calls the last no-op turn wrote as text, for its nudge (only after such a turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) text_call: Option<Box<TextCallNote>>,
    /// The largest share of `token_budget` (in percent, one of [`TOKEN_WARNINGS`]) the model
    /// was told it used; 0 when none.
    #[serde(default)]
    pub(crate) told_tokens: u8,
    /// `told_tokens` when the last checkpoint was posted (a tool of a `reset_on` succeeded) or
    /// written for the agent: below 80, none came since the run passed 80 % of `token_budget`.
    /// Absent from the JSON form while 0.
    #[serde(default, skip_serializing_if = "is_zero_u8")]
    pub(crate) checkpoint_share: u8,
    /// The word 4-grams of every text the kernel sent the model (nudges, notices, the checkpoint
    /// prompt), so that a reply repeating them is not taken for an answer. Absent from the JSON
    /// form while empty.
    #[serde(default, skip_serializing_if = "Said::is_empty")]
    pub(crate) said: Said,
    /// The step a budget stop pre-empted, kept for a raise (only while stopped on a budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) preempted: Option<Preempted>,
    /// Budgets raised since the run started (each raise takes a step no model call answers).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) raises: u32,
    /// The outbox: commands of the transitions taken, not yet handed to the host.
    pub(crate) out: VecDeque<Command>,
}

/// The context of one dispatch: the desk, the event being dispatched (borrowed), and what the
/// dispatch decided. It lives for one [`crate::Machine`] dispatch.
#[derive(Debug)]
pub(crate) struct Cx<'d, 'e> {
    pub(crate) desk: &'d mut Desk,
    /// Written in place by the classification ([`Desk::classify`]).
    pub(crate) arrival: Arrival<'e>,
    /// The rule that fired.
    pub(crate) rule: Option<Rule>,
    /// Set when the input was not accepted.
    pub(crate) not_accepted: Option<Ignored>,
}

/// The shares of `token_budget`, in percent, at which the model is told how much it has used.
pub(crate) const TOKEN_WARNINGS: [u8; 2] = [80, 90];

impl Desk {
    pub(crate) fn new() -> Desk {
        Desk {
            ledger: Ledger::default(),
            todos: Vec::new(),
            staged_todos: Vec::new(),
            result: None,
            missing_items: Vec::new(),
            pending: Pending::default(),
            loops: Loops::default(),
            last_poll: None,
            poller_said: None,
            now_ms: 0,
            ignored: 0,
            last_no_op: NoOpKind::Silent,
            text_call: None,
            told_tokens: 0,
            checkpoint_share: 0,
            said: Said::default(),
            preempted: None,
            raises: 0,
            out: VecDeque::with_capacity(8),
        }
    }

    /// An event that was not accepted: counted, and nothing else changes.
    pub(crate) fn ignore(&mut self, phase: Phase, why: Ignored) -> Handled {
        self.ignored = self.ignored.saturating_add(1);
        let why = if phase.is_terminal() {
            Ignored::Terminal
        } else {
            why
        };
        Handled::Ignored { why, phase }
    }
}

/// What the nudge after a turn that wrote its tool calls as text says of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TextCallNote {
    /// The names the written calls gave.
    pub(crate) names: Vec<String>,
    /// The offered tools to name (the host's [`crate::TextCalls::suggested`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) suggested: Vec<String>,
    /// The call was cut off or could not be read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) broken: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_zero_u8(n: &u8) -> bool {
    *n == 0
}
