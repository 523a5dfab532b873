//! Runtime settings that are not part of the kernel's policy: timeouts, concurrency, the system
//! prompt and the worker's identity and lease.

use std::time::Duration;

/// How the runtime carries out the kernel's commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Longest time one model call may take; a slower call is dropped and fed to the kernel as
    /// a retryable `timeout` error. `None`: no limit. Default 120 s.
    pub model_timeout: Option<Duration>,
    /// Longest time one tool call may take; a slower call is dropped and answered with a
    /// `timeout` error. `None`: no limit. Default 60 s.
    pub tool_timeout: Option<Duration>,
    /// Longest time one verification may take; a slower one is asked again like a model call
    /// that timed out (the policy's backoff, up to `max_model_retries` retries), and the run
    /// stops with an internal fault if none answers. `None`: no limit. Default 120 s.
    pub verifier_timeout: Option<Duration>,
    /// How many tool calls of one turn run at the same time (at least 1). Default 4.
    pub max_concurrent_tools: usize,
    /// A system message put before the task. Default none.
    pub system_prompt: Option<String>,
    /// This worker's id, for claiming executions. Default `terminus-<pid>`.
    pub worker: String,
    /// How long a claim lasts; it is renewed at a third of that while the run lives.
    /// Default 30 s (the CLI's `--lease-ms`).
    pub lease: Duration,
    /// What a resumed run does with a tool call that was journaled as started but has no result
    /// and whose tool is not idempotent. Default [`InDoubt::AskModel`].
    pub in_doubt: InDoubt,
    /// Whether model calls' spans carry the prompt and the completion
    /// (`gen_ai.input.messages`, `gen_ai.output.messages`). Default off: traces then hold
    /// names, counts and classes, never the conversation.
    pub capture_content: bool,
    /// How the runtime writes a checkpoint for the agent when the kernel asks for one
    /// (`policy.auto_checkpoints`).
    pub auto_checkpoint: AutoCheckpoint,
}

/// How the runtime writes a checkpoint for the agent (the kernel's `Command::Checkpoint`): one
/// model call with the kernel's prompt and no tools, whose reply is the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoCheckpoint {
    /// The model to ask, by name, on the run's model endpoint. `None` (the default): the run's
    /// own model.
    pub model: Option<String>,
    /// The longest reply asked for, in tokens. Default [`AutoCheckpoint::DEFAULT_MAX_TOKENS`].
    pub max_tokens: u32,
}

impl AutoCheckpoint {
    /// The default cap of a checkpoint's reply.
    pub const DEFAULT_MAX_TOKENS: u32 = 400;
}

impl Default for AutoCheckpoint {
    fn default() -> Self {
        AutoCheckpoint {
            model: None,
            max_tokens: Self::DEFAULT_MAX_TOKENS,
        }
    }
}

/// What to do, on resume, with a started call of a non-idempotent tool that has no result: the
/// process stopped while it ran, so its effect may or may not have happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InDoubt {
    /// Do not run it again; answer it with a `failed` result that says so, and let the model
    /// decide (check the effect, or call again). The default.
    #[default]
    AskModel,
    /// Stop: the run ends with [`crate::RunError::InDoubt`] (exit code 3) and can be resumed
    /// once someone has checked the effect.
    Stop,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            model_timeout: Some(Duration::from_secs(120)),
            tool_timeout: Some(Duration::from_secs(60)),
            verifier_timeout: Some(Duration::from_secs(120)),
            max_concurrent_tools: 4,
            system_prompt: None,
            worker: format!("terminus-{}", std::process::id()),
            lease: Duration::from_millis(30_000),
            in_doubt: InDoubt::AskModel,
            capture_content: false,
            auto_checkpoint: AutoCheckpoint::default(),
        }
    }
}
