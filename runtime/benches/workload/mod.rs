//! The runtime bench's workload, shared with the tracing overhead bench
//! (`adapters/telemetry/benches/overhead.rs`): a fake model that calls an echo tool `turns`
//! times and then answers, on the in-memory store.

#![allow(dead_code)] // each bench uses its own subset

use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use terminus_kernel::{ModelTurn, Policy, ToolCall, ToolOutcome};
use terminus_runtime::{
    Fault, MemoryStore, Model, ModelError, ModelRequest, Report, Run, Tool, ToolSet,
};

/// Calls `echo` with a new argument `turns` times, then answers.
pub(crate) struct Fake {
    pub(crate) turns: u32,
    pub(crate) calls: AtomicU32,
}

#[async_trait]
impl Model for Fake {
    async fn complete(&self, _request: ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        if n < self.turns {
            Ok(ModelTurn {
                tool_calls: vec![ToolCall {
                    id: "".into(),
                    name: "echo".into(),
                    arguments: json!({ "n": n }).into(),
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

pub(crate) struct Echo;

#[async_trait]
impl Tool for Echo {
    async fn call(&self, arguments: Value) -> Result<ToolOutcome, Fault> {
        Ok(ToolOutcome::ok(arguments))
    }
}

pub(crate) fn policy(turns: u32) -> Policy {
    Policy {
        max_steps: 2 * turns + 10,
        max_model_calls: turns + 5,
        ..Policy::default()
    }
}

/// A run of `turns` agent steps, and the store the host keeps.
pub(crate) fn setup(turns: u32) -> (Run, Arc<MemoryStore>) {
    let model = Arc::new(Fake {
        turns,
        calls: AtomicU32::new(0),
    });
    let store = Arc::new(MemoryStore::new());
    let run = Run::new("Echo things.", policy(turns), model)
        .tools(ToolSet::new().with("echo", Arc::new(Echo)))
        .store(store.clone());
    (run, store)
}

pub(crate) fn execute(rt: &tokio::runtime::Runtime, run: Run, turns: u32) -> Report {
    let report = rt.block_on(run.execute()).expect("a report");
    assert_eq!(report.tool_calls, turns, "every turn ran its echo call");
    assert!(report.is_complete(), "{report:?}");
    report
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}
