//! Property tests of the orchestrator's pure parts: cycle finding on random graphs (every cycle,
//! only real ones, checked against brute force), and random plans driven to their end under
//! random outcomes and random completion orders (every agent ends in exactly one status, none
//! starts before its dependencies ended, every run ends within the plan's bound).

mod common;

use common::{node, simulate, with_levels};
use proptest::prelude::*;
use std::collections::BTreeSet;
use terminus_orchestrator::{Limits, OnError, PlanReason, Ran, Scheduler, Status, cycles};

/// Every elementary cycle by brute force: each sequence of distinct nodes starting at its
/// smallest, closed by edges in the direction results flow (`d -> i` when `i` depends on `d`).
fn brute_force_cycles(graph: &[Vec<usize>]) -> BTreeSet<Vec<usize>> {
    let n = graph.len();
    let edge = |from: usize, to: usize| graph[to].contains(&from);
    let mut out = BTreeSet::new();
    fn extend(
        path: &mut Vec<usize>,
        n: usize,
        edge: &dyn Fn(usize, usize) -> bool,
        out: &mut BTreeSet<Vec<usize>>,
    ) {
        let (first, last) = (path[0], path[path.len() - 1]);
        if edge(last, first) {
            out.insert(path.clone());
        }
        for next in first + 1..n {
            if !path.contains(&next) && edge(last, next) {
                path.push(next);
                extend(path, n, edge, out);
                path.pop();
            }
        }
    }
    for start in 0..n {
        extend(&mut vec![start], n, &edge, &mut out);
    }
    out
}

fn graph(max_nodes: usize) -> impl Strategy<Value = Vec<Vec<usize>>> {
    (1..=max_nodes).prop_flat_map(|n| {
        proptest::collection::vec(proptest::collection::btree_set(0..n, 0..n.min(4)), n)
            .prop_map(|sets| sets.into_iter().map(|s| s.into_iter().collect()).collect())
    })
}

/// A random DAG: each agent depends only on agents before it.
fn dag(max_nodes: usize) -> impl Strategy<Value = Vec<Vec<usize>>> {
    (1..=max_nodes).prop_flat_map(|n| {
        (0..n)
            .map(|i| {
                proptest::collection::btree_set(0..i.max(1), 0..=i.min(3))
                    .prop_map(move |s| s.into_iter().filter(|&d| d < i).collect::<Vec<_>>())
            })
            .collect::<Vec<_>>()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn validation_finds_every_cycle_and_only_real_ones(graph in graph(6)) {
        let found = cycles(&graph);
        let set: BTreeSet<Vec<usize>> = found.iter().cloned().collect();
        prop_assert_eq!(set.len(), found.len(), "a cycle listed twice: {:?}", found);
        for cycle in &found {
            for (k, &at) in cycle.iter().enumerate() {
                let next = cycle[(k + 1) % cycle.len()];
                prop_assert!(graph[next].contains(&at), "{:?} is not a cycle of {:?}", cycle, graph);
            }
        }
        prop_assert_eq!(set, brute_force_cycles(&graph));
    }

    #[test]
    fn a_dag_has_no_cycles(graph in dag(12)) {
        prop_assert!(cycles(&graph).is_empty());
    }

    #[test]
    fn every_plan_run_ends_with_one_status_per_agent_within_its_bound(
        graph in dag(10),
        kinds in proptest::collection::vec((any::<bool>(), any::<bool>(), any::<bool>()), 10),
        fails in proptest::collection::vec(0u8..4, 64),
        order in proptest::collection::vec(any::<u8>(), 64),
        concurrency in 1u32..4,
        retries in 0u32..3,
        max_phases in 1u32..8,
    ) {
        let nodes = with_levels(
            graph
                .iter()
                .enumerate()
                .map(|(i, deps)| {
                    let (skip, retryable, degraded) = kinds[i];
                    let on_error = if skip { OnError::Skip } else { OnError::Fail };
                    node(deps.clone(), on_error, retryable, degraded || !skip)
                })
                .collect(),
        );
        let limits = Limits {
            max_concurrency: concurrency,
            agent_max_retries: retries,
            max_phases,
            ..Limits::default()
        };
        let deps: Vec<Vec<usize>> = nodes.iter().map(|n| n.deps.clone()).collect();
        let levels: Vec<u32> = nodes.iter().map(|n| n.level).collect();
        let kinds_of: Vec<(OnError, bool)> = nodes.iter().map(|n| (n.on_error, n.retryable)).collect();
        let scheduler = Scheduler::new(nodes, limits);
        let bound = scheduler.max_attempts();
        let mut outcome = |_agent: usize, _attempt: u32, k: u64| match fails[(k % 64) as usize] {
            0 => Ran::Failed { retry_allowed: true },
            1 => Ran::Failed { retry_allowed: false },
            2 => Ran::Refused { until_ms: 1 },
            _ => Ran::Complete,
        };
        let mut pick = |k: u64, _running: usize| order[(k % 64) as usize] as usize;
        let run = simulate(scheduler, &limits, &mut outcome, &mut pick);
        prop_assert!(run.inputs <= bound);
        prop_assert!(run.starts <= bound);
        // The reason agrees with the statuses.
        let any_failed = run.statuses.contains(&Status::Failed);
        let all_complete = run.statuses.iter().all(|s| *s == Status::Complete);
        match run.reason {
            PlanReason::AllComplete => prop_assert!(all_complete),
            PlanReason::Degraded => {
                prop_assert!(!any_failed && !all_complete);
                prop_assert!(!run.statuses.contains(&Status::NotRun));
            }
            PlanReason::AgentFailed => prop_assert!(any_failed),
            PlanReason::MaxPhases => prop_assert!(levels.iter().any(|&l| l > max_phases)),
            other => prop_assert!(false, "unexpected reason {:?}", other),
        }
        for (i, status) in run.statuses.iter().enumerate() {
            // Nothing beyond the phase cap ever runs.
            if levels[i] > max_phases {
                prop_assert_eq!(run.attempts[i], 0);
            }
            let (on_error, retryable) = kinds_of[i];
            let cap = 1 + if on_error == OnError::Fail && retryable { retries } else { 0 };
            prop_assert!(run.attempts[i] <= cap, "agent {} ran {} times, cap {}", i, run.attempts[i], cap);
            // A fail agent never ends skipped or degraded; a skip agent never fails.
            match on_error {
                OnError::Fail => prop_assert!(!matches!(status, Status::Skipped | Status::Degraded)),
                OnError::Skip => prop_assert!(*status != Status::Failed),
            }
            // An agent whose dependency has no result never completes.
            if *status == Status::Complete {
                for &d in &deps[i] {
                    prop_assert!(run.statuses[d].has_result());
                }
            }
            // Early termination: a failed `fail` agent stops the plan, so what depends on it
            // never runs and says so.
            if deps[i].iter().any(|&d| run.statuses[d] == Status::Failed) {
                prop_assert_eq!(*status, Status::NotRun);
                prop_assert_eq!(run.attempts[i], 0);
            }
        }
    }
}
