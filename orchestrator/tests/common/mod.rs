//! Shared by the orchestrator's tests: plans as the scheduler sees them, and a simulation that
//! drives the scheduler to its end, checking every invariant on the way.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeSet;
use terminus_orchestrator::{
    Command, Input, Limits, Node, OnError, Own, PlanReason, Ran, Scheduler, Status, Usage,
};

/// A node with the given dependencies and error policy.
pub fn node(deps: Vec<usize>, on_error: OnError, retryable: bool, degraded: bool) -> Node {
    Node {
        deps,
        on_error,
        retryable,
        degraded,
        level: 0,
        timeout_ms: 30_000,
        own: Own {
            model_calls: 10,
            tokens: None,
            deadline_ms: None,
        },
    }
}

/// Sets each node's level from its dependencies (the nodes must be in an order where every
/// dependency comes first).
pub fn with_levels(mut nodes: Vec<Node>) -> Vec<Node> {
    for i in 0..nodes.len() {
        let level = nodes[i]
            .deps
            .iter()
            .map(|&d| nodes[d].level)
            .max()
            .unwrap_or(0)
            + 1;
        nodes[i].level = level;
    }
    nodes
}

/// What a simulated plan run came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Simulated {
    pub reason: PlanReason,
    pub statuses: Vec<Status>,
    pub attempts: Vec<u32>,
    pub inputs: u64,
    pub starts: u64,
    pub now_ms: u64,
}

/// Drives `scheduler` to its end. `outcome(agent, attempt, k)` says how an attempt ends (`k`
/// counts every decision of the run, for variety); `pick(k, running)` which running attempt
/// ends next. Panics on any broken invariant: an agent started before its dependencies ended,
/// more attempts running than `max_concurrency`, an agent ended twice, a run that cannot go on
/// (nothing running, nothing to wake for, not done), more inputs than the plan's bound.
pub fn simulate(
    mut scheduler: Scheduler,
    limits: &Limits,
    outcome: &mut dyn FnMut(usize, u32, u64) -> Ran,
    pick: &mut dyn FnMut(u64, usize) -> usize,
) -> Simulated {
    let n = scheduler.nodes().len();
    let deps: Vec<Vec<usize>> = scheduler.nodes().iter().map(|n| n.deps.clone()).collect();
    let bound = scheduler.max_attempts();
    let mut ended: Vec<Option<Status>> = vec![None; n];
    let mut running: Vec<usize> = Vec::new();
    let mut now = 0u64;
    let mut inputs = 0u64;
    let mut starts = 0u64;
    let mut k = 0u64;
    let mut wakes = 0u64;
    loop {
        let mut done = None;
        for command in scheduler.poll(now) {
            match command {
                Command::Start { agent, .. } => {
                    for &d in &deps[agent] {
                        assert!(
                            ended[d].is_some(),
                            "agent {agent} started before its dependency {d} ended"
                        );
                    }
                    assert!(
                        ended[agent].is_none(),
                        "agent {agent} started after it ended"
                    );
                    assert!(!running.contains(&agent), "agent {agent} started twice");
                    running.push(agent);
                    starts += 1;
                    assert!(
                        running.len() <= limits.max_concurrency as usize,
                        "more than max_concurrency running"
                    );
                }
                Command::Ended { agent, end } => {
                    assert!(
                        ended[agent].is_none(),
                        "agent {agent} ended twice ({:?} then {:?})",
                        ended[agent],
                        end.status
                    );
                    assert!(
                        !running.contains(&agent),
                        "agent {agent} ended while running"
                    );
                    ended[agent] = Some(end.status);
                }
                Command::Done(reason) => done = Some(reason),
                Command::Retry { .. } | Command::Warn(_) | Command::CancelRunning(_) => {}
            }
        }
        if let Some(reason) = done {
            assert!(running.is_empty(), "done while attempts run");
            let statuses: Vec<Status> = ended
                .iter()
                .enumerate()
                .map(|(i, s)| s.unwrap_or_else(|| panic!("agent {i} has no status")))
                .collect();
            let attempts = (0..n).map(|i| scheduler.attempts(i)).collect();
            return Simulated {
                reason,
                statuses,
                attempts,
                inputs,
                starts,
                now_ms: now,
            };
        }
        if running.is_empty() {
            let wake = scheduler
                .next_wake()
                .expect("not done, nothing running and nothing to wake for: stuck");
            assert!(wake > now || wakes < 2 * bound + 4, "time does not advance");
            now = now.max(wake);
            wakes += 1;
            assert!(
                wakes <= 2 * bound + 4,
                "more wake-ups ({wakes}) than the plan's bound allows"
            );
            continue;
        }
        let i = pick(k, running.len()) % running.len();
        let agent = running.swap_remove(i);
        let ran = outcome(agent, scheduler.attempts(agent), k);
        k += 1;
        now += 1;
        inputs += 1;
        assert!(
            inputs <= bound,
            "{inputs} attempts ended, more than the bound {bound}"
        );
        scheduler.feed(
            now,
            Input::Ended {
                agent,
                ran,
                used: Usage {
                    model_calls: 1,
                    tokens: 10,
                },
            },
        );
    }
}

/// Every dependency set closed under the graph (for checking early termination).
pub fn ancestors(deps: &[Vec<usize>], agent: usize) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    let mut stack = deps[agent].clone();
    while let Some(d) = stack.pop() {
        if out.insert(d) {
            stack.extend(deps[d].iter().copied());
        }
    }
    out
}
