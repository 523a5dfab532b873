//! Exhaustive model check of the core machine (`terminus_kernel::testing`): with small limits and
//! the abstract input alphabet, every reachable state can reach a terminal state, and the
//! non-terminal state graph has no cycle, for every combination of the policy's switches.
//! Run with `--nocapture` to see the state counts.

use terminus_kernel::testing::{Exploration, explore};
use terminus_kernel::{OnUnrecoverable, OnVerificationLimit, Phase, Policy, Rule};

/// Limits 2-3, as the issue asks: small enough to enumerate, large enough that every guard has
/// both outcomes.
fn small_policy(switches: u32) -> Policy {
    let bit = |b: u32| switches & (1 << b) != 0;
    Policy {
        max_steps: 9,
        max_model_calls: 5,
        max_no_ops: 2,
        max_nudges: 2,
        max_verification_failures: 2,
        on_verification_limit: if bit(0) {
            OnVerificationLimit::Complete
        } else {
            OnVerificationLimit::Abort
        },
        verify_completion: bit(1),
        max_tool_failures: 2,
        max_consecutive_tool_failures: 2,
        on_unrecoverable_tool_error: if bit(2) {
            OnUnrecoverable::Stop
        } else {
            OnUnrecoverable::Exclude
        },
        max_repeats: 2,
        max_polls: 2,
        max_empty_responses: 2,
        max_model_retries: 2,
        // A budget on all tokens or on the output alone (half of a turn's: 30 of the alphabet's
        // 60), each spent in two turns, in a quarter of the policies each.
        token_budget: if bit(3) && !bit(0) { Some(100) } else { None },
        max_output_tokens: if bit(3) && bit(0) { Some(50) } else { None },
        max_tool_calls: if bit(1) { Some(1) } else { None },
        final_answer_on_budget: bit(4),
        deadline_ms: Some(1_000),
        max_blocked_turns: 2,
        // Checkpoints written for the agent, in half the policies.
        auto_checkpoints: u32::from(bit(0)),
        ..Policy::default()
    }
}

const SWITCHES: u32 = 32;

fn check(policy: &Policy, project_steps: bool) -> Exploration {
    let e = explore(policy, 60, project_steps).expect("the small policy is valid");
    assert_eq!(
        e.stuck, 0,
        "states that cannot reach a terminal state under {policy:?}"
    );
    assert!(
        !e.cycle,
        "the non-terminal state graph has a cycle under {policy:?}"
    );
    assert!(
        e.longest_run <= policy.step_bound(),
        "a run of {} steps exceeds step_bound {}",
        e.longest_run,
        policy.step_bound()
    );
    e
}

#[test]
fn every_state_reaches_a_terminal_and_no_cycle_exists() {
    let mut total = 0usize;
    let mut transitions = 0usize;
    let mut longest = 0u64;
    for switches in 0..SWITCHES {
        let policy = small_policy(switches);
        let e = check(&policy, false);
        println!(
            "switches {switches:05b}: {} states ({} terminal), {} transitions, longest run {} steps (bound {})",
            e.states,
            e.terminal_states,
            e.transitions,
            e.longest_run,
            policy.step_bound()
        );
        total += e.states;
        transitions += e.transitions;
        longest = longest.max(e.longest_run);
    }
    println!(
        "model check: {total} states, {transitions} transitions over {SWITCHES} policies; longest run {longest}"
    );
    // Pinned like stateright's `unique_state_count`: a change of the state space must be seen.
    assert_eq!(total, EXPECTED_STATES, "the explored state space changed");
}

const EXPECTED_STATES: usize = 975_592;

#[test]
fn termination_does_not_rest_on_the_step_counter() {
    // Merge states that differ only in `steps` and lift the step budget out of reach: the graph
    // must still be acyclic, so the model-call budget and the per-loop counters alone end runs.
    for switches in 0..SWITCHES {
        let policy = Policy {
            max_steps: 10_000,
            ..small_policy(switches)
        };
        check(&policy, true);
    }
}

#[test]
fn every_rule_and_every_stop_reason_is_reachable() {
    let mut rules = std::collections::BTreeSet::new();
    let mut terminal = std::collections::BTreeSet::new();
    for switches in 0..SWITCHES {
        let e = check(&small_policy(switches), false);
        for edge in &e.edges {
            rules.insert(edge.rule);
            if edge.to == Phase::Complete || edge.to == Phase::Aborted {
                terminal.insert(edge.rule);
            }
        }
    }
    let steps: Vec<Rule> = Rule::ALL
        .into_iter()
        .filter(|r| *r != Rule::ClockReading)
        .collect();
    let missing: Vec<&Rule> = steps.iter().filter(|r| !rules.contains(r)).collect();
    assert!(
        missing.is_empty(),
        "rules never fired in the model check: {missing:?}"
    );
}
