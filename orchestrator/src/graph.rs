//! The dependency graph: every elementary cycle, and dependency levels.

/// `graph[i]` lists the agents `i` depends on.
pub type Graph = Vec<Vec<usize>>;

/// Cycles listed at most; a plan with more is refused with the first ones and a count.
pub const MAX_CYCLES: usize = 1_000;

/// Every elementary cycle of the graph (up to [`MAX_CYCLES`]), each in the direction results
/// flow (a dependency before its dependent), starting at its agent that comes first in the
/// plan; listed by that first agent, then in depth-first order. A self-dependency is a cycle
/// of one.
pub fn cycles(graph: &Graph) -> Vec<Vec<usize>> {
    let n = graph.len();
    let mut feeds = vec![Vec::new(); n];
    for (i, deps) in graph.iter().enumerate() {
        for &d in deps {
            if d < n {
                feeds[d].push(i);
            }
        }
    }
    for f in &mut feeds {
        f.sort_unstable();
    }
    let mut out = Vec::new();
    let mut on_path = vec![false; n];
    for start in 0..n {
        // Only cycles whose smallest agent is `start`: each cycle is found once.
        let mut path = vec![start];
        on_path[start] = true;
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        while let Some((v, next)) = stack.last_mut() {
            let v = *v;
            if let Some(&w) = feeds[v].get(*next) {
                *next += 1;
                if w == start {
                    out.push(path.clone());
                    if out.len() >= MAX_CYCLES {
                        return out;
                    }
                } else if w > start && !on_path[w] {
                    on_path[w] = true;
                    path.push(w);
                    stack.push((w, 0));
                }
            } else {
                stack.pop();
                on_path[v] = false;
                path.pop();
            }
        }
    }
    out
}

/// The dependency level of each agent of an acyclic graph: 1 without dependencies, else one
/// more than its deepest dependency.
pub fn levels(graph: &Graph) -> Vec<u32> {
    let n = graph.len();
    let mut level = vec![0u32; n];
    let mut pending: Vec<usize> = graph.iter().map(Vec::len).collect();
    let mut feeds = vec![Vec::new(); n];
    for (i, deps) in graph.iter().enumerate() {
        for &d in deps {
            feeds[d].push(i);
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| pending[i] == 0).collect();
    for &i in &ready {
        level[i] = 1;
    }
    while let Some(d) = ready.pop() {
        for &i in &feeds[d] {
            level[i] = level[i].max(level[d] + 1);
            pending[i] -= 1;
            if pending[i] == 0 {
                ready.push(i);
            }
        }
    }
    level
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_three_agent_loop_is_one_cycle_in_the_direction_results_flow() {
        // collect <- report, analyse <- collect, report <- analyse.
        let graph = vec![vec![2], vec![0], vec![1]];
        assert_eq!(cycles(&graph), vec![vec![0, 1, 2]]);
    }

    #[test]
    fn two_cycles_through_one_agent_are_both_listed_and_a_self_loop_too() {
        let graph = vec![vec![1, 2], vec![0], vec![0], vec![3]];
        assert_eq!(cycles(&graph), vec![vec![0, 1], vec![0, 2], vec![3]]);
    }

    #[test]
    fn levels_follow_the_deepest_dependency() {
        let graph = vec![vec![], vec![0], vec![0, 1], vec![]];
        assert_eq!(levels(&graph), vec![1, 2, 3, 1]);
        assert!(cycles(&graph).is_empty());
    }
}
