//! `terminus runs`: the executions of a journal with their status, outcome, reason and counts,
//! filtered by outcome, reason and steps, on SQLite and on PostgreSQL (whose database is shared:
//! every id here is unique and only this test's rows are looked at).

mod common;

use common::journal::{Journal, postgres, unique};
use common::{run_terminus as terminus, scenario, text};
use serde_json::Value;

const RUN: [&str; 4] = [
    "plain-answer",
    "recursion-limit",
    "todos-left-open",
    "verifier-rejects-then-accepts",
];

/// The ids (without `base-`) `terminus runs` lists with `filter`, in order.
fn listed(journal: &str, base: &str, filter: &[&str]) -> Vec<String> {
    let mut args = vec!["runs", "--journal", journal, "--json"];
    args.extend_from_slice(filter);
    let out = terminus(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{filter:?}: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("one JSON object a line"))
        .filter_map(|v| {
            v["execution"]
                .as_str()
                .and_then(|id| id.strip_prefix(&format!("{base}-")))
                .map(str::to_owned)
        })
        .collect()
}

fn lists_and_filters(journal: &Journal) {
    let j = journal.arg();
    let base = unique(&format!("runs-{}", journal.label()));
    // Four runs that end, one submitted and never run.
    let mut reports = Vec::new();
    for name in RUN {
        let id = format!("{base}-{name}");
        let out = terminus(&[
            "run",
            &scenario(name),
            "--journal",
            &j,
            "--execution",
            &id,
            "--json",
        ]);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{}",
            text(&out.stderr)
        );
        let report: Value = text(&out.stdout)
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .expect("a report");
        reports.push((name, report));
    }
    let waiting = format!("{base}-waiting");
    let out = terminus(&[
        "submit",
        &scenario("plain-answer"),
        "--journal",
        &j,
        "--execution",
        &waiting,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // Every execution, oldest first, with the report's counts.
    let out = terminus(&["runs", "--journal", &j, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mine: Vec<Value> = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            v["execution"]
                .as_str()
                .is_some_and(|id| id.starts_with(&base))
        })
        .collect();
    assert_eq!(mine.len(), 5, "{mine:?}");
    for ((name, report), listed) in reports.iter().zip(&mine) {
        assert_eq!(listed["execution"], format!("{base}-{name}"));
        assert_eq!(listed["status"], "ended", "{name}");
        for field in [
            "outcome",
            "reason",
            "steps",
            "model_calls",
            "tool_calls",
            "entries",
        ] {
            assert_eq!(listed[field], report[field], "{name}: {field}");
        }
        assert_eq!(listed["rule"], report["rule"], "{name}");
        assert_eq!(listed["name"], *name, "{name}");
    }
    assert_eq!(mine[4]["status"], "waiting");
    assert_eq!(mine[4]["steps"], 0);
    assert!(mine[4].get("outcome").is_none(), "{}", mine[4]);

    // The table: a header, then one aligned line per execution.
    let out = terminus(&["runs", "--journal", &j]);
    let table = text(&out.stdout);
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("EXECUTION") && header.contains("MODEL_CALLS"),
        "{table}"
    );
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("{base}-recursion-limit ")))
        .unwrap_or_else(|| panic!("no line for recursion-limit in\n{table}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        cells[1..],
        ["ended", "aborted", "max_steps", "6", "3", "3"],
        "{line}"
    );

    // Filters.
    assert_eq!(
        listed(&j, &base, &["--outcome", "aborted"]),
        ["recursion-limit", "todos-left-open"]
    );
    assert_eq!(
        listed(&j, &base, &["--outcome", "complete"]),
        ["plain-answer", "verifier-rejects-then-accepts"]
    );
    assert_eq!(
        listed(&j, &base, &["--reason", "max_steps"]),
        ["recursion-limit"]
    );
    let at_least = |n: u64| -> Vec<String> {
        reports
            .iter()
            .filter(|(_, r)| r["steps"].as_u64().unwrap_or(0) >= n)
            .map(|(name, _)| (*name).to_owned())
            .collect()
    };
    assert_eq!(listed(&j, &base, &["--min-steps", "6"]), at_least(6));
    assert_eq!(listed(&j, &base, &["--min-steps", "2"]), at_least(2));
    assert!(at_least(6).len() < at_least(2).len() && !at_least(6).is_empty());
    assert_eq!(
        listed(
            &j,
            &base,
            &[
                "--outcome",
                "aborted",
                "--reason",
                "incomplete",
                "--min-steps",
                "1"
            ]
        ),
        ["todos-left-open"]
    );
}

#[test]
fn runs_lists_and_filters_executions_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    lists_and_filters(&Journal::Sqlite(dir.path().join("runs.db")));
}

#[test]
fn runs_lists_and_filters_executions_on_postgres() {
    let Some(journal) = postgres() else { return };
    lists_and_filters(&journal);
}

#[test]
fn bad_filters_exit_2_naming_the_valid_values() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("runs.db");
    let db = db.to_string_lossy();
    let out = terminus(&[
        "run",
        &scenario("plain-answer"),
        "--journal",
        &db,
        "--execution",
        "a",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = terminus(&["runs", "--journal", &db, "--reason", "too_many_steps"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("`too_many_steps` is not a stop reason"),
        "{err}"
    );
    for reason in [
        "verified",
        "max_steps",
        "token_budget",
        "unrecoverable_tool_error",
    ] {
        assert!(err.contains(reason), "{reason} is not named: {err}");
    }
    assert!(out.stdout.is_empty());
    let out = terminus(&["runs", "--journal", &db, "--outcome", "done"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("`complete` or `aborted`"));
    let out = terminus(&[
        "runs",
        "--journal",
        &db,
        "--outcome",
        "complete",
        "--reason",
        "max_steps",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("never matches"),
        "{}",
        text(&out.stderr)
    );
    let out = terminus(&["runs", "--journal", &db, "--min-steps", "-1"]);
    assert_eq!(out.status.code(), Some(2));
    let missing = dir.path().join("missing.db");
    let out = terminus(&["runs", "--journal", &missing.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no journal at"));
    assert!(!missing.exists());
}
