//! [`Name`]: a tool name or a call id, with what the machine hashes of it computed once.
//!
//! The machine matches results to the calls in flight by the fingerprints of their ids, looks
//! tools up in the ledger by name, and starts each result's fingerprint with its tool's name.
//! Hashing those strings on every event was a good part of its cost, so, as for a JSON payload
//! ([`crate::Json`]), it is done once where the string enters the program (the adapter that
//! parsed a model's call, the journal or scenario it was read from) and travels with it. The
//! fingerprints are the same values as before: only where they are computed changed.

use crate::hash::{StableHasher, tail_word};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// A string (a tool name, a call id) and the state of the fingerprint hasher after hashing it,
/// computed once when it is made ([`Name::new`], `From<String>`, `From<&str>`, deserialization)
/// and never again.
///
/// It reads as a `str` (it dereferences to one), compares, orders, hashes, prints and
/// serializes as its string, so the scenario and journal formats are those of a plain string.
/// To change it, take the string out ([`Name::into_string`]) and make a new one.
#[derive(Clone)]
pub struct Name {
    text: String,
    /// [`StableHasher`]'s state after `text.hash(..)` from a fresh hasher.
    state: u64,
    /// Its state after `1usize.hash(..)` then `text.hash(..)` from a fresh one: where the
    /// fingerprint of a turn of one call to this tool goes on from ([`crate::calls_fingerprint`]).
    lone_call: u64,
}

/// A call id: a [`Name`].
pub type CallId = Name;

impl Name {
    /// Wraps `text`, hashing it once.
    pub fn new(text: String) -> Name {
        let mut h = StableHasher::new();
        text.as_str().hash(&mut h);
        let mut lone = StableHasher::new();
        1usize.hash(&mut lone);
        text.as_str().hash(&mut lone);
        Name {
            state: h.state(),
            lone_call: lone.state(),
            text,
        }
    }

    /// The string.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Takes the string out.
    pub fn into_string(self) -> String {
        self.text
    }

    /// A hasher that has hashed this string (as `str::hash` does) from a fresh one.
    #[inline]
    pub(crate) const fn hasher(&self) -> StableHasher {
        StableHasher::from_state(self.state)
    }

    /// A hasher that has hashed `1usize` then this string from a fresh one.
    #[inline]
    pub(crate) const fn lone_call_hasher(&self) -> StableHasher {
        StableHasher::from_state(self.lone_call)
    }

    /// The fingerprint of the string alone (`str_fingerprint` of it).
    #[inline]
    pub(crate) fn fingerprint(&self) -> u64 {
        self.hasher().finish()
    }

    /// Whether this is `other`: the cached states first, then the strings.
    #[inline]
    pub(crate) fn is(&self, other: &Name) -> bool {
        self.state == other.state && same_bytes(self.text.as_bytes(), other.text.as_bytes())
    }
}

/// Whether `a` and `b` are the same bytes, compared a word at a time in line: the names and
/// ids compared per event are a word or two, for which a call to `memcmp` costs more than the
/// comparison.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut a, mut b) = (a, b);
    while let (Some((x, rest_a)), Some((y, rest_b))) =
        (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    {
        if x != y {
            return false;
        }
        (a, b) = (rest_a, rest_b);
    }
    tail_word(a) == tail_word(b)
}

impl Default for Name {
    /// The empty string.
    fn default() -> Name {
        Name::new(String::new())
    }
}

impl Deref for Name {
    type Target = str;

    fn deref(&self) -> &str {
        &self.text
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.text
    }
}

impl From<String> for Name {
    fn from(text: String) -> Name {
        Name::new(text)
    }
}

impl From<&str> for Name {
    fn from(text: &str) -> Name {
        Name::new(text.to_owned())
    }
}

impl From<&String> for Name {
    fn from(text: &String) -> Name {
        Name::new(text.clone())
    }
}

impl From<&Name> for Name {
    fn from(name: &Name) -> Name {
        name.clone()
    }
}

impl From<Name> for String {
    fn from(name: Name) -> String {
        name.text
    }
}

impl From<&Name> for String {
    fn from(name: &Name) -> String {
        name.text.clone()
    }
}

/// Equal when the strings are equal (equal strings have equal states, so unequal states answer
/// first).
impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.is(other)
    }
}

impl Eq for Name {}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.text == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        self.text == *other
    }
}

impl PartialEq<Name> for str {
    fn eq(&self, other: &Name) -> bool {
        self == other.text
    }
}

impl PartialEq<Name> for &str {
    fn eq(&self, other: &Name) -> bool {
        *self == other.text
    }
}

impl PartialEq<Name> for String {
    fn eq(&self, other: &Name) -> bool {
        *self == other.text
    }
}

/// Ordered as the strings.
impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Name) -> Ordering {
        self.text.cmp(&other.text)
    }
}

/// Hashed as the string (so that it agrees with `Borrow<str>`).
impl Hash for Name {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

/// Shows the string only, as `String` does.
impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.text, f)
    }
}

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.text.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Name, D::Error> {
        String::deserialize(deserializer).map(Name::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::str_fingerprint;

    #[test]
    fn the_cached_state_is_the_strings_and_survives_a_round_trip() {
        for text in ["", "a", "read_file", "call-123456789", "write_todos"] {
            let made = Name::from(text);
            assert_eq!(made.fingerprint(), str_fingerprint(text));
            let mut h = StableHasher::new();
            text.hash(&mut h);
            assert_eq!(made.hasher().finish(), h.finish());
            let mut lone = StableHasher::new();
            1usize.hash(&mut lone);
            text.hash(&mut lone);
            assert_eq!(made.lone_call_hasher().finish(), lone.finish());
            let json = serde_json::to_string(&made).unwrap_or_default();
            assert_eq!(json, serde_json::to_string(text).unwrap_or_default());
            let read: Name = serde_json::from_str(&json).unwrap_or_default();
            assert_eq!(read, made);
            assert_eq!(read.fingerprint(), made.fingerprint());
            assert_eq!(format!("{made:?}"), format!("{text:?}"));
            assert_eq!(made, text);
            assert_eq!(made, text.to_owned());
        }
        assert_ne!(Name::from("a"), Name::from("b"));
        for (a, b) in [
            ("", ""),
            ("a", "a"),
            ("abcdefghi", "abcdefghi"),
            ("a", "b"),
            ("abcdefghi", "abcdefghj"),
            ("abcdefgh", "abcdefghi"),
            ("a\0", "a"),
        ] {
            assert_eq!(
                same_bytes(a.as_bytes(), b.as_bytes()),
                a == b,
                "{a:?} {b:?}"
            );
        }
        let (a, b) = (Name::from("a"), Name::from("b"));
        assert!(a < b);
    }
}
