//! A status tool the client waits on (`[[mcp]] poll`): the eval's `fetch_report` server
//! (`spec/eval/bin/not_ready.py`, a real stdio MCP server) answers "not ready, try again" until
//! its N-th call. Declared with `poll`, one call of the model is the calls the job needs, and its
//! result is the report; a job that never becomes ready is a `timeout` naming the calls made.

use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use terminus_kernel::{ToolErrorKind, ToolOutcome};
use terminus_tools::{McpConfig, McpError, McpServer, McpTools, McpTransport, Poll};

/// The report server, ready at its `ready_at`-th call (0: never), counting its calls in `dir`.
fn report_server(dir: &Path, ready_at: u32, poll: Option<Poll>) -> McpConfig {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/eval/bin/not_ready.py");
    let mut config = McpConfig::new(
        "report",
        McpTransport::Stdio {
            command: vec![
                "python3".into(),
                script.to_string_lossy().into_owned(),
                ready_at.to_string(),
            ],
        },
    );
    config.working_dir = Some(dir.to_path_buf());
    config.poll = poll
        .map(|p| BTreeMap::from([("fetch_report".to_owned(), p)]))
        .unwrap_or_default();
    config
}

fn calls_made(dir: &Path) -> u32 {
    std::fs::read_to_string(dir.join(".fetch_report_calls"))
        .map_or(0, |n| n.trim().parse().expect("a count"))
}

fn wait(max_wait_ms: u64) -> Poll {
    Poll {
        not_ready: "NOT READY".into(),
        every: Duration::from_millis(50),
        max_wait: Duration::from_millis(max_wait_ms),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_status_tool_is_called_until_ready_and_the_model_gets_one_result() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let server = McpServer::connect(report_server(dir.path(), 4, Some(wait(10_000))))
        .await
        .expect("starts");
    let outcome = server.call("fetch_report", json!({})).await;
    assert_eq!(
        outcome,
        ToolOutcome::ok(json!("Quarterly report: 4217 units shipped."))
    );
    assert_eq!(
        calls_made(dir.path()),
        4,
        "three not ready, then the report"
    );
    server.shutdown().await;

    // Undeclared, the same server's first answer is the model's.
    let dir = tempfile::tempdir().expect("a temp dir");
    let plain = McpServer::connect(report_server(dir.path(), 4, None))
        .await
        .expect("starts");
    let outcome = plain.call("fetch_report", json!({})).await;
    assert_eq!(outcome, ToolOutcome::ok(json!("not ready, try again")));
    assert_eq!(calls_made(dir.path()), 1);
    plain.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_never_ready_ends_the_wait_with_a_timeout_naming_the_calls() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let server = McpServer::connect(report_server(dir.path(), 0, Some(wait(300))))
        .await
        .expect("starts");
    let outcome = server.call("fetch_report", json!({})).await;
    let made = calls_made(dir.path());
    let ToolOutcome::Error { kind, message } = &outcome else {
        panic!("a job never ready is not a success: {outcome:?}");
    };
    assert_eq!(*kind, ToolErrorKind::Timeout);
    assert!(made >= 2, "the client called again ({made})");
    assert!(
        message.starts_with(&format!(
            "still not ready after {made} calls of `fetch_report` over "
        )) && message
            .ends_with("(the client waited at most 300 ms); its last result: not ready, try again"),
        "{message}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_of_a_tool_the_server_does_not_offer_stops_the_start() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut config = report_server(dir.path(), 1, None);
    config.poll = BTreeMap::from([("fetch_reprot".to_owned(), wait(1000))]);
    let e = McpTools::connect(&[config])
        .await
        .map(|_| ())
        .expect_err("a typo");
    assert!(
        matches!(&e, McpError::UnknownHeld { tool, .. } if tool == "fetch_reprot"),
        "{e}"
    );
    assert!(e.to_string().contains("it offers: fetch_report"), "{e}");
}
