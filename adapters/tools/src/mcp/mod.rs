//! MCP servers as tools, on the official Rust SDK (`rmcp`): stdio children and streamable HTTP.
//!
//! Each server's tools (listed with pagination) become runtime
//! [`Tool`](terminus_runtime::Tool)s. A call runs with the server's per-call timeout, and every way it can fail is one of the kernel's tool error kinds
//! ([`error_kind`], [`render`](crate::render)), so the model sees it and rule 7 counts it:
//!
//! | what happened | kind |
//! |---|---|
//! | a result with `isError: true` | `failed`, with the server's text |
//! | JSON-RPC method not found (-32601) | `not_found` |
//! | JSON-RPC invalid params (-32602) | `invalid_arguments` |
//! | any other JSON-RPC error | `failed` |
//! | HTTP 401 / 403 (after OAuth, when `auth` is set: [`crate::mcp_auth`]) | `auth_failed`, naming the OAuth step that failed |
//! | no answer within `tool_timeout_ms` | `timeout` |
//! | the server process exited or the connection dropped | `failed` for the calls in flight; the server is started (reconnected) once more, and if it is lost again its tools answer `not_found` (unrecoverable: excluded or stopped by the policy) |
//!
//! MCP tools are not idempotent unless the server's config says so: a call that was in flight
//! at a crash is not run again on resume; the model is told and decides.
//!
//! A server that sends `notifications/tools/list_changed` (on a 2026-07-28 session, on the
//! `subscriptions/listen` stream the session opens for it) is listed again
//! before the run's next model call ([`McpTools::add_to`] adds the tools as a
//! [`ToolSource`](terminus_runtime::ToolSource)): the model is offered the new list, a call of a tool that is gone is
//! answered `not_found`, and the run reports the change ([`terminus_runtime::ToolsChanged`]).
//!
//! The rooms: `config` (an `[[mcp]]` entry and the errors that stop a start), `session` (the
//! client's side of one session: elicitation's answers, the transport, the opening), `server`
//! (one connected server: calls, task waits, restarts), `errors` (the table above), `login`
//! (OAuth on requests, and the login a person completes) and `exposure` (the tools as the model
//! sees them, listed again when they change).

mod config;
mod errors;
mod exposure;
mod login;
mod server;
mod session;

pub use config::{Elicitation, McpConfig, McpError, McpProtocol, McpTransport, Poll};
pub use errors::error_kind;
pub use exposure::{McpTool, McpTools};
pub use login::complete_login;
pub use server::{MAX_RESTARTS, McpServer};
