//! cargo-fuzz target `host_session`: a framework's conversation through the host core; see `fuzz/src/host.rs` and `fuzz/README.md`.
#![no_main]

#[path = "../src/host.rs"]
mod host;

libfuzzer_sys::fuzz_target!(|data: &[u8]| host::host_session(data));
