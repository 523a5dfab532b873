//! # terminus-tools
//!
//! Real tools for Terminus. [`McpTools`] connects MCP servers (stdio children and streamable HTTP,
//! see [`mcp`]) and makes their tools runtime tools. [`native`] turns an async Rust function with a
//! typed argument struct into a runtime [`Tool`](terminus_runtime::Tool): the JSON Schema the model
//! is shown comes from the struct (`schemars`), and the arguments are checked against the struct
//! before the function runs, so a model that sends the wrong shape gets an `invalid_arguments`
//! error naming the field, which it can fix, and the function never sees bad input.
//!
//! ```
//! use std::sync::Arc;
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use terminus_runtime::ToolSet;
//! use terminus_tools::{ToolFailure, native};
//!
//! /// Arguments of `add`.
//! #[derive(Deserialize, JsonSchema)]
//! struct Add {
//!     /// The first addend.
//!     a: i64,
//!     /// The second addend.
//!     b: i64,
//! }
//!
//! let add = native("Add two integers.", |args: Add| async move {
//!     args.a.checked_add(args.b).ok_or_else(|| ToolFailure::failed("the sum overflows"))
//! });
//! let tools = ToolSet::new().with("add", Arc::new(add));
//! assert!(tools.contains("add"));
//! let spec = tools.specs().into_iter().find(|s| s.name == "add").expect("listed");
//! assert_eq!(spec.parameters["required"], serde_json::json!(["a", "b"]));
//! ```

#![forbid(unsafe_code)]

mod clock;
mod content;
pub mod mcp;
pub mod mcp_auth;
mod mcp_login;
mod mcp_task;
mod native;

pub use crate::content::{render, text_of};
pub use crate::mcp::{
    Elicitation, McpConfig, McpError, McpProtocol, McpServer, McpTool, McpTools, McpTransport,
    Poll, complete_login,
};
pub use crate::mcp_auth::{
    AuthStep, IdentityProvider, McpAuth, McpGrant, PrivateKey, SigningAlgorithm,
};
pub use crate::native::{NativeTool, ToolFailure, native};
