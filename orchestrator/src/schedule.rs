//! The plan scheduler, sans IO: it is told what happened (an attempt ended, time passed) and
//! answers with what to do (start an agent with its share of the plan's budget, cancel what
//! runs, stop). The executor ([`crate::Orchestration`]) carries that out; tests and the model
//! check drive it directly.
//!
//! Every way a plan ends is decided here and named by [`PlanReason`]: all agents ended
//! (`all_complete`, `degraded`), a `fail` agent failed (`agent_failed`: nothing left can make the
//! plan complete, so nothing more starts and what runs is cancelled), the execution timeout,
//! the phase cap, the host's cancel. An agent starts as soon as its own dependencies ended, up
//! to `max_concurrency` at once; a failed `fail` agent that is `retryable` runs again after its
//! backoff while its breaker is closed, at most `agent_max_retries` times.

use crate::limits::Limits;
use crate::plan::{Node, OnError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// How far past the plan's end an agent's deadline lowered to it lies. At the plan's end the
/// plan stops the agent (its run ends `cancelled`); its own deadline is only the backstop. Were
/// the two at the same instant, which ended the run would be a race between two timers, and the
/// same plan would give different reports.
pub const PLAN_STOP_MARGIN_MS: u64 = 500;

/// How an agent ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Its run completed.
    Complete,
    /// A `fail` agent that failed (after its retries), or was refused by its breaker.
    Failed,
    /// A `skip` agent without a `degraded_result` that failed or could not run.
    Skipped,
    /// A `skip` agent that failed or could not run and yields its `degraded_result`.
    Degraded,
    /// The plan stopped before it could start.
    NotRun,
}

impl Status {
    /// The status's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Status::Complete => "complete",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
            Status::Degraded => "degraded",
            Status::NotRun => "not_run",
        }
    }

    /// Whether dependents receive a result (its own, or its degraded one).
    pub fn has_result(self) -> bool {
        matches!(self, Status::Complete | Status::Degraded)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an agent ended as it did, when it did not complete.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "why")]
pub enum Why {
    /// Its last run failed.
    RunFailed,
    /// Its breaker refused it.
    CircuitOpen {
        /// When the breaker admits again (Unix ms).
        until_ms: u64,
    },
    /// A dependency ended without a result.
    DependencySkipped {
        /// The dependency.
        dependency: usize,
    },
    /// The plan's model-call or token budget was spent.
    BudgetSpent,
    /// The plan stopped first.
    PlanStopped,
}

impl Why {
    /// Its name, as the report's `why` tag spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Why::RunFailed => "run_failed",
            Why::CircuitOpen { .. } => "circuit_open",
            Why::DependencySkipped { .. } => "dependency_skipped",
            Why::BudgetSpent => "budget_spent",
            Why::PlanStopped => "plan_stopped",
        }
    }
}

/// An agent's end.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct End {
    /// Its status.
    pub status: Status,
    /// Runs made.
    pub attempts: u32,
    /// Whether a dependency gave it a degraded result.
    pub degraded_input: bool,
    /// Why, when it did not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<Why>,
}

/// How a plan ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanReason {
    /// Every agent completed.
    AllComplete,
    /// Every agent ended, some skipped or degraded, none failed.
    Degraded,
    /// A `fail` agent failed.
    AgentFailed,
    /// The execution timeout passed.
    ExecutionTimeout,
    /// An agent's dependency level is beyond `max_phases`.
    MaxPhases,
    /// The host cancelled the plan.
    Cancelled,
    /// A plan generator's model wrote no valid plan within its attempts and there is no
    /// fallback: nothing ran.
    NoValidPlan,
}

impl PlanReason {
    /// The reason's name (snake_case).
    pub fn name(self) -> &'static str {
        match self {
            PlanReason::AllComplete => "all_complete",
            PlanReason::Degraded => "degraded",
            PlanReason::AgentFailed => "agent_failed",
            PlanReason::ExecutionTimeout => "execution_timeout",
            PlanReason::MaxPhases => "max_phases",
            PlanReason::Cancelled => "cancelled",
            PlanReason::NoValidPlan => "no_valid_plan",
        }
    }

    /// Whether the plan completed (`all_complete`, `degraded`).
    pub fn is_complete(self) -> bool {
        matches!(self, PlanReason::AllComplete | PlanReason::Degraded)
    }

    /// When the plan ends with this reason.
    pub fn when(self) -> &'static str {
        match self {
            PlanReason::AllComplete => "every agent completed",
            PlanReason::Degraded => {
                "every agent ended, none failed, some skipped or degraded (a `skip` agent that \
                 failed, was refused by its breaker, or lost a dependency's result)"
            }
            PlanReason::AgentFailed => {
                "a `fail` agent failed after its retries, or its breaker refused it, or the plan's \
                 budget had nothing left for it: nothing left can make the plan complete, so \
                 nothing more starts and running agents are cancelled"
            }
            PlanReason::ExecutionTimeout => {
                "plan time reached `execution_timeout_ms`: running agents are cancelled (each \
                 agent's deadline is already lowered to the time the plan has left, plus a margin so that this stop comes first)"
            }
            PlanReason::MaxPhases => {
                "an agent whose dependency level is beyond `max_phases` became ready: running \
                 agents are cancelled"
            }
            PlanReason::Cancelled => "the host cancelled the plan (Ctrl-C, the kill switch)",
            PlanReason::NoValidPlan => {
                "a plan generator's model wrote no valid plan within `generator.max_attempts` \
                 model calls (each rejected plan sent back with its problems) and the generator \
                 file has no `fallback`: no agent runs"
            }
        }
    }

    /// Every reason, in table order.
    pub const ALL: [PlanReason; 7] = [
        PlanReason::AllComplete,
        PlanReason::Degraded,
        PlanReason::AgentFailed,
        PlanReason::ExecutionTimeout,
        PlanReason::MaxPhases,
        PlanReason::Cancelled,
        PlanReason::NoValidPlan,
    ];
}

impl fmt::Display for PlanReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let outcome = if self.is_complete() {
            "complete"
        } else {
            "aborted"
        };
        write!(f, "{outcome} ({})", self.name())
    }
}

/// Model calls and tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Usage {
    /// Model calls.
    pub model_calls: u64,
    /// Tokens, input and output.
    pub tokens: u64,
}

/// What an agent's run may spend: its own policy's limits, lowered to what the plan has left.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Grant {
    /// Its deadline: the lowest of its policy's, its timeout, and the plan's time left.
    pub deadline_ms: u64,
    /// Its model calls.
    pub model_calls: u32,
    /// Its tokens.
    pub tokens: Option<u64>,
    /// The policy fields the plan lowered (`deadline_ms`, `max_model_calls`, `token_budget`).
    pub clamped: Vec<String>,
}

/// What happened to an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ran {
    /// The run completed.
    Complete,
    /// The run failed; `retry_allowed` when the agent's breaker is still closed after it.
    Failed {
        /// The breaker allows a retry.
        retry_allowed: bool,
    },
    /// The breaker refused to start it (not a run).
    Refused {
        /// When the breaker admits again.
        until_ms: u64,
    },
}

/// What the scheduler is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Input {
    /// An attempt it started ended, having spent `used`.
    Ended {
        /// The agent.
        agent: usize,
        /// How.
        ran: Ran,
        /// What it spent.
        used: Usage,
    },
    /// The host cancels the plan.
    Cancel,
}

/// A warning: 80 % of a limit is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Warning {
    /// 80 % of the execution timeout passed.
    Time {
        /// Elapsed.
        elapsed_ms: u64,
        /// The timeout.
        timeout_ms: u64,
    },
    /// An agent of a level at 80 % of `max_phases` starts.
    Phases {
        /// The level.
        level: u32,
        /// The cap.
        max_phases: u32,
    },
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Command {
    /// Start (or, with `resume`, go on with) an attempt of `agent`.
    Start {
        /// The agent.
        agent: usize,
        /// The attempt, from 1.
        attempt: u32,
        /// Continue the attempt journaled before a crash rather than start a new one.
        resume: bool,
        /// Its share of the plan's budget.
        grant: Grant,
        /// Whether a dependency gave it a degraded result.
        degraded_input: bool,
    },
    /// `agent` failed and runs again at `at_ms` (after `delay_ms`).
    Retry {
        /// The agent.
        agent: usize,
        /// The next attempt.
        attempt: u32,
        /// The backoff.
        delay_ms: u64,
    },
    /// `agent` ended.
    Ended {
        /// The agent.
        agent: usize,
        /// How.
        end: End,
    },
    /// Print a warning.
    Warn(Warning),
    /// Cancel every running attempt: the plan is stopping.
    CancelRunning(PlanReason),
    /// The plan ended: nothing runs.
    Done(PlanReason),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Slot {
    /// Dependencies still running.
    Waiting,
    /// May start.
    Ready { resume: bool },
    /// Retries at `until_ms`.
    Backoff { until_ms: u64 },
    /// An attempt runs, with this reservation of the plan's budget.
    Running { reserved: Usage },
    /// Ended.
    Ended(End),
}

/// What a saved agent was doing when its orchestration stopped (the durable progress).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum Saved {
    /// Never started.
    Fresh,
    /// Attempt `attempts` started and did not end: resume it.
    Started {
        /// The attempt.
        attempts: u32,
    },
    /// Attempt `attempts` failed; the next is a retry.
    Retrying {
        /// Runs made.
        attempts: u32,
    },
    /// Ended.
    Ended(End),
}

/// The scheduler of one plan.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scheduler {
    nodes: Vec<Node>,
    limits: Limits,
    feeds: Vec<Vec<usize>>,
    slots: Vec<Slot>,
    attempts: Vec<u32>,
    waiting_on: Vec<usize>,
    ready: BTreeSet<usize>,
    backoff: BTreeSet<(u64, usize)>,
    running: usize,
    ended: usize,
    used: Usage,
    reserved: Usage,
    stop: Option<PlanReason>,
    done: bool,
    warned_time: bool,
    warned_phases: bool,
    outbox: Vec<Command>,
}

impl Scheduler {
    /// A scheduler for `nodes` (a valid, acyclic plan) under `limits`.
    pub fn new(nodes: Vec<Node>, limits: Limits) -> Scheduler {
        let saved = vec![Saved::Fresh; nodes.len()];
        Scheduler::restore(nodes, limits, &saved, Usage::default())
    }

    /// A scheduler that goes on from saved progress: ended agents stay ended, a started attempt
    /// is resumed, a retry is due at once, `used` is what the plan already spent.
    pub fn restore(nodes: Vec<Node>, limits: Limits, saved: &[Saved], used: Usage) -> Scheduler {
        let n = nodes.len();
        let mut feeds = vec![Vec::new(); n];
        for (i, node) in nodes.iter().enumerate() {
            for &d in &node.deps {
                feeds[d].push(i);
            }
        }
        let mut s = Scheduler {
            waiting_on: nodes.iter().map(|node| node.deps.len()).collect(),
            nodes,
            limits,
            feeds,
            slots: vec![Slot::Waiting; n],
            attempts: vec![0; n],
            ready: BTreeSet::new(),
            backoff: BTreeSet::new(),
            running: 0,
            ended: 0,
            used,
            reserved: Usage::default(),
            stop: None,
            done: false,
            warned_time: false,
            warned_phases: false,
            outbox: Vec::new(),
        };
        let mut pending = Vec::new();
        for (i, saved) in saved.iter().enumerate().take(n) {
            match saved {
                Saved::Fresh => {}
                Saved::Started { attempts } => {
                    s.attempts[i] = *attempts;
                    pending.push((i, true));
                }
                Saved::Retrying { attempts } => {
                    s.attempts[i] = *attempts;
                    pending.push((i, false));
                }
                Saved::Ended(end) => {
                    s.attempts[i] = end.attempts;
                    s.slots[i] = Slot::Ended(end.clone());
                    s.ended += 1;
                }
            }
        }
        for (i, saved) in saved.iter().enumerate().take(n) {
            if let Saved::Ended(end) = saved {
                for k in 0..s.feeds[i].len() {
                    let f = s.feeds[i][k];
                    s.waiting_on[f] -= 1;
                }
                if end.status == Status::Failed && s.stop.is_none() {
                    s.stop = Some(PlanReason::AgentFailed);
                }
            }
        }
        for (i, resume) in pending {
            s.slots[i] = Slot::Ready { resume };
            s.ready.insert(i);
        }
        for i in 0..n {
            if s.slots[i] == Slot::Waiting && s.waiting_on[i] == 0 {
                s.release(i);
            }
        }
        // Releasing may end agents (a dependency without a result): told again, harmlessly.
        s
    }

    /// The plan's agents as scheduled.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Runs made by `agent`.
    pub fn attempts(&self, agent: usize) -> u32 {
        self.attempts[agent]
    }

    /// `agent`'s end, if it ended.
    pub fn end(&self, agent: usize) -> Option<&End> {
        match &self.slots[agent] {
            Slot::Ended(end) => Some(end),
            _ => None,
        }
    }

    /// What the plan spent so far (ended attempts).
    pub fn used(&self) -> Usage {
        self.used
    }

    /// Attempts running.
    pub fn running(&self) -> usize {
        self.running
    }

    /// Whether the plan ended.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Once decided, how the plan ends (it is done when nothing runs any more).
    pub fn stop(&self) -> Option<PlanReason> {
        self.stop
    }

    /// The most attempts any run of the plan can start: one per agent, plus the retries of
    /// `fail` agents that are `retryable`. With one [`Input::Ended`] per attempt, it bounds the
    /// inputs of a plan run (the plan's variant, like the kernel's step bound).
    pub fn max_attempts(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| {
                1 + if n.on_error == OnError::Fail && n.retryable {
                    u64::from(self.limits.agent_max_retries)
                } else {
                    0
                }
            })
            .sum()
    }

    /// When the scheduler next has something to do by itself (a retry due, a warning, the
    /// execution timeout), in ms of plan time.
    pub fn next_wake(&self) -> Option<u64> {
        if self.done {
            return None;
        }
        let timeout = self.limits.execution_timeout_ms;
        let mut wake = self.backoff.first().map(|&(at, _)| at);
        if self.stop.is_none() {
            wake = Some(wake.map_or(timeout, |w| w.min(timeout)));
            if !self.warned_time {
                wake = wake.map(|w| w.min(timeout / 5 * 4));
            }
        }
        wake
    }

    /// Tells the scheduler what happened at `now_ms` (plan time).
    pub fn feed(&mut self, now_ms: u64, input: Input) {
        // An attempt that ends at the timeout (its deadline was lowered to it) does not decide
        // the plan's reason: the timeout came first.
        if self.stop.is_none() && now_ms >= self.limits.execution_timeout_ms {
            self.decide(PlanReason::ExecutionTimeout);
        }
        match input {
            Input::Cancel => self.decide(PlanReason::Cancelled),
            Input::Ended { agent, ran, used } => self.attempt_ended(now_ms, agent, ran, used),
        }
    }

    fn attempt_ended(&mut self, now_ms: u64, agent: usize, ran: Ran, used: Usage) {
        let Slot::Running { reserved } = self.slots[agent] else {
            return;
        };
        self.running -= 1;
        self.reserved.model_calls -= reserved.model_calls;
        self.reserved.tokens -= reserved.tokens;
        self.used.model_calls += used.model_calls;
        self.used.tokens += used.tokens;
        let node = &self.nodes[agent];
        match ran {
            Ran::Complete => self.finish_agent(agent, Status::Complete, None),
            Ran::Failed { retry_allowed } => {
                let retries = self.attempts[agent].saturating_sub(1);
                if self.stop.is_none()
                    && node.on_error == OnError::Fail
                    && node.retryable
                    && retry_allowed
                    && retries < self.limits.agent_max_retries
                {
                    let delay_ms = self.limits.retry_delay_ms(self.attempts[agent]);
                    let until_ms = now_ms.saturating_add(delay_ms);
                    self.slots[agent] = Slot::Backoff { until_ms };
                    self.backoff.insert((until_ms, agent));
                    self.outbox.push(Command::Retry {
                        agent,
                        attempt: self.attempts[agent] + 1,
                        delay_ms,
                    });
                } else {
                    self.fail(agent, Why::RunFailed);
                }
            }
            Ran::Refused { until_ms } => {
                // Not a run: the attempt did not happen.
                self.attempts[agent] -= 1;
                self.fail(agent, Why::CircuitOpen { until_ms });
            }
        }
    }

    /// `agent` cannot complete: a `skip` agent yields its degraded result (or none), a `fail`
    /// agent fails and with it the plan.
    fn fail(&mut self, agent: usize, why: Why) {
        let node = &self.nodes[agent];
        let status = match (node.on_error, node.degraded) {
            (OnError::Fail, _) => Status::Failed,
            (OnError::Skip, true) => Status::Degraded,
            (OnError::Skip, false) => Status::Skipped,
        };
        if status == Status::Failed {
            // Decided first, so that its dependents end `not_run` (the plan stopped), not
            // failed for want of its result.
            self.decide(PlanReason::AgentFailed);
        }
        self.finish_agent(agent, status, Some(why));
    }

    fn finish_agent(&mut self, agent: usize, status: Status, why: Option<Why>) {
        let degraded_input = self.degraded_input(agent);
        let end = End {
            status,
            attempts: self.attempts[agent],
            degraded_input,
            why,
        };
        self.slots[agent] = Slot::Ended(end.clone());
        self.ready.remove(&agent);
        self.ended += 1;
        self.outbox.push(Command::Ended { agent, end });
        for k in 0..self.feeds[agent].len() {
            let f = self.feeds[agent][k];
            self.waiting_on[f] -= 1;
            if self.waiting_on[f] == 0 && self.slots[f] == Slot::Waiting {
                self.release(f);
            }
        }
    }

    /// Every dependency of `agent` ended: it may start, unless one ended without a result.
    fn release(&mut self, agent: usize) {
        let skipped = self.nodes[agent]
            .deps
            .iter()
            .copied()
            .find(|&d| matches!(&self.slots[d], Slot::Ended(e) if !e.status.has_result()));
        match skipped {
            Some(dependency) if self.stop.is_none() => {
                self.fail(agent, Why::DependencySkipped { dependency });
            }
            Some(_) => {}
            None => {
                self.slots[agent] = Slot::Ready { resume: false };
                self.ready.insert(agent);
            }
        }
    }

    fn degraded_input(&self, agent: usize) -> bool {
        self.nodes[agent]
            .deps
            .iter()
            .any(|&d| matches!(&self.slots[d], Slot::Ended(e) if e.status == Status::Degraded))
    }

    fn decide(&mut self, reason: PlanReason) {
        if self.stop.is_none() && !self.done {
            self.stop = Some(reason);
            if self.running > 0 {
                self.outbox.push(Command::CancelRunning(reason));
            }
        }
    }

    /// What to do at `now_ms` (plan time): the commands of what was fed, then retries that are
    /// due, warnings, starts up to `max_concurrency`, and the end.
    pub fn poll(&mut self, now_ms: u64) -> Vec<Command> {
        if self.done {
            return std::mem::take(&mut self.outbox);
        }
        let timeout = self.limits.execution_timeout_ms;
        if self.stop.is_none() && now_ms >= timeout {
            self.decide(PlanReason::ExecutionTimeout);
        }
        if !self.warned_time && self.stop.is_none() && now_ms >= timeout / 5 * 4 {
            self.warned_time = true;
            self.outbox.push(Command::Warn(Warning::Time {
                elapsed_ms: now_ms,
                timeout_ms: timeout,
            }));
        }
        while let Some(&(at, agent)) = self.backoff.first() {
            if at > now_ms && self.stop.is_none() {
                break;
            }
            self.backoff.pop_first();
            if self.stop.is_some() {
                // A retry that never came: the agent ends with its last run's failure.
                self.fail(agent, Why::RunFailed);
            } else {
                self.slots[agent] = Slot::Ready { resume: false };
                self.ready.insert(agent);
            }
        }
        self.start_ready(now_ms);
        if self.stop.is_some() && self.running == 0 {
            self.finish_stopped();
        } else if self.stop.is_none() && self.ended == self.nodes.len() {
            let all = self.slots.iter().all(|s| {
                matches!(
                    s,
                    Slot::Ended(End {
                        status: Status::Complete,
                        ..
                    })
                )
            });
            self.stop = Some(if all {
                PlanReason::AllComplete
            } else {
                PlanReason::Degraded
            });
            self.done = true;
            self.outbox
                .push(Command::Done(self.stop.unwrap_or(PlanReason::Degraded)));
        }
        std::mem::take(&mut self.outbox)
    }

    fn start_ready(&mut self, now_ms: u64) {
        let cap = self.limits.max_concurrency as usize;
        let mut deferred = Vec::new();
        while self.stop.is_none() && self.running < cap {
            let Some(agent) = self.ready.pop_first() else {
                break;
            };
            let level = self.nodes[agent].level;
            let max_phases = self.limits.max_phases;
            if level > max_phases {
                self.ready.insert(agent);
                self.decide(PlanReason::MaxPhases);
                break;
            }
            if !self.warned_phases && u64::from(level) * 5 >= u64::from(max_phases) * 4 {
                self.warned_phases = true;
                self.outbox
                    .push(Command::Warn(Warning::Phases { level, max_phases }));
            }
            let Some((grant, reserved)) = self.grant(agent, now_ms) else {
                if self.running > 0 {
                    // Running attempts hold the budget; what they do not spend comes back.
                    deferred.push(agent);
                } else {
                    self.fail(agent, Why::BudgetSpent);
                }
                continue;
            };
            let resume = matches!(self.slots[agent], Slot::Ready { resume: true });
            if !resume {
                self.attempts[agent] += 1;
            }
            self.slots[agent] = Slot::Running { reserved };
            self.running += 1;
            self.reserved.model_calls += reserved.model_calls;
            self.reserved.tokens += reserved.tokens;
            self.outbox.push(Command::Start {
                agent,
                attempt: self.attempts[agent],
                resume,
                grant,
                degraded_input: self.degraded_input(agent),
            });
        }
        self.ready.extend(deferred);
    }

    /// `agent`'s share: its own limits lowered to the plan's time and unreserved budget; `None`
    /// when the budget has nothing left for it.
    fn grant(&self, agent: usize, now_ms: u64) -> Option<(Grant, Usage)> {
        let node = &self.nodes[agent];
        let own = node.own;
        let mut clamped = Vec::new();
        // The agent's own bound is its policy's deadline within its timeout; the plan lowers
        // it to the time it has left (that is the clamp the report names), plus a margin: at
        // the plan's end the plan's stop, never the agent's own deadline, ends the run.
        let own_ms = own
            .deadline_ms
            .map_or(node.timeout_ms, |d| d.min(node.timeout_ms));
        let left_ms = self
            .limits
            .execution_timeout_ms
            .saturating_sub(now_ms)
            .max(1)
            .saturating_add(PLAN_STOP_MARGIN_MS);
        let deadline_ms = own_ms.min(left_ms);
        if left_ms < own_ms {
            clamped.push("deadline_ms".to_owned());
        }
        let mut model_calls = own.model_calls.max(1);
        if let Some(limit) = self.limits.max_model_calls {
            let left = limit.saturating_sub(self.used.model_calls + self.reserved.model_calls);
            if left == 0 {
                return None;
            }
            if u64::from(model_calls) > left {
                model_calls = u32::try_from(left).unwrap_or(u32::MAX);
                clamped.push("max_model_calls".to_owned());
            }
        }
        let mut tokens = own.tokens;
        if let Some(limit) = self.limits.token_budget {
            let left = limit.saturating_sub(self.used.tokens + self.reserved.tokens);
            if left == 0 {
                return None;
            }
            if tokens.is_none_or(|t| t > left) {
                tokens = Some(left);
                clamped.push("token_budget".to_owned());
            }
        }
        let reserved = Usage {
            model_calls: if self.limits.max_model_calls.is_some() {
                u64::from(model_calls)
            } else {
                0
            },
            tokens: if self.limits.token_budget.is_some() {
                tokens.unwrap_or(0)
            } else {
                0
            },
        };
        let grant = Grant {
            deadline_ms,
            model_calls,
            tokens,
            clamped,
        };
        Some((grant, reserved))
    }

    fn finish_stopped(&mut self) {
        for agent in 0..self.nodes.len() {
            match self.slots[agent] {
                Slot::Ended(_) => {}
                Slot::Backoff { .. } => self.fail(agent, Why::RunFailed),
                _ => {
                    let end = End {
                        status: Status::NotRun,
                        attempts: self.attempts[agent],
                        degraded_input: false,
                        why: Some(Why::PlanStopped),
                    };
                    self.slots[agent] = Slot::Ended(end.clone());
                    self.ended += 1;
                    self.outbox.push(Command::Ended { agent, end });
                }
            }
        }
        self.backoff.clear();
        self.ready.clear();
        self.done = true;
        let reason = self.stop.unwrap_or(PlanReason::Cancelled);
        self.outbox.push(Command::Done(reason));
    }
}
