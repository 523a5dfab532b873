//! `terminus agent CONFIG.toml --task TEXT`: a live agent from one config file: a real model
//! (`[model]`), the tools of its `[[mcp]]` servers plus the built-in `write_todos`, the kernel
//! policy, the context window and the verifier, with the progress lines, report and exit codes
//! of `terminus run`.

use crate::config::AgentConfig;
use crate::{INVALID, drive, finish, open_store, parse_durability};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use terminus_llm::LlmModel;
use terminus_runtime::{LlmVerifier, Run, RuntimeConfig, ToolSet};
use terminus_store::Durability;
use terminus_tools::McpTools;

#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// The agent config (TOML).
    config: PathBuf,
    /// The task given to the model.
    #[arg(long, value_name = "TEXT")]
    task: String,
    /// Durable journal: a SQLite file (created if missing) or a postgres:// URL. Without it the
    /// journal is in memory.
    #[arg(long, value_name = "PATH|URL")]
    journal: Option<String>,
    /// What a committed SQLite entry survives: `process` (default) or `power-loss` (fsync).
    #[arg(long, value_name = "MODE", default_value = "process", value_parser = parse_durability)]
    durability: Durability,
    /// The execution id (default: `agent-` and the current time).
    #[arg(long, value_name = "ID")]
    execution: Option<String>,
    /// How long the claim on the execution lasts, in milliseconds; renewed while the run lives.
    #[arg(long, value_name = "N", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    lease_ms: u64,
    /// Print the report as JSON, as the last line on stdout.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn agent(args: AgentArgs) -> u8 {
    let (config, dir) = match AgentConfig::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("terminus: {e}");
            return INVALID;
        }
    };
    let file = args.config.display().to_string();
    let llm = match config.llm_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("terminus: {file}: {e}");
            return INVALID;
        }
    };
    let model = match LlmModel::new(llm) {
        Ok(m) => Arc::new(m),
        Err(e) => {
            eprintln!("terminus: {file}: [model]: {e}");
            return INVALID;
        }
    };
    let tokenizer = match &config.context {
        Some(spec) if spec.tokenizer.is_some() => {
            match terminus_tokenizer::by_name(spec.tokenizer_name()) {
                Some(t) => Some(t),
                None => {
                    eprintln!(
                        "terminus: {file}: [context].tokenizer: unknown tokenizer {:?}",
                        spec.tokenizer_name()
                    );
                    return INVALID;
                }
            }
        }
        Some(_) => Some(model.tokenizer()),
        None => None,
    };
    let store = match &args.journal {
        Some(journal) => match open_store(journal, args.durability).await {
            Ok(store) => Some(store),
            Err(code) => return code,
        },
        None => None,
    };
    // Servers last: nothing is started for a config that fails a check above.
    let mcp = match McpTools::connect(&config.mcp_configs(&dir)).await {
        Ok(m) => m,
        Err(e) => {
            eprintln!("terminus: {file}: {e}");
            return INVALID;
        }
    };
    let mut tools = ToolSet::new();
    mcp.add_to(&mut tools);
    let execution = args.execution.clone().unwrap_or_else(|| {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        format!("agent-{ms}")
    });
    eprintln!(
        "terminus: running agent {} on {} (execution {execution}; tools: {})",
        model.config().model,
        model.config().base_url,
        tools.names().collect::<Vec<_>>().join(", ")
    );
    let mut run = Run::new(args.task.clone(), config.policy.clone(), model.clone())
        .name("agent")
        .tools(tools)
        .execution(execution);
    if let (Some(spec), Some(tokenizer)) = (&config.context, tokenizer) {
        run = run.context(spec.policy(), tokenizer);
    }
    if config.verifier.as_ref().is_some_and(|v| v.kind == "model") {
        run = run.verifier(Arc::new(LlmVerifier::new(model.clone())));
    }
    if let Some(store) = store {
        run = run.store(store);
    }
    let runtime = RuntimeConfig {
        lease: Duration::from_millis(args.lease_ms),
        system_prompt: config.system_prompt.clone(),
        model_timeout: Some(model.config().timeout + Duration::from_secs(1)),
        ..RuntimeConfig::default()
    };
    let result = drive(run, runtime).await;
    mcp.shutdown().await;
    finish(None, result, args.json, &file)
}
