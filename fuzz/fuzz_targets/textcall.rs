//! cargo-fuzz target `textcall`: a model reply's text through `textcall::find` and `recover`, then a machine; see `fuzz/src/body.rs` and `fuzz/README.md`.
#![no_main]

#[allow(dead_code)]
#[path = "../src/body.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::textcall(data));
