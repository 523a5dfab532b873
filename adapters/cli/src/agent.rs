//! `terminus agent CONFIG.toml --task TEXT`: a live agent from one config file: a real model
//! (`[model]`), the tools of its `[[mcp]]` servers plus the built-in `write_todos`, the kernel
//! policy, the context window and the verifier, with the progress lines, report and exit codes
//! of `terminus run`. With `--record FILE.json` the run is also written as a scenario file that
//! `terminus run` replays offline (see `record.rs`).

use crate::config::AgentConfig;
use crate::record::{Recorder, RecordingModel};
use crate::{INVALID, JournalArgs, drive, finish};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use terminus_llm::LlmModel;
use terminus_runtime::{LlmVerifier, Model, Run, RuntimeConfig, ToolSet, Verifier};
use terminus_scenario::ScenarioFile;
use terminus_tools::McpTools;

#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// The agent config (TOML).
    config: PathBuf,
    /// The task given to the model.
    #[arg(long, value_name = "TEXT")]
    task: String,
    /// Write the run as a scenario file that `terminus run` replays offline.
    #[arg(long, value_name = "FILE.json")]
    record: Option<PathBuf>,
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
    let recorder = args.record.as_ref().map(|_| Arc::new(Recorder::default()));
    let agent_model: Arc<dyn Model> = match &recorder {
        Some(recorder) => Arc::new(RecordingModel {
            inner: model.clone(),
            recorder: recorder.clone(),
        }),
        None => model.clone(),
    };
    if let Some(recorder) = &recorder {
        tools = recorder.tools(&tools);
    }
    let mut run = Run::new(args.task.clone(), config.policy.clone(), agent_model)
        .name("agent")
        .tools(tools)
        .execution(execution);
    let mut context = config.context.clone();
    if let (Some(spec), Some(tokenizer)) = (&mut context, tokenizer) {
        // The recording names the tokenizer the live run used, so the replay counts the same.
        spec.tokenizer = Some(tokenizer.name().to_owned());
        run = run.context(spec.policy(), tokenizer);
    }
    if config.verifier.as_ref().is_some_and(|v| v.kind == "model") {
        let verifier: Arc<dyn Verifier> = Arc::new(LlmVerifier::new(model.clone()));
        run = run.verifier(match &recorder {
            Some(recorder) => recorder.verifier(verifier),
            None => verifier,
        });
    }
    if let Some(store) = store {
        run = run.store(store);
    }
    // The MCP servers' own timeouts answer first (and are recorded); the runtime's is a backstop.
    let tool_timeout = config
        .mcp_configs(&dir)
        .iter()
        .map(|c| c.tool_timeout)
        .max()
        .unwrap_or(Duration::from_secs(60))
        + Duration::from_secs(1);
    let runtime = RuntimeConfig {
        lease: Duration::from_millis(args.journal.lease_ms),
        system_prompt: config.system_prompt.clone(),
        model_timeout: Some(model.config().timeout + Duration::from_secs(1)),
        tool_timeout: Some(tool_timeout),
        ..RuntimeConfig::default()
    };
    let result = drive(run, runtime).await;
    mcp.shutdown().await;
    if let (Some(path), Some(recorder)) = (&args.record, &recorder) {
        let description = format!(
            "Recorded by `terminus agent` from {} at {}.",
            model.config().model,
            model.config().base_url
        );
        let scenario = recorder.scenario(
            &args.task,
            &config.policy,
            context,
            config.system_prompt.clone(),
            description,
        );
        if let Err(e) = write_atomically(path, &scenario) {
            eprintln!(
                "terminus: cannot write the recording {}: {e}",
                path.display()
            );
            return crate::INTERNAL;
        }
        eprintln!("terminus: recorded to {}", path.display());
    }
    finish(None, result, args.journal.json, &file)
}

/// Writes `scenario` as pretty JSON next to `path`, then renames it over `path`: a reader never
/// sees half a file.
fn write_atomically(path: &std::path::Path, scenario: &ScenarioFile) -> std::io::Result<()> {
    let mut text = serde_json::to_string_pretty(scenario).map_err(std::io::Error::other)?;
    text.push('\n');
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}
