//! Fingerprints of tool turns for tight-loop detection: name + canonical arguments, and results.
//! Canonical means object key order does not matter; nothing is allocated.

use crate::event::{ToolCall, ToolOutcome, ToolResult};
use serde_json::Value;
use std::hash::{DefaultHasher, Hash, Hasher};

fn mix(h: &mut DefaultHasher, v: &Value) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => {
            2u8.hash(h);
            if let Some(i) = n.as_i64() {
                i.hash(h);
            } else if let Some(u) = n.as_u64() {
                u.hash(h);
            } else if let Some(f) = n.as_f64() {
                f.to_bits().hash(h);
            }
        }
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(items) => {
            (4u8, items.len()).hash(h);
            for item in items {
                mix(h, item);
            }
        }
        Value::Object(map) => {
            // Order-independent: sum of per-entry hashes, so key order never matters.
            let mut sum = 0u64;
            for (k, item) in map {
                let mut e = DefaultHasher::new();
                k.hash(&mut e);
                mix(&mut e, item);
                sum = sum.wrapping_add(e.finish());
            }
            (5u8, map.len(), sum).hash(h);
        }
    }
}

/// The fingerprint of a JSON value, independent of object key order.
pub fn value_fingerprint(v: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    mix(&mut h, v);
    h.finish()
}

/// The fingerprint of one string (call ids).
pub(crate) fn str_fingerprint(s: &str) -> u64 {
    let mut h = DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// The fingerprint of a turn's tool calls, in order (ids excluded: they change every turn).
pub fn calls_fingerprint(calls: &[ToolCall]) -> u64 {
    let mut h = DefaultHasher::new();
    calls.len().hash(&mut h);
    for call in calls {
        call.name.hash(&mut h);
        value_fingerprint(&call.arguments).hash(&mut h);
    }
    h.finish()
}

/// The fingerprint of one result (name and outcome; the call id is excluded).
pub(crate) fn result_fingerprint(r: &ToolResult) -> u64 {
    let mut h = DefaultHasher::new();
    r.name.hash(&mut h);
    match &r.outcome {
        ToolOutcome::Ok(v) => (0u8, value_fingerprint(v)).hash(&mut h),
        ToolOutcome::Error { kind, message } => (1u8, kind, message).hash(&mut h),
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_matter_but_values_do() {
        let a: Value =
            serde_json::from_str(r#"{"a":1,"b":[1,2,{"x":"y","z":null}]}"#).unwrap_or_default();
        let b: Value =
            serde_json::from_str(r#"{"b":[1,2,{"z":null,"x":"y"}],"a":1}"#).unwrap_or_default();
        assert_eq!(value_fingerprint(&a), value_fingerprint(&b));
        assert_ne!(
            value_fingerprint(&a),
            value_fingerprint(&json!({"a":1,"b":[2,1,{"x":"y","z":null}]}))
        );
        assert_ne!(
            value_fingerprint(&json!({"a":1})),
            value_fingerprint(&json!({"a":"1"}))
        );
    }
}
