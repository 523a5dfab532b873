//! Criterion benches of the kernel: the cost of one event through the machine, and of a whole
//! 1,000-event run. Target (issue 2): under 50 ns per event, median.
//!
//! Events are built outside the timed section (`iter_batched`), so the figures are the machine's
//! own cost: decoding the event, the statig transition, the guards and the commands it queues.
//!
//! Run: `cargo bench -p terminus-kernel --bench machine`.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use terminus_kernel::{
    Batch, Event, Gate, Input, Machine, ModelTurn, Policy, ToolCall, ToolOutcome, ToolResult,
    TurnKind,
};

/// Tool turns in the 1,000-event run: each is a model turn plus its results, then one claim.
const TOOL_TURNS: u32 = 499;

fn policy() -> Policy {
    Policy {
        max_steps: 10_000,
        max_model_calls: 10_000,
        verify_completion: false,
        ..Policy::default()
    }
}

fn tool_turn(i: u32) -> Event {
    Event::ModelTurn(ModelTurn {
        tool_calls: vec![ToolCall {
            id: format!("call-{i}"),
            name: "read_file".into(),
            arguments: json!({ "path": format!("src/{i}.rs") }),
        }],
        ..ModelTurn::default()
    })
}

fn tool_results(i: u32) -> Event {
    Event::ToolResults(vec![ToolResult {
        call_id: format!("call-{i}"),
        name: "read_file".into(),
        outcome: ToolOutcome::Ok(json!("fn main() {}")),
    }])
}

fn claim() -> Event {
    Event::ModelTurn(ModelTurn {
        text: "All files read; the answer is 42.".into(),
        needs_more_work: Some(false),
        ..ModelTurn::default()
    })
}

/// The 1,000 events of a run: a clock reading, 499 tool turns with their results, and a claim
/// that completes it.
fn run_events() -> Vec<Event> {
    let mut events = Vec::with_capacity(2 * TOOL_TURNS as usize + 2);
    events.push(Event::Tick { now_ms: 0 });
    for i in 0..TOOL_TURNS {
        events.push(tool_turn(i));
        events.push(tool_results(i));
    }
    events.push(claim());
    events
}

fn drain(machine: &mut Machine) {
    while let Some(command) = machine.poll_command() {
        black_box(command);
    }
}

/// A machine in steady state: 20 tool turns done, waiting for the next model turn.
fn warmed() -> Machine {
    let Ok(mut machine) = Machine::new(policy()) else {
        panic!("the bench policy is valid");
    };
    drain(&mut machine);
    for i in 0..20 {
        machine.handle(tool_turn(i));
        drain(&mut machine);
        machine.handle(tool_results(i));
        drain(&mut machine);
    }
    machine
}

fn one_event(c: &mut Criterion) {
    let base = warmed();
    let mut acting = base.clone();
    acting.handle(tool_turn(20));
    drain(&mut acting);

    let mut group = c.benchmark_group("event");
    group.throughput(Throughput::Elements(1));
    group.bench_function("tick", |b| {
        b.iter_batched_ref(
            || base.clone(),
            |m| {
                black_box(m.handle(Event::Tick { now_ms: 1_000 }));
                drain(m);
            },
            BatchSize::SmallInput,
        );
    });
    group.bench_function("tool_turn", |b| {
        b.iter_batched_ref(
            || (base.clone(), Some(tool_turn(20))),
            |(m, event)| {
                if let Some(event) = event.take() {
                    black_box(m.handle(event));
                }
                drain(m);
            },
            BatchSize::SmallInput,
        );
    });
    group.bench_function("tool_results", |b| {
        b.iter_batched_ref(
            || (acting.clone(), Some(tool_results(20))),
            |(m, event)| {
                if let Some(event) = event.take() {
                    black_box(m.handle(event));
                }
                drain(m);
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

fn whole_run(c: &mut Criterion) {
    let events = run_events();
    let mut group = c.benchmark_group("run");
    group.throughput(Throughput::Elements(events.len() as u64));
    group.bench_function("1000_events", |b| {
        b.iter_batched(
            || events.clone(),
            |events| {
                let Ok(mut m) = Machine::new(policy()) else {
                    panic!("the bench policy is valid");
                };
                drain(&mut m);
                for event in events {
                    black_box(m.handle(event));
                    drain(&mut m);
                }
                assert!(m.phase().is_terminal(), "the run must end: {m:?}");
                m
            },
            BatchSize::LargeInput,
        );
    });
    // The same run as abstract inputs: the state machine's own cost (guards, counters, variant,
    // commands) without decoding payloads (hashing arguments, freeing the host's strings).
    let mut inputs = vec![Input::Tick {
        deadline_passed: false,
    }];
    for _ in 0..TOOL_TURNS {
        inputs.push(Input::Turn {
            kind: TurnKind::Tools {
                runnable: 1,
                refused: 0,
            },
            input_tokens: 100,
            output_tokens: 20,
        });
        inputs.push(Input::ToolResults(Batch {
            failed: 0,
            all_failed: false,
            unrecoverable: false,
            repeats: 1,
        }));
    }
    inputs.push(Input::Turn {
        kind: TurnKind::Claim {
            explicit: true,
            gate: Gate::CLEAR,
        },
        input_tokens: 100,
        output_tokens: 20,
    });
    group.bench_function("1000_inputs", |b| {
        b.iter(|| {
            let Ok(mut m) = Machine::new(policy()) else {
                panic!("the bench policy is valid");
            };
            drain(&mut m);
            for input in &inputs {
                black_box(m.handle_input(*input));
                drain(&mut m);
            }
            assert!(m.phase().is_terminal(), "the run must end: {m:?}");
            m
        });
    });
    group.finish();
}

criterion_group!(benches, one_event, whole_run);
criterion_main!(benches);
