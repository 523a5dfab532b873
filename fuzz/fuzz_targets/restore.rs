//! cargo-fuzz target `restore`: a saved machine (raw, or a real save damaged) through `Machine::restore`, then events; see `fuzz/src/body.rs` and `fuzz/README.md`.
#![no_main]

#[allow(dead_code)]
#[path = "../src/body.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::restore(data));
