//! Criterion benches of the kernel: the cost of one event through the machine, and of a whole
//! 1,000-event run. Target (issue 12): under 50 ns per concrete event, median.
//!
//! What is timed is what the machine does per event in real use: classifying the event, the
//! statig transition, the guards, the ledger and the repeat detector, and the commands it queues,
//! drained by the host. What the host does around it is not the machine's cost, and is measured
//! on its own in the `host` group so that nothing is hidden:
//!
//! - building the events, including hashing each JSON payload once where it enters
//!   ([`Json::new`]: `host/fingerprint_arguments`, `host/fingerprint_output`), and a call's id
//!   and tool name ([`Name::new`]: `host/fingerprint_names`);
//! - freeing the payloads it keeps (the tool results it lends with `Machine::handle_results`,
//!   the calls the machine hands back in `RunTools`) when it is done with them
//!   (`host/free_payloads`).
//!
//! The single-event benches clone the machine in batches of [`BATCH`]: with criterion's default
//! batches (a tenth of a sample, hundreds of thousands of clones) every event met a machine
//! that no cache held any more, and the figure was the memory's latency more than the machine's
//! work. The whole run is unaffected: its events meet one machine, as a host's do.
//!
//! Run: `cargo bench -p terminus-kernel --bench machine`.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use terminus_kernel::{
    Batch, Command, Event, Gate, Input, Json, Machine, ModelTurn, Name, Policy, ToolCall,
    ToolOutcome, ToolResult, TurnKind, textcall,
};

/// Inputs made per batch in the single-event and host benches (a few hundred KiB at most: they
/// stay in cache).
const BATCH: BatchSize = BatchSize::NumIterations(64);

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

fn arguments(i: u32) -> Value {
    json!({ "path": format!("src/{i}.rs") })
}

fn output() -> Value {
    json!("fn main() {}")
}

fn tool_turn(i: u32) -> Event {
    Event::ModelTurn(ModelTurn {
        tool_calls: vec![ToolCall::new(
            format!("call-{i}"),
            "read_file",
            arguments(i),
        )],
        ..ModelTurn::default()
    })
}

fn tool_results(i: u32) -> Vec<ToolResult> {
    vec![ToolResult {
        call_id: format!("call-{i}").into(),
        name: "read_file".into(),
        outcome: ToolOutcome::ok(output()),
    }]
}

fn claim() -> Event {
    Event::ModelTurn(ModelTurn {
        text: "All files read; the answer is 42.".into(),
        needs_more_work: Some(false),
        ..ModelTurn::default()
    })
}

/// One event of a run as a host feeds it: turns are handed over, results are lent.
#[derive(Clone)]
enum Fed {
    Event(Option<Event>),
    Results(Vec<ToolResult>),
}

/// The 1,000 events of a run: a clock reading, 499 tool turns with their results, and a claim
/// that completes it.
fn run_events() -> Vec<Fed> {
    let mut events = Vec::with_capacity(2 * TOOL_TURNS as usize + 2);
    events.push(Fed::Event(Some(Event::Tick { now_ms: 0 })));
    for i in 0..TOOL_TURNS {
        events.push(Fed::Event(Some(tool_turn(i))));
        events.push(Fed::Results(tool_results(i)));
    }
    events.push(Fed::Event(Some(claim())));
    events
}

/// The host takes every command queued (it frees them later, outside the timed section).
fn drain(machine: &mut Machine, host: &mut Vec<Command>) {
    while let Some(command) = machine.poll_command() {
        host.push(command);
    }
}

/// A machine in steady state: 20 tool turns done, waiting for the next model turn.
fn warmed() -> Machine {
    let Ok(mut machine) = Machine::new(policy()) else {
        panic!("the bench policy is valid");
    };
    let mut host = Vec::new();
    drain(&mut machine, &mut host);
    for i in 0..20 {
        machine.handle(tool_turn(i));
        drain(&mut machine, &mut host);
        machine.handle_results(&tool_results(i));
        drain(&mut machine, &mut host);
    }
    machine
}

fn one_event(c: &mut Criterion) {
    let base = warmed();
    let mut acting = base.clone();
    acting.handle(tool_turn(20));
    assert!(acting.poll_command().is_some(), "the turn queues RunTools");

    let mut group = c.benchmark_group("event");
    group.throughput(Throughput::Elements(1));
    group.bench_function("tick", |b| {
        b.iter_batched_ref(
            || (base.clone(), Vec::with_capacity(4)),
            |(m, host)| {
                black_box(m.handle(Event::Tick { now_ms: 1_000 }));
                drain(m, host);
            },
            BATCH,
        );
    });
    group.bench_function("tool_turn", |b| {
        b.iter_batched_ref(
            || (base.clone(), Some(tool_turn(20)), Vec::with_capacity(4)),
            |(m, event, host)| {
                if let Some(event) = event.take() {
                    black_box(m.handle(event));
                }
                drain(m, host);
            },
            BATCH,
        );
    });
    group.bench_function("tool_results", |b| {
        b.iter_batched_ref(
            || (acting.clone(), tool_results(20), Vec::with_capacity(4)),
            |(m, results, host)| {
                black_box(m.handle_results(results));
                drain(m, host);
            },
            BATCH,
        );
    });
    group.finish();
}

/// What the host pays around the machine, per event: hashing a payload once where it enters,
/// and freeing the payloads of a tool turn when it is done with them.
fn host_side(c: &mut Criterion) {
    let mut group = c.benchmark_group("host");
    group.throughput(Throughput::Elements(1));
    group.bench_function("fingerprint_arguments", |b| {
        b.iter_batched(|| arguments(20), |value| Json::new(black_box(value)), BATCH);
    });
    group.bench_function("fingerprint_output", |b| {
        b.iter_batched(output, |value| Json::new(black_box(value)), BATCH);
    });
    // A call's (or a result's) id and tool name, hashed once where they enter.
    group.bench_function("fingerprint_names", |b| {
        b.iter_batched(
            || ("call-20".to_owned(), "read_file".to_owned()),
            |(id, name)| (Name::new(black_box(id)), Name::new(black_box(name))),
            BATCH,
        );
    });
    // One tool turn's payloads: the `RunTools` batch the machine handed out and the results the
    // host lent it.
    let mut m = warmed();
    m.handle(tool_turn(20));
    let Some(run_tools) = m.poll_command() else {
        panic!("the turn queues RunTools");
    };
    group.bench_function("free_payloads", |b| {
        b.iter_batched(|| (run_tools.clone(), tool_results(20)), drop, BATCH);
    });
    group.finish();
}

fn whole_run(c: &mut Criterion) {
    let events = run_events();
    let mut group = c.benchmark_group("run");
    group.throughput(Throughput::Elements(events.len() as u64));
    group.bench_function("1000_events", |b| {
        b.iter_batched(
            || (events.clone(), Vec::with_capacity(2 * events.len())),
            |(mut events, mut host)| {
                let Ok(mut m) = Machine::new(policy()) else {
                    panic!("the bench policy is valid");
                };
                drain(&mut m, &mut host);
                for fed in &mut events {
                    match fed {
                        Fed::Event(event) => {
                            if let Some(event) = event.take() {
                                black_box(m.handle(event));
                            }
                        }
                        Fed::Results(results) => {
                            black_box(m.handle_results(results));
                        }
                    }
                    drain(&mut m, &mut host);
                }
                assert!(m.phase().is_terminal(), "the run must end: {m:?}");
                // The host's payloads are freed after the timed section.
                (m, events, host)
            },
            BatchSize::LargeInput,
        );
    });
    // The same run as abstract inputs: the state machine's own cost (guards, counters, variant,
    // commands) without classifying payloads (matching results to calls, the ledger, the repeat
    // detector).
    let mut inputs = vec![Input::Tick {
        deadline_passed: false,
    }];
    for _ in 0..TOOL_TURNS {
        inputs.push(Input::Turn {
            kind: TurnKind::Tools {
                runnable: 1,
                refused: 0,
                blocked: 0,
            },
            input_tokens: 100,
            output_tokens: 20,
        });
        inputs.push(Input::ToolResults(Batch {
            failed: 0,
            all_failed: false,
            unrecoverable: false,
            repeats: 1,
            polls: 0,
            checkpoint: false,
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
            while let Some(command) = m.poll_command() {
                black_box(command);
            }
            for input in &inputs {
                black_box(m.handle_input(*input));
                while let Some(command) = m.poll_command() {
                    black_box(command);
                }
            }
            assert!(m.phase().is_terminal(), "the run must end: {m:?}");
            m
        });
    });
    group.finish();
}

/// What reading a reply for calls written as text costs (`textcall::find`, once per text turn):
/// a 32 KB reply with no call (prose, code and braces), and one that is 16 calls.
fn text_calls(c: &mut Criterion) {
    let mut group = c.benchmark_group("text_calls");
    let mut prose = String::new();
    let mut i = 0;
    while prose.len() < 32 * 1024 {
        prose.push_str(&format!(
            "Step {i}: the function `parse_{i}` reads {{ key: {i} }} from config/{i}.toml and \
             returns [1, 2, {i}]; see <section-{i}> below.\n"
        ));
        i += 1;
    }
    let calls: String = (0..16)
        .map(|i| {
            format!(
                "<tool_call>\n{{\"name\": \"read_file\", \"arguments\": {{\"path\": \"src/{i}.rs\", \
                 \"lines\": [1, 200]}}}}\n</tool_call>\n"
            )
        })
        .collect();
    group.throughput(Throughput::Bytes(prose.len() as u64));
    group.bench_function("no_call_32k", |b| {
        b.iter(|| textcall::find(black_box(&prose)));
    });
    group.throughput(Throughput::Elements(16));
    group.bench_function("16_calls", |b| {
        b.iter(|| textcall::find(black_box(&calls)));
    });
    group.finish();
}

criterion_group!(benches, one_event, host_side, whole_run, text_calls);
criterion_main!(benches);
