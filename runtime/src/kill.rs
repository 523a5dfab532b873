//! The host's kill switch.

use tokio_util::sync::CancellationToken;

/// A kill switch the host holds. Clones share one switch; once killed, the run it was given to
/// feeds `Event::Cancel` to the kernel at its next await point and ends `aborted (cancelled)`.
#[derive(Debug, Clone, Default)]
pub struct KillSwitch {
    token: CancellationToken,
}

impl KillSwitch {
    /// A switch that is not killed.
    pub fn new() -> KillSwitch {
        KillSwitch::default()
    }

    /// Kills the run (idempotent).
    pub fn kill(&self) {
        self.token.cancel();
    }

    /// Whether the switch was killed.
    pub fn is_killed(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Resolves once the switch is killed.
    pub async fn killed(&self) {
        self.token.cancelled().await;
    }
}
