//! `terminus agent CONFIG.toml --task TEXT`: a live agent from one config file: a real model
//! (`[model]`), the tools of its `[[mcp]]` servers plus the built-in `write_todos`, the kernel
//! policy, the context window and the verifier, with the progress lines, report and exit codes
//! of `terminus run`.

use crate::config::AgentConfig;
use crate::{INVALID, JournalArgs, drive, finish};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use terminus_llm::LlmModel;
use terminus_runtime::{LlmVerifier, Run, RuntimeConfig, ToolSet};
use terminus_tools::McpTools;

#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// The agent config (TOML).
    config: PathBuf,
    /// The task given to the model.
    #[arg(long, value_name = "TEXT")]
    task: String,
    #[command(flatten)]
    journal: JournalArgs,
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
    let store = match args.journal.store().await {
        Ok(store) => store,
        Err(code) => return code,
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
    let execution = args.journal.execution("agent");
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
        lease: Duration::from_millis(args.journal.lease_ms),
        system_prompt: config.system_prompt.clone(),
        model_timeout: Some(model.config().timeout + Duration::from_secs(1)),
        ..RuntimeConfig::default()
    };
    let result = drive(run, runtime).await;
    mcp.shutdown().await;
    finish(None, result, args.journal.json, &file)
}
