//! The `terminus` binary: exit codes, progress on stderr, the report as the last stdout line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn terminus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../spec/scenarios")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// Writes `json` to a fresh file named after the test.
fn scenario_file(test: &str, json: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("terminus-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{test}.json"));
    std::fs::write(&path, json).expect("written");
    path
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn last_json_line(out: &Output) -> serde_json::Value {
    let text = stdout(out);
    let last = text.lines().last().expect("stdout has a line");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {last}"))
}

#[test]
fn a_complete_run_exits_0_with_the_report_last_on_stdout() {
    let out = terminus(&[
        "run",
        &example("architect-stops-early.json"),
        "--json",
        "--execution",
        "e-1",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = last_json_line(&out);
    assert_eq!(report["execution"], "e-1");
    assert_eq!(report["outcome"], "complete");
    assert_eq!(report["reason"], "verified");
    assert_eq!(report["nudges"], 1);
    assert_eq!(report["steps"], 11);
    assert_eq!(report["entries"], 33);
    assert_eq!(report["result"], "Plan written.");
    let err = stderr(&out);
    let steps = err.lines().filter(|l| l.contains("] step ")).count();
    assert_eq!(steps, 11, "one progress line per transition:\n{err}");
    assert!(
        err.contains("--turn(claim)--> Nudged [claim_refused]"),
        "{err}"
    );
}

#[test]
fn an_aborted_run_exits_1() {
    let out = terminus(&["run", &example("empty-responses.json"), "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = last_json_line(&out);
    assert_eq!(report["outcome"], "aborted");
    assert_eq!(report["reason"], "empty_responses");
    assert_eq!(report["model_calls"], 3);
    assert!(report["result"].is_null());
}

#[test]
fn without_json_stdout_has_the_outcome_and_result() {
    let out = terminus(&["run", &example("plain-answer.json")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "complete (answered)\nParis.\n");
}

#[test]
fn an_invalid_scenario_exits_2_naming_file_and_path_and_runs_nothing() {
    let file = scenario_file(
        "bad-field",
        r#"{ "task": "t", "model": { "turns": [ { "text": "a" }, { "txt": "b" } ] } }"#,
    );
    let out = terminus(&["run", &file.to_string_lossy(), "--json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).is_empty(), "nothing ran: {}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains(&*file.to_string_lossy()), "{err}");
    assert!(
        err.contains("$.model.turns[1].txt: unknown field `txt`"),
        "{err}"
    );
    assert!(!err.contains("step"), "{err}");

    let file = scenario_file("bad-json", "{ \"task\": ");
    let out = terminus(&["run", &file.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("invalid JSON"), "{}", stderr(&out));

    let out = terminus(&["run", "/no/such/scenario.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot read the file"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_exhausted_script_exits_2_naming_the_script() {
    let file = scenario_file(
        "exhausted",
        r#"{ "task": "t", "model": { "turns": [ { "text": "working", "needs_more_work": true } ] } }"#,
    );
    let out = terminus(&["run", &file.to_string_lossy(), "--json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).is_empty());
    assert!(
        stderr(&out).contains("model script exhausted after 1 turn"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_sqlite_journal_keeps_the_run_for_resume_and_inspect() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("runs.db");
    let db = db.to_string_lossy();
    let out = terminus(&[
        "run",
        &example("architect-stops-early.json"),
        "--journal",
        &db,
        "--execution",
        "j-1",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = last_json_line(&out);
    assert_eq!(report["entries"], 33);
    // Resuming an ended execution runs nothing and prints its report with its code.
    let again = terminus(&["resume", "--journal", &db, "--execution", "j-1", "--json"]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert_eq!(last_json_line(&again), report);
    // The same id cannot be run twice.
    let twice = terminus(&[
        "run",
        &example("architect-stops-early.json"),
        "--journal",
        &db,
        "--execution",
        "j-1",
    ]);
    assert_eq!(twice.status.code(), Some(2), "{}", stderr(&twice));
    // inspect explains the path, the counters and the stop.
    let text = terminus(&["inspect", "--journal", &db, "--execution", "j-1"]);
    assert_eq!(text.status.code(), Some(0), "{}", stderr(&text));
    let text = stdout(&text);
    assert!(
        text.contains("step  11: Verifying --verdict--> Complete [verdict_accepted]"),
        "{text}"
    );
    assert!(text.contains("outcome   complete (verified)"), "{text}");
    let json = terminus(&["inspect", "--journal", &db, "--execution", "j-1", "--json"]);
    let json = last_json_line(&json);
    assert_eq!(json["reason"], "verified");
    assert_eq!(json["entries"], 33);
    assert_eq!(json["trace"].as_array().map(Vec::len), Some(11));
    // Unknown executions are invalid input.
    for cmd in ["resume", "inspect"] {
        let out = terminus(&[cmd, "--journal", &db, "--execution", "nope"]);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("no execution `nope`"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn an_unusable_journal_exits_3_and_an_invalid_scenario_writes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("no/such/dir/runs.db");
    let out = terminus(&[
        "run",
        &example("plain-answer.json"),
        "--journal",
        &missing.to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("runs.db"), "{}", stderr(&out));
    // A corrupt file is a storage error too, named.
    let garbage = dir.path().join("garbage.db");
    std::fs::write(
        &garbage,
        b"this is not a database, just text long enough to be a header......",
    )
    .expect("written");
    let out = terminus(&[
        "run",
        &example("plain-answer.json"),
        "--journal",
        &garbage.to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("garbage.db"), "{}", stderr(&out));
    // An invalid scenario is refused before the journal is touched.
    let bad = scenario_file("bad-with-journal", r#"{ "task": 1 }"#);
    let db = dir.path().join("untouched.db");
    let out = terminus(&[
        "run",
        &bad.to_string_lossy(),
        "--journal",
        &db.to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!db.exists(), "nothing may be written for invalid input");
}

#[test]
fn bad_arguments_exit_2() {
    let out = terminus(&["run", &example("plain-answer.json"), "--lease-ms", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let out = terminus(&["run"]);
    assert_eq!(out.status.code(), Some(2));
    let out = terminus(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn validate_checks_files_without_running_them() {
    let good = example("architect-stops-early.json");
    let out = terminus(&["validate", &good]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("(architect-stops-early)"));
    let bad = scenario_file(
        "bad-enum",
        r#"{ "task": "t", "model": { "turns": [ { "error": "x" } ] } }"#,
    );
    let out = terminus(&["validate", &good, &bad.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("$.model.turns[0].error: unknown variant `x`"));
}

#[test]
fn check_compares_reports_with_expectations() {
    let all = [
        example("architect-stops-early.json"),
        example("empty-responses.json"),
        example("plain-answer.json"),
        example("slow-tool-deadline.json"),
    ];
    let args: Vec<&str> = std::iter::once("check")
        .chain(all.iter().map(String::as_str))
        .collect();
    let out = terminus(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(
        stdout(&out)
            .lines()
            .filter(|l| l.starts_with("ok "))
            .count(),
        4
    );

    let wrong = scenario_file(
        "wrong-expect",
        r#"{ "task": "t", "model": { "turns": [ { "text": "Hi." } ] },
             "expect": { "reason": "verified", "steps": 1 } }"#,
    );
    let out = terminus(&["check", &wrong.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("$.expect.reason: expected `verified`, got `answered`"),
        "{}",
        stdout(&out)
    );
}
