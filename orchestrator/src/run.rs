//! [`Orchestration`]: runs a plan's agents as the [`Scheduler`] says, each attempt one kernel
//! run in the journal store, under the agent's timeout (a watchdog abandons a run that outlives
//! its deadline by [`crate::WATCHDOG_GRACE_MS`]), its circuit breaker (kept in the store's cells, so
//! every process on the journal shares it) and its share of the plan's budget.
//!
//! Durable progress: with [`Orchestration::durable`], the orchestration is an execution of its
//! own (its spec keeps the plan), each agent's progress is a cell written as it changes, and
//! [`Orchestration::resume`] goes on from them: ended agents stay ended (nothing completed runs
//! again), an attempt that was running is resumed from its own journal.

use crate::breaker::{Breaker, BreakerConfig, BreakerInput, BreakerStep};
use crate::conduct::{Act, Attempted, Begin, Conductor, PlanCell, agent_key, plan_key};
use crate::error::OrchestrateError;
use crate::generate::Generation;
use crate::plan::{Agent, Plan, PlanFile};
use crate::report::{PlanEvent, PlanReport};
use crate::schedule::Grant;
use crate::{meters, spans};
use async_trait::async_trait;
use futures_util::FutureExt as _;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use terminus_kernel::Policy;
use terminus_runtime::{
    KillSwitch, MemoryStore, Report, RunError, RunSpec, RuntimeConfig, Store, StoreError,
};
use tokio::time::Instant;
use tracing::{Instrument as _, Span};

/// One attempt to run: what a [`Launcher`] is given.
pub struct Launch {
    /// The agent.
    pub agent: Arc<Agent>,
    /// The attempt's execution id.
    pub execution: String,
    /// The task, with its dependencies' results filled in.
    pub task: String,
    /// Its share of the plan's budget: apply it to the policy with [`Grant::apply`].
    pub grant: Grant,
    /// Go on with the journaled execution rather than start it.
    pub resume: bool,
    /// The store the attempt journals into.
    pub store: Arc<dyn Store>,
    /// The attempt's kill switch (the plan's timeout, the host's cancel).
    pub kill: KillSwitch,
    /// Keep the program in the execution's host data, so it can be resumed on its own.
    pub keep_program: bool,
    /// The orchestration's worker id and lease, for the attempt's claim.
    pub config: RuntimeConfig,
}

/// Runs one attempt of an agent. The host gives it, as only the host knows its agents' programs
/// (`terminus-scenario`'s `plan::ScenarioLauncher` runs scenarios; the command line adds live
/// agents).
#[async_trait]
pub trait Launcher: Send + Sync {
    /// Runs (or resumes) the attempt to its report.
    async fn launch(&self, launch: Launch) -> Result<Report, RunError>;
}

impl Grant {
    /// Lowers `policy` to the grant.
    pub fn apply(&self, policy: &mut Policy) {
        policy.deadline_ms = Some(self.deadline_ms);
        policy.max_model_calls = self.model_calls;
        policy.token_budget = self.tokens;
    }
}

/// The launcher of an [`Orchestration`] that was given none: it refuses every agent, naming
/// it (the host knows its programs: the command line runs scenarios and live agents).
#[derive(Debug, Clone, Copy, Default)]
struct NoLauncher;

#[async_trait]
impl Launcher for NoLauncher {
    async fn launch(&self, l: Launch) -> Result<Report, RunError> {
        Err(RunError::Fault(terminus_runtime::Fault::invalid_input(
            format!(
                "agent `{}`: this orchestration was given no launcher (Orchestration::launcher)",
                l.agent.id
            ),
        )))
    }
}

/// The clock breakers read: Unix milliseconds, shared by every process on a journal.
pub trait Clock: Send + Sync {
    /// Now, in Unix milliseconds.
    fn unix_ms(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn unix_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that follows tokio's (so a paused test clock moves it): `base` plus the time since
/// it was made.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    base: u64,
    start: Instant,
}

impl TokioClock {
    /// Reads `base` now.
    pub fn new(base: u64) -> TokioClock {
        TokioClock {
            base,
            start: Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn unix_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.base.saturating_add(elapsed)
    }
}

type Observer = Box<dyn FnMut(&PlanEvent) + Send>;
type Attempt = Pin<Box<dyn Future<Output = (usize, Result<Report, Failed>)> + Send>>;

/// Why an attempt has no report.
enum Failed {
    /// The journal failed, or another worker holds the attempt: the orchestration stops.
    Store(StoreError),
    /// The attempt could not run (its adapters, the watchdog): the attempt failed.
    Run(String),
}

/// A plan run, configured builder style.
pub struct Orchestration {
    plan: Arc<Plan>,
    execution: String,
    store: Arc<dyn Store>,
    durable: bool,
    launcher: Arc<dyn Launcher>,
    clock: Arc<dyn Clock>,
    kill: KillSwitch,
    observer: Option<Observer>,
    worker: String,
    lease: Duration,
    /// How a model wrote the plan, when one did: kept with a durable orchestration and set in
    /// its report.
    generation: Option<Generation>,
    /// The plan's span while it runs (`crate::spans`).
    span: Span,
}

impl Orchestration {
    /// A run of `plan` as `execution`, in memory; its agents run by the
    /// [`launcher`](Orchestration::launcher) it is given (without one, each is refused).
    pub fn new(plan: Plan, execution: impl Into<String>) -> Orchestration {
        Orchestration {
            plan: Arc::new(plan),
            execution: execution.into(),
            store: Arc::new(MemoryStore::new()),
            durable: false,
            launcher: Arc::new(NoLauncher),
            clock: Arc::new(SystemClock),
            kill: KillSwitch::new(),
            observer: None,
            worker: format!("orchestrator-{}", std::process::id()),
            lease: Duration::from_secs(30),
            generation: None,
            span: Span::none(),
        }
    }

    /// Journals into `store` (agents' executions, breakers; with `durable`, the plan's progress
    /// too, so that a crashed orchestration can be resumed).
    #[must_use]
    pub fn store(mut self, store: Arc<dyn Store>, durable: bool) -> Orchestration {
        self.store = store;
        self.durable = durable;
        self
    }

    /// Runs agents with `launcher`.
    #[must_use]
    pub fn launcher(mut self, launcher: Arc<dyn Launcher>) -> Orchestration {
        self.launcher = launcher;
        self
    }

    /// The breakers' clock.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Orchestration {
        self.clock = clock;
        self
    }

    /// Cancels the plan when killed.
    #[must_use]
    pub fn kill_switch(mut self, kill: KillSwitch) -> Orchestration {
        self.kill = kill;
        self
    }

    /// Told every event (the command line prints them).
    #[must_use]
    pub fn observer(mut self, observer: impl FnMut(&PlanEvent) + Send + 'static) -> Orchestration {
        self.observer = Some(Box::new(observer));
        self
    }

    /// The claim's holder and lease.
    #[must_use]
    pub fn worker(mut self, worker: impl Into<String>, lease: Duration) -> Orchestration {
        self.worker = worker.into();
        self.lease = lease;
        self
    }

    /// How a model wrote the plan (`terminus orchestrate --generate`): kept with a durable
    /// orchestration ([`stored_generation`]) and set in its report.
    #[must_use]
    pub fn generation(mut self, generation: Option<Generation>) -> Orchestration {
        self.generation = generation;
        self
    }

    /// The spec a durable orchestration is created with: the plan, kept for `resume`.
    pub fn spec(file: &PlanFile) -> RunSpec {
        RunSpec {
            task: format!("plan {}", file.name),
            name: Some(file.name.clone()),
            system: None,
            policy: Policy::default(),
            host: Some(json!({ "plan": file })),
            started_unix_ms: None,
        }
    }

    /// Runs the plan from the start. A durable orchestration is created first; one that exists
    /// is refused ([`StoreError::Claimed`] if another worker runs it, else resume it).
    pub async fn execute(self) -> Result<PlanReport, OrchestrateError> {
        if self.durable {
            let mut spec = Orchestration::spec(&self.plan.file);
            if let (Some(generation), Some(Value::Object(host))) =
                (&self.generation, spec.host.as_mut())
            {
                let value = serde_json::to_value(generation)
                    .map_err(|e| OrchestrateError::Corrupt(format!("the generation: {e}")))?;
                host.insert("generation".into(), value);
            }
            if !self.store.create(&self.execution, &spec).await? {
                return Err(OrchestrateError::Exists(self.execution.clone()));
            }
        }
        self.go(false).await
    }

    /// Goes on with a durable orchestration from its progress cells (see the module docs).
    pub async fn resume(self) -> Result<PlanReport, OrchestrateError> {
        self.go(true).await
    }

    async fn go(mut self, resuming: bool) -> Result<PlanReport, OrchestrateError> {
        let report_key = report_key(&self.execution);
        if resuming {
            // The report was kept at `plan/{execution}/report`, an agent's key when the agent is
            // named `report`: that key is read only when no agent is.
            let mut keys = vec![report_key.clone()];
            if !self.plan.agents.iter().any(|a| a.id == "report") {
                keys.push(format!("plan/{}/report", self.execution));
            }
            for key in keys {
                if let Some(cell) = self.store.cell(&key).await? {
                    // It ended: nothing runs again.
                    return serde_json::from_value(cell.value)
                        .map_err(|e| OrchestrateError::Corrupt(format!("cell `{key}`: {e}")));
                }
            }
        }
        let span = spans::plan(
            &self.plan.name,
            &self.execution,
            self.plan.agents.len(),
            resuming,
        );
        self.span = span.clone();
        // Entered while the loop runs (what the store or the host traces nests under it); the
        // attempts are tasks of their own, each instrumented with it too (`attempt`).
        let result = self
            .orchestrate(resuming, report_key)
            .instrument(span.clone())
            .await;
        spans::end_plan(&span, &result);
        meters::plan_ended(&result);
        result
    }

    async fn orchestrate(
        mut self,
        resuming: bool,
        report_key: String,
    ) -> Result<PlanReport, OrchestrateError> {
        let lease = if self.durable {
            Some(
                self.store
                    .claim(&self.execution, &self.worker, self.lease)
                    .await?,
            )
        } else {
            None
        };
        let mut cells = Cells::new(Arc::clone(&self.store), &self.execution);
        let mut conductor = if resuming {
            let plan_cell: Option<PlanCell> = cells.read(plan_key(&self.execution)).await?;
            let mut saved = Vec::with_capacity(self.plan.agents.len());
            for a in &self.plan.agents {
                saved.push(cells.read(agent_key(&self.execution, &a.id)).await?);
            }
            let mut c =
                Conductor::restore(Arc::clone(&self.plan), &self.execution, plan_cell, saved);
            for (agent, execution) in c.executions() {
                let report = self.store.report(&execution).await?;
                c.set_report(agent, report);
            }
            c
        } else {
            Conductor::new(Arc::clone(&self.plan), &self.execution)
        };
        conductor.set_span(self.span.clone());
        let start = Instant::now();
        let elapsed_before = conductor.elapsed_before();
        let now = move || {
            elapsed_before
                .saturating_add(u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX))
        };
        let config = conductor.breaker_config();
        // Attempts are tasks of their own: they go on while this loop awaits the store (a
        // store connection an attempt holds must not wait on a future nobody polls).
        let mut running: tokio::task::JoinSet<(usize, Result<Report, Failed>)> =
            tokio::task::JoinSet::new();
        let mut kills: HashMap<usize, KillSwitch> = HashMap::new();
        let mut renew_at = Instant::now() + self.lease / 3;
        let report = 'run: loop {
            while let Some(act) = conductor.next(now()) {
                match act {
                    Act::Breaker { id, input, .. } => {
                        let (before, step) = breaker(
                            self.store.as_ref(),
                            &id,
                            input,
                            self.clock.unix_ms(),
                            config,
                        )
                        .await?;
                        conductor
                            .breaker_stepped(before, step, now())
                            .map_err(|e| OrchestrateError::Corrupt(e.to_string()))?;
                    }
                    Act::Start(begin) => {
                        let kill = KillSwitch::new();
                        kills.insert(begin.agent, kill.clone());
                        running.spawn(self.attempt(*begin, kill));
                    }
                    Act::Cancel => {
                        for kill in kills.values() {
                            kill.kill();
                        }
                    }
                    Act::Save { key, value } => {
                        if self.durable {
                            cells.write(key, value).await?;
                        }
                    }
                    Act::Event(event) => self.emit(&event),
                    Act::Done(mut report) => {
                        report.generation = self.generation.take();
                        break 'run *report;
                    }
                }
            }
            let wake = conductor
                .next_wake()
                .map(|ms| start + Duration::from_millis(ms.saturating_sub(elapsed_before)));
            tokio::select! {
                Some(joined) = running.join_next(), if !running.is_empty() => {
                    let Ok((agent, result)) = joined else {
                        return Err(OrchestrateError::Corrupt(
                            "an attempt's task was cancelled".into(),
                        ));
                    };
                    kills.remove(&agent);
                    let attempted = match result {
                        Ok(report) => Attempted::Report(Box::new(report)),
                        Err(Failed::Store(e)) => return Err(OrchestrateError::Store(e)),
                        Err(Failed::Run(error)) => Attempted::Failed(error),
                    };
                    conductor
                        .finished(agent, attempted)
                        .map_err(|e| OrchestrateError::Corrupt(e.to_string()))?;
                }
                () = sleep_until(wake) => {}
                () = self.kill.killed(), if !conductor.stopping() => {
                    conductor.cancel(now());
                }
                () = tokio::time::sleep_until(renew_at), if lease.is_some() => {
                    if let Some(lease) = &lease {
                        self.store.renew(lease).await?;
                    }
                    renew_at = Instant::now() + self.lease / 3;
                }
            }
        };
        if self.durable {
            let value = serde_json::to_value(&report)
                .map_err(|e| OrchestrateError::Corrupt(format!("the plan's report: {e}")))?;
            self.store.put_cell(&report_key, None, &value).await?;
        }
        if let Some(lease) = &lease {
            // The lease expires by itself if releasing fails.
            let _ = self.store.release(lease).await;
        }
        Ok(report)
    }

    fn attempt(&self, begin: Begin, kill: KillSwitch) -> Attempt {
        let agent = begin.agent;
        let (limit_ms, overdue) = begin.overdue();
        let watchdog = Duration::from_millis(limit_ms);
        let launch = Launch {
            agent: begin.spec,
            execution: begin.execution,
            task: begin.task,
            grant: begin.grant,
            resume: begin.resume,
            store: Arc::clone(&self.store),
            kill,
            keep_program: self.durable,
            config: RuntimeConfig {
                worker: self.worker.clone(),
                lease: self.lease,
                ..RuntimeConfig::default()
            },
        };
        let launcher = Arc::clone(&self.launcher);
        // The plan span is the parent of the run's span, made inside `launch`.
        let span = self.span.clone();
        Box::pin(
            async move {
                let mut launch = launch;
                if launch.resume {
                    // Crashed between saving the start and creating the run: start it after all.
                    launch.resume =
                        matches!(launch.store.spec(&launch.execution).await, Ok(Some(_)));
                }
                let run = std::panic::AssertUnwindSafe(launcher.launch(launch)).catch_unwind();
                let result = match tokio::time::timeout(watchdog, run).await {
                    Ok(Err(panic)) => {
                        let what = panic
                            .downcast_ref::<&str>()
                            .map(|s| (*s).to_owned())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        Err(Failed::Run(format!("the run panicked: {what}")))
                    }
                    Ok(Ok(Ok(report))) => Ok(report),
                    Ok(Ok(Err(RunError::Store(e)))) => Err(Failed::Store(e)),
                    Ok(Ok(Err(e))) => Err(Failed::Run(e.to_string())),
                    Err(_) => Err(Failed::Run(overdue)),
                };
                (agent, result)
            }
            .instrument(span),
        )
    }

    fn emit(&mut self, event: &PlanEvent) {
        if let Some(observer) = &mut self.observer {
            observer(event);
        }
    }
}

async fn sleep_until(wake: Option<Instant>) {
    match wake {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The cell key of `agent`'s breaker.
pub fn breaker_key(agent: &str) -> String {
    format!("breaker/{agent}")
}

/// Steps `agent`'s breaker in the store (compare-and-set, read again when another process
/// wrote first): the state before and the step.
pub async fn breaker(
    store: &dyn Store,
    agent: &str,
    input: BreakerInput,
    now_ms: u64,
    config: BreakerConfig,
) -> Result<(Breaker, BreakerStep), OrchestrateError> {
    let key = breaker_key(agent);
    for _ in 0..64 {
        let cell = store.cell(&key).await?;
        let (state, version) = match &cell {
            Some(c) => (
                serde_json::from_value::<Breaker>(c.value.clone())
                    .map_err(|e| OrchestrateError::Corrupt(format!("cell `{key}`: {e}")))?,
                Some(c.version),
            ),
            None => (Breaker::default(), None),
        };
        let step = state.step(input, now_ms, config);
        if step.next == state {
            return Ok((state, step));
        }
        let value = serde_json::to_value(step.next)
            .map_err(|e| OrchestrateError::Corrupt(format!("cell `{key}`: {e}")))?;
        if store.put_cell(&key, version, &value).await?.is_some() {
            return Ok((state, step));
        }
    }
    Err(OrchestrateError::Corrupt(format!(
        "cell `{key}`: 64 writers in a row came first; giving up"
    )))
}

/// The orchestration's progress cells, each written compare-and-set on the version this
/// process read or wrote last (only the claim's holder writes them), and read back before the
/// plan goes on: an agent counts as completed only once its result is seen stored.
pub(crate) struct Cells {
    store: Arc<dyn Store>,
    execution: String,
    versions: HashMap<String, u64>,
}

impl Cells {
    pub(crate) fn new(store: Arc<dyn Store>, execution: &str) -> Cells {
        Cells {
            store,
            execution: execution.to_owned(),
            versions: HashMap::new(),
        }
    }

    pub(crate) async fn read<T: serde::de::DeserializeOwned>(
        &mut self,
        key: String,
    ) -> Result<Option<T>, OrchestrateError> {
        let Some(cell) = self.store.cell(&key).await? else {
            return Ok(None);
        };
        self.versions.insert(key.clone(), cell.version);
        serde_json::from_value(cell.value)
            .map(Some)
            .map_err(|e| OrchestrateError::Corrupt(format!("cell `{key}`: {e}")))
    }

    pub(crate) async fn write(
        &mut self,
        key: String,
        value: Value,
    ) -> Result<(), OrchestrateError> {
        let expected = self.versions.get(&key).copied();
        let Some(version) = self.store.put_cell(&key, expected, &value).await? else {
            // Only the claim's holder writes these cells: another process wrote one.
            return Err(OrchestrateError::Store(StoreError::LeaseLost {
                execution: self.execution.clone(),
            }));
        };
        match self.store.cell(&key).await? {
            Some(cell) if cell.version == version && cell.value == value => {
                self.versions.insert(key, version);
                Ok(())
            }
            Some(cell) if cell.version == version => Err(OrchestrateError::Corrupt(format!(
                "cell `{key}` reads back as {}, not as written ({value})",
                cell.value
            ))),
            // Written over since: by another process.
            _ => Err(OrchestrateError::Store(StoreError::LeaseLost {
                execution: self.execution.clone(),
            })),
        }
    }

    /// Writes `value` under `key` over whatever another process wrote (a breaker shared by
    /// every plan on the store: the last step taken wins), read back as [`Cells::write`] does.
    pub(crate) async fn overwrite(
        &mut self,
        key: String,
        value: Value,
    ) -> Result<(), OrchestrateError> {
        for _ in 0..64 {
            match self.store.cell(&key).await? {
                Some(cell) => self.versions.insert(key.clone(), cell.version),
                None => self.versions.remove(&key),
            };
            match self.write(key.clone(), value.clone()).await {
                Err(OrchestrateError::Store(StoreError::LeaseLost { .. })) => continue,
                other => return other,
            }
        }
        Err(OrchestrateError::Corrupt(format!(
            "cell `{key}`: 64 writers in a row came first; giving up"
        )))
    }
}

/// The cell of a finished orchestration's report: `plan/{execution}:report`, which no agent's
/// cell (`plan/{execution}/{agent}`) can be, whatever the agent is named.
pub fn report_key(execution: &str) -> String {
    format!("plan/{execution}:report")
}

/// The plan file kept with a durable orchestration.
pub fn stored_plan(spec: &RunSpec) -> Option<&Value> {
    spec.host.as_ref().and_then(|h| h.get("plan"))
}

/// How a model wrote the plan of a durable orchestration, when one did; `None` also when what
/// is kept cannot be read (the plan runs without it).
pub fn stored_generation(spec: &RunSpec) -> Option<Generation> {
    let value = spec.host.as_ref()?.get("generation")?;
    serde_json::from_value(value.clone()).ok()
}
