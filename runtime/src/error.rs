//! Why a run could not produce a report.

use crate::context::ContextPolicyError;
use crate::fault::{Fault, FaultKind};
use crate::journal::StoreError;
use terminus_kernel::{Key, PolicyError};

/// A run that ended without a report. (A run that the kernel stopped, even aborted, has a
/// report: that is not an error.)
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The policy cannot be run.
    #[error("invalid {0}")]
    Policy(PolicyError),
    /// The context policy cannot be run.
    #[error("invalid {0}")]
    Context(ContextPolicyError),
    /// An adapter cannot go on.
    #[error("{0}")]
    Fault(Fault),
    /// The store failed, or another worker holds the execution.
    #[error(transparent)]
    Store(StoreError),
    /// `run` was asked for an execution that already has journal entries.
    #[error("execution `{0}` already has journal entries; resume it or choose another id")]
    ExecutionExists(String),
    /// A key already stored holds different content: the journal is not this run's.
    #[error("the journal entry at {0} differs from this run's; the journal belongs to another run")]
    Diverged(Key),
    /// On resume, a started call of a non-idempotent tool has no result and the configuration
    /// says to stop ([`crate::InDoubt::Stop`]).
    #[error(
        "tool call `{call}` of `{tool}` was started before the run stopped and has no result; `{tool}` is not idempotent, so it is not run again"
    )]
    InDoubt {
        /// The call id.
        call: String,
        /// The tool.
        tool: String,
    },
    /// The run stopped to wait for decisions on held calls (`docs/approvals.md`): its pending
    /// calls are journaled and its claim released; decide them, then resume it (exit code 5).
    #[error(
        "execution `{}` is suspended: {} held call(s) wait for a decision",
        .0.execution,
        .0.pending.len()
    )]
    Suspended(Box<crate::suspend::Suspended>),
    /// The journal cannot be replayed.
    #[error("the journal cannot be replayed: {0}")]
    Replay(String),
    /// A raise (`terminus resume --raise`) that cannot be made: the run did not stop on that
    /// budget, or the value does not raise it (exit code 2). Nothing was written.
    #[error("cannot raise execution `{execution}`: {error}")]
    Raise {
        /// The execution.
        execution: String,
        /// Why.
        error: terminus_kernel::RaiseError,
    },
    /// The runtime and the kernel disagree (a bug).
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<StoreError> for RunError {
    fn from(e: StoreError) -> Self {
        RunError::Store(e)
    }
}

impl From<Fault> for RunError {
    fn from(f: Fault) -> Self {
        RunError::Fault(f)
    }
}

impl RunError {
    /// The process exit code (`docs/design.md`, "Exit codes"): 2 invalid input, 3 internal or
    /// storage error, 4 claimed by another worker, 5 suspended (waiting for a decision).
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Policy(_)
            | RunError::Context(_)
            | RunError::ExecutionExists(_)
            | RunError::Raise { .. }
            | RunError::Store(StoreError::NotFound(_) | StoreError::NotSuspended(_)) => 2,
            RunError::Suspended(_) => 5,
            RunError::Fault(f) if f.kind == FaultKind::InvalidInput => 2,
            RunError::Store(StoreError::Claimed { .. } | StoreError::LeaseLost { .. }) => 4,
            RunError::Fault(_)
            | RunError::Store(_)
            | RunError::Diverged(_)
            | RunError::InDoubt { .. }
            | RunError::Replay(_)
            | RunError::Internal(_) => 3,
        }
    }

    /// The class of the error, as a trace's `error.type` and a metric's label.
    pub fn class(&self) -> &'static str {
        match self {
            RunError::Policy(_) => "invalid_policy",
            RunError::Context(_) => "invalid_context_policy",
            RunError::Fault(_) => "fault",
            RunError::Store(StoreError::Claimed { .. }) => "claimed",
            RunError::Store(StoreError::LeaseLost { .. }) => "lease_lost",
            RunError::Store(_) => "store",
            RunError::ExecutionExists(_) => "execution_exists",
            RunError::Diverged(_) => "diverged",
            RunError::InDoubt { .. } => "in_doubt",
            RunError::Suspended(_) => "suspended",
            RunError::Replay(_) => "replay",
            RunError::Raise { .. } => "raise",
            RunError::Internal(_) => "internal",
        }
    }
}
