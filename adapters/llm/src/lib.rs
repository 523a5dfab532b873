//! # terminus-llm
//!
//! Real models for Terminus: the runtime's [`terminus_runtime::Model`] over the two wire formats
//! that cover almost every model people run, OpenAI-compatible Chat Completions (OpenAI,
//! OpenRouter, DeepSeek, vLLM, Ollama, llama.cpp's server, LiteLLM) and Anthropic Messages,
//! streamed (the default) or not.
//!
//! The wire is kept apart from the meaning: [`openai`] and [`anthropic`] build request bodies and
//! parse responses without IO (lenient: unknown fields ignored, unknown finish reasons kept as
//! strings), [`sse`] decodes server-sent events in chunks of any size, [`error`] is the one table
//! from provider failures to the kernel's model errors, and [`LlmModel`] only moves bytes. The
//! retry decision stays in the kernel: the adapter never retries by itself; it reports a
//! `rate_limited`, `server` or `timeout` failure (with the provider's `Retry-After`) and the
//! kernel's backoff decides.
//!
//! The API key enters through [`ApiKey`], which never prints.
//!
//! ```no_run
//! use std::sync::Arc;
//! use terminus_kernel::Policy;
//! use terminus_llm::{ApiKey, LlmConfig, LlmModel, Provider};
//! use terminus_runtime::Run;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = LlmConfig::new(Provider::OpenAi, "http://127.0.0.1:8000/v1", "gpt-4.1-mini");
//! config.api_key = ApiKey::from_env("OPENAI_API_KEY");
//! let model = Arc::new(LlmModel::new(config)?);
//! let report = Run::new("Say hello.", Policy::default(), model).execute().await?;
//! println!("{}", report.result.unwrap_or_default());
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

pub mod anthropic;
mod body;
mod client;
pub mod error;
mod json_str;
pub mod openai;
mod reply;
pub mod responses;
mod secret;
pub mod sse;

pub use crate::client::{ConfigError, LlmConfig, LlmModel, Provider, Stream, TextSink};
pub use crate::reply::{Options, Reply, arguments, needs_more_work};
pub use crate::secret::ApiKey;

/// The output cap sent with every request whose config sets no `max_output_tokens`: a model
/// that rambles stops there instead of running until the call's timeout.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4096;
