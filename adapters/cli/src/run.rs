//! `terminus run | validate | check`: scenario files run, checked without running, or run
//! against their `expect` block.

use crate::common::{JournalArgs, drive, finish, scenario_json, steps, with_model_log};
use crate::error::{CliError, INTERNAL, INVALID};
use crate::size;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use terminus_runtime::RuntimeConfig;
use terminus_scenario::Scenario;

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The scenario file.
    scenario: PathBuf,
    /// The task's size in units (the files in scope, say), as the scenario's `"scale"` says
    /// (this wins): the policy's `budget_scale` scales its budgets for it.
    #[arg(long, value_name = "N", conflicts_with = "scale_from")]
    scale: Option<u64>,
    /// The task's size from the work itself: the number of files GLOB matches in the current
    /// folder (`src/**/*.rs`) is the scale's units. The size and the scaled budgets are
    /// printed at the start and kept in the report's `scale`.
    #[arg(long, value_name = "GLOB")]
    scale_from: Option<String>,
    #[command(flatten)]
    journal: JournalArgs,
}

/// `terminus run`: the report's exit code.
pub(crate) async fn run(args: RunArgs) -> Result<u8, CliError> {
    let mut scenario = Scenario::load(&args.scenario)
        .map(with_model_log)
        .map_err(|e| CliError::Invalid(e.to_string()))?;
    let units = match &args.scale_from {
        Some(pattern) => {
            let here = std::env::current_dir().map_err(|e| {
                CliError::Invalid(format!("--scale-from: cannot tell the current folder: {e}"))
            })?;
            Some(size::units_from("--scale-from", pattern, &here)?)
        }
        None => args.scale,
    };
    if let Some(units) = units {
        let flag = match &args.scale_from {
            Some(pattern) => format!("--scale-from {pattern} ({units} files)"),
            None => format!("--scale {units}"),
        };
        scenario = scenario
            .with_scale(units)
            .map_err(|e| CliError::Invalid(format!("{}: {flag}: {e}", args.scenario.display())))?;
    }
    let store = args.journal.store().await?;
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
    if let Some(line) = size::scaled_line(scenario.policy(), args.scale_from.as_deref()) {
        eprintln!("{line}");
    }
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

/// `terminus validate`: every file is checked; the last invalid one is the error, the ones
/// before it are printed as they are found.
pub(crate) fn validate(files: &[PathBuf]) -> Result<u8, CliError> {
    let mut invalid = Vec::new();
    for file in files {
        match Scenario::load(file) {
            Ok(s) => println!("ok    {} ({})", file.display(), s.name()),
            Err(e) => invalid.push(CliError::Invalid(e.to_string())),
        }
    }
    if invalid.is_empty() {
        Ok(0)
    } else {
        Err(CliError::Several(invalid))
    }
}

/// What one checked file came to; the exit code is the worst of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Checked {
    Passed,
    Failed,
    Invalid,
    Internal,
}

/// `terminus check`: 0 if every expectation holds, 1 if one does not, 2 if a file is invalid,
/// 3 on an internal error; the invalid files are named together at the end.
pub(crate) async fn check(files: &[PathBuf]) -> Result<u8, CliError> {
    let mut worst = Checked::Passed;
    let mut invalid = Vec::new();
    for file in files {
        let checked = match Scenario::load(file) {
            Ok(scenario) => check_one(&scenario).await,
            Err(e) => {
                invalid.push(CliError::Invalid(e.to_string()));
                Checked::Invalid
            }
        };
        worst = worst.max(checked);
    }
    let code = match worst {
        Checked::Passed => return Ok(0),
        Checked::Failed => return Ok(1),
        Checked::Invalid => INVALID,
        Checked::Internal => INTERNAL,
    };
    // A run that failed printed its FAIL line on stdout; the code says the rest.
    invalid.push(CliError::Reported(code));
    Err(CliError::Several(invalid))
}

/// Runs one scenario and compares its report with its `expect` block; one line on stdout.
async fn check_one(scenario: &Scenario) -> Checked {
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
