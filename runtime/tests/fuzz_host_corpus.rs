//! The `host_session` fuzz target's inputs as ordinary tests: every file in
//! `fuzz/seeds/host_session/` (the committed seeds), `fuzz/regressions/host_session/` (minimized
//! crashes, kept fixed) and, when present, the local `fuzz/corpus/host_session/` goes through the
//! same invariant-checking body the cargo-fuzz target runs (`fuzz/src/host.rs`, included here),
//! so a crash the fuzzer found stays fixed in `cargo test` without a fuzzing toolchain.

#[path = "../../fuzz/src/host.rs"]
mod host;

use std::path::{Path, PathBuf};

/// The files of `fuzz/<dir>/host_session/`, sorted; none if the directory does not exist.
fn files(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz")
        .join(dir)
        .join("host_session");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_seed_and_regression_passes_the_host_sessions_checks() {
    // What is not a conversation (a JSON array) is skipped, not an error.
    host::host_session(b"not json");
    host::host_session(b"{\"role\": \"user\"}");
    let seeds = files("seeds");
    assert!(seeds.len() >= 6, "{} seeds", seeds.len());
    for file in seeds
        .iter()
        .chain(&files("regressions"))
        .chain(&files("corpus"))
    {
        let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        host::host_session(&data);
    }
}
