//! No heap allocation per event in steady state: a counting global allocator watches the
//! machine handle model turns with tool calls, their results, clock readings and the draining of
//! the commands they produce. (Issue 2's speed target; the criterion bench gives the time.)
//!
//! The events are built before counting starts (their JSON payloads are hashed then, where they
//! enter): their payloads are the host's allocations, and the machine moves them into its
//! commands or borrows them (tool results lent with `handle_results`) instead of copying them.
//!
//! This file holds a single test on purpose: the allocator is global, and a second test running
//! on another thread would be counted too. The test harness's own threads can still allocate now
//! and then (seen once on a loaded machine: four allocations in one of 600 events), so the
//! sequence is played three times on fresh machines and each event's count is the least of the
//! three: the machine is deterministic, so its own allocations are the same in every play, and
//! another thread's can only add.

use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;
use terminus_kernel::{
    Command, Event, Handled, Machine, ModelTurn, Policy, ToolCall, ToolOutcome, ToolResult,
};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn tool_turn(i: u32) -> Event {
    Event::ModelTurn(ModelTurn {
        text: format!("Reading part {i}."),
        tool_calls: vec![
            ToolCall {
                id: format!("call-{i}-a").into(),
                name: "read_file".into(),
                arguments: json!({ "path": format!("src/{i}.rs"), "lines": [1, 200] }).into(),
            },
            ToolCall {
                id: format!("call-{i}-b").into(),
                name: "grep".into(),
                arguments: json!({ "pattern": "fn main", "dir": "src" }).into(),
            },
        ],
        ..ModelTurn::default()
    })
}

fn results(i: u32) -> Vec<ToolResult> {
    vec![
        ToolResult {
            call_id: format!("call-{i}-b").into(),
            name: "grep".into(),
            outcome: ToolOutcome::ok(json!({ "matches": [format!("src/{i}.rs:1")] })),
        },
        ToolResult {
            call_id: format!("call-{i}-a").into(),
            name: "read_file".into(),
            outcome: ToolOutcome::ok(json!(format!("// part {i}\nfn main() {{}}"))),
        },
    ]
}

/// Feeds an event with `feed` and drains the commands; returns the allocations (and
/// reallocations) made.
fn allocations(
    machine: &mut Machine,
    feed: impl FnOnce(&mut Machine) -> Handled,
) -> (usize, Handled, usize) {
    let region = Region::new(GLOBAL);
    let handled = feed(machine);
    let mut commands = 0;
    while let Some(command) = machine.poll_command() {
        assert!(
            !matches!(command, Command::Stop(_)),
            "the run stopped: {command:?}"
        );
        commands += 1;
        drop(command);
    }
    let change = region.change();
    (change.allocations + change.reallocations, handled, commands)
}

#[test]
fn steady_state_events_allocate_nothing() {
    // The counter must see allocations at all, or every assertion below would pass vacuously.
    let region = Region::new(GLOBAL);
    let probe = std::hint::black_box(vec![0u8; 64]);
    assert!(
        region.change().allocations >= 1,
        "the counting allocator is not installed"
    );
    drop(probe);

    const PLAYS: usize = 3;
    let plays: Vec<Vec<usize>> = (0..PLAYS).map(|_| play()).collect();
    let mut measured = 0;
    for (at, _) in plays[0].iter().enumerate() {
        let least = plays.iter().map(|p| p[at]).min().unwrap_or_default();
        let event = at / 3;
        if event >= WARM as usize {
            assert_eq!(
                least, 0,
                "event {event} ({at}th handled) allocated {least} times in every play"
            );
            measured += 1;
        }
    }
    assert_eq!(measured, 3 * MEASURED as usize);
}

const WARM: u32 = 8;
const MEASURED: u32 = 200;

/// One play of the sequence on a fresh machine: the allocations of each event handled (a turn,
/// its results, a tick), in order.
fn play() -> Vec<usize> {
    let policy = Policy {
        max_steps: 10_000,
        max_model_calls: 10_000,
        ..Policy::default()
    };
    let Ok(mut machine) = Machine::new(policy) else {
        panic!("a valid policy");
    };
    while machine.poll_command().is_some() {}
    // Build every event first.
    let events: Vec<(Event, Vec<ToolResult>, Event)> = (0..WARM + MEASURED)
        .map(|i| {
            (
                tool_turn(i),
                results(i),
                Event::Tick {
                    now_ms: u64::from(i) * 10,
                },
            )
        })
        .collect();
    let mut counts = Vec::with_capacity(3 * (WARM + MEASURED) as usize);
    for (i, (turn, res, tick)) in events.into_iter().enumerate() {
        // Results are lent (as the runtime does) on even turns and handed over on odd ones.
        let counted = [
            allocations(&mut machine, |m| m.handle(turn)),
            if i % 2 == 0 {
                allocations(&mut machine, |m| m.handle_results(&res))
            } else {
                allocations(&mut machine, |m| m.handle(Event::ToolResults(res)))
            },
            allocations(&mut machine, |m| m.handle(tick)),
        ];
        counts.extend(counted.iter().map(|c| c.0));
        for (_, handled, _) in &counted {
            assert!(
                matches!(handled, Handled::Step(_) | Handled::Observed),
                "event {i} was not taken: {handled:?}"
            );
        }
        // The turn queues RunTools, the results queue CallModel, the tick queues nothing.
        assert_eq!(
            counted.iter().map(|c| c.2).collect::<Vec<_>>(),
            [1, 1, 0],
            "event {i}"
        );
    }
    assert_eq!(machine.stats().tool_calls, 2 * (WARM + MEASURED));
    counts
}
