//! `terminus`: run, validate and check scenario files (`docs/cli.md`).
//!
//! Exit codes: 0 complete, 1 aborted (or an expectation not met, for `check`), 2 invalid input
//! (nothing is run or written), 3 internal or storage error, 4 execution claimed by another
//! worker, 5 suspended.
//!
//! This file is the dispatcher only: each subcommand lives in its module and returns
//! `Result<u8, CliError>` (`error.rs`); `main` prints a failure and maps it to its exit code,
//! in one place. What the subcommands share is in `common.rs`.

#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use error::CliError;
use std::path::PathBuf;
use std::process::ExitCode;

mod agent;
mod agui;
mod common;
mod config;
mod decide;
mod error;
mod eval;
mod graph;
mod inspect;
mod job;
mod orchestrate;
mod plan;
mod plan_generate;
mod record;
mod resume;
mod run;
mod runs;
mod serve;
mod size;
mod timeline;
mod tools;
mod web;
mod worker;

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
    Run(run::RunArgs),
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
    Resume(resume::ResumeArgs),
    /// Explain a run: the path it took with the rule at each step that was not the plain loop,
    /// repeated verifier feedback, tools that failed or were excluded, every budget against its
    /// limit, and one paragraph on why it stopped and what to change. The run is a stored
    /// execution (--journal, --execution) or a scenario file run in memory (--scenario).
    /// --svg also draws its timeline. Exit 0 once explained, 2 if there is no such execution.
    Inspect(inspect::InspectArgs),
    /// Measure what the kernel changes on real runs: each task of a suite runs N trials per
    /// condition (policy overrides), each in a fresh copy of its folder, recorded, then checked
    /// (files that must match, or a command that must exit 0). Prints the table (success rate,
    /// pass^k, outcomes, median model calls, tokens, wall time); --replay recomputes it offline
    /// from the recordings. Exit 0 when the suite ran, 2 for a bad suite, 3 if a recording does
    /// not replay to its report.
    Eval(eval::EvalArgs),
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
    Worker(worker::WorkerArgs),
    /// Store an execution for workers: a scenario file, or a live-agent config (TOML) with its
    /// task. Prints the execution id. Nothing runs until a worker claims it.
    Submit(worker::SubmitArgs),
    /// Run a live agent from a config file: a real model, the tools of its MCP servers, the
    /// same kernel, progress lines, report and exit codes as `run`. Ctrl-C cancels it.
    Agent(agent::AgentArgs),
    /// Complete a person's login to an `[[mcp]]` server that a run waits for (`agent` or
    /// `resume` exited 5, suspended, with an `authorization` to open): ADDRESS is where the
    /// authorization server sent the browser after the login. The token is kept in the
    /// server's credentials file for the runs that follow. Exit 0 once logged in, 2 if the
    /// address, the state or the code is refused (naming why).
    Authorize(agent::AuthorizeArgs),
    /// Run a multi-agent plan: validated first (every problem on its own line, exit 2, nothing
    /// run), then each agent a kernel run as soon as its dependencies ended, with retries,
    /// timeouts, circuit breakers and the plan's budget. One progress line per agent event on
    /// stderr; with --json the last line on stdout is the plan's report. With --journal a
    /// crashed orchestration continues with `terminus resume`.
    Orchestrate(orchestrate::OrchestrateArgs),
    /// Build a plan: `split` splits a task over N files into phases of K files, each phase an
    /// agent depending on the one before. The plan is validated as `orchestrate` validates it,
    /// then printed (or written with --out). Exit 0 once written, 2 for bad input (nothing
    /// written).
    Plan(plan::PlanArgs),
    /// Serve the `TerminusAgent` Restate service (a virtual object keyed by execution id,
    /// handlers `run`, `report`, `cancel`) for a Restate server to call: every model and tool
    /// call is a journaled Restate step, so Restate resumes a run after a crash without asking
    /// again for what it journaled. A `run` request is `{"scenario": {...}}` or
    /// `{"agent": "NAME", "task": "..."}` naming a config given with `--agent`; the answer is the
    /// report. Runs until Ctrl-C. An address that cannot be bound, a config that does not parse
    /// or a key that is not one exits 2. What it trusts: docs/security.md.
    ServeRestate(serve::ServeRestateArgs),
    /// Serve live agents over HTTP as AG-UI, with a page to watch and steer them at `/`:
    /// `POST /agents/NAME` with a `RunAgentInput` runs the agent started as NAME
    /// (`--agent NAME=CONFIG.toml`) and streams the run as server-sent events, to
    /// `RUN_FINISHED` (the result and the report, or the held calls to decide), or `RUN_ERROR`.
    /// Each run is an execution of the journal named by its thread id (`inspect`, `resume`,
    /// `approve` work on it); the next input on the thread decides its held calls with
    /// `resume`. With --key-env VAR, requests must carry `Authorization: Bearer` and the
    /// variable's value. Runs until Ctrl-C. What it trusts: docs/security.md.
    Serve(web::ServeArgs),
    /// Approve held calls of a suspended execution (`--call ID` or `--all`): each runs, once,
    /// when the run is resumed; with `--call ID --arguments JSON`, with those arguments instead
    /// of the model's (the model is told). The same decision again changes nothing (exit 0); a
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
        action: tools::ToolsAction,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Spans go to the OTLP endpoint the standard variables name, if any; a configuration that
    // names one wrongly is refused before anything runs.
    let (code, telemetry) = match start(cli) {
        Ok(ran) => ran,
        Err(e) => (Err(e), None),
    };
    if let Some(telemetry) = telemetry
        && let Err(e) = telemetry.shutdown()
    {
        // The run's outcome stands; its trace is what was lost.
        eprintln!("terminus: {e}");
    }
    // The one place a failure is printed and mapped to its exit code.
    ExitCode::from(code.unwrap_or_else(|e| {
        e.print();
        e.code()
    }))
}

/// Installs the telemetry and runs the command on an async runtime; `Err` when neither can
/// start. The command's own result is the first of the pair.
#[allow(clippy::type_complexity)]
fn start(
    cli: Cli,
) -> Result<(Result<u8, CliError>, Option<terminus_telemetry::Telemetry>), CliError> {
    let telemetry =
        terminus_telemetry::Telemetry::from_env().map_err(|e| CliError::Invalid(e.to_string()))?;
    if let Some(t) = &telemetry {
        t.install().map_err(|e| CliError::Internal(e.to_string()))?;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Internal(format!("cannot start the async runtime: {e}")))?;
    let code = runtime.block_on(dispatch(cli.command));
    drop(runtime);
    Ok((code, telemetry))
}

/// The subcommand's exit code, or its failure.
async fn dispatch(command: Cmd) -> Result<u8, CliError> {
    match command {
        Cmd::Run(args) => run::run(args).await,
        Cmd::Validate { files } => run::validate(&files),
        Cmd::Check { files } => run::check(&files).await,
        Cmd::Resume(args) => resume::resume(args).await,
        Cmd::Inspect(args) => inspect::inspect(args).await,
        Cmd::Eval(args) => eval::eval(args).await,
        Cmd::Runs(args) => runs::runs(args).await,
        Cmd::Graph(args) => Ok(graph::graph(&args)),
        Cmd::Worker(args) => worker::worker(args).await,
        Cmd::Submit(args) => worker::submit(args).await,
        Cmd::Agent(args) => agent::agent(args).await,
        Cmd::Plan(args) => plan::plan(args),
        Cmd::Authorize(args) => agent::authorize(args).await,
        Cmd::Orchestrate(args) => orchestrate::orchestrate(args).await,
        Cmd::ServeRestate(args) => serve::serve_restate(args).await,
        Cmd::Serve(args) => web::serve(args).await,
        Cmd::Tools { config, action } => tools::run(&config, action).await,
        Cmd::Approve(args) => decide::approve(args).await,
        Cmd::Deny(args) => decide::deny(args).await,
        Cmd::Answer(args) => decide::answer(args).await,
    }
}
