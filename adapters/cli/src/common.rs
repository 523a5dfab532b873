//! What the subcommands share: the journal options, opening a store, driving a run with
//! progress lines and the kill switch on Ctrl-C, and printing its end.

use crate::error::{CliError, SUSPENDED};
use clap::Args;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use terminus_runtime::{
    BudgetWarning, ContextPrune, Observer, Report, RunError, RuntimeConfig, Setup, Store,
    Suspended, SystemCut, ToolBudgetEvent, ToolsChanged, Transition,
};
use terminus_scenario::Scenario;
use terminus_store::Durability;

#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// The journal: a SQLite file (created if missing) or a postgres:// URL.
    #[arg(long, value_name = "PATH|URL")]
    pub(crate) journal: String,
    /// What a committed SQLite entry survives: `process` (a killed process; the default) or
    /// `power-loss` (every commit is fsynced).
    #[arg(long, value_name = "MODE", default_value = "process", value_parser = parse_durability)]
    pub(crate) durability: Durability,
    /// How long the claim on an execution lasts, in milliseconds; renewed while the run lives.
    #[arg(long, value_name = "N", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) lease_ms: u64,
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

/// The journal and report options of `run` and `agent`.
#[derive(Debug, Args)]
pub(crate) struct JournalArgs {
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
    pub(crate) lease_ms: u64,
    /// Print the report as JSON, as the last line on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

impl JournalArgs {
    /// The store, if a journal was given.
    pub(crate) async fn store(&self) -> Result<Option<Arc<dyn Store>>, CliError> {
        match &self.journal {
            Some(journal) => open_store(journal, self.durability).await.map(Some),
            None => Ok(None),
        }
    }

    /// The execution id given, or `{name}-{unix ms}`.
    pub(crate) fn execution(&self, name: &str) -> String {
        execution_id(self.execution.as_deref(), name)
    }
}

/// `given`, or `{name}-{unix ms}`.
pub(crate) fn execution_id(given: Option<&str>, name: &str) -> String {
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

/// Opens (or creates) the journal `journal`; a journal that cannot be opened is an internal
/// error.
pub(crate) async fn open_store(
    journal: &str,
    durability: Durability,
) -> Result<Arc<dyn Store>, CliError> {
    terminus_store::open(journal, durability)
        .await
        .map_err(|e| CliError::Internal(e.to_string()))
}

/// Opens the journal a user names: a missing SQLite file is an error here (opening would
/// create an empty one), not an empty journal.
pub(crate) async fn open_existing(journal: &str) -> Result<Arc<dyn Store>, CliError> {
    let url = journal.starts_with("postgres://") || journal.starts_with("postgresql://");
    if !url && !Path::new(journal).is_file() {
        return Err(CliError::Invalid(format!(
            "no journal at {journal} (a SQLite file or a postgres:// URL)"
        )));
    }
    open_store(journal, Durability::Process).await
}

/// The scenario file's JSON, kept with the execution so that `resume` needs only the journal.
pub(crate) fn scenario_json(path: &Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

fn model_log() -> Option<PathBuf> {
    std::env::var_os("TERMINUS_MODEL_LOG").map(PathBuf::from)
}

/// The scenario with the call logs the crash tests count with: `TERMINUS_MODEL_LOG` (model
/// turns served) and `TERMINUS_TOOL_LOG` (tool calls carried out).
pub(crate) fn with_model_log(scenario: Scenario) -> Scenario {
    let scenario = match model_log() {
        Some(path) => scenario.with_model_log(path),
        None => scenario,
    };
    match std::env::var_os("TERMINUS_TOOL_LOG") {
        Some(path) => scenario.with_tool_log(PathBuf::from(path)),
        None => scenario,
    }
}

/// What `execution` was started with; an execution the journal does not have is invalid input.
pub(crate) async fn spec_of(
    store: &dyn terminus_runtime::Journal,
    execution: &str,
) -> Result<terminus_runtime::RunSpec, CliError> {
    match store.spec(execution).await {
        Ok(Some(spec)) => Ok(spec),
        Ok(None) => Err(CliError::Invalid(format!(
            "no execution `{execution}` in the journal"
        ))),
        Err(e) => Err(CliError::store(&e)),
    }
}

/// Runs with the kill switch on Ctrl-C and progress lines on stderr.
pub(crate) async fn drive<R: Setup>(run: R, config: RuntimeConfig) -> Result<Report, RunError> {
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

    fn on_job(&mut self, status: &terminus_runtime::jobs::JobStatus) {
        let line = format!("terminus: {status}\n");
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// The end of a run of `what`: the outcome line and report (0 or 1), the suspension (5), or
/// the run's error.
pub(crate) fn finish(
    expect: Option<&terminus_scenario::Expect>,
    result: Result<Report, RunError>,
    json: bool,
    what: &str,
) -> Result<u8, CliError> {
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
            Ok(report.exit_code())
        }
        Err(RunError::Suspended(suspended)) => {
            print_suspension(&suspended, json);
            Ok(SUSPENDED)
        }
        Err(e) => Err(CliError::run(&e, format!("{what}: {e}"))),
    }
}

/// The report on stdout: as one JSON line, or the outcome and the result.
pub(crate) fn print_report(report: &Report, json: bool) {
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

/// A suspension, as `run`, `agent`, `resume` and the worker print it: each pending call on
/// stderr, and with `json` the suspension as the last line on stdout.
pub(crate) fn print_suspension(suspended: &Suspended, json: bool) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "terminus: suspended after {} step(s): {} held call(s) wait for a decision \
         (execution {})",
        suspended.steps,
        suspended.pending.len(),
        suspended.execution
    );
    for call in &suspended.pending {
        let _ = writeln!(
            err,
            "terminus:   {} {} {} {}",
            call.kind.as_str(),
            call.call_id,
            call.name,
            call.arguments
        );
        if let Some(q) = &call.question {
            let _ = writeln!(
                err,
                "terminus:     it asks {:?}, a form of {}: `terminus answer --call {} --result \
                 JSON` fills it, `deny` declines it, `approve` takes its defaults",
                q.message, q.schema, call.call_id
            );
        }
    }
    if json {
        let line = serde_json::to_string(suspended).unwrap_or_default();
        let _ = writeln!(std::io::stdout().lock(), "{line}");
    }
}

/// `1 step`, `N steps`.
pub(crate) fn steps(n: u32) -> String {
    if n == 1 {
        "1 step".into()
    } else {
        format!("{n} steps")
    }
}
