//! The fuzz targets' inputs as ordinary tests. Every file in `fuzz/seeds/<target>/` (the committed
//! seed corpus), `fuzz/regressions/<target>/` (minimized crashes, kept fixed) and, when present,
//! the local `fuzz/corpus/<target>/` goes through the same invariant-checking body the cargo-fuzz
//! targets run: `fuzz/src/body.rs`, included here. So a crash the fuzzer found stays fixed in
//! `cargo test` without a fuzzing toolchain. Also the regression tests of the bugs the fuzz
//! targets found in `Machine::restore` and in tool batches.

#[allow(dead_code)]
#[path = "../../fuzz/src/body.rs"]
mod body;

use serde_json::json;
use std::path::{Path, PathBuf};
use terminus_kernel::{
    Command, Event, Handled, Machine, ModelTurn, Phase, Policy, RestoreError, ToolCall,
    ToolOutcome, ToolResult,
};

/// The files of `fuzz/<dir>/<target>/`, sorted; none if the directory does not exist.
fn files(dir: &str, target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz")
        .join(dir)
        .join(target);
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

fn read(file: &Path) -> Vec<u8> {
    std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// Runs every file through `run`; each must pass every check of the body.
fn replay(files: &[PathBuf], run: fn(&[u8])) {
    for file in files {
        let data = read(file);
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "{} broke an invariant", file.display());
    }
}

#[test]
fn transitions_seeds_keep_every_invariant() {
    let seeds = files("seeds", "transitions");
    assert!(
        seeds.len() >= 30,
        "fuzz/seeds/transitions: {} files, expected at least 30",
        seeds.len()
    );
    replay(&seeds, body::transitions);
}

#[test]
fn restore_seeds_keep_every_invariant() {
    let seeds = files("seeds", "restore");
    assert!(
        seeds.len() >= 30,
        "fuzz/seeds/restore: {} files, expected at least 30",
        seeds.len()
    );
    replay(&seeds, body::restore);
}

#[test]
fn textcall_seeds_keep_every_invariant() {
    let seeds = files("seeds", "textcall");
    assert!(
        seeds.len() >= 10,
        "fuzz/seeds/textcall: {} files, expected at least 10",
        seeds.len()
    );
    replay(&seeds, body::textcall);
}

#[test]
fn restore_seeds_include_real_saved_machines() {
    // The seeds named `saved-*` are `Machine::save()` output of machines stopped mid-run (then
    // a NUL and event bytes): they must still restore, or the save format broke old saves.
    let mut restored = Vec::new();
    for file in files("seeds", "restore") {
        let saved_machine = file
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("saved-"));
        if !saved_machine {
            continue;
        }
        let data = read(&file);
        let saved = data.split(|&b| b == 0).next().unwrap_or_default();
        match Machine::restore(saved) {
            Ok(m) => restored.push(m.phase()),
            Err(e) => panic!(
                "{}: a saved machine no longer restores: {e}",
                file.display()
            ),
        }
    }
    assert!(
        restored.len() >= 8,
        "only {} saved machines in the restore seeds",
        restored.len()
    );
    for phase in [
        Phase::Exploring,
        Phase::Acting,
        Phase::Verifying,
        Phase::Nudged,
    ] {
        assert!(
            restored.contains(&phase),
            "no saved machine in {phase:?} among the restore seeds"
        );
    }
}

#[test]
fn regressions_stay_fixed() {
    let transitions = files("regressions", "transitions");
    let restore = files("regressions", "restore");
    assert!(
        transitions.len() + restore.len() >= 1,
        "fuzz/regressions/ is empty"
    );
    replay(&transitions, body::transitions);
    replay(&restore, body::restore);
    replay(&files("regressions", "textcall"), body::textcall);
}

#[test]
fn the_local_corpus_keeps_every_invariant() {
    // `fuzz/corpus/` is what a local campaign grew (not committed); replayed when present.
    let transitions = files("corpus", "transitions");
    let restore = files("corpus", "restore");
    replay(&transitions, body::transitions);
    replay(&restore, body::restore);
    replay(&files("corpus", "textcall"), body::textcall);
}

#[test]
fn the_body_catches_a_broken_invariant() {
    // The checks must be able to fail: a step reported as ignored, or a machine that skips a step.
    let mut before = Machine::new(Policy::default()).unwrap_or_else(|e| panic!("{e}"));
    while before.poll_command().is_some() {}
    let mut after = before.clone();
    let handled = after.handle(Event::Cancel);
    let emitted: Vec<Command> = std::iter::from_fn(|| after.poll_command()).collect();
    assert!(matches!(handled, Handled::Step(_)));
    let honest =
        std::panic::catch_unwind(|| body::check_transition(&before, &after, &handled, &emitted));
    assert!(honest.is_ok(), "the body rejects a correct cancel step");
    let lie = Handled::Observed;
    let caught = std::panic::catch_unwind(|| body::check_transition(&before, &after, &lie, &[]));
    assert!(caught.is_err(), "a step reported as an observation passed");
    let silent =
        std::panic::catch_unwind(|| body::check_transition(&before, &after, &handled, &[]));
    assert!(silent.is_err(), "a terminal step without its Stop passed");
}

/// The save of a fresh machine under `policy`, as text to tamper with.
fn fresh_save(policy: Policy) -> String {
    let m = Machine::new(policy).unwrap_or_else(|e| panic!("{e}"));
    String::from_utf8(m.save()).unwrap_or_else(|e| panic!("{e}"))
}

fn tampered(saved: &str, from: &str, to: &str) -> String {
    assert!(saved.contains(from), "the save format changed: no {from}");
    saved.replacen(from, to, 1)
}

fn assert_refused(bytes: &str, what: &str) {
    match Machine::restore(bytes.as_bytes()) {
        Err(RestoreError::Inconsistent(_)) => {}
        other => panic!("{what}: expected Inconsistent, got {other:?}"),
    }
}

#[test]
fn restore_refuses_live_machines_at_a_limit() {
    // Found by the `restore` target (fuzz/regressions/restore/live-streak-at-its-limit):
    // `check_machine` allows a streak *at* its limit, but a live machine never has one, and
    // one more no-op turn then took `streaks.no_ops` past its bound.
    let policy = Policy {
        max_steps: 5,
        max_model_calls: 10,
        ..Policy::default()
    };
    let saved = fresh_save(policy.clone());
    assert!(Machine::restore(saved.as_bytes()).is_ok());
    let streaks = "\"streaks\":{\"no_ops\":0";
    assert_refused(
        &tampered(&saved, streaks, "\"streaks\":{\"no_ops\":3"),
        "no_ops at max_no_ops",
    );
    // A live machine with its step budget spent: the next step went past the step bound.
    assert_refused(
        &tampered(&saved, "\"steps\":0", "\"steps\":5"),
        "steps at max_steps",
    );
    // More steps than two per model call.
    assert_refused(
        &tampered(&saved, "\"steps\":0", "\"steps\":2"),
        "two steps for one model call",
    );
    // A final-answer call without `final_answer_on_budget`.
    assert_refused(
        &tampered(
            &saved,
            "\"finalizing\":null",
            "\"finalizing\":\"max_steps\"",
        ),
        "an unexpected final-answer call",
    );
    // A counter with no room left to count.
    assert_refused(
        &tampered(&saved, "\"tool_calls\":0", "\"tool_calls\":4294967295"),
        "tool_calls near overflow",
    );
    // A queued Stop in a live machine.
    let mut m = Machine::new(policy).unwrap_or_else(|e| panic!("{e}"));
    while m.poll_command().is_some() {}
    m.handle(Event::Cancel);
    let stopped = String::from_utf8(m.save()).unwrap_or_else(|e| panic!("{e}"));
    assert!(Machine::restore(stopped.as_bytes()).is_ok());
    assert_refused(
        &tampered(
            &stopped,
            "{\"Aborted\":{\"reason\":\"cancelled\"}}",
            "{\"Exploring\":{}}",
        ),
        "a live machine with a queued Stop",
    );
}

#[test]
fn restore_refuses_an_ended_machine_past_its_step_bound() {
    // Found by the CI campaign (`regressions/restore/ended-steps-past-the-step-bound`): a save
    // of a run aborted at its model-call budget, its `max_model_calls` damaged to 1 (as the
    // fuzz target restored it). Each counter stayed within its own bound, but 4 steps are more
    // than the limits allow together (`Policy::step_bound`: 2 x 1 model calls + the final
    // answer = 3).
    let saved = r#"{"sm":{"shared_storage":{"policy":{"max_steps":17,"max_model_calls":1,"max_no_ops":2,"max_nudges":4,"max_verification_failures":2,"on_verification_limit":"complete","verify_completion":true,"completion_requires":[],"max_tool_failures":2,"max_consecutive_tool_failures":2,"on_unrecoverable_tool_error":"exclude","max_repeats":4,"max_loop_period":3,"max_empty_responses":2,"max_model_retries":0,"retry_base_ms":105,"retry_max_ms":1080,"deadline_ms":null,"token_budget":1140,"tool_budgets":{},"seed":7774064181650846793,"final_answer_on_budget":true},"stats":{"steps":4,"model_calls":2,"tool_calls":4,"refused_calls":0,"tool_failures":1,"failed_tool_turns":1,"nudges":0,"continuations":0,"verifications":0,"verification_failures":0,"no_ops":0,"empty_responses":0,"model_errors":1,"repeats":0,"input_tokens":0,"output_tokens":0,"ignored_events":0},"streaks":{"no_ops":0,"empty_responses":0,"model_retries":0,"failed_tool_turns":1,"repeats":1}},"state":{"Aborted":{"reason":"max_model_calls"}}},"desk":{"ledger":{"write":{"calls":1,"successes":0,"failures":1,"refused":0,"excluded":{"why":"unrecoverable","kind":"not_found"}}},"todos":[],"staged_todos":[],"result":"Done.","missing_items":[],"pending":{"executed":1,"ids":7379108960372921241,"calls":15442943559065827310},"loops":{"ring":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"head":0,"filled":0,"runs":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]},"now_ms":0,"ignored":23,"last_no_op":"silent","out":[]}}"#;
    match Machine::restore(saved.as_bytes()) {
        Err(RestoreError::Inconsistent(why)) => assert!(why.contains("step bound 3"), "{why}"),
        other => panic!("4 steps past a step bound of 3: expected Inconsistent, got {other:?}"),
    }
    // The same save under the budget it was taken with restores.
    let undamaged = tampered(saved, "\"max_model_calls\":1", "\"max_model_calls\":2");
    assert!(Machine::restore(undamaged.as_bytes()).is_ok());
}

#[test]
fn restore_accepts_every_machine_a_run_reaches() {
    // The other side of the check above: each machine of a run, saved, restores equal.
    let policy = Policy {
        max_steps: 12,
        max_model_calls: 5,
        verify_completion: true,
        final_answer_on_budget: true,
        ..Policy::default()
    };
    let mut m = Machine::new(policy).unwrap_or_else(|e| panic!("{e}"));
    let mut phases = Vec::new();
    for turn in 0..20u32 {
        let restored = Machine::restore(&m.save()).unwrap_or_else(|e| panic!("{e}"));
        assert!(restored == m, "step {turn}: restore changed the machine");
        phases.push(m.phase());
        let Some(command) = std::iter::from_fn(|| m.poll_command()).last() else {
            break;
        };
        let event = match command {
            Command::CallModel(_) if turn % 3 == 0 => Event::ModelTurn(ModelTurn {
                text: "Done.".into(),
                ..ModelTurn::default()
            }),
            Command::CallModel(_) => Event::ModelTurn(ModelTurn {
                tool_calls: vec![ToolCall {
                    id: format!("c{turn}").into(),
                    name: "read".into(),
                    arguments: json!({ "n": turn }).into(),
                }],
                ..ModelTurn::default()
            }),
            Command::RunTools(batch) => Event::ToolResults(
                batch
                    .calls
                    .iter()
                    .map(|c| ToolResult {
                        call_id: c.id.clone(),
                        name: c.name.clone(),
                        outcome: ToolOutcome::ok(json!("ok")),
                    })
                    .collect(),
            ),
            Command::Verify(_) => Event::Verdict(terminus_kernel::Verdict::default()),
            Command::Stop(_) => break,
            _ => continue, // guidance
        };
        m.handle(event);
    }
    assert!(m.phase().is_terminal(), "the run did not end: {m:?}");
    for phase in [
        Phase::Exploring,
        Phase::Acting,
        Phase::Verifying,
        Phase::Nudged,
    ] {
        assert!(phases.contains(&phase), "the run never saved in {phase:?}");
    }
}

#[test]
fn a_turn_with_more_than_65535_tool_calls_is_answered() {
    // Found while fuzzing: the count of calls in flight was a `u16`, so a turn with 65,537
    // calls overflowed it (a panic in debug builds; in release the exact answer was ignored and
    // the run was stuck in Acting).
    let mut m = Machine::new(Policy::default()).unwrap_or_else(|e| panic!("{e}"));
    let calls: Vec<ToolCall> = (0..65_537u32)
        .map(|i| ToolCall {
            id: format!("c{i}").into(),
            name: "read".into(),
            arguments: json!({}).into(),
        })
        .collect();
    let results: Vec<ToolResult> = calls
        .iter()
        .map(|c| ToolResult {
            call_id: c.id.clone(),
            name: c.name.clone(),
            outcome: ToolOutcome::ok(json!(1)),
        })
        .collect();
    let turn = m.handle(Event::ModelTurn(ModelTurn {
        tool_calls: calls,
        ..ModelTurn::default()
    }));
    assert!(matches!(turn, Handled::Step(_)), "{turn:?}");
    assert_eq!(m.phase(), Phase::Acting);
    let answer = m.handle(Event::ToolResults(results));
    assert!(matches!(answer, Handled::Step(_)), "{answer:?}");
    assert_eq!(m.phase(), Phase::Exploring);
    assert_eq!(m.ledger().calls("read"), 65_537);
    assert_eq!(
        m.ledger().get("read").map(|r| r.successes),
        Some(65_537),
        "every result is in the ledger"
    );
}
