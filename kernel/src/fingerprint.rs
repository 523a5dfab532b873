//! Fingerprints of tool turns for tight-loop detection: name + canonical arguments, and results.
//! Canonical means object key order does not matter; nothing is allocated.
//!
//! A JSON payload is hashed once, when it is made (see [`crate::Json`]); the per-event
//! fingerprints here only combine those with the tool names, so their cost does not grow with
//! the payload.
//!
//! Fingerprints are saved with the machine ([`crate::Machine::save`]) and compared after a
//! restore, possibly by another build of the program, so they come from
//! [`crate::hash::StableHasher`], whose
//! output is fixed by this file, and never from `std`'s `DefaultHasher`, whose algorithm may
//! change between Rust releases (and which is several times slower on the short strings hashed
//! here).

use crate::event::{ToolCall, ToolOutcome, ToolResult};
use crate::hash::StableHasher;
use std::hash::{Hash, Hasher};

/// The fingerprint of a turn's tool calls, in order (ids excluded: they change every turn). The
/// arguments' fingerprints are the ones they carry.
pub fn calls_fingerprint(calls: &[ToolCall]) -> u64 {
    // A turn of one call (most turns) goes on from the state its tool's name carries: the
    // state after hashing the length, 1, and the name.
    if let [call] = calls {
        let mut h = call.name.lone_call_hasher();
        call.arguments.fingerprint().hash(&mut h);
        return h.finish();
    }
    let mut h = StableHasher::new();
    calls.len().hash(&mut h);
    for call in calls {
        call.name.as_str().hash(&mut h);
        call.arguments.fingerprint().hash(&mut h);
    }
    h.finish()
}

/// The fingerprint of one result (name and outcome; the call id is excluded). An output's
/// fingerprint is the one it carries.
pub(crate) fn result_fingerprint(r: &ToolResult) -> u64 {
    // The hasher that has hashed the name, as `r.name.hash(&mut StableHasher::new())` leaves it.
    let mut h = r.name.hasher();
    match &r.outcome {
        ToolOutcome::Ok(v) => (0u8, v.fingerprint()).hash(&mut h),
        ToolOutcome::Error { kind, message } => (1u8, kind, message).hash(&mut h),
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::{str_fingerprint, tail_word, value_fingerprint};
    use serde_json::Value;
    use serde_json::json;

    const PINNED_CALLS: u64 = 3_136_510_262_279_937_882;
    const PINNED_EMPTY: u64 = 3_326_370_735_522_965_289;

    #[test]
    fn fingerprints_are_pinned_so_saved_machines_stay_valid_across_builds() {
        // If this changes, machines saved by an older build would no longer detect a repeat
        // that spans the restore: change the hasher only with a migration.
        assert_eq!(
            calls_fingerprint(&[ToolCall::new(
                "c1",
                "read_file",
                json!({"path": "a.rs", "lines": [1, 2]})
            )]),
            PINNED_CALLS
        );
        assert_eq!(str_fingerprint(""), PINNED_EMPTY);
        // Lengths and trailing zero bytes are distinguished.
        assert_ne!(str_fingerprint("a"), str_fingerprint("a\0"));
        assert_ne!(str_fingerprint("abcdefgh"), str_fingerprint("abcdefgh\0"));
    }

    #[test]
    fn a_lone_calls_cached_state_gives_the_streamed_fingerprint() {
        // The fingerprint as it was always computed: every name streamed.
        fn streamed(calls: &[ToolCall]) -> u64 {
            let mut h = StableHasher::new();
            calls.len().hash(&mut h);
            for call in calls {
                call.name.as_str().hash(&mut h);
                call.arguments.fingerprint().hash(&mut h);
            }
            h.finish()
        }
        let call = |name: &str, n: u32| ToolCall::new("id", name, json!({ "n": n }));
        for calls in [
            vec![],
            vec![call("", 1)],
            vec![call("read_file", 1)],
            vec![call("a_rather_long_tool_name_indeed", 2)],
            vec![call("read_file", 1), call("grep", 2)],
        ] {
            assert_eq!(calls_fingerprint(&calls), streamed(&calls), "{calls:?}");
        }
    }

    #[test]
    fn the_tail_word_is_the_zero_padded_little_endian_bytes() {
        let bytes = [0x01u8, 0x82, 0x03, 0xF4, 0x05, 0x06, 0xA7];
        for n in 0..8 {
            let mut word = [0u8; 8];
            word[..n].copy_from_slice(&bytes[..n]);
            assert_eq!(
                tail_word(&bytes[..n]),
                u64::from_le_bytes(word),
                "{n} bytes"
            );
        }
    }

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
