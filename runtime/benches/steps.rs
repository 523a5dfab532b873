//! Runtime overhead per agent step (issue 3): scripted runs of 10, 100 and 1,000 turns on the
//! in-memory store, each turn a model turn calling one echo tool plus the tool's result, with a
//! fake model that answers at once. The figure is the runtime's own cost (driver, kernel, journal
//! records, conversation), since the model and the tool do no work.
//!
//! Targets: under 5 us per step, and flat (1,000 turns within 1.5x of 10 turns per step).
//! Run: `cargo bench -p terminus-runtime --bench steps`.

use async_trait::async_trait;
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use terminus_kernel::{ModelTurn, Policy, ToolCall, ToolOutcome};
use terminus_runtime::{Fault, MemoryStore, Model, ModelError, ModelRequest, Run, Tool, ToolSet};

/// Calls `echo` with a new argument `turns` times, then answers.
struct Fake {
    turns: u32,
    calls: AtomicU32,
}

#[async_trait]
impl Model for Fake {
    async fn complete(&self, _request: ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        if n < self.turns {
            Ok(ModelTurn {
                tool_calls: vec![ToolCall {
                    id: String::new(),
                    name: "echo".into(),
                    arguments: json!({ "n": n }),
                }],
                ..ModelTurn::default()
            })
        } else {
            Ok(ModelTurn {
                text: "done".into(),
                needs_more_work: Some(false),
                ..ModelTurn::default()
            })
        }
    }
}

struct Echo;

#[async_trait]
impl Tool for Echo {
    async fn call(&self, arguments: Value) -> Result<ToolOutcome, Fault> {
        Ok(ToolOutcome::Ok(arguments))
    }
}

fn policy(turns: u32) -> Policy {
    Policy {
        max_steps: 2 * turns + 10,
        max_model_calls: turns + 5,
        ..Policy::default()
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut group = c.benchmark_group("agent_steps");
    for turns in [10u32, 100, 1000] {
        group.throughput(Throughput::Elements(u64::from(turns)));
        group.bench_with_input(BenchmarkId::from_parameter(turns), &turns, |b, &turns| {
            b.iter_batched(
                || {
                    let model = Arc::new(Fake {
                        turns,
                        calls: AtomicU32::new(0),
                    });
                    Run::new("Echo things.", policy(turns), model)
                        .tools(ToolSet::new().with("echo", Arc::new(Echo)))
                        .store(Arc::new(MemoryStore::new()))
                },
                |run| {
                    let report = rt.block_on(run.execute()).expect("a report");
                    assert_eq!(report.tool_calls, turns);
                    report
                },
                BatchSize::LargeInput,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
