//! The run's adapters under one [`Layer`] that makes each call a journaled Restate step: the
//! model, every tool and the verifier. The answers are stored in their own JSON encoding
//! (below), faults included, so a replay gives back exactly what the first execution got.

use crate::bridge::{Bridge, Guard, HANDLER_GONE, JobStart, Kind};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use terminus_kernel::{ModelErrorKind, ModelTurn, ToolOutcome, Verdict};
use terminus_runtime::layer::{Answer, BoxFuture, Call, Layer, Next, Site};
use terminus_runtime::{
    Adapters, Fault, FaultKind, InDoubt, ModelError, ModelFailure, RuntimeConfig, in_doubt_outcome,
    jobs, lost_job_outcome,
};
use tokio::sync::oneshot;

/// How much later than a step's own timeout the runtime's timer for the same call fires: the
/// step decides (and journals) the timeout, the runtime's timer then ends the wait the same way
/// on every replay.
pub(crate) const TIMER_MARGIN: Duration = Duration::from_secs(1);

/// Wraps the run's adapters: each call becomes a journaled step with the timeout the config
/// gave the call, and the runtime's own timeouts move [`TIMER_MARGIN`] later.
pub(crate) fn wrap(adapters: &mut Adapters<'_>, bridge: &Bridge) {
    let config: &mut RuntimeConfig = &mut *adapters.config;
    let model_timeout = config.model_timeout;
    let tool_timeout = config.tool_timeout;
    let verifier_timeout = config.verifier_timeout;
    let in_doubt = config.in_doubt;
    for timeout in [
        &mut config.model_timeout,
        &mut config.tool_timeout,
        &mut config.verifier_timeout,
    ] {
        *timeout = timeout.map(|t| t + TIMER_MARGIN);
    }
    adapters.layer(Arc::new(Journaled {
        bridge: bridge.clone(),
        model_timeout,
        tool_timeout,
        verifier_timeout,
        in_doubt,
    }));
}

/// A fault, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StoredFault {
    kind: String,
    message: String,
}

impl From<Fault> for StoredFault {
    fn from(fault: Fault) -> StoredFault {
        let kind = match fault.kind {
            FaultKind::InvalidInput => "invalid_input",
            FaultKind::Transient => "transient",
            _ => "internal",
        };
        StoredFault {
            kind: kind.to_owned(),
            message: fault.message,
        }
    }
}

impl From<StoredFault> for Fault {
    fn from(stored: StoredFault) -> Fault {
        match stored.kind.as_str() {
            "invalid_input" => Fault::invalid_input(stored.message),
            "transient" => Fault::transient(stored.message),
            _ => Fault::internal(stored.message),
        }
    }
}

/// A model call's answer, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ModelAnswer {
    Turn(ModelTurn),
    Failure {
        kind: ModelErrorKind,
        retry_after_ms: Option<u64>,
        message: String,
    },
    Fault(StoredFault),
}

impl From<Result<ModelTurn, ModelError>> for ModelAnswer {
    fn from(answer: Result<ModelTurn, ModelError>) -> ModelAnswer {
        match answer {
            Ok(turn) => ModelAnswer::Turn(turn),
            Err(ModelError::Failure(f)) => ModelAnswer::Failure {
                kind: f.kind,
                retry_after_ms: f.retry_after_ms,
                message: f.message,
            },
            Err(ModelError::Fault(fault)) => ModelAnswer::Fault(fault.into()),
        }
    }
}

impl From<ModelAnswer> for Result<ModelTurn, ModelError> {
    fn from(answer: ModelAnswer) -> Result<ModelTurn, ModelError> {
        match answer {
            ModelAnswer::Turn(turn) => Ok(turn),
            ModelAnswer::Failure {
                kind,
                retry_after_ms,
                message,
            } => Err(ModelError::Failure(ModelFailure {
                kind,
                retry_after_ms,
                message,
            })),
            ModelAnswer::Fault(fault) => Err(ModelError::Fault(fault.into())),
        }
    }
}

/// Encodes an answer for the journal (the answer types are plain data: this cannot fail, and
/// a failure would be stored as a fault).
fn encode<T: Serialize>(answer: &T) -> Value {
    serde_json::to_value(answer).unwrap_or_else(
        |e| serde_json::json!({ "fault": { "kind": "internal", "message": e.to_string() } }),
    )
}

/// Decodes a journaled answer; a journal written by another version that does not decode is a
/// fault that names the step.
fn decode<T: for<'de> Deserialize<'de>>(value: Value, what: &str) -> Result<T, Fault> {
    serde_json::from_value(value)
        .map_err(|e| Fault::internal(format!("the journaled {what} cannot be read: {e}")))
}

/// A tool call's answer, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ToolAnswer {
    Outcome(ToolOutcome),
    Fault(StoredFault),
}

/// A verification's answer, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum VerifyAnswer {
    Verdict(Verdict),
    Fault(StoredFault),
}

/// The layer: each call is a step named after where the run is, begun when the runtime makes
/// the call (so the steps are created in the same order on every replay), with the timeout the
/// config gave the call.
struct Journaled {
    bridge: Bridge,
    model_timeout: Option<Duration>,
    tool_timeout: Option<Duration>,
    verifier_timeout: Option<Duration>,
    in_doubt: InDoubt,
}

impl Layer for Journaled {
    fn around<'a>(&'a self, call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Answer> {
        let site = call.site();
        match call {
            // The inner model or verifier is only called when the step is live.
            Call::Model(_) | Call::Verify(_) => {
                let (kind, timeout) = match site {
                    Site::Model => (Kind::Model, self.model_timeout),
                    _ => (Kind::Verify, self.verifier_timeout),
                };
                let start = self
                    .bridge
                    .begin(self.bridge.event_name(), kind, timeout, None);
                Box::pin(async move {
                    let work = async { encode_answer(next.run(call).await) };
                    answer_of(site, self.bridge.journaled(start, work, false).await)
                })
            }
            // The inner tool is called, and the step begun, now, on a replay too, so the steps
            // are created in batch order every time and a scripted tool moves past the answers
            // the journal holds. The inner call's future is only awaited when the step is live
            // (or, for a call that must not run twice, when its job step is).
            Call::Tool {
                name, idempotent, ..
            } => {
                let running = next.run(call);
                let tool_name = self.bridge.tool_name(name);
                if idempotent {
                    let start = self
                        .bridge
                        .begin(tool_name, Kind::Tool, self.tool_timeout, None);
                    return Box::pin(async move {
                        let work = async { encode_answer(running.await) };
                        answer_of(site, self.bridge.journaled(start, work, false).await)
                    });
                }
                let in_doubt = match self.in_doubt {
                    InDoubt::Stop => encode(&ToolAnswer::Fault(StoredFault {
                        kind: "internal".to_owned(),
                        message: format!(
                            "a call of `{name}` was running when the service stopped, and \
                             `{name}` is not idempotent: check its effect, then call the \
                             execution again"
                        ),
                    })),
                    _ => encode(&ToolAnswer::Outcome(in_doubt_outcome(name))),
                };
                let (job, job_start) = oneshot::channel();
                let start = self.bridge.begin(
                    tool_name,
                    Kind::Tool,
                    self.tool_timeout,
                    Some(Guard { in_doubt, job }),
                );
                Box::pin(async move {
                    let (work, now) = match job_start.await {
                        Err(_) => {
                            return Answer::fault(site, Fault::internal(HANDLER_GONE));
                        }
                        Ok(JobStart::Failed(message)) => {
                            return Answer::fault(site, Fault::internal(message));
                        }
                        Ok(JobStart::Replayed(job)) => {
                            (jobs_of(name, Earlier::Job(job), running), false)
                        }
                        Ok(JobStart::Live { job, journaled }) => (
                            jobs_of(name, Earlier::None { job, journaled }, running),
                            true,
                        ),
                    };
                    let work = async { encode_answer(work.await) };
                    answer_of(site, self.bridge.journaled(start, work, now).await)
                })
            }
        }
    }
}

/// What the job step of a call that must not run twice holds, as its adapter sees it.
enum Earlier {
    /// Replayed: the job an earlier attempt started (`None`: none).
    Job(Option<Value>),
    /// Live: this attempt starts the call, and journals the job it starts with these.
    None {
        job: oneshot::Sender<Option<Value>>,
        journaled: oneshot::Receiver<bool>,
    },
}

/// The call `running` with its job journaled as a step (`earlier`), not only in the run's own
/// journal ([`terminus_runtime::jobs`]): the job a live call starts goes to its job step, and
/// the call goes on once it is stored; a call an earlier attempt started waits for that
/// attempt's job instead of starting anything. What the call says of its job and its status
/// reaches the run's own scope too. A job its server no longer knows makes the call's answer
/// the in-doubt one the runtime gives ([`lost_job_outcome`]), as the step's answer, so that
/// every replay gives the run the same.
async fn jobs_of(tool: &str, earlier: Earlier, running: BoxFuture<'_, Answer>) -> Answer {
    let say = |_: &Value, status: String| jobs::status(status);
    match earlier {
        Earlier::Job(None) => running.await,
        Earlier::Job(Some(job)) => {
            jobs::started(job.clone()).await;
            let (answer, lost) = jobs::scope(Some(job), |_| async { false }, say, running).await;
            match lost {
                Some(why) => Answer::Tool(Ok(lost_job_outcome(tool, &why))),
                None => answer,
            }
        }
        Earlier::None { job, journaled } => {
            let step = Mutex::new(Some((job, journaled)));
            let journal = |job: Value| {
                let step = step.lock().unwrap_or_else(PoisonError::into_inner).take();
                async move {
                    let stored = match step {
                        Some((tx, journaled)) => {
                            tx.send(Some(job.clone())).is_ok() && journaled.await.unwrap_or(false)
                        }
                        // A second job of one call: its step holds the first.
                        None => false,
                    };
                    jobs::started(job).await;
                    stored
                }
            };
            let (answer, _) = jobs::scope(None, journal, say, running).await;
            // Ended without a job: the job step stores none (the sender dropped with `step`).
            answer
        }
    }
}

/// An answer in the journal's encoding of its kind.
fn encode_answer(answer: Answer) -> Value {
    match answer {
        Answer::Model(answer) => encode(&ModelAnswer::from(answer)),
        Answer::Tool(answer) => encode(&match answer {
            Ok(outcome) => ToolAnswer::Outcome(outcome),
            Err(fault) => ToolAnswer::Fault(fault.into()),
        }),
        Answer::Verdict(answer) => encode(&match answer {
            Ok(verdict) => VerifyAnswer::Verdict(verdict),
            Err(fault) => VerifyAnswer::Fault(fault.into()),
        }),
    }
}

/// The answer of a journaled call to `site`: its step's, or the fault of a step that failed.
fn answer_of(site: Site, journaled: Result<Value, Fault>) -> Answer {
    match journaled {
        Ok(value) => decode_answer(site, value),
        Err(fault) => Answer::fault(site, fault),
    }
}

/// The journaled answer of a call to `site`; one that does not decode is a fault.
fn decode_answer(site: Site, value: Value) -> Answer {
    let decoded = match site {
        Site::Model => {
            decode::<ModelAnswer>(value, "model answer").map(|a| Answer::Model(a.into()))
        }
        Site::Tool => decode(value, "tool result").map(|a| {
            Answer::Tool(match a {
                ToolAnswer::Outcome(outcome) => Ok(outcome),
                ToolAnswer::Fault(fault) => Err(fault.into()),
            })
        }),
        Site::Verifier => decode(value, "verdict").map(|a| {
            Answer::Verdict(match a {
                VerifyAnswer::Verdict(verdict) => Ok(verdict),
                VerifyAnswer::Fault(fault) => Err(fault.into()),
            })
        }),
    };
    decoded.unwrap_or_else(|fault| Answer::fault(site, fault))
}
