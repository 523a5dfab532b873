//! The servers' tools as the model sees them: named, listed again when a server says its list
//! changed.

use super::config::{McpConfig, McpError};
use super::server::McpServer;
use async_trait::async_trait;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use terminus_kernel::ToolOutcome;
use terminus_runtime::{Fault, Tool, ToolSet, ToolSource, ToolSpec};

/// One tool of one server, as the runtime calls it.
#[derive(Debug)]
pub struct McpTool {
    pub(super) server: Arc<McpServer>,
    pub(super) name: String,
    pub(super) description: String,
    pub(super) parameters: Value,
}

#[async_trait]
impl Tool for McpTool {
    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn idempotent(&self) -> bool {
        self.server.config.idempotent
    }

    async fn call(&self, arguments: Value) -> Result<ToolOutcome, Fault> {
        Ok(self.server.call(&self.name, arguments).await)
    }
}

/// The tools of several servers, named for the model: a tool keeps its own name unless two
/// servers offer it, then each is `{server}__{tool}` (providers allow only `[A-Za-z0-9_-]` in
/// tool names, so no dot).
#[derive(Debug, Default)]
pub struct McpTools {
    pub(super) servers: Vec<Arc<McpServer>>,
    /// Each server's tools as listed at connection, with its list count then.
    pub(super) listed: Vec<Listing>,
    pub(super) tools: BTreeMap<String, Arc<McpTool>>,
}

/// One server's tools as listed, and its [`McpServer::list_changes`] when they were.
#[derive(Debug, Clone, Default)]
pub(super) struct Listing {
    pub(super) changes: u64,
    pub(super) specs: Vec<ToolSpec>,
}

impl McpTools {
    /// Connects every server in `configs` and lists its tools. A server that cannot start stops
    /// everything (the others are shut down): its error names its `[[mcp]]` entry.
    pub async fn connect(configs: &[McpConfig]) -> Result<McpTools, McpError> {
        let mut listed = Vec::new();
        let mut servers = Vec::new();
        for config in configs {
            let outcome = match McpServer::connect(config.clone()).await {
                Ok(server) => {
                    let changes = server.list_changes();
                    server
                        .list()
                        .await
                        .map(|specs| (server, Listing { changes, specs }))
                }
                Err(e) => Err(e),
            };
            match outcome {
                Ok((server, listing)) => {
                    servers.push(server);
                    listed.push(listing);
                }
                Err(e) => {
                    for s in &servers {
                        s.shutdown().await;
                    }
                    return Err(e);
                }
            }
        }
        for (server, listing) in servers.iter().zip(&listed) {
            let specs = &listing.specs;
            // A held tool the server does not offer is a typo that would run a call unasked.
            let config = &server.config;
            let unknown = config
                .approval
                .iter()
                .chain(&config.deferred)
                .chain(&config.tools)
                .chain(&config.tasks)
                .chain(config.poll.keys())
                .find(|t| *t != "*" && !specs.iter().any(|s| s.name == **t));
            if let Some(tool) = unknown {
                let server_name = config.name.clone();
                let tool = tool.clone();
                for s in &servers {
                    s.shutdown().await;
                }
                return Err(McpError::UnknownHeld {
                    server: server_name,
                    tool,
                    offered: specs.iter().map(|s| s.name.clone()).collect(),
                });
            }
        }
        let tools = expose(&servers, &listed);
        Ok(McpTools {
            servers,
            listed,
            tools,
        })
    }

    /// The tools by the names the model sees, sorted (as listed at connection).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// The tool the model calls `name` (as listed at connection).
    pub fn get(&self, name: &str) -> Option<&Arc<McpTool>> {
        self.tools.get(name)
    }

    /// Adds every tool to `set`, with the holds of its server's `approval` and `deferred`, as a
    /// [`ToolSource`]: a server that says its list changed is listed again at the set's next
    /// [`ToolSet::refresh`] (before the run's next model call), and its tools replaced.
    pub fn add_to(&self, set: &mut ToolSet) {
        let now = tool_set(&self.tools);
        for name in now.names() {
            if let Some(tool) = now.get(name) {
                set.insert(name, tool.clone());
            }
        }
        for (name, hold) in now.holds() {
            set.hold(name, hold);
        }
        let source = Arc::new(Source {
            servers: self.servers.clone(),
            listed: tokio::sync::Mutex::new(self.listed.clone()),
        });
        set.watch(source, self.tools.keys().cloned());
    }

    /// Ends every session and stops the child servers.
    pub async fn shutdown(&self) {
        for server in &self.servers {
            server.shutdown().await;
        }
    }
}

/// The tools of `servers` (listed as `listed`, in the same order) by the names the model sees.
pub(super) fn expose(
    servers: &[Arc<McpServer>],
    listed: &[Listing],
) -> BTreeMap<String, Arc<McpTool>> {
    let mut offered: BTreeMap<&str, usize> = BTreeMap::new();
    for listing in listed {
        for spec in &listing.specs {
            *offered.entry(spec.name.as_str()).or_default() += 1;
        }
    }
    let mut tools = BTreeMap::new();
    for (server, listing) in servers.iter().zip(listed) {
        for spec in &listing.specs {
            let exposed = if offered.get(spec.name.as_str()).copied().unwrap_or(0) > 1 {
                format!("{}__{}", server.config.name, spec.name)
            } else {
                spec.name.clone()
            };
            tools.insert(
                exposed,
                Arc::new(McpTool {
                    server: server.clone(),
                    name: spec.name.clone(),
                    description: spec.description.clone(),
                    parameters: spec.parameters.clone(),
                }),
            );
        }
    }
    tools
}

/// `tools` as a set (without `write_todos`), with their servers' holds.
pub(super) fn tool_set(tools: &BTreeMap<String, Arc<McpTool>>) -> ToolSet {
    let mut set = ToolSet::empty();
    for (name, tool) in tools {
        set.insert(name.clone(), tool.clone());
        if let Some(hold) = tool.server.config.hold(&tool.name) {
            set.hold(name.clone(), hold);
        }
    }
    set
}

/// The MCP tools of one run: a server whose list count moved since its tools were listed is
/// listed again (within its `tool_timeout`); one that cannot be keeps its last list.
pub(super) struct Source {
    pub(super) servers: Vec<Arc<McpServer>>,
    pub(super) listed: tokio::sync::Mutex<Vec<Listing>>,
}

#[async_trait]
impl ToolSource for Source {
    async fn refresh(&self) -> Option<ToolSet> {
        let mut listed = self.listed.lock().await;
        let mut changed = false;
        for (server, listing) in self.servers.iter().zip(listed.iter_mut()) {
            let changes = server.list_changes();
            if changes == listing.changes {
                continue;
            }
            // Counted before listing: a change announced during the listing lists again.
            listing.changes = changes;
            if let Ok(Ok(specs)) =
                tokio::time::timeout(server.config.tool_timeout, server.list()).await
                && specs != listing.specs
            {
                listing.specs = specs;
                changed = true;
            }
        }
        changed.then(|| tool_set(&expose(&self.servers, &listed)))
    }
}
