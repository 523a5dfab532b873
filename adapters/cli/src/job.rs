//! What an execution in a journal runs, read back from its host data: a scenario (kept by
//! `terminus run` and `terminus submit SCENARIO.json`) or a live agent (kept by `terminus agent`
//! and `terminus submit CONFIG.toml`). `resume` and `worker` rebuild its adapters from it, and
//! `submit` writes it.

use crate::agent::{LiveAgent, StoredAgent};
use crate::common::{drive, scenario_json, with_model_log};
use crate::error::CliError;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use terminus_kernel::Raise;
use terminus_runtime::{Report, Run, RunError, RunSpec, RuntimeConfig, Store};
use terminus_scenario::Scenario;

/// An execution's program.
pub(crate) enum Job {
    /// A scenario file: scripted model, tools and verifier.
    Scenario(Box<Scenario>),
    /// A live agent config.
    Agent(Box<LiveAgent>),
}

impl Job {
    /// Reads the program stored with `execution`; with `agents`, a live agent runs only if its
    /// config is a file under that folder, unchanged since it was stored. `Err` says why it
    /// cannot be run here (a worker records it as the execution's failure).
    pub(crate) async fn stored(
        store: &dyn Store,
        execution: &str,
        agents: Option<&AgentsDir>,
    ) -> Result<Job, CliError> {
        let spec = crate::common::spec_of(store, execution).await?;
        Job::from_host(execution, spec.host.as_ref(), agents)
    }

    /// The program kept in an execution's host data.
    pub(crate) fn from_host(
        execution: &str,
        host: Option<&serde_json::Value>,
        agents: Option<&AgentsDir>,
    ) -> Result<Job, CliError> {
        if let Some(json) = host.and_then(|h| h.get("scenario")) {
            return Scenario::parse(&json.to_string())
                .map(|s| Job::Scenario(Box::new(with_model_log(s))))
                .map_err(|e| {
                    CliError::Internal(format!("the scenario stored with `{execution}`: {e}"))
                });
        }
        if let Some(json) = host.and_then(|h| h.get("agent")) {
            let stored: StoredAgent = serde_json::from_value(json.clone()).map_err(|e| {
                CliError::Invalid(format!(
                    "the agent config stored with `{execution}` cannot be read: {e}"
                ))
            })?;
            let stored_with = || format!("the agent config stored with `{execution}`");
            if let Some(agents) = agents {
                agents
                    .admit(&stored)
                    .map_err(|e| e.context(stored_with()))?;
            }
            return LiveAgent::new(&stored)
                .map(|live| Job::Agent(Box::new(live)))
                .map_err(|e| e.context(stored_with()));
        }
        Err(CliError::Invalid(format!(
            "execution `{execution}` was not started by `terminus run`, `agent` or `submit`, so \
             it keeps no scenario or agent config; resume it from the program that started it"
        )))
    }

    /// The name progress lines give it.
    pub(crate) fn describe(&self) -> String {
        match self {
            Job::Scenario(s) => s.name().to_owned(),
            Job::Agent(live) => format!("the agent of {}", live.file()),
        }
    }

    /// The scenario's expectations, if any.
    pub(crate) fn expect(&self) -> Option<&terminus_scenario::Expect> {
        match self {
            Job::Scenario(s) => s.expect(),
            Job::Agent(_) => None,
        }
    }

    /// Resumes `execution` with this program's adapters (with `raises`, an execution a budget
    /// stopped goes on with that budget raised) (a live agent's MCP servers are started
    /// for the run and stopped after it); with `record`, a live agent's whole run is then
    /// written there from its journal. `Err` when the adapters cannot be built here, or the
    /// recording cannot be written.
    pub(crate) async fn resume(
        &self,
        store: Arc<dyn Store>,
        execution: &str,
        lease: Duration,
        worker: Option<&str>,
        record: Option<&Path>,
        raises: &[Raise],
    ) -> Result<Result<Report, RunError>, CliError> {
        let with_worker = |mut config: RuntimeConfig| {
            if let Some(worker) = worker {
                config.worker = worker.to_owned();
            }
            config
        };
        match self {
            Job::Scenario(scenario) => {
                let config = with_worker(RuntimeConfig {
                    lease,
                    ..RuntimeConfig::default()
                });
                let run = scenario
                    .resume(execution.to_owned())
                    .raise(raises.to_vec())
                    .store(store);
                Ok(drive(run, config).await)
            }
            Job::Agent(live) => {
                let mcp = live.connect().await?;
                let run = live
                    .run(
                        |model| Run::resume(execution.to_owned(), model).raise(raises.to_vec()),
                        &mcp,
                        None,
                    )
                    .store(Arc::<dyn Store>::clone(&store));
                // The system prompt is the journal's: the context files it was made of are
                // read at start, and may have changed since.
                let config = RuntimeConfig {
                    system_prompt: None,
                    ..live.runtime(lease)
                };
                let result = drive(run, with_worker(config)).await;
                let recorded = match record {
                    Some(path) => {
                        live.record_journal(store.as_ref(), execution, &mcp, path)
                            .await
                    }
                    None => Ok(()),
                };
                mcp.shutdown().await;
                recorded?;
                Ok(result)
            }
        }
    }
}

/// `worker --agents-dir DIR`: the folder whose config files the worker's live agents may come
/// from. A journal keeps each live agent's config text with its execution, and a worker runs it
/// (the commands of its `[[mcp]]` servers included), so without this whoever can write the
/// journal chooses what the worker runs. With it, a stored config runs only if the file it was
/// read from is under the folder (links resolved) and still holds exactly the stored text.
#[derive(Debug, Clone)]
pub(crate) struct AgentsDir {
    /// The folder, canonical.
    dir: PathBuf,
}

impl AgentsDir {
    /// The folder `path`, which must exist; the message names the flag.
    pub(crate) fn open(path: &Path) -> Result<AgentsDir, CliError> {
        let flag = format!("--agents-dir {}", path.display());
        let dir = path
            .canonicalize()
            .map_err(|e| CliError::Invalid(format!("{flag}: {e}")))?;
        if !dir.is_dir() {
            return Err(CliError::Invalid(format!("{flag}: not a folder")));
        }
        Ok(AgentsDir { dir })
    }

    /// Whether `stored` may run: `Err` says why not.
    pub(crate) fn admit(&self, stored: &StoredAgent) -> Result<(), CliError> {
        let outside = || {
            CliError::Invalid(format!(
                "`{}` is not a file under --agents-dir {}",
                stored.file,
                self.dir.display()
            ))
        };
        let name = Path::new(&stored.file).file_name().ok_or_else(outside)?;
        let file = stored
            .dir
            .join(name)
            .canonicalize()
            .map_err(|_| outside())?;
        if !file.starts_with(&self.dir) {
            return Err(outside());
        }
        let text = std::fs::read_to_string(&file)
            .map_err(|e| CliError::Invalid(format!("{}: cannot read: {e}", file.display())))?;
        if text != stored.config {
            return Err(CliError::Invalid(format!(
                "{} has changed since the execution was stored; submit it again",
                file.display()
            )));
        }
        Ok(())
    }
}

/// What `terminus submit` stores: the spec of an execution that waits for a worker; every
/// problem is invalid input.
pub(crate) fn submission(file: &Path, task: Option<&str>) -> Result<RunSpec, CliError> {
    let is_config = file
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("toml"));
    if is_config {
        let Some(task) = task else {
            return Err(CliError::Invalid(format!(
                "{}: a live agent needs --task TEXT",
                file.display()
            )));
        };
        let stored = StoredAgent::read(file)?;
        // Checked now, so that a config no worker could run is refused before it is stored.
        let live = LiveAgent::new(&stored)?;
        return Ok(RunSpec {
            task: task.to_owned(),
            name: Some("agent".into()),
            system: live.system_prompt().map(str::to_owned),
            policy: live.policy().clone(),
            host: Some(stored.host_data()),
            started_unix_ms: None,
        });
    }
    let scenario = Scenario::load(file).map_err(|e| CliError::Invalid(e.to_string()))?;
    let json = scenario_json(file)
        .ok_or_else(|| CliError::Invalid(format!("{}: cannot read it again", file.display())))?;
    Ok(RunSpec {
        task: task.unwrap_or(scenario.task()).to_owned(),
        name: Some(scenario.name().to_owned()),
        system: scenario.file().system_prompt.clone(),
        policy: scenario.policy().clone(),
        host: Some(serde_json::json!({ "scenario": json })),
        started_unix_ms: None,
    })
}
