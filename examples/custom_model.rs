//! The runtime with a model and a tool of your own, journaled in SQLite. The model is a plain
//! Rust type (here a script; in a host, your provider client); the tool is a typed async function.
//! The run is then resumed from its journal: it ended, so nothing runs again and the report is
//! the same.
//!
//! `cargo run -p terminus-examples --example custom_model`

use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use terminus_examples::Scripted;
use terminus_kernel::{ModelTurn, Policy, ToolCall};
use terminus_runtime::{Run, ToolSet};
use terminus_tools::{ToolFailure, native};

/// The arguments of the `add` tool, with their JSON Schema for the model.
#[derive(Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (_dir, store) = terminus_examples::temp_journal().await;
    let model = Arc::new(Scripted::watching(
        vec![
            ModelTurn {
                tool_calls: vec![ToolCall::new("c1", "add", json!({ "a": 2, "b": 40 }))],
                ..ModelTurn::default()
            },
            ModelTurn {
                text: "2 + 40 = 42".into(),
                needs_more_work: Some(false),
                ..ModelTurn::default()
            },
        ],
        |request| println!("model call with {} message(s)", request.messages.len()),
    ));
    let add = native("Adds two integers.", |args: Add| async move {
        args.a
            .checked_add(args.b)
            .ok_or_else(|| ToolFailure::invalid_arguments("the sum overflows"))
    });
    let tools = ToolSet::new().with("add", Arc::new(add));
    let report = Run::new("What is 2 + 40?", Policy::default(), model.clone())
        .execution("sum-1")
        .tools(tools.clone())
        .store(store.clone())
        .execute()
        .await
        .expect("the run");
    println!(
        "{} ({}): {:?}, {} journal entries",
        report.outcome.outcome_str(),
        report.outcome.reason_str(),
        report.result,
        report.entries
    );
    assert_eq!(report.outcome.reason_str(), "explicit");
    assert_eq!(report.result.as_deref(), Some("2 + 40 = 42"));

    // Resumed after it ended: nothing is asked again, the report is the same.
    let again = Run::resume("sum-1", model)
        .tools(tools)
        .store(store)
        .execute()
        .await
        .expect("the resume");
    assert_eq!(again.result, report.result);
    assert_eq!(again.stats.model_calls, report.stats.model_calls);
    println!(
        "resumed: {}, {} model calls",
        again.outcome.reason_str(),
        again.stats.model_calls
    );
}
