//! `terminus plan split`: writes a plan that splits a task over N files into phases of K files,
//! each phase an agent depending on the one before (`terminus_orchestrator::split`). The plan is
//! validated as `terminus orchestrate` validates it before it is written, so what it writes
//! runs; a bad number or program is exit 2 with nothing written.

use crate::agent::{LiveAgent, StoredAgent};
use crate::error::CliError;
use crate::orchestrate::validated;
use crate::size;
use std::path::{Path, PathBuf};
use terminus_orchestrator::{PhaseProgram, Split, split};

/// `terminus plan` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct PlanArgs {
    #[command(subcommand)]
    action: PlanAction,
}

/// What `terminus plan` does.
#[derive(Debug, clap::Subcommand)]
enum PlanAction {
    /// Split a task over N files into phases of K files, each phase an agent that depends on
    /// the one before and is told what it reported. Prints the plan (or writes it with --out);
    /// run it with `terminus orchestrate`.
    Split(SplitArgs),
}

/// `terminus plan split` arguments.
#[derive(Debug, clap::Args)]
struct SplitArgs {
    /// The files in scope, by number.
    #[arg(
        long,
        value_name = "N",
        required_unless_present = "glob",
        conflicts_with = "glob"
    )]
    files: Option<u64>,
    /// The files in scope, by name: those PATTERN matches in the current folder (`src/**/*.rs`),
    /// sorted; each phase's task lists its own.
    #[arg(long, value_name = "PATTERN")]
    glob: Option<String>,
    /// The files each phase takes (the last takes what is left).
    #[arg(long, value_name = "K")]
    per_phase: u64,
    /// The task, given to every phase with the files it covers.
    #[arg(long, value_name = "TEXT")]
    task: String,
    /// Each phase runs this live-agent config (TOML).
    #[arg(
        long,
        value_name = "CONFIG.toml",
        required_unless_present = "scenario",
        conflicts_with = "scenario"
    )]
    agent: Option<PathBuf>,
    /// Each phase runs this scenario, inlined (with a `budget_scale`, scaled to its files).
    #[arg(long, value_name = "SCENARIO.json")]
    scenario: Option<PathBuf>,
    /// The plan's name.
    #[arg(long, default_value = "split")]
    name: String,
    /// Write the plan here instead of stdout.
    #[arg(long, value_name = "PLAN.json")]
    out: Option<PathBuf>,
}

/// `terminus plan`: 0 once the plan is written.
pub(crate) fn plan(args: PlanArgs) -> Result<u8, CliError> {
    let PlanAction::Split(args) = args.action;
    let invalid = |e: String| CliError::Invalid(e);
    // Relative files are read from the plan's folder: the config is named by its absolute path
    // so the plan runs wherever it is written.
    let program = match (&args.agent, &args.scenario) {
        (Some(config), _) => {
            let path = std::fs::canonicalize(config)
                .map_err(|e| invalid(format!("--agent {}: {e}", config.display())))?;
            // A config whose policy scales gives each phase the scale of its files.
            let live = StoredAgent::read(&path).and_then(|stored| LiveAgent::new(&stored))?;
            PhaseProgram::Agent {
                config: path.to_string_lossy().into_owned(),
                scales: live.policy().budget_scale.is_some(),
            }
        }
        (None, Some(file)) => {
            let shown = file.display();
            let text = std::fs::read_to_string(file)
                .map_err(|e| invalid(format!("--scenario {shown}: cannot read it: {e}")))?;
            let value = serde_json::from_str(&text)
                .map_err(|e| invalid(format!("--scenario {shown}: {e}")))?;
            PhaseProgram::Scenario(value)
        }
        (None, None) => return Err(invalid("give --agent or --scenario".into())),
    };
    let names: Vec<String> = match &args.glob {
        Some(pattern) => {
            let here = std::env::current_dir()
                .map_err(|e| invalid(format!("--glob: cannot tell the current folder: {e}")))?;
            size::matching("--glob", pattern, &here)?
                .iter()
                .map(|p| p.display().to_string())
                .collect()
        }
        None => Vec::new(),
    };
    let files = args
        .files
        .unwrap_or_else(|| u64::try_from(names.len()).unwrap_or(u64::MAX));
    let file = split(&Split {
        name: args.name.clone(),
        files,
        names,
        per_phase: args.per_phase,
        task: args.task.clone(),
        program,
    })
    .map_err(|p| invalid(p.to_string()))?;
    let folder = args
        .out
        .as_deref()
        .and_then(Path::parent)
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let base = std::fs::canonicalize(&folder).unwrap_or(folder);
    let shown = args
        .out
        .as_ref()
        .map_or_else(|| "the plan".to_owned(), |p| p.display().to_string());
    validated(Ok(file.clone()), &base, &shown)?;
    let mut text = serde_json::to_string_pretty(&file)
        .map_err(|e| CliError::Internal(format!("cannot write the plan: {e}")))?;
    text.push('\n');
    match &args.out {
        None => print!("{text}"),
        Some(path) => {
            let mut tmp = path.as_os_str().to_owned();
            tmp.push(".tmp");
            std::fs::write(&tmp, text)
                .and_then(|()| std::fs::rename(&tmp, path))
                .map_err(|e| CliError::Internal(format!("cannot write {}: {e}", path.display())))?;
            eprintln!(
                "terminus: wrote {} ({} phases)",
                path.display(),
                file.agents.len()
            );
        }
    }
    Ok(0)
}
