//! MCP tools in a run: a server over stdio (the eval's `not_ready.py`, Python's standard
//! library only) whose `fetch_report` says "not ready, try again" until its third call. Its
//! config declares it a poller (`poll`), so the client calls it again while it says so and the
//! model makes one call and gets the report: the kernel sees one call and one result, no loop.
//!
//! `cargo run -p terminus-examples --example mcp_tools` (needs `python3`)

use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use terminus_examples::Scripted;
use terminus_kernel::{ModelTurn, Policy, ToolCall};
use terminus_runtime::{Run, ToolSet};
use terminus_tools::{McpConfig, McpTools, McpTransport, Poll};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let folder = tempfile::tempdir().expect("a temp dir");
    let server =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/eval/bin/not_ready.py");
    let mut report_server = McpConfig::new(
        "report",
        McpTransport::Stdio {
            command: vec![
                "python3".into(),
                server.to_string_lossy().into_owned(),
                "3".into(),
            ],
        },
    );
    // The server counts its calls in the folder it starts in.
    report_server.working_dir = Some(folder.path().to_path_buf());
    report_server.poll.insert(
        "fetch_report".into(),
        Poll {
            not_ready: "not ready".into(),
            every: Duration::from_millis(100),
            max_wait: Duration::from_secs(10),
        },
    );
    let mcp = McpTools::connect(&[report_server])
        .await
        .expect("the MCP server starts");
    let mut tools = ToolSet::new();
    mcp.add_to(&mut tools);
    println!("tools: {}", tools.names().collect::<Vec<_>>().join(", "));

    let model = Arc::new(Scripted::watching(
        vec![
            ModelTurn {
                tool_calls: vec![ToolCall::new("c1", "fetch_report", json!({}))],
                ..ModelTurn::default()
            },
            ModelTurn {
                text: "4217 units were shipped this quarter.".into(),
                needs_more_work: Some(false),
                ..ModelTurn::default()
            },
        ],
        |request| {
            if let Some(last) = request.messages.last() {
                println!("the model is told: {}", last.content);
            }
        },
    ));
    let report = Run::new("How many units were shipped?", Policy::default(), model)
        .tools(tools)
        .execute()
        .await
        .expect("the run");
    mcp.shutdown().await;
    println!(
        "{} ({}): {:?}; {} tool call(s) the model made",
        report.outcome.outcome_str(),
        report.outcome.reason_str(),
        report.result,
        report.stats.tool_calls
    );
    assert_eq!(report.outcome.reason_str(), "explicit");
    assert_eq!(report.stats.tool_calls, 1, "one call: the client polled");
    let calls = std::fs::read_to_string(folder.path().join(".fetch_report_calls"))
        .expect("the server counted its calls");
    assert_eq!(
        calls.trim(),
        "3",
        "the server was called until it was ready"
    );
}
