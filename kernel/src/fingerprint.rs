//! Fingerprints of tool turns for tight-loop detection: name + canonical arguments, and results.
//! Canonical means object key order does not matter; nothing is allocated.
//!
//! A JSON payload is hashed once, when it is made (see [`crate::Json`]); the per-event
//! fingerprints here only combine those with the tool names, so their cost does not grow with
//! the payload.
//!
//! Fingerprints are saved with the machine ([`crate::Machine::save`]) and compared after a
//! restore, possibly by another build of the program, so they come from [`StableHasher`], whose
//! output is fixed by this file, and never from `std`'s `DefaultHasher`, whose algorithm may
//! change between Rust releases (and which is several times slower on the short strings hashed
//! here).

use crate::event::{ToolCall, ToolOutcome, ToolResult};
use serde_json::Value;
use std::hash::{Hash, Hasher};

/// A small, fast, platform- and release-independent 64-bit hasher: eight bytes at a time,
/// multiply-rotate mixing, and a murmur3 finalizer. Not collision-resistant against an adversary;
/// a collision can only make two different tool turns look alike to the repeat detector.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StableHasher(u64);

impl StableHasher {
    const SEED: u64 = 0x243F_6A88_85A3_08D3;
    const K: u64 = 0x9E37_79B9_7F4A_7C15;

    pub(crate) const fn new() -> StableHasher {
        StableHasher(Self::SEED)
    }

    /// A hasher in the state `state` (one a hasher was in: see [`StableHasher::state`]).
    #[inline]
    pub(crate) const fn from_state(state: u64) -> StableHasher {
        StableHasher(state)
    }

    /// The state, to go on from later with [`StableHasher::from_state`].
    #[inline]
    pub(crate) const fn state(&self) -> u64 {
        self.0
    }

    #[inline]
    fn mix(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(Self::K).rotate_left(27);
    }
}

impl Hasher for StableHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // A plain loop: the strings hashed per event (tool names, call ids) are a word or two,
        // for which an unrolled loop's setup costs more than it saves.
        let mut rest = bytes;
        while let Some((word, tail)) = rest.split_first_chunk::<8>() {
            self.mix(u64::from_le_bytes(*word));
            rest = tail;
        }
        // The tail's length goes into the word so that trailing zero bytes still count.
        self.mix(tail_word(rest) ^ ((rest.len() as u64) << 56));
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.mix(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        // The same on 32- and 64-bit targets.
        self.mix(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        h ^= h >> 33;
        h = h.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
        h ^ (h >> 33)
    }
}

/// The bytes of `rest` (at most 7) as a little-endian word, zero-padded: the same word as
/// copying them into `[0u8; 8]`, read as two overlapping loads instead of a copy of variable
/// length (which compiles to a call to `memcpy`, a good part of hashing a short name).
#[inline]
pub(crate) fn tail_word(rest: &[u8]) -> u64 {
    let n = rest.len();
    let le = |bytes: &[u8]| {
        bytes
            .iter()
            .rev()
            .fold(0u64, |w, &b| (w << 8) | u64::from(b))
    };
    match n {
        0 => 0,
        1 => u64::from(rest[0]),
        2..=3 => le(&rest[..2]) | (le(&rest[n - 2..]) << (8 * (n - 2))),
        _ => le(&rest[..4]) | (le(&rest[n - 4..]) << (8 * (n - 4))),
    }
}

fn mix(h: &mut StableHasher, v: &Value) {
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
                let mut e = StableHasher::new();
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
    let mut h = StableHasher::new();
    mix(&mut h, v);
    h.finish()
}

/// The fingerprint of one string (call ids; a [`crate::Name`] carries its own).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn str_fingerprint(s: &str) -> u64 {
    let mut h = StableHasher::new();
    s.hash(&mut h);
    h.finish()
}

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
