//! Bounded model check of the plan scheduler and the circuit breaker: every small plan (every
//! DAG of three agents, every mix of `fail`/`skip`, `retryable`, `degraded_result`), every
//! interleaving of attempt outcomes, completion orders, time jumps and the host's cancel.
//! Every reachable state can reach the end, the state graph has no cycle (so every run ends),
//! and no run has more attempts than the plan's bound. The breaker, explored over every input
//! at every relevant time, can always close again. Run with `--nocapture` for the counts.

mod common;

use common::{node, with_levels};
use std::collections::{HashMap, HashSet};
use terminus_orchestrator::{
    Breaker, BreakerConfig, BreakerInput, BreakerRule, Command, Input, Limits, Node, OnError, Ran,
    Scheduler, Usage,
};

/// A scheduler state between inputs: the scheduler, the attempts it runs, plan time.
#[derive(Clone, PartialEq, Eq, Hash)]
struct State {
    scheduler: Scheduler,
    running: Vec<usize>,
    now: u64,
    done: bool,
}

impl State {
    /// Polls and applies the commands: the state at rest.
    fn settle(mut self) -> State {
        for command in self.scheduler.poll(self.now) {
            match command {
                Command::Start { agent, .. } => self.running.push(agent),
                Command::Done(_) => self.done = true,
                _ => {}
            }
        }
        self.running.sort_unstable();
        self
    }

    /// Every next state.
    fn next(&self) -> Vec<State> {
        if self.done {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (i, &agent) in self.running.iter().enumerate() {
            for ran in [
                Ran::Complete,
                Ran::Failed {
                    retry_allowed: true,
                },
                Ran::Failed {
                    retry_allowed: false,
                },
                Ran::Refused { until_ms: 0 },
            ] {
                let mut s = self.clone();
                s.running.remove(i);
                let used = Usage {
                    model_calls: 1,
                    tokens: 1,
                };
                s.scheduler.feed(s.now, Input::Ended { agent, ran, used });
                out.push(s.settle());
            }
        }
        if let Some(wake) = self.scheduler.next_wake().filter(|&w| w > self.now) {
            let mut s = self.clone();
            s.now = wake;
            out.push(s.settle());
        }
        if self.scheduler.stop().is_none() {
            let mut s = self.clone();
            s.scheduler.feed(s.now, Input::Cancel);
            out.push(s.settle());
        }
        out
    }
}

struct Explored {
    states: usize,
    longest: usize,
}

/// Explores every state from `start`; panics on a state that cannot go on, or a cycle.
fn explore(start: State, bound: u64) -> Explored {
    // Depth-first with colours: grey on the path (a grey successor is a cycle), black done.
    let mut colour: HashMap<State, bool> = HashMap::new();
    let mut stack: Vec<(State, Vec<State>)> = Vec::new();
    let first = start.settle();
    let next = first.next();
    assert!(
        first.done || !next.is_empty(),
        "the first state has no way on"
    );
    colour.insert(first.clone(), false);
    stack.push((first, next));
    let mut longest = 0;
    while let Some((state, successors)) = stack.last_mut() {
        if state.done {
            assert!(state.running.is_empty(), "done while attempts run");
        }
        match successors.pop() {
            Some(next) => match colour.get(&next) {
                Some(false) => panic!("the scheduler's state graph has a cycle"),
                Some(true) => {}
                None => {
                    let after = next.next();
                    assert!(
                        next.done || !after.is_empty(),
                        "a state that is not done has no way on"
                    );
                    colour.insert(next.clone(), false);
                    stack.push((next, after));
                    longest = longest.max(stack.len());
                }
            },
            None => {
                let (state, _) = stack.pop().expect("non-empty");
                let attempts: u64 = (0..state.scheduler.nodes().len())
                    .map(|i| u64::from(state.scheduler.attempts(i)))
                    .sum();
                assert!(attempts <= bound, "{attempts} attempts, bound {bound}");
                colour.insert(state, true);
            }
        }
    }
    Explored {
        states: colour.len(),
        longest,
    }
}

/// Every DAG of three agents (each may depend on those before it).
fn dags() -> Vec<Vec<Vec<usize>>> {
    let mut out = Vec::new();
    for b in 0..2 {
        for c in 0..4 {
            let deps_b: Vec<usize> = if b == 1 { vec![0] } else { vec![] };
            let deps_c: Vec<usize> = (0..2).filter(|k| c & (1 << k) != 0).collect();
            out.push(vec![vec![], deps_b, deps_c]);
        }
    }
    out
}

fn kinds() -> [(OnError, bool, bool); 4] {
    [
        (OnError::Fail, true, false),
        (OnError::Fail, false, false),
        (OnError::Skip, false, true),
        (OnError::Skip, false, false),
    ]
}

#[test]
fn every_small_plan_under_every_interleaving_ends() {
    let limits = Limits {
        max_concurrency: 2,
        agent_max_retries: 1,
        agent_retry_base_delay_ms: 5,
        execution_timeout_ms: 100,
        max_phases: 2,
        ..Limits::default()
    };
    let (mut plans, mut states, mut longest) = (0, 0, 0);
    for graph in dags() {
        for a in kinds() {
            for b in kinds() {
                for c in kinds() {
                    let nodes: Vec<Node> = with_levels(
                        graph
                            .iter()
                            .zip([a, b, c])
                            .map(|(deps, (on_error, retryable, degraded))| {
                                node(deps.clone(), on_error, retryable, degraded)
                            })
                            .collect(),
                    );
                    let scheduler = Scheduler::new(nodes, limits);
                    let bound = scheduler.max_attempts();
                    let start = State {
                        scheduler,
                        running: Vec::new(),
                        now: 0,
                        done: false,
                    };
                    let e = explore(start, bound);
                    plans += 1;
                    states += e.states;
                    longest = longest.max(e.longest);
                }
            }
        }
    }
    println!("{plans} plans, {states} states, longest path {longest}");
    assert_eq!(plans, 8 * 64);
    assert!(
        states > plans * 10,
        "the exploration is too small to mean much"
    );
}

/// Breaker states reachable from closed at times 0, T, 2T, … (T the timeout) and one step
/// before each: from every state below the time horizon, a way back to closed.
#[test]
fn a_breaker_can_always_close_again_and_every_rule_is_reached() {
    let config = BreakerConfig {
        threshold: 3,
        timeout_ms: 10,
    };
    let horizon = 6 * config.timeout_ms;
    let times = |now: u64| [now, now + 1, now + config.timeout_ms];
    let inputs = [
        BreakerInput::Admit,
        BreakerInput::Success,
        BreakerInput::Failure,
    ];
    let mut seen: HashSet<(Breaker, u64)> = HashSet::new();
    let mut edges: HashMap<(Breaker, u64), Vec<(Breaker, u64)>> = HashMap::new();
    let mut rules: HashSet<BreakerRule> = HashSet::new();
    let mut todo = vec![(Breaker::default(), 0u64)];
    while let Some((b, now)) = todo.pop() {
        if !seen.insert((b, now)) {
            continue;
        }
        for at in times(now).into_iter().filter(|&t| t <= horizon) {
            for input in inputs {
                let step = b.step(input, at, config);
                rules.insert(step.rule);
                edges.entry((b, now)).or_default().push((step.next, at));
                todo.push((step.next, at));
            }
        }
    }
    let closed: HashSet<(Breaker, u64)> = seen
        .iter()
        .copied()
        .filter(|(b, _)| matches!(b, Breaker::Closed { .. }))
        .collect();
    // Backwards: every state with a path to a closed one.
    let mut reaches = closed.clone();
    loop {
        let before = reaches.len();
        for (from, tos) in &edges {
            if tos.iter().any(|t| reaches.contains(t)) {
                reaches.insert(*from);
            }
        }
        if reaches.len() == before {
            break;
        }
    }
    for state in &seen {
        if state.1 + 2 * config.timeout_ms <= horizon {
            assert!(reaches.contains(state), "{state:?} can never close again");
        }
    }
    let missing: Vec<_> = BreakerRule::ALL
        .iter()
        .filter(|r| !rules.contains(r))
        .collect();
    assert!(missing.is_empty(), "rules never reached: {missing:?}");
    println!("{} breaker states", seen.len());
}
