//! The desk: everything the machine keeps besides its state and counters (the tool ledger, the
//! todo list, the partial result, the verifier's missing items, the repeat detector) and the
//! outbox of finished commands. Through [`Cx`] it is the context of the state machine in
//! [`crate::core`].
//!
//! It does two things, in this order, for every event:
//!
//! 1. [`Desk::classify`] (pure): the concrete event and what the desk knows become one abstract
//!    [`Input`] and an [`Arrival`] that borrows what the event would change.
//! 2. The state that accepts the input commits the arrival (`Cx::accept_*`) and pushes the
//!    commands of its transition (`call_model`, `Cx::run_tools`, `verify`, `stop`, notices). A
//!    state that does not accept the input commits nothing, and the event is left as it came.
//!
//! Nothing of an event is copied or moved on the way: the arrival borrows it, so the per-event
//! cost does not grow with the payload. What the machine keeps is taken out of it only when a
//! state commits (a turn's text becomes the partial result, its calls go out in `RunTools`).

use crate::backoff::backoff_ms;
use crate::catalog;
use crate::command::{
    BudgetWarning, Command, ModelCall, Notice, Nudge, NudgeKind, Stop, ToolBatch, VerifyRequest,
};
use crate::event::{
    Event, Finish, ModelErrorKind, ModelTurn, ToolCall, ToolOutcome, ToolResult, Verdict,
};
use crate::fingerprint::{calls_fingerprint, result_fingerprint};
use crate::input::{Batch, EmptyKind, ErrorClass, Gate, Input, NoOpKind, TurnKind};
use crate::ledger::{Block, Exclusion, Ledger};
use crate::loops::{Loops, Repetition};
use crate::phase::{CallReason, Ignored, Phase};
use crate::policy::{OnUnrecoverable, Policy};
use crate::raise::Preempted;
use crate::reason::Outcome;
use crate::rule::Rule;
use crate::stats::Stats;
use crate::step::Handled;
use crate::textcall::{self, TextToolCalls};
use crate::todo::{Todo, WRITE_TODOS, open_todos, parse_todos};
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
    /// breaks every window), and the repetition it makes.
    Results {
        results: &'e [ToolResult],
        fingerprint: Option<u64>,
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

/// The desk (see the module documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Desk {
    pub(crate) ledger: Ledger,
    pub(crate) todos: Vec<Todo>,
    /// `write_todos` calls in flight: (id fingerprint, todos), applied when their result is ok.
    pub(crate) staged_todos: Vec<(u64, Vec<Todo>)>,
    pub(crate) result: Option<String>,
    pub(crate) missing_items: Vec<String>,
    pub(crate) pending: Pending,
    pub(crate) loops: Loops,
    pub(crate) now_ms: u64,
    pub(crate) ignored: u32,
    pub(crate) last_no_op: NoOpKind,
    /// The calls the last no-op turn wrote as text, for its nudge (only after such a turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) text_call: Option<Box<TextCallNote>>,
    /// The largest share of `token_budget` (in percent, one of [`TOKEN_WARNINGS`]) the model
    /// was told it used; 0 when none.
    #[serde(default)]
    pub(crate) told_tokens: u8,
    /// The step a budget stop pre-empted, kept for a raise (only while stopped on a budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) preempted: Option<Preempted>,
    /// Budgets raised since the run started (each raise takes a step no model call answers).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) raises: u32,
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
            now_ms: 0,
            ignored: 0,
            last_no_op: NoOpKind::Silent,
            text_call: None,
            told_tokens: 0,
            preempted: None,
            raises: 0,
            out: VecDeque::with_capacity(8),
        }
    }

    // ----- 1. classification (pure) -----

    /// The abstract input an event is, with what it would change; `None` for tool results that do
    /// not answer the calls in flight.
    ///
    /// The arrival is written in place, into `arrival` (which is `Arrival::Nothing` before), so
    /// that nothing of it is built on the stack and copied (a copy of a freshly written enum
    /// stalls on store forwarding).
    #[inline(always)]
    pub(crate) fn classify<'e>(
        &self,
        policy: &Policy,
        event: &'e mut Event,
        arrival: &mut Arrival<'e>,
    ) -> Option<Input> {
        Some(match event {
            Event::ModelTurn(turn) => {
                let (input_tokens, output_tokens) = turn
                    .usage
                    .map_or((0, 0), |u| (u.input_tokens, u.output_tokens));
                let text = turn
                    .tool_calls
                    .is_empty()
                    .then(|| self.classify_text_turn(policy, turn));
                *arrival = Arrival::Turn {
                    turn,
                    plan: Plan::default(),
                };
                let kind = match (text, &mut *arrival) {
                    (Some(kind), _) => kind,
                    // A tool turn: its plan is made where the arrival holds it.
                    (None, Arrival::Turn { turn, plan }) => {
                        self.plan(policy, &turn.tool_calls, plan);
                        TurnKind::Tools {
                            runnable: plan.runnable,
                            refused: u32::try_from(plan.refused.len()).unwrap_or(u32::MAX),
                            blocked: plan.blocked,
                        }
                    }
                    (None, _) => return None,
                };
                Input::Turn {
                    kind,
                    input_tokens,
                    output_tokens,
                }
            }
            Event::ModelError {
                kind,
                retry_after_ms,
            } => {
                let class = match kind {
                    ModelErrorKind::RateLimited
                    | ModelErrorKind::Server
                    | ModelErrorKind::Timeout => ErrorClass::Retryable {
                        retry_after_ms: *retry_after_ms,
                    },
                    ModelErrorKind::Auth | ModelErrorKind::BadRequest => ErrorClass::Fatal,
                    ModelErrorKind::ContextOverflow => ErrorClass::ContextOverflow,
                };
                Input::ModelError(class)
            }
            Event::ToolResults(results) => return self.classify_results(policy, results, arrival),
            Event::Verdict(verdict) => {
                *arrival = Arrival::Verdict(verdict);
                Input::Verdict {
                    accepted: verdict.complete,
                }
            }
            Event::Tick { now_ms } => {
                let now_ms = self.now_ms.max(*now_ms);
                let deadline_passed = policy.deadline_ms.is_some_and(|d| now_ms >= d);
                *arrival = Arrival::Tick(now_ms);
                Input::Tick { deadline_passed }
            }
            Event::Cancel => Input::Cancel,
        })
    }

    /// Tool results as an input, their arrival written in place; `None` when they do not answer
    /// the calls in flight.
    #[inline(always)]
    pub(crate) fn classify_results<'e>(
        &self,
        policy: &Policy,
        results: &'e [ToolResult],
        arrival: &mut Arrival<'e>,
    ) -> Option<Input> {
        if !self.answers_pending(results) {
            return None;
        }
        let (batch, fingerprint, new, repetition) = self.summarize_results(policy, results);
        *arrival = Arrival::Results {
            results,
            fingerprint,
            new,
            repetition,
        };
        Some(Input::ToolResults(batch))
    }

    /// A turn without tool calls.
    fn classify_text_turn(&self, policy: &Policy, turn: &ModelTurn) -> TurnKind {
        let substantive = !turn.text.trim().is_empty();
        let zero_usage = turn.usage.is_some_and(|u| u.is_zero());
        if !substantive {
            match turn.finish {
                Finish::Length => TurnKind::Empty(EmptyKind::Truncated),
                Finish::ContentFilter => TurnKind::Empty(EmptyKind::Filtered),
                _ if turn.reasoning => TurnKind::Empty(EmptyKind::ReasoningOnly),
                _ if zero_usage => TurnKind::Empty(EmptyKind::Blank),
                _ => TurnKind::NoOp(NoOpKind::Silent),
            }
        } else {
            match (turn.finish, turn.needs_more_work) {
                (Finish::Repetition, _) => TurnKind::NoOp(NoOpKind::Repetitive),
                (Finish::Length, _) => TurnKind::NoOp(NoOpKind::Truncated),
                (Finish::ContentFilter, _) => TurnKind::NoOp(NoOpKind::Filtered),
                _ if policy.text_tool_calls != TextToolCalls::Off
                    && textcall::find(&turn.text).is_some() =>
                {
                    TurnKind::NoOp(NoOpKind::TextCall)
                }
                (_, Some(true)) => TurnKind::NoOp(NoOpKind::NeedsMoreWork),
                (_, needs_more_work) => TurnKind::Claim {
                    explicit: needs_more_work == Some(false),
                    gate: self.gate(policy),
                },
            }
        }
    }

    /// What a completion claim still lacks, from the todo list and the ledger (rules 5, 8).
    pub(crate) fn gate(&self, policy: &Policy) -> Gate {
        Gate {
            open_todos: self.todos.iter().any(|t| t.status.is_open()),
            missing_required: policy
                .completion_requires
                .iter()
                .any(|t| !self.ledger.succeeded(t)),
        }
    }

    /// Decides every call of a tool turn. A call is refused when its tool is excluded, or when it
    /// would reach a bound of its tool's budget ([`crate::catalog::TOOL_BOUNDS`]: `block_at` counting
    /// the calls since the budget's last reset, `hard_block_at` those of the whole run), counting
    /// the earlier calls of this turn; a call at or past `warn_at` carries a warning. Linear in
    /// the calls; allocates only for refusals, warnings and budgeted tools.
    #[inline]
    fn plan(&self, policy: &Policy, calls: &[ToolCall], plan: &mut Plan) {
        // The common case: no tool is excluded and none has a budget, so every call runs.
        if !self.ledger.any_excluded() && policy.tool_budgets.is_empty() {
            plan.runnable = u32::try_from(calls.len()).unwrap_or(u32::MAX);
            return;
        }
        self.plan_each(policy, calls, plan);
    }

    /// [`Desk::plan`], call by call.
    #[inline(never)]
    fn plan_each(&self, policy: &Policy, calls: &[ToolCall], plan: &mut Plan) {
        // Calls of each budgeted tool so far in this turn.
        let mut in_turn: Vec<(&str, u32)> = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            let tool = call.name.as_str();
            if let Some(exclusion) = self.ledger.exclusion(tool) {
                if matches!(exclusion, Exclusion::Budget(_)) {
                    plan.blocked = plan.blocked.saturating_add(1);
                }
                plan.refused.push((i, exclusion));
                continue;
            }
            let Some(budget) = policy.tool_budgets.get(tool) else {
                plan.runnable = plan.runnable.saturating_add(1);
                continue;
            };
            let earlier = match in_turn.iter_mut().find(|(t, _)| *t == tool) {
                Some((_, n)) => n,
                None => {
                    in_turn.push((tool, 0));
                    let last = in_turn.len() - 1;
                    &mut in_turn[last].1
                }
            };
            let record = self.ledger.get(tool).copied().unwrap_or_default();
            // The call's number as each bound counts (1-based), and the calls left before the
            // first bound it reaches (0: this call is refused).
            let mut left = u32::MAX;
            let mut block = None;
            for bound in catalog::TOOL_BOUNDS {
                let Some(at) = (bound.limit)(budget) else {
                    continue;
                };
                let call_no = bound
                    .count(record.calls, record.budget_calls())
                    .saturating_add(*earlier)
                    .saturating_add(1);
                // A reached bound that nothing lifts is the one to name (a checkpoint would not
                // help); otherwise the first reached.
                if call_no >= at && block.is_none_or(|b: Block| b.bound.resets && !bound.resets) {
                    block = Some(Block { bound, at });
                }
                left = left.min(at.saturating_sub(call_no));
            }
            if let Some(block) = block {
                plan.blocked = plan.blocked.saturating_add(1);
                plan.refused.push((i, Exclusion::Budget(block)));
                continue;
            }
            *earlier += 1;
            plan.runnable = plan.runnable.saturating_add(1);
            // Calls since the budget's last reset (`reset_on`) count for its warning.
            let call_no = record.budget_calls().saturating_add(*earlier);
            if let Some(warn_at) = budget.warn_at
                && call_no >= warn_at
            {
                let bounded = left != u32::MAX;
                let warning = BudgetWarning {
                    call: call_no,
                    // The call, in this count, from which calls are refused.
                    block_at: bounded.then(|| call_no.saturating_add(left)),
                    last: bounded && left == 1,
                };
                plan.warnings.push((i, warning));
            }
        }
    }

    #[inline(always)]
    fn answers_pending(&self, results: &[ToolResult]) -> bool {
        let ids = results
            .iter()
            .fold(0u64, |acc, r| acc.wrapping_add(r.call_id.fingerprint()));
        u32::try_from(results.len()).is_ok_and(|n| n == self.pending.executed)
            && ids == self.pending.ids
    }

    // Inlined into the classification: its summary stays in registers (returned through memory,
    // each part is copied, and a copy of freshly written memory stalls on store forwarding).
    #[inline(always)]
    fn summarize_results(
        &self,
        policy: &Policy,
        results: &[ToolResult],
    ) -> (Batch, Option<u64>, bool, Repetition) {
        let mut failed = 0u32;
        let mut unrecoverable = false;
        let mut fingerprint = self.pending.calls;
        for r in results {
            // Results arrive in any order: combine their fingerprints commutatively.
            fingerprint = fingerprint.wrapping_add(result_fingerprint(r).rotate_left(17));
            if let ToolOutcome::Error { kind, .. } = r.outcome {
                failed = failed.saturating_add(1);
                unrecoverable |= kind.is_unrecoverable();
            }
        }
        // Only turns in which every call succeeded feed the repeat detector (issue: a failing
        // call repeated is a broken tool, for the failure counters to name).
        // A turn whose every call was refused (by a budget) ran nothing: it repeats nothing.
        let (fingerprint, new, repetition) = if failed == 0 && !results.is_empty() {
            // The common case: a turn unlike any of the last ones, which repeats nothing.
            let new = !self.loops.may_repeat(fingerprint);
            let seen = if new {
                Repetition::NONE
            } else {
                self.loops.peek(fingerprint, policy.max_loop_period)
            };
            (Some(fingerprint), new, seen)
        } else {
            (None, false, Repetition::NONE)
        };
        let batch = Batch {
            failed,
            all_failed: failed > 0 && usize::try_from(failed).is_ok_and(|f| f == results.len()),
            unrecoverable,
            repeats: repetition.times,
        };
        (batch, fingerprint, new, repetition)
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
}

// ----- 2. commits, made by the state that accepted the input -----

impl<'d, 'e> Cx<'d, 'e> {
    /// The context of one dispatch; the classification writes its arrival.
    #[inline(always)]
    pub(crate) fn new(desk: &'d mut Desk) -> Self {
        Cx {
            desk,
            arrival: Arrival::Nothing,
            rule: None,
            not_accepted: None,
        }
    }

    /// A model turn was accepted: its substantive text is the partial result, whatever the turn,
    /// but for a tool call written as text (which is not a result). (The calls stay in the turn
    /// for [`Cx::run_tools`].)
    pub(crate) fn accept_turn(&mut self, kind: TurnKind) {
        if let Arrival::Turn { turn, .. } = &mut self.arrival
            && !turn.text.is_empty()
            && kind != TurnKind::NoOp(NoOpKind::TextCall)
            && !turn.text.trim().is_empty()
        {
            self.desk.result = Some(std::mem::take(&mut turn.text));
        }
    }

    /// How many calls of an accepted tool turn the host recovered from the model's text.
    pub(crate) fn recovered_calls(&self) -> u32 {
        match &self.arrival {
            Arrival::Turn { turn, .. } => turn.recovered_calls(),
            _ => 0,
        }
    }

    /// A no-op turn was accepted: remembered for the continuation guidance (with the calls a
    /// turn wrote as text, for the nudge to name).
    pub(crate) fn note_no_op(&mut self, kind: NoOpKind) {
        self.desk.last_no_op = kind;
        self.desk.text_call = match (&self.arrival, kind) {
            (Arrival::Turn { turn, .. }, NoOpKind::TextCall) => {
                textcall::find(&turn.text).map(|written| {
                    Box::new(TextCallNote {
                        names: written.names(),
                        suggested: turn.suggested_tools().to_vec(),
                    })
                })
            }
            _ => None,
        };
    }

    /// Tool results were accepted. Results are facts: recorded in the ledger, the todo list and
    /// the repeat detector whatever the machine decides next. Returns the notice of the tools
    /// this batch excluded (rule 7), for the model before its next call, and the repetition the
    /// detector saw (from `batch` alone for an abstract input, which has no payload). The
    /// results themselves stay with the host. (The notice is boxed: it is rare, and a large
    /// return value is a copy of freshly written memory on every batch.)
    pub(crate) fn accept_results(
        &mut self,
        policy: &Policy,
        batch: &Batch,
    ) -> (Option<Box<Notice>>, Repetition) {
        let Arrival::Results {
            results,
            fingerprint,
            new,
            repetition,
        } = self.arrival
        else {
            let period = u32::from(batch.repeats > 1);
            return (
                None,
                Repetition {
                    period,
                    times: batch.repeats,
                },
            );
        };
        self.arrival = Arrival::Nothing;
        let desk = &mut *self.desk;
        match fingerprint {
            Some(fingerprint) if new => desk.loops.push_new(fingerprint),
            Some(fingerprint) => desk.loops.push(fingerprint, policy.max_loop_period),
            None => desk.loops.break_window(),
        }
        if batch.failed == 0 {
            // The common case (the batch summarizes these results): every call succeeded, and
            // no tool can be excluded.
            for r in results {
                desk.ledger.update(&r.name, |record| {
                    record.successes = record.successes.saturating_add(1);
                });
                if r.name == WRITE_TODOS {
                    desk.apply_todos(&r.call_id);
                }
            }
            if !policy.tool_budgets.is_empty() {
                desk.reset_budgets(policy, results);
            }
            return (None, repetition);
        }
        let notice = desk.record_results(policy, results);
        if !policy.tool_budgets.is_empty() {
            desk.reset_budgets(policy, results);
        }
        (notice, repetition)
    }

    /// A verdict was accepted: what it says is missing joins the list (deduplicated).
    pub(crate) fn accept_verdict(&mut self) {
        let Arrival::Verdict(verdict) = self.arrival else {
            return;
        };
        self.arrival = Arrival::Nothing;
        for item in &verdict.missing {
            let item = item.trim();
            if !item.is_empty() && !self.desk.missing_items.iter().any(|m| m == item) {
                self.desk.missing_items.push(item.to_owned());
            }
        }
    }

    /// A clock reading was accepted.
    pub(crate) fn accept_tick(&mut self) {
        if let Arrival::Tick(now_ms) = self.arrival {
            self.arrival = Arrival::Nothing;
            self.desk.now_ms = now_ms;
        }
    }

    /// The calls and plan of an accepted tool turn, taken out of the arrival.
    #[inline(always)]
    fn take_calls(&mut self) -> (Vec<ToolCall>, Plan) {
        let taken = match &mut self.arrival {
            Arrival::Turn { turn, plan } => {
                (std::mem::take(&mut turn.tool_calls), std::mem::take(plan))
            }
            _ => (Vec::new(), Plan::default()),
        };
        self.arrival = Arrival::Nothing;
        taken
    }

    /// Commits the calls of an accepted tool turn to the ledger and hands them out.
    #[inline(always)]
    pub(crate) fn run_tools(&mut self) {
        let (calls, plan) = self.take_calls();
        self.desk.run_calls(calls, plan);
    }

    /// The raised policy a raise brings, taken out of the arrival.
    pub(crate) fn take_raised(&mut self) -> Option<Policy> {
        match std::mem::replace(&mut self.arrival, Arrival::Nothing) {
            Arrival::Raised(policy) => Some(*policy),
            other => {
                self.arrival = other;
                None
            }
        }
    }

    /// A budget stopped the run before the accepted tool turn's calls ran: they are kept for a
    /// raise, and run then as this turn's plan decided.
    #[cold]
    pub(crate) fn preempt_tools(&mut self) {
        let (calls, plan) = self.take_calls();
        self.desk.preempted = Some(Preempted::Tools {
            calls,
            refused: plan.refused,
            warnings: plan.warnings,
            runnable: plan.runnable,
        });
    }
}

impl Desk {
    /// Commits `calls` to the ledger as `plan` decided each one, and hands them out.
    #[inline(always)]
    pub(crate) fn run_calls(&mut self, calls: Vec<ToolCall>, plan: Plan) {
        let desk = self;
        let mut pending = Pending {
            executed: 0,
            ids: 0,
            calls: calls_fingerprint(&calls),
        };
        desk.staged_todos.clear();
        if plan.refused.is_empty() {
            // The common case: every call runs.
            for call in &calls {
                desk.ledger.update(&call.name, |record| {
                    record.calls = record.calls.saturating_add(1);
                });
                desk.run(call, &mut pending);
            }
        } else {
            let mut refusals = plan.refused.iter().peekable();
            for (i, call) in calls.iter().enumerate() {
                let refusal = refusals.next_if(|(j, _)| *j == i).map(|&(_, e)| e);
                let runs = desk.ledger.update(&call.name, |record| match refusal {
                    Some(exclusion) => {
                        record.refused = record.refused.saturating_add(1);
                        // A budget's block follows from the counts: only an exclusion is kept.
                        if record.excluded.is_none() && !matches!(exclusion, Exclusion::Budget(_)) {
                            record.excluded = Some(exclusion);
                        }
                        false
                    }
                    None => {
                        record.calls = record.calls.saturating_add(1);
                        true
                    }
                });
                if runs {
                    desk.run(call, &mut pending);
                }
            }
        }
        desk.pending = pending;
        desk.out.push_back(Command::RunTools(ToolBatch {
            calls,
            refused: plan.refused,
            warnings: plan.warnings,
        }));
    }
}

impl Desk {
    /// Resets every tool budget whose `reset_on` names a tool that succeeded in `results` (the
    /// agent posted its checkpoint): its count starts again and a block it set is lifted. After
    /// the batch is recorded, so a budgeted call of the same batch is counted before the reset.
    #[inline(never)]
    fn reset_budgets(&mut self, policy: &Policy, results: &[ToolResult]) {
        for (tool, budget) in &policy.tool_budgets {
            let reset = budget.reset_on.iter().any(|on| {
                results
                    .iter()
                    .any(|r| r.name.as_str() == on && matches!(r.outcome, ToolOutcome::Ok(_)))
            });
            if reset {
                self.ledger.reset_budget(tool);
            }
        }
    }

    /// Records tool results in the ledger and the todo list, and returns the notice of the
    /// tools they excluded (see [`Cx::accept_results`]).
    #[inline(never)]
    fn record_results(&mut self, policy: &Policy, results: &[ToolResult]) -> Option<Box<Notice>> {
        let mut excluded: Vec<(String, Exclusion)> = Vec::new();
        for r in results {
            match &r.outcome {
                ToolOutcome::Ok(_) => {
                    self.ledger.update(&r.name, |record| {
                        record.successes = record.successes.saturating_add(1);
                    });
                    if r.name == WRITE_TODOS {
                        self.apply_todos(&r.call_id);
                    }
                }
                ToolOutcome::Error { kind, .. } => {
                    let now_excluded = self.ledger.update(&r.name, |record| {
                        record.failures = record.failures.saturating_add(1);
                        if record.excluded.is_some() {
                            return None;
                        }
                        let exclusion = if kind.is_unrecoverable()
                            && policy.on_unrecoverable_tool_error == OnUnrecoverable::Exclude
                        {
                            Exclusion::Unrecoverable { kind: *kind }
                        } else if record.failures >= policy.max_tool_failures {
                            Exclusion::Failures {
                                count: record.failures,
                            }
                        } else {
                            return None;
                        };
                        record.excluded = Some(exclusion);
                        Some(exclusion)
                    });
                    if let Some(exclusion) = now_excluded {
                        excluded.push((r.name.as_str().to_owned(), exclusion));
                    }
                }
            }
        }
        if excluded.is_empty() {
            return None;
        }
        let text = excluded
            .iter()
            .map(|(tool, exclusion)| {
                format!(
                    "The tool `{tool}` is now excluded because {exclusion}; do not call it again."
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        let notice = Notice::Excluded {
            tools: excluded,
            text,
        };
        Some(Box::new(notice))
    }

    /// A call that runs: awaited, and its todos staged if it writes them.
    #[inline(always)]
    fn run(&mut self, call: &ToolCall, pending: &mut Pending) {
        pending.executed = pending.executed.saturating_add(1);
        pending.ids = pending.ids.wrapping_add(call.id.fingerprint());
        if call.name == WRITE_TODOS
            && let Ok(todos) = parse_todos(&call.arguments)
        {
            self.staged_todos.push((call.id.fingerprint(), todos));
        }
    }

    /// A `write_todos` call succeeded: the todos it staged become the list.
    fn apply_todos(&mut self, call_id: &crate::name::CallId) {
        let id = call_id.fingerprint();
        if let Some(pos) = self.staged_todos.iter().position(|(k, _)| *k == id) {
            self.todos = self.staged_todos.swap_remove(pos).1;
        }
    }
}

impl Desk {
    // ----- commands -----

    /// Guidance (when the call answers a refused claim, a no-op turn or a rejection), then the
    /// model call itself, with its backoff delay.
    // Inlined into its callers, which pass a constant reason: the command is then built where
    // it is queued, not built on the stack and copied (a stall on store forwarding).
    #[inline(always)]
    pub(crate) fn call_model(&mut self, policy: &Policy, reason: CallReason) {
        let kind = match reason {
            CallReason::Continue => Some(NudgeKind::Continue(self.last_no_op)),
            CallReason::Nudge => Some(NudgeKind::Incomplete),
            CallReason::VerifierRejected => Some(NudgeKind::VerifierRejected),
            _ => None,
        };
        if let Some(kind) = kind {
            let nudge = self.nudge(policy, kind);
            self.out.push_back(Command::Nudge(Box::new(nudge)));
        }
        let delay_ms = match reason {
            CallReason::Retry {
                attempt,
                retry_after_ms,
            } => backoff_ms(
                policy.retry_base_ms,
                policy.retry_max_ms,
                policy.seed,
                attempt,
                retry_after_ms,
            ),
            _ => 0,
        };
        // The common calls are constants: the command is copied from read-only memory into the
        // queue, instead of being written field by field on the stack and copied from there
        // (a copy of freshly written memory stalls on store forwarding).
        const AFTER_TOOLS: Command = Command::CallModel(ModelCall {
            delay_ms: 0,
            reason: CallReason::AfterTools,
            tools: true,
        });
        if let CallReason::AfterTools = reason {
            self.out.push_back(AFTER_TOOLS);
            return;
        }
        let tools = !matches!(reason, CallReason::FinalAnswer { .. });
        self.out.push_back(Command::CallModel(ModelCall {
            delay_ms,
            reason,
            tools,
        }));
    }

    /// Ask the verifier about the last claim.
    pub(crate) fn verify(&mut self) {
        let claim = self.result.clone().unwrap_or_default();
        self.out.push_back(Command::Verify(VerifyRequest {
            claim,
            todos: self.todos.clone(),
        }));
    }

    /// The run ended.
    pub(crate) fn stop(&mut self, rule: Rule, outcome: Outcome, stats: &Stats) {
        let mut stats = *stats;
        stats.ignored_events = self.ignored;
        self.out.push_back(Command::Stop(Box::new(Stop {
            outcome,
            rule,
            result: self.result.clone(),
            stats,
            excluded_tools: self.ledger.excluded().map(|(n, _)| n.to_owned()).collect(),
        })));
    }

    /// Tell the model, before its next call, which tools are now excluded and why.
    pub(crate) fn notice(&mut self, notice: Notice) {
        self.out.push_back(Command::Notice(notice));
    }

    /// Tell the model the first time a window of its tool turns repeats, so that an honest agent
    /// can change course before the repeat limit stops the run.
    pub(crate) fn loop_notice(&mut self, policy: &Policy, repetition: Repetition) {
        let period = repetition.period.max(1);
        let turns = if period == 1 {
            "Your last tool turn repeated the one before it".to_owned()
        } else {
            format!("Your last {period} tool turns repeated the {period} before them")
        };
        let mut text = format!(
            "{turns}: the same calls with the same results. If the same sequence occurs {} times in a row the run stops with no_progress; change course.",
            policy.max_repeats
        );
        // The way out, named: what the task still needs (a small model that looped re-reading
        // files went on to write the plan once told which call was still required).
        let missing = self.ledger.missing(&policy.completion_requires);
        if !missing.is_empty() {
            text.push_str(" Still required before the task can finish: call ");
            text.push_str(&quoted(&missing));
            text.push('.');
        }
        let open = open_todos(&self.todos);
        if !open.is_empty() {
            text.push_str(" Open todos: ");
            text.push_str(&open.join("; "));
            text.push('.');
        }
        self.out.push_back(Command::Notice(Notice::Repeating {
            period,
            times: repetition.times,
            limit: policy.max_repeats,
            text,
        }));
    }

    /// Tell the model, once each, when the run's tokens (`used`, input and output) have passed
    /// 80 % and 90 % of `token_budget`. Called just before a model call is issued, the one
    /// point where a kernel message may go into the conversation (never between a tool turn and
    /// its results). Nothing is said once the budget is spent: it stops the run.
    pub(crate) fn token_notices(&mut self, policy: &Policy, used: u64) {
        let Some(budget) = policy.token_budget.filter(|b| *b > 0) else {
            return;
        };
        if used >= budget {
            return;
        }
        for percent in TOKEN_WARNINGS {
            let passed = u128::from(used) * 100 >= u128::from(budget) * u128::from(percent);
            if percent <= self.told_tokens || !passed {
                continue;
            }
            self.told_tokens = percent;
            let text = format!(
                "You have used {percent} % of this run's token budget ({used} of {budget} tokens). \
                 When it is spent the run stops: finish the task or give your final answer soon."
            );
            self.out.push_back(Command::Notice(Notice::TokenBudget {
                percent,
                used,
                budget,
                text,
            }));
        }
    }

    fn nudge(&self, policy: &Policy, kind: NudgeKind) -> Nudge {
        let open_todos = open_todos(&self.todos);
        let missing_tools = self.ledger.missing(&policy.completion_requires);
        let mut text = String::from(match kind {
            NudgeKind::Incomplete => "You tried to finish, but the task is not done yet.",
            NudgeKind::VerifierRejected => "A check of your work found the task incomplete.",
            NudgeKind::Continue(NoOpKind::Silent) => {
                "Your last reply had no content and no tool call."
            }
            NudgeKind::Continue(NoOpKind::NeedsMoreWork) => {
                "You said more work is needed but did not do any."
            }
            NudgeKind::Continue(NoOpKind::Truncated) => {
                "Your last reply was cut off by the length limit."
            }
            NudgeKind::Continue(NoOpKind::Filtered) => {
                "Your last reply was cut by the content filter."
            }
            NudgeKind::Continue(NoOpKind::TextCall) => {
                "Your last reply wrote a tool call as text, so nothing ran."
            }
            NudgeKind::Continue(NoOpKind::Repetitive) => {
                "Your last reply repeated the same text over and over, so it was cut off. Do not \
                 repeat yourself: say each thing once."
            }
        });
        if let (NudgeKind::Continue(NoOpKind::TextCall), Some(note)) = (kind, &self.text_call) {
            text_call_guidance(&mut text, note);
        }
        if !open_todos.is_empty() {
            text.push_str("\nOpen todos: ");
            text.push_str(&open_todos.join("; "));
            text.push('.');
        }
        if !missing_tools.is_empty() {
            text.push_str("\nStill required before the task can finish: call ");
            text.push_str(&quoted(&missing_tools));
            text.push_str(" (not yet run successfully).");
        }
        let missing_items = if kind == NudgeKind::VerifierRejected {
            self.missing_items.clone()
        } else {
            Vec::new()
        };
        if !missing_items.is_empty() {
            text.push_str("\nStill missing: ");
            text.push_str(&missing_items.join("; "));
            text.push('.');
        }
        text.push_str(match (missing_tools.is_empty(), open_todos.is_empty()) {
            (true, true) => {
                "\nContinue: call one of your tools, or, when everything is done, reply with \
                 your final answer and no tool call (a JSON reply may say \
                 \"needs_more_work\": false)."
            }
            (false, _) => {
                "\nContinue: call that tool now; reply with your final answer only when that \
                 is done."
            }
            (true, false) => {
                "\nContinue: work on the open todos with your tools (mark each completed with \
                 write_todos); reply with your final answer only when they are done."
            }
        });
        Nudge {
            kind,
            text,
            open_todos,
            missing_tools,
            missing_items,
        }
    }
}

/// `a`, `b` and `c`, each in backticks.
fn quoted(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// What the nudge after a written tool call says of it: the names it wrote, and the offered
/// tools (the closest to a name no tool has, or all of them).
fn text_call_guidance(text: &mut String, note: &TextCallNote) {
    text.push_str(" You wrote ");
    text.push_str(&quoted(&note.names));
    text.push_str(
        " in your reply's text; a call written there is not run. Call tools through the tool \
         interface (a function call), not by writing JSON or tags in your reply.",
    );
    if !note.suggested.is_empty() {
        let offered = |n: &String| note.suggested.contains(n);
        if note.names.iter().all(offered) {
            text.push_str(" Offered tools: ");
        } else {
            text.push_str(" No tool of that name is offered; the closest offered tools: ");
        }
        text.push_str(&quoted(&note.suggested));
        text.push('.');
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
