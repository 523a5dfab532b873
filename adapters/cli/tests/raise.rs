//! `terminus resume --raise FIELD=N` (docs/cli.md, "resume"): a run a budget stopped goes on
//! with that budget raised, the pre-empted step taken once; the first stop and the raise stay in
//! the journal and the counters carry over; a raise that does not lift the budget that stopped
//! the run is refused (exit 2) and writes nothing.

mod common;

use common::{last_json, run_terminus, text};
use serde_json::{Value, json};
use std::path::Path;

/// Five tool turns, each reading another file, then the final answer; `policy` as given.
fn scenario(dir: &Path, policy: Value) -> String {
    let mut turns: Vec<Value> = (0..5)
        .map(|i| json!({ "tool_calls": [ { "name": "read", "arguments": { "file": i } } ] }))
        .collect();
    turns.push(json!({ "text": "All five files read.", "needs_more_work": false }));
    let file = json!({
        "name": "raise",
        "task": "Read the five files.",
        "policy": policy,
        "model": { "turns": turns },
        "tools": { "read": { "results": [ { "ok": "contents" } ], "repeat": "last" } }
    });
    let path = dir.join("raise.json");
    std::fs::write(&path, file.to_string()).expect("write the scenario");
    path.to_string_lossy().into_owned()
}

fn journal(dir: &Path) -> String {
    dir.join("j.db").to_string_lossy().into_owned()
}

/// `terminus inspect --json` of the execution.
fn inspect(journal: &str, execution: &str) -> Value {
    let out = run_terminus(&[
        "inspect",
        "--journal",
        journal,
        "--execution",
        execution,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    last_json(&out.stdout)
}

fn resume(journal: &str, execution: &str, raises: &[&str]) -> std::process::Output {
    let mut args = vec![
        "resume",
        "--journal",
        journal,
        "--execution",
        execution,
        "--json",
    ];
    for raise in raises {
        args.extend(["--raise", raise]);
    }
    run_terminus(&args)
}

#[test]
fn a_step_budget_stop_goes_on_raised_and_every_file_is_read_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = scenario(dir.path(), json!({ "max_steps": 6 }));
    let journal = journal(dir.path());
    let out = run_terminus(&[
        "run",
        &file,
        "--journal",
        &journal,
        "--execution",
        "e1",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stopped = last_json(&out.stdout);
    assert_eq!(stopped["reason"], "max_steps");
    assert_eq!(stopped["steps"], 6);
    assert_eq!(stopped["tool_calls"], 3);

    let out = resume(&journal, "e1", &["max_steps=40"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The raise has its own progress line, before the steps it lets the run take.
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "step   7: Aborted --raise--> Exploring [tool_results_back]  raised max_steps=40"
        ),
        "{stderr}"
    );
    let report = last_json(&out.stdout);
    assert_eq!(report["outcome"], "complete", "{report}");
    assert_eq!(report["result"], "All five files read.");
    // Each file read once: three before the stop, two after; the model asked six times.
    assert_eq!(report["tool_calls"], 5);
    assert_eq!(report["model_calls"], 6);
    // The stop (step 6) and the raise (step 7, the pre-empted results going back) both counted.
    assert_eq!(report["steps"], 12);
    let trace = report["trace"].as_array().expect("a trace");
    assert_eq!(trace[5]["rule"], "step_budget");
    assert_eq!(trace[6]["from"], "Aborted", "{}", trace[6]);
    assert_eq!(trace[6]["input"], "raise", "{}", trace[6]);
    assert_eq!(trace[6]["rule"], "tool_results_back", "{}", trace[6]);

    // The explanation reads the raise and the policy it raised.
    let explained = inspect(&journal, "e1");
    let shown = explained.to_string();
    assert!(shown.contains("raised max_steps=40"), "{shown}");
    assert_eq!(explained["outcome"], "complete", "{shown}");

    // Ended again: resuming prints the report and runs nothing.
    let out = resume(&journal, "e1", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(last_json(&out.stdout)["steps"], 12);
    let out = run_terminus(&["runs", "--journal", &journal, "--json"]);
    let listed = text(&out.stdout);
    assert!(listed.contains("\"complete\""), "{listed}");
}

#[test]
fn a_raise_too_small_stops_again_and_a_second_raise_finishes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = scenario(dir.path(), json!({ "max_model_calls": 2 }));
    let journal = journal(dir.path());
    let out = run_terminus(&["run", &file, "--journal", &journal, "--execution", "e2"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));

    let out = resume(&journal, "e2", &["max_model_calls=4"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let again = last_json(&out.stdout);
    assert_eq!(again["reason"], "max_model_calls");
    assert_eq!(again["model_calls"], 4);
    let out = run_terminus(&["runs", "--journal", &journal, "--json"]);
    assert!(text(&out.stdout).contains("max_model_calls"));

    let out = resume(&journal, "e2", &["max_model_calls=10"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = last_json(&out.stdout);
    assert_eq!(report["outcome"], "complete");
    assert_eq!(report["model_calls"], 6);
    assert_eq!(report["tool_calls"], 5);
}

#[test]
fn a_raise_that_does_not_lift_the_stopping_budget_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = scenario(dir.path(), json!({ "max_steps": 6 }));
    let journal = journal(dir.path());
    let out = run_terminus(&["run", &file, "--journal", &journal, "--execution", "e3"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let before = inspect(&journal, "e3");

    let cases: [(&[&str], &str); 6] = [
        (
            &["max_model_calls=99"],
            "`max_model_calls` did not stop the run",
        ),
        (
            &["max_steps=6"],
            "`max_steps=6` does not raise max_steps (it is 6)",
        ),
        (&["max_steps=3"], "does not raise max_steps"),
        (
            &["max_no_ops=9"],
            "`max_no_ops` is not a budget a raise can lift",
        ),
        (&["max_steps"], "`max_steps` is not FIELD=N"),
        (
            &["max_steps=40", "max_steps=50"],
            "`max_steps` is raised twice",
        ),
    ];
    for (raises, says) in cases {
        let out = resume(&journal, "e3", raises);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{raises:?}: {}",
            text(&out.stderr)
        );
        let stderr = text(&out.stderr);
        assert!(stderr.contains(says), "{raises:?}: {stderr}");
        assert_eq!(
            inspect(&journal, "e3"),
            before,
            "{raises:?} wrote to the journal"
        );
    }

    // A run that completed has no budget to raise.
    let done = scenario(dir.path(), json!({}));
    let out = run_terminus(&["run", &done, "--journal", &journal, "--execution", "e4"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = resume(&journal, "e4", &["max_steps=400"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not on a budget a raise can continue from"),
        "{}",
        text(&out.stderr)
    );
}
