//! `terminus agent CONFIG.toml --task TEXT`: a live agent from one config file: a real model
//! (`[model]`), the tools of its `[[mcp]]` servers plus the built-in `write_todos`, the kernel
//! policy, the context window and the verifier, with the progress lines, report and exit codes
//! of `terminus run`. With `--record FILE.json` the run is also written as a scenario file that
//! `terminus run` replays offline (see `record.rs`).
//!
//! With a journal the config is kept with the execution ([`StoredAgent`]), so `terminus resume`
//! and `terminus worker` rebuild the same adapters anywhere (the API key again from the
//! environment) and go on without asking the provider again for what is journaled.

use crate::common::{JournalArgs, drive, finish};
use crate::config::AgentConfig;
use crate::error::{CliError, LoginWait, SUSPENDED};
use crate::record::Recorder;
use crate::size;
use clap::Args;
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use terminus_kernel::ScaleError;
use terminus_llm::LlmModel;
use terminus_runtime::{
    LlmVerifier, Model, Run, RuntimeConfig, Setup, Store, Tokenizer, ToolSet, Verifier,
};
use terminus_scenario::{ContextSpec, ScenarioFile};
use terminus_tools::{McpConfig, McpError, McpTools};

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
    /// The task's size in units (the files in scope, say): the policy's `budget_scale` scales
    /// its budgets for it, and the execution keeps the scaled policy.
    #[arg(long, value_name = "N", conflicts_with = "scale_from")]
    scale: Option<u64>,
    /// The task's size from the work itself: the number of files GLOB matches in the folder the
    /// agent starts in is the scale's units (this wins over the config's
    /// `[agent].scale_from`). The size and the scaled budgets are printed at the start and kept
    /// in the report's `scale`.
    #[arg(long, value_name = "GLOB")]
    scale_from: Option<String>,
    #[command(flatten)]
    journal: JournalArgs,
}

/// A live agent's config as kept with its execution (the `agent` key of the host data), so that
/// another process, in another folder, rebuilds the same adapters.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredAgent {
    /// The config file as the user named it (for messages).
    pub(crate) file: String,
    /// Its text, as read.
    pub(crate) config: String,
    /// Its folder, absolute: relative MCP program paths are taken from there.
    pub(crate) dir: PathBuf,
    /// The folder the agent was started in, absolute: MCP servers start there, so their
    /// relative arguments (`./work`) mean what they meant to the user.
    pub(crate) cwd: PathBuf,
}

impl StoredAgent {
    /// Reads the config file and notes where it and the caller are.
    pub(crate) fn read(path: &Path) -> Result<StoredAgent, CliError> {
        let file = path.display().to_string();
        let config = std::fs::read_to_string(path)
            .map_err(|e| CliError::Invalid(format!("{file}: cannot read: {e}")))?;
        let cwd = std::env::current_dir().map_err(|e| {
            CliError::Invalid(format!("{file}: cannot tell the current folder: {e}"))
        })?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Ok(StoredAgent {
            file,
            config,
            dir: cwd.join(parent),
            cwd,
        })
    }

    /// The host data of an execution that runs this agent.
    pub(crate) fn host_data(&self) -> serde_json::Value {
        serde_json::json!({ "agent": self })
    }
}

/// What a live run is built from: the checked config and the clients that need no server.
#[derive(Clone)]
pub(crate) struct LiveAgent {
    file: String,
    config: AgentConfig,
    mcp: Vec<McpConfig>,
    model: Arc<LlmModel>,
    /// The context window, naming the tokenizer actually used (a recording replays the same).
    context: Option<(ContextSpec, Arc<dyn Tokenizer>)>,
    /// The system prompt: `system_prompt` and the `[agent].context_files`, read at start.
    system_prompt: Option<String>,
}

impl LiveAgent {
    /// Checks the config and builds the model client; the message names the file and the key.
    pub(crate) fn new(stored: &StoredAgent) -> Result<LiveAgent, CliError> {
        let file = stored.file.clone();
        let invalid = |e: String| CliError::Invalid(format!("{file}: {e}"));
        let config = AgentConfig::parse(&stored.config).map_err(invalid)?;
        let llm = config.llm_config().map_err(invalid)?;
        let model = LlmModel::new(llm).map_err(|e| invalid(format!("[model]: {e}")))?;
        let model = Arc::new(model);
        let context = match &config.context {
            None => None,
            Some(spec) => {
                let tokenizer = if spec.tokenizer.is_some() {
                    terminus_tokenizer::by_name(spec.tokenizer_name()).ok_or_else(|| {
                        invalid(format!(
                            "[context].tokenizer: unknown tokenizer {:?}",
                            spec.tokenizer_name()
                        ))
                    })?
                } else {
                    model.tokenizer()
                };
                let mut spec = spec.clone();
                spec.tokenizer = Some(tokenizer.name().to_owned());
                Some((spec, tokenizer))
            }
        };
        let system_prompt = config
            .system_prompt_with_files(&stored.dir, &stored.cwd)
            .map_err(invalid)?;
        let mut mcp = config.mcp_configs(&stored.dir).map_err(invalid)?;
        for server in &mut mcp {
            server.working_dir = Some(stored.cwd.clone());
        }
        Ok(LiveAgent {
            file,
            config,
            mcp,
            model,
            context,
            system_prompt,
        })
    }

    /// This agent, its model giving each turn's text to `sink` while the reply streams
    /// (`terminus serve` sends it on as it comes).
    pub(crate) fn streaming(&self, sink: terminus_llm::TextSink) -> LiveAgent {
        LiveAgent {
            model: Arc::new(self.model.with_text(sink)),
            ..self.clone()
        }
    }

    /// The model client, for a call outside a run (a plan generator's).
    pub(crate) fn model(&self) -> Arc<dyn Model> {
        self.model.clone()
    }

    /// The config file, for messages.
    pub(crate) fn file(&self) -> &str {
        &self.file
    }

    /// The system prompt: the config's, then its `[agent].context_files` as read at start.
    pub(crate) fn system_prompt(&self) -> Option<&str> {
        self.system_prompt.as_deref()
    }

    /// The context window's spec, naming the tokenizer used (a recording replays the same).
    pub(crate) fn context(&self) -> Option<ContextSpec> {
        self.context.as_ref().map(|(spec, _)| spec.clone())
    }

    /// The kernel policy.
    pub(crate) fn policy(&self) -> &terminus_kernel::Policy {
        &self.config.policy
    }

    /// The first `[[mcp]]` server whose questions wait for a person (`elicitation = "person"`).
    pub(crate) fn asks_a_person(&self) -> Option<&str> {
        self.mcp
            .iter()
            .find(|c| c.elicitation == terminus_tools::Elicitation::Person)
            .map(|c| c.name.as_str())
    }

    /// Starts the MCP servers; the message names the `[[mcp]]` entry. A server whose
    /// authorization waits for a person to log in is [`CliError::Login`].
    pub(crate) async fn connect(&self) -> Result<McpTools, CliError> {
        let mcp = McpTools::connect(&self.mcp).await.map_err(|e| match e {
            McpError::Login { server, url } => CliError::Login(Box::new(LoginWait {
                config: self.file.clone(),
                server,
                url,
            })),
            e => CliError::Invalid(format!("{}: {e}", self.file)),
        })?;
        // `[context].keep` names tools as the model sees them, known only once listed.
        if let Some((spec, _)) = &self.context {
            let mut tools = ToolSet::new();
            mcp.add_to(&mut tools);
            let names: Vec<&str> = tools.names().collect();
            if let Some((i, name)) = spec.unknown_kept(&names) {
                let problem = format!(
                    "{}: [context].keep[{i}]: unknown tool {name:?}: the agent's tools are {}",
                    self.file,
                    names.join(", ")
                );
                mcp.shutdown().await;
                return Err(CliError::Invalid(problem));
            }
        }
        Ok(mcp)
    }

    /// A run with this agent's adapters: `start` makes it (new or resumed) from the model;
    /// the tools are `mcp`'s plus `write_todos`; `recorder` keeps what a recording needs.
    pub(crate) fn run<R: Setup>(
        &self,
        start: impl FnOnce(Arc<dyn Model>) -> R,
        mcp: &McpTools,
        recorder: Option<&Arc<Recorder>>,
    ) -> R {
        let model: Arc<dyn Model> = match recorder {
            Some(recorder) => recorder.model(self.model.clone()),
            None => self.model.clone(),
        };
        let mut tools = ToolSet::new();
        mcp.add_to(&mut tools);
        for name in self.context.iter().flat_map(|(spec, _)| &spec.keep) {
            tools.keep(name.clone());
        }
        if let Some(recorder) = recorder {
            tools = recorder.tools(&tools);
        }
        let mut run = start(model).tools(tools);
        if let Some((spec, tokenizer)) = &self.context {
            run = run.context(spec.policy(), tokenizer.clone());
        }
        if self.model_verifier() {
            // The verifier's prompt is bounded by the same window as the agent's view.
            let mut judge = LlmVerifier::new(self.model.clone());
            if let Some((spec, tokenizer)) = &self.context {
                judge = judge.within(spec.policy().limit(), tokenizer.clone());
            }
            let verifier: Arc<dyn Verifier> = Arc::new(judge);
            run = run.verifier(match recorder {
                Some(recorder) => recorder.verifier(verifier),
                None => verifier,
            });
        }
        run
    }

    /// Whether the model judges completion claims (`[verifier] kind = "model"`).
    fn model_verifier(&self) -> bool {
        self.config
            .verifier
            .as_ref()
            .is_some_and(|v| v.kind == "model")
    }

    /// The runtime settings: the system prompt, and timeouts a little past the adapters' own
    /// (those answer first, and are recorded; the runtime's are a backstop).
    pub(crate) fn runtime(&self, lease: Duration) -> RuntimeConfig {
        let tool_timeout = self
            .mcp
            .iter()
            .map(|c| c.tool_timeout)
            .max()
            .unwrap_or(Duration::from_secs(60))
            + Duration::from_secs(1);
        // A streamed reply is bounded by the adapter's idle timeout, not its length (a long reply
        // on a CPU server streams for minutes): no backstop would cut it.
        let config = self.model.config();
        RuntimeConfig {
            lease,
            system_prompt: self.system_prompt.clone(),
            model_timeout: (!config.stream).then(|| config.timeout + Duration::from_secs(1)),
            tool_timeout: Some(tool_timeout),
            auto_checkpoint: self
                .context
                .as_ref()
                .map(|(spec, _)| spec.auto_checkpoint())
                .unwrap_or_default(),
            ..RuntimeConfig::default()
        }
    }

    /// Writes the run of `execution`, from its journal, as a scenario file at `path`; every
    /// failure is internal (the run it records has just been resumed from that journal).
    pub(crate) async fn record_journal(
        &self,
        store: &dyn Store,
        execution: &str,
        mcp: &McpTools,
        path: &Path,
    ) -> Result<(), CliError> {
        let journal = |e: terminus_runtime::StoreError| {
            CliError::Internal(format!("execution {execution}: {e}"))
        };
        let spec = store
            .spec(execution)
            .await
            .map_err(journal)?
            .ok_or_else(|| {
                CliError::Internal(format!("no execution `{execution}` in the journal"))
            })?;
        let records = store.records(execution).await.map_err(journal)?;
        let entries: Vec<&terminus_kernel::Entry> = records.iter().map(|r| &r.entry).collect();
        let mut tools = ToolSet::new();
        mcp.add_to(&mut tools);
        let recorder = Recorder::from_journal(&entries, &tools, self.model_verifier());
        let scenario = recorder.scenario(
            &spec.task,
            &spec.policy,
            self.context.as_ref().map(|(spec, _)| spec.clone()),
            spec.system.clone(),
            format!(
                "Recorded by `terminus resume --record` from the journal of execution {execution} \
                 ({} at {}).",
                self.model.config().model,
                self.model.config().base_url
            ),
        );
        write_atomically(path, &scenario).map_err(|e| {
            CliError::Internal(format!(
                "cannot write the recording {}: {e}",
                path.display()
            ))
        })?;
        eprintln!("terminus: recorded to {}", path.display());
        Ok(())
    }

    /// One line naming the model, the endpoint and the tools.
    pub(crate) fn describe(&self, mcp: &McpTools) -> String {
        let mut tools = ToolSet::new();
        mcp.add_to(&mut tools);
        format!(
            "agent {} on {} (tools: {})",
            self.model.config().model,
            self.model.config().base_url,
            tools.names().collect::<Vec<_>>().join(", ")
        )
    }
}

/// The policy scaled for `units` (none: the policy as written), as `flag` asked (`--scale 4`,
/// `--scale-from src/*.rs (7 files)`): a scale the policy has no `budget_scale` for, or one it
/// refuses, is invalid input, before anything starts.
pub(crate) fn scaled(
    policy: &terminus_kernel::Policy,
    units: Option<(u64, String)>,
    file: &str,
) -> Result<terminus_kernel::Policy, CliError> {
    let Some((units, flag)) = units else {
        return Ok(policy.clone());
    };
    policy.scaled_to(units).map_err(|e| match e {
        ScaleError::Nothing => CliError::Invalid(format!("{file}: {flag} {}", ScaleError::NOTHING)),
        ScaleError::Policy(e) => CliError::Invalid(format!("{file}: {flag}: {e}")),
    })
}

/// `terminus agent`: the report's exit code.
pub(crate) async fn agent(args: AgentArgs) -> Result<u8, CliError> {
    let stored = StoredAgent::read(&args.config)?;
    let live = LiveAgent::new(&stored)?;
    let from = args
        .scale_from
        .as_deref()
        .map(|p| ("--scale-from", p))
        .or_else(|| {
            let pattern = live.config.agent.scale_from.as_deref()?;
            Some(("[agent].scale_from", pattern))
        });
    let units = match from {
        Some((what, pattern)) => {
            let units = size::units_from(what, pattern, &stored.cwd)?;
            Some((units, format!("{what} {pattern} ({units} files)")))
        }
        None => args.scale.map(|units| (units, format!("--scale {units}"))),
    };
    let policy = scaled(&live.config.policy, units, live.file())?;
    let store = args.journal.store().await?;
    // Servers last: nothing is started for a config that fails a check above.
    let mcp = match live.connect().await {
        Err(CliError::Login(wait)) => return Ok(wait_for_login(&wait, None, args.journal.json)),
        connected => connected?,
    };
    let execution = args.journal.execution("agent");
    eprintln!(
        "terminus: running {} (execution {execution})",
        live.describe(&mcp)
    );
    if let Some(line) = size::scaled_line(&policy, from.map(|(_, pattern)| pattern)) {
        eprintln!("{line}");
    }
    let recorder = args.record.as_ref().map(|_| Arc::new(Recorder::default()));
    let task = args.task.clone();
    let mut run = live.run(
        |model| {
            Run::new(task, policy.clone(), model)
                .name("agent")
                .execution(execution)
        },
        &mcp,
        recorder.as_ref(),
    );
    if let Some(store) = store {
        run = run.store(store).host_data(stored.host_data());
    }
    if let Some(recorder) = &recorder {
        recorder.watch(run.kill_handle());
    }
    let runtime = live.runtime(Duration::from_millis(args.journal.lease_ms));
    let result = drive(run, runtime).await;
    mcp.shutdown().await;
    if let (Some(path), Some(recorder)) = (&args.record, &recorder) {
        let cancelled = matches!(&result, Ok(r) if r.outcome
            == terminus_kernel::Outcome::Aborted(terminus_kernel::AbortReason::Cancelled));
        recorder.ended(cancelled);
        let description = format!(
            "Recorded by `terminus agent` from {} at {}.",
            live.model.config().model,
            live.model.config().base_url
        );
        let scenario = recorder.scenario(
            &args.task,
            &policy,
            live.context.as_ref().map(|(spec, _)| spec.clone()),
            live.system_prompt.clone(),
            description,
        );
        write_atomically(path, &scenario).map_err(|e| {
            CliError::Internal(format!(
                "cannot write the recording {}: {e}",
                path.display()
            ))
        })?;
        eprintln!("terminus: recorded to {}", path.display());
    }
    finish(None, result, args.journal.json, live.file())
}

/// Says that the run waits for a person to log in to an `[[mcp]]` server, before `execution`
/// (a resumed one) takes a step, and how to go on (stderr; with `json`, the suspension as the
/// last stdout line): the exit code, 5.
pub(crate) fn wait_for_login(wait: &LoginWait, execution: Option<&str>, json: bool) -> u8 {
    let run = match execution {
        Some(id) => format!("execution {id}"),
        None => "nothing was run".to_owned(),
    };
    let again = match execution {
        Some(id) => format!("`terminus resume --execution {id}`"),
        None => "`terminus agent` again".to_owned(),
    };
    let lines = format!(
        "terminus: suspended: [[mcp]] `{server}` waits for a person to log in ({run})\n\
         terminus:   authorization {server} {url}\n\
         terminus:     open it and log in, then give the address the browser is sent to: \
         `terminus authorize {config} --server {server} 'ADDRESS'`; then {again}\n",
        server = wait.server,
        url = wait.url,
        config = wait.config,
    );
    let _ = std::io::stderr().lock().write_all(lines.as_bytes());
    if json {
        let line = serde_json::json!({
            "execution": execution,
            "status": "suspended",
            "pending": [{ "kind": "authorization", "server": wait.server, "url": wait.url }],
        });
        let _ = writeln!(std::io::stdout().lock(), "{line}");
    }
    SUSPENDED
}

#[derive(Debug, Args)]
pub(crate) struct AuthorizeArgs {
    /// The agent config (TOML) that names the server.
    config: PathBuf,
    /// The `[[mcp]]` entry whose login is completed.
    #[arg(long, value_name = "NAME")]
    server: String,
    /// The address the authorization server sent the browser to after the login (with its
    /// `code` and `state`).
    #[arg(value_name = "ADDRESS")]
    redirect: String,
}

/// `terminus authorize`: completes a person's login to an `[[mcp]]` server (exit 0); the token
/// is kept in the server's credentials file for the runs that follow.
pub(crate) async fn authorize(args: AuthorizeArgs) -> Result<u8, CliError> {
    let stored = StoredAgent::read(&args.config)?;
    let invalid = |e: String| CliError::Invalid(format!("{}: {e}", stored.file));
    let config = AgentConfig::parse(&stored.config).map_err(invalid)?;
    let servers = config.mcp_configs(&stored.dir).map_err(invalid)?;
    let server = servers
        .iter()
        .find(|s| s.name == args.server)
        .ok_or_else(|| {
            invalid(format!(
                "--server: no [[mcp]] entry is named `{}` (the entries: {})",
                args.server,
                servers
                    .iter()
                    .map(|s| format!("`{}`", s.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
    let file = server
        .auth
        .as_ref()
        .and_then(|a| a.credentials_file.clone())
        .ok_or_else(|| {
            invalid(format!(
                "[[mcp]] `{}`: no login to complete: it has no auth with the authorization_code \
                 grant and a credentials file",
                args.server
            ))
        })?;
    terminus_tools::complete_login(server, &args.redirect)
        .await
        .map_err(|e| invalid(e.to_string()))?;
    eprintln!(
        "terminus: logged in to [[mcp]] `{}`: the token is kept in {} for the runs that follow",
        args.server,
        file.display()
    );
    Ok(0)
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
