//! The run's state: its snapshot, the RFC 6902 deltas between two, and the state of a run that
//! ended or suspended.

use serde_json::{Value, json};
use std::sync::{Mutex, MutexGuard, PoisonError};
use terminus_kernel::{Machine, Policy, Stats};
use terminus_runtime::{PendingCall, Report};

/// The run's state, as `STATE_SNAPSHOT` carries it and `STATE_DELTA` patches it.
#[derive(Debug, Clone)]
pub(crate) struct RunState {
    pub(super) execution: String,
    pub(super) agent: String,
    pub(super) policy: Policy,
    pub(super) value: Value,
}

impl RunState {
    /// The state of `execution` of `agent`, from `machine` (a new run's, or a resumed one's as
    /// its journal left it).
    pub(crate) fn new(execution: &str, agent: &str, machine: &Machine) -> RunState {
        let mut state = RunState {
            execution: execution.to_owned(),
            agent: agent.to_owned(),
            policy: machine.policy().clone(),
            value: Value::Null,
        };
        state.value = state.render(
            "running",
            machine.phase().as_str(),
            &machine.stats(),
            0,
            &Parts::of(machine),
        );
        state
    }

    /// The state as JSON.
    pub(crate) fn value(&self) -> &Value {
        &self.value
    }

    pub(super) fn render(
        &self,
        status: &str,
        phase: &str,
        stats: &Stats,
        elapsed_ms: u64,
        parts: &Parts,
    ) -> Value {
        let budgets = terminus_runtime::budgets_state(&self.policy, stats, Some(elapsed_ms));
        json!({
            "execution": self.execution,
            "agent": self.agent,
            "status": status,
            "phase": phase,
            "step": stats.steps,
            "elapsed_ms": elapsed_ms,
            "counters": stats,
            "budgets": budgets,
            "todos": parts.todos,
            "excluded_tools": parts.excluded,
            "tool_budgets": parts.tool_budgets,
            "pending": [],
        })
    }

    /// Moves to `next`; the RFC 6902 patch from the state before (empty when nothing changed).
    pub(super) fn update(&mut self, next: Value) -> Vec<Value> {
        let mut patch = Vec::new();
        diff(&self.value, &next, &mut String::new(), &mut patch);
        self.value = next;
        patch
    }
}

/// What the state shows of the machine besides its counters.
#[derive(Debug, Clone, Default)]
pub(super) struct Parts {
    pub(super) todos: Value,
    pub(super) excluded: Vec<String>,
    /// Where each per-tool budget stands (`terminus_runtime::tool_budget_state`).
    pub(super) tool_budgets: Value,
}

impl Parts {
    pub(super) fn of(machine: &Machine) -> Parts {
        Parts {
            todos: serde_json::to_value(machine.todos()).unwrap_or(Value::Array(Vec::new())),
            excluded: machine
                .ledger()
                .excluded()
                .map(|(name, _)| name.to_owned())
                .collect(),
            tool_budgets: terminus_runtime::tool_budget_state(machine.policy(), machine.ledger()),
        }
    }
}

/// Appends to `patch` the RFC 6902 operations that turn `old` into `new` at `path`: objects
/// key by key, anything else (arrays included) replaced whole.
pub(crate) fn diff(old: &Value, new: &Value, path: &mut String, patch: &mut Vec<Value>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let len = path.len();
                push_pointer(path, key);
                match b.get(key) {
                    None => patch.push(json!({ "op": "remove", "path": path })),
                    Some(next) => diff(value, next, path, patch),
                }
                path.truncate(len);
            }
            for (key, value) in b {
                if !a.contains_key(key) {
                    let len = path.len();
                    push_pointer(path, key);
                    patch.push(json!({ "op": "add", "path": path, "value": value }));
                    path.truncate(len);
                }
            }
        }
        (a, b) if a == b => {}
        (_, b) => patch.push(json!({ "op": "replace", "path": path, "value": b })),
    }
}

/// Appends `/key` to a JSON pointer (RFC 6901: `~` as `~0`, `/` as `~1`).
pub(super) fn push_pointer(path: &mut String, key: &str) {
    path.push('/');
    path.push_str(&key.replace('~', "~0").replace('/', "~1"));
}

/// The last state of a run that ended with `report`: its status, reason and result.
pub(crate) fn ended_state(state: &Value, report: &Report) -> Value {
    let mut next = state.clone();
    next["status"] = json!(report.outcome.outcome_str());
    next["reason"] = json!(report.outcome.reason_str());
    next["rule"] = json!(report.rule.name());
    next["result"] = json!(report.result);
    next
}

/// The last state of a run suspended on `pending` held calls.
pub(crate) fn suspended_state(state: &Value, pending: &[PendingCall]) -> Value {
    let mut next = state.clone();
    next["status"] = json!("suspended");
    next["pending"] = json!(pending);
    next
}

/// `STATE_DELTA` from `old` to `new`, or `None` when nothing changed.
pub(crate) fn delta(old: &Value, new: &Value) -> Option<Value> {
    let mut patch = Vec::new();
    diff(old, new, &mut String::new(), &mut patch);
    (!patch.is_empty()).then(|| json!({ "type": "STATE_DELTA", "delta": patch }))
}

/// The state, whoever panicked while holding it (a state is always whole: it is replaced, not
/// edited in place).
pub(crate) fn lock(state: &Mutex<RunState>) -> MutexGuard<'_, RunState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies an RFC 6902 patch of `add`, `remove` and `replace` operations (what [`diff`]
    /// writes) to `doc`.
    fn apply(doc: &mut Value, patch: &[Value]) {
        for op in patch {
            let path = op["path"].as_str().expect("a path");
            let (parent, key) = path.rsplit_once('/').expect("not the root");
            let key = key.replace("~1", "/").replace("~0", "~");
            let target = doc.pointer_mut(parent).expect("the parent exists");
            let object = target.as_object_mut().expect("an object");
            match op["op"].as_str() {
                Some("remove") => {
                    object.remove(&key).expect("removed what was there");
                }
                Some("add" | "replace") => {
                    object.insert(key, op["value"].clone());
                }
                other => panic!("unexpected op {other:?}"),
            }
        }
    }

    #[test]
    fn a_diff_applied_to_the_old_state_gives_the_new_one() {
        let old = json!({ "a": 1, "gone": true, "n": { "x": [1, 2], "y": "same", "a/b~": 0 } });
        let new = json!({ "a": 2, "n": { "x": [1, 2, 3], "y": "same", "a/b~": 1 }, "new": null });
        let mut patch = Vec::new();
        diff(&old, &new, &mut String::new(), &mut patch);
        let paths: Vec<&str> = patch.iter().filter_map(|p| p["path"].as_str()).collect();
        assert_eq!(paths, ["/a", "/gone", "/n/a~1b~0", "/n/x", "/new"]);
        let mut doc = old.clone();
        apply(&mut doc, &patch);
        assert_eq!(doc, new);
        let mut none = Vec::new();
        diff(&new, &new, &mut String::new(), &mut none);
        assert!(none.is_empty());
    }
}
