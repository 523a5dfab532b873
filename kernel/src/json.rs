//! [`Json`]: a JSON payload (a tool call's arguments, a tool's output) with its fingerprint.
//!
//! The repeat detector compares tool turns by fingerprint. Hashing a JSON tree is the most
//! expensive thing about a tool event, so it is done once, where the payload enters the program
//! (the adapter that parsed a model's tool call, the tool that returned an output, the journal
//! or scenario it was read from), and the fingerprint travels with the value. The machine only
//! reads it. The value cannot be changed in place, so the two always agree.

use crate::hash::value_fingerprint;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::fmt;
use std::ops::Deref;

/// A JSON value and its fingerprint, computed once when the value is made ([`Json::new`],
/// `From<Value>`, deserialization) and never again.
///
/// It reads as a [`serde_json::Value`] (it dereferences to one) and serializes as exactly that
/// value, so the scenario and journal formats are those of plain JSON. To change it, take the
/// value out ([`Json::into_value`]) and make a new one.
#[derive(Clone)]
pub struct Json {
    value: Value,
    fingerprint: u64,
}

impl Json {
    /// Wraps `value`, hashing it once (independent of object key order, see
    /// [`crate::value_fingerprint`]).
    pub fn new(value: Value) -> Json {
        let fingerprint = value_fingerprint(&value);
        Json { value, fingerprint }
    }

    /// The value.
    pub const fn value(&self) -> &Value {
        &self.value
    }

    /// The fingerprint of the value: `value_fingerprint(self.value())`, computed when it was made.
    pub const fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// Takes the value out.
    pub fn into_value(self) -> Value {
        self.value
    }
}

impl Default for Json {
    /// JSON `null`.
    fn default() -> Json {
        Json::new(Value::Null)
    }
}

impl Deref for Json {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.value
    }
}

impl AsRef<Value> for Json {
    fn as_ref(&self) -> &Value {
        &self.value
    }
}

impl From<Value> for Json {
    fn from(value: Value) -> Json {
        Json::new(value)
    }
}

impl From<Json> for Value {
    fn from(json: Json) -> Value {
        json.value
    }
}

/// Equal when the values are equal (equal values have equal fingerprints, so unequal
/// fingerprints answer first).
impl PartialEq for Json {
    fn eq(&self, other: &Json) -> bool {
        self.fingerprint == other.fingerprint && self.value == other.value
    }
}

impl Eq for Json {}

/// Hashes the fingerprint: equal values have equal fingerprints.
impl std::hash::Hash for Json {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.fingerprint.hash(state);
    }
}

impl PartialEq<Value> for Json {
    fn eq(&self, other: &Value) -> bool {
        self.value == *other
    }
}

impl PartialEq<Json> for Value {
    fn eq(&self, other: &Json) -> bool {
        *self == other.value
    }
}

/// Shows the value only, as `Value` does.
impl fmt::Debug for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.value, f)
    }
}

/// The value, as JSON text.
impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.value, f)
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Json, D::Error> {
        Value::deserialize(deserializer).map(Json::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_fingerprint_is_the_values_and_survives_a_round_trip() {
        let made = Json::new(json!({"path": "a.rs", "lines": [1, 2]}));
        assert_eq!(
            made.fingerprint(),
            value_fingerprint(&json!({"lines": [1, 2], "path": "a.rs"}))
        );
        let text = serde_json::to_string(&made).unwrap_or_default();
        // Serialized as the plain value, nothing around it.
        let plain: Value = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(plain, *made.value());
        let read: Json = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(read, made);
        assert_eq!(read.fingerprint(), made.fingerprint());
        assert_eq!(format!("{made:?}"), format!("{:?}", made.value()));
    }

    #[test]
    fn equality_is_the_values() {
        let a = Json::new(json!({"a": 1}));
        assert_eq!(a, json!({"a": 1}));
        assert_ne!(a, Json::new(json!({"a": "1"})));
        assert_eq!(Json::default(), Value::Null);
    }
}
