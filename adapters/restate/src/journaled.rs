//! The run's adapters wrapped so that each call is a journaled Restate step: the model, every
//! tool and the verifier. The answers are stored in their own JSON encoding (below), faults
//! included, so a replay gives back exactly what the first execution got.

use crate::bridge::{Bridge, Kind};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use terminus_kernel::{ModelErrorKind, ModelTurn, ToolOutcome, Verdict};
use terminus_runtime::{
    Adapters, Fault, FaultKind, InDoubt, Model, ModelError, ModelFailure, ModelInfo, ModelRequest,
    RuntimeConfig, Tool, Verification, Verifier, in_doubt_outcome,
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
    for timeout in [
        &mut config.model_timeout,
        &mut config.tool_timeout,
        &mut config.verifier_timeout,
    ] {
        *timeout = timeout.map(|t| t + TIMER_MARGIN);
    }
    *adapters.model = Arc::new(JournaledModel {
        inner: adapters.model.clone(),
        bridge: bridge.clone(),
        timeout: model_timeout,
    });
    let names: Vec<String> = adapters.tools.names().map(str::to_owned).collect();
    for name in names {
        if let Some(tool) = adapters.tools.get(&name).cloned() {
            adapters.tools.insert(
                name.clone(),
                Arc::new(JournaledTool {
                    name,
                    inner: tool,
                    bridge: bridge.clone(),
                    timeout: tool_timeout,
                    in_doubt: config.in_doubt,
                }),
            );
        }
    }
    if let Some(verifier) = adapters.verifier.take() {
        *adapters.verifier = Some(Arc::new(JournaledVerifier {
            inner: verifier,
            bridge: bridge.clone(),
            timeout: verifier_timeout,
        }));
    }
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

struct JournaledModel {
    inner: Arc<dyn Model>,
    bridge: Bridge,
    timeout: Option<Duration>,
}

#[async_trait]
impl Model for JournaledModel {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        let start = self
            .bridge
            .begin(self.bridge.event_name(), Kind::Model, self.timeout, None);
        let work = async {
            let answer: ModelAnswer = self.inner.complete(request).await.into();
            encode(&answer)
        };
        let value = self.bridge.journaled(start, work).await?;
        let answer: ModelAnswer = decode(value, "model answer")?;
        answer.into()
    }

    fn info(&self) -> ModelInfo {
        self.inner.info()
    }

    fn reads_messages(&self) -> bool {
        self.inner.reads_messages()
    }
}

/// A tool call's answer, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ToolAnswer {
    Outcome(ToolOutcome),
    Fault(StoredFault),
}

struct JournaledTool {
    name: String,
    inner: Arc<dyn Tool>,
    bridge: Bridge,
    timeout: Option<Duration>,
    in_doubt: InDoubt,
}

impl Tool for JournaledTool {
    fn description(&self) -> &str {
        self.inner.description()
    }

    fn parameters(&self) -> Value {
        self.inner.parameters()
    }

    fn idempotent(&self) -> bool {
        self.inner.idempotent()
    }

    // Written out instead of `async fn`: the inner tool is called and the step begun when the
    // runtime calls this (in batch order), on a replay too, so the steps are created in the
    // same order every time and a scripted tool moves past the answers the journal holds. The
    // inner call's future is only awaited when the step is live.
    fn call<'life0, 'async_trait>(
        &'life0 self,
        arguments: Value,
    ) -> Pin<Box<dyn Future<Output = Result<ToolOutcome, Fault>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        let running = self.inner.call(arguments);
        let in_doubt = (!self.inner.idempotent()).then(|| match self.in_doubt {
            InDoubt::Stop => encode(&ToolAnswer::Fault(StoredFault {
                kind: "internal".to_owned(),
                message: format!(
                    "a call of `{}` was running when the service stopped, and `{}` is not \
                     idempotent: check its effect, then call the execution again",
                    self.name, self.name
                ),
            })),
            _ => encode(&ToolAnswer::Outcome(in_doubt_outcome(&self.name))),
        });
        let start = self.bridge.begin(
            self.bridge.tool_name(&self.name),
            Kind::Tool,
            self.timeout,
            in_doubt,
        );
        Box::pin(async move {
            let work = async {
                let answer = match running.await {
                    Ok(outcome) => ToolAnswer::Outcome(outcome),
                    Err(fault) => ToolAnswer::Fault(fault.into()),
                };
                encode(&answer)
            };
            let value = self.bridge.journaled(start, work).await?;
            match decode(value, "tool result")? {
                ToolAnswer::Outcome(outcome) => Ok(outcome),
                ToolAnswer::Fault(fault) => Err(fault.into()),
            }
        })
    }
}

/// A verification's answer, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum VerifyAnswer {
    Verdict(Verdict),
    Fault(StoredFault),
}

struct JournaledVerifier {
    inner: Arc<dyn Verifier>,
    bridge: Bridge,
    timeout: Option<Duration>,
}

#[async_trait]
impl Verifier for JournaledVerifier {
    async fn verify(&self, verification: Verification<'_>) -> Result<Verdict, Fault> {
        let start = self
            .bridge
            .begin(self.bridge.event_name(), Kind::Verify, self.timeout, None);
        let work = async {
            let answer = match self.inner.verify(verification).await {
                Ok(verdict) => VerifyAnswer::Verdict(verdict),
                Err(fault) => VerifyAnswer::Fault(fault.into()),
            };
            encode(&answer)
        };
        let value = self.bridge.journaled(start, work).await?;
        match decode(value, "verdict")? {
            VerifyAnswer::Verdict(verdict) => Ok(verdict),
            VerifyAnswer::Fault(fault) => Err(fault.into()),
        }
    }
    fn reads_transcript(&self) -> bool {
        self.inner.reads_transcript()
    }
}
