//! MCP tasks (2025-11-25) against the real server-everything: its `simulate-research-query`
//! requires task execution (four one-second stages, `pollInterval` 1000). Called as a task
//! (`[[mcp]] tasks`), the client waits for it and returns its report as the call's one result;
//! past the tool's timeout it is cancelled with `tasks/cancel`.

mod common;

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use terminus_kernel::{ToolErrorKind, ToolOutcome};
use terminus_tools::McpServer;

fn text(outcome: &ToolOutcome) -> String {
    match outcome {
        ToolOutcome::Ok(v) => match v.value() {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
        ToolOutcome::Error { kind, message } => format!("error {}: {message}", kind.as_str()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_tool_is_waited_for_and_its_report_is_the_calls_one_result() {
    let Some(peers) = common::peers() else { return };
    // Called plainly, as before: the server refuses it.
    let plain = McpServer::connect(common::everything(&peers))
        .await
        .expect("starts");
    let refused = plain
        .call("simulate-research-query", json!({ "topic": "rust" }))
        .await;
    assert!(
        text(&refused).contains("requires task augmentation"),
        "{refused:?}"
    );
    plain.shutdown().await;

    let mut config = common::everything(&peers);
    config.tasks = vec!["simulate-research-query".into()];
    let server = McpServer::connect(config).await.expect("starts");
    let started = Instant::now();
    let report = server
        .call("simulate-research-query", json!({ "topic": "rust" }))
        .await;
    let waited = started.elapsed();
    let report = match report {
        ToolOutcome::Ok(_) => text(&report),
        other => panic!("the task did not complete: {other:?}"),
    };
    assert!(report.contains("rust"), "{report}");
    // Four one-second stages: the client waited for them, polling, not the model.
    assert!(waited >= Duration::from_secs(3), "{waited:?}");
    // The server goes on serving plain calls.
    let echoed = server.call("echo", json!({ "message": "after" })).await;
    assert!(text(&echoed).contains("after"), "{echoed:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_past_the_tools_timeout_is_cancelled_and_the_call_is_a_timeout() {
    let Some(peers) = common::peers() else { return };
    let mut config = common::everything(&peers);
    config.tasks = vec!["simulate-research-query".into()];
    config.tool_timeout = Duration::from_millis(1500);
    let server = McpServer::connect(config).await.expect("starts");
    let started = Instant::now();
    let outcome = server
        .call("simulate-research-query", json!({ "topic": "rust" }))
        .await;
    let ToolOutcome::Error { kind, message } = &outcome else {
        panic!("a task past its timeout completed: {outcome:?}");
    };
    assert_eq!(*kind, ToolErrorKind::Timeout);
    // The server answered the cancel with the task cancelled.
    assert!(
        message.contains("not done within 1500 ms") && message.contains("cancelled (tasks/cancel)"),
        "{message}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_needs_input_gets_the_clients_elicitation_answer_and_goes_on() {
    let Some(peers) = common::peers() else { return };
    let mut config = common::everything(&peers);
    config.tasks = vec!["simulate-research-query".into()];
    config.elicitation = terminus_tools::Elicitation::Defaults;
    let server = McpServer::connect(config).await.expect("starts");
    let outcome = server
        .call(
            "simulate-research-query",
            json!({ "topic": "python", "ambiguous": true }),
        )
        .await;
    let report = text(&outcome);
    // The question reached the client through `tasks/result`; its answer (accepted, the form's
    // defaults: none) reached the task, which went on with it.
    assert!(
        report.contains("Research Report: python (User accepted without selection)"),
        "{report}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_tool_the_server_does_not_offer_stops_the_start() {
    let Some(peers) = common::peers() else { return };
    let mut config = common::everything(&peers);
    config.tasks = vec!["simulate-research".into()];
    let refused = terminus_tools::McpTools::connect(&[config]).await;
    let Err(e) = refused else {
        panic!("a task tool the server does not offer was accepted");
    };
    assert!(
        e.to_string().contains(
            "approval/deferred/tools/tasks/poll names `simulate-research`, which the server does not \
             offer"
        ),
        "{e}"
    );
}
