//! The model port: one async call per kernel `CallModel` command.

use crate::fault::Fault;
use crate::message::Message;
use crate::tool::ToolSpec;
use async_trait::async_trait;
use std::fmt;
use terminus_kernel::{CallReason, ModelErrorKind, ModelTurn};

/// What the runtime asks the model for.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    /// The conversation so far (borrowed: the runtime never copies it per call).
    pub messages: &'a [Message],
    /// The tools of the run. They are given even when `tools_enabled` is false, because
    /// providers refuse a conversation that holds tool calls but defines no tools: an adapter
    /// sends them with the provider's "no tool may be called" choice then.
    pub tools: &'a [ToolSpec],
    /// Whether the model may call tools (false for the kernel's final-answer call and for a
    /// verifier's call).
    pub tools_enabled: bool,
    /// What the call is for.
    pub purpose: Purpose<'a>,
}

/// What a model call is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose<'a> {
    /// A turn of the agent, asked for by the kernel.
    Turn {
        /// Why the kernel makes this call.
        reason: CallReason,
        /// The model call's number in the run (1-based, retries included).
        call: u32,
    },
    /// A verdict for [`crate::LlmVerifier`] (not counted by the kernel).
    Verify,
    /// A checkpoint written for the agent (the kernel's `Command::Checkpoint`, counted in
    /// `stats.auto_checkpoints`): no tools, a reply of at most `max_tokens`, from `model` when
    /// one is named (else the run's model).
    Checkpoint {
        /// The model to ask, on the same endpoint.
        model: Option<&'a str>,
        /// The longest reply asked for.
        max_tokens: u32,
    },
    /// A plan asked of the model by a plan generator (`terminus_orchestrator::Generator`): no
    /// tools, not counted by any run's kernel.
    Plan {
        /// The model call for this plan (1-based, rejected plans included).
        attempt: u32,
    },
}

/// A model call that failed in a way the kernel knows how to handle (retry with backoff, abort
/// with `model_error`, `context_exhausted`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFailure {
    /// The class of the failure.
    pub kind: ModelErrorKind,
    /// The delay the provider asked for before the next call.
    pub retry_after_ms: Option<u64>,
    /// The provider's message, for the journal and progress lines.
    pub message: String,
}

impl ModelFailure {
    /// A failure of `kind` with a message.
    pub fn new(kind: ModelErrorKind, message: impl Into<String>) -> ModelFailure {
        ModelFailure {
            kind,
            retry_after_ms: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for ModelFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)?;
        if let Some(ms) = self.retry_after_ms {
            write!(f, " (retry after {ms} ms)")?;
        }
        Ok(())
    }
}

/// Why a model call returned no turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelError {
    /// The provider failed; the failure is fed to the kernel as `Event::ModelError`.
    Failure(ModelFailure),
    /// The adapter cannot go on at all (a scripted model ran out of turns, a broken
    /// configuration): the run stops with [`crate::RunError::Fault`] and nothing is fed to the
    /// kernel.
    Fault(Fault),
}

impl From<ModelFailure> for ModelError {
    fn from(f: ModelFailure) -> Self {
        ModelError::Failure(f)
    }
}

impl From<Fault> for ModelError {
    fn from(f: Fault) -> Self {
        ModelError::Fault(f)
    }
}

/// What a model is, for traces (`gen_ai.provider.name`, `gen_ai.request.model`). Empty strings
/// mean unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelInfo {
    /// The provider: `openai`, `anthropic`, or a name of the implementer's choice.
    pub provider: String,
    /// The model asked for.
    pub model: String,
}

/// A language model. Implementations turn the conversation into one [`ModelTurn`]: its text,
/// tool calls, `needs_more_work` opinion, usage and finish reason. A turn whose tool calls have
/// empty ids gets ids from the runtime (`call-{call}-{index}`).
///
/// The runtime applies the per-call timeout ([`crate::RuntimeConfig::model_timeout`]); a
/// timed-out call is fed to the kernel as a retryable `timeout` error.
#[async_trait]
pub trait Model: Send + Sync {
    /// One model turn.
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelTurn, ModelError>;

    /// The provider and model, for traces. Default: unknown. An adapter may also record the
    /// response's `gen_ai.response.model` and `gen_ai.response.id` on the current span (the
    /// runtime's `chat` span, see [`crate::semconv`]) while it answers.
    fn info(&self) -> ModelInfo {
        ModelInfo::default()
    }

    /// Whether [`Model::complete`] reads [`ModelRequest::messages`]. Default: true. A model
    /// that answers without looking at the conversation (a scripted one) says false; when
    /// nothing else reads it either (the verifier, a context window, traces that capture
    /// content), the runtime keeps no conversation, so a run's memory, resumed or not, does not
    /// grow with its length (the messages it is sent are then only the system prompt and task).
    fn reads_messages(&self) -> bool {
        true
    }
}
