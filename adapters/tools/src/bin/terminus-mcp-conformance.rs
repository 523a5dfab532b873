//! The client the official MCP conformance suite drives (`conformance client --command
//! <this program> --scenario <name>`): it connects to the server URL the suite appends as the
//! last argument, through Terminus's own MCP adapter, and does what the scenario named in
//! `MCP_CONFORMANCE_SCENARIO` asks. Exit 0 when every step worked.

use serde_json::json;
use std::process::ExitCode;
use terminus_kernel::ToolOutcome;
use terminus_tools::{McpConfig, McpServer, McpTransport};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Some(url) = std::env::args().skip(1).last() else {
        eprintln!("usage: terminus-mcp-conformance SERVER_URL");
        return ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let server =
        match McpServer::connect(McpConfig::new("conformance", McpTransport::Http { url })).await {
            Ok(server) => server,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(1);
            }
        };
    let tools = match server.list().await {
        Ok(tools) => tools,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    eprintln!(
        "tools: {:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    let call = match scenario.as_str() {
        "tools_call" => Some(("add_numbers", json!({ "a": 5, "b": 3 }))),
        "sse-retry" => Some(("test_reconnection", json!({}))),
        _ => None,
    };
    let mut code = ExitCode::SUCCESS;
    if let Some((name, arguments)) = call {
        match server.call(name, arguments).await {
            ToolOutcome::Ok(value) => eprintln!("{name}: {value}"),
            ToolOutcome::Error { kind, message } => {
                eprintln!("{name} failed: {}: {message}", kind.as_str());
                code = ExitCode::from(1);
            }
        }
    }
    server.shutdown().await;
    code
}
