//! A test server, not an example to follow: a stdio MCP server on rmcp's own server side that
//! speaks the 2026-07-28 revision (`server/discover`, `subscriptions/listen`) and whose tool
//! list changes: `swap` adds `greet` and removes `echo`, and sends
//! `notifications/tools/list_changed` on each open subscription before the call's result.
//! `adapters/tools/tests/mcp.rs` runs it (cargo builds examples with the tests).

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, SubscriptionFilter,
    Tool,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext, SubscriptionSink};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Changing {
    swapped: Mutex<bool>,
    listeners: Mutex<Vec<SubscriptionSink>>,
}

fn tool(name: &'static str, description: &'static str) -> Tool {
    let schema = serde_json::json!({"type": "object"});
    let serde_json::Value::Object(schema) = schema else {
        unreachable!("an object")
    };
    Tool::new(name, description, Arc::new(schema))
}

impl ServerHandler for Changing {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("changing-2026", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let swapped = *self.swapped.lock().map_err(|_| poisoned())?;
        let tools = if swapped {
            vec![
                tool("greet", "Say hello."),
                tool("swap", "Add greet, remove echo."),
            ]
        } else {
            vec![
                tool("echo", "Answer echo."),
                tool("swap", "Add greet, remove echo."),
            ]
        };
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = match request.name.as_ref() {
            "echo" => "echo",
            "greet" => "hello from greet",
            "swap" => {
                *self.swapped.lock().map_err(|_| poisoned())? = true;
                let listeners = self.listeners.lock().map_err(|_| poisoned())?.clone();
                for sink in listeners {
                    let _ = sink.notify_tool_list_changed().await;
                }
                "swapped"
            }
            other => {
                return Err(ErrorData::invalid_params(format!("no tool {other}"), None));
            }
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.listeners
            .lock()
            .map_err(|_| poisoned())?
            .push(context.sink().clone());
        context.cancelled().await;
        Ok(())
    }
}

fn poisoned() -> ErrorData {
    ErrorData::internal_error("a lock was poisoned", None)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = Changing::default().serve(rmcp::transport::stdio()).await?;
    server.waiting().await?;
    Ok(())
}
