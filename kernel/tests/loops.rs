//! Loops of any short period (the repeat detector) and adversarial loops cut by their own counter.
//!
//! The detector is checked against a brute-force oracle in both directions: a run stops with
//! `repeat_limit` exactly when, and exactly where, the oracle finds a window of period
//! `<= max_loop_period` that occurred `max_repeats` times in a row; and a loop stops within
//! `max_repeats x period` turns of its start.

mod common;

use common::{Reply, Script, call, done, drive, fail};
use proptest::prelude::*;
use serde_json::json;
use terminus_kernel::{
    AbortReason, Command, CompleteReason, Event, Machine, ModelTurn, Notice, Outcome, Policy, Rule,
    ToolCall, ToolErrorKind, ToolOutcome, ToolResult,
};

const CASES: u32 = 512;

/// Tool turn `i` of a script: a read of file `i`; the tool answers with the arguments, so the
/// same call always has the same result.
fn turn(i: u8) -> Reply {
    call("read", json!({ "path": format!("f{i}") }))
}

fn echo(c: &ToolCall, _: u32) -> ToolOutcome {
    ToolOutcome::Ok(c.arguments.clone())
}

/// Budgets out of reach: only the repeat detector (or the script's end) can stop the run.
fn roomy(max_repeats: u32, max_loop_period: u32) -> Policy {
    Policy {
        max_steps: 10_000,
        max_model_calls: 5_000,
        max_repeats,
        max_loop_period,
        ..Policy::default()
    }
}

/// The oracle, by brute force: the first turn (0-based) that ends a window of period
/// `k <= bound` occurring `repeats` times in a row.
fn first_loop(seq: &[u8], bound: usize, repeats: usize) -> Option<usize> {
    (0..seq.len()).find(|&end| {
        (1..=bound).any(|k| {
            let len = k * repeats;
            end + 1 >= len && {
                let start = end + 1 - len;
                let window = &seq[start..start + k];
                (1..repeats).all(|r| &seq[start + r * k..start + (r + 1) * k] == window)
            }
        })
    })
}

fn script(seq: &[u8]) -> Script {
    let mut replies: Vec<Reply> = seq.iter().map(|&i| turn(i)).collect();
    replies.push(done("Done."));
    Script::new(replies).tool(echo)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    /// Two-sided: `repeat_limit` fires exactly at the first turn where the oracle sees a loop,
    /// and a sequence without one is never stopped by it (it completes).
    #[test]
    fn the_detector_agrees_with_the_brute_force_oracle(
        seq in proptest::collection::vec(0u8..3, 1..60),
        repeats in 2u32..5,
        bound in 1u32..=8,
    ) {
        let run = drive(roomy(repeats, bound), script(&seq));
        match first_loop(&seq, bound as usize, repeats as usize) {
            Some(end) => {
                prop_assert_eq!(run.stop.outcome, Outcome::Aborted(AbortReason::NoProgress));
                prop_assert_eq!(run.stop.rule, Rule::RepeatLimit);
                prop_assert_eq!(run.stop.stats.tool_calls as usize, end + 1);
            }
            None => {
                prop_assert_eq!(run.stop.outcome, Outcome::Complete(CompleteReason::Explicit));
                prop_assert!(run.trace.iter().all(|s| s.rule != Rule::RepeatLimit));
            }
        }
    }

    /// Any loop of period `k <= max_loop_period` ends `no_progress` within `max_repeats x k`
    /// turns of its start, whatever came before it.
    #[test]
    fn a_loop_of_any_period_up_to_the_bound_ends_in_time(
        prefix in proptest::collection::vec(0u8..6, 0..12),
        window in proptest::collection::vec(0u8..6, 1..=8),
        repeats in 2u32..5,
    ) {
        let k = window.len();
        let mut seq = prefix.clone();
        for _ in 0..repeats + 2 {
            seq.extend(&window);
        }
        let run = drive(roomy(repeats, 8), script(&seq));
        prop_assert_eq!(run.stop.outcome, Outcome::Aborted(AbortReason::NoProgress));
        prop_assert!(run.stop.stats.tool_calls as usize <= prefix.len() + k * repeats as usize);
    }

    /// Adversarial family "tools always fail": whatever the calls and the failure classes, the run
    /// ends `tool_failures` or `unrecoverable_tool_error`, never `no_progress`.
    #[test]
    fn tools_that_always_fail_end_with_a_failure_reason(
        calls in proptest::collection::vec((0u8..3, 0u8..2), 1..40),
        kinds in proptest::collection::vec(0usize..6, 1..40),
        repeats in 2u32..5,
        max_tool_failures in 1u32..5,
        stop_on_unrecoverable in any::<bool>(),
    ) {
        let replies: Vec<Reply> = calls
            .iter()
            .map(|&(t, a)| call(&format!("tool{t}"), json!({ "a": a })))
            .collect();
        let mut n = 0usize;
        let tool = move |_: &ToolCall, _: u32| {
            n += 1;
            fail(ToolErrorKind::ALL[kinds[n % kinds.len()]])
        };
        let policy = Policy {
            max_tool_failures,
            on_unrecoverable_tool_error: if stop_on_unrecoverable {
                terminus_kernel::OnUnrecoverable::Stop
            } else {
                terminus_kernel::OnUnrecoverable::Exclude
            },
            ..roomy(repeats, 8)
        };
        let run = drive(policy, Script::new(replies).tool(tool));
        prop_assert!(
            matches!(
                run.stop.outcome,
                Outcome::Aborted(AbortReason::ToolFailures | AbortReason::UnrecoverableToolError)
            ),
            "{:?} by {:?}",
            run.stop.outcome,
            run.stop.rule
        );
    }

    /// One turn calling many unknown tools (each excluded at once) still queues at most two
    /// guidance commands, so every one has a journal key: one notice names them all.
    #[test]
    fn one_notice_names_every_tool_a_step_excludes(tools in 1usize..40) {
        let mut m = Machine::new(Policy::default()).expect("the default policy is valid");
        while m.poll_command().is_some() {}
        let calls: Vec<ToolCall> = (0..tools)
            .map(|i| ToolCall { id: format!("c{i}").into(), name: format!("missing{i}").into(), arguments: json!({}).into() })
            .collect();
        m.handle(Event::ModelTurn(ModelTurn { tool_calls: calls.clone(), ..ModelTurn::default() }));
        while m.poll_command().is_some() {}
        let results = calls
            .iter()
            .map(|c| ToolResult {
                call_id: c.id.clone(),
                name: c.name.clone(),
                outcome: fail(ToolErrorKind::NotFound),
            })
            .collect();
        m.handle(Event::ToolResults(results));
        let commands: Vec<Command> = std::iter::from_fn(|| m.poll_command()).collect();
        let guidance = commands
            .iter()
            .filter(|c| matches!(c, Command::Notice(_) | Command::Nudge(_)))
            .count();
        prop_assert!(guidance <= 2, "{} guidance commands", guidance);
        let excluded = commands.iter().find_map(|c| match c {
            Command::Notice(Notice::Excluded { tools, .. }) => Some(tools.len()),
            _ => None,
        });
        prop_assert_eq!(excluded, Some(tools));
        prop_assert_eq!(m.ledger().excluded().count(), tools);
    }
}

#[test]
fn the_first_repeat_is_told_to_the_model_once() {
    // Period 2, max_repeats 4: the window repeats first at turn 4 (notice), stops at turn 8.
    let seq = [0, 1, 0, 1, 0, 1, 0, 1, 0, 1];
    let run = drive(roomy(4, 8), script(&seq));
    assert_eq!(run.stop.rule, Rule::RepeatLimit);
    assert_eq!(run.stop.stats.tool_calls, 8);
    let repeating: Vec<&Notice> = run
        .notices
        .iter()
        .filter(|n| matches!(n, Notice::Repeating { .. }))
        .collect();
    assert_eq!(repeating.len(), 1, "{:?}", run.notices);
    let Notice::Repeating {
        period,
        times,
        limit,
        text,
    } = repeating[0]
    else {
        unreachable!("filtered above")
    };
    assert_eq!((*period, *times, *limit), (2, 2, 4));
    assert!(
        text.contains("Your last 2 tool turns repeated the 2 before them")
            && text.contains("occurs 4 times in a row the run stops with no_progress"),
        "{text}"
    );
}

#[test]
fn polling_a_job_whose_status_changes_is_progress() {
    // The same call every turn, but the result changes: never a loop.
    let replies = vec![call("status", json!({ "job": 7 }))];
    let mut polls = 0u32;
    let tool = move |_: &ToolCall, _: u32| {
        polls += 1;
        ToolOutcome::ok(json!({ "progress": polls }))
    };
    let policy = Policy {
        max_model_calls: 30,
        ..roomy(3, 8)
    };
    let run = drive(policy, Script::new(replies).tool(tool));
    assert_eq!(
        run.stop.outcome,
        Outcome::Aborted(AbortReason::MaxModelCalls)
    );
}

#[test]
fn a_turn_of_more_than_65535_calls_counts_every_call() {
    let mut m = Machine::new(Policy::default()).expect("the default policy is valid");
    while m.poll_command().is_some() {}
    let calls: Vec<ToolCall> = (0..70_000)
        .map(|i| ToolCall {
            id: format!("c{i}").into(),
            name: "read".into(),
            arguments: json!(i).into(),
        })
        .collect();
    m.handle(Event::ModelTurn(ModelTurn {
        tool_calls: calls,
        ..ModelTurn::default()
    }));
    assert_eq!(m.stats().tool_calls, 70_000);
    assert_eq!(m.ledger().calls("read"), 70_000);
}
