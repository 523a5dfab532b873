//! Budgets scaled to the task (`policy.budget_scale`, `terminus run --scale N`): the execution
//! keeps the scaled policy with its units, so a resume goes on under the same budgets (it never
//! scales again), a raise starts from them, and `terminus inspect` shows the units; a bad scale
//! is exit 2 with nothing written.

mod common;

use common::{keyless_config, last_json, reply, run_terminus, terminus, text};
use serde_json::{Value, json};
use std::path::Path;
use terminus_fixture::Fixture;

/// Reads `reads` files (the read of file `approve_at`, if any, needs a person's approval), then
/// answers; a step budget of 4, 2 more per unit, at most 100.
fn scenario(dir: &Path, approve_at: Option<usize>) -> String {
    let mut turns: Vec<Value> = (0..5)
        .map(|i| {
            let tool = if Some(i) == approve_at { "approved_read" } else { "read" };
            json!({ "tool_calls": [ { "id": format!("read-{i}"), "name": tool, "arguments": { "file": i } } ] })
        })
        .collect();
    turns.push(json!({ "text": "All five files read.", "needs_more_work": false }));
    let file = json!({
        "name": "scaled",
        "task": "Read the five files.",
        "policy": {
            "max_steps": 4,
            "budget_scale": { "per_unit": { "max_steps": 2 }, "max": { "max_steps": 100 } }
        },
        "model": { "turns": turns },
        "tools": {
            "read": { "results": [ { "ok": "contents" } ], "repeat": "last" },
            "approved_read": { "approval": true, "results": [ { "ok": "contents" } ] }
        }
    });
    let path = dir.join("scaled.json");
    std::fs::write(&path, file.to_string()).expect("write the scenario");
    path.to_string_lossy().into_owned()
}

/// `terminus SUBCOMMAND --journal J --execution e1 ARGS...`
fn on(journal: &str, subcommand: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec![subcommand, "--journal", journal, "--execution", "e1"];
    all.extend_from_slice(args);
    run_terminus(&all)
}

fn inspect(journal: &str) -> Value {
    let out = on(journal, "inspect", &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    last_json(&out.stdout)
}

fn max_steps(explanation: &Value) -> &Value {
    let budgets = explanation["budgets"].as_array().expect("budgets");
    let steps = budgets.iter().find(|b| b["field"] == "max_steps");
    &steps.expect("max_steps is listed")["limit"]
}

#[test]
fn a_run_suspended_under_scaled_budgets_resumes_under_the_same_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = scenario(dir.path(), Some(2));
    let journal = dir.path().join("j.db").to_string_lossy().into_owned();
    // Scale 2: 4 + 2 × 2 = 8 steps. The third read waits for approval (after step 4).
    let out = run_terminus(&[
        "run",
        &file,
        "--scale",
        "2",
        "--journal",
        &journal,
        "--execution",
        "e1",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    let suspended = inspect(&journal);
    assert_eq!(max_steps(&suspended), 8);
    assert_eq!(
        suspended["scale"],
        json!({ "per_unit": { "max_steps": 2 }, "max": { "max_steps": 100 }, "units": 2 })
    );

    let approve = on(&journal, "approve", &["--call", "read-2"]);
    assert_eq!(approve.status.code(), Some(0), "{}", text(&approve.stderr));
    let resumed = on(&journal, "resume", &["--json"]);
    // Under the scaled 8 steps: four reads, and the step budget stops the fifth (not the base 4,
    // which the run had passed before it suspended, nor a budget scaled again).
    assert_eq!(resumed.status.code(), Some(1), "{}", text(&resumed.stderr));
    let report = last_json(&resumed.stdout);
    assert_eq!(report["reason"], "max_steps");
    assert_eq!(report["steps"], 8);
    assert_eq!(report["stats"]["tool_calls"], 4);
    let ended = inspect(&journal);
    assert_eq!(max_steps(&ended), 8);
    assert_eq!(ended["scale"]["units"], 2);
    let prose = on(&journal, "inspect", &[]);
    assert!(
        text(&prose.stdout)
            .contains("scaled for 2 units (budget_scale): max_steps +2 a unit, at most 100"),
        "{}",
        text(&prose.stdout)
    );
}

#[test]
fn a_raise_starts_from_the_scaled_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = scenario(dir.path(), None);
    let journal = dir.path().join("j.db").to_string_lossy().into_owned();
    // Scale 1: 6 steps, three reads.
    let out = run_terminus(&[
        "run",
        &file,
        "--scale",
        "1",
        "--journal",
        &journal,
        "--execution",
        "e1",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(last_json(&out.stdout)["steps"], 6);
    // 5 is above the base (4) but not above the scaled budget: it lifts nothing.
    let low = on(&journal, "resume", &["--raise", "max_steps=5", "--json"]);
    assert_eq!(low.status.code(), Some(2), "{}", text(&low.stderr));
    let raised = on(&journal, "resume", &["--raise", "max_steps=12", "--json"]);
    assert_eq!(raised.status.code(), Some(0), "{}", text(&raised.stderr));
    let report = last_json(&raised.stdout);
    assert_eq!(report["reason"], "explicit");
    assert_eq!(report["stats"]["tool_calls"], 5);
}

#[test]
fn a_bad_scale_is_invalid_input_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("j.db").to_string_lossy().into_owned();
    let plain = dir.path().join("plain.json");
    std::fs::write(
        &plain,
        json!({
            "task": "t",
            "model": { "turns": [ { "text": "done" } ] }
        })
        .to_string(),
    )
    .expect("write");
    let plain = plain.to_string_lossy().into_owned();
    let out = run_terminus(&["run", &plain, "--scale", "3", "--journal", &journal]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("--scale 3: $.scale: scales nothing: the policy has no budget_scale"),
        "{}",
        text(&out.stderr)
    );

    let below = dir.path().join("below.json");
    std::fs::write(
        &below,
        json!({
            "task": "t",
            "policy": {
                "max_steps": 10,
                "budget_scale": { "per_unit": { "max_steps": 1 }, "max": { "max_steps": 9 } }
            },
            "scale": 2,
            "model": { "turns": [ { "text": "done" } ] }
        })
        .to_string(),
    )
    .expect("write");
    let below = below.to_string_lossy().into_owned();
    let out = run_terminus(&["run", &below, "--journal", &journal]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(
            "$.policy.budget_scale.max.max_steps: must be at least max_steps (10), the budget it \
             scales, got 9"
        ),
        "{}",
        text(&out.stderr)
    );
    assert!(!Path::new(&journal).exists(), "no journal is written");
}

/// `terminus agent --scale N`: the live run is created under the scaled policy, which the
/// execution keeps and a recording replays; a config with no `budget_scale` is exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_agent_runs_under_the_scaled_policy_and_records_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = Fixture::start(vec![reply("Done.", &[], 1)])
        .await
        .expect("a port");
    let config = keyless_config(
        dir.path(),
        &fixture.url(),
        "[policy]\nmax_steps = 2\n[policy.budget_scale.per_unit]\nmax_steps = 3\n\
         [policy.budget_scale.max]\nmax_steps = 50\n",
    );
    let config = config.to_string_lossy().into_owned();
    let journal = dir.path().join("j.db").to_string_lossy().into_owned();
    let recording = dir.path().join("rec.json").to_string_lossy().into_owned();
    let args = |more: &[&str]| {
        let mut all: Vec<String> = ["agent", &config, "--task", "Say done."]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        all.extend(more.iter().map(|s| (*s).to_owned()));
        all
    };
    let out = terminus(args(&[
        "--scale",
        "4",
        "--journal",
        &journal,
        "--execution",
        "a1",
        "--record",
        &recording,
        "--json",
    ]))
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let inspected = run_terminus(&[
        "inspect",
        "--journal",
        &journal,
        "--execution",
        "a1",
        "--json",
    ]);
    assert_eq!(
        inspected.status.code(),
        Some(0),
        "{}",
        text(&inspected.stderr)
    );
    let explained = last_json(&inspected.stdout);
    assert_eq!(max_steps(&explained), 14);
    assert_eq!(explained["scale"]["units"], 4);
    let recorded: Value =
        serde_json::from_str(&std::fs::read_to_string(&recording).expect("recorded"))
            .expect("JSON");
    assert_eq!(recorded["policy"]["max_steps"], 14);
    assert_eq!(recorded["policy"]["budget_scale"]["units"], 4);

    let plain = keyless_config(dir.path(), &fixture.url(), "[policy]\nmax_steps = 2\n");
    let plain = plain.to_string_lossy().into_owned();
    let out = terminus(vec![
        "agent".into(),
        plain,
        "--task".into(),
        "x".into(),
        "--scale".into(),
        "4".into(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--scale 4 scales nothing: the policy has no budget_scale"),
        "{}",
        text(&out.stderr)
    );
}

/// `terminus run --scale-from GLOB` in `dir`.
fn run_in(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the binary runs")
}

#[test]
fn the_size_comes_from_the_files_a_glob_matches_and_is_printed_and_reported() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    common::project(
        dir.path(),
        &["src/a.rs", "src/b.rs", "src/deep/c.rs", "src/README.md"],
    );
    let tiers = common::scenario("seed-004-read-tiers-scaled");
    let out = run_in(
        dir.path(),
        &["run", &tiers, "--scale-from", "src/**/*.rs", "--json"],
    );
    let stderr = text(&out.stderr);
    // Three files: every read threshold three reads later, as the scenario's own "scale": 3.
    assert!(
        stderr.contains(
            "terminus: scaled for 3 units (3 files match `src/**/*.rs`): tool_budgets.read_file \
             {\"tiers\":[{\"block_at\":13,\"warn_at\":11},{\"block_at\":17,\"warn_at\":16}]}"
        ),
        "{stderr}"
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = last_json(&out.stdout);
    assert_eq!(
        report["scale"],
        json!({ "units": 3, "budgets": { "tool_budgets.read_file": {
            "tiers": [ { "warn_at": 11, "block_at": 13 }, { "warn_at": 16, "block_at": 17 } ] } } })
    );
    assert!(!stderr.contains("expectation not met"), "{stderr}");

    // One file more: the thresholds move one read further, and the scenario's expectations
    // (written for three) no longer hold: one read fewer is refused.
    std::fs::write(dir.path().join("src/d.rs"), "").expect("write");
    let out = run_in(
        dir.path(),
        &["run", &tiers, "--scale-from", "src/**/*.rs", "--json"],
    );
    let report = last_json(&out.stdout);
    assert_eq!(report["scale"]["units"], json!(4));
    assert_eq!(report["stats"]["refused_calls"], json!(1));
    assert!(
        text(&out.stderr).contains("$.expect.refused_calls: expected exactly 2, got 1"),
        "{}",
        text(&out.stderr)
    );

    // A pattern that matches nothing, or is no glob, is invalid input naming it.
    for (pattern, says) in [
        ("lib/*.rs", "--scale-from `lib/*.rs`: matches no file in "),
        ("src/[a", "--scale-from `src/[a`: not a glob pattern"),
    ] {
        let out = run_in(dir.path(), &["run", &tiers, "--scale-from", pattern]);
        assert_eq!(out.status.code(), Some(2), "{pattern}");
        assert!(text(&out.stderr).contains(says), "{}", text(&out.stderr));
    }
}
