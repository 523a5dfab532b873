//! `terminus inspect`: why did the run stop, and what to change.
//!
//! The [`Explanation`] is built without IO by `terminus_runtime::explain` (the Python binding
//! explains its runs with the same code) from what this module reads of a journal: its records,
//! its spec (the policy), its report, the failure a worker recorded and the claim conflicts. It
//! renders as text ([`Explanation::text`]), as JSON (serde) and as a timeline picture
//! (`crate::timeline`).
//!
//! The source is a stored execution (`--journal PATH|URL --execution ID`) or a scenario file run
//! in memory (`--scenario FILE`). A stored orchestration is inspected as a plan
//! (`terminus_orchestrator::inspect_plan`: how a model wrote it, each agent's state).

use crate::error::CliError;
use clap::Args;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use terminus_runtime::explain::Explanation;
use terminus_runtime::{Claims, MemoryStore, Store};
use terminus_scenario::Scenario;

/// The arguments of `terminus inspect`.
#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    /// The journal of a stored execution: a SQLite file or a postgres:// URL.
    #[arg(
        long,
        value_name = "PATH|URL",
        required_unless_present = "scenario",
        requires = "execution",
        conflicts_with = "scenario"
    )]
    journal: Option<String>,
    /// The execution id (with --journal).
    #[arg(long, value_name = "ID", requires = "journal")]
    execution: Option<String>,
    /// Run this scenario file in memory and explain the run (instead of a stored execution).
    #[arg(long, value_name = "FILE.json")]
    scenario: Option<PathBuf>,
    /// Also draw the run's timeline (states over steps, calls as marks, budgets as bars) as
    /// an SVG picture into this file.
    #[arg(long, value_name = "FILE.svg")]
    svg: Option<PathBuf>,
    /// Print the explanation as one line of JSON.
    #[arg(long)]
    json: bool,
}

/// `terminus inspect`: prints the explanation (and writes the timeline); 0 once explained.
pub(crate) async fn inspect(args: InspectArgs) -> Result<u8, CliError> {
    if let (Some(journal), Some(execution)) = (&args.journal, &args.execution) {
        let store = crate::common::open_existing(journal).await?;
        let plan = terminus_orchestrator::inspect_plan(store.as_ref(), execution)
            .await
            .map_err(|e| CliError::with_code(e.exit_code(), e.to_string()))?;
        if let Some(plan) = plan {
            if args.svg.is_some() {
                return Err(CliError::Invalid(format!(
                    "--svg draws one run; execution {execution} is a plan (inspect an agent's \
                     run: --execution {execution}/AGENT/ATTEMPT)"
                )));
            }
            let mut out = std::io::stdout().lock();
            let _ = if args.json {
                writeln!(out, "{}", serde_json::to_string(&plan).unwrap_or_default())
            } else {
                write!(out, "{}", plan.text())
            };
            return Ok(0);
        }
    }
    let explanation = match (&args.scenario, &args.journal, &args.execution) {
        (Some(file), _, _) => from_scenario(file).await?,
        (None, Some(journal), Some(execution)) => from_journal(journal, execution).await?,
        // clap requires one source or the other.
        _ => {
            return Err(CliError::Invalid(
                "inspect needs --journal and --execution, or --scenario".to_owned(),
            ));
        }
    };
    if let Some(path) = &args.svg {
        let svg = crate::timeline::svg(&explanation);
        std::fs::write(path, svg)
            .map_err(|e| CliError::Internal(format!("cannot write {}: {e}", path.display())))?;
        eprintln!("terminus: timeline written to {}", path.display());
    }
    let mut out = std::io::stdout().lock();
    // A closed stdout is the reader's choice.
    let _ = if args.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string(&explanation).unwrap_or_default()
        )
    } else {
        write!(out, "{}", explanation.text())
    };
    Ok(0)
}

async fn from_journal(journal: &str, execution: &str) -> Result<Explanation, CliError> {
    let store = crate::common::open_existing(journal).await?;
    explain(store.as_ref(), execution).await
}

/// Runs the scenario in memory (execution id: its name) and explains the run from the journal
/// it wrote. A run that faults is explained as far as it went (on stdout), then its error is
/// the command's.
async fn from_scenario(file: &Path) -> Result<Explanation, CliError> {
    let scenario = Scenario::load(file).map_err(|e| CliError::Invalid(e.to_string()))?;
    let store = Arc::new(MemoryStore::new());
    let execution = scenario.name().to_owned();
    let config = terminus_runtime::RuntimeConfig {
        system_prompt: scenario.file().system_prompt.clone(),
        ..terminus_runtime::RuntimeConfig::default()
    };
    let run = scenario
        .run()
        .execution(execution.clone())
        .store(Arc::clone(&store) as Arc<dyn Store>)
        .config(config);
    let fault = match run.execute().await {
        Ok(_) => None,
        Err(e) => Some(CliError::run(&e, format!("{}: {e}", file.display()))),
    };
    let explained = explain(store.as_ref(), &execution).await;
    match (fault, explained) {
        (None, explained) => explained,
        (Some(fault), Ok(explanation)) => {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "{}", explanation.text());
            Err(fault)
        }
        // The run's fault first, then why it cannot be explained, whose code it exits with.
        (Some(fault), Err(e)) => Err(CliError::Several(vec![fault, e])),
    }
}

/// Reads what the store keeps of `execution` (the journal page by page) and explains it.
pub(crate) async fn explain(store: &dyn Claims, execution: &str) -> Result<Explanation, CliError> {
    match terminus_runtime::explain::read(store, execution).await {
        Ok(Some(explanation)) => Ok(explanation),
        Ok(None) => Err(CliError::Invalid(format!(
            "no execution `{execution}` in the journal"
        ))),
        Err(e) => Err(CliError::store(&e)),
    }
}
