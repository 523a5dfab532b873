//! `terminus`: run, validate and check scenario files (`docs/cli.md`).
//!
//! Exit codes: 0 complete, 1 aborted (or an expectation not met, for `check`), 2 invalid input
//! (nothing is run or written), 3 internal or storage error, 4 execution claimed by another
//! worker.

#![forbid(unsafe_code)]

use clap::{Args, Parser, Subcommand};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use terminus_runtime::{
    BudgetWarning, ContextPrune, Observer, Report, RuntimeConfig, Setup, Store, SystemCut,
    ToolBudgetEvent, ToolsChanged, Transition,
};
use terminus_scenario::Scenario;
use terminus_store::Durability;

mod agent;
mod config;
mod decide;
mod graph;
mod inspect;
mod job;
mod orchestrate;
mod record;
mod runs;
mod serve;
mod timeline;
mod tools;

pub(crate) const INVALID: u8 = 2;
pub(crate) const INTERNAL: u8 = 3;
/// Suspended: held calls wait for a decision (`docs/approvals.md`).
pub(crate) const SUSPENDED: u8 = 5;

/// Terminus runs the LLM agent loop with every way of stopping made explicit, counted and
/// bounded. This command runs scenario files: scripted models, tools and verifiers.
#[derive(Debug, Parser)]
#[command(name = "terminus", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run a scenario. Progress goes to stderr, one line per transition; with --json the last
    /// line on stdout is the report. Exit 0 complete, 1 aborted, 2 invalid input, 3 internal or
    /// storage error, 4 claimed by another worker.
    Run(RunArgs),
    /// Check that scenario files are valid, without running them. Exit 0 if all are, else 2.
    Validate {
        /// Scenario files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Run scenario files and compare each report with the file's `expect` block. Exit 0 if
    /// every expectation holds, 1 if one does not, 2 if a file is invalid, 3 on an internal error.
    Check {
        /// Scenario files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Continue an interrupted run from its journal, without calling the model or tools again
    /// for what is journaled. An execution another live worker holds exits 4; one that already
    /// ended runs nothing, prints its report and exits with its code.
    Resume(ResumeArgs),
    /// Explain a run: the path it took with the rule at each step that was not the plain loop,
    /// repeated verifier feedback, tools that failed or were excluded, every budget against its
    /// limit, and one paragraph on why it stopped and what to change. The run is a stored
    /// execution (--journal, --execution) or a scenario file run in memory (--scenario).
    /// --svg also draws its timeline. Exit 0 once explained, 2 if there is no such execution.
    Inspect(inspect::InspectArgs),
    /// List the executions of a journal, oldest first, one a line: id, status (waiting,
    /// running, interrupted, ended, failed), outcome, reason, steps, model calls, tool calls.
    /// Filters: --outcome, --reason, --min-steps (like a trace tool's `wasAborted = true` or
    /// `totalIterations >= 10`).
    Runs(runs::RunsArgs),
    /// Draw the machine from the kernel's own transition table: every state and, per rule, the
    /// transitions it makes (mermaid by default, or Graphviz dot).
    Graph(graph::GraphArgs),
    /// Poll the journal for runnable executions (submitted and never claimed, or whose worker's
    /// lease expired) and run each, scenario or live agent; one report line per execution on
    /// stdout. An execution that cannot be run here is marked failed with the reason (see
    /// `inspect`) and the worker goes on.
    Worker(WorkerArgs),
    /// Store an execution for workers: a scenario file, or a live-agent config (TOML) with its
    /// task. Prints the execution id. Nothing runs until a worker claims it.
    Submit(SubmitArgs),
    /// Run a live agent from a config file: a real model, the tools of its MCP servers, the
    /// same kernel, progress lines, report and exit codes as `run`. Ctrl-C cancels it.
    Agent(agent::AgentArgs),
    /// Run a multi-agent plan: validated first (every problem on its own line, exit 2, nothing
    /// run), then each agent a kernel run as soon as its dependencies ended, with retries,
    /// timeouts, circuit breakers and the plan's budget. One progress line per agent event on
    /// stderr; with --json the last line on stdout is the plan's report. With --journal a
    /// crashed orchestration continues with `terminus resume`.
    Orchestrate(orchestrate::OrchestrateArgs),
    /// Serve the `TerminusAgent` Restate service (a virtual object keyed by execution id,
    /// handlers `run`, `report`, `cancel`) for a Restate server to call: every model and tool
    /// call is a journaled Restate step, so Restate resumes a run after a crash without asking
    /// again for what it journaled. A `run` request is `{"scenario": {...}}` or
    /// `{"agent": "NAME", "task": "..."}` naming a config given with `--agent`; the answer is the
    /// report. Runs until Ctrl-C. An address that cannot be bound, a config that does not parse
    /// or a key that is not one exits 2. What it trusts: docs/security.md.
    ServeRestate(serve::ServeRestateArgs),
    /// Approve held calls of a suspended execution (`--call ID` or `--all`): each runs, once,
    /// when the run is resumed. The same decision again changes nothing (exit 0); a
    /// conflicting one, an unknown call, or an execution that is not suspended exits 2.
    Approve(decide::ApproveArgs),
    /// Deny held calls of a suspended execution (`--call ID` or `--all`, `--reason TEXT`): the
    /// call never runs, and the model is told it was denied, with the reason, as a
    /// `permission_denied` tool error. Exit codes as `approve`.
    Deny(decide::DenyArgs),
    /// Answer a held call of a suspended execution from outside: `--result JSON` (its output)
    /// or `--error KIND --message TEXT`. The tool never runs; the model gets the answer as its
    /// result. Exit codes as `approve`.
    Answer(decide::AnswerArgs),
    /// Check the tools of a live-agent config's `[[mcp]]` servers before running an agent on
    /// them: `list` prints one tool a line (`name<TAB>description`); `call NAME 'JSON'` prints
    /// the tool's output and exits 0, or its error (`kind: message`) on stderr and exits 1. A bad
    /// config, or a server that cannot start, exits 2.
    Tools {
        /// The agent config (TOML).
        config: PathBuf,
        #[command(subcommand)]
        action: ToolsAction,
    },
}

#[derive(Debug, Subcommand)]
enum ToolsAction {
    /// One tool a line: `name<TAB>description`.
    List,
    /// Call one tool with JSON arguments.
    Call {
        /// The tool's name, as the model sees it.
        name: String,
        /// The arguments: a JSON object.
        #[arg(default_value = "{}")]
        arguments: String,
    },
}

#[derive(Debug, Args)]
struct StoreArgs {
    /// The journal: a SQLite file (created if missing) or a postgres:// URL.
    #[arg(long, value_name = "PATH|URL")]
    journal: String,
    /// What a committed SQLite entry survives: `process` (a killed process; the default) or
    /// `power-loss` (every commit is fsynced).
    #[arg(long, value_name = "MODE", default_value = "process", value_parser = parse_durability)]
    durability: Durability,
    /// How long the claim on an execution lasts, in milliseconds; renewed while the run lives.
    #[arg(long, value_name = "N", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    lease_ms: u64,
}

#[derive(Debug, Args)]
struct ResumeArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The execution id.
    #[arg(long, value_name = "ID")]
    execution: String,
    /// A live agent: write the whole run, from its journal, as a scenario file that
    /// `terminus run` replays offline (each turn once, however many times it was resumed).
    #[arg(long, value_name = "FILE.json")]
    record: Option<PathBuf>,
    /// Go on with a run a budget stopped, that budget raised (repeatable): max_steps,
    /// max_model_calls, token_budget, max_tool_calls or max_nudges. The first stop and the
    /// raise stay in the journal; the counters carry over.
    #[arg(long, value_name = "FIELD=N")]
    raise: Vec<String>,
    /// Print the report as JSON, as the last line on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct SubmitArgs {
    /// A live-agent config (`.toml`) or a scenario file (JSON).
    file: PathBuf,
    /// The task: required for a live agent; replaces a scenario's own.
    #[arg(long, value_name = "TEXT")]
    task: Option<String>,
    /// The journal: a SQLite file (created if missing) or a postgres:// URL.
    #[arg(long, value_name = "PATH|URL")]
    journal: String,
    /// The execution id (default: the scenario's name, or `agent`, and the current time).
    #[arg(long, value_name = "ID")]
    execution: Option<String>,
}

#[derive(Debug, Args)]
struct WorkerArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// How often to poll when nothing is runnable, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 500)]
    poll_ms: u64,
    /// Exit when nothing is runnable instead of polling again.
    #[arg(long)]
    until_idle: bool,
    /// Serve the runtime's metrics as Prometheus text at http://ADDR/metrics (runs by outcome
    /// and stop reason, nudges, verification failures, empty responses, duplicates prevented,
    /// resume conflicts, excluded tools, steps per run, model-call latency, budget warnings).
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Run a stored live agent only if its config is a file under DIR, unchanged since it was
    /// stored (otherwise the execution is marked failed, the reason in `inspect`). Without it,
    /// the worker runs whatever config the journal holds: whoever can write the journal chooses
    /// the commands the worker starts.
    #[arg(long, value_name = "DIR")]
    agents_dir: Option<PathBuf>,
}

fn parse_durability(s: &str) -> Result<Durability, String> {
    match s {
        "process" => Ok(Durability::Process),
        "power-loss" => Ok(Durability::PowerLoss),
        other => Err(format!(
            "unknown durability `{other}` (expected `process` or `power-loss`)"
        )),
    }
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The scenario file.
    scenario: PathBuf,
    #[command(flatten)]
    journal: JournalArgs,
}

/// The journal and report options of `run` and `agent`.
#[derive(Debug, Args)]
struct JournalArgs {
    /// Durable journal: a SQLite file (created if missing) or a postgres:// URL. Without it the
    /// journal is in memory.
    #[arg(long, value_name = "PATH|URL")]
    journal: Option<String>,
    /// What a committed SQLite entry survives: `process` (default) or `power-loss` (fsync).
    #[arg(long, value_name = "MODE", default_value = "process", value_parser = parse_durability)]
    durability: Durability,
    /// The execution id (default: the scenario's name, or `agent`, and the current time).
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

impl JournalArgs {
    /// The store, if a journal was given; `Err` is the exit code (the message is printed).
    async fn store(&self) -> Result<Option<Arc<dyn Store>>, u8> {
        match &self.journal {
            Some(journal) => open_store(journal, self.durability).await.map(Some),
            None => Ok(None),
        }
    }

    /// The execution id given, or `{name}-{unix ms}`.
    fn execution(&self, name: &str) -> String {
        execution_id(self.execution.as_deref(), name)
    }
}

/// `given`, or `{name}-{unix ms}`.
fn execution_id(given: Option<&str>, name: &str) -> String {
    given.map_or_else(
        || {
            let ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis();
            format!("{name}-{ms}")
        },
        str::to_owned,
    )
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Spans go to the OTLP endpoint the standard variables name, if any; a configuration that
    // names one wrongly is refused before anything runs.
    let telemetry = match terminus_telemetry::Telemetry::from_env() {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("terminus: {e}");
            return ExitCode::from(INVALID);
        }
    };
    if let Some(t) = &telemetry
        && let Err(e) = t.install()
    {
        eprintln!("terminus: {e}");
        return ExitCode::from(INTERNAL);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("terminus: cannot start the async runtime: {e}");
            return ExitCode::from(INTERNAL);
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Cmd::Run(args) => run(args).await,
            Cmd::Validate { files } => validate(&files),
            Cmd::Check { files } => check(&files).await,
            Cmd::Resume(args) => resume(args).await,
            Cmd::Inspect(args) => inspect::inspect(args).await,
            Cmd::Runs(args) => runs::runs(args).await,
            Cmd::Graph(args) => graph::graph(&args),
            Cmd::Worker(args) => worker(args).await,
            Cmd::Submit(args) => submit(args).await,
            Cmd::Agent(args) => agent::agent(args).await,
            Cmd::Orchestrate(args) => orchestrate::orchestrate(args).await,
            Cmd::ServeRestate(args) => serve::serve_restate(args).await,
            Cmd::Tools { config, action } => tools::run(&config, action).await,
            Cmd::Approve(args) => decide::approve(args).await,
            Cmd::Deny(args) => decide::deny(args).await,
            Cmd::Answer(args) => decide::answer(args).await,
        }
    });
    drop(runtime);
    if let Some(telemetry) = telemetry
        && let Err(e) = telemetry.shutdown()
    {
        // The run's outcome stands; its trace is what was lost.
        eprintln!("terminus: {e}");
    }
    ExitCode::from(code)
}

pub(crate) async fn open_store(
    journal: &str,
    durability: Durability,
) -> Result<Arc<dyn Store>, u8> {
    terminus_store::open(journal, durability)
        .await
        .map_err(|e| {
            eprintln!("terminus: {e}");
            INTERNAL
        })
}

/// The scenario file's JSON, kept with the execution so that `resume` needs only the journal.
fn scenario_json(path: &Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

fn model_log() -> Option<PathBuf> {
    std::env::var_os("TERMINUS_MODEL_LOG").map(PathBuf::from)
}

/// The scenario with the call logs the crash tests count with: `TERMINUS_MODEL_LOG` (model
/// turns served) and `TERMINUS_TOOL_LOG` (tool calls carried out).
fn with_model_log(scenario: Scenario) -> Scenario {
    let scenario = match model_log() {
        Some(path) => scenario.with_model_log(path),
        None => scenario,
    };
    match std::env::var_os("TERMINUS_TOOL_LOG") {
        Some(path) => scenario.with_tool_log(PathBuf::from(path)),
        None => scenario,
    }
}

async fn run(args: RunArgs) -> u8 {
    let scenario = match Scenario::load(&args.scenario) {
        Ok(s) => with_model_log(s),
        Err(e) => {
            eprintln!("terminus: {e}");
            return INVALID;
        }
    };
    let store = match args.journal.store().await {
        Ok(store) => store,
        Err(code) => return code,
    };
    let execution = args.journal.execution(scenario.name());
    let config = RuntimeConfig {
        lease: Duration::from_millis(args.journal.lease_ms),
        system_prompt: scenario.file().system_prompt.clone(),
        ..RuntimeConfig::default()
    };
    eprintln!(
        "terminus: running {} (execution {execution})",
        scenario.name()
    );
    let mut run = scenario.run().execution(execution);
    if let Some(store) = store {
        run = run.store(store);
        if let Some(json) = scenario_json(&args.scenario) {
            run = run.host_data(serde_json::json!({ "scenario": json }));
        }
    }
    let result = drive(run, config).await;
    finish(
        scenario.expect(),
        result,
        args.journal.json,
        &args.scenario.display().to_string(),
    )
}

/// Runs with the kill switch on Ctrl-C and progress lines on stderr.
async fn drive<R: Setup>(
    run: R,
    config: RuntimeConfig,
) -> Result<Report, terminus_runtime::RunError> {
    let on_interrupt = run.kill_handle();
    let watcher = tokio::spawn(async move {
        // Ctrl-C is the kill switch: the run ends `aborted (cancelled)` with its report.
        if tokio::signal::ctrl_c().await.is_ok() {
            on_interrupt.kill();
        }
    });
    let config = RuntimeConfig {
        capture_content: config.capture_content || terminus_telemetry::capture_content_from_env(),
        ..config
    };
    let result = run.config(config).observer(Progress).execute().await;
    watcher.abort();
    result
}

/// Progress lines on stderr: one per transition, and one per budget that passes 80 %.
struct Progress;

impl Observer for Progress {
    fn on_transition(&mut self, t: &Transition<'_>) {
        // One write per line (eprintln! writes each piece of the format separately).
        let line = format!("[{:>6} ms] {t}\n", t.elapsed_ms);
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn on_warning(&mut self, warning: &BudgetWarning) {
        let line = format!("terminus: warning: {warning}\n");
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn on_tool_budget(&mut self, event: &ToolBudgetEvent) {
        let line = format!("terminus: warning: {event}\n");
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn on_prune(&mut self, prune: &ContextPrune) {
        let line = format!("terminus: {prune}\n");
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn on_system_cut(&mut self, cut: &SystemCut) {
        let line = format!("terminus: warning: {cut}\n");
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn on_tools_changed(&mut self, change: &ToolsChanged) {
        let line = format!("terminus: {change}\n");
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

fn finish(
    expect: Option<&terminus_scenario::Expect>,
    result: Result<Report, terminus_runtime::RunError>,
    json: bool,
    what: &str,
) -> u8 {
    match result {
        Ok(report) => {
            eprintln!(
                "terminus: {} after {} (rule {})",
                report.outcome,
                steps(report.steps),
                report.rule.name()
            );
            if let Some(expect) = expect {
                for mismatch in expect.check(&report) {
                    eprintln!("terminus: expectation not met: {mismatch}");
                }
            }
            print_report(&report, json);
            report.exit_code()
        }
        Err(terminus_runtime::RunError::Suspended(suspended)) => {
            decide::print_suspension(&suspended, json);
            SUSPENDED
        }
        Err(e) => {
            eprintln!("terminus: {what}: {e}");
            e.exit_code()
        }
    }
}

pub(crate) fn code_of_store_error(e: &terminus_runtime::StoreError) -> u8 {
    terminus_runtime::RunError::Store(e.clone()).exit_code()
}

/// The failure a worker recorded for `execution`, printed; `Err` is the exit code of a store
/// that cannot say.
async fn recorded_failure(store: &dyn Store, execution: &str) -> Result<Option<u8>, u8> {
    match store.failure(execution).await {
        Ok(Some(f)) => {
            eprintln!(
                "terminus: execution {execution} failed (worker {}, exit {}): {}",
                f.worker, f.exit_code, f.reason
            );
            Ok(Some(f.exit_code))
        }
        Ok(None) => Ok(None),
        Err(e) => {
            eprintln!("terminus: {e}");
            Err(code_of_store_error(&e))
        }
    }
}

async fn resume(args: ResumeArgs) -> u8 {
    let raises = match args
        .raise
        .iter()
        .map(|r| terminus_kernel::Raise::parse(r))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(raises) => raises,
        Err(e) => {
            eprintln!("terminus: --raise {e}");
            return INVALID;
        }
    };
    let store = match open_store(&args.store.journal, args.store.durability).await {
        Ok(store) => store,
        Err(code) => return code,
    };
    match recorded_failure(store.as_ref(), &args.execution).await {
        Ok(None) => {}
        Ok(Some(code)) | Err(code) => return code,
    }
    match store.spec(&args.execution).await {
        Ok(Some(spec)) => {
            if let Some(plan) = terminus_orchestrator::stored_plan(&spec) {
                if !raises.is_empty() {
                    eprintln!(
                        "terminus: --raise applies to one run; execution {} is a plan (raise \
                         the budget of the agent's run in the plan file instead)",
                        args.execution
                    );
                    return INVALID;
                }
                let lease = Duration::from_millis(args.store.lease_ms);
                return orchestrate::resume(store, &args.execution, plan, lease, args.json).await;
            }
        }
        Ok(None) => {}
        Err(e) => {
            eprintln!("terminus: {e}");
            return code_of_store_error(&e);
        }
    }
    let job = match job::Job::stored(store.as_ref(), &args.execution, None).await {
        Ok(job) => job,
        Err(u) => {
            eprintln!("terminus: {}", u.reason);
            return u.code;
        }
    };
    eprintln!(
        "terminus: resuming {} (execution {})",
        job.describe(),
        args.execution
    );
    if args.record.is_some() && !matches!(job, job::Job::Agent(_)) {
        eprintln!(
            "terminus: --record applies to live agents; execution {} runs a scenario file, \
             which is its own recording",
            args.execution
        );
        return INVALID;
    }
    let lease = Duration::from_millis(args.store.lease_ms);
    let record = args.record.as_deref();
    let result = match job
        .resume(store, &args.execution, lease, None, record, &raises)
        .await
    {
        Ok(result) => result,
        Err(u) => {
            eprintln!("terminus: {}", u.reason);
            return u.code;
        }
    };
    finish(
        job.expect(),
        result,
        args.json,
        &format!("execution {}", args.execution),
    )
}

async fn submit(args: SubmitArgs) -> u8 {
    let spec = match job::submission(&args.file, args.task.as_deref()) {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("terminus: {e}");
            return INVALID;
        }
    };
    let store = match open_store(&args.journal, Durability::Process).await {
        Ok(store) => store,
        Err(code) => return code,
    };
    let name = spec.name.clone().unwrap_or_else(|| "run".into());
    let execution = execution_id(args.execution.as_deref(), &name);
    match store.create(&execution, &spec).await {
        Ok(true) => {
            eprintln!(
                "terminus: submitted {name} as execution {execution}; a `terminus worker` on this journal runs it"
            );
            println!("{execution}");
            0
        }
        Ok(false) => {
            eprintln!(
                "terminus: execution `{execution}` already exists in the journal; choose another id"
            );
            INVALID
        }
        Err(e) => {
            eprintln!("terminus: {e}");
            code_of_store_error(&e)
        }
    }
}

async fn worker(args: WorkerArgs) -> u8 {
    let agents = match args
        .agents_dir
        .as_deref()
        .map(job::AgentsDir::open)
        .transpose()
    {
        Ok(agents) => agents,
        Err(e) => {
            eprintln!("terminus: worker: {e}");
            return INVALID;
        }
    };
    if let Some(addr) = args.metrics_addr {
        if let Err(e) = terminus_telemetry::serve_metrics(addr) {
            eprintln!("terminus: worker: {e}");
            return INTERNAL;
        }
        eprintln!("terminus: worker: metrics at http://{addr}/metrics");
    }
    let store = match open_store(&args.store.journal, args.store.durability).await {
        Ok(store) => store,
        Err(code) => return code,
    };
    let worker = RuntimeConfig::default().worker;
    let lease_for = Duration::from_millis(args.store.lease_ms);
    loop {
        let lease = match store.claim_next(&worker, lease_for).await {
            Ok(lease) => lease,
            Err(e) => {
                eprintln!("terminus: worker: {e}");
                return code_of_store_error(&e);
            }
        };
        let Some(lease) = lease else {
            if args.until_idle {
                return 0;
            }
            tokio::time::sleep(Duration::from_millis(args.poll_ms)).await;
            continue;
        };
        let execution = lease.execution.clone();
        let job = match job::Job::stored(store.as_ref(), &execution, agents.as_ref()).await {
            Ok(job) => job,
            Err(u) => {
                give_up(store.as_ref(), &lease, u).await;
                continue;
            }
        };
        eprintln!(
            "terminus: worker {worker} took {execution} ({})",
            job.describe()
        );
        let result = match job
            .resume(
                Arc::clone(&store),
                &execution,
                lease_for,
                Some(&worker),
                None,
                &[],
            )
            .await
        {
            Ok(result) => result,
            Err(u) => {
                give_up(store.as_ref(), &lease, u).await;
                continue;
            }
        };
        match result {
            Ok(report) => print_report(&report, true),
            Err(terminus_runtime::RunError::Suspended(suspended)) => {
                // Claim released with the suspension: no worker takes it until it is decided.
                decide::print_suspension(&suspended, true);
            }
            Err(e) => {
                eprintln!("terminus: execution {execution}: {e}");
                match e.exit_code() {
                    // Another worker holds it: theirs to finish.
                    4 => {}
                    // The journal itself fails: no other execution would fare better.
                    INTERNAL if matches!(e, terminus_runtime::RunError::Store(_)) => {
                        return INTERNAL;
                    }
                    // This execution cannot go on (its journal does not replay, an adapter
                    // faults): take the claim back and say so, rather than hand it to the next
                    // worker forever.
                    code => match store.claim(&execution, &worker, lease_for).await {
                        Ok(lease) => {
                            let reason = e.to_string();
                            give_up(store.as_ref(), &lease, job::Unrunnable { code, reason }).await;
                        }
                        Err(e) => eprintln!("terminus: execution {execution}: {e}"),
                    },
                }
            }
        }
    }
}

/// Marks a claimed execution failed with why, so no worker claims it again.
async fn give_up(store: &dyn Store, lease: &terminus_runtime::Lease, why: job::Unrunnable) {
    let execution = &lease.execution;
    eprintln!(
        "terminus: worker {} cannot run {execution}: {} (marked failed, exit {})",
        lease.worker, why.reason, why.code
    );
    let failure = terminus_runtime::Failure {
        exit_code: why.code,
        reason: why.reason,
        worker: lease.worker.clone(),
    };
    if let Err(e) = store.fail(lease, &failure).await {
        eprintln!("terminus: execution {execution}: cannot mark it failed: {e}");
    }
}

fn print_report(report: &Report, json: bool) {
    let mut out = std::io::stdout().lock();
    // A closed stdout is the reader's choice; the exit code still tells the outcome.
    let _ = if json {
        // Written as it is serialized: a long run's trace is most of its report.
        report.write_json_line(&mut out)
    } else {
        match &report.result {
            Some(result) => writeln!(out, "{}\n{result}", report.outcome),
            None => writeln!(out, "{}", report.outcome),
        }
    };
}

fn validate(files: &[PathBuf]) -> u8 {
    let mut code = 0;
    for file in files {
        match Scenario::load(file) {
            Ok(s) => println!("ok    {} ({})", file.display(), s.name()),
            Err(e) => {
                eprintln!("terminus: {e}");
                code = INVALID;
            }
        }
    }
    code
}

/// What one checked file came to; the exit code is the worst of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Checked {
    Passed,
    Failed,
    Invalid,
    Internal,
}

async fn check(files: &[PathBuf]) -> u8 {
    let mut worst = Checked::Passed;
    for file in files {
        worst = worst.max(check_one(file).await);
    }
    match worst {
        Checked::Passed => 0,
        Checked::Failed => 1,
        Checked::Invalid => INVALID,
        Checked::Internal => INTERNAL,
    }
}

async fn check_one(file: &Path) -> Checked {
    let scenario = match Scenario::load(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("terminus: {e}");
            return Checked::Invalid;
        }
    };
    let Some(expect) = scenario.expect() else {
        println!("skip  {} (no expect block)", scenario.name());
        return Checked::Passed;
    };
    let report = match scenario.run().execution(scenario.name()).execute().await {
        Ok(r) => r,
        Err(e) => {
            println!("FAIL  {}: {e}", scenario.name());
            return if e.exit_code() == INVALID {
                Checked::Invalid
            } else {
                Checked::Internal
            };
        }
    };
    let mismatches = expect.check(&report);
    if mismatches.is_empty() {
        println!(
            "ok    {} ({}, {})",
            scenario.name(),
            report.outcome,
            steps(report.steps)
        );
        Checked::Passed
    } else {
        println!("FAIL  {} ({})", scenario.name(), report.outcome);
        for m in mismatches {
            println!("      {m}");
        }
        Checked::Failed
    }
}

fn steps(n: u32) -> String {
    if n == 1 {
        "1 step".into()
    } else {
        format!("{n} steps")
    }
}
