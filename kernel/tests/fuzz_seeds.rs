//! The fuzz targets' seed corpus as ordinary tests: every file in `fuzz/seeds/transitions/` and
//! `fuzz/seeds/restore/` goes through the same invariant-checking body the cargo-fuzz targets
//! run (`fuzz/src/body.rs`, included here), so a crash the fuzzer found and was minimized into
//! the seeds stays fixed without a fuzzing toolchain.

#[allow(dead_code)]
#[path = "../../fuzz/src/body.rs"]
mod body;

use std::path::{Path, PathBuf};

fn seeds(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn replay(target: &str, run: fn(&[u8]), at_least: usize) {
    let files = seeds(target);
    assert!(
        files.len() >= at_least,
        "{target}: {} seed files, expected at least {at_least}",
        files.len()
    );
    for file in &files {
        let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "{} broke an invariant", file.display());
    }
}

#[test]
fn transitions_seeds_keep_every_invariant() {
    replay("transitions", body::transitions, 50);
}

#[test]
fn restore_seeds_keep_every_invariant() {
    replay("restore", body::restore, 20);
}

#[test]
fn the_body_catches_a_broken_invariant() {
    // The body must be able to fail: a machine restored from a tampered save that claims more
    // steps than its policy allows is refused by `restore` or caught by the checks.
    let mut b = body::Bytes::new(&[3, 2, 1, 1, 1, 1, 0]);
    let policy = body::policy(&mut b);
    let Ok(machine) = terminus_kernel::Machine::new(policy) else {
        return;
    };
    let saved = String::from_utf8(machine.save()).unwrap_or_default();
    let tampered = saved.replacen("\"steps\":0", "\"steps\":4000", 1);
    assert_ne!(saved, tampered, "the save format changed: update this test");
    let mut input = vec![0u8];
    input.extend_from_slice(tampered.as_bytes());
    let caught = std::panic::catch_unwind(|| body::restore(&input));
    let refused = terminus_kernel::Machine::restore(tampered.as_bytes()).is_err();
    assert!(
        refused || caught.is_err(),
        "a machine past its step bound was neither refused nor caught"
    );
}
