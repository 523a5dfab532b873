//! Adapter faults: an adapter that cannot go on at all stops the run (it is not a model or tool
//! failure the kernel could count).

use std::fmt;

/// Whose fault it is, which decides the process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// The input the host gave is unusable (a scenario script ran out): exit code 2.
    InvalidInput,
    /// Anything else (a broken adapter, an unreachable verifier model): exit code 3.
    Internal,
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
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Fault {}
