//! `terminus submit` stores an execution for workers; `terminus worker` claims and runs them.

use crate::common::{StoreArgs, execution_id, open_store, print_report};
use crate::error::{CLAIMED, CliError, INTERNAL};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use terminus_runtime::{RunError, RuntimeConfig, Store};
use terminus_store::Durability;

#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
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
pub(crate) struct WorkerArgs {
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

/// `terminus submit`: prints the execution id; 0 once stored.
pub(crate) async fn submit(args: SubmitArgs) -> Result<u8, CliError> {
    let spec = crate::job::submission(&args.file, args.task.as_deref())?;
    let store = open_store(&args.journal, Durability::Process).await?;
    let name = spec.name.clone().unwrap_or_else(|| "run".into());
    let execution = execution_id(args.execution.as_deref(), &name);
    match store.create(&execution, &spec).await {
        Ok(true) => {
            eprintln!(
                "terminus: submitted {name} as execution {execution}; a `terminus worker` on this journal runs it"
            );
            println!("{execution}");
            Ok(0)
        }
        Ok(false) => Err(CliError::Invalid(format!(
            "execution `{execution}` already exists in the journal; choose another id"
        ))),
        Err(e) => Err(CliError::store(&e)),
    }
}

/// `terminus worker`: runs until Ctrl-C (or, with `--until-idle`, until nothing is runnable:
/// 0); an execution that cannot run is marked failed and the worker goes on; a journal that
/// fails ends it.
pub(crate) async fn worker(args: WorkerArgs) -> Result<u8, CliError> {
    let agents = args
        .agents_dir
        .as_deref()
        .map(crate::job::AgentsDir::open)
        .transpose()
        .map_err(|e| e.context("worker"))?;
    if let Some(addr) = args.metrics_addr {
        terminus_telemetry::serve_metrics(addr)
            .map_err(|e| CliError::Internal(format!("worker: {e}")))?;
        eprintln!("terminus: worker: metrics at http://{addr}/metrics");
    }
    let store = open_store(&args.store.journal, args.store.durability).await?;
    let worker = RuntimeConfig::default().worker;
    let lease_for = Duration::from_millis(args.store.lease_ms);
    loop {
        let lease = store
            .claim_next(&worker, lease_for)
            .await
            .map_err(|e| CliError::store(&e).context("worker"))?;
        let Some(lease) = lease else {
            if args.until_idle {
                return Ok(0);
            }
            tokio::time::sleep(Duration::from_millis(args.poll_ms)).await;
            continue;
        };
        let execution = lease.execution.clone();
        let job = match crate::job::Job::stored(store.as_ref(), &execution, agents.as_ref()).await {
            Ok(job) => job,
            Err(why) => {
                give_up(store.as_ref(), &lease, why).await;
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
            Err(why) => {
                give_up(store.as_ref(), &lease, why).await;
                continue;
            }
        };
        match result {
            Ok(report) => print_report(&report, true),
            Err(RunError::Suspended(suspended)) => {
                // Claim released with the suspension: no worker takes it until it is decided.
                crate::common::print_suspension(&suspended, true);
            }
            // One execution's end, not the worker's: said here, and the worker goes on.
            Err(e) => match e.exit_code() {
                // Another worker holds it: theirs to finish.
                CLAIMED => eprintln!("terminus: execution {execution}: {e}"),
                // The journal itself fails: no other execution would fare better.
                INTERNAL if matches!(e, RunError::Store(_)) => {
                    return Err(CliError::Internal(format!("execution {execution}: {e}")));
                }
                // This execution cannot go on (its journal does not replay, an adapter
                // faults): take the claim back and say so, rather than hand it to the next
                // worker forever.
                code => {
                    eprintln!("terminus: execution {execution}: {e}");
                    match store.claim(&execution, &worker, lease_for).await {
                        Ok(lease) => {
                            let why = CliError::with_code(code, e.to_string());
                            give_up(store.as_ref(), &lease, why).await;
                        }
                        Err(e) => eprintln!("terminus: execution {execution}: {e}"),
                    }
                }
            },
        }
    }
}

/// Marks a claimed execution failed with why, so no worker claims it again.
async fn give_up(store: &dyn Store, lease: &terminus_runtime::Lease, why: CliError) {
    let execution = &lease.execution;
    let code = why.code();
    eprintln!(
        "terminus: worker {} cannot run {execution}: {why} (marked failed, exit {code})",
        lease.worker
    );
    let failure = terminus_runtime::Failure {
        exit_code: code,
        reason: why.to_string(),
        worker: lease.worker.clone(),
    };
    if let Err(e) = store.fail(lease, &failure).await {
        eprintln!("terminus: execution {execution}: cannot mark it failed: {e}");
    }
}
