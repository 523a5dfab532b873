//! The client the official MCP conformance suite drives (`conformance client --command
//! <this program> --scenario <name>`): it connects to the server URL the suite appends as the
//! last argument, through Terminus's own MCP adapter, and does what the scenario named in
//! `MCP_CONFORMANCE_SCENARIO` asks. Exit 0 when every step worked.

use serde_json::json;
use std::process::ExitCode;
use terminus_kernel::ToolOutcome;
use terminus_tools::{Elicitation, McpAuth, McpConfig, McpServer, McpTransport};

/// The client ID metadata document URL the suite's `auth/basic-cimd` expects.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Some(url) = std::env::args().skip(1).last() else {
        eprintln!("usage: terminus-mcp-conformance SERVER_URL");
        return ExitCode::from(2);
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: serde_json::Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or_default();
    let text = |key: &str| context.get(key).and_then(|v| v.as_str()).map(str::to_owned);
    let mut config = McpConfig::new("conformance", McpTransport::Http { url });
    config.elicitation = Elicitation::Defaults;
    config.auth = Some(McpAuth {
        client_id: text("client_id"),
        client_secret: text("client_secret"),
        client_metadata_url: Some(CLIENT_METADATA_URL.into()),
        ..McpAuth::default()
    });
    let server = match McpServer::connect(config).await {
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
        "elicitation-sep1034-client-defaults" => {
            Some(("test_client_elicitation_defaults", json!({})))
        }
        s if s.starts_with("auth/") => Some(("test-tool", json!({}))),
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
