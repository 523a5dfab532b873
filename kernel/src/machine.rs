//! [`Machine`]: the host-facing kernel. [`Machine::handle`] classifies a concrete event into one
//! abstract input ([`crate::desk`]) and hands it to the state machine ([`crate::core`]), whose
//! states commit it and queue the commands of the transition; the host drains them with
//! [`Machine::poll_command`].

use crate::command::{Command, ModelCall};
use crate::core::Core;
use crate::desk::{Arrival, Cx, Desk};
use crate::event::{Event, ToolResult};
use crate::input::{Gate, Input};
use crate::ledger::Ledger;
use crate::phase::{CallReason, Ignored, Phase};
use crate::policy::{Policy, PolicyError};
use crate::raise::{Raise, RaiseError};
use crate::reason::Outcome;
use crate::stats::{Stats, Streaks};
use crate::step::{Handled, StepRecord};
use crate::todo::Todo;
use serde::{Deserialize, Serialize};
use statig::blocking::{IntoStateMachineExt, StateMachine};
use std::fmt;

/// A saved machine that cannot be restored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RestoreError {
    /// The bytes are not a saved machine.
    Format(String),
    /// The saved machine's policy is invalid.
    Policy(PolicyError),
    /// The saved machine contradicts its own invariants (a counter past its limit, ...).
    Inconsistent(String),
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestoreError::Format(e) => write!(f, "not a saved machine: {e}"),
            RestoreError::Policy(e) => write!(f, "saved machine has an invalid policy: {e}"),
            RestoreError::Inconsistent(e) => write!(f, "saved machine is inconsistent: {e}"),
        }
    }
}

impl std::error::Error for RestoreError {}

/// The kernel. Sans-IO and deterministic: [`Machine::handle`] an [`Event`], then drain
/// [`Machine::poll_command`] until it returns `None`, and arm a timer for
/// [`Machine::poll_timeout`]. The machine never reads a clock.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// The state, the policy and the counters.
    sm: StateMachine<Core>,
    /// Everything else: ledger, todos, result, detector, and the outbox.
    desk: Desk,
}

/// Equal machines have the same state, counters and data. (statig's own equality also compares
/// whether the machine was initialized, which a restored machine is not until its first event;
/// that flag has no behaviour here because no state has an entry action.)
impl PartialEq for Machine {
    fn eq(&self, other: &Self) -> bool {
        self.sm.state() == other.sm.state() && *self.sm == *other.sm && self.desk == other.desk
    }
}

impl fmt::Debug for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Machine")
            .field("phase", &self.phase())
            .field("stats", &self.stats())
            .field("streaks", &self.streaks())
            .field("ledger", &self.desk.ledger)
            .field("todos", &self.desk.todos)
            .field("pending_commands", &self.desk.out.len())
            .finish_non_exhaustive()
    }
}

impl Machine {
    /// A machine for a run under `policy`. Its first command is `CallModel`.
    pub fn new(policy: Policy) -> Result<Machine, PolicyError> {
        policy.validate()?;
        let mut desk = Desk::new();
        desk.out.push_back(Command::CallModel(ModelCall {
            delay_ms: 0,
            reason: CallReason::Start,
            tools: true,
        }));
        Ok(Machine {
            sm: Core::new(policy).state_machine(),
            desk,
        })
    }

    /// Saves the whole machine (state, counters, ledger, todos, pending commands) as JSON bytes.
    pub fn save(&self) -> Vec<u8> {
        // Serializing plain data to a Vec cannot fail: no map has non-string keys.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Restores a machine saved by [`Machine::save`]. Bytes from outside the process are checked:
    /// the format, the policy, and every invariant a live or ended run keeps, so a restored
    /// machine is one the kernel could have reached.
    pub fn restore(bytes: &[u8]) -> Result<Machine, RestoreError> {
        let machine: Machine =
            serde_json::from_slice(bytes).map_err(|e| RestoreError::Format(e.to_string()))?;
        machine.policy().validate().map_err(RestoreError::Policy)?;
        machine.check().map_err(RestoreError::Inconsistent)?;
        Ok(machine)
    }

    /// Checks every invariant of the machine as it is (see [`crate::invariants`]).
    pub(crate) fn check(&self) -> Result<(), String> {
        crate::invariants::check(self.sm.state(), &self.sm, &self.desk)
    }

    // ----- getters -----

    /// The policy of this run.
    pub fn policy(&self) -> &Policy {
        &self.sm.policy
    }

    /// The current state.
    pub fn phase(&self) -> Phase {
        self.sm.state().phase()
    }

    /// The outcome, once the run has ended.
    pub fn outcome(&self) -> Option<Outcome> {
        self.sm.state().outcome()
    }

    /// Every counter.
    pub fn stats(&self) -> Stats {
        let mut stats = self.sm.stats;
        stats.ignored_events = self.desk.ignored;
        stats
    }

    /// The streaks (things in a row).
    pub fn streaks(&self) -> Streaks {
        self.sm.streaks
    }

    /// The termination variant (see `spec/machine.md`): strictly decreases on every step.
    pub fn variant(&self) -> u64 {
        self.sm.variant()
    }

    /// The tool ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.desk.ledger
    }

    /// The todo list.
    pub fn todos(&self) -> &[Todo] {
        &self.desk.todos
    }

    /// The last substantive model content.
    pub fn result(&self) -> Option<&str> {
        self.desk.result.as_deref()
    }

    /// What a completion claim still lacks, from the todo list and the ledger (rules 5, 8).
    pub fn gate(&self) -> Gate {
        self.desk.gate(self.policy())
    }

    /// The deadline, in milliseconds since the start, while the run is live.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.phase().is_terminal() {
            None
        } else {
            self.policy().deadline_ms
        }
    }

    /// The next command, in order. Drain until `None` after every [`Machine::handle`].
    #[must_use]
    #[inline]
    pub fn poll_command(&mut self) -> Option<Command> {
        self.desk.out.pop_front()
    }

    /// Whether commands are waiting.
    pub fn has_commands(&self) -> bool {
        !self.desk.out.is_empty()
    }

    /// The state and the counters (the model check's state identity; the policy is the same for
    /// every state of one exploration).
    #[cfg(feature = "testing")]
    pub(crate) fn core_key(&self) -> (crate::core::State, Stats, Streaks) {
        (*self.sm.state(), self.sm.stats, self.sm.streaks)
    }

    // ----- input -----

    /// Feeds one event. Returns what happened; never panics on any event in any state.
    ///
    /// The event is classified into one abstract [`Input`] (a pure step); the state machine then
    /// accepts it, committing what it changes and queueing the commands of its transition, or
    /// ignores it (counted in `ignored_events`). The machine keeps only what it needs of the
    /// event (a turn's text as the partial result, its calls to hand out in
    /// [`Command::RunTools`]); to keep tool results, feed them with [`Machine::handle_results`].
    #[inline]
    pub fn handle(&mut self, mut event: Event) -> Handled {
        let from = self.phase();
        let mut cx = Cx::new(&mut self.desk);
        match cx
            .desk
            .classify(&self.sm.policy, &mut event, &mut cx.arrival)
        {
            Some(input) => Machine::dispatch(&mut self.sm, from, input, &mut cx),
            // Tool results that do not answer the calls in flight.
            None => cx.desk.ignore(from, Ignored::Unexpected),
        }
    }

    /// Feeds the results of the calls of the last [`Command::RunTools`], which the host keeps:
    /// the same as `handle(Event::ToolResults(results.to_vec()))`, without the copy. The machine
    /// keeps nothing of a result but what the ledger, the todo list and the repeat detector
    /// count (the outputs' fingerprints travel with them, see [`crate::Json`]), so a host that
    /// journals the results or shows them to the model lends them here and uses them after.
    #[inline]
    pub fn handle_results(&mut self, results: &[ToolResult]) -> Handled {
        let from = self.phase();
        let mut cx = Cx::new(&mut self.desk);
        match cx
            .desk
            .classify_results(&self.sm.policy, results, &mut cx.arrival)
        {
            Some(input) => Machine::dispatch(&mut self.sm, from, input, &mut cx),
            None => cx.desk.ignore(from, Ignored::Unexpected),
        }
    }

    /// Feeds one abstract input directly (model checking and the spec generator use this; hosts
    /// use [`Machine::handle`]). Payload-dependent data (ledger, todos) is left untouched.
    pub fn handle_input(&mut self, input: Input) -> Handled {
        let from = self.phase();
        Machine::dispatch(&mut self.sm, from, input, &mut Cx::new(&mut self.desk))
    }

    /// Goes on with a run that a run-wide budget stopped, under the policy with `raises`
    /// applied: the step the stop pre-empted is taken (`aborted --raise-->`, under that step's
    /// rule), its budgets checked again. Each raised field must be the budget that stopped the
    /// run, raised; otherwise nothing changes and the error says why. See [`crate::raise`]:
    /// a raise is an outside decision, journaled as [`crate::Entry::Raised`].
    pub fn raise(&mut self, raises: &[Raise]) -> Result<Handled, RaiseError> {
        let Some(outcome) = self.outcome() else {
            return Err(RaiseError::Live);
        };
        if self.desk.preempted.is_none() {
            return Err(RaiseError::NotABudgetStop(outcome));
        }
        let policy = crate::raise::raised(self.policy(), outcome, raises)?;
        let from = self.phase();
        let mut cx = Cx::new(&mut self.desk);
        cx.arrival = Arrival::Raised(Box::new(policy));
        Ok(Machine::dispatch(&mut self.sm, from, Input::Raise, &mut cx))
    }

    // Inlined into each `handle_*`, whose classification wrote the arrival in place in the
    // context: it is never copied (a copy of a freshly written enum stalls on store forwarding).
    #[inline(always)]
    fn dispatch<'a>(
        sm: &mut StateMachine<Core>,
        from: Phase,
        input: Input,
        cx: &mut Cx<'a, 'a>,
    ) -> Handled {
        #[cfg(debug_assertions)]
        let variant = sm.variant();
        sm.handle_with_context(&input, cx);
        // What the accepting state did not commit (or an ignored event) stays with the event.
        if let Some(why) = cx.not_accepted {
            return cx.desk.ignore(from, why);
        }
        let Some(rule) = cx.rule else {
            return Handled::Observed;
        };
        let to = sm.state().phase();
        #[cfg(debug_assertions)]
        debug_assert!(
            to.is_terminal() || input == Input::Raise || sm.variant() < variant,
            "the termination variant must strictly decrease"
        );
        Handled::Step(StepRecord {
            step: sm.stats.steps,
            from,
            to,
            input,
            rule,
        })
    }
}
