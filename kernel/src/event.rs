//! The concrete events a host feeds the machine, with their payloads.

use crate::json::Json;
use crate::name::{CallId, Name};
use serde::{Deserialize, Serialize};

/// Token usage a provider reported for one turn. Absent usage means unknown, not zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

impl Usage {
    /// Both counts are zero.
    pub const fn is_zero(&self) -> bool {
        self.input_tokens == 0 && self.output_tokens == 0
    }
}

/// Why the provider stopped generating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// A natural stop (or the provider did not say).
    #[default]
    Stop,
    /// The output-length limit cut the reply.
    Length,
    /// The provider's content filter cut the reply.
    ContentFilter,
    /// The reply ends in tool calls.
    ToolCalls,
    /// The client cut the reply: its text repeated the same window over and over (see
    /// [`crate::repetition`]). Never an answer.
    Repetition,
}

/// One tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's call id (the runtime makes one up when the provider has none), with its
    /// fingerprint (computed once, when it was made).
    pub id: CallId,
    /// The tool name, with its fingerprint.
    pub name: Name,
    /// The arguments, as JSON, with their fingerprint (computed once, when they were made).
    pub arguments: Json,
}

impl ToolCall {
    /// A call of tool `name` with `arguments`, hashed here once for the repeat detector.
    pub fn new(
        id: impl Into<CallId>,
        name: impl Into<Name>,
        arguments: impl Into<Json>,
    ) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }
}

/// One model turn.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ModelTurn {
    /// The visible content.
    pub text: String,
    /// Tool calls requested.
    pub tool_calls: Vec<ToolCall>,
    /// The model's own opinion on whether it is done (tri-state, rule 2).
    pub needs_more_work: Option<bool>,
    /// Reported usage; `None` means unknown.
    pub usage: Option<Usage>,
    /// Why generation stopped.
    pub finish: Finish,
    /// The model produced reasoning (thinking) output.
    pub reasoning: bool,
    /// Tool calls the model wrote in its text, as the host found them before the machine saw
    /// the turn (see [`crate::textcall::recover`]); `None` (and absent from JSON) when none.
    /// Boxed: rare, and every event carries the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_calls: Option<Box<TextCalls>>,
}

impl ModelTurn {
    /// How many of `tool_calls` the host recovered from the text (see [`crate::textcall`]).
    pub fn recovered_calls(&self) -> u32 {
        self.text_calls.as_ref().map_or(0, |t| t.recovered)
    }

    /// The offered tools a nudge names for a call written in the text that did not run.
    pub fn suggested_tools(&self) -> &[String] {
        self.text_calls.as_ref().map_or(&[], |t| &t.suggested)
    }
}

/// The class of a model-call failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelErrorKind {
    /// HTTP 429 or the provider's equivalent (retryable).
    RateLimited,
    /// A 5xx (retryable).
    Server,
    /// The call timed out (retryable).
    Timeout,
    /// Authentication failed (fatal).
    Auth,
    /// The provider rejected the request (fatal).
    BadRequest,
    /// The conversation does not fit the context window even after pruning.
    ContextOverflow,
}

impl ModelErrorKind {
    /// Every kind, in the scenario format's order.
    pub const ALL: [ModelErrorKind; 6] = [
        Self::RateLimited,
        Self::Server,
        Self::Timeout,
        Self::Auth,
        Self::BadRequest,
        Self::ContextOverflow,
    ];

    /// The snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::RateLimited => "rate_limited",
            Self::Server => "server",
            Self::Timeout => "timeout",
            Self::Auth => "auth",
            Self::BadRequest => "bad_request",
            Self::ContextOverflow => "context_overflow",
        }
    }
}

/// The class of a tool failure (`docs/design.md`, "Scenario files").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorKind {
    /// Unrecoverable: retrying cannot help.
    PermissionDenied,
    /// Unrecoverable: the tool (or its target) does not exist.
    NotFound,
    /// Unrecoverable: credentials rejected.
    AuthFailed,
    /// The call timed out.
    Timeout,
    /// The arguments were wrong; the model can fix them.
    InvalidArguments,
    /// Any other failure.
    Failed,
}

impl ToolErrorKind {
    /// Every kind.
    pub const ALL: [ToolErrorKind; 6] = [
        Self::PermissionDenied,
        Self::NotFound,
        Self::AuthFailed,
        Self::Timeout,
        Self::InvalidArguments,
        Self::Failed,
    ];

    /// Whether retrying can never help (rule 7).
    pub const fn is_unrecoverable(self) -> bool {
        matches!(
            self,
            Self::PermissionDenied | Self::NotFound | Self::AuthFailed
        )
    }

    /// The snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::PermissionDenied => "permission_denied",
            Self::NotFound => "not_found",
            Self::AuthFailed => "auth_failed",
            Self::Timeout => "timeout",
            Self::InvalidArguments => "invalid_arguments",
            Self::Failed => "failed",
        }
    }
}

/// What one tool execution returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolOutcome {
    /// Success, with the tool's output and its fingerprint (computed once, when it was made).
    Ok(Json),
    /// Failure.
    Error {
        /// The class.
        kind: ToolErrorKind,
        /// A message for the model.
        message: String,
    },
}

impl ToolOutcome {
    /// Success with `output`, hashed here once for the repeat detector.
    pub fn ok(output: impl Into<Json>) -> ToolOutcome {
        ToolOutcome::Ok(output.into())
    }
}

/// The result of one executed tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the call this answers, with its fingerprint (computed once, when it was made).
    pub call_id: CallId,
    /// The tool name, with its fingerprint.
    pub name: Name,
    /// What it returned.
    pub outcome: ToolOutcome,
}

/// The verifier's verdict on a completion claim.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Verdict {
    /// Whether the task is complete.
    pub complete: bool,
    /// What is still missing, in the verifier's words.
    pub missing: Vec<String>,
}

/// An input to the machine. Time arrives only as [`Event::Tick`] (milliseconds since the start of
/// the run, read by the host's clock), so the same events always give the same path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// The model answered the last [`crate::Command::CallModel`].
    ModelTurn(ModelTurn),
    /// The last model call failed.
    ModelError {
        /// The class.
        kind: ModelErrorKind,
        /// The delay the provider asked for.
        retry_after_ms: Option<u64>,
    },
    /// The results of the executed calls of the last [`crate::Command::RunTools`], any order.
    ToolResults(Vec<ToolResult>),
    /// The verifier answered the last [`crate::Command::Verify`].
    Verdict(Verdict),
    /// A clock reading: milliseconds since the run started.
    Tick {
        /// Now, in milliseconds since the start of the run.
        now_ms: u64,
    },
    /// The host's kill switch.
    Cancel,
}

impl Event {
    /// A short label for traces.
    pub const fn label(&self) -> &'static str {
        match self {
            Event::ModelTurn(_) => "model_turn",
            Event::ModelError { .. } => "model_error",
            Event::ToolResults(_) => "tool_results",
            Event::Verdict(_) => "verdict",
            Event::Tick { .. } => "tick",
            Event::Cancel => "cancel",
        }
    }
}

/// What the host found of written calls in a turn (see [`crate::textcall::recover`]), kept with the turn.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TextCalls {
    /// How many of the turn's `tool_calls` were recovered from its text.
    #[serde(skip_serializing_if = "is_zero")]
    pub recovered: u32,
    /// The offered tools the nudge names, when a written call could not run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub suggested: Vec<String>,
}

impl TextCalls {
    /// Nothing was found.
    pub fn is_empty(&self) -> bool {
        self.recovered == 0 && self.suggested.is_empty()
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
