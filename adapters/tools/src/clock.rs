//! The wall clock, in the whole seconds since the Unix epoch that OAuth counts in: when a
//! token was received (rmcp's stored credentials) and when a pending login was handed out
//! (the credentials file).

/// Seconds since the Unix epoch.
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
