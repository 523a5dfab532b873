//! [`Orchestration`]: runs a plan's agents as the [`Scheduler`] says, each attempt one kernel
//! run in the journal store, under the agent's timeout (a watchdog abandons a run that outlives
//! its deadline by [`WATCHDOG_GRACE_MS`]), its circuit breaker (kept in the store's cells, so
//! every process on the journal shares it) and its share of the plan's budget.
//!
//! Durable progress: with [`Orchestration::durable`], the orchestration is an execution of its
//! own (its spec keeps the plan), each agent's progress is a cell written as it changes, and
//! [`Orchestration::resume`] goes on from them: ended agents stay ended (nothing completed runs
//! again), an attempt that was running is resumed from its own journal.

use crate::breaker::{Admission, Breaker, BreakerConfig, BreakerInput, BreakerStep};
use crate::error::OrchestrateError;
use crate::plan::{Agent, Plan, PlanFile, Program, fill};
use crate::report::{AgentReport, PlanEvent, PlanReport};
use crate::schedule::{Command, Grant, Input, PlanReason, Ran, Saved, Scheduler, Status, Usage};
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

/// How long a run may outlive its deadline before the watchdog abandons it.
pub const WATCHDOG_GRACE_MS: u64 = 5_000;

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
    /// The plan's span while it runs (`crate::spans`).
    span: Span,
}

/// What one agent's progress cell holds.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct AgentCell {
    saved: Saved,
    #[serde(default)]
    clamped: Vec<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    started_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ended_ms: Option<u64>,
}

/// What the orchestration's own cell holds.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct PlanCell {
    elapsed_ms: u64,
    used: Usage,
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
            let spec = Orchestration::spec(&self.plan.file);
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
        let mut cells = Cells::new(Arc::clone(&self.store), &self.execution, self.durable);
        let n = self.plan.agents.len();
        let mut agents: Vec<AgentState> = vec![AgentState::default(); n];
        let mut scheduler = if resuming {
            let plan_cell: PlanCell = cells.read_plan().await?.unwrap_or_default();
            let mut saved = Vec::with_capacity(n);
            for (i, a) in self.plan.agents.iter().enumerate() {
                let cell = cells.read_agent(&a.id).await?;
                let state = &mut agents[i];
                match cell {
                    Some(c) => {
                        state.clamped = c.clamped;
                        state.error = c.error;
                        state.started_ms = c.started_ms;
                        state.ended_ms = c.ended_ms;
                        saved.push(c.saved);
                    }
                    None => saved.push(Saved::Fresh),
                }
            }
            cells.elapsed_before = plan_cell.elapsed_ms;
            Scheduler::restore(
                self.plan.nodes.clone(),
                self.plan.limits,
                &saved,
                plan_cell.used,
            )
        } else {
            Scheduler::new(self.plan.nodes.clone(), self.plan.limits)
        };
        for (i, state) in agents.iter_mut().enumerate() {
            let attempts = scheduler.attempts(i);
            if attempts > 0 {
                let execution =
                    attempt_execution(&self.execution, &self.plan.agents[i].id, attempts);
                state.report = self.store.report(&execution).await?.map(Box::new);
                state.execution = Some(execution);
            }
            // What an agent that ended before the crash gives its dependents.
            state.result = match scheduler.end(i).map(|e| e.status) {
                Some(Status::Complete) => state
                    .report
                    .as_ref()
                    .and_then(|r| r.result.clone().map(Value::String)),
                Some(Status::Degraded) => self.plan.agents[i].degraded_result.clone(),
                _ => None,
            };
        }
        let start = Instant::now();
        let elapsed_before = cells.elapsed_before;
        let now = move || {
            elapsed_before
                .saturating_add(u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX))
        };
        let config = BreakerConfig {
            threshold: self.plan.limits.circuit_breaker_failure_threshold,
            timeout_ms: self.plan.limits.circuit_breaker_timeout_ms,
        };
        // Attempts are tasks of their own: they go on while this loop awaits the store (a
        // store connection an attempt holds must not wait on a future nobody polls).
        let mut running: tokio::task::JoinSet<(usize, Result<Report, Failed>)> =
            tokio::task::JoinSet::new();
        let mut kills: HashMap<usize, KillSwitch> = HashMap::new();
        let mut renew_at = Instant::now() + self.lease / 3;
        let reason = 'run: loop {
            let mut again = true;
            while again {
                again = false;
                for command in scheduler.poll(now()) {
                    match command {
                        Command::Start {
                            agent,
                            attempt,
                            resume,
                            grant,
                            degraded_input,
                        } => {
                            let id = self.plan.agents[agent].id.clone();
                            let step = breaker(
                                self.store.as_ref(),
                                &id,
                                BreakerInput::Admit,
                                self.clock.unix_ms(),
                                config,
                            )
                            .await?;
                            self.breaker_event(&id, step);
                            if let Some(Admission::Refused { until_ms }) = step.1.admission {
                                scheduler.feed(
                                    now(),
                                    Input::Ended {
                                        agent,
                                        ran: Ran::Refused { until_ms },
                                        used: Usage::default(),
                                    },
                                );
                                again = true;
                                continue;
                            }
                            let probe = step.1.admission == Some(Admission::Probe);
                            let execution = attempt_execution(&self.execution, &id, attempt);
                            let state = &mut agents[agent];
                            state.execution = Some(execution.clone());
                            state.clamped = grant.clamped.clone();
                            state.error = None;
                            state.started_ms.get_or_insert_with(now);
                            cells
                                .write_agent(&id, &Saved::Started { attempts: attempt }, state)
                                .await?;
                            self.emit(&PlanEvent::Start {
                                agent: id,
                                attempt,
                                resume,
                                probe,
                                clamped: grant.clamped.clone(),
                                degraded_input,
                            });
                            let kill = KillSwitch::new();
                            kills.insert(agent, kill.clone());
                            running.spawn(self.attempt(
                                agent, execution, grant, resume, kill, &agents, &scheduler,
                            ));
                        }
                        Command::Retry {
                            agent,
                            attempt,
                            delay_ms,
                        } => {
                            let id = self.plan.agents[agent].id.clone();
                            let state = &agents[agent];
                            cells
                                .write_agent(
                                    &id,
                                    &Saved::Retrying {
                                        attempts: attempt - 1,
                                    },
                                    state,
                                )
                                .await?;
                            let after = state.after();
                            spans::retry(&self.span, &id, attempt, delay_ms, &after);
                            meters::retry();
                            self.emit(&PlanEvent::Retry {
                                agent: id,
                                attempt,
                                delay_ms,
                                after,
                            });
                        }
                        Command::Ended { agent, end } => {
                            let id = self.plan.agents[agent].id.clone();
                            let state = &mut agents[agent];
                            if end.status == Status::Degraded {
                                // What its dependents receive in its place.
                                state.result = self.plan.agents[agent].degraded_result.clone();
                            }
                            let at = now();
                            if state.started_ms.is_some() {
                                state.ended_ms = Some(at);
                            }
                            cells
                                .write_agent(&id, &Saved::Ended(end.clone()), &agents[agent])
                                .await?;
                            let why = end.why.as_ref().map(|w| self.describe(w, &agents[agent]));
                            let detail = why.as_deref().unwrap_or_default();
                            match end.status {
                                Status::Skipped => {
                                    spans::skipped(&self.span, &id, end.why.as_ref(), detail);
                                }
                                Status::Degraded => {
                                    spans::degraded(&self.span, &id, end.why.as_ref(), detail);
                                }
                                Status::Complete | Status::Failed | Status::NotRun => {}
                            }
                            let took = agents[agent].duration_ms(at).map(Duration::from_millis);
                            meters::agent_ended(end.status, end.why.as_ref(), took);
                            self.emit(&PlanEvent::Ended {
                                agent: id,
                                status: end.status,
                                attempts: end.attempts,
                                why,
                            });
                        }
                        Command::Warn(w) => self.emit(&PlanEvent::Warn(w)),
                        Command::CancelRunning(reason) => {
                            self.emit(&PlanEvent::Cancelling(reason));
                            for kill in kills.values() {
                                kill.kill();
                            }
                        }
                        Command::Done(reason) => break 'run reason,
                    }
                }
                cells.write_plan(now(), scheduler.used(), false).await?;
            }
            let wake = scheduler
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
                    self.ended(agent, result, &mut agents, &mut scheduler, config, now()).await?;
                }
                () = sleep_until(wake) => {}
                () = self.kill.killed(), if scheduler.stop().is_none() => {
                    scheduler.feed(now(), Input::Cancel);
                }
                () = tokio::time::sleep_until(renew_at), if lease.is_some() => {
                    if let Some(lease) = &lease {
                        self.store.renew(lease).await?;
                    }
                    renew_at = Instant::now() + self.lease / 3;
                }
            }
        };
        let elapsed_ms = now();
        cells.write_plan(elapsed_ms, scheduler.used(), true).await?;
        self.emit(&PlanEvent::Done(reason));
        let report = self.report(reason, &scheduler, agents, elapsed_ms);
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

    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &self,
        agent: usize,
        execution: String,
        grant: Grant,
        resume: bool,
        kill: KillSwitch,
        agents: &[AgentState],
        scheduler: &Scheduler,
    ) -> Attempt {
        let spec = &self.plan.agents[agent];
        let results: Vec<(&str, Option<&Value>)> = scheduler.nodes()[agent]
            .deps
            .iter()
            .map(|&d| (self.plan.agents[d].id.as_str(), agents[d].result.as_ref()))
            .collect();
        let task = match (&spec.task, &spec.program) {
            (Some(template), _) => fill(template, &results),
            (None, Program::Scenario(script)) => fill(script.task(), &results),
            (None, Program::Live { .. }) => String::new(),
        };
        let watchdog = Duration::from_millis(grant.deadline_ms.saturating_add(WATCHDOG_GRACE_MS));
        let launch = Launch {
            agent: Arc::clone(spec),
            execution,
            task,
            grant,
            resume,
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
                launch.resume = matches!(launch.store.spec(&launch.execution).await, Ok(Some(_)));
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
                Err(_) => Err(Failed::Run(format!(
                    "the watchdog abandoned the run: it outlived its deadline by {WATCHDOG_GRACE_MS} ms"
                ))),
            };
            (agent, result)
        }
            .instrument(span),
        )
    }

    #[allow(clippy::too_many_arguments)]
    async fn ended(
        &mut self,
        agent: usize,
        result: Result<Report, Failed>,
        agents: &mut [AgentState],
        scheduler: &mut Scheduler,
        config: BreakerConfig,
        now_ms: u64,
    ) -> Result<(), OrchestrateError> {
        let id = self.plan.agents[agent].id.clone();
        let state = &mut agents[agent];
        let (complete, used) = match result {
            Ok(report) => {
                let used = Usage {
                    model_calls: u64::from(report.stats.model_calls),
                    tokens: report.stats.tokens(),
                };
                let complete = report.is_complete();
                if complete {
                    state.result = report.result.clone().map(Value::String);
                }
                state.report = Some(Box::new(report));
                state.error = None;
                (complete, used)
            }
            Err(Failed::Store(e)) => return Err(OrchestrateError::Store(e)),
            Err(Failed::Run(error)) => {
                state.report = None;
                state.error = Some(error);
                (false, Usage::default())
            }
        };
        let input = if complete {
            BreakerInput::Success
        } else {
            BreakerInput::Failure
        };
        let step = breaker(
            self.store.as_ref(),
            &id,
            input,
            self.clock.unix_ms(),
            config,
        )
        .await?;
        self.breaker_event(&id, step);
        let ran = if complete {
            Ran::Complete
        } else {
            Ran::Failed {
                retry_allowed: step.1.next.allows_retry(),
            }
        };
        scheduler.feed(now_ms, Input::Ended { agent, ran, used });
        Ok(())
    }

    fn breaker_event(&mut self, id: &str, (before, step): (Breaker, BreakerStep)) {
        if before.name() != step.next.name() {
            if let Breaker::Open { since_ms } = step.next {
                let timeout = self.plan.limits.circuit_breaker_timeout_ms;
                spans::breaker_open(&self.span, id, before, since_ms.saturating_add(timeout));
                meters::breaker_open();
            }
            self.emit(&PlanEvent::Breaker {
                agent: id.to_owned(),
                from: before,
                to: step.next,
            });
        }
    }

    fn emit(&mut self, event: &PlanEvent) {
        if let Some(observer) = &mut self.observer {
            observer(event);
        }
    }

    fn describe(&self, why: &crate::schedule::Why, state: &AgentState) -> String {
        use crate::schedule::Why;
        match why {
            Why::RunFailed => state.after(),
            Why::CircuitOpen { until_ms } => {
                format!("its circuit breaker is open until unix ms {until_ms}")
            }
            Why::DependencySkipped { dependency } => format!(
                "its dependency `{}` was skipped without a result",
                self.plan.agents[*dependency].id
            ),
            Why::BudgetSpent => "the plan's model-call or token budget is spent".into(),
            Why::PlanStopped => "the plan stopped first".into(),
        }
    }

    fn report(
        &self,
        reason: PlanReason,
        scheduler: &Scheduler,
        agents: Vec<AgentState>,
        elapsed_ms: u64,
    ) -> PlanReport {
        let agents = agents
            .into_iter()
            .enumerate()
            .map(|(i, state)| {
                let spec = &self.plan.agents[i];
                let end = scheduler.end(i).cloned();
                let status = end.as_ref().map_or(Status::NotRun, |e| e.status);
                let result = match status {
                    Status::Complete => state.result.clone().or_else(|| {
                        state
                            .report
                            .as_ref()
                            .and_then(|r| r.result.clone().map(Value::String))
                    }),
                    Status::Degraded => spec.degraded_result.clone(),
                    _ => None,
                };
                AgentReport {
                    id: spec.id.clone(),
                    status,
                    attempts: scheduler.attempts(i),
                    duration_ms: state.duration_ms(elapsed_ms),
                    result,
                    degraded_input: end.as_ref().is_some_and(|e| e.degraded_input),
                    why: end.and_then(|e| e.why),
                    clamped: state.clamped,
                    error: state.error,
                    last_execution: state.execution,
                    report: state.report,
                }
            })
            .collect();
        PlanReport {
            execution: self.execution.clone(),
            name: self.plan.name.clone(),
            outcome: if reason.is_complete() {
                "complete".into()
            } else {
                "aborted".into()
            },
            reason,
            agents,
            used: scheduler.used(),
            elapsed_ms,
            generation: None,
        }
    }
}

/// What the executor keeps of an agent.
#[derive(Debug, Clone, Default)]
struct AgentState {
    result: Option<Value>,
    report: Option<Box<Report>>,
    error: Option<String>,
    execution: Option<String>,
    clamped: Vec<String>,
    /// Plan time when its first attempt started.
    started_ms: Option<u64>,
    /// Plan time when it ended (after its last attempt, or refused, or cancelled).
    ended_ms: Option<u64>,
}

impl AgentState {
    /// Its wall time from its first start to its end (to `plan_end` if it has not ended), over
    /// its attempts and the backoffs between them; `None` if it never started.
    fn duration_ms(&self, plan_end: u64) -> Option<u64> {
        self.started_ms
            .map(|start| self.ended_ms.unwrap_or(plan_end).saturating_sub(start))
    }

    /// How its last attempt ended, for progress lines.
    fn after(&self) -> String {
        match (&self.report, &self.error) {
            (Some(r), _) => format!("{} (rule {})", r.outcome, r.rule.name()),
            (None, Some(e)) => e.clone(),
            (None, None) => "no run".into(),
        }
    }
}

/// The execution id of an agent's attempt.
pub fn attempt_execution(orchestration: &str, agent: &str, attempt: u32) -> String {
    format!("{orchestration}/{agent}/{attempt}")
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

/// The orchestration's progress cells (written only when durable).
struct Cells {
    store: Arc<dyn Store>,
    execution: String,
    durable: bool,
    versions: HashMap<String, u64>,
    elapsed_before: u64,
    last_plan: Option<PlanCell>,
}

impl Cells {
    fn new(store: Arc<dyn Store>, execution: &str, durable: bool) -> Cells {
        Cells {
            store,
            execution: execution.to_owned(),
            durable,
            versions: HashMap::new(),
            elapsed_before: 0,
            last_plan: None,
        }
    }

    fn plan_key(&self) -> String {
        format!("plan/{}", self.execution)
    }

    fn agent_key(&self, agent: &str) -> String {
        format!("plan/{}/{agent}", self.execution)
    }

    async fn read<T: serde::de::DeserializeOwned>(
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

    async fn read_plan(&mut self) -> Result<Option<PlanCell>, OrchestrateError> {
        let key = self.plan_key();
        self.read(key).await
    }

    async fn read_agent(&mut self, agent: &str) -> Result<Option<AgentCell>, OrchestrateError> {
        let key = self.agent_key(agent);
        self.read(key).await
    }

    async fn write(&mut self, key: String, value: Value) -> Result<(), OrchestrateError> {
        let expected = self.versions.get(&key).copied();
        match self.store.put_cell(&key, expected, &value).await? {
            Some(version) => {
                self.versions.insert(key, version);
                Ok(())
            }
            // Only the claim's holder writes these cells: another process wrote one.
            None => Err(OrchestrateError::Store(StoreError::LeaseLost {
                execution: self.execution.clone(),
            })),
        }
    }

    async fn write_agent(
        &mut self,
        agent: &str,
        saved: &Saved,
        state: &AgentState,
    ) -> Result<(), OrchestrateError> {
        if !self.durable {
            return Ok(());
        }
        let cell = AgentCell {
            saved: saved.clone(),
            clamped: state.clamped.clone(),
            error: state.error.clone(),
            started_ms: state.started_ms,
            ended_ms: state.ended_ms,
        };
        let value = serde_json::to_value(&cell)
            .map_err(|e| OrchestrateError::Corrupt(format!("progress of `{agent}`: {e}")))?;
        let key = self.agent_key(agent);
        self.write(key, value).await
    }

    /// Saves the plan's time and spending when the spending changed, or when `force`d (time
    /// alone is saved with the next change and at the end).
    async fn write_plan(
        &mut self,
        elapsed_ms: u64,
        used: Usage,
        force: bool,
    ) -> Result<(), OrchestrateError> {
        if !self.durable {
            return Ok(());
        }
        let cell = PlanCell { elapsed_ms, used };
        if !force && self.last_plan.as_ref().is_some_and(|p| p.used == used) {
            return Ok(());
        }
        let value = serde_json::to_value(&cell)
            .map_err(|e| OrchestrateError::Corrupt(format!("progress of the plan: {e}")))?;
        let key = self.plan_key();
        self.write(key, value).await?;
        self.last_plan = Some(cell);
        Ok(())
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
