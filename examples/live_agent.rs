//! A live agent: a real OpenAI-compatible model server and a native tool, under the kernel.
//! Point it at any server that speaks Chat Completions (llama.cpp's `llama-server`, vLLM,
//! Ollama, OpenAI) with `TERMINUS_EXAMPLE_BASE_URL` (default `http://127.0.0.1:8080/v1`),
//! `TERMINUS_EXAMPLE_MODEL` and, if it wants one, a key in `OPENAI_API_KEY`.
//!
//! `TERMINUS_EXAMPLE_BASE_URL=http://127.0.0.1:8080/v1 cargo run -p terminus-examples --example live_agent`
//!
//! Whatever the model does, the run ends with a named reason inside its budgets.

use serde::Deserialize;
use std::sync::Arc;
use terminus_kernel::Policy;
use terminus_llm::{ApiKey, LlmConfig, LlmModel, Provider};
use terminus_runtime::{Run, ToolSet};
use terminus_tools::native;

/// The arguments of `word_count`.
#[derive(Deserialize, schemars::JsonSchema)]
struct Text {
    /// The text to count the words of.
    text: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let env = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    let mut config = LlmConfig::new(
        Provider::OpenAi,
        env("TERMINUS_EXAMPLE_BASE_URL", "http://127.0.0.1:8080/v1"),
        env("TERMINUS_EXAMPLE_MODEL", "local"),
    );
    config.api_key = ApiKey::from_env("OPENAI_API_KEY");
    config.max_output_tokens = Some(256);
    let model = match LlmModel::new(config) {
        Ok(model) => Arc::new(model),
        Err(e) => {
            eprintln!("the model config: {e}");
            std::process::exit(2);
        }
    };
    let count = native("Counts the words of a text.", |t: Text| async move {
        Ok::<_, terminus_tools::ToolFailure>(t.text.split_whitespace().count())
    });
    let policy = Policy {
        max_steps: 20,
        max_model_calls: 8,
        ..Policy::default()
    };
    let report = Run::new(
        "How many words are in 'the quick brown fox'? Use the word_count tool, then answer.",
        policy,
        model,
    )
    .tools(ToolSet::new().with("word_count", Arc::new(count)))
    .execute()
    .await;
    match report {
        Ok(report) => println!(
            "{} ({}) after {} model calls and {} tool calls: {}",
            report.outcome.outcome_str(),
            report.outcome.reason_str(),
            report.model_calls,
            report.tool_calls,
            report.result.unwrap_or_default()
        ),
        Err(e) => {
            eprintln!("the run failed: {e}");
            std::process::exit(3);
        }
    }
}
