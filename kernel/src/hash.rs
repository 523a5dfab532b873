//! The stable hasher behind every fingerprint, and the fingerprints of plain values (JSON
//! payloads, strings). A leaf module: [`crate::Json`] and [`crate::Name`] hash with it, and
//! `fingerprint.rs` combines their fingerprints into those of tool turns.
//!
//! Fingerprints are saved with the machine ([`crate::Machine::save`]) and compared after a
//! restore, possibly by another build of the program, so they come from [`StableHasher`], whose
//! output is fixed by this file, and never from `std`'s `DefaultHasher`, whose algorithm may
//! change between Rust releases (and which is several times slower on the short strings hashed
//! here).

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
