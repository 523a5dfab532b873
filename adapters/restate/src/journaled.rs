//! The run's adapters under one [`Layer`] that makes each call a journaled Restate step: the
//! model, every tool and the verifier. The answers are stored in their own JSON encoding
//! (below), faults included, so a replay gives back exactly what the first execution got.

use crate::bridge::{Bridge, Kind};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use terminus_kernel::{ModelErrorKind, ModelTurn, ToolOutcome, Verdict};
use terminus_runtime::layer::{Answer, BoxFuture, Call, Layer, Next, Site};
use terminus_runtime::{
    Adapters, Fault, FaultKind, InDoubt, ModelError, ModelFailure, RuntimeConfig, in_doubt_outcome,
};

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
                    match self.bridge.journaled(start, work).await {
                        Ok(value) => decode_answer(site, value),
                        Err(fault) => Answer::fault(site, fault),
                    }
                })
            }
            // The inner tool is called, and the step begun, now, on a replay too, so the steps
            // are created in batch order every time and a scripted tool moves past the answers
            // the journal holds. The inner call's future is only awaited when the step is live.
            Call::Tool {
                name, idempotent, ..
            } => {
                let running = next.run(call);
                let in_doubt = (!idempotent).then(|| match self.in_doubt {
                    InDoubt::Stop => encode(&ToolAnswer::Fault(StoredFault {
                        kind: "internal".to_owned(),
                        message: format!(
                            "a call of `{name}` was running when the service stopped, and \
                             `{name}` is not idempotent: check its effect, then call the \
                             execution again"
                        ),
                    })),
                    _ => encode(&ToolAnswer::Outcome(in_doubt_outcome(name))),
                });
                let start = self.bridge.begin(
                    self.bridge.tool_name(name),
                    Kind::Tool,
                    self.tool_timeout,
                    in_doubt,
                );
                Box::pin(async move {
                    let work = async { encode_answer(running.await) };
                    match self.bridge.journaled(start, work).await {
                        Ok(value) => decode_answer(site, value),
                        Err(fault) => Answer::fault(site, fault),
                    }
                })
            }
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
