//! `terminus runs`: the executions of a journal, one a line, filtered like a trace tool's
//! queries (`wasAborted = true`, `metadata.totalIterations >= 10`).

use crate::error::CliError;
use clap::Args;
use std::io::Write as _;
use terminus_kernel::{AbortReason, CompleteReason, Outcome};
use terminus_runtime::{ExecutionFilter, ExecutionSummary};

/// The arguments of `terminus runs`.
#[derive(Debug, Args)]
pub(crate) struct RunsArgs {
    /// The journal: a SQLite file or a postgres:// URL.
    #[arg(long, value_name = "PATH|URL")]
    journal: String,
    /// Only executions that ended `complete` or `aborted`.
    #[arg(long, value_name = "complete|aborted")]
    outcome: Option<String>,
    /// Only executions that ended with this stop reason (e.g. `max_steps`).
    #[arg(long, value_name = "R")]
    reason: Option<String>,
    /// Only executions that took at least N steps.
    #[arg(long, value_name = "N")]
    min_steps: Option<u32>,
    /// One JSON object a line instead of a table.
    #[arg(long)]
    json: bool,
}

/// Every canonical stop reason, complete ones first.
fn every_reason() -> impl Iterator<Item = Outcome> {
    CompleteReason::ALL
        .into_iter()
        .map(Outcome::Complete)
        .chain(AbortReason::ALL.into_iter().map(Outcome::Aborted))
}

/// The filter the arguments give, or what is wrong with them.
fn filter(args: &RunsArgs) -> Result<ExecutionFilter, CliError> {
    let mut filter = ExecutionFilter::all();
    if let Some(outcome) = &args.outcome {
        filter = match outcome.as_str() {
            "complete" => filter.complete(true),
            "aborted" => filter.complete(false),
            other => {
                return Err(CliError::Invalid(format!(
                    "--outcome `{other}` is not an outcome; expected `complete` or `aborted`"
                )));
            }
        };
    }
    if let Some(reason) = &args.reason {
        let Some(found) = every_reason().find(|r| r.reason_str() == reason) else {
            let names: Vec<&str> = every_reason().map(Outcome::reason_str).collect();
            return Err(CliError::Invalid(format!(
                "--reason `{reason}` is not a stop reason; expected one of {}",
                names.join(", ")
            )));
        };
        if filter.complete.is_some_and(|c| c != found.is_complete()) {
            return Err(CliError::Invalid(format!(
                "--reason {reason} ends a run {}, so it never matches --outcome {}",
                found.outcome_str(),
                args.outcome.as_deref().unwrap_or_default()
            )));
        }
        filter = filter.reason(found);
    }
    if let Some(n) = args.min_steps {
        filter = filter.min_steps(n);
    }
    Ok(filter)
}

/// `terminus runs`: 0 once listed (an empty list too), 2 for a bad filter or a missing journal,
/// 3 when the journal cannot be read.
pub(crate) async fn runs(args: RunsArgs) -> Result<u8, CliError> {
    let filter = filter(&args)?;
    let store = crate::common::open_existing(&args.journal).await?;
    let listed = store
        .executions(&filter)
        .await
        .map_err(|e| CliError::store(&e))?;
    let mut out = std::io::stdout().lock();
    // A closed stdout is the reader's choice.
    let _ = if args.json {
        listed
            .iter()
            .try_for_each(|s| writeln!(out, "{}", serde_json::to_string(s).unwrap_or_default()))
    } else {
        write!(out, "{}", table(&listed))
    };
    eprintln!(
        "terminus: {} execution{}",
        listed.len(),
        if listed.len() == 1 { "" } else { "s" }
    );
    Ok(0)
}

/// The executions as an aligned table with a header line.
pub(crate) fn table(listed: &[ExecutionSummary]) -> String {
    let header = [
        "EXECUTION",
        "STATUS",
        "OUTCOME",
        "REASON",
        "STEPS",
        "MODEL_CALLS",
        "TOOL_CALLS",
    ];
    let rows: Vec<[String; 7]> = listed
        .iter()
        .map(|s| {
            [
                s.execution.clone(),
                s.status.to_string(),
                s.outcome.map_or("-", |o| o.outcome_str()).to_owned(),
                s.outcome.map_or("-", |o| o.reason_str()).to_owned(),
                s.steps.to_string(),
                s.model_calls.to_string(),
                s.tool_calls.to_string(),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for row in &rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: [&str; 7]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(width).enumerate() {
            if i == 6 {
                s.push_str(&format!("{cell:>w$}"));
            } else if i >= 4 {
                s.push_str(&format!("{cell:>w$}  "));
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(header);
    for row in &rows {
        out.push_str(&line([
            &row[0], &row[1], &row[2], &row[3], &row[4], &row[5], &row[6],
        ]));
    }
    out
}
