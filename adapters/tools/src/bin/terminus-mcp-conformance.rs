//! The client the official MCP conformance suite drives (`conformance client --command
//! <this program> --scenario <name>`): it connects to the server URL the suite appends as the
//! last argument, through Terminus's own MCP adapter, and does what the scenario named in
//! `MCP_CONFORMANCE_SCENARIO` asks, at the protocol revision `MCP_CONFORMANCE_PROTOCOL_VERSION`
//! names (2026-07-28: [`McpProtocol::Stateless`]; otherwise the 2025-11-25 handshake). Exit 0
//! when every step worked.

use serde_json::json;
use std::process::ExitCode;
use terminus_kernel::ToolOutcome;
use terminus_tools::{
    Elicitation, IdentityProvider, McpAuth, McpConfig, McpGrant, McpProtocol, McpServer,
    McpTransport, PrivateKey, SigningAlgorithm,
};

/// The client ID metadata document URL the suite's `auth/basic-cimd` expects.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

/// Removes the file it holds when the client ends, however it ends.
struct Removed(Option<std::path::PathBuf>);

impl Drop for Removed {
    fn drop(&mut self) {
        if let Some(file) = &self.0 {
            let _ = std::fs::remove_file(file);
        }
    }
}

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
    if std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION").as_deref() == Ok("2026-07-28") {
        config.protocol = McpProtocol::Stateless;
    }
    // The client-credentials scenarios configure a service client (as `grant =
    // "client_credentials"` does in a config file); the others a user's.
    let grant = if scenario.starts_with("auth/client-credentials") {
        McpGrant::ClientCredentials
    } else if scenario.starts_with("auth/wif-") {
        McpGrant::JwtBearer
    } else if scenario.starts_with("auth/enterprise-managed") {
        McpGrant::Enterprise
    } else {
        McpGrant::AuthorizationCode
    };
    // A workload's token, or a user's ID token, is a file its platform writes; the suite
    // hands it over in the context.
    let token_file = match text("valid_jwt").or_else(|| text("idp_id_token")) {
        Some(jwt) => {
            let file = std::env::temp_dir()
                .join(format!("terminus-conformance-{}.jwt", std::process::id()));
            if let Err(e) = std::fs::write(&file, jwt) {
                eprintln!("{}: {e}", file.display());
                return ExitCode::from(1);
            }
            Some(file)
        }
        None => None,
    };
    let _removed = Removed(token_file.clone());
    let idp = match (
        text("idp_issuer"),
        text("idp_token_endpoint"),
        text("idp_client_id"),
    ) {
        (Some(issuer), Some(token_endpoint), Some(client_id)) => Some(IdentityProvider {
            issuer,
            token_endpoint,
            client_id,
            client_secret: text("idp_client_secret"),
        }),
        _ => None,
    };
    let private_key = text("private_key_pem").map(|pem| PrivateKey {
        pem,
        algorithm: text("signing_algorithm")
            .and_then(|a| SigningAlgorithm::from_name(&a))
            .unwrap_or(SigningAlgorithm::RS256),
    });
    config.auth = Some(McpAuth {
        client_id: text("client_id"),
        client_secret: text("client_secret"),
        client_metadata_url: Some(CLIENT_METADATA_URL.into()),
        grant,
        private_key,
        token_file: token_file.clone(),
        idp,
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
    // The calls the scenario's context names, else the one it expects.
    let mut calls: Vec<(String, serde_json::Value)> = context
        .get("toolCalls")
        .and_then(|c| c.as_array())
        .map(|calls| {
            calls
                .iter()
                .filter_map(|c| {
                    let name = c.get("name")?.as_str()?.to_owned();
                    Some((name, c.get("arguments").cloned().unwrap_or(json!({}))))
                })
                .collect()
        })
        .unwrap_or_default();
    if calls.is_empty() {
        let expected: &[&str] = match scenario.as_str() {
            "tools_call" => &["add_numbers"],
            "sse-retry" => &["test_reconnection"],
            "elicitation-sep1034-client-defaults" => &["test_client_elicitation_defaults"],
            "http-standard-headers" => &["test_headers"],
            "http-invalid-tool-headers" => &["valid_tool"],
            // Each answers `input_required` first (SEP-2322), but the last.
            "sep-2322-client-request-state" => &[
                "test_mrtr_echo_state",
                "test_mrtr_no_state",
                "test_mrtr_unrelated",
                "test_mrtr_no_result_type",
            ],
            s if s.starts_with("auth/") => &["test-tool"],
            _ => &[],
        };
        // The focal tool's schema, as the adapter gives it to the model, back to the server.
        if scenario == "json-schema-2020-12-preservation"
            && let Some(tool) = tools.iter().find(|t| t.name == "json_schema_2020_12_tool")
        {
            calls.push((
                "json_schema_echo".to_owned(),
                json!({ "schema": tool.parameters }),
            ));
        }
        for name in expected {
            let arguments = if *name == "add_numbers" {
                json!({ "a": 5, "b": 3 })
            } else {
                json!({})
            };
            calls.push(((*name).to_owned(), arguments));
        }
    }
    let mut code = ExitCode::SUCCESS;
    for (name, arguments) in calls {
        let name = name.as_str();
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
