//! [`Conductor`]: a plan run, sans IO. It owns every decision of a run (the [`Scheduler`]'s
//! commands, what each agent is given, the breaker's answers carried out, the progress to save,
//! the report) and asks its host for the rest: step a breaker, start an attempt, cancel what
//! runs, save a cell. [`crate::Orchestration`] is one host (tokio, a journal store, breakers
//! shared by every process on it); [`crate::LocalPlan`] is another (breakers and progress in
//! memory, for the Node and Python packages, whose agents are the host's own functions). Both
//! ask the same conductor, so a plan decides the same way whichever runs it.
//!
//! The host's loop: take [`Conductor::next`] until it is `None`, carrying out each [`Act`]
//! before taking the next (an [`Act::Breaker`] is answered with
//! [`Conductor::breaker_stepped`]); then wait for an attempt to end
//! ([`Conductor::finished`]), for [`Conductor::next_wake`], or for the host's cancel
//! ([`Conductor::cancel`]); repeat until [`Act::Done`].

use crate::breaker::{Admission, Breaker, BreakerConfig, BreakerInput, BreakerStep};
use crate::plan::{Agent, Plan, Program, fill};
use crate::report::{AgentReport, PlanEvent, PlanReport};
use crate::schedule::{
    Command, End, Grant, Input, PlanReason, Ran, Saved, Scheduler, Status, Usage, Why,
};
use crate::{meters, spans};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use terminus_runtime::Report;
use tracing::Span;

/// One attempt to start (or resume): what the host runs.
#[derive(Debug, Clone)]
pub struct Begin {
    /// The agent's index in the plan.
    pub agent: usize,
    /// The agent.
    pub spec: Arc<Agent>,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The attempt's execution id ([`attempt_execution`]).
    pub execution: String,
    /// The task, with its dependencies' results filled in.
    pub task: String,
    /// Its share of the plan's budget.
    pub grant: Grant,
    /// Go on with the attempt journaled before a crash rather than start it.
    pub resume: bool,
}

/// How long a kernel run may outlive its deadline before the watchdog abandons it.
pub const WATCHDOG_GRACE_MS: u64 = 5_000;

impl Begin {
    /// How long (ms from its start) the host lets the attempt run before abandoning it, and the
    /// error the attempt failed with then. A kernel run stops itself at its deadline, so the
    /// watchdog gives it [`WATCHDOG_GRACE_MS`] more; the host's own function has nothing to
    /// stop it but this, so its limit is its deadline.
    pub fn overdue(&self) -> (u64, String) {
        let deadline = self.grant.deadline_ms;
        match self.spec.program {
            Program::Host => (
                deadline,
                format!("the agent outlived its deadline of {deadline} ms"),
            ),
            Program::Scenario(_) | Program::Live { .. } => (
                deadline.saturating_add(WATCHDOG_GRACE_MS),
                format!(
                    "the watchdog abandoned the run: it outlived its deadline by \
                     {WATCHDOG_GRACE_MS} ms"
                ),
            ),
        }
    }
}

/// How an attempt ended, as the host tells it.
#[derive(Debug, Clone)]
pub enum Attempted {
    /// A kernel run ended with this report (complete or not).
    Report(Box<Report>),
    /// The host's own agent returned `result` (it completed), having spent `used`.
    Value {
        /// What its dependents receive.
        result: Value,
        /// Its model calls and tokens, as the host counted them.
        used: Usage,
    },
    /// It could not run, or the host's agent failed: the attempt failed with this error.
    Failed(String),
}

/// What the host is asked to do.
#[derive(Debug, Clone)]
pub enum Act {
    /// Step `agent`'s breaker with `input` and answer [`Conductor::breaker_stepped`] before the
    /// next act.
    Breaker {
        /// The agent's index.
        agent: usize,
        /// Its id (breakers are kept by id: [`crate::breaker_key`]).
        id: String,
        /// The input.
        input: BreakerInput,
    },
    /// Start (or resume) an attempt; tell [`Conductor::finished`] how it ended.
    Start(Box<Begin>),
    /// Cancel every running attempt (each still ends through [`Conductor::finished`]).
    Cancel,
    /// Save progress: the cell `key` now holds `value` (a durable host writes it; a host that
    /// keeps no progress ignores it).
    Save {
        /// The cell's key.
        key: String,
        /// Its value.
        value: Value,
    },
    /// Tell the observers.
    Event(PlanEvent),
    /// The plan ended with this report.
    Done(Box<PlanReport>),
}

/// The host called the conductor out of turn: the conductor's state is unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfTurn(pub String);

impl std::fmt::Display for OutOfTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OutOfTurn {}

/// What one agent's progress cell holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct AgentCell {
    pub(crate) saved: Saved,
    #[serde(default)]
    pub(crate) clamped: Vec<String>,
    #[serde(default)]
    pub(crate) error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) started_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ended_ms: Option<u64>,
    /// A completed host agent's result (a kernel run's is in its journaled report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) result: Option<Value>,
    /// A completed host agent's spending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) used: Option<Usage>,
}

/// What the orchestration's own cell holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct PlanCell {
    pub(crate) elapsed_ms: u64,
    pub(crate) used: Usage,
}

/// The cell of the orchestration's time and spending.
pub(crate) fn plan_key(execution: &str) -> String {
    format!("plan/{execution}")
}

/// The cell of an agent's progress.
pub(crate) fn agent_key(execution: &str, agent: &str) -> String {
    format!("plan/{execution}/{agent}")
}

/// What the conductor waits for before its next act.
#[derive(Debug, Clone)]
enum Waiting {
    /// The breaker's admission of this start.
    Admit {
        agent: usize,
        attempt: u32,
        resume: bool,
        grant: Grant,
        degraded_input: bool,
    },
    /// The breaker's step after this attempt ended.
    Outcome {
        agent: usize,
        complete: bool,
        used: Usage,
    },
}

/// A plan run, sans IO (see the module docs).
#[derive(Debug)]
pub struct Conductor {
    plan: Arc<Plan>,
    execution: String,
    scheduler: Scheduler,
    agents: Vec<AgentState>,
    running: Vec<bool>,
    queue: VecDeque<Command>,
    out: VecDeque<Act>,
    waiting: Option<Waiting>,
    saved_used: Option<Usage>,
    /// An agent's cell was saved since the plan's was.
    progressed: bool,
    elapsed_before: u64,
    ended: bool,
    /// Keep every completed agent's result in its cell (a host with no journal of the runs).
    keep_results: bool,
    span: Span,
}

impl Conductor {
    /// A run of `plan` as `execution`, from the start.
    pub fn new(plan: Arc<Plan>, execution: impl Into<String>) -> Conductor {
        let scheduler = Scheduler::new(plan.nodes.clone(), plan.limits);
        Conductor::with(plan, execution.into(), scheduler, 0)
    }

    fn with(
        plan: Arc<Plan>,
        execution: String,
        scheduler: Scheduler,
        elapsed_before: u64,
    ) -> Conductor {
        let n = plan.agents.len();
        Conductor {
            plan,
            execution,
            scheduler,
            agents: vec![AgentState::default(); n],
            running: vec![false; n],
            queue: VecDeque::new(),
            out: VecDeque::new(),
            waiting: None,
            saved_used: None,
            progressed: false,
            elapsed_before,
            ended: false,
            keep_results: false,
            span: Span::none(),
        }
    }

    /// Goes on from saved progress: the plan cell and each agent's cell (in plan order, `None`
    /// for an agent never saved). A bad cell is named. Give each ended attempt's journaled
    /// report with [`Conductor::set_report`] ([`Conductor::executions`] lists them) before the
    /// first [`Conductor::next`].
    pub(crate) fn restore(
        plan: Arc<Plan>,
        execution: impl Into<String>,
        plan_cell: Option<PlanCell>,
        cells: Vec<Option<AgentCell>>,
    ) -> Conductor {
        let execution = execution.into();
        let plan_cell = plan_cell.unwrap_or_default();
        let mut saved = Vec::with_capacity(plan.agents.len());
        let mut states = vec![AgentState::default(); plan.agents.len()];
        for (state, cell) in states.iter_mut().zip(cells) {
            match cell {
                Some(c) => {
                    state.clamped = c.clamped;
                    state.error = c.error;
                    state.started_ms = c.started_ms;
                    state.ended_ms = c.ended_ms;
                    state.result = c.result;
                    state.host_used = c.used;
                    saved.push(c.saved);
                }
                None => saved.push(Saved::Fresh),
            }
        }
        saved.resize(plan.agents.len(), Saved::Fresh);
        let scheduler = Scheduler::restore(plan.nodes.clone(), plan.limits, &saved, plan_cell.used);
        let mut c = Conductor::with(plan, execution, scheduler, plan_cell.elapsed_ms);
        for (i, state) in states.iter_mut().enumerate() {
            let attempts = c.scheduler.attempts(i);
            if attempts > 0 {
                state.execution = Some(attempt_execution(
                    &c.execution,
                    &c.plan.agents[i].id,
                    attempts,
                ));
            }
            match c.scheduler.end(i).map(|e| e.status) {
                Some(Status::Degraded) => state.result = c.plan.agents[i].degraded_result.clone(),
                Some(Status::Complete) => {}
                _ => state.result = None,
            }
        }
        c.agents = states;
        c
    }

    /// The agents whose last attempt has an execution, with it: read each one's journaled
    /// report for [`Conductor::set_report`].
    pub fn executions(&self) -> Vec<(usize, String)> {
        self.agents
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.execution.clone().map(|e| (i, e)))
            .collect()
    }

    /// Gives `agent`'s last attempt's journaled report (on resume): a completed agent's result
    /// is its report's.
    pub fn set_report(&mut self, agent: usize, report: Option<Report>) {
        let complete = self.scheduler.end(agent).map(|e| e.status) == Some(Status::Complete);
        let Some(state) = self.agents.get_mut(agent) else {
            return;
        };
        if complete && let Some(result) = report.as_ref().and_then(|r| r.result.clone()) {
            state.result = Some(Value::String(result));
        }
        state.report = report.map(Box::new);
    }

    /// The plan.
    pub fn plan(&self) -> &Arc<Plan> {
        &self.plan
    }

    /// The orchestration's execution id.
    pub fn execution(&self) -> &str {
        &self.execution
    }

    /// Plan time already spent before this process went on (0 for a new run): the host's
    /// clock is this plus the time since it started.
    pub fn elapsed_before(&self) -> u64 {
        self.elapsed_before
    }

    /// The breakers' limits.
    pub fn breaker_config(&self) -> BreakerConfig {
        BreakerConfig {
            threshold: self.plan.limits.circuit_breaker_failure_threshold,
            timeout_ms: self.plan.limits.circuit_breaker_timeout_ms,
        }
    }

    /// Keeps every completed agent's result in its progress cell, a run's too: for a host that
    /// keeps no journal of the runs ([`crate::LocalPlan`]), so that a restored plan still has
    /// them.
    pub fn keep_results(&mut self) {
        self.keep_results = true;
    }

    /// Puts the plan's events on `span` (the plan span of [`crate::Orchestration`]).
    pub fn set_span(&mut self, span: Span) {
        self.span = span;
    }

    /// When (plan time) the conductor has something to do if nothing ends first.
    pub fn next_wake(&self) -> Option<u64> {
        self.scheduler.next_wake()
    }

    /// Whether the plan is stopping or ended (a cancel is then a no-op).
    pub fn stopping(&self) -> bool {
        self.scheduler.stop().is_some()
    }

    /// Whether [`Act::Done`] was given.
    pub fn is_done(&self) -> bool {
        self.ended && self.out.is_empty()
    }

    /// The host cancels the plan: running attempts are cancelled, nothing more starts.
    pub fn cancel(&mut self, now_ms: u64) {
        if self.scheduler.stop().is_none() {
            self.scheduler.feed(now_ms, Input::Cancel);
        }
    }

    /// The next thing to do at plan time `now_ms`, or `None` until an attempt ends, the
    /// [`next_wake`](Conductor::next_wake) passes, the host cancels, or (after an
    /// [`Act::Breaker`]) the breaker's step is given.
    pub fn next(&mut self, now_ms: u64) -> Option<Act> {
        loop {
            if let Some(act) = self.out.pop_front() {
                return Some(act);
            }
            if self.waiting.is_some() || self.ended {
                return None;
            }
            match self.queue.pop_front() {
                Some(command) => self.command(command, now_ms),
                None => {
                    let commands = self.scheduler.poll(now_ms);
                    if commands.is_empty() {
                        let used = self.scheduler.used();
                        if self.saved_used == Some(used) && !self.progressed {
                            return None;
                        }
                        // The plan's spending or an agent's progress changed: save its time and
                        // spending with them (a resumed plan's clock goes on from there).
                        self.saved_used = Some(used);
                        self.progressed = false;
                        return Some(self.save_plan(now_ms));
                    }
                    self.queue.extend(commands);
                }
            }
        }
    }

    /// The step of the breaker an [`Act::Breaker`] asked for: the state before and the step.
    pub fn breaker_stepped(
        &mut self,
        before: Breaker,
        step: BreakerStep,
        now_ms: u64,
    ) -> Result<(), OutOfTurn> {
        match self.waiting.take() {
            None => Err(OutOfTurn("no breaker step was asked for".into())),
            Some(Waiting::Admit {
                agent,
                attempt,
                resume,
                grant,
                degraded_input,
            }) => {
                let id = self.plan.agents[agent].id.clone();
                self.breaker_event(&id, before, step);
                if let Some(Admission::Refused { until_ms }) = step.admission {
                    self.scheduler.feed(
                        now_ms,
                        Input::Ended {
                            agent,
                            ran: Ran::Refused { until_ms },
                            used: Usage::default(),
                        },
                    );
                    return Ok(());
                }
                let probe = step.admission == Some(Admission::Probe);
                let execution = attempt_execution(&self.execution, &id, attempt);
                let state = &mut self.agents[agent];
                state.execution = Some(execution.clone());
                state.clamped = grant.clamped.clone();
                state.error = None;
                state.started_ms.get_or_insert(now_ms);
                let save = self.save_agent(agent, &Saved::Started { attempts: attempt });
                self.out.push_back(save);
                self.out.push_back(Act::Event(PlanEvent::Start {
                    agent: id,
                    attempt,
                    resume,
                    probe,
                    clamped: grant.clamped.clone(),
                    degraded_input,
                }));
                let task = self.task(agent);
                self.running[agent] = true;
                self.out.push_back(Act::Start(Box::new(Begin {
                    agent,
                    spec: Arc::clone(&self.plan.agents[agent]),
                    attempt,
                    execution,
                    task,
                    grant,
                    resume,
                })));
                Ok(())
            }
            Some(Waiting::Outcome {
                agent,
                complete,
                used,
            }) => {
                let id = self.plan.agents[agent].id.clone();
                self.breaker_event(&id, before, step);
                let ran = if complete {
                    Ran::Complete
                } else {
                    Ran::Failed {
                        retry_allowed: step.next.allows_retry(),
                    }
                };
                self.scheduler
                    .feed(now_ms, Input::Ended { agent, ran, used });
                Ok(())
            }
        }
    }

    /// How the attempt of `agent` the host was asked to start ended.
    pub fn finished(&mut self, agent: usize, attempted: Attempted) -> Result<(), OutOfTurn> {
        if self.waiting.is_some() || !self.out.is_empty() {
            return Err(OutOfTurn(
                "an attempt's end was given before the acts asked for were carried out".into(),
            ));
        }
        if !self.running.get(agent).copied().unwrap_or(false) {
            return Err(OutOfTurn(format!("agent {agent} has no attempt running")));
        }
        self.running[agent] = false;
        let state = &mut self.agents[agent];
        let (complete, used) = match attempted {
            Attempted::Report(report) => {
                let used = Usage {
                    model_calls: u64::from(report.stats.model_calls),
                    tokens: report.stats.tokens(),
                };
                let complete = report.is_complete();
                if complete {
                    state.result = report.result.clone().map(Value::String);
                }
                state.report = Some(report);
                state.error = None;
                state.host_used = None;
                (complete, used)
            }
            Attempted::Value { result, used } => {
                state.result = Some(result);
                state.report = None;
                state.error = None;
                state.host_used = Some(used);
                (true, used)
            }
            Attempted::Failed(error) => {
                state.report = None;
                state.error = Some(error);
                state.host_used = None;
                (false, Usage::default())
            }
        };
        let input = if complete {
            BreakerInput::Success
        } else {
            BreakerInput::Failure
        };
        self.out.push_back(Act::Breaker {
            agent,
            id: self.plan.agents[agent].id.clone(),
            input,
        });
        self.waiting = Some(Waiting::Outcome {
            agent,
            complete,
            used,
        });
        Ok(())
    }

    fn command(&mut self, command: Command, now_ms: u64) {
        match command {
            Command::Start {
                agent,
                attempt,
                resume,
                grant,
                degraded_input,
            } => {
                self.out.push_back(Act::Breaker {
                    agent,
                    id: self.plan.agents[agent].id.clone(),
                    input: BreakerInput::Admit,
                });
                self.waiting = Some(Waiting::Admit {
                    agent,
                    attempt,
                    resume,
                    grant,
                    degraded_input,
                });
            }
            Command::Retry {
                agent,
                attempt,
                delay_ms,
            } => {
                let id = self.plan.agents[agent].id.clone();
                let save = self.save_agent(
                    agent,
                    &Saved::Retrying {
                        attempts: attempt - 1,
                    },
                );
                self.out.push_back(save);
                let after = self.agents[agent].after();
                spans::retry(&self.span, &id, attempt, delay_ms, &after);
                meters::retry();
                self.out.push_back(Act::Event(PlanEvent::Retry {
                    agent: id,
                    attempt,
                    delay_ms,
                    after,
                }));
            }
            Command::Ended { agent, end } => {
                let id = self.plan.agents[agent].id.clone();
                let state = &mut self.agents[agent];
                if end.status == Status::Degraded {
                    // What its dependents receive in its place.
                    state.result = self.plan.agents[agent].degraded_result.clone();
                }
                if state.started_ms.is_some() {
                    state.ended_ms = Some(now_ms);
                }
                let save = self.save_agent(agent, &Saved::Ended(end.clone()));
                self.out.push_back(save);
                let state = &self.agents[agent];
                let why = end.why.as_ref().map(|w| self.describe(w, state));
                let detail = why.as_deref().unwrap_or_default();
                match end.status {
                    Status::Skipped => spans::skipped(&self.span, &id, end.why.as_ref(), detail),
                    Status::Degraded => spans::degraded(&self.span, &id, end.why.as_ref(), detail),
                    Status::Complete | Status::Failed | Status::NotRun => {}
                }
                let took = state.duration_ms(now_ms).map(Duration::from_millis);
                meters::agent_ended(end.status, end.why.as_ref(), took);
                self.out.push_back(Act::Event(PlanEvent::Ended {
                    agent: id,
                    status: end.status,
                    attempts: end.attempts,
                    why,
                }));
            }
            Command::Warn(w) => self.out.push_back(Act::Event(PlanEvent::Warn(w))),
            Command::CancelRunning(reason) => {
                self.out
                    .push_back(Act::Event(PlanEvent::Cancelling(reason)));
                self.out.push_back(Act::Cancel);
            }
            Command::Done(reason) => {
                let save = self.save_plan(now_ms);
                self.out.push_back(save);
                self.out.push_back(Act::Event(PlanEvent::Done(reason)));
                let report = self.report(reason, now_ms);
                self.out.push_back(Act::Done(Box::new(report)));
                self.queue.clear();
                self.ended = true;
            }
        }
    }

    /// The task of `agent`'s attempt: its template (or its scenario's own task) with its
    /// dependencies' results.
    fn task(&self, agent: usize) -> String {
        let spec = &self.plan.agents[agent];
        let results: Vec<(&str, Option<&Value>)> = self.scheduler.nodes()[agent]
            .deps
            .iter()
            .map(|&d| {
                (
                    self.plan.agents[d].id.as_str(),
                    self.agents[d].result.as_ref(),
                )
            })
            .collect();
        match (&spec.task, &spec.program) {
            (Some(template), _) => fill(template, &results),
            (None, Program::Scenario(script)) => fill(script.task(), &results),
            (None, Program::Live { .. } | Program::Host) => String::new(),
        }
    }

    fn save_agent(&mut self, agent: usize, saved: &Saved) -> Act {
        self.progressed = true;
        let state = &self.agents[agent];
        let id = &self.plan.agents[agent].id;
        // A kernel run's result is in its journaled report; a host agent's only here (and every
        // agent's when the host keeps no journal of the runs: `keep_results`).
        let host_result = (state.report.is_none() || self.keep_results)
            && matches!(saved, Saved::Ended(e) if e.status == Status::Complete);
        let cell = AgentCell {
            saved: saved.clone(),
            clamped: state.clamped.clone(),
            error: state.error.clone(),
            started_ms: state.started_ms,
            ended_ms: state.ended_ms,
            result: if host_result {
                state.result.clone()
            } else {
                None
            },
            used: if host_result {
                state.host_used.or_else(|| {
                    state.report.as_ref().map(|r| Usage {
                        model_calls: u64::from(r.stats.model_calls),
                        tokens: r.stats.tokens(),
                    })
                })
            } else {
                None
            },
        };
        Act::Save {
            key: agent_key(&self.execution, id),
            value: serde_json::to_value(&cell).unwrap_or(Value::Null),
        }
    }

    fn save_plan(&self, now_ms: u64) -> Act {
        let cell = PlanCell {
            elapsed_ms: now_ms,
            used: self.scheduler.used(),
        };
        Act::Save {
            key: plan_key(&self.execution),
            value: serde_json::to_value(&cell).unwrap_or(Value::Null),
        }
    }

    fn breaker_event(&mut self, id: &str, before: Breaker, step: BreakerStep) {
        if before.name() != step.next.name() {
            if let Breaker::Open { since_ms } = step.next {
                let timeout = self.plan.limits.circuit_breaker_timeout_ms;
                spans::breaker_open(&self.span, id, before, since_ms.saturating_add(timeout));
                meters::breaker_open();
            }
            self.out.push_back(Act::Event(PlanEvent::Breaker {
                agent: id.to_owned(),
                from: before,
                to: step.next,
            }));
        }
    }

    fn describe(&self, why: &Why, state: &AgentState) -> String {
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

    fn report(&self, reason: PlanReason, elapsed_ms: u64) -> PlanReport {
        let agents = self
            .agents
            .iter()
            .enumerate()
            .map(|(i, state)| {
                let spec = &self.plan.agents[i];
                let end: Option<End> = self.scheduler.end(i).cloned();
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
                    attempts: self.scheduler.attempts(i),
                    duration_ms: state.duration_ms(elapsed_ms),
                    result,
                    degraded_input: end.as_ref().is_some_and(|e| e.degraded_input),
                    why: end.and_then(|e| e.why),
                    clamped: state.clamped.clone(),
                    error: state.error.clone(),
                    last_execution: state.execution.clone(),
                    report: state.report.clone(),
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
            used: self.scheduler.used(),
            elapsed_ms,
            generation: None,
        }
    }
}

/// What the conductor keeps of an agent.
#[derive(Debug, Clone, Default)]
struct AgentState {
    result: Option<Value>,
    report: Option<Box<Report>>,
    error: Option<String>,
    execution: Option<String>,
    clamped: Vec<String>,
    /// A host agent's spending (its result has no report to count it).
    host_used: Option<Usage>,
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
            (None, None) if self.result.is_some() => "complete".into(),
            (None, None) => "no run".into(),
        }
    }
}

/// The execution id of an agent's attempt.
pub fn attempt_execution(orchestration: &str, agent: &str, attempt: u32) -> String {
    format!("{orchestration}/{agent}/{attempt}")
}
