//! The core completion machine: one `statig` state machine over the abstract [`Input`] alphabet.
//!
//! Shared storage holds the limits, the monotone [`Stats`] and the [`Streaks`]; the context is an
//! [`Effects`] sink that receives exactly one [`Effect`] per accepted input and the [`Rule`] that
//! fired. Every accepted input is one step; every non-terminal step strictly decreases
//! [`Core::variant`] (checked by a `debug_assert!`).

#![allow(missing_docs)] // the statig macro generates `State`/`Superstate` items

use crate::input::{Batch, ErrorClass, Gate, Input, TurnKind};
use crate::policy::{OnUnrecoverable, OnVerificationLimit, Policy};
use crate::reason::{AbortReason, CompleteReason, Outcome};
use crate::rule::Rule;
use crate::stats::{Stats, Streaks};
use serde::{Deserialize, Serialize};
use statig::prelude::*;

/// The numeric limits the core decides on (a projection of [`Policy`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Limits {
    pub(crate) max_steps: u32,
    pub(crate) max_model_calls: u32,
    pub(crate) max_no_ops: u32,
    pub(crate) max_nudges: u32,
    pub(crate) max_verification_failures: u32,
    pub(crate) on_verification_limit: OnVerificationLimit,
    pub(crate) verify_completion: bool,
    pub(crate) max_consecutive_tool_failures: u32,
    pub(crate) on_unrecoverable_tool_error: OnUnrecoverable,
    pub(crate) max_repeats: u32,
    pub(crate) max_empty_responses: u32,
    pub(crate) max_model_retries: u32,
    pub(crate) token_budget: Option<u64>,
    pub(crate) final_answer_on_budget: bool,
}

impl From<&Policy> for Limits {
    fn from(p: &Policy) -> Self {
        Limits {
            max_steps: p.max_steps,
            max_model_calls: p.max_model_calls,
            max_no_ops: p.max_no_ops,
            max_nudges: p.max_nudges,
            max_verification_failures: p.max_verification_failures,
            on_verification_limit: p.on_verification_limit,
            verify_completion: p.verify_completion,
            max_consecutive_tool_failures: p.max_consecutive_tool_failures,
            on_unrecoverable_tool_error: p.on_unrecoverable_tool_error,
            max_repeats: p.max_repeats,
            max_empty_responses: p.max_empty_responses,
            max_model_retries: p.max_model_retries,
            token_budget: p.token_budget,
            final_answer_on_budget: p.final_answer_on_budget,
        }
    }
}

/// Why the next model call is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum CallReason {
    /// The first call of the run.
    Start,
    /// Tool results went back to the model (rule 1).
    AfterTools,
    /// A retry after a retryable error or an empty reply (rule 6), with its backoff attempt.
    Retry {
        attempt: u32,
        retry_after_ms: Option<u64>,
    },
    /// After a no-op turn: continuation guidance.
    Continue,
    /// After a refused completion claim (rule 5).
    Nudge,
    /// After a verifier rejection (rules 3, 4).
    VerifierRejected,
    /// The one tool-less call for a final answer after a budget was spent.
    FinalAnswer { budget: AbortReason },
}

/// What the core asks for after one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Call the model.
    CallModel(CallReason),
    /// Run the tool calls of the last turn.
    RunTools,
    /// Ask the verifier about the last claim.
    Verify,
    /// The run ended.
    Stop(Outcome),
}

/// Why an input was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ignored {
    /// The run already ended; terminal states absorb every later event.
    Terminal,
    /// The state does not expect this input (e.g. tool results while waiting for the model).
    Unexpected,
}

/// The context sink of one dispatch.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Effects {
    /// The effect of an accepted input.
    pub(crate) effect: Option<Effect>,
    /// The rule that fired.
    pub(crate) rule: Option<Rule>,
    /// Set when the input was not accepted.
    pub(crate) ignored: Option<Ignored>,
}

/// The shared storage of the core machine.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Core {
    pub(crate) limits: Limits,
    pub(crate) stats: Stats,
    pub(crate) streaks: Streaks,
    /// Set while waiting for the final-answer call: the budget that was spent.
    pub(crate) finalizing: Option<AbortReason>,
}

/// The public name of a machine state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Phase {
    /// Waiting for the model's next turn.
    Exploring,
    /// Tool calls issued, waiting for their results.
    Acting,
    /// The model claimed completion; waiting for the verdict.
    Verifying,
    /// A premature stop or no-op turn was refused with guidance; waiting for the model.
    Nudged,
    /// Terminal: the run completed.
    Complete,
    /// Terminal: the run was aborted.
    Aborted,
}

impl Phase {
    /// All phases in table order.
    pub const ALL: [Phase; 6] = [
        Phase::Exploring,
        Phase::Acting,
        Phase::Verifying,
        Phase::Nudged,
        Phase::Complete,
        Phase::Aborted,
    ];

    /// Whether the phase is terminal (absorbing).
    pub const fn is_terminal(self) -> bool {
        matches!(self, Phase::Complete | Phase::Aborted)
    }

    /// The name used in traces and the spec.
    pub const fn as_str(self) -> &'static str {
        match self {
            Phase::Exploring => "Exploring",
            Phase::Acting => "Acting",
            Phase::Verifying => "Verifying",
            Phase::Nudged => "Nudged",
            Phase::Complete => "Complete",
            Phase::Aborted => "Aborted",
        }
    }
}

impl State {
    /// The public name of this state.
    pub(crate) const fn phase(&self) -> Phase {
        match self {
            State::Exploring {} => Phase::Exploring,
            State::Acting {} => Phase::Acting,
            State::Verifying {} => Phase::Verifying,
            State::Nudged {} => Phase::Nudged,
            State::Complete { .. } => Phase::Complete,
            State::Aborted { .. } => Phase::Aborted,
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
    initial = "State::exploring()",
    state(derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)),
    superstate(derive(Debug))
)]
impl Core {
    /// Waiting for the model's next turn.
    #[state(superstate = "live")]
    fn exploring(&mut self, context: &mut Effects, event: &Input) -> Out {
        if let Some(budget) = self.finalizing {
            // The final-answer call came back (whatever it is): the budget names the stop.
            return match event {
                Input::Turn {
                    input_tokens,
                    output_tokens,
                    ..
                } => {
                    self.add_tokens(*input_tokens, *output_tokens);
                    self.stop(context, Rule::FinalAnswerDone, Outcome::Aborted(budget))
                }
                Input::ModelError(_) => {
                    self.stats.model_errors += 1;
                    self.stop(context, Rule::FinalAnswerDone, Outcome::Aborted(budget))
                }
                _ => Super,
            };
        }
        self.awaiting_model(context, event, State::exploring())
    }

    /// Guidance was sent; waiting for the model's next turn.
    #[state(superstate = "live")]
    fn nudged(&mut self, context: &mut Effects, event: &Input) -> Out {
        self.awaiting_model(context, event, State::nudged())
    }

    /// Tool calls issued; waiting for their results.
    #[state(superstate = "live")]
    fn acting(&mut self, context: &mut Effects, event: &Input) -> Out {
        match event {
            Input::ToolResults(batch) => self.on_results(context, *batch),
            _ => Super,
        }
    }

    /// A completion claim is with the verifier.
    #[state(superstate = "live")]
    fn verifying(&mut self, context: &mut Effects, event: &Input) -> Out {
        match event {
            Input::Verdict { accepted } => self.on_verdict(context, *accepted),
            _ => Super,
        }
    }

    /// Terminal: absorbs every event and says so.
    #[state]
    fn complete(reason: &mut CompleteReason, context: &mut Effects) -> Out {
        let _ = reason;
        context.ignored = Some(Ignored::Terminal);
        Handled
    }

    /// Terminal: absorbs every event and says so.
    #[state]
    fn aborted(reason: &mut AbortReason, context: &mut Effects) -> Out {
        let _ = reason;
        context.ignored = Some(Ignored::Terminal);
        Handled
    }

    /// Every live state: the kill switch, the clock, and events no state expects.
    #[superstate]
    fn live(&mut self, context: &mut Effects, event: &Input) -> Out {
        match event {
            Input::Cancel => self.stop(
                context,
                Rule::Cancelled,
                Outcome::Aborted(AbortReason::Cancelled),
            ),
            Input::Tick {
                deadline_passed: true,
            } => self.stop(
                context,
                Rule::DeadlinePassed,
                Outcome::Aborted(AbortReason::Deadline),
            ),
            Input::Tick {
                deadline_passed: false,
            } => {
                // A clock reading before the deadline changes nothing and is not a step.
                context.rule = Some(Rule::ClockReading);
                Handled
            }
            _ => {
                // statig would drop an event every level answers with `Super`; count it instead.
                context.ignored = Some(Ignored::Unexpected);
                Handled
            }
        }
    }
}

impl Core {
    /// A fresh core; the first model call is counted here (the machine issues it on creation).
    pub(crate) fn new(policy: &Policy) -> Self {
        Core {
            limits: Limits::from(policy),
            stats: Stats {
                model_calls: 1,
                ..Stats::default()
            },
            streaks: Streaks::default(),
            finalizing: None,
        }
    }

    /// The termination measure: remaining steps plus remaining model calls. Every non-terminal
    /// transition takes a step, and model calls never decrease, so it strictly decreases.
    pub(crate) fn variant(&self) -> u64 {
        let extra = u64::from(self.limits.final_answer_on_budget);
        let steps =
            (u64::from(self.limits.max_steps) + extra).saturating_sub(self.stats.steps.into());
        let calls = (u64::from(self.limits.max_model_calls) + extra)
            .saturating_sub(self.stats.model_calls.into());
        steps + calls
    }

    fn add_tokens(&mut self, input: u64, output: u64) {
        self.stats.input_tokens = self.stats.input_tokens.saturating_add(input);
        self.stats.output_tokens = self.stats.output_tokens.saturating_add(output);
    }

    fn awaiting_model(&mut self, cx: &mut Effects, event: &Input, here: State) -> Out {
        match *event {
            Input::Turn {
                kind,
                input_tokens,
                output_tokens,
            } => {
                self.add_tokens(input_tokens, output_tokens);
                self.streaks.model_retries = 0;
                self.on_turn(cx, kind, here)
            }
            Input::ModelError(class) => self.on_model_error(cx, class, here),
            _ => Super,
        }
    }

    fn on_turn(&mut self, cx: &mut Effects, kind: TurnKind, here: State) -> Out {
        match kind {
            TurnKind::Tools { runnable, refused } => {
                self.stats.refused_calls += u32::from(refused);
                if runnable == 0 {
                    // Rule 7: every tool the model asks for is excluded.
                    return self.stop(
                        cx,
                        Rule::AllToolsExcluded,
                        Outcome::Aborted(AbortReason::ToolFailures),
                    );
                }
                self.streaks.no_ops = 0;
                self.streaks.empty_responses = 0;
                // Rule 1: tool calls never complete the run, whatever `needs_more_work` says.
                let out = self.go(cx, Rule::ToolTurn, State::acting(), Effect::RunTools);
                // `tool_calls` counts executions: not the calls of a turn a budget stopped.
                if cx.rule == Some(Rule::ToolTurn) {
                    self.stats.tool_calls += u32::from(runnable);
                }
                out
            }
            TurnKind::Empty(_) => {
                // Rule 6: an empty reply is an error, retried with backoff, never an answer.
                self.stats.empty_responses += 1;
                self.streaks.empty_responses += 1;
                if self.streaks.empty_responses >= self.limits.max_empty_responses {
                    return self.stop(
                        cx,
                        Rule::EmptyLimit,
                        Outcome::Aborted(AbortReason::EmptyResponses),
                    );
                }
                let attempt = self.streaks.empty_responses;
                let call = CallReason::Retry {
                    attempt,
                    retry_after_ms: None,
                };
                self.go(cx, Rule::EmptyRetry, here, Effect::CallModel(call))
            }
            TurnKind::NoOp(_) => {
                self.stats.no_ops += 1;
                self.streaks.no_ops += 1;
                self.streaks.empty_responses = 0;
                if self.streaks.no_ops >= self.limits.max_no_ops {
                    return self.stop(
                        cx,
                        Rule::NoOpLimit,
                        Outcome::Aborted(AbortReason::NoProgress),
                    );
                }
                let out = self.go(
                    cx,
                    Rule::NoOpContinue,
                    State::nudged(),
                    Effect::CallModel(CallReason::Continue),
                );
                // Counted when sent: not when a budget stopped the run instead.
                if cx.rule == Some(Rule::NoOpContinue) {
                    self.stats.continuations += 1;
                }
                out
            }
            TurnKind::Claim { explicit, gate } => {
                self.streaks.no_ops = 0;
                self.streaks.empty_responses = 0;
                self.on_claim(cx, explicit, gate)
            }
        }
    }

    fn on_claim(&mut self, cx: &mut Effects, explicit: bool, gate: Gate) -> Out {
        if gate.is_open() {
            // Rule 5: a claim with open todos or required tools not yet run is refused.
            if self.stats.nudges >= self.limits.max_nudges {
                return self.stop(
                    cx,
                    Rule::ClaimRefusedLimit,
                    Outcome::Aborted(AbortReason::Incomplete),
                );
            }
            let out = self.go(
                cx,
                Rule::ClaimRefused,
                State::nudged(),
                Effect::CallModel(CallReason::Nudge),
            );
            // Counted when sent: not when a budget stopped the run instead.
            if cx.rule == Some(Rule::ClaimRefused) {
                self.stats.nudges += 1;
            }
            return out;
        }
        if self.limits.verify_completion {
            return self.go(cx, Rule::ClaimVerify, State::verifying(), Effect::Verify);
        }
        // Rule 2: `needs_more_work` is tri-state; false is explicit, absent is a plain answer.
        if explicit {
            self.stop(
                cx,
                Rule::ClaimExplicit,
                Outcome::Complete(CompleteReason::Explicit),
            )
        } else {
            self.stop(
                cx,
                Rule::ClaimAnswered,
                Outcome::Complete(CompleteReason::Answered),
            )
        }
    }

    fn on_model_error(&mut self, cx: &mut Effects, class: ErrorClass, here: State) -> Out {
        self.stats.model_errors += 1;
        match class {
            ErrorClass::Retryable { retry_after_ms } => {
                self.streaks.model_retries += 1;
                if self.streaks.model_retries > self.limits.max_model_retries {
                    return self.stop(
                        cx,
                        Rule::ModelRetryLimit,
                        Outcome::Aborted(AbortReason::ModelError),
                    );
                }
                let call = CallReason::Retry {
                    attempt: self.streaks.model_retries,
                    retry_after_ms,
                };
                self.go(cx, Rule::ModelRetry, here, Effect::CallModel(call))
            }
            ErrorClass::Fatal => self.stop(
                cx,
                Rule::ModelFatal,
                Outcome::Aborted(AbortReason::ModelError),
            ),
            ErrorClass::ContextOverflow => self.stop(
                cx,
                Rule::ContextOverflow,
                Outcome::Aborted(AbortReason::ContextExhausted),
            ),
        }
    }

    fn on_results(&mut self, cx: &mut Effects, batch: Batch) -> Out {
        self.stats.tool_failures += u32::from(batch.failed);
        if batch.unrecoverable && self.limits.on_unrecoverable_tool_error == OnUnrecoverable::Stop {
            return self.stop(
                cx,
                Rule::UnrecoverableStop,
                Outcome::Aborted(AbortReason::UnrecoverableToolError),
            );
        }
        if batch.all_failed {
            self.stats.failed_tool_turns += 1;
            self.streaks.failed_tool_turns += 1;
            if self.streaks.failed_tool_turns >= self.limits.max_consecutive_tool_failures {
                return self.stop(
                    cx,
                    Rule::ToolFailureLimit,
                    Outcome::Aborted(AbortReason::ToolFailures),
                );
            }
        } else {
            self.streaks.failed_tool_turns = 0;
        }
        if batch.repeated {
            self.stats.repeats += 1;
            self.streaks.repeats += 1;
            if self.streaks.repeats >= self.limits.max_repeats {
                // A tight loop: same calls, same results. Cut long before `max_steps`.
                return self.stop(
                    cx,
                    Rule::RepeatLimit,
                    Outcome::Aborted(AbortReason::NoProgress),
                );
            }
        } else {
            self.streaks.repeats = 1;
        }
        // Rule 8 lives in the ledger the machine keeps; results always go back to the model.
        self.go(
            cx,
            Rule::ToolResultsBack,
            State::exploring(),
            Effect::CallModel(CallReason::AfterTools),
        )
    }

    fn on_verdict(&mut self, cx: &mut Effects, accepted: bool) -> Out {
        self.stats.verifications += 1;
        if accepted {
            return self.stop(
                cx,
                Rule::VerdictAccepted,
                Outcome::Complete(CompleteReason::Verified),
            );
        }
        // Rule 3: every verification failure counts, and they have a hard limit.
        self.stats.verification_failures += 1;
        if self.stats.verification_failures >= self.limits.max_verification_failures {
            return match self.limits.on_verification_limit {
                OnVerificationLimit::Complete => self.stop(
                    cx,
                    Rule::VerificationLimitForced,
                    Outcome::Complete(CompleteReason::Forced),
                ),
                OnVerificationLimit::Abort => self.stop(
                    cx,
                    Rule::VerificationLimitAbort,
                    Outcome::Aborted(AbortReason::VerificationLoop),
                ),
            };
        }
        let call = Effect::CallModel(CallReason::VerifierRejected);
        self.go(cx, Rule::VerdictRejected, State::nudged(), call)
    }

    /// A terminal step.
    fn stop(&mut self, cx: &mut Effects, rule: Rule, outcome: Outcome) -> Out {
        self.stats.steps = self.stats.steps.saturating_add(1);
        cx.rule = Some(rule);
        cx.effect = Some(Effect::Stop(outcome));
        Transition(match outcome {
            Outcome::Complete(reason) => State::complete(reason),
            Outcome::Aborted(reason) => State::aborted(reason),
        })
    }

    /// A non-terminal step, unless a run-wide budget is spent: those take precedence over the
    /// natural target (a terminal natural target always wins over a budget).
    fn go(&mut self, cx: &mut Effects, rule: Rule, target: State, effect: Effect) -> Out {
        let before = self.variant();
        if self.stats.steps.saturating_add(1) >= self.limits.max_steps {
            return self.budget_spent(cx, Rule::StepBudget, AbortReason::MaxSteps);
        }
        if let Some(budget) = self.limits.token_budget
            && self.stats.tokens() >= budget
        {
            return self.budget_spent(cx, Rule::TokenBudget, AbortReason::TokenBudget);
        }
        if let Effect::CallModel(_) = effect {
            if self.stats.model_calls >= self.limits.max_model_calls {
                return self.budget_spent(cx, Rule::ModelCallBudget, AbortReason::MaxModelCalls);
            }
            self.stats.model_calls += 1;
        }
        self.stats.steps += 1;
        cx.rule = Some(rule);
        cx.effect = Some(effect);
        debug_assert!(
            self.variant() < before,
            "the termination variant must strictly decrease"
        );
        Transition(target)
    }

    /// A budget is spent: abort, or make the one final-answer call the policy allows.
    fn budget_spent(&mut self, cx: &mut Effects, rule: Rule, reason: AbortReason) -> Out {
        if self.limits.final_answer_on_budget && self.finalizing.is_none() {
            self.finalizing = Some(reason);
            self.stats.steps += 1;
            self.stats.model_calls += 1;
            cx.rule = Some(Rule::FinalAnswerCall);
            cx.effect = Some(Effect::CallModel(CallReason::FinalAnswer {
                budget: reason,
            }));
            return Transition(State::exploring());
        }
        self.stop(cx, rule, Outcome::Aborted(reason))
    }
}
