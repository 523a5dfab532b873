//! The cost of one event in Rust, for the Python binding's benchmark
//! (`bindings/python/bench/events.py` runs this and compares): the same event sequence as the
//! Python script (a tool turn reading file `i`, then its result, repeated), fed to the kernel's
//! `Machine` directly and to `terminus_runtime::host::Host` (the layer the binding wraps), each
//! event followed by draining the commands it queued; and (`host_json`) to the same `Host` with
//! each event read from JSON text and each command written as JSON text, as the Node addon does
//! for the events its fast path does not take (`bindings/node/bench/events.js` runs this too).
//!
//! `cargo run --release -p terminus-runtime --example host_events [EVENTS] [SAMPLES]` prints one
//! JSON line: the median nanoseconds per event of each.

use serde_json::json;
use std::time::Instant;

/// The Node addon's allocator, so that its per-event cost and this one compare like with like.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use terminus_kernel::{Event, Machine, ModelTurn, Policy, ToolCall, ToolOutcome, ToolResult};
use terminus_runtime::host::{CallIn, EventIn, Host, ResultIn, TurnIn};

fn policy() -> Policy {
    Policy {
        max_steps: 1_000_000_000,
        max_model_calls: 1_000_000_000,
        ..Policy::default()
    }
}

fn kernel_events(n: usize) -> Vec<Event> {
    (0..n / 2)
        .flat_map(|i| {
            let id = format!("c{i}");
            [
                Event::ModelTurn(ModelTurn {
                    tool_calls: vec![ToolCall::new(
                        id.clone(),
                        "read_file",
                        json!({ "path": format!("f{i}") }),
                    )],
                    ..ModelTurn::default()
                }),
                Event::ToolResults(vec![ToolResult {
                    call_id: id.into(),
                    name: "read_file".into(),
                    outcome: ToolOutcome::ok(json!(format!("content {i}"))),
                }]),
            ]
        })
        .collect()
}

fn host_events(n: usize) -> Vec<EventIn> {
    (0..n / 2)
        .flat_map(|i| {
            let id = format!("c{i}");
            [
                EventIn::ModelTurn(TurnIn {
                    tool_calls: Some(vec![CallIn {
                        id: Some(id.clone()),
                        name: "read_file".into(),
                        arguments: Some(json!({ "path": format!("f{i}") })),
                    }]),
                    ..TurnIn::default()
                }),
                EventIn::ToolResults(vec![ResultIn {
                    call_id: id,
                    name: "read_file".into(),
                    ok: Some(json!(format!("content {i}"))),
                    error: None,
                    message: None,
                }]),
            ]
        })
        .collect()
}

/// The same events as JSON text.
fn json_events(n: usize) -> Vec<String> {
    (0..n / 2)
        .flat_map(|i| {
            let id = format!("c{i}");
            [
                json!({"model_turn": {"tool_calls": [{"id": id, "name": "read_file", "arguments": {"path": format!("f{i}")}}]}}).to_string(),
                json!({"tool_results": [{"call_id": id, "name": "read_file", "ok": format!("content {i}")}]}).to_string(),
            ]
        })
        .collect()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let samples: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(9);
    let mut kernel = Vec::new();
    let mut host = Vec::new();
    let mut host_json = Vec::new();
    for _ in 0..samples {
        let events = kernel_events(n);
        let mut machine = Machine::new(policy()).expect("a valid policy");
        while machine.poll_command().is_some() {}
        let start = Instant::now();
        for event in events {
            machine.handle(event);
            while let Some(command) = machine.poll_command() {
                std::hint::black_box(command);
            }
        }
        kernel.push(start.elapsed().as_nanos() as f64 / n as f64);

        let events = host_events(n);
        let mut h = Host::new(policy(), "bench".into(), None).expect("a valid policy");
        while h.next_command().is_some() {}
        let start = Instant::now();
        for event in events {
            let _ = std::hint::black_box(h.handle(event));
            while let Some(command) = h.next_command() {
                std::hint::black_box(command);
            }
        }
        host.push(start.elapsed().as_nanos() as f64 / n as f64);

        // As a binding that passes JSON text both ways pays it (the Node addon's JSON way): each event
        // read from its text, each command written as text.
        let texts: Vec<String> = json_events(n);
        let mut h = Host::new(policy(), "bench".into(), None).expect("a valid policy");
        while h.next_command().is_some() {}
        let start = Instant::now();
        for text in &texts {
            let event: EventIn = serde_json::from_str(text).expect("a valid event");
            let _ = std::hint::black_box(h.handle(event));
            while let Some(command) = h.next_command() {
                std::hint::black_box(serde_json::to_string(&command).unwrap_or_default());
            }
        }
        host_json.push(start.elapsed().as_nanos() as f64 / n as f64);
    }
    println!(
        "{}",
        json!({
            "events": n,
            "samples": samples,
            "kernel_ns_per_event": median(kernel),
            "host_ns_per_event": median(host),
            "host_json_ns_per_event": median(host_json),
        })
    );
}
