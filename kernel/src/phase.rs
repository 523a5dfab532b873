//! The public names of the machine's states, why a model call is made, and why an input was
//! not accepted: plain types the machine, its commands and its records share (a leaf module).

use crate::reason::AbortReason;
use serde::{Deserialize, Serialize};

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
        /// The attempt, 1-based, that sets the backoff delay.
        attempt: u32,
        /// A delay the provider asked for, in milliseconds.
        retry_after_ms: Option<u64>,
    },
    /// After a no-op turn: continuation guidance.
    Continue,
    /// After a refused completion claim (rule 5).
    Nudge,
    /// After a verifier rejection (rules 3, 4).
    VerifierRejected,
    /// The one tool-less call for a final answer after a budget was spent.
    FinalAnswer {
        /// The budget that was spent.
        budget: AbortReason,
    },
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
