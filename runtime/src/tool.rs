//! The tool port, the tool set and the built-in `write_todos` tool.

use crate::fault::Fault;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
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

/// A part of a run's tools whose list can change while the run goes on: an MCP server that
/// sends `notifications/tools/list_changed`. The runtime asks before every model call (never in
/// the middle of a tool batch, which runs with the tools it started with), so the model's next
/// request offers the new list and a call to a removed tool is answered `not_found`.
#[async_trait]
pub trait ToolSource: Send + Sync {
    /// The source's tools now (with their holds) when they may have changed since the last
    /// answer; `None` when they have not. Asked before every model call: it must be cheap when
    /// nothing changed.
    async fn refresh(&self) -> Option<ToolSet>;
}

/// A source's tools as the set holds them.
#[derive(Clone)]
struct Watched {
    source: Arc<dyn ToolSource>,
    /// The names its tools have in the set now.
    names: BTreeSet<String>,
}

/// How a run's tool list changed before a model call ([`ToolSet::refresh`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolsChanged {
    /// The model call about to be made with the new list (1-based; 0 outside a run).
    pub model_call: u32,
    /// The tools that appeared, sorted.
    pub added: Vec<String>,
    /// The tools that are gone, sorted.
    pub removed: Vec<String>,
    /// The tools still there whose description or parameters changed, sorted.
    pub changed: Vec<String>,
}

impl ToolsChanged {
    /// Whether nothing was added, removed or changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

impl fmt::Display for ToolsChanged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the tool list changed before model call {}:",
            self.model_call
        )?;
        let mut first = true;
        for (what, names) in [
            ("added", &self.added),
            ("removed", &self.removed),
            ("changed", &self.changed),
        ] {
            if names.is_empty() {
                continue;
            }
            if !first {
                f.write_str(";")?;
            }
            first = false;
            write!(f, " {what} {}", names.join(", "))?;
        }
        Ok(())
    }
}

/// The tools of a run, by name. [`ToolSet::new`] holds the built-in `write_todos`; a call to a
/// name that is not in the set is answered with a `not_found` error. Tools added with
/// [`ToolSet::watch`] come from a [`ToolSource`] whose list can change during the run.
#[derive(Clone)]
pub struct ToolSet {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    /// Tools whose calls are held for a decision from outside (`docs/approvals.md`).
    holds: BTreeMap<String, Hold>,
    /// Tools whose results the context window keeps while it can hold them (`spec/context.md`).
    keeps: BTreeSet<String>,
    /// The sources whose lists can change.
    sources: Vec<Watched>,
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
            keeps: BTreeSet::new(),
            sources: Vec::new(),
        }
    }

    /// Asks `source` at every [`ToolSet::refresh`] for its tools, which are those called
    /// `names` in this set now (insert them first): they are then replaced by what it answers.
    pub fn watch(
        &mut self,
        source: Arc<dyn ToolSource>,
        names: impl IntoIterator<Item = String>,
    ) -> &mut ToolSet {
        self.sources.push(Watched {
            source,
            names: names.into_iter().collect(),
        });
        self
    }

    /// The sources added with [`ToolSet::watch`], each with the names its tools have now, so
    /// that a set wrapping another's tools can watch them too.
    pub fn sources(&self) -> Vec<(Arc<dyn ToolSource>, Vec<String>)> {
        self.sources
            .iter()
            .map(|w| (w.source.clone(), w.names.iter().cloned().collect()))
            .collect()
    }

    fn merge(&mut self, tools: &ToolSet) {
        for (name, tool) in &tools.tools {
            self.tools.insert(name.clone(), tool.clone());
        }
        for (name, hold) in &tools.holds {
            self.holds.insert(name.clone(), *hold);
        }
    }

    /// Asks every watched source whether its tools changed, and replaces those of each that
    /// answers: its tools that are gone are removed (with their holds), the new ones added.
    /// `None` when nothing changed (always, for a set that watches no source).
    pub async fn refresh(&mut self) -> Option<ToolsChanged> {
        if self.sources.is_empty() {
            return None;
        }
        let mut change = ToolsChanged::default();
        for i in 0..self.sources.len() {
            let source = self.sources[i].source.clone();
            let Some(now) = source.refresh().await else {
                continue;
            };
            let old = std::mem::take(&mut self.sources[i].names);
            for name in &old {
                if !now.tools.contains_key(name) {
                    self.tools.remove(name);
                    self.holds.remove(name);
                    change.removed.push(name.clone());
                }
            }
            for (name, tool) in &now.tools {
                match self.tools.get(name) {
                    Some(before) if old.contains(name) => {
                        if before.description() != tool.description()
                            || before.parameters() != tool.parameters()
                        {
                            change.changed.push(name.clone());
                        }
                    }
                    _ => change.added.push(name.clone()),
                }
                self.holds.remove(name);
            }
            self.merge(&now);
            self.sources[i].names = now.tools.keys().cloned().collect();
        }
        change.added.sort();
        change.removed.sort();
        change.changed.sort();
        (!change.is_empty()).then_some(change)
    }

    /// Holds every call of the tool called `name` for a decision from outside: a person's
    /// approval ([`Hold::Approval`]), or an answer instead of running it ([`Hold::Deferred`]).
    /// The run suspends until each held call is decided (`docs/approvals.md`).
    pub fn hold(&mut self, name: impl Into<String>, hold: Hold) -> &mut ToolSet {
        // A call is held for a question only after it ran and asked it ([`crate::asking`]).
        if hold != Hold::Elicitation {
            self.holds.insert(name.into(), hold);
        }
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

    /// The holds and `keep` flags of `other`, taken over (a set that wraps another's tools
    /// keeps both).
    pub fn hold_as(&mut self, other: &ToolSet) -> &mut ToolSet {
        self.holds.clone_from(&other.holds);
        self.keeps.clone_from(&other.keeps);
        self
    }

    /// Marks the results of the tool called `name` as kept in the model's view: a prune of the
    /// context window drops them only when they alone would not fit (`spec/context.md`). The
    /// flag is by name: it outlives a [`ToolSet::refresh`] that removes and adds the tool back.
    pub fn keep(&mut self, name: impl Into<String>) -> &mut ToolSet {
        self.keeps.insert(name.into());
        self
    }

    /// Whether the results of `name` are kept in the model's view.
    pub fn kept(&self, name: &str) -> bool {
        self.keeps.contains(name)
    }

    /// Every tool name whose results are kept, sorted.
    pub fn keeps(&self) -> impl Iterator<Item = &str> {
        self.keeps.iter().map(String::as_str)
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

/// What a call whose arguments are not a JSON object is answered (class `invalid_arguments`),
/// by `terminus run` and every host alike: what was wrong (the parser's error, or "not a JSON
/// object") and what the model wrote, cut at 200 characters.
pub(crate) fn invalid_arguments_message(arguments: &Value) -> String {
    let (text, wrong) = match arguments {
        Value::String(raw) => {
            let wrong = match serde_json::from_str::<Value>(raw) {
                Ok(_) => "not a JSON object".to_owned(),
                Err(e) => e.to_string(),
            };
            (raw.clone(), wrong)
        }
        other => (other.to_string(), "not a JSON object".to_owned()),
    };
    let mut shown: String = text.chars().take(200).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    format!("the arguments must be a JSON object ({wrong}); the call was not run. Got: {shown}")
}

/// A failed call's text as the model reads it: `error (KIND): MESSAGE`.
pub(crate) fn failure_text(kind: ToolErrorKind, message: &str) -> String {
    format!("error ({}): {message}", kind.as_str())
}

/// The text of a tool outcome as the model sees it: a string result as is, any other JSON
/// compact, an error as `error (kind): message`.
pub fn render_outcome(outcome: &ToolOutcome) -> String {
    match outcome {
        ToolOutcome::Ok(v) => match v.value() {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
        ToolOutcome::Error { kind, message } => failure_text(*kind, message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A tool that answers its own description.
    struct Named(&'static str);

    #[async_trait]
    impl Tool for Named {
        fn description(&self) -> &str {
            self.0
        }

        async fn call(&self, _arguments: Value) -> Result<ToolOutcome, Fault> {
            Ok(ToolOutcome::ok(Value::String(self.0.into())))
        }
    }

    /// A source that answers the next of its lists, once.
    struct Lists(Mutex<Vec<ToolSet>>);

    #[async_trait]
    impl ToolSource for Lists {
        async fn refresh(&self) -> Option<ToolSet> {
            let mut lists = self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            (!lists.is_empty()).then(|| lists.remove(0))
        }
    }

    fn set(tools: &[(&str, &'static str)]) -> ToolSet {
        let mut set = ToolSet::empty();
        for (name, description) in tools {
            set.insert(*name, Arc::new(Named(description)));
        }
        set
    }

    #[tokio::test]
    async fn a_keep_flag_is_by_name_and_follows_a_wrapping_set() {
        let source = Arc::new(Lists(Mutex::new(vec![set(&[]), set(&[("spec", "v2")])])));
        let mut tools = set(&[("spec", "v1"), ("grep", "grep")]);
        tools.keep("spec");
        tools.watch(source, ["spec".to_owned()]);
        assert!(tools.kept("spec") && !tools.kept("grep"));
        let mut wrapper = set(&[("spec", "v1"), ("grep", "grep")]);
        wrapper.hold_as(&tools);
        assert_eq!(wrapper.keeps().collect::<Vec<_>>(), ["spec"]);
        // Removed by its server and listed again: still kept.
        tools.refresh().await.expect("removed");
        assert!(tools.kept("spec"));
        tools.refresh().await.expect("added back");
        assert!(tools.kept("spec") && tools.contains("spec"));
    }

    #[tokio::test]
    async fn a_refresh_replaces_a_sources_tools_and_says_what_changed() {
        let mut second = set(&[("echo", "echo v2"), ("greet", "greet")]);
        second.hold("greet", Hold::Approval);
        let source = Arc::new(Lists(Mutex::new(vec![second, set(&[])])));
        let mut tools = ToolSet::new();
        tools.insert("echo", Arc::new(Named("echo")));
        tools.insert("sum", Arc::new(Named("sum")));
        tools.hold("sum", Hold::Deferred);
        tools.watch(source, ["echo".to_owned(), "sum".to_owned()]);

        let change = tools.refresh().await.expect("the first list changed it");
        assert_eq!(change.added, ["greet"]);
        assert_eq!(change.removed, ["sum"]);
        assert_eq!(change.changed, ["echo"]);
        assert_eq!(
            change.to_string(),
            "the tool list changed before model call 0: added greet; removed sum; changed echo"
        );
        assert_eq!(
            tools.names().collect::<Vec<_>>(),
            ["echo", "greet", WRITE_TODOS]
        );
        assert_eq!(tools.held("greet"), Some(Hold::Approval));
        assert_eq!(
            tools.held("sum"),
            None,
            "a removed tool's hold goes with it"
        );
        assert_eq!(tools.get("echo").map(|t| t.description()), Some("echo v2"));

        let change = tools.refresh().await.expect("the empty list changed it");
        assert_eq!(change.removed, ["echo", "greet"]);
        assert!(change.added.is_empty() && change.changed.is_empty());
        assert_eq!(tools.names().collect::<Vec<_>>(), [WRITE_TODOS]);
        assert_eq!(tools.held("greet"), None);
        assert!(
            tools.refresh().await.is_none(),
            "the source has nothing new"
        );
        assert!(ToolSet::new().refresh().await.is_none());
    }
}
