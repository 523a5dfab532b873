//! The tool port, the tool set and the built-in `write_todos` tool.

use crate::fault::Fault;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use terminus_kernel::{Hold, ToolErrorKind, ToolOutcome, WRITE_TODOS, parse_todos};

/// What the model is told about a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does.
    pub description: String,
    /// A JSON Schema of its arguments.
    pub parameters: Value,
}

/// A tool the model can call.
///
/// The runtime applies the per-call timeout ([`crate::RuntimeConfig::tool_timeout`]): a call that
/// takes longer is dropped and answered with a `timeout` error.
#[async_trait]
pub trait Tool: Send + Sync {
    /// What the tool does, for the model.
    fn description(&self) -> &str {
        ""
    }

    /// A JSON Schema of the arguments, for the model.
    fn parameters(&self) -> Value {
        json!({ "type": "object" })
    }

    /// Whether calling it twice with the same arguments is harmless. The journal records it in
    /// each call's intent, so a resumed run knows which in-doubt calls it may repeat.
    fn idempotent(&self) -> bool {
        true
    }

    /// Runs one call. A failure of the call is an `Ok(ToolOutcome::Error { .. })` that the
    /// kernel counts; `Err` is a [`Fault`] of the adapter itself and stops the run.
    async fn call(&self, arguments: Value) -> Result<ToolOutcome, Fault>;
}

/// The tools of a run, by name. [`ToolSet::new`] holds the built-in `write_todos`; a call to a
/// name that is not in the set is answered with a `not_found` error.
#[derive(Clone)]
pub struct ToolSet {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    /// Tools whose calls are held for a decision from outside (`docs/approvals.md`).
    holds: BTreeMap<String, Hold>,
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.tools.keys()).finish()?;
        if !self.holds.is_empty() {
            write!(f, " held: {:?}", self.holds)?;
        }
        Ok(())
    }
}

impl Default for ToolSet {
    fn default() -> Self {
        ToolSet::new()
    }
}

impl ToolSet {
    /// A set with the built-in `write_todos` tool.
    pub fn new() -> ToolSet {
        let mut set = ToolSet::empty();
        set.insert(WRITE_TODOS, Arc::new(WriteTodos));
        set
    }

    /// A set without any tool, not even `write_todos`.
    pub fn empty() -> ToolSet {
        ToolSet {
            tools: BTreeMap::new(),
            holds: BTreeMap::new(),
        }
    }

    /// Holds every call of the tool called `name` for a decision from outside: a person's
    /// approval ([`Hold::Approval`]), or an answer instead of running it ([`Hold::Deferred`]).
    /// The run suspends until each held call is decided (`docs/approvals.md`).
    pub fn hold(&mut self, name: impl Into<String>, hold: Hold) -> &mut ToolSet {
        self.holds.insert(name.into(), hold);
        self
    }

    /// Why calls of `name` are held, if they are.
    pub fn held(&self, name: &str) -> Option<Hold> {
        self.holds.get(name).copied()
    }

    /// Every held tool name and why, sorted by name.
    pub fn holds(&self) -> impl Iterator<Item = (&str, Hold)> {
        self.holds.iter().map(|(name, hold)| (name.as_str(), *hold))
    }

    /// The holds of `other`, taken over (a set that wraps another's tools keeps its holds).
    pub fn hold_as(&mut self, other: &ToolSet) -> &mut ToolSet {
        self.holds.clone_from(&other.holds);
        self
    }

    /// Adds (or replaces) the tool called `name`.
    pub fn insert(&mut self, name: impl Into<String>, tool: Arc<dyn Tool>) -> &mut ToolSet {
        self.tools.insert(name.into(), tool);
        self
    }

    /// Adds (or replaces) the tool called `name`, builder style.
    #[must_use]
    pub fn with(mut self, name: impl Into<String>, tool: Arc<dyn Tool>) -> ToolSet {
        self.insert(name, tool);
        self
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Whether the set has a tool called `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// The tool names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// What the model is told about every tool, by name.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|(name, tool)| ToolSpec {
                name: name.clone(),
                description: tool.description().to_owned(),
                parameters: tool.parameters(),
            })
            .collect()
    }
}

/// The built-in `write_todos` tool: it validates its `todos` argument with
/// [`terminus_kernel::parse_todos`] and answers ok or `invalid_arguments`. The kernel itself
/// replaces its todo list when it sees the ok result (`docs/design.md`, "Scenario files").
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteTodos;

#[async_trait]
impl Tool for WriteTodos {
    fn description(&self) -> &str {
        "Replace the todo list. Every todo has a content and a status: pending, in_progress, \
         completed or cancelled. The run cannot complete while a todo is pending or in_progress."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "required": ["todos"],
            "properties": {
                "todos": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["content", "status"],
                        "properties": {
                            "content": { "type": "string" },
                            "status": { "enum": ["pending", "in_progress", "completed", "cancelled"] }
                        }
                    }
                }
            }
        })
    }

    async fn call(&self, arguments: Value) -> Result<ToolOutcome, Fault> {
        Ok(match parse_todos(&arguments) {
            Ok(todos) => {
                let open = todos.iter().filter(|t| t.status.is_open()).count();
                ToolOutcome::ok(Value::String(format!(
                    "Todo list updated: {open} of {} open.",
                    todos.len()
                )))
            }
            Err(message) => ToolOutcome::Error {
                kind: ToolErrorKind::InvalidArguments,
                message,
            },
        })
    }
}

/// The text of a tool outcome as the model sees it: a string result as is, any other JSON
/// compact, an error as `error (kind): message`.
pub fn render_outcome(outcome: &ToolOutcome) -> String {
    match outcome {
        ToolOutcome::Ok(v) => match v.value() {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
        ToolOutcome::Error { kind, message } => {
            format!("error ({}): {message}", kind.as_str())
        }
    }
}
