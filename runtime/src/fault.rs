//! Adapter faults: an adapter that cannot go on at all stops the run (it is not a model or tool
//! failure the kernel could count).

use std::fmt;

/// Whose fault it is, which decides the process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultKind {
    /// The input the host gave is unusable (a scenario script ran out): exit code 2.
    InvalidInput,
    /// Anything else (a broken adapter, a verifier model that answers no verdict): exit code 3.
    Internal,
    /// A peer that may answer if asked again (the verifier's model rate limited, failing with a
    /// 5xx or timing out): the runtime retries it with the policy's backoff, up to
    /// `max_model_retries` times, and stops with exit code 3 if it persists.
    Transient,
}

/// An adapter that cannot go on. The run stops with [`crate::RunError::Fault`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// Whose fault it is.
    pub kind: FaultKind,
    /// What went wrong, naming the adapter (e.g. "model script exhausted after 6 turns").
    pub message: String,
}

impl Fault {
    /// A fault caused by the host's input.
    pub fn invalid_input(message: impl Into<String>) -> Fault {
        Fault {
            kind: FaultKind::InvalidInput,
            message: message.into(),
        }
    }

    /// An internal fault.
    pub fn internal(message: impl Into<String>) -> Fault {
        Fault {
            kind: FaultKind::Internal,
            message: message.into(),
        }
    }

    /// A fault that asking again may clear.
    pub fn transient(message: impl Into<String>) -> Fault {
        Fault {
            kind: FaultKind::Transient,
            message: message.into(),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Fault {}
