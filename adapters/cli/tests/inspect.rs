//! `terminus inspect`: the explanation of one conformance scenario of every stop reason is an
//! `insta` snapshot (text, as people read it), its JSON agrees with the run, and a stored run is
//! explained exactly as the same scenario run in memory.
//!
//! Bless after a reviewed change: `INSTA_UPDATE=always cargo test -p terminus-cli --test inspect`.

mod common;

use common::{run_terminus as terminus, scenario, text};
use serde_json::Value;
use std::path::Path;
use std::process::Output;
use terminus_kernel::{AbortReason, CompleteReason, Outcome};

/// One conformance scenario per stop reason, and one more for the reasons two rules can give
/// (`no_progress`: no-ops or a loop; `tool_failures`: failing turns or only excluded tools;
/// `model_error`: fatal or retries spent), whose paragraphs differ.
const CHOSEN: &[(&str, &str)] = &[
    ("verified", "verifier-rejects-then-accepts"),
    ("explicit", "explicit-done"),
    ("answered", "plain-answer"),
    ("forced", "verification-forced"),
    ("max_steps", "recursion-limit"),
    ("max_model_calls", "model-call-budget"),
    ("deadline", "slow-tool-deadline"),
    ("cancelled", "host-cancels"),
    ("no_progress", "needs-more-work-stalls"),
    ("no_progress", "same-tool-loop"),
    ("incomplete", "todos-left-open"),
    ("verification_loop", "verification-loop"),
    ("tool_failures", "consecutive-tool-failures"),
    ("tool_failures", "repeated-failing-call"),
    ("unrecoverable_tool_error", "unrecoverable-stops"),
    ("empty_responses", "empty-responses"),
    ("model_error", "model-auth-error"),
    ("model_error", "rate-limited-forever"),
    ("context_exhausted", "context-exhausted"),
    ("token_budget", "token-budget"),
    ("tool_call_budget", "tool-call-budget"),
    ("poll_limit", "poller-never-ready"),
    ("output_token_budget", "output-token-budget"),
];

fn explain(name: &str, json: bool) -> Output {
    let file = scenario(name);
    let mut args = vec!["inspect", "--scenario", file.as_str()];
    if json {
        args.push("--json");
    }
    terminus(&args)
}

#[test]
fn every_stop_reason_has_a_chosen_scenario() {
    let reasons = CompleteReason::ALL
        .into_iter()
        .map(Outcome::Complete)
        .chain(AbortReason::ALL.into_iter().map(Outcome::Aborted));
    for reason in reasons {
        assert!(
            CHOSEN.iter().any(|(r, _)| *r == reason.reason_str()),
            "no scenario explains {}",
            reason.reason_str()
        );
    }
}

#[test]
fn the_explanation_of_one_scenario_per_stop_reason_is_snapshotted() {
    for (reason, name) in CHOSEN {
        let out = explain(name, false);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out.stderr));
        let explanation = text(&out.stdout);
        assert!(
            explanation.contains(&format!("({reason}) (rule ")),
            "{name} did not stop with {reason}:\n{explanation}"
        );
        assert!(
            explanation.contains("why it stopped, and what to change:"),
            "{explanation}"
        );
        insta::assert_snapshot!(format!("inspect-{name}"), explanation);
    }
}

/// The bound whose rule stopped the run, for the reasons a bound gives.
fn bound_of(reason: &str) -> Option<&'static str> {
    Some(match reason {
        "max_steps" => "max_steps",
        "max_model_calls" => "max_model_calls",
        "token_budget" => "token_budget",
        "tool_call_budget" => "max_tool_calls",
        "incomplete" => "max_nudges",
        "verification_loop" | "forced" => "max_verification_failures",
        "empty_responses" => "max_empty_responses",
        "deadline" => "deadline_ms",
        "poll_limit" => "max_polls",
        "output_token_budget" => "max_output_tokens",
        _ => return None,
    })
}

#[test]
fn the_json_explanation_agrees_with_the_run() {
    for (reason, name) in CHOSEN {
        let out = explain(name, true);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out.stderr));
        let e: Value = serde_json::from_str(text(&out.stdout).trim()).expect("one JSON line");
        assert_eq!(e["reason"], *reason, "{name}");
        assert_eq!(e["status"], "ended", "{name}");
        assert_eq!(e["execution"], *name, "{name}");
        let steps = e["stats"]["steps"].as_u64().expect("steps");
        let path = e["path"].as_array().expect("a path");
        assert_eq!(path.len() as u64, steps, "{name}: one path entry per step");
        assert_eq!(e["trace"].as_array().map(Vec::len), Some(path.len()));
        // The last step is the rule that stopped the run, explained with its table row.
        let last = path.last().expect("a step");
        assert_eq!(last["rule"], e["rule"], "{name}");
        assert!(last["why"]["guard"].is_string(), "{name}: {last}");
        let why = e["why"].as_str().expect("a paragraph");
        assert!(why.len() > 80 && !why.contains('\n'), "{name}: {why}");
        // The bound that stopped it is marked, and only that one.
        let stopped: Vec<&str> = e["budgets"]
            .as_array()
            .expect("budgets")
            .iter()
            .filter(|b| b["stopped"] == true)
            .filter_map(|b| b["field"].as_str())
            .collect();
        match bound_of(reason) {
            Some(field) => {
                assert_eq!(stopped, [field], "{name}");
                assert!(
                    why.contains(field),
                    "{name}: the paragraph names {field}: {why}"
                );
            }
            None if *reason == "no_progress" => assert_eq!(stopped.len(), 1, "{name}"),
            None if *reason == "model_error" && *name == "rate-limited-forever" => {
                assert_eq!(stopped, ["max_model_retries"], "{name}");
            }
            None if *reason == "tool_failures" && *name == "consecutive-tool-failures" => {
                assert_eq!(stopped, ["max_consecutive_tool_failures"], "{name}");
            }
            None => assert!(stopped.is_empty(), "{name}: {stopped:?}"),
        }
        // Model calls answered in the journal plus those in flight are the model calls made.
        let answered = path.iter().filter(|s| s["model"].is_string()).count() as u64;
        assert_eq!(
            answered + e["unanswered_model_calls"].as_u64().unwrap_or(0),
            e["stats"]["model_calls"].as_u64().unwrap_or(0),
            "{name}"
        );
    }
}

#[test]
fn the_paragraphs_name_what_to_change() {
    let why = |name: &str| -> String {
        let out = explain(name, true);
        let e: Value = serde_json::from_str(text(&out.stdout).trim()).expect("one JSON line");
        e["why"].as_str().unwrap_or_default().to_owned()
    };
    // The open todo, the failing tool and its error, the repeated verifier feedback.
    assert!(why("todos-left-open").contains("\"run the migration\""));
    let excluded = why("repeated-failing-call");
    assert!(excluded.contains("deploy") && excluded.contains("connection reset by peer"));
    assert!(why("verification-forced").contains("\"the 1.2 section\" (2 times)"));
    assert!(why("unrecoverable-stops").contains("on_unrecoverable_tool_error: exclude"));
    assert!(why("slow-tool-deadline").contains("fetch_log"));
    assert!(why("recursion-limit").contains("raise max_steps (e.g. to 12)"));
    // No-ops named by what they were: replies cut at the output cap, calls written as text.
    let cut = why("truncated-replies-stall");
    assert!(
        cut.contains("cut at the output cap") && cut.contains("max_output_tokens"),
        "{cut}"
    );
    let written = why("text-tool-calls-nudge");
    assert!(
        written.contains("tool call as text") && written.contains("text_tool_calls"),
        "{written}"
    );
    assert!(why("needs-more-work-stalls").contains("needs_more_work: true"));
}

#[test]
fn a_stored_run_is_explained_as_the_same_scenario_run_in_memory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("runs.db");
    let db = db.to_string_lossy();
    for name in [
        "architect-stops-early",
        "repeated-failing-call",
        "todos-left-open",
    ] {
        let file = scenario(name);
        let run = terminus(&["run", &file, "--journal", &db, "--execution", name]);
        assert!(
            matches!(run.status.code(), Some(0 | 1)),
            "{}",
            text(&run.stderr)
        );
        let stored = terminus(&["inspect", "--journal", &db, "--execution", name, "--json"]);
        assert_eq!(stored.status.code(), Some(0), "{}", text(&stored.stderr));
        let memory = explain(name, true);
        let parse = |o: &Output| -> Value {
            serde_json::from_str(text(&o.stdout).trim()).expect("one JSON line")
        };
        assert_eq!(parse(&stored), parse(&memory), "{name}");
    }
}

#[test]
fn bad_sources_exit_2_naming_the_problem() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("nope.db");
    let missing = missing.to_string_lossy();
    let out = terminus(&["inspect", "--journal", &missing, "--execution", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no journal at"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        !Path::new(missing.as_ref()).exists(),
        "inspect must not create a journal"
    );
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{ "task": "t", "model": { "turns": [ { "txt": "hi" } ] } }"#,
    )
    .expect("written");
    let out = terminus(&["inspect", "--scenario", &bad.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("txt"), "{}", text(&out.stderr));
    let file = scenario("plain-answer");
    let both = terminus(&[
        "inspect",
        "--scenario",
        &file,
        "--journal",
        "x.db",
        "--execution",
        "x",
    ]);
    assert_eq!(both.status.code(), Some(2), "{}", text(&both.stderr));
    let neither = terminus(&["inspect"]);
    assert_eq!(neither.status.code(), Some(2), "{}", text(&neither.stderr));
}

/// A per-tool budget's warning and block, and the context window's prunes, are listed: the
/// former replayed from the journal through the kernel, the latter from the report (the window
/// is not journaled); a stored run is listed as the same run in memory. The runs' progress
/// lines say the same as they happen.
#[test]
fn tool_budget_warnings_and_blocks_and_prunes_are_listed() {
    let out = explain("soft-tool-budget", false);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let explanation = text(&out.stdout);
    assert!(
        explanation.contains(
            "\ntool budgets (tool_budgets):\n  step 3: read_file call 2 warned (calls are \
             refused from 3)\n  step 5: read_file call 3 refused by block_at (nothing lifts \
             it)\n"
        ),
        "{explanation}"
    );
    assert!(!explanation.contains("context window:"), "{explanation}");
    insta::assert_snapshot!("inspect-soft-tool-budget", explanation);
    let out = explain("soft-tool-budget", true);
    let e: Value = serde_json::from_str(text(&out.stdout).trim()).expect("one JSON line");
    assert_eq!(
        e["tool_budget_events"],
        serde_json::json!([
            { "tool": "read_file", "kind": "warn", "call": 2, "block_at": 3, "step": 3 },
            { "tool": "read_file", "kind": "block", "call": 3, "block_at": 3, "step": 5 },
        ])
    );

    let out = explain("long-run-pruned", false);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let explanation = text(&out.stdout);
    assert!(
        explanation.contains("\ncontext window:\n  2 prunes · 0 tool results cut · largest view "),
        "{explanation}"
    );
    let listed: Vec<&str> = explanation
        .lines()
        .filter(|l| l.starts_with("  pruned for model call "))
        .collect();
    assert_eq!(listed.len(), 2, "{explanation}");
    insta::assert_snapshot!("inspect-long-run-pruned", explanation);
    let out = explain("long-run-pruned", true);
    let e: Value = serde_json::from_str(text(&out.stdout).trim()).expect("one JSON line");
    let prunes = e["context_prunes"].as_array().expect("the prunes");
    assert_eq!(prunes.len(), 2);
    for (line, p) in listed.iter().zip(prunes) {
        assert_eq!(
            *line,
            format!(
                "  pruned for model call {} (after step {}): {} messages, {} tokens -> {} \
                 messages, {} tokens",
                p["model_call"],
                p["step"],
                p["messages_before"],
                p["tokens_before"],
                p["messages_after"],
                p["tokens_after"]
            )
        );
        assert!(
            p["tokens_after"].as_u64() < p["tokens_before"].as_u64(),
            "{p}"
        );
    }
    assert_eq!(e["context"]["prunes"], 2);

    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("runs.db");
    let db = db.to_string_lossy();
    for name in ["soft-tool-budget", "long-run-pruned"] {
        let file = scenario(name);
        let run = terminus(&["run", &file, "--journal", &db, "--execution", name]);
        assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
        let stderr = text(&run.stderr);
        match name {
            "soft-tool-budget" => {
                for line in [
                    "terminus: warning: tool budget of read_file: call 2 warned (calls are \
                     refused from 3) at step 3\n",
                    "terminus: warning: tool budget of read_file: call 3 refused (block_at 3) \
                     at step 5\n",
                ] {
                    assert!(stderr.contains(line), "{line:?} in:\n{stderr}");
                }
            }
            _ => {
                let progress: Vec<&str> = stderr
                    .lines()
                    .filter(|l| l.starts_with("terminus: context pruned for model call "))
                    .collect();
                let listed: Vec<String> = listed
                    .iter()
                    .map(|l| format!("terminus: context {}", l.trim_start()))
                    .collect();
                assert_eq!(progress, listed, "{stderr}");
            }
        }
        let stored = terminus(&["inspect", "--journal", &db, "--execution", name, "--json"]);
        assert_eq!(stored.status.code(), Some(0), "{}", text(&stored.stderr));
        let memory = explain(name, true);
        let parse = |o: &Output| -> Value {
            serde_json::from_str(text(&o.stdout).trim()).expect("one JSON line")
        };
        assert_eq!(parse(&stored), parse(&memory), "{name}");
    }
}

/// A tier's warnings and blocks name the tier, and a stop by blocked turns names the tier's
/// bound and the tool that lifts it (seed 004's read budget, the checkpoint never posted).
#[test]
fn a_tiers_blocks_name_the_tier_and_what_lifts_it() {
    let out = explain("seed-004-read-tiers-no-checkpoint", false);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let explanation = text(&out.stdout);
    for line in [
        "  step 17: read_file call 9 [the checkpoint tier] warned (calls are refused from 10)\n",
        "  step 19: read_file call 10 [the checkpoint tier] refused by tiers[0].block_at \
         (`post_checkpoint` lifts it)\n",
    ] {
        assert!(explanation.contains(line), "{line}\n{explanation}");
    }
    let why = explanation
        .split("path (")
        .next()
        .unwrap_or_default()
        .replace("\n  ", " ");
    assert!(
        why.contains(
            "read_file (tool_budgets.read_file.tiers[0].block_at = 10; a call of \
             `post_checkpoint` lifts it)"
        ),
        "{why}"
    );
}
