//! The bridge between the runtime's adapters and the handler's Restate context.
//!
//! The runtime wants `'static` adapters (`Arc<dyn Model>`, `Arc<dyn Tool>`) and Restate's
//! context is borrowed by the handler, so the two meet over a channel. An adapter asks the
//! handler to journal an effect ([`Bridge::begin`], synchronously, so the steps are created in
//! the order the runtime calls its adapters); the handler makes it a `ctx.run` step and answers
//! either with the journaled answer (a replay: the effect is not carried out again) or with a
//! [`Ticket`] (live: the adapter carries it out and hands the answer back, and gets it once
//! Restate has stored it).
//!
//! Time and the host's controls are journaled too, since a replay must take the same path: a
//! live step also races the effect against the run's deadline, the `cancel` handler and its
//! own timeout, and whichever comes first is stored. An effect the runtime stopped waiting for
//! is stored as abandoned, with why; on replay the adapter reproduces it (kills the run, passes
//! the deadline, or waits for the runtime's own timer) instead of carrying the effect out.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use terminus_kernel::Key;
use terminus_runtime::{Fault, KillSwitch, Replayed, Transition};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// The fault of a step whose handler is gone.
pub(crate) const HANDLER_GONE: &str = "the Restate handler is gone";

/// What one journaled step stores in Restate's journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Stored {
    /// The effect's answer, in its adapter's encoding.
    Done {
        /// The answer.
        value: Value,
    },
    /// No answer: the run stopped waiting, or the step did first.
    Abandoned {
        /// Why.
        why: Abandon,
        /// Whether the adapter had started the effect (a scripted adapter then consumed an
        /// answer, which a replay accounts for).
        started: bool,
    },
}

/// Why a step has no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Abandon {
    /// The `cancel` handler was called.
    Cancelled,
    /// The run's deadline passed.
    Deadline,
    /// The effect took longer than its timeout.
    Timeout,
    /// The runtime stopped waiting for its own reason (another call of the batch failed).
    Dropped,
}

/// What kind of effect a step is, for the replay's accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Model,
    Tool,
    Verify,
}

/// An adapter's request to the handler: journal the effect `name`.
pub(crate) struct Begin {
    pub(crate) name: String,
    pub(crate) kind: Kind,
    pub(crate) timeout: Option<Duration>,
    /// For an effect that must not run twice (a non-idempotent tool): the handler journals
    /// its start and the job it started as steps of their own, before the effect's.
    pub(crate) guard: Option<Guard>,
    pub(crate) reply: oneshot::Sender<Start>,
}

/// What an effect that must not run twice adds to its [`Begin`]. Its steps are three: its
/// start (`NAME:started`, this attempt's id), the job it started (`NAME:job`: a handle it can
/// wait for again, such as an MCP task, or none), and its answer (`NAME`).
pub(crate) struct Guard {
    /// The answer to store if an earlier attempt started the effect, Restate has no answer for
    /// it, and it started no job: it may have happened, so it is not carried out again.
    pub(crate) in_doubt: Value,
    /// Where the handler says what the job step holds.
    pub(crate) job: oneshot::Sender<JobStart>,
}

/// The handler's answer to a [`Guard`]'s job step.
pub(crate) enum JobStart {
    /// The journal has the step: the job an earlier attempt started (`None`: none). If the
    /// answer step is live, the effect waits for that job instead of starting anything.
    Replayed(Option<Value>),
    /// The step is live and the effect starts now: hand `job` the job it starts (or `None`, or
    /// drop it, when it ends without one); `journaled` says once it is stored.
    Live {
        job: oneshot::Sender<Option<Value>>,
        journaled: oneshot::Receiver<bool>,
    },
    /// Restate refused the step (the message says why).
    Failed(String),
}

/// What an effect's job step tells its answer step.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Effect {
    /// This attempt started the effect.
    ThisAttempt,
    /// An earlier attempt did, and started `job` (or none).
    Earlier { job: Option<Value> },
}

/// A job step, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredJob {
    /// The job the effect started, if it started one before the step was stored.
    pub(crate) job: Option<Value>,
}

/// The handler's answer to [`Begin`].
pub(crate) enum Start {
    /// The journal has the step: its stored outcome.
    Replayed(Stored),
    /// The step is live: carry the effect out and hand the answer to the ticket.
    Live(Ticket),
    /// Restate refused the step (the message says why).
    Failed(String),
}

/// A live step waiting for its effect's answer.
pub(crate) struct Ticket {
    pub(crate) answer: oneshot::Sender<Value>,
    /// The stored outcome, once Restate has it.
    pub(crate) stored: oneshot::Receiver<Result<Stored, String>>,
}

/// The run's controls as a live step sees them.
#[derive(Debug, Clone)]
pub(crate) struct Controls {
    /// Cancelled by the `cancel` handler.
    pub(crate) cancel: CancellationToken,
    /// When the run's deadline passes (its first start plus the policy's `deadline_ms`).
    pub(crate) deadline: Option<SystemTime>,
}

impl Controls {
    /// Resolves when the deadline passes (never without one).
    pub(crate) async fn deadline(&self) {
        match self.deadline {
            Some(at) => {
                let left = at
                    .duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO);
                tokio::time::sleep(left).await;
            }
            None => std::future::pending().await,
        }
    }
}

/// What is told when a replay is over.
pub type OnReplay = Box<dyn FnOnce(&Replayed) + Send>;

/// What the handler learns while replaying, for the scripted adapters' `on_replay`.
pub(crate) struct Replay {
    answered: Replayed,
    on_replay: Option<OnReplay>,
}

impl Replay {
    pub(crate) fn new(on_replay: Option<OnReplay>) -> Replay {
        Replay {
            answered: Replayed::default(),
            on_replay,
        }
    }

    /// A replayed step whose effect was started the first time. Only model answers are
    /// counted: a tool adapter is called (not awaited) on replay too, in the runtime's order,
    /// so a scripted tool moves past its answers by itself.
    pub(crate) fn count(&mut self, kind: Kind) {
        if kind == Kind::Model {
            self.answered.model_answers += 1;
        }
    }

    /// The first live step: the replay is over.
    pub(crate) fn over(&mut self) {
        if let Some(on_replay) = self.on_replay.take() {
            on_replay(&self.answered);
        }
    }
}

/// The adapters' side: the channel to the handler, the run's kill switch, and where the run is
/// (for the steps' names).
#[derive(Clone)]
pub(crate) struct Bridge {
    begin: mpsc::UnboundedSender<Begin>,
    kill: KillSwitch,
    position: Arc<Mutex<Position>>,
}

/// The machine's step count and the tool calls made since, kept by the run's observer.
#[derive(Debug, Default)]
pub(crate) struct Position {
    steps: u32,
    tools: u32,
}

impl Bridge {
    pub(crate) fn new(kill: KillSwitch) -> (Bridge, mpsc::UnboundedReceiver<Begin>) {
        let (begin, rx) = mpsc::unbounded_channel();
        let bridge = Bridge {
            begin,
            kill,
            position: Arc::new(Mutex::new(Position::default())),
        };
        (bridge, rx)
    }

    /// The run's observer: keeps the position ([`Bridge::stepped`]).
    pub(crate) fn observer(&self) -> impl Fn(&Transition<'_>) + Send + 'static {
        let bridge = self.clone();
        move |t: &Transition<'_>| bridge.stepped(t.stats.steps)
    }

    /// Called by the run's observer after every transition.
    pub(crate) fn stepped(&self, steps: u32) {
        let mut position = self.position.lock().unwrap_or_else(PoisonError::into_inner);
        position.steps = steps;
        position.tools = 0;
    }

    /// The name of the next model or verifier step: the journal key of the event its answer
    /// makes (`cp{n}:e0`).
    pub(crate) fn event_name(&self) -> String {
        let position = self.position.lock().unwrap_or_else(PoisonError::into_inner);
        Key::event(position.steps.saturating_add(1)).to_string()
    }

    /// The name of the next tool step: `cp{n}:tool{j}:{name}`, the `j`-th call step `n` issued.
    pub(crate) fn tool_name(&self, tool: &str) -> String {
        let mut position = self.position.lock().unwrap_or_else(PoisonError::into_inner);
        let j = position.tools;
        position.tools = j.saturating_add(1);
        format!("cp{}:tool{j}:{tool}", position.steps)
    }

    /// Asks the handler to journal an effect. Synchronous, so that steps are created in the
    /// order the runtime calls its adapters; the answer comes through the returned receiver.
    pub(crate) fn begin(
        &self,
        name: String,
        kind: Kind,
        timeout: Option<Duration>,
        guard: Option<Guard>,
    ) -> oneshot::Receiver<Start> {
        let (reply, rx) = oneshot::channel();
        // A closed channel means the handler is gone: the receiver then reports it.
        let _ = self.begin.send(Begin {
            name,
            kind,
            timeout,
            guard,
            reply,
        });
        rx
    }

    /// Carries out `work` as the journaled effect `start` answers for: returns the journaled
    /// answer (replayed or live). `work` is polled only once the step is live, unless `now`:
    /// then it runs from the start (an effect whose job step is live), and its answer, if it
    /// comes first, waits for the step. An abandoned step never returns: the run is stopped
    /// the way it was the first time (kill switch, deadline) or by the runtime's own timer.
    pub(crate) async fn journaled(
        &self,
        start: oneshot::Receiver<Start>,
        work: impl Future<Output = Value>,
        now: bool,
    ) -> Result<Value, Fault> {
        tokio::pin!(work);
        tokio::pin!(start);
        let mut early = None;
        let start = loop {
            tokio::select! {
                start = &mut start => break start,
                value = &mut work, if now && early.is_none() => early = Some(value),
            }
        };
        let stored = match start {
            Err(_) => return Err(Fault::internal(HANDLER_GONE)),
            Ok(Start::Failed(message)) => return Err(Fault::internal(message)),
            Ok(Start::Replayed(stored)) => stored,
            Ok(Start::Live(ticket)) => {
                let Ticket { answer, stored } = ticket;
                tokio::pin!(stored);
                let outcome = match early {
                    Some(value) => {
                        let _ = answer.send(value);
                        stored.await
                    }
                    None => tokio::select! {
                        value = &mut work => {
                            let _ = answer.send(value);
                            stored.await
                        }
                        // The step decided first (cancel, deadline, timeout): stop the work.
                        outcome = &mut stored => outcome,
                    },
                };
                match outcome {
                    Ok(Ok(stored)) => stored,
                    Ok(Err(message)) => return Err(Fault::internal(message)),
                    Err(_) => return Err(Fault::internal(HANDLER_GONE)),
                }
            }
        };
        match stored {
            Stored::Done { value } => Ok(value),
            Stored::Abandoned { why, .. } => {
                match why {
                    Abandon::Cancelled => self.kill.kill(),
                    Abandon::Deadline => self.kill.expire(),
                    Abandon::Timeout | Abandon::Dropped => {}
                }
                std::future::pending().await
            }
        }
    }
}

/// An id of this attempt at an invocation, unlike any other attempt's: a step that finds the
/// start of its effect journaled with another attempt's id knows the effect may have happened.
pub(crate) fn attempt_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static ATTEMPTS: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        ATTEMPTS.fetch_add(1, Ordering::Relaxed)
    )
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
