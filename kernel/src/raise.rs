//! Raising a budget: a run that a run-wide budget stopped goes on with that budget raised
//! (`terminus resume --raise FIELD=N`).
//!
//! A budget stop pre-empts a step: the tool turn it would have run, the results it would have
//! sent back, the claim it would have verified, the model call it would have made. The machine
//! keeps that step on its desk when it stops (`Preempted`), and [`crate::Machine::raise`]
//! takes it under the raised policy: one step from `aborted` back into the live state the
//! pre-empted step goes to, under that step's own rule, with the input `raise`. Counters carry
//! over (the stop was a step and stays counted); the policy checks of the pre-empted step are
//! made again, so a second budget that is spent too stops the run again, with its own name.
//!
//! A raise is an outside decision, like the kill switch, not an event of the agent's loop: the
//! bounds of `spec/machine.md` hold for each stretch between raises, under the policy of that
//! stretch, and every raise is journaled with the fields it raised.

use crate::catalog::{self, Limit};
use crate::command::{BudgetWarning, Notice};
use crate::event::ToolCall;
use crate::ledger::Exclusion;
use crate::loops::Repetition;
use crate::phase::{CallReason, Phase};
use crate::policy::{Policy, PolicyError};
use crate::reason::Outcome;
use crate::rule::Rule;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One raised budget: the policy field and its new value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Raise {
    /// The policy field (`max_steps`, `max_model_calls`, `token_budget`, `max_tool_calls`,
    /// `max_nudges`).
    pub field: String,
    /// Its new value, above the value that stopped the run.
    pub to: u64,
}

impl Raise {
    /// `FIELD=N`, as the command line takes it.
    pub fn parse(text: &str) -> Result<Raise, RaiseError> {
        let bad = || RaiseError::Syntax(text.to_owned());
        let (field, to) = text.split_once('=').ok_or_else(bad)?;
        let to = to.trim().parse::<u64>().map_err(|_| bad())?;
        Ok(Raise {
            field: field.trim().to_owned(),
            to,
        })
    }
}

impl fmt::Display for Raise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.field, self.to)
    }
}

/// Why a raise is refused. Nothing changes when it is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RaiseError {
    /// Not `FIELD=N` with N a whole number.
    Syntax(String),
    /// No field was given.
    Empty,
    /// The run has not ended.
    Live,
    /// The run ended, but not on a budget it can go on from (it completed, stopped for another
    /// reason, or already gave its final answer under `final_answer_on_budget`).
    NotABudgetStop(Outcome),
    /// The field is not a budget a raise can lift.
    NotRaisable(String),
    /// The field is a budget, but not the one that stopped the run.
    DidNotStop {
        /// The field.
        field: String,
        /// How the run ended.
        outcome: Outcome,
    },
    /// The new value does not raise the field.
    NotHigher {
        /// The field.
        field: String,
        /// Its value now.
        from: u64,
        /// The value asked for.
        to: u64,
    },
    /// The field appears twice.
    Repeated(String),
    /// The raised policy is not valid.
    Policy(PolicyError),
}

impl fmt::Display for RaiseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RaiseError::Syntax(text) => {
                write!(f, "`{text}` is not FIELD=N (N a whole number)")
            }
            RaiseError::Empty => write!(f, "no budget to raise"),
            RaiseError::Live => write!(f, "the run has not stopped"),
            RaiseError::NotABudgetStop(outcome) => write!(
                f,
                "the run ended {} ({}), not on a budget a raise can continue from",
                outcome.outcome_str(),
                outcome.reason_str()
            ),
            RaiseError::NotRaisable(field) => {
                let names: Vec<&str> = catalog::RAISABLE.iter().map(|l| l.field).collect();
                write!(
                    f,
                    "`{field}` is not a budget a raise can lift (one of {})",
                    names.join(", ")
                )
            }
            RaiseError::DidNotStop { field, outcome } => write!(
                f,
                "`{field}` did not stop the run (it stopped on {})",
                outcome.reason_str()
            ),
            RaiseError::NotHigher { field, from, to } => {
                write!(f, "`{field}={to}` does not raise {field} (it is {from})")
            }
            RaiseError::Repeated(field) => write!(f, "`{field}` is raised twice"),
            RaiseError::Policy(e) => write!(f, "the raised policy: {e}"),
        }
    }
}

impl std::error::Error for RaiseError {}

/// The policy with `raises` applied, for a run that ended with `outcome`: each field must be a
/// budget that stopped the run with that outcome, and each value above the field's.
pub(crate) fn raised(
    policy: &Policy,
    outcome: Outcome,
    raises: &[Raise],
) -> Result<Policy, RaiseError> {
    if raises.is_empty() {
        return Err(RaiseError::Empty);
    }
    let mut out = policy.clone();
    for (i, raise) in raises.iter().enumerate() {
        if raises[..i].iter().any(|r| r.field == raise.field) {
            return Err(RaiseError::Repeated(raise.field.clone()));
        }
        let limit: &Limit = catalog::raisable(&raise.field)
            .ok_or_else(|| RaiseError::NotRaisable(raise.field.clone()))?;
        let from = limit.value(policy);
        if from.is_none() || limit.outcome(policy) != outcome {
            return Err(RaiseError::DidNotStop {
                field: raise.field.clone(),
                outcome,
            });
        }
        let from = from.unwrap_or(0);
        if raise.to <= from {
            return Err(RaiseError::NotHigher {
                field: raise.field.clone(),
                from,
                to: raise.to,
            });
        }
        limit.set(&mut out, raise.to).map_err(RaiseError::Policy)?;
    }
    out.validate().map_err(RaiseError::Policy)?;
    Ok(out)
}

/// The step a budget stop pre-empted, kept on the desk of the stopped machine for a raise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "step", deny_unknown_fields)]
pub(crate) enum Preempted {
    /// A tool turn: run its calls (as the turn's plan decided each one).
    Tools {
        calls: Vec<ToolCall>,
        refused: Vec<(usize, Exclusion)>,
        warnings: Vec<(usize, BudgetWarning)>,
        runnable: u32,
    },
    /// A completion claim: ask the verifier.
    Verify,
    /// Tool results: send them back, with the notices the step would have given.
    Results {
        notice: Option<Notice>,
        repetition: Option<Repetition>,
        /// A checkpoint was due (see [`crate::input::Batch::checkpoint`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        checkpoint: bool,
    },
    /// A model call under `rule`, waiting in `target` (`exploring` or `nudged`).
    Call {
        rule: Rule,
        target: Phase,
        reason: CallReason,
    },
}

impl Preempted {
    /// The nudge a claim with work open would have had when `max_nudges` stopped the run.
    pub(crate) const NUDGE: Preempted = Preempted::Call {
        rule: Rule::ClaimRefused,
        target: Phase::Nudged,
        reason: CallReason::Nudge,
    };
}
