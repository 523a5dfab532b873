//! `terminus orchestrate PLAN.json` and the resume of a stored orchestration (`docs/plans.md`,
//! "Durable plans"): the plan is validated before anything runs (every problem on its own
//! line, exit 2), then run with one progress line per agent event and the plan's report.

use crate::agent::{LiveAgent, StoredAgent};
use crate::common::JournalArgs;
use crate::error::CliError;
use async_trait::async_trait;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use terminus_orchestrator::{
    Context, Launch, Launcher, Orchestration, Own, Plan, PlanEvent, PlanFile, PlanReport, Program,
};
use terminus_runtime::{Report, Run, RunError, RuntimeConfig, Store};
use terminus_scenario::plan::ScenarioLauncher;

/// `terminus orchestrate` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct OrchestrateArgs {
    /// The plan file (JSON).
    #[arg(required_unless_present = "generate", conflicts_with = "generate")]
    plan: Option<PathBuf>,
    /// Ask a model for the plan instead: a generator file (JSON: `registry`, `generator`,
    /// `fallback`; docs/plans.md, "A plan written by a model"). Each rejected plan goes back
    /// to the model with its problems, at most `generator.max_attempts` calls; then the
    /// fallback runs, or the plan ends `no_valid_plan`.
    #[arg(long, value_name = "FILE", requires = "task")]
    generate: Option<PathBuf>,
    /// The task the model plans for (with --generate).
    #[arg(long, requires = "generate")]
    task: Option<String>,
    #[command(flatten)]
    journal: JournalArgs,
}

/// Runs scenario agents as the orchestrator crate does, and live agents from their configs.
struct CliLauncher;

#[async_trait]
impl Launcher for CliLauncher {
    async fn launch(&self, l: Launch) -> Result<Report, RunError> {
        let Program::Live { config, scale } = &l.agent.program else {
            return ScenarioLauncher.launch(l).await;
        };
        let invalid =
            |e: CliError| RunError::Fault(terminus_runtime::Fault::invalid_input(e.to_string()));
        let live = StoredAgent::read(config)
            .and_then(|stored| LiveAgent::new(&stored))
            .map_err(invalid)?;
        let mcp = live.connect().await.map_err(invalid)?;
        let config = RuntimeConfig {
            worker: l.config.worker.clone(),
            ..live.runtime(l.config.lease)
        };
        let result = if l.resume {
            live.run(|model| Run::resume(l.execution, model), &mcp, None)
                .store(l.store)
                .kill_switch(l.kill)
                .config(config)
                .execute()
                .await
        } else {
            let mut policy = scaled_for(live.policy(), *scale, live.file()).map_err(invalid)?;
            l.grant.apply(&mut policy);
            let mut run = live
                .run(|model| Run::new(l.task, policy, model), &mcp, None)
                .execution(l.execution)
                .store(l.store)
                .kill_switch(l.kill)
                .config(config);
            if l.keep_program
                && let Ok(stored) = StoredAgent::read(Path::new(live.file()))
            {
                run = run.host_data(stored.host_data());
            }
            run.execute().await
        };
        mcp.shutdown().await;
        result
    }
}

/// A live agent's policy scaled for the plan's `scale` of it (none: as written).
fn scaled_for(
    policy: &terminus_kernel::Policy,
    scale: Option<u64>,
    file: &str,
) -> Result<terminus_kernel::Policy, CliError> {
    crate::agent::scaled(policy, scale.map(|u| (u, format!("scale {u}"))), file)
}

/// A live agent config's policy limits, scaled for the plan's `scale` of it, checked at
/// validation.
fn live_limits(path: &Path, scale: Option<u64>) -> Result<Own, String> {
    let live = StoredAgent::read(path)
        .and_then(|stored| LiveAgent::new(&stored))
        .map_err(|e| e.to_string())?;
    let p = &scaled_for(live.policy(), scale, live.file()).map_err(|e| e.to_string())?;
    Ok(Own {
        model_calls: p.max_model_calls,
        tokens: p.token_budget,
        deadline_ms: p.deadline_ms,
    })
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// What validation reads from outside, for plans in `base`.
pub(crate) fn context(base: &Path) -> Context<'_> {
    Context {
        base,
        env: &env,
        live: &live_limits,
        scenario: &terminus_scenario::plan::script,
        host_agents: false,
    }
}

/// Validates a plan; every problem (`FILE: PATH: PROBLEM`) when it is not, then their count.
pub(crate) fn validated(
    file: Result<PlanFile, CliError>,
    base: &Path,
    shown: &str,
) -> Result<Plan, CliError> {
    let file = file.map_err(|e| e.context(shown))?;
    Plan::from_file(file, &context(base)).map_err(|problems| refused(&problems, shown))
}

/// Every problem on its own line (`FILE: PATH: PROBLEM`), then their count.
pub(crate) fn refused(problems: &[terminus_orchestrator::Problem], shown: &str) -> CliError {
    let count = format!("{} problem(s); nothing was run", problems.len());
    let mut all: Vec<CliError> = problems
        .iter()
        .map(|p| CliError::Invalid(p.to_string()))
        .collect();
    all.push(CliError::Invalid(count));
    CliError::Several(all).context(shown)
}

/// Reads a JSON file into `T`, a problem naming its JSON path.
pub(crate) fn read_file<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Invalid(format!("cannot read it: {e}")))?;
    terminus_scenario::read_json(&text).map_err(|e| CliError::Invalid(e.to_string()))
}

/// The folder of `file`, absolute, so that the live-agent paths kept with a durable plan
/// resume from any folder.
pub(crate) fn folder_of(file: &Path) -> PathBuf {
    let parent = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    std::fs::canonicalize(&parent).unwrap_or(parent)
}

/// `terminus orchestrate`: the plan's exit code.
pub(crate) async fn orchestrate(args: OrchestrateArgs) -> Result<u8, CliError> {
    let (plan, generation) = match (&args.plan, &args.generate, &args.task) {
        (Some(path), _, _) => {
            let shown = path.display().to_string();
            (validated(read_file(path), &folder_of(path), &shown)?, None)
        }
        (None, Some(path), Some(task)) => match crate::plan_generate::generate(path, task).await? {
            (Some(plan), generation) => (plan, Some(generation)),
            (None, generation) => {
                let name = crate::plan_generate::name(path);
                let execution = args.journal.execution(&name);
                let report = PlanReport::no_plan(&execution, &name, generation);
                return finish(Ok(report), None, args.journal.json);
            }
        },
        _ => {
            return Err(CliError::Invalid(
                "give a plan file, or --generate FILE with --task".into(),
            ));
        }
    };
    let store = args.journal.store().await?;
    let execution = args.journal.execution(&plan.name);
    eprintln!(
        "terminus: orchestrating {} ({} agents, execution {execution})",
        plan.name,
        plan.agents.len()
    );
    let expect = plan.file.expect.clone();
    let lease = Duration::from_millis(args.journal.lease_ms);
    let mut orchestration = Orchestration::new(plan, execution).generation(generation);
    if let Some(store) = store {
        orchestration = orchestration.store(store, true);
    }
    let result = drive(orchestration, lease).execute().await;
    finish(result, expect.as_ref(), args.journal.json)
}

/// Resumes the orchestration `execution`, whose spec keeps `plan`.
pub(crate) async fn resume(
    store: Arc<dyn Store>,
    execution: &str,
    plan: &serde_json::Value,
    generation: Option<terminus_orchestrator::Generation>,
    lease: Duration,
    json: bool,
) -> Result<u8, CliError> {
    let file = serde_json::from_value::<PlanFile>(plan.clone()).map_err(|e| {
        CliError::Invalid(format!(
            "the plan stored with `{execution}` cannot be read: {e}"
        ))
    });
    let shown = format!("execution {execution}");
    let plan = validated(file, Path::new("."), &shown)?;
    eprintln!(
        "terminus: resuming plan {} (execution {execution})",
        plan.name
    );
    let expect = plan.file.expect.clone();
    let orchestration = Orchestration::new(plan, execution)
        .store(store, true)
        .generation(generation);
    let result = drive(orchestration, lease).resume().await;
    finish(result, expect.as_ref(), json)
}

/// Progress lines on stderr, Ctrl-C cancels the plan, live agents run here.
fn drive(orchestration: Orchestration, lease: Duration) -> Orchestration {
    let kill = terminus_runtime::KillSwitch::new();
    let on_interrupt = kill.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_interrupt.kill();
        }
    });
    let start = tokio::time::Instant::now();
    orchestration
        .launcher(Arc::new(CliLauncher))
        .kill_switch(kill)
        .worker(RuntimeConfig::default().worker, lease)
        .observer(move |event: &PlanEvent| {
            let line = format!("[{:>6} ms] {event}\n", start.elapsed().as_millis());
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        })
}

fn finish(
    result: Result<PlanReport, terminus_orchestrator::OrchestrateError>,
    expect: Option<&terminus_orchestrator::PlanExpect>,
    json: bool,
) -> Result<u8, CliError> {
    let report = result.map_err(|e| CliError::with_code(e.exit_code(), e.to_string()))?;
    let failed = report
        .agents
        .iter()
        .filter(|a| a.status != terminus_orchestrator::Status::Complete)
        .count();
    eprintln!(
        "terminus: plan {} {} ({} of {} agents did not complete)",
        report.name,
        report.reason,
        failed,
        report.agents.len()
    );
    if let Some(expect) = expect {
        for mismatch in mismatches(expect, &report) {
            eprintln!("terminus: expectation not met: {mismatch}");
        }
    }
    let mut out = std::io::stdout().lock();
    let _ = if json {
        writeln!(out, "{}", report.to_json_line())
    } else {
        writeln!(out, "{}", report.reason)
    };
    Ok(report.exit_code())
}

/// Where `report` differs from a conformance plan's `expect` block.
pub(crate) fn mismatches(
    expect: &terminus_orchestrator::PlanExpect,
    report: &PlanReport,
) -> Vec<String> {
    let mut out = Vec::new();
    if expect.outcome != report.outcome {
        out.push(format!(
            "outcome {} (expected {})",
            report.outcome, expect.outcome
        ));
    }
    if expect.reason != report.reason.name() {
        out.push(format!(
            "reason {} (expected {})",
            report.reason.name(),
            expect.reason
        ));
    }
    for (id, want) in &expect.agents {
        let Some(got) = report.agents.iter().find(|a| &a.id == id) else {
            out.push(format!("agent {id}: not in the plan"));
            continue;
        };
        if want.status != got.status.name() {
            out.push(format!(
                "agent {id}: status {} (expected {})",
                got.status, want.status
            ));
        }
        if let Some(attempts) = want.attempts
            && attempts != got.attempts
        {
            out.push(format!(
                "agent {id}: attempts {} (expected {attempts})",
                got.attempts
            ));
        }
        if let Some(degraded) = want.degraded_input
            && degraded != got.degraded_input
        {
            out.push(format!(
                "agent {id}: degraded_input {} (expected {degraded})",
                got.degraded_input
            ));
        }
    }
    out
}
