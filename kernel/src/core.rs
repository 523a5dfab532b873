//! The completion machine: one `statig` state machine over the abstract [`Input`] alphabet. Every
//! rule of the machine is decided here.
//!
//! Shared storage holds the policy, the monotone [`Stats`] and the [`Streaks`]; the context is a
//! [`Cx`]: the desk and the event being dispatched (borrowed), through which each state handler
//! commits the accepted event and pushes the finished commands of its transition. Every accepted input is one step (see [`Core::step`]); every bound
//! comes from the table in [`crate::catalog`]; every non-terminal step strictly decreases
//! [`Core::variant`] (checked by the machine after each step and by the model check).

#![allow(missing_docs)] // the statig macro generates `State`/`Superstate` items

use crate::catalog::{self, Limit, Spend};
use crate::command::Notice;
use crate::desk::{Cx, Plan};
use crate::input::{Batch, ErrorClass, Gate, Input, TurnKind};
use crate::loops::Repetition;
use crate::phase::{CallReason, Ignored, Phase};
use crate::policy::{OnUnrecoverable, Policy};
use crate::raise::Preempted;
use crate::reason::{AbortReason, CompleteReason, Outcome};
use crate::rule::Rule;
use crate::stats::{Stats, Streaks};
use serde::{Deserialize, Serialize};
use statig::prelude::*;

/// The shared storage of the machine.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Core {
    pub(crate) policy: Policy,
    pub(crate) stats: Stats,
    pub(crate) streaks: Streaks,
}

impl State {
    /// The public name of this state.
    pub(crate) const fn phase(&self) -> Phase {
        match self {
            State::Exploring { .. } => Phase::Exploring,
            State::Acting {} => Phase::Acting,
            State::Verifying {} => Phase::Verifying,
            State::Nudged {} => Phase::Nudged,
            State::Complete { .. } => Phase::Complete,
            State::Aborted { .. } => Phase::Aborted,
        }
    }

    /// The budget whose final-answer call is awaited, if any.
    pub(crate) const fn finalizing(&self) -> Option<AbortReason> {
        match self {
            State::Exploring { finalizing } => *finalizing,
            _ => None,
        }
    }

    /// The outcome of a terminal state.
    pub(crate) const fn outcome(&self) -> Option<Outcome> {
        match self {
            State::Complete { reason } => Some(Outcome::Complete(*reason)),
            State::Aborted { reason } => Some(Outcome::Aborted(*reason)),
            _ => None,
        }
    }
}

type Out = Outcome_<State>;
use statig::Outcome as Outcome_;

#[state_machine(
    initial = "State::exploring(None)",
    state(derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)),
    superstate(derive(Debug))
)]
impl Core {
    /// Waiting for the model's next turn; with `finalizing`, for the one final-answer call a
    /// spent budget allowed, whose answer (whatever it is) ends the run with that budget's name.
    #[state(superstate = "live")]
    fn exploring(
        &mut self,
        finalizing: &mut Option<AbortReason>,
        context: &mut Cx<'_, '_>,
        event: &Input,
    ) -> Out {
        let Some(budget) = *finalizing else {
            return self.awaiting_model(context, event, State::exploring(None));
        };
        match *event {
            Input::Turn {
                kind,
                input_tokens,
                output_tokens,
            } => {
                self.add_tokens(input_tokens, output_tokens);
                context.accept_turn(kind);
                self.stop(context, Rule::FinalAnswerDone, Outcome::Aborted(budget))
            }
            Input::ModelError(_) => {
                self.stats.model_errors += 1;
                self.stop(context, Rule::FinalAnswerDone, Outcome::Aborted(budget))
            }
            _ => Super,
        }
    }

    /// Guidance was sent; waiting for the model's next turn.
    #[state(superstate = "live")]
    fn nudged(&mut self, context: &mut Cx<'_, '_>, event: &Input) -> Out {
        self.awaiting_model(context, event, State::nudged())
    }

    /// Tool calls issued; waiting for their results.
    #[state(superstate = "live")]
    fn acting(&mut self, context: &mut Cx<'_, '_>, event: &Input) -> Out {
        match event {
            Input::ToolResults(batch) => self.on_results(context, batch),
            _ => Super,
        }
    }

    /// A completion claim is with the verifier.
    #[state(superstate = "live")]
    fn verifying(&mut self, context: &mut Cx<'_, '_>, event: &Input) -> Out {
        match *event {
            Input::Verdict { accepted } => self.on_verdict(context, accepted),
            _ => Super,
        }
    }

    /// Terminal: absorbs every event and says so.
    #[state]
    fn complete(reason: &mut CompleteReason, context: &mut Cx<'_, '_>) -> Out {
        let _ = reason;
        context.not_accepted = Some(Ignored::Terminal);
        Handled
    }

    /// Terminal: absorbs every event and says so. A raise (an outside decision, never an event)
    /// takes the step a budget stop pre-empted.
    #[state]
    fn aborted(
        &mut self,
        reason: &mut AbortReason,
        context: &mut Cx<'_, '_>,
        event: &Input,
    ) -> Out {
        let _ = reason;
        if let Input::Raise = event
            && context.desk.preempted.is_some()
            && let Some(policy) = context.take_raised()
            && let Some(preempted) = context.desk.preempted.take()
        {
            if policy.token_budget != self.policy.token_budget {
                // The shares of a new token budget are told again.
                context.desk.told_tokens = 0;
            }
            self.policy = policy;
            context.desk.raises = context.desk.raises.saturating_add(1);
            return self.take_preempted(context, preempted);
        }
        context.not_accepted = Some(Ignored::Terminal);
        Handled
    }

    /// Every live state: the kill switch, the clock, and events no state expects.
    #[superstate]
    fn live(&mut self, context: &mut Cx<'_, '_>, event: &Input) -> Out {
        match *event {
            Input::Cancel => self.stop(
                context,
                Rule::Cancelled,
                Outcome::Aborted(AbortReason::Cancelled),
            ),
            Input::Tick { deadline_passed } => {
                context.accept_tick();
                if deadline_passed {
                    self.stop(
                        context,
                        Rule::DeadlinePassed,
                        Outcome::Aborted(AbortReason::Deadline),
                    )
                } else {
                    // Rule `clock_reading`: a reading before the deadline is observed, not a step.
                    Handled
                }
            }
            _ => {
                // statig would drop an event every level answers with `Super`; count it instead.
                context.not_accepted = Some(Ignored::Unexpected);
                Handled
            }
        }
    }
}

impl Core {
    /// A fresh core; the first model call is counted here (the machine issues it on creation).
    pub(crate) fn new(policy: Policy) -> Self {
        Core {
            policy,
            stats: Stats {
                model_calls: 1,
                ..Stats::default()
            },
            streaks: Streaks::default(),
        }
    }

    /// The termination measure: remaining steps plus remaining model calls. Every non-terminal
    /// transition takes a step, and model calls never decrease, so it strictly decreases.
    pub(crate) fn variant(&self) -> u64 {
        let extra = u64::from(self.policy.final_answer_on_budget);
        let steps =
            (u64::from(self.policy.max_steps) + extra).saturating_sub(self.stats.steps.into());
        let calls = (u64::from(self.policy.max_model_calls) + extra)
            .saturating_sub(self.stats.model_calls.into());
        steps + calls
    }

    fn add_tokens(&mut self, input: u64, output: u64) {
        self.stats.input_tokens = self.stats.input_tokens.saturating_add(input);
        self.stats.output_tokens = self.stats.output_tokens.saturating_add(output);
    }

    /// Whether a counter that was just incremented now meets its limit.
    #[inline]
    fn reached(&self, limit: &Limit) -> bool {
        limit.fires(&self.policy, &self.stats, &self.streaks)
    }

    /// `Exploring` and `Nudged`: a turn or a model error. `here` is where a retry waits.
    fn awaiting_model(&mut self, cx: &mut Cx<'_, '_>, event: &Input, here: State) -> Out {
        match *event {
            Input::Turn {
                kind,
                input_tokens,
                output_tokens,
            } => {
                self.add_tokens(input_tokens, output_tokens);
                self.streaks.model_retries = 0;
                cx.accept_turn(kind);
                self.on_turn(cx, kind, here)
            }
            Input::ModelError(class) => self.on_model_error(cx, class, here),
            _ => Super,
        }
    }

    fn on_turn(&mut self, cx: &mut Cx<'_, '_>, kind: TurnKind, here: State) -> Out {
        match kind {
            TurnKind::Tools {
                runnable,
                refused,
                blocked,
            } => {
                self.stats.refused_calls = self.stats.refused_calls.saturating_add(refused);
                if runnable == 0 {
                    if blocked == 0 {
                        // Rule 7: every tool the model asks for is excluded for failures.
                        let outcome = Outcome::Aborted(AbortReason::ToolFailures);
                        return self.stop(cx, Rule::AllToolsExcluded, outcome);
                    }
                    // Every call refused, some by a budget: each is answered with its budget's
                    // text and the run goes on, for `max_blocked_turns` turns in a row.
                    self.streaks.blocked_turns = self.streaks.blocked_turns.saturating_add(1);
                    if self.reached(&catalog::BLOCKED_TURNS) {
                        return self.stop_at(cx, &catalog::BLOCKED_TURNS);
                    }
                } else {
                    self.streaks.blocked_turns = 0;
                }
                self.streaks.no_ops = 0;
                self.streaks.empty_responses = 0;
                let spend = Spend {
                    model_calls: 0,
                    tool_calls: u64::from(runnable),
                };
                if let Some(spent) = self.budgets(cx, spend) {
                    if Self::stopped(cx) {
                        cx.preempt_tools();
                    }
                    return spent;
                }
                // Rule 1: tool calls never complete the run, whatever `needs_more_work` says.
                self.stats.tool_calls = self.stats.tool_calls.saturating_add(runnable);
                self.stats.text_tool_calls = self
                    .stats
                    .text_tool_calls
                    .saturating_add(cx.recovered_calls());
                cx.run_tools();
                self.step(cx, Rule::ToolTurn, State::acting())
            }
            TurnKind::Empty(_) => {
                // Rule 6: an empty reply is an error, retried with backoff, never an answer.
                self.stats.empty_responses += 1;
                self.streaks.empty_responses += 1;
                if self.reached(&catalog::EMPTY_RESPONSES) {
                    return self.stop_at(cx, &catalog::EMPTY_RESPONSES);
                }
                let call = CallReason::Retry {
                    attempt: self.streaks.empty_responses,
                    retry_after_ms: None,
                };
                self.call_model(cx, Rule::EmptyRetry, here, call)
            }
            TurnKind::NoOp(no_op) => {
                self.stats.no_ops += 1;
                if no_op.is_non_answer() {
                    self.stats.non_answers += 1;
                }
                self.streaks.no_ops += 1;
                self.streaks.empty_responses = 0;
                if self.reached(&catalog::NO_OPS) {
                    return self.stop_at(cx, &catalog::NO_OPS);
                }
                cx.note_no_op(no_op);
                let rule = if no_op.is_non_answer() {
                    Rule::NonAnswer
                } else {
                    Rule::NoOpContinue
                };
                self.call_model(cx, rule, State::nudged(), CallReason::Continue)
            }
            TurnKind::Claim { explicit, gate } => {
                self.streaks.no_ops = 0;
                self.streaks.empty_responses = 0;
                self.on_claim(cx, explicit, gate)
            }
        }
    }

    fn on_claim(&mut self, cx: &mut Cx<'_, '_>, explicit: bool, gate: Gate) -> Out {
        if gate.refuses() {
            // Rule 5: a claim with open todos or required tools not yet run is refused.
            if self.reached(&catalog::NUDGES) {
                Self::preempt(cx, Preempted::NUDGE);
                return self.stop_at(cx, &catalog::NUDGES);
            }
            return self.call_model(cx, Rule::ClaimRefused, State::nudged(), CallReason::Nudge);
        }
        // An output schema implies verification: the claim is checked against it.
        if self.policy.verifies() {
            return self.verify(cx);
        }
        // Rule 2: `needs_more_work` is tri-state; false is explicit, absent is a plain answer.
        if explicit {
            let outcome = Outcome::Complete(CompleteReason::Explicit);
            self.stop(cx, Rule::ClaimExplicit, outcome)
        } else {
            let outcome = Outcome::Complete(CompleteReason::Answered);
            self.stop(cx, Rule::ClaimAnswered, outcome)
        }
    }

    fn on_model_error(&mut self, cx: &mut Cx<'_, '_>, class: ErrorClass, here: State) -> Out {
        self.stats.model_errors += 1;
        match class {
            ErrorClass::Retryable { retry_after_ms } => {
                self.streaks.model_retries += 1;
                if self.reached(&catalog::MODEL_RETRIES) {
                    return self.stop_at(cx, &catalog::MODEL_RETRIES);
                }
                let call = CallReason::Retry {
                    attempt: self.streaks.model_retries,
                    retry_after_ms,
                };
                self.call_model(cx, Rule::ModelRetry, here, call)
            }
            ErrorClass::Fatal => {
                let outcome = Outcome::Aborted(AbortReason::ModelError);
                self.stop(cx, Rule::ModelFatal, outcome)
            }
            ErrorClass::ContextOverflow => {
                let outcome = Outcome::Aborted(AbortReason::ContextExhausted);
                self.stop(cx, Rule::ContextOverflow, outcome)
            }
        }
    }

    fn on_results(&mut self, cx: &mut Cx<'_, '_>, batch: &Batch) -> Out {
        // Results are facts: the ledger records them whatever happens next (rule 8).
        let (excluded, repetition) = cx.accept_results(&self.policy, batch);
        self.stats.tool_failures = self.stats.tool_failures.saturating_add(batch.failed);
        if batch.unrecoverable && self.policy.on_unrecoverable_tool_error == OnUnrecoverable::Stop {
            let outcome = Outcome::Aborted(AbortReason::UnrecoverableToolError);
            return self.stop(cx, Rule::UnrecoverableStop, outcome);
        }
        if batch.all_failed {
            self.stats.failed_tool_turns += 1;
            self.streaks.failed_tool_turns += 1;
            if self.reached(&catalog::FAILED_TOOL_TURNS) {
                return self.stop_at(cx, &catalog::FAILED_TOOL_TURNS);
            }
        } else {
            self.streaks.failed_tool_turns = 0;
        }
        // A poll of declared pollers: the same results again are waiting, up to `max_polls`;
        // the repeat detector (and its streak) is left as it was.
        if batch.polls > 0 {
            self.stats.polls += 1;
            self.streaks.polls = batch.polls;
            if self.reached(&catalog::POLLS) {
                return self.stop_at(cx, &catalog::POLLS);
            }
            return self.results_back(cx, excluded, None, batch.checkpoint);
        }
        // A loop: the same window of successful turns again (any period up to the bound).
        let first_repeat = batch.repeats > 1 && self.streaks.repeats < 2;
        self.streaks.repeats = batch.repeats;
        if batch.repeats > 1 {
            self.stats.repeats += 1;
            if self.reached(&catalog::REPEATS) {
                return self.stop_at(cx, &catalog::REPEATS);
            }
        }
        self.results_back(
            cx,
            excluded,
            first_repeat.then_some(repetition),
            batch.checkpoint,
        )
    }

    /// Tool results go back to the model (with the notices of the tools they excluded and of a
    /// first repeat), unless a budget stops the run first.
    fn results_back(
        &mut self,
        cx: &mut Cx<'_, '_>,
        excluded: Option<Box<Notice>>,
        repeat: Option<Repetition>,
        checkpoint: bool,
    ) -> Out {
        if let Some(spent) = self.budgets(cx, Spend::MODEL_CALL) {
            if Self::stopped(cx) {
                let preempted = Preempted::Results {
                    notice: excluded.map(|n| *n),
                    repetition: repeat,
                    checkpoint,
                };
                Self::preempt(cx, preempted);
            }
            return spent;
        }
        if let Some(notice) = excluded {
            cx.desk.notice(*notice);
        }
        if let Some(repetition) = repeat {
            cx.desk.loop_notice(&self.policy, repetition);
        }
        let rule = if checkpoint && self.stats.auto_checkpoints < self.policy.auto_checkpoints {
            // A budget a checkpoint lifts blocked calls in two turns and the agent posted none:
            // the host writes one for it (at most `auto_checkpoints` in a run).
            self.stats.auto_checkpoints += 1;
            cx.desk.checkpoint(&self.policy);
            Rule::AutoCheckpoint
        } else {
            Rule::ToolResultsBack
        };
        self.send_call(cx, rule, State::exploring(None), CallReason::AfterTools)
    }

    /// A completion claim goes to the verifier, unless a budget stops the run first.
    fn verify(&mut self, cx: &mut Cx<'_, '_>) -> Out {
        if let Some(spent) = self.budgets(cx, Spend::NOTHING) {
            if Self::stopped(cx) {
                Self::preempt(cx, Preempted::Verify);
            }
            return spent;
        }
        cx.desk.verify();
        self.step(cx, Rule::ClaimVerify, State::verifying())
    }

    fn on_verdict(&mut self, cx: &mut Cx<'_, '_>, accepted: bool) -> Out {
        cx.accept_verdict();
        self.stats.verifications += 1;
        if accepted {
            let outcome = Outcome::Complete(CompleteReason::Verified);
            return self.stop(cx, Rule::VerdictAccepted, outcome);
        }
        // Rule 3: every verification failure counts, and they have a hard limit.
        self.stats.verification_failures += 1;
        if self.reached(&catalog::VERIFICATION_FAILURES) {
            let outcome = catalog::VERIFICATION_FAILURES.outcome(&self.policy);
            let rule = match outcome {
                Outcome::Complete(_) => Rule::VerificationLimitForced,
                Outcome::Aborted(_) => Rule::VerificationLimitAbort,
            };
            return self.stop(cx, rule, outcome);
        }
        let call = CallReason::VerifierRejected;
        self.call_model(cx, Rule::VerdictRejected, State::nudged(), call)
    }

    /// One step: every accepted input takes exactly one.
    fn step(&mut self, cx: &mut Cx<'_, '_>, rule: Rule, target: State) -> Out {
        self.stats.steps = self.stats.steps.saturating_add(1);
        cx.rule = Some(rule);
        Transition(target)
    }

    /// A terminal step.
    fn stop(&mut self, cx: &mut Cx<'_, '_>, rule: Rule, outcome: Outcome) -> Out {
        let out = self.step(
            cx,
            rule,
            match outcome {
                Outcome::Complete(reason) => State::complete(reason),
                Outcome::Aborted(reason) => State::aborted(reason),
            },
        );
        cx.desk.stop(rule, outcome, &self.stats);
        out
    }

    /// The terminal step of a limit that fired.
    fn stop_at(&mut self, cx: &mut Cx<'_, '_>, limit: &Limit) -> Out {
        self.stop(cx, limit.rule, limit.outcome(&self.policy))
    }

    /// The run-wide budgets ([`catalog::BUDGETS`]), checked in order before every non-terminal
    /// step with what it is about to spend: `Some` is the step that stops the run, or makes the
    /// one final-answer call the policy allows, instead.
    // Inlined: the check is a few comparisons on every step; what a spent budget does is not.
    #[inline(always)]
    fn budgets(&mut self, cx: &mut Cx<'_, '_>, spend: Spend) -> Option<Out> {
        // Unrolled over the constant list, so that each row's functions are known at compile
        // time and inlined (a loop over the rows calls them through pointers).
        macro_rules! check {
            ($($i:literal)*) => {$(
                if $i < catalog::BUDGETS.len() {
                    let budget = catalog::BUDGETS[$i % catalog::BUDGETS.len()];
                    if budget.stops(&self.policy, &self.stats, &self.streaks, spend) {
                        return Some(self.spend(cx, budget));
                    }
                }
            )*};
        }
        const _: () = assert!(catalog::BUDGETS.len() <= 6, "unroll `budgets` further");
        check!(0 1 2 3 4 5);
        None
    }

    /// The step a spent budget takes: the stop, or the one final-answer call.
    #[cold]
    #[inline(never)]
    fn spend(&mut self, cx: &mut Cx<'_, '_>, spent: &Limit) -> Out {
        let Outcome::Aborted(budget) = spent.outcome(&self.policy) else {
            return self.stop_at(cx, spent);
        };
        if !self.policy.final_answer_on_budget {
            return self.stop_at(cx, spent);
        }
        // The final-answer call is the one step and the one call past the budget; the answer
        // ends the run in `exploring` (a second budget cannot be spent while finalizing).
        let call = CallReason::FinalAnswer { budget };
        let target = State::exploring(Some(budget));
        self.send_call(cx, Rule::FinalAnswerCall, target, call)
    }

    /// A step that calls the model, unless a budget stops the run first.
    fn call_model(
        &mut self,
        cx: &mut Cx<'_, '_>,
        rule: Rule,
        target: State,
        reason: CallReason,
    ) -> Out {
        if let Some(spent) = self.budgets(cx, Spend::MODEL_CALL) {
            if Self::stopped(cx) {
                let target = target.phase();
                Self::preempt(
                    cx,
                    Preempted::Call {
                        rule,
                        target,
                        reason,
                    },
                );
            }
            return spent;
        }
        self.send_call(cx, rule, target, reason)
    }

    /// Whether the step just decided ends the run (a spent budget may make the one final-answer
    /// call instead, which pre-empts nothing).
    #[inline]
    fn stopped(cx: &Cx<'_, '_>) -> bool {
        cx.rule != Some(Rule::FinalAnswerCall)
    }

    /// Keeps the step a budget stop pre-empted, for a raise.
    #[cold]
    fn preempt(cx: &mut Cx<'_, '_>, preempted: Preempted) {
        cx.desk.preempted = Some(preempted);
    }

    /// `aborted --raise-->`: the policy was raised (see [`crate::Machine::raise`]); the step the
    /// budget stop pre-empted is taken now, its budgets checked again under the raised policy.
    #[cold]
    fn take_preempted(&mut self, cx: &mut Cx<'_, '_>, preempted: Preempted) -> Out {
        match preempted {
            Preempted::Tools {
                calls,
                refused,
                warnings,
                runnable,
            } => {
                let spend = Spend {
                    model_calls: 0,
                    tool_calls: u64::from(runnable),
                };
                if let Some(spent) = self.budgets(cx, spend) {
                    if Self::stopped(cx) {
                        let preempted = Preempted::Tools {
                            calls,
                            refused,
                            warnings,
                            runnable,
                        };
                        Self::preempt(cx, preempted);
                    }
                    return spent;
                }
                self.stats.tool_calls = self.stats.tool_calls.saturating_add(runnable);
                let plan = Plan {
                    refused,
                    warnings,
                    runnable,
                    blocked: 0, // counted when the turn was classified
                };
                cx.desk.run_calls(calls, plan);
                self.step(cx, Rule::ToolTurn, State::acting())
            }
            Preempted::Verify => self.verify(cx),
            Preempted::Results {
                notice,
                repetition,
                checkpoint,
            } => self.results_back(cx, notice.map(Box::new), repetition, checkpoint),
            Preempted::Call {
                rule,
                target,
                reason,
            } => {
                if rule == Rule::ClaimRefused && self.reached(&catalog::NUDGES) {
                    Self::preempt(cx, Preempted::NUDGE);
                    return self.stop_at(cx, &catalog::NUDGES);
                }
                let target = match target {
                    Phase::Exploring => State::exploring(None),
                    _ => State::nudged(),
                };
                self.call_model(cx, rule, target, reason)
            }
        }
    }

    /// The model call itself, with the guidance it answers counted when it is sent.
    #[inline(always)]
    fn send_call(
        &mut self,
        cx: &mut Cx<'_, '_>,
        rule: Rule,
        target: State,
        reason: CallReason,
    ) -> Out {
        self.stats.model_calls += 1;
        match reason {
            CallReason::Continue => self.stats.continuations += 1,
            CallReason::Nudge => self.stats.nudges += 1,
            _ => {}
        }
        // Before a model call, the one place a kernel message never splits a tool turn from
        // its results.
        if self.policy.token_budget.is_some() {
            let used = self
                .stats
                .input_tokens
                .saturating_add(self.stats.output_tokens);
            let due = cx.desk.token_notices(&self.policy, used);
            // (Not twice in one step: a block's checkpoint already stands for it.)
            if due
                && rule != Rule::AutoCheckpoint
                && self.stats.auto_checkpoints < self.policy.auto_checkpoints
            {
                // 90 % of the token budget, and no checkpoint since 80 %: the host writes one
                // for the agent before this call (at most `auto_checkpoints` in a run).
                self.stats.auto_checkpoints += 1;
                cx.desk.checkpoint(&self.policy);
            }
        }
        cx.desk.call_model(&self.policy, reason);
        self.step(cx, rule, target)
    }
}
