//! `terminus`: run, validate and check scenario files (DESIGN.md, "The `terminus` command line").
//!
//! Exit codes: 0 complete, 1 aborted (or an expectation not met, for `check`), 2 invalid input
//! (nothing is run or written), 3 internal or storage error, 4 execution claimed by another
//! worker.

#![forbid(unsafe_code)]

use clap::{Args, Parser, Subcommand};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use terminus_runtime::{KillSwitch, Report, RuntimeConfig, Transition};
use terminus_scenario::Scenario;

const INVALID: u8 = 2;
const INTERNAL: u8 = 3;

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
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The scenario file.
    scenario: PathBuf,
    /// Durable journal: a SQLite file or a postgres:// URL (not supported yet; the journal is
    /// in memory without it).
    #[arg(long, value_name = "PATH|URL")]
    journal: Option<String>,
    /// The execution id (default: the scenario's name and the current time).
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

fn main() -> ExitCode {
    let cli = Cli::parse();
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
        }
    });
    ExitCode::from(code)
}

async fn run(args: RunArgs) -> u8 {
    if let Some(journal) = &args.journal {
        eprintln!(
            "terminus: --journal {journal}: durable journals (SQLite files, postgres:// URLs) are \
             not supported yet; leave --journal out to keep the journal in memory"
        );
        return INVALID;
    }
    let scenario = match Scenario::load(&args.scenario) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("terminus: {e}");
            return INVALID;
        }
    };
    let execution = args.execution.clone().unwrap_or_else(|| {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        format!("{}-{ms}", scenario.name())
    });
    let config = RuntimeConfig {
        lease: Duration::from_millis(args.lease_ms),
        ..RuntimeConfig::default()
    };
    let kill = KillSwitch::new();
    let on_interrupt = kill.clone();
    tokio::spawn(async move {
        // Ctrl-C is the kill switch: the run ends `aborted (cancelled)` with its report.
        if tokio::signal::ctrl_c().await.is_ok() {
            on_interrupt.kill();
        }
    });
    eprintln!(
        "terminus: running {} (execution {execution})",
        scenario.name()
    );
    let result = scenario
        .run()
        .execution(execution)
        .config(config)
        .kill_switch(kill)
        .observer(|t: &Transition<'_>| eprintln!("[{:>6} ms] {t}", t.elapsed_ms))
        .execute()
        .await;
    match result {
        Ok(report) => {
            eprintln!(
                "terminus: {} after {} (rule {})",
                report.outcome,
                steps(report.steps),
                report.rule.name()
            );
            if let Some(expect) = scenario.expect() {
                for mismatch in expect.check(&report) {
                    eprintln!("terminus: expectation not met: {mismatch}");
                }
            }
            print_report(&report, args.json);
            report.exit_code()
        }
        Err(e) => {
            eprintln!("terminus: {}: {e}", args.scenario.display());
            e.exit_code()
        }
    }
}

fn print_report(report: &Report, json: bool) {
    let mut out = std::io::stdout().lock();
    // A closed stdout is the reader's choice; the exit code still tells the outcome.
    let _ = if json {
        writeln!(out, "{}", report.to_json_line())
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
