//! `terminus resume`: an interrupted run, or a stored orchestration, continued from its
//! journal.

use crate::common::{StoreArgs, finish, open_store};
use crate::error::CliError;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use terminus_runtime::Store;

#[derive(Debug, Args)]
pub(crate) struct ResumeArgs {
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

/// The failure a worker recorded for `execution`: it exits with the worker's code.
async fn recorded_failure(store: &dyn Store, execution: &str) -> Result<(), CliError> {
    match store.failure(execution).await {
        Ok(Some(f)) => Err(CliError::with_code(
            f.exit_code,
            format!(
                "execution {execution} failed (worker {}, exit {}): {}",
                f.worker, f.exit_code, f.reason
            ),
        )),
        Ok(None) => Ok(()),
        Err(e) => Err(CliError::store(&e)),
    }
}

/// `terminus resume`: the exit code of the run (or plan) resumed.
pub(crate) async fn resume(args: ResumeArgs) -> Result<u8, CliError> {
    let raises = args
        .raise
        .iter()
        .map(|r| terminus_kernel::Raise::parse(r))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CliError::Invalid(format!("--raise {e}")))?;
    let store = open_store(&args.store.journal, args.store.durability).await?;
    recorded_failure(store.as_ref(), &args.execution).await?;
    let spec = store
        .spec(&args.execution)
        .await
        .map_err(|e| CliError::store(&e))?;
    if let Some(plan) = spec
        .as_ref()
        .and_then(|spec| terminus_orchestrator::stored_plan(spec))
    {
        if !raises.is_empty() {
            return Err(CliError::Invalid(format!(
                "--raise applies to one run; execution {} is a plan (raise the budget of the \
                 agent's run in the plan file instead)",
                args.execution
            )));
        }
        let lease = Duration::from_millis(args.store.lease_ms);
        let generation = spec
            .as_ref()
            .and_then(terminus_orchestrator::stored_generation);
        return crate::orchestrate::resume(
            store,
            &args.execution,
            plan,
            generation,
            lease,
            args.json,
        )
        .await;
    }
    let job = crate::job::Job::stored(store.as_ref(), &args.execution, None).await?;
    eprintln!(
        "terminus: resuming {} (execution {})",
        job.describe(),
        args.execution
    );
    if args.record.is_some() && !matches!(job, crate::job::Job::Agent(_)) {
        return Err(CliError::Invalid(format!(
            "--record applies to live agents; execution {} runs a scenario file, which is its \
             own recording",
            args.execution
        )));
    }
    let lease = Duration::from_millis(args.store.lease_ms);
    let record = args.record.as_deref();
    let result = match job
        .resume(store, &args.execution, lease, None, record, &raises)
        .await
    {
        Err(CliError::Login(wait)) => {
            return Ok(crate::agent::wait_for_login(
                &wait,
                Some(&args.execution),
                args.json,
            ));
        }
        result => result?,
    };
    finish(
        job.expect(),
        result,
        args.json,
        &format!("execution {}", args.execution),
    )
}
