//! The host's kill switch.

use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

/// A kill switch the host holds. Clones share one switch; once killed, the run it was given to
/// feeds `Event::Cancel` to the kernel at its next await point and ends `aborted (cancelled)`.
#[derive(Debug, Clone, Default)]
pub struct KillSwitch {
    token: CancellationToken,
    /// A switch that kills itself this long after the run first waits on it.
    timer: Option<(Duration, Arc<OnceLock<Instant>>)>,
}

impl KillSwitch {
    /// A switch that is not killed.
    pub fn new() -> KillSwitch {
        KillSwitch::default()
    }

    /// A switch that kills itself `after` the run starts (the first time the run waits on it),
    /// as a host whose user gives up would; it can still be killed earlier.
    pub fn after(after: Duration) -> KillSwitch {
        KillSwitch {
            token: CancellationToken::new(),
            timer: Some((after, Arc::new(OnceLock::new()))),
        }
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
        match &self.timer {
            None => self.token.cancelled().await,
            Some((after, start)) => {
                let at = *start.get_or_init(Instant::now) + *after;
                tokio::select! {
                    () = self.token.cancelled() => {}
                    () = sleep_until(at) => self.token.cancel(),
                }
            }
        }
    }
}
