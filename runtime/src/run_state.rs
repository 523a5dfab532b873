//! The run's state as a user interface follows it (AG-UI's `STATE_SNAPSHOT`, then a
//! `STATE_DELTA` whenever it changed): one rendering and one diff, for `terminus serve` and the
//! Python `agui` module alike. Each adds its own ids (an execution and its agent; a thread and
//! its run) to the kernel's part made here.

use serde_json::{Map, Value, json};
use terminus_kernel::{Machine, Policy, Stats};

/// What the state shows of the machine besides its counters and phase: the todos, the tools the
/// kernel excluded, where each per-tool budget stands ([`crate::tool_budget_state`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StateParts {
    /// The todo list the kernel tracks.
    pub todos: Value,
    /// The tools it excluded, by name.
    pub excluded: Vec<String>,
    /// Where each per-tool budget stands.
    pub tool_budgets: Value,
}

impl StateParts {
    /// The parts of `machine` as it stands.
    pub fn of(machine: &Machine) -> StateParts {
        StateParts {
            todos: serde_json::to_value(machine.todos()).unwrap_or(Value::Array(Vec::new())),
            excluded: machine
                .ledger()
                .excluded()
                .map(|(name, _)| name.to_owned())
                .collect(),
            tool_budgets: crate::tool_budget_state(machine.policy(), machine.ledger()),
        }
    }
}

/// The kernel's part of the run's state: `status`, `phase`, `step`, `counters` (`stats`),
/// `budgets` ([`crate::budgets_state`]: the deadline only with `elapsed_ms`), `todos`,
/// `excluded_tools`, `tool_budgets`, and `elapsed_ms` when it is known.
pub fn run_state(
    policy: &Policy,
    status: &str,
    phase: &str,
    stats: &Stats,
    elapsed_ms: Option<u64>,
    parts: &StateParts,
) -> Map<String, Value> {
    let mut state = Map::new();
    state.insert("status".into(), json!(status));
    state.insert("phase".into(), json!(phase));
    state.insert("step".into(), json!(stats.steps));
    if let Some(elapsed_ms) = elapsed_ms {
        state.insert("elapsed_ms".into(), json!(elapsed_ms));
    }
    state.insert("counters".into(), json!(stats));
    let budgets = crate::budgets_state(policy, stats, elapsed_ms);
    state.insert("budgets".into(), Value::Object(budgets));
    state.insert("todos".into(), parts.todos.clone());
    state.insert("excluded_tools".into(), json!(parts.excluded));
    state.insert("tool_budgets".into(), parts.tool_budgets.clone());
    state
}

/// The state of `machine` as it stands (`status` `running`).
pub fn machine_state(machine: &Machine, elapsed_ms: Option<u64>) -> Map<String, Value> {
    run_state(
        machine.policy(),
        "running",
        machine.phase().as_str(),
        &machine.stats(),
        elapsed_ms,
        &StateParts::of(machine),
    )
}

/// `state` once the run ended: its `status` the outcome, and its `reason`, `rule` and
/// `result` the report's.
pub fn ended_state(
    state: &Value,
    outcome: &str,
    reason: &str,
    rule: &str,
    result: Option<&str>,
) -> Value {
    let mut next = state.clone();
    next["status"] = json!(outcome);
    next["reason"] = json!(reason);
    next["rule"] = json!(rule);
    next["result"] = json!(result);
    next
}

/// The RFC 6902 operations that turn `old` into `new`: objects key by key, anything else
/// (arrays included) replaced whole; none when they are equal.
pub fn json_patch(old: &Value, new: &Value) -> Vec<Value> {
    let mut patch = Vec::new();
    diff(old, new, &mut String::new(), &mut patch);
    patch
}

fn diff(old: &Value, new: &Value, path: &mut String, patch: &mut Vec<Value>) {
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
        (a, b) if same(a, b) => {}
        (_, b) => patch.push(json!({ "op": "replace", "path": path, "value": b })),
    }
}

/// JSON equality: `true` and `1` differ, `1` and `1.0` are the same number.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Appends `/key` to a JSON pointer (RFC 6901: `~` as `~0`, `/` as `~1`).
fn push_pointer(path: &mut String, key: &str) {
    path.push('/');
    path.push_str(&key.replace('~', "~0").replace('/', "~1"));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies an RFC 6902 patch of `add`, `remove` and `replace` operations (what
    /// [`json_patch`] writes) to `doc`.
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
    fn a_patch_applied_to_the_old_state_gives_the_new_one() {
        let old = json!({ "a": 1, "gone": true, "n": { "x": [1, 2], "y": "same", "a/b~": 0 } });
        let new = json!({ "a": 2, "n": { "x": [1, 2, 3], "y": "same", "a/b~": 1 }, "new": null });
        let patch = json_patch(&old, &new);
        let paths: Vec<&str> = patch.iter().filter_map(|p| p["path"].as_str()).collect();
        assert_eq!(paths, ["/a", "/gone", "/n/a~1b~0", "/n/x", "/new"]);
        let mut doc = old.clone();
        apply(&mut doc, &patch);
        assert_eq!(doc, new);
        assert!(json_patch(&new, &new).is_empty());
    }

    #[test]
    fn json_equality_tells_true_from_1_but_not_1_from_1_0() {
        assert_eq!(json_patch(&json!({"a": 1}), &json!({"a": true})).len(), 1);
        assert!(json_patch(&json!({"a": [1]}), &json!({"a": [1.0]})).is_empty());
        assert_eq!(
            json_patch(&json!(1), &json!(2)),
            [json!({"op": "replace", "path": "", "value": 2})]
        );
    }

    #[test]
    fn a_machines_state_has_the_kernels_part_and_the_deadline_only_when_the_start_is_known() {
        let policy = Policy {
            deadline_ms: Some(60_000),
            ..Policy::default()
        };
        let machine = Machine::new(policy).expect("a valid policy");
        let unknown = machine_state(&machine, None);
        assert_eq!(unknown["status"], "running");
        assert_eq!(unknown["step"], 0);
        assert!(unknown.get("elapsed_ms").is_none());
        assert!(unknown["budgets"].get("deadline").is_none());
        let known = machine_state(&machine, Some(1_500));
        assert_eq!(known["elapsed_ms"], 1_500);
        assert_eq!(known["budgets"]["deadline"]["spent"], 1_500);
        let ended = ended_state(
            &Value::Object(known),
            "aborted",
            "deadline",
            "deadline",
            None,
        );
        assert_eq!(
            (&ended["status"], &ended["reason"], &ended["result"]),
            (&json!("aborted"), &json!("deadline"), &Value::Null)
        );
    }
}
