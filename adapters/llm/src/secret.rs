//! The API key: read from the environment variable the config names, and never printed.

use std::fmt;

/// An API key. It has no `Display` and no `Serialize`, and its `Debug` shows `***`, so no
/// progress line, report, journal, recording or trace can carry it by accident; the client reads
/// it only to set the request header (marked sensitive).
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// A key from its text.
    pub fn new(key: impl Into<String>) -> ApiKey {
        ApiKey(key.into())
    }

    /// The key in the environment variable `name`; `None` when it is unset or empty (then no key
    /// is sent, as a local server expects).
    pub fn from_env(name: &str) -> Option<ApiKey> {
        std::env::var(name)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(ApiKey)
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_key() {
        let key = ApiKey::new("sk-secret-sentinel");
        assert_eq!(format!("{key:?}"), "ApiKey(***)");
        assert_eq!(format!("{:?}", Some(&key)), "Some(ApiKey(***))");
    }
}
