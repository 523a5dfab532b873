//! A `Layer`: middleware around every model, tool and verifier call of a run, as a tower or
//! axum layer wraps a service. Two layers here: a guard that refuses `delete_file` without
//! calling it (the model is told, permission denied, and the kernel's failure rules apply), and
//! a log outside it that sees each call and its answer, the guard's refusal included.
//!
//! `cargo run -p terminus-examples --example layer`

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;
use std::sync::{Arc, Mutex};
use terminus_examples::Scripted;
use terminus_kernel::{ModelTurn, Policy, ToolCall, ToolErrorKind, ToolOutcome};
use terminus_runtime::{Answer, Call, Layer, Next, Run, ToolSet};
use terminus_tools::{ToolFailure, native};

/// Refuses every call of `delete_file`: the tool is never called.
struct Guard;

impl Layer for Guard {
    fn around<'a>(&'a self, call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Answer> {
        if let Call::Tool {
            name: "delete_file",
            ..
        } = &call
        {
            let refused = Answer::Tool(Ok(ToolOutcome::Error {
                kind: ToolErrorKind::PermissionDenied,
                message: "deleting files is not allowed in this run".into(),
            }));
            return Box::pin(async move { refused });
        }
        next.run(call)
    }
}

/// Prints each call as it is made and each answer as it comes.
#[derive(Default)]
struct Log(Mutex<Vec<String>>);

impl Log {
    fn line(&self, line: String) {
        println!("{line}");
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(line);
    }
}

impl Layer for Log {
    fn around<'a>(&'a self, call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Answer> {
        let what = match &call {
            Call::Model(_) => "model".to_owned(),
            Call::Tool {
                name, arguments, ..
            } => format!("tool {name} {arguments}"),
            Call::Verify(_) => "verifier".to_owned(),
        };
        self.line(format!("-> {what}"));
        let answer = next.run(call);
        Box::pin(async move {
            let answer = answer.await;
            let said = match &answer {
                Answer::Model(Ok(turn)) if turn.tool_calls.is_empty() => {
                    format!("answer {:?}", turn.text)
                }
                Answer::Model(Ok(turn)) => format!("{} tool call(s)", turn.tool_calls.len()),
                Answer::Tool(Ok(outcome)) => terminus_runtime::render_outcome(outcome),
                other => format!("{other:?}"),
            };
            self.line(format!("<- {what}: {said}"));
            answer
        })
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Path {
    path: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let model = Arc::new(Scripted::new(vec![
        ModelTurn {
            tool_calls: vec![ToolCall::new(
                "c1",
                "delete_file",
                json!({ "path": "old.log" }),
            )],
            ..ModelTurn::default()
        },
        ModelTurn {
            tool_calls: vec![ToolCall::new("c2", "archive", json!({ "path": "old.log" }))],
            ..ModelTurn::default()
        },
        ModelTurn {
            text: "old.log is archived (deleting it was not allowed).".into(),
            needs_more_work: Some(false),
            ..ModelTurn::default()
        },
    ]));
    let deleted = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = deleted.clone();
    let delete = native("Deletes a file.", move |args: Path| {
        let seen = seen.clone();
        async move {
            seen.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(args.path);
            Ok::<_, ToolFailure>("deleted")
        }
    });
    let archive = native("Archives a file.", |args: Path| async move {
        Ok::<_, ToolFailure>(format!("archived {}", args.path))
    });
    let tools = ToolSet::new()
        .with("delete_file", Arc::new(delete))
        .with("archive", Arc::new(archive));
    let log = Arc::new(Log::default());
    let report = Run::new("Clean up old.log", Policy::default(), model)
        .tools(tools)
        // Added inside out: the guard next to the tools, the log outside it.
        .adapters(|mut adapters| {
            adapters.layer(Arc::new(Guard));
            adapters.layer(log.clone());
        })
        .execute()
        .await
        .expect("the run");
    println!(
        "{} ({}): {:?}",
        report.outcome.outcome_str(),
        report.outcome.reason_str(),
        report.result
    );
    assert_eq!(report.outcome.reason_str(), "explicit");
    assert!(
        deleted.lock().unwrap_or_else(|e| e.into_inner()).is_empty(),
        "the guard kept delete_file from running"
    );
    let lines = log.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(
        lines.contains(
            &r#"<- tool delete_file {"path":"old.log"}: error (permission_denied): deleting files is not allowed in this run"#
                .to_owned()
        ),
        "{lines:?}"
    );
}
