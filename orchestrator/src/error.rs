//! [`OrchestrateError`]: why an orchestration could not run to its report, with its exit code
//! and its class (the `error.type` of the plan's span and the label of its error counter).

use terminus_runtime::{RunError, StoreError};

/// Why an orchestration could not run to its report.
#[derive(Debug)]
pub enum OrchestrateError {
    /// The journal failed (exit 3), or another worker holds the orchestration (exit 4).
    Store(StoreError),
    /// The stored progress cannot be read (exit 3).
    Corrupt(String),
    /// A new orchestration was given the id of one that exists (exit 2).
    Exists(String),
}

impl std::fmt::Display for OrchestrateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OrchestrateError::Store(e) => write!(f, "{e}"),
            OrchestrateError::Corrupt(what) => write!(f, "stored progress is corrupt: {what}"),
            OrchestrateError::Exists(id) => write!(
                f,
                "execution `{id}` already exists in the journal; resume it or choose another id"
            ),
        }
    }
}

impl std::error::Error for OrchestrateError {}

impl From<StoreError> for OrchestrateError {
    fn from(e: StoreError) -> Self {
        OrchestrateError::Store(e)
    }
}

impl OrchestrateError {
    /// The exit code (`docs/design.md`, "Exit codes"): 4 claimed by another worker, 2 an id in use,
    /// else 3.
    pub fn exit_code(&self) -> u8 {
        match self {
            OrchestrateError::Store(e) => RunError::Store(e.clone()).exit_code(),
            OrchestrateError::Corrupt(_) => 3,
            OrchestrateError::Exists(_) => 2,
        }
    }

    /// The class of the failure, as `error.type` and the `class` label of
    /// `terminus_plan_errors_total`: a store error's class ([`RunError::class`]: `store`,
    /// `claimed`, `lease_lost`), `corrupt`, or `execution_exists`.
    pub fn class(&self) -> &'static str {
        match self {
            OrchestrateError::Store(e) => RunError::Store(e.clone()).class(),
            OrchestrateError::Corrupt(_) => "corrupt",
            OrchestrateError::Exists(_) => "execution_exists",
        }
    }
}
