//! Exhaustive exploration of the core machine over its abstract input alphabet: the model check
//! behind the termination claim, and the source `spec/machine.md` is generated from.
//!
//! From a fresh machine, every input of [`alphabet`] is applied to every reachable state
//! (breadth-first, states identified by the core state and every counter). The result says how
//! many states there are, whether a terminal state is reachable from each of them, and whether
//! the non-terminal part of the graph has a cycle. Hosts can run it on their own (small) policy.

use crate::command::{Command, Notice, NudgeKind};
use crate::core::State;
use crate::input::{Batch, EmptyKind, ErrorClass, Gate, Input, NoOpKind, TurnKind};
use crate::machine::Machine;
use crate::phase::{CallReason, Phase};
use crate::policy::{Policy, PolicyError};
use crate::rule::Rule;
use crate::stats::{Stats, Streaks};
use crate::step::Handled;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// One observed kind of transition: (from, input, rule, to).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Edge {
    /// The state before.
    pub from: Phase,
    /// The input's label.
    pub input: &'static str,
    /// The rule that fired.
    pub rule: Rule,
    /// The state after.
    pub to: Phase,
}

/// What an exploration found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exploration {
    /// Distinct reachable states.
    pub states: usize,
    /// Of which terminal.
    pub terminal_states: usize,
    /// Transitions between distinct states.
    pub transitions: usize,
    /// States from which no terminal state is reachable (must be 0).
    pub stuck: usize,
    /// Whether the non-terminal part of the state graph has a cycle (must be false).
    pub cycle: bool,
    /// The longest path, in steps, from the start to a terminal state.
    pub longest_run: u64,
    /// Every kind of transition seen.
    pub edges: BTreeSet<Edge>,
    /// What each rule was seen to do.
    pub rules: BTreeMap<Rule, Observed>,
}

/// What the exploration saw one rule do, over every transition where it fired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// The labels of the inputs that fired it.
    pub inputs: BTreeSet<&'static str>,
    /// The counters it raised (by name) and the streaks it reset (`name = 0`).
    pub counters: BTreeSet<String>,
    /// The command sequences it queued, e.g. `Nudge(continue), CallModel`.
    pub commands: BTreeSet<String>,
}

/// Every counter by name, as `spec/machine.md` names them: the counters of [`Stats`] (the two
/// token counters as one, `tokens`) and the streaks, `streaks.`-prefixed.
fn counters(s: &Stats, k: &Streaks) -> Vec<(String, u64)> {
    Stats::FIELDS
        .iter()
        .filter(|f| !f.wide)
        .map(|f| (f.name.to_owned(), (f.get)(s)))
        .chain([("tokens".to_owned(), s.tokens())])
        .chain(
            Streaks::FIELDS
                .iter()
                .map(|f| (format!("streaks.{}", f.name), (f.get)(k))),
        )
        .collect()
}

/// The commands a step queued, in order, by kind.
fn command_labels(m: &mut Machine) -> String {
    let mut labels = Vec::new();
    while let Some(command) = m.poll_command() {
        labels.push(match command {
            Command::Notice(Notice::Excluded { .. }) => "Notice(excluded)".to_owned(),
            Command::Notice(Notice::Repeating { .. }) => "Notice(repeating)".to_owned(),
            Command::Notice(Notice::TokenBudget { percent, .. }) => {
                format!("Notice(tokens {percent} %)")
            }
            Command::Nudge(nudge) => match nudge.kind {
                NudgeKind::Continue(_) => "Nudge(continue)".to_owned(),
                NudgeKind::Incomplete => "Nudge(incomplete)".to_owned(),
                NudgeKind::VerifierRejected => "Nudge(verifier)".to_owned(),
            },
            Command::CallModel(call) => match call.reason {
                CallReason::Retry { .. } => "CallModel(retry, backoff)".to_owned(),
                CallReason::FinalAnswer { .. } => "CallModel(final answer, no tools)".to_owned(),
                _ => "CallModel".to_owned(),
            },
            Command::Checkpoint(_) => "Checkpoint".to_owned(),
            Command::RunTools(_) => "RunTools".to_owned(),
            Command::Verify(_) => "Verify".to_owned(),
            Command::Stop(_) => "Stop".to_owned(),
        });
    }
    labels.join(", ")
}

/// The abstract input alphabet: one representative of every class of input the core decides on.
/// `tokens` is the usage a turn reports, half of it output (use a value that reaches the token
/// budget in two turns).
pub fn alphabet(tokens: u64) -> Vec<Input> {
    let turn = |kind| Input::Turn {
        kind,
        input_tokens: tokens - tokens / 2,
        output_tokens: tokens / 2,
    };
    let batch = |failed: u32, unrecoverable, repeats| {
        Input::ToolResults(Batch {
            failed,
            all_failed: failed > 0,
            unrecoverable,
            repeats,
            polls: 0,
            checkpoint: false,
        })
    };
    // A poll of declared pollers, the `polls`-th in a row with the same results.
    let poll = |polls| {
        Input::ToolResults(Batch {
            failed: 0,
            all_failed: false,
            unrecoverable: false,
            repeats: 1,
            polls,
            checkpoint: false,
        })
    };
    let open = Gate {
        open_todos: true,
        missing_required: false,
    };
    vec![
        turn(TurnKind::Tools {
            runnable: 1,
            refused: 0,
            blocked: 0,
        }),
        turn(TurnKind::Tools {
            runnable: 0,
            refused: 1,
            blocked: 0,
        }),
        // Every call refused by a tool budget (soft or hard: the machine sees a block either way).
        turn(TurnKind::Tools {
            runnable: 0,
            refused: 1,
            blocked: 1,
        }),
        turn(TurnKind::Empty(EmptyKind::Blank)),
        turn(TurnKind::NoOp(NoOpKind::NeedsMoreWork)),
        // A reply that is not an answer (an echo of the kernel's words, a hand-back): a no-op
        // that also counts in `non_answers`.
        turn(TurnKind::NoOp(NoOpKind::Echo)),
        turn(TurnKind::Claim {
            explicit: true,
            gate: Gate::CLEAR,
        }),
        turn(TurnKind::Claim {
            explicit: false,
            gate: Gate::CLEAR,
        }),
        turn(TurnKind::Claim {
            explicit: true,
            gate: open,
        }),
        Input::ModelError(ErrorClass::Retryable {
            retry_after_ms: None,
        }),
        Input::ModelError(ErrorClass::Fatal),
        Input::ModelError(ErrorClass::ContextOverflow),
        batch(0, false, 1),
        batch(0, false, 2),
        batch(0, false, 3),
        batch(1, false, 1),
        batch(1, true, 1),
        poll(1),
        poll(2),
        // A tool budget that a checkpoint lifts refused calls in two turns: one is due.
        Input::ToolResults(Batch {
            failed: 0,
            all_failed: false,
            unrecoverable: false,
            repeats: 1,
            polls: 0,
            checkpoint: true,
        }),
        Input::Verdict { accepted: true },
        Input::Verdict { accepted: false },
        Input::Tick {
            deadline_passed: false,
        },
        Input::Tick {
            deadline_passed: true,
        },
        Input::Cancel,
    ]
}

type Key = (State, Stats, Streaks);

fn key(m: &Machine, project_steps: bool) -> Key {
    let (state, mut stats, streaks) = m.core_key();
    if project_steps {
        stats.steps = 0;
    }
    (state, stats, streaks)
}

/// Explores every state reachable under `policy` with [`alphabet`]`(tokens)`.
///
/// With `project_steps`, states that differ only in their step count are merged, so the check
/// shows that the machine terminates even without counting steps (the other budgets suffice).
pub fn explore(
    policy: &Policy,
    tokens: u64,
    project_steps: bool,
) -> Result<Exploration, PolicyError> {
    let inputs = alphabet(tokens);
    let mut start = Machine::new(policy.clone())?;
    command_labels(&mut start); // the first model call is not a transition's

    let mut ids: HashMap<Key, usize> = HashMap::new();
    let mut machines: Vec<Machine> = Vec::new();
    let mut succ: Vec<Vec<usize>> = Vec::new();
    let mut edges = BTreeSet::new();
    let mut rules: BTreeMap<Rule, Observed> = BTreeMap::new();
    let mut queue = VecDeque::new();
    ids.insert(key(&start, project_steps), 0);
    machines.push(start);
    succ.push(Vec::new());
    queue.push_back(0usize);
    let mut transitions = 0usize;
    while let Some(i) = queue.pop_front() {
        if machines[i].phase().is_terminal() {
            continue;
        }
        for input in &inputs {
            let mut next = machines[i].clone();
            let Handled::Step(record) = next.handle_input(*input) else {
                continue; // ignored or observed: not a transition, the state is unchanged
            };
            let observed = rules.entry(record.rule).or_default();
            observed.inputs.insert(input.label());
            observed.commands.insert(command_labels(&mut next));
            let before = machines[i].core_key();
            let after = next.core_key();
            for ((name, a), (_, b)) in counters(&before.1, &before.2)
                .into_iter()
                .zip(counters(&after.1, &after.2))
            {
                if b > a {
                    observed.counters.insert(name);
                } else if b < a && b == 0 {
                    observed.counters.insert(format!("{name} = 0"));
                } else if b < a {
                    observed.counters.insert(format!("{name} (set)"));
                }
            }
            edges.insert(Edge {
                from: record.from,
                input: input.label(),
                rule: record.rule,
                to: record.to,
            });
            let k = key(&next, project_steps);
            let j = match ids.get(&k) {
                Some(&j) => j,
                None => {
                    let j = machines.len();
                    ids.insert(k, j);
                    machines.push(next);
                    succ.push(Vec::new());
                    queue.push_back(j);
                    j
                }
            };
            succ[i].push(j);
            transitions += 1;
        }
    }
    let n = machines.len();
    let terminal: Vec<bool> = machines.iter().map(|m| m.phase().is_terminal()).collect();

    // Reverse reachability from the terminal states.
    let mut pred: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, out) in succ.iter().enumerate() {
        for &j in out {
            pred[j].push(i);
        }
    }
    let mut reaches = terminal.clone();
    let mut stack: Vec<usize> = (0..n).filter(|&i| terminal[i]).collect();
    while let Some(j) = stack.pop() {
        for &i in &pred[j] {
            if !reaches[i] {
                reaches[i] = true;
                stack.push(i);
            }
        }
    }
    let stuck = reaches.iter().filter(|r| !**r).count();

    // Kahn's algorithm on the whole graph (terminal states have no successors): a cycle leaves
    // nodes with a positive in-degree. Longest path by dynamic programming in topological order.
    let mut indegree = vec![0usize; n];
    for out in &succ {
        for &j in out {
            indegree[j] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut longest = vec![0u64; n];
    let mut done = 0usize;
    while let Some(i) = ready.pop() {
        done += 1;
        for &j in &succ[i] {
            longest[j] = longest[j].max(longest[i] + 1);
            indegree[j] -= 1;
            if indegree[j] == 0 {
                ready.push(j);
            }
        }
    }
    let cycle = done != n;
    let longest_run = (0..n)
        .filter(|&i| terminal[i])
        .map(|i| longest[i])
        .max()
        .unwrap_or(0);
    Ok(Exploration {
        states: n,
        terminal_states: terminal.iter().filter(|t| **t).count(),
        transitions,
        stuck,
        cycle,
        longest_run,
        edges,
        rules,
    })
}
