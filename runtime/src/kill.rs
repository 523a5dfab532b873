//! The host's kill switch.

use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

/// A kill switch the host holds. Clones share one switch; once killed, the run it was given to
/// feeds `Event::Cancel` to the kernel at its next await point and ends `aborted (cancelled)`.
///
/// A switch made with [`KillSwitch::host_clock`] also carries the run's deadline: the runtime
/// then arms no timer of its own for the policy's `deadline_ms`, and the deadline passes when
/// the host says so ([`KillSwitch::expire`]).
#[derive(Debug, Clone, Default)]
pub struct KillSwitch {
    token: CancellationToken,
    /// A switch that kills itself this long after the run first waits on it.
    timer: Option<(Duration, Arc<OnceLock<Instant>>)>,
    /// Set for a host that keeps the clock: cancelled when the host passes the deadline.
    deadline: Option<CancellationToken>,
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
            deadline: None,
        }
    }

    /// A switch for a host that keeps the run's clock itself: a durable engine that replays a
    /// run must see its deadline pass at the same step as the first time, so the moment is the
    /// host's to journal and to tell ([`KillSwitch::expire`]), not a timer's in this process.
    pub fn host_clock() -> KillSwitch {
        KillSwitch {
            deadline: Some(CancellationToken::new()),
            ..KillSwitch::default()
        }
    }

    /// Whether the host keeps the clock ([`KillSwitch::host_clock`]).
    pub fn keeps_clock(&self) -> bool {
        self.deadline.is_some()
    }

    /// Tells the run that its deadline has passed: at its next await point it feeds the kernel
    /// a tick, as its own timer would. Does nothing on a switch the host does not keep the
    /// clock of.
    pub fn expire(&self) {
        if let Some(deadline) = &self.deadline {
            deadline.cancel();
        }
    }

    /// Resolves once the host passes the deadline (never, if it does not keep the clock).
    pub(crate) async fn expired(&self) {
        match &self.deadline {
            Some(deadline) => deadline.cancelled().await,
            None => std::future::pending().await,
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

    /// Whether [`KillSwitch::killed`] would resolve at once: killed, or its timer ran out
    /// (checked on the clock, without arming a timer; the switch is then killed).
    pub(crate) fn killed_now(&self) -> bool {
        let ran_out = self.timer.as_ref().is_some_and(|(after, start)| {
            Instant::now() >= *start.get_or_init(Instant::now) + *after
        });
        if ran_out {
            // As `killed` does when its timer fires: the switch reads killed from now on.
            self.token.cancel();
        }
        self.token.is_cancelled()
    }

    /// Whether [`KillSwitch::expired`] would resolve at once.
    pub(crate) fn expired_now(&self) -> bool {
        self.deadline
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
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
