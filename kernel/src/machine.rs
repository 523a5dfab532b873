//! [`Machine`]: the host-facing kernel. It decodes concrete events into the core's abstract
//! inputs, keeps the data the core does not decide on (tool ledger, todos, the partial result,
//! the verifier's missing items), and turns the core's effects into commands.

use crate::backoff::backoff_ms;
use crate::command::{
    BudgetWarning, Command, ModelCall, Notice, Nudge, NudgeKind, Stop, ToolBatch, VerifyRequest,
};
use crate::core::{CallReason, Core, Effect, Effects, Ignored, Phase};
use crate::event::{
    Event, Finish, ModelErrorKind, ModelTurn, ToolCall, ToolOutcome, ToolResult, Verdict,
};
use crate::fingerprint::{calls_fingerprint, result_fingerprint, str_fingerprint};
use crate::input::{Batch, EmptyKind, ErrorClass, Gate, Input, NoOpKind, TurnKind};
use crate::ledger::{Exclusion, Ledger};
use crate::policy::{OnUnrecoverable, Policy, PolicyError};
use crate::reason::Outcome;
use crate::rule::Rule;
use crate::stats::{Stats, Streaks};
use crate::todo::{Todo, WRITE_TODOS, parse_todos};
use serde::{Deserialize, Serialize};
use statig::blocking::{IntoStateMachineExt, StateMachine};
use std::collections::VecDeque;
use std::fmt;

/// What one [`Machine::handle`] call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Handled {
    /// A transition (one step).
    Step(StepRecord),
    /// The event was observed but is not a step (a clock reading before the deadline).
    Observed,
    /// The event was not accepted; nothing changed except the `ignored_events` counter.
    Ignored {
        /// Why.
        why: Ignored,
        /// The phase that ignored it.
        phase: Phase,
    },
}

/// One transition, for traces and `terminus inspect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step number (1-based).
    pub step: u32,
    /// The state before.
    pub from: Phase,
    /// The state after.
    pub to: Phase,
    /// The abstract input, as classified.
    pub input: Input,
    /// The rule that fired.
    pub rule: Rule,
}

impl fmt::Display for StepRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "step {:>3}: {} --{}--> {} [{}]",
            self.step,
            self.from.as_str(),
            self.input.label(),
            self.to.as_str(),
            self.rule.name()
        )
    }
}

/// A saved machine that cannot be restored.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// The tool calls in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Pending {
    /// Executed calls whose results are awaited.
    executed: u32,
    /// Sum of the fingerprints of their ids (order-independent, allocation-free matching).
    ids: u64,
    /// Fingerprint of the calls (name + canonical arguments).
    calls: u64,
}

/// The kernel. Sans-IO and deterministic: [`Machine::handle`] an [`Event`], then drain
/// [`Machine::poll_command`] until it returns `None`, and arm a timer for
/// [`Machine::poll_timeout`]. The machine never reads a clock.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    policy: Policy,
    sm: StateMachine<Core>,
    ledger: Ledger,
    todos: Vec<Todo>,
    /// `write_todos` calls in flight: (id fingerprint, todos), applied when their result is ok.
    staged_todos: Vec<(u64, Vec<Todo>)>,
    result: Option<String>,
    missing_items: Vec<String>,
    pending: Pending,
    last_turn: Option<u64>,
    now_ms: u64,
    ignored: u32,
    last_no_op: NoOpKind,
    out: VecDeque<Command>,
}

/// Equal machines have the same state, counters and data. (statig's own equality also compares
/// whether the machine was initialized, which a restored machine is not until its first event;
/// that flag has no behaviour here because no state has an entry action.)
impl PartialEq for Machine {
    fn eq(&self, other: &Self) -> bool {
        // Destructured so that a new field cannot be forgotten here.
        let Machine {
            policy,
            sm,
            ledger,
            todos,
            staged_todos,
            result,
            missing_items,
            pending,
            last_turn,
            now_ms,
            ignored,
            last_no_op,
            out,
        } = self;
        *policy == other.policy
            && sm.state() == other.sm.state()
            && **sm == *other.sm
            && *ledger == other.ledger
            && *todos == other.todos
            && *staged_todos == other.staged_todos
            && *result == other.result
            && *missing_items == other.missing_items
            && *pending == other.pending
            && *last_turn == other.last_turn
            && *now_ms == other.now_ms
            && *ignored == other.ignored
            && *last_no_op == other.last_no_op
            && *out == other.out
    }
}

impl fmt::Debug for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Machine")
            .field("phase", &self.phase())
            .field("stats", &self.stats())
            .field("streaks", &self.streaks())
            .field("ledger", &self.ledger)
            .field("todos", &self.todos)
            .field("pending_commands", &self.out.len())
            .finish_non_exhaustive()
    }
}

impl Machine {
    /// A machine for a run under `policy`. Its first command is `CallModel`.
    pub fn new(policy: Policy) -> Result<Machine, PolicyError> {
        policy.validate()?;
        let core = Core::new(&policy);
        let mut out = VecDeque::with_capacity(8);
        out.push_back(Command::CallModel(ModelCall {
            delay_ms: 0,
            reason: CallReason::Start,
            tools: true,
        }));
        Ok(Machine {
            policy,
            sm: core.state_machine(),
            ledger: Ledger::default(),
            todos: Vec::new(),
            staged_todos: Vec::new(),
            result: None,
            missing_items: Vec::new(),
            pending: Pending::default(),
            last_turn: None,
            now_ms: 0,
            ignored: 0,
            last_no_op: NoOpKind::Silent,
            out,
        })
    }

    /// Saves the whole machine (state, counters, ledger, todos, pending commands) as JSON bytes.
    pub fn save(&self) -> Vec<u8> {
        // Serializing plain data to a Vec cannot fail: no map has non-string keys.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Restores a machine saved by [`Machine::save`]. Bytes from outside the process are checked:
    /// the format, the policy, and every invariant of [`crate::invariants::check_machine`], so a
    /// restored machine is one the kernel could have reached.
    pub fn restore(bytes: &[u8]) -> Result<Machine, RestoreError> {
        let machine: Machine =
            serde_json::from_slice(bytes).map_err(|e| RestoreError::Format(e.to_string()))?;
        machine.policy.validate().map_err(RestoreError::Policy)?;
        if machine.sm.limits != crate::core::Limits::from(&machine.policy) {
            return Err(RestoreError::Inconsistent(
                "the machine's limits differ from its policy".into(),
            ));
        }
        crate::invariants::check_machine(&machine).map_err(RestoreError::Inconsistent)?;
        machine
            .check_reachable()
            .map_err(RestoreError::Inconsistent)?;
        Ok(machine)
    }

    /// What [`Machine::restore`] checks beyond [`crate::invariants::check_machine`]: that the
    /// saved machine is one the kernel could have reached, so that running it on keeps every
    /// invariant. (`check_machine` accepts a counter *at* its limit, which a live machine never
    /// has: the step that reaches a limit ends the run. Found by the `restore` fuzz target.)
    fn check_reachable(&self) -> Result<(), String> {
        use crate::reason::AbortReason;
        let p = &self.policy;
        let core: &Core = &self.sm;
        let (s, k) = (&core.stats, &core.streaks);
        let phase = self.phase();
        let inconsistent = |what: String| Err(format!("{what} in {}", phase.as_str()));
        // The one final-answer call: only under `final_answer_on_budget`, for a spent budget.
        if let Some(budget) = core.finalizing {
            let spent = match budget {
                AbortReason::MaxSteps => s.steps >= p.max_steps,
                AbortReason::MaxModelCalls => s.model_calls > p.max_model_calls,
                AbortReason::TokenBudget => p.token_budget.is_some_and(|b| s.tokens() >= b),
                _ => false,
            };
            if !p.final_answer_on_budget || !spent {
                return inconsistent(format!(
                    "a final-answer call for {budget:?} that is not due"
                ));
            }
            if !phase.is_terminal() && phase != Phase::Exploring {
                return inconsistent("a final-answer call outside Exploring".into());
            }
        }
        // Queued commands: a Stop comes last, only in a terminal state, and agrees with it.
        for (i, command) in self.out.iter().enumerate() {
            let Command::Stop(stop) = command else {
                continue;
            };
            let mut stats = stop.stats;
            stats.ignored_events = self.ignored;
            if i + 1 != self.out.len()
                || Some(stop.outcome) != self.outcome()
                || stats != self.stats()
                || stop.stats.ignored_events > self.ignored
                || stop.result != self.result
            {
                return inconsistent("a queued Stop that disagrees with the machine".into());
            }
        }
        if phase.is_terminal() {
            return Ok(()); // absorbing: no counter moves again
        }
        // A live machine takes at most two steps per model call (a turn, then its results or
        // verdict), and has one step left before its budgets.
        let awaiting_model = matches!(phase, Phase::Exploring | Phase::Nudged);
        let steps_after_answer = u64::from(s.steps) + if awaiting_model { 2 } else { 1 };
        if steps_after_answer > 2 * u64::from(s.model_calls) {
            return inconsistent(format!(
                "{} steps for {} model calls",
                s.steps, s.model_calls
            ));
        }
        let budgets_ok = if core.finalizing.is_some() {
            s.steps <= p.max_steps
        } else {
            s.steps < p.max_steps && s.model_calls <= p.max_model_calls
        };
        // Streaks and counters stop the run the moment they reach their limit.
        let below = [
            ("budgets", budgets_ok),
            ("streaks.no_ops", k.no_ops < p.max_no_ops),
            (
                "streaks.empty_responses",
                k.empty_responses < p.max_empty_responses,
            ),
            (
                "streaks.failed_tool_turns",
                k.failed_tool_turns < p.max_consecutive_tool_failures,
            ),
            ("streaks.repeats", k.repeats < p.max_repeats),
            (
                "streaks.model_retries",
                k.model_retries <= p.max_model_retries,
            ),
            ("nudges", s.nudges <= p.max_nudges),
            (
                "verification_failures",
                s.verification_failures < p.max_verification_failures,
            ),
            ("verifications", s.verifications >= s.verification_failures),
        ];
        if let Some((name, _)) = below.iter().find(|(_, ok)| !ok) {
            return inconsistent(format!("{name} at or past its limit ({s:?}, {k:?})"));
        }
        // Counters that a live run still adds to must have room, far beyond any real run, so
        // that continuing cannot overflow them.
        let counters = [
            s.steps,
            s.model_calls,
            s.tool_calls,
            s.refused_calls,
            s.tool_failures,
            s.failed_tool_turns,
            s.nudges,
            s.continuations,
            s.verifications,
            s.verification_failures,
            s.no_ops,
            s.empty_responses,
            s.model_errors,
            s.repeats,
            k.no_ops,
            k.empty_responses,
            k.model_retries,
            k.failed_tool_turns,
            k.repeats,
        ];
        if counters.iter().any(|&c| c > u32::MAX / 2) {
            return inconsistent(format!("a counter past 2^31 ({s:?}, {k:?})"));
        }
        Ok(())
    }

    // ----- getters -----

    /// The policy of this run.
    pub fn policy(&self) -> &Policy {
        &self.policy
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
        stats.ignored_events = self.ignored;
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
        &self.ledger
    }

    /// The todo list.
    pub fn todos(&self) -> &[Todo] {
        &self.todos
    }

    /// The last substantive model content.
    pub fn result(&self) -> Option<&str> {
        self.result.as_deref()
    }

    /// The deadline, in milliseconds since the start, while the run is live.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.phase().is_terminal() {
            None
        } else {
            self.policy.deadline_ms
        }
    }

    /// The next command, in order. Drain until `None` after every [`Machine::handle`].
    #[must_use]
    pub fn poll_command(&mut self) -> Option<Command> {
        self.out.pop_front()
    }

    /// The core state and shared storage (the model check's state identity).
    pub(crate) fn core_snapshot(&self) -> (crate::core::State, Core) {
        (*self.sm.state(), (*self.sm).clone())
    }

    /// Drops every waiting command (the model check does not execute them).
    pub(crate) fn clear_commands(&mut self) {
        self.out.clear();
    }

    /// Whether commands are waiting.
    pub fn has_commands(&self) -> bool {
        !self.out.is_empty()
    }

    // ----- input -----

    /// Feeds one event. Returns what happened; never panics on any event in any state.
    pub fn handle(&mut self, event: Event) -> Handled {
        let phase = self.phase();
        let expected = match (&event, phase) {
            (_, Phase::Complete | Phase::Aborted) => false,
            (Event::Tick { .. } | Event::Cancel, _) => true,
            (Event::ModelTurn(_) | Event::ModelError { .. }, Phase::Exploring | Phase::Nudged) => {
                true
            }
            (Event::ToolResults(results), Phase::Acting) => self.matches_pending(results),
            (Event::Verdict(_), Phase::Verifying) => true,
            _ => false,
        };
        if !expected {
            self.ignored = self.ignored.saturating_add(1);
            let why = if phase.is_terminal() {
                Ignored::Terminal
            } else {
                Ignored::Unexpected
            };
            return Handled::Ignored { why, phase };
        }
        match event {
            Event::ModelTurn(turn) => self.on_turn(phase, turn),
            Event::ModelError {
                kind,
                retry_after_ms,
            } => {
                let class = match kind {
                    ModelErrorKind::RateLimited
                    | ModelErrorKind::Server
                    | ModelErrorKind::Timeout => ErrorClass::Retryable { retry_after_ms },
                    ModelErrorKind::Auth | ModelErrorKind::BadRequest => ErrorClass::Fatal,
                    ModelErrorKind::ContextOverflow => ErrorClass::ContextOverflow,
                };
                self.dispatch(phase, Input::ModelError(class))
            }
            Event::ToolResults(results) => self.on_results(phase, &results),
            Event::Verdict(verdict) => self.on_verdict(phase, verdict),
            Event::Tick { now_ms } => {
                self.now_ms = self.now_ms.max(now_ms);
                let deadline_passed = self.policy.deadline_ms.is_some_and(|d| self.now_ms >= d);
                self.dispatch(phase, Input::Tick { deadline_passed })
            }
            Event::Cancel => self.dispatch(phase, Input::Cancel),
        }
    }

    /// Feeds one abstract input directly (model checking and the spec generator use this; hosts
    /// use [`Machine::handle`]). Payload-dependent data (ledger, todos) is left untouched.
    pub fn handle_input(&mut self, input: Input) -> Handled {
        let phase = self.phase();
        self.dispatch(phase, input)
    }

    fn dispatch(&mut self, from: Phase, input: Input) -> Handled {
        let mut fx = Effects::default();
        self.sm.handle_with_context(&input, &mut fx);
        if let Some(why) = fx.ignored {
            self.ignored = self.ignored.saturating_add(1);
            return Handled::Ignored { why, phase: from };
        }
        let (Some(rule), Some(effect)) = (fx.rule, fx.effect) else {
            return Handled::Observed;
        };
        self.emit(effect, rule);
        Handled::Step(StepRecord {
            step: self.sm.stats.steps,
            from,
            to: self.phase(),
            input,
            rule,
        })
    }

    fn emit(&mut self, effect: Effect, rule: Rule) {
        match effect {
            Effect::CallModel(reason) => {
                match reason {
                    CallReason::Continue | CallReason::Nudge | CallReason::VerifierRejected => {
                        let nudge = self.nudge(reason);
                        self.out.push_back(Command::Nudge(nudge));
                    }
                    _ => {}
                }
                let delay_ms = match reason {
                    CallReason::Retry {
                        attempt,
                        retry_after_ms,
                    } => backoff_ms(
                        self.policy.retry_base_ms,
                        self.policy.retry_max_ms,
                        self.policy.seed,
                        attempt,
                        retry_after_ms,
                    ),
                    _ => 0,
                };
                let tools = !matches!(reason, CallReason::FinalAnswer { .. });
                self.out.push_back(Command::CallModel(ModelCall {
                    delay_ms,
                    reason,
                    tools,
                }));
            }
            Effect::RunTools => {} // pushed by `on_turn`, which owns the calls
            Effect::Verify => {
                let claim = self.result.clone().unwrap_or_default();
                self.out.push_back(Command::Verify(VerifyRequest {
                    claim,
                    todos: self.todos.clone(),
                }));
            }
            Effect::Stop(outcome) => {
                self.out.push_back(Command::Stop(Stop {
                    outcome,
                    rule,
                    result: self.result.clone(),
                    stats: self.stats(),
                    excluded_tools: self.ledger.excluded().map(|(n, _)| n.to_owned()).collect(),
                }));
            }
        }
    }

    // ----- decoding -----

    fn on_turn(&mut self, phase: Phase, mut turn: ModelTurn) -> Handled {
        let substantive = !turn.text.trim().is_empty();
        let kind = self.classify(&turn, substantive);
        let (input_tokens, output_tokens) = turn
            .usage
            .map_or((0, 0), |u| (u.input_tokens, u.output_tokens));
        if substantive {
            // The partial result is the last substantive content, whatever the turn was.
            self.result = Some(std::mem::take(&mut turn.text));
        }
        if let TurnKind::NoOp(k) = kind {
            self.last_no_op = k;
        }
        let handled = self.dispatch(
            phase,
            Input::Turn {
                kind,
                input_tokens,
                output_tokens,
            },
        );
        if let Handled::Step(StepRecord {
            rule: Rule::ToolTurn,
            ..
        }) = handled
        {
            // The core accepted the tool turn: commit the calls to the ledger and hand them out.
            let batch = self.plan(turn.tool_calls);
            self.out.push_back(Command::RunTools(batch));
        }
        handled
    }

    fn classify(&self, turn: &ModelTurn, substantive: bool) -> TurnKind {
        if !turn.tool_calls.is_empty() {
            let (runnable, refused) = self.count_runnable(&turn.tool_calls);
            return TurnKind::Tools { runnable, refused };
        }
        let zero_usage = turn.usage.is_some_and(|u| u.is_zero());
        if !substantive {
            return match turn.finish {
                Finish::Length => TurnKind::Empty(EmptyKind::Truncated),
                Finish::ContentFilter => TurnKind::Empty(EmptyKind::Filtered),
                _ if turn.reasoning => TurnKind::Empty(EmptyKind::ReasoningOnly),
                _ if zero_usage => TurnKind::Empty(EmptyKind::Blank),
                _ => TurnKind::NoOp(NoOpKind::Silent),
            };
        }
        match (turn.finish, turn.needs_more_work) {
            (Finish::Length, _) => TurnKind::NoOp(NoOpKind::Truncated),
            (Finish::ContentFilter, _) => TurnKind::NoOp(NoOpKind::Filtered),
            (_, Some(true)) => TurnKind::NoOp(NoOpKind::NeedsMoreWork),
            (_, needs_more_work) => TurnKind::Claim {
                explicit: needs_more_work == Some(false),
                gate: self.gate(),
            },
        }
    }

    /// What a completion claim still lacks, from the todo list and the ledger (rules 5, 8).
    pub fn gate(&self) -> Gate {
        Gate {
            open_todos: self.todos.iter().any(|t| t.status.is_open()),
            missing_required: self
                .policy
                .completion_requires
                .iter()
                .any(|t| !self.ledger.succeeded(t)),
        }
    }

    /// How many calls would run and how many are refused, without changing anything. A call is
    /// refused when its tool is excluded or the call reaches the tool's `block_at`.
    fn count_runnable(&self, calls: &[ToolCall]) -> (u16, u16) {
        // Linear in the calls (a turn may carry tens of thousands; counting the earlier calls of
        // each call's tool was quadratic). A call is refused when its tool is excluded, or when
        // it is the j-th call of a budgeted tool in this turn and `calls + j + 1 >= block_at`
        // (what `disposition` says for it), so per tool the first `block_at - calls - 1` run.
        let mut refused = calls
            .iter()
            .filter(|c| self.ledger.exclusion(&c.name).is_some())
            .count();
        for (tool, budget) in &self.policy.tool_budgets {
            let Some(block_at) = budget.block_at else {
                continue;
            };
            if self.ledger.exclusion(tool).is_some() {
                continue; // counted above
            }
            let first = self.ledger.calls(tool).saturating_add(1);
            let allowed = usize::try_from(block_at.saturating_sub(first)).unwrap_or(usize::MAX);
            let in_turn = calls.iter().filter(|c| c.name == *tool).count();
            refused += in_turn.saturating_sub(allowed);
        }
        let runnable = calls.len().saturating_sub(refused);
        let narrow = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
        (narrow(runnable), narrow(refused))
    }

    /// Whether the next call of `tool` may run, and with which budget warning.
    fn disposition(&self, tool: &str) -> Result<Option<BudgetWarning>, Exclusion> {
        if let Some(exclusion) = self.ledger.exclusion(tool) {
            return Err(exclusion);
        }
        let Some(budget) = self.policy.tool_budgets.get(tool) else {
            return Ok(None);
        };
        let call = self.ledger.calls(tool).saturating_add(1);
        if let Some(block_at) = budget.block_at
            && call >= block_at
        {
            return Err(Exclusion::Budget { block_at });
        }
        match budget.warn_at {
            Some(warn_at) if call >= warn_at => {
                let last = budget.block_at.is_some_and(|b| call + 1 == b);
                Ok(Some(BudgetWarning {
                    call,
                    block_at: budget.block_at,
                    last,
                }))
            }
            _ => Ok(None),
        }
    }

    /// Commits the calls of an accepted tool turn to the ledger and builds the batch.
    fn plan(&mut self, calls: Vec<ToolCall>) -> ToolBatch {
        let mut batch = ToolBatch {
            calls: Vec::new(),
            refused: Vec::new(),
            warnings: Vec::new(),
        };
        let mut pending = Pending {
            executed: 0,
            ids: 0,
            calls: calls_fingerprint(&calls),
        };
        self.staged_todos.clear();
        for (i, call) in calls.iter().enumerate() {
            match self.disposition(&call.name) {
                Err(exclusion) => {
                    let record = self.ledger.entry(&call.name);
                    record.refused = record.refused.saturating_add(1);
                    if record.excluded.is_none() {
                        record.excluded = Some(exclusion);
                    }
                    batch.refused.push((i, exclusion));
                }
                Ok(warning) => {
                    let record = self.ledger.entry(&call.name);
                    record.calls = record.calls.saturating_add(1);
                    if let Some(w) = warning {
                        batch.warnings.push((i, w));
                    }
                    pending.executed = pending.executed.saturating_add(1);
                    pending.ids = pending.ids.wrapping_add(str_fingerprint(&call.id));
                    if call.name == WRITE_TODOS
                        && let Ok(todos) = parse_todos(&call.arguments)
                    {
                        self.staged_todos.push((str_fingerprint(&call.id), todos));
                    }
                }
            }
        }
        self.pending = pending;
        batch.calls = calls;
        batch
    }

    fn matches_pending(&self, results: &[ToolResult]) -> bool {
        let ids = results
            .iter()
            .fold(0u64, |acc, r| acc.wrapping_add(str_fingerprint(&r.call_id)));
        u32::try_from(results.len()).is_ok_and(|n| n == self.pending.executed)
            && ids == self.pending.ids
    }

    fn on_results(&mut self, phase: Phase, results: &[ToolResult]) -> Handled {
        let mut failed = 0u16;
        let mut unrecoverable = false;
        let mut fp = self.pending.calls;
        for r in results {
            // Results arrive in any order: combine their fingerprints commutatively.
            fp = fp.wrapping_add(result_fingerprint(r).rotate_left(17));
            if let ToolOutcome::Error { kind, .. } = r.outcome {
                failed = failed.saturating_add(1);
                unrecoverable |= kind.is_unrecoverable();
            }
        }
        let repeated = self.last_turn == Some(fp);
        self.last_turn = Some(fp);
        let batch = Batch {
            failed,
            all_failed: failed > 0 && usize::from(failed) == results.len(),
            unrecoverable,
            repeated,
        };
        // Results are facts: record them in the ledger whatever the machine decides next.
        let newly_excluded = self.record(results);
        let before = self.out.len();
        let handled = self.dispatch(phase, Input::ToolResults(batch));
        if newly_excluded > 0 && !self.phase().is_terminal() {
            // Tell the model, before its next call, which tools are now excluded and why (rule 7).
            let notices: Vec<Command> = self
                .ledger
                .excluded()
                .filter(|(name, _)| results.iter().any(|r| r.name == *name))
                .map(|(tool, exclusion)| {
                    Command::Notice(Notice {
                        tool: tool.to_owned(),
                        exclusion,
                        text: format!("The tool `{tool}` is now excluded because {exclusion}; do not call it again."),
                    })
                })
                .collect();
            for (k, n) in notices.into_iter().enumerate() {
                self.out.insert(before + k, n);
            }
        }
        handled
    }

    /// Records results in the ledger and applies `write_todos`; returns how many tools it excluded.
    fn record(&mut self, results: &[ToolResult]) -> usize {
        let mut newly = 0;
        for r in results {
            let max_failures = self.policy.max_tool_failures;
            let on_unrecoverable = self.policy.on_unrecoverable_tool_error;
            let record = self.ledger.entry(&r.name);
            match &r.outcome {
                ToolOutcome::Ok(_) => {
                    record.successes = record.successes.saturating_add(1);
                    if r.name == WRITE_TODOS {
                        let id = str_fingerprint(&r.call_id);
                        if let Some(pos) = self.staged_todos.iter().position(|(k, _)| *k == id) {
                            self.todos = self.staged_todos.swap_remove(pos).1;
                        }
                    }
                }
                ToolOutcome::Error { kind, .. } => {
                    record.failures = record.failures.saturating_add(1);
                    if record.excluded.is_none() {
                        if kind.is_unrecoverable() && on_unrecoverable == OnUnrecoverable::Exclude {
                            record.excluded = Some(Exclusion::Unrecoverable { kind: *kind });
                            newly += 1;
                        } else if record.failures >= max_failures {
                            record.excluded = Some(Exclusion::Failures {
                                count: record.failures,
                            });
                            newly += 1;
                        }
                    }
                }
            }
        }
        newly
    }

    fn on_verdict(&mut self, phase: Phase, verdict: Verdict) -> Handled {
        for item in verdict.missing {
            let item = item.trim().to_owned();
            if !item.is_empty() && !self.missing_items.contains(&item) {
                self.missing_items.push(item);
            }
        }
        self.dispatch(
            phase,
            Input::Verdict {
                accepted: verdict.complete,
            },
        )
    }

    fn nudge(&self, reason: CallReason) -> Nudge {
        let open_todos: Vec<String> = self
            .todos
            .iter()
            .filter(|t| t.status.is_open())
            .map(|t| t.content.clone())
            .collect();
        let missing_tools: Vec<String> = self
            .policy
            .completion_requires
            .iter()
            .filter(|t| !self.ledger.succeeded(t))
            .cloned()
            .collect();
        let (kind, mut text) = match reason {
            CallReason::Nudge => (
                NudgeKind::Incomplete,
                String::from("You tried to finish, but the task is not done yet."),
            ),
            CallReason::VerifierRejected => (
                NudgeKind::VerifierRejected,
                String::from("A check of your work found the task incomplete."),
            ),
            _ => {
                let why = match self.last_no_op {
                    NoOpKind::Silent => "Your last reply had no content and no tool call.",
                    NoOpKind::NeedsMoreWork => "You said more work is needed but did not do any.",
                    NoOpKind::Truncated => "Your last reply was cut off by the length limit.",
                    NoOpKind::Filtered => "Your last reply was cut by the content filter.",
                };
                (NudgeKind::Continue(self.last_no_op), String::from(why))
            }
        };
        if !open_todos.is_empty() {
            text.push_str("\nOpen todos: ");
            text.push_str(&open_todos.join("; "));
            text.push('.');
        }
        if !missing_tools.is_empty() {
            text.push_str("\nRequired tools not yet run successfully: ");
            text.push_str(&missing_tools.join(", "));
            text.push('.');
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
        text.push_str("\nContinue: call a tool, or when everything is done give your final answer with needs_more_work: false.");
        Nudge {
            kind,
            text,
            open_todos,
            missing_tools,
            missing_items,
        }
    }
}
