//! What the scripted model was sent (its transcript), call by call, in one shape every host can give: the host
//! suite compares each framework adapter's transcript with `terminus run`'s
//! (`spec/hosts/README.md`).
//!
//! A message is `{"role", "text"}` (`role`: `system`, `user`, `assistant` or `tool`), with
//! `"calls"` on an assistant message that calls tools (each `"NAME ARGUMENTS"`, the arguments as
//! compact JSON with sorted keys, or their text when it is not JSON) and `"tool"` on a tool
//! message (the tool's name). Ids are left out: each framework makes its own.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};
use terminus_runtime::{Message, Role};

/// The requests a scripted model was sent, shared with whoever reads them after the run.
#[derive(Debug, Clone, Default)]
pub struct Sent(Arc<Mutex<Vec<Value>>>);

impl Sent {
    /// Nothing sent yet.
    pub fn new() -> Sent {
        Sent::default()
    }

    /// Records one model call's messages.
    pub(crate) fn record(&self, messages: &[Message]) {
        let said = messages.iter().map(said).collect();
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Value::Array(said));
    }

    /// The calls so far: one array of messages each.
    pub fn calls(&self) -> Vec<Value> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl PartialEq for Sent {
    /// The same calls recorded.
    fn eq(&self, other: &Sent) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.calls() == other.calls()
    }
}

/// `message` in the transcript's shape.
fn said(message: &Message) -> Value {
    let role = match message.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut said = json!({ "role": role, "text": message.content });
    if !message.tool_calls.is_empty() {
        said["calls"] = message
            .tool_calls
            .iter()
            .map(|c| {
                Value::String(format!(
                    "{} {}",
                    c.name.as_str(),
                    arguments(c.arguments.value())
                ))
            })
            .collect();
    }
    if let Some(tool) = &message.tool_name {
        said["tool"] = Value::String(tool.clone());
    }
    said
}

/// Arguments as compact JSON with sorted keys (`serde_json`'s map is ordered); a string that
/// holds JSON is read first (a provider's arguments text), one that does not is itself.
pub fn arguments(value: &Value) -> String {
    match value {
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(parsed) if !parsed.is_string() => parsed.to_string(),
            _ => text.clone(),
        },
        other => other.to_string(),
    }
}
