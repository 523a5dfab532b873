//! `terminus eval`: the suite of `spec/eval/` recorded on the real model (Qwen2.5-Coder-1.5B on
//! llama.cpp) replays offline to the table `docs/eval.md` shows, byte for byte; a bad suite is
//! exit 2 naming its field; and a live trial on the real model of the tests records a run that
//! replays to the same table.

mod common;

use common::{run_terminus, text};
use serde_json::Value;
use std::path::{Path, PathBuf};
use terminus_fixture::{LlamaModel, LlamaOptions, LlamaServer, peers};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// The table between the `eval-table` markers of `docs/eval.md`.
fn documented_table() -> String {
    let doc = std::fs::read_to_string(repo("docs/eval.md")).expect("docs/eval.md");
    let start = doc
        .find("<!-- eval-table -->")
        .expect("the table's start marker")
        + 20;
    let end = doc
        .find("<!-- /eval-table -->")
        .expect("the table's end marker");
    doc[start..end].trim_start_matches('\n').to_owned()
}

/// The rows of `--json` (its last stdout line).
fn rows(stdout: &[u8]) -> Vec<Value> {
    let line = text(stdout).lines().last().unwrap_or_default().to_owned();
    let json: Value = serde_json::from_str(&line).expect("the last line is JSON");
    json["rows"].as_array().expect("rows").clone()
}

fn row<'a>(rows: &'a [Value], task: &str, condition: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["task"] == task && r["condition"] == condition)
        .unwrap_or_else(|| panic!("no row {task}/{condition}"))
}

#[test]
fn the_kept_recordings_replay_to_the_documented_table() {
    let suite = repo("spec/eval/suite.toml");
    let recordings = repo("spec/eval/recordings");
    let args = [
        "eval",
        suite.to_str().expect("utf-8"),
        "--replay",
        recordings.to_str().expect("utf-8"),
    ];
    let out = run_terminus(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert_eq!(
        table,
        documented_table(),
        "docs/eval.md shows another table"
    );
    // Byte for byte, every time.
    let again = run_terminus(&args);
    assert_eq!(text(&again.stdout), table);

    let with_json = run_terminus(&[args.as_slice(), &["--json"]].concat());
    let rows = rows(&with_json.stdout);
    assert_eq!(rows.len(), 10, "five tasks under two conditions");
    for r in &rows {
        assert_eq!(r["trials"], 3, "{r}");
        if r["condition"] == "kernel" {
            // The central promise: no run ends complete with an unexecuted tool call.
            assert_eq!(r["complete_with_a_call_as_result"], 0, "{r}");
        }
    }
    let kernel = row(&rows, "architect", "kernel")["successes"].as_u64();
    let bare = row(&rows, "architect", "bare")["successes"].as_u64();
    assert!(
        kernel >= bare,
        "seed 000's architect: kernel {kernel:?} < bare {bare:?}"
    );
}

#[test]
fn a_bad_suite_exits_2_naming_the_field() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let suite = dir.path().join("suite.toml");
    std::fs::write(
        &suite,
        "[[task]]\nname = \"a\"\nconfig = \"agent.toml\"\ntask = \"t\"\ncheck = {}\n\
         [[condition]]\nname = \"kernel\"\n",
    )
    .expect("write");
    let out = run_terminus(&["eval", suite.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("task[0].check: give files"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing is printed for a bad suite");

    std::fs::write(
        &suite,
        "[[task]]\nname = \"a\"\nconfig = \"missing.toml\"\ntask = \"t\"\n\
         check = { command = [\"true\"] }\n[[condition]]\nname = \"kernel\"\n",
    )
    .expect("write");
    let out = run_terminus(&["eval", suite.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("task[0].config: cannot read"));
}

/// One trial per condition of the MCP task on the real model of the tests: it runs, is
/// recorded, and the recording replays to the same table; no kernel trial ends complete with a
/// tool call written as text as its result.
#[test]
fn a_live_trial_on_the_real_model_replays_to_its_table() {
    let Some(peers) = peers::dir() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let options = LlamaOptions {
        model: LlamaModel::Qwen,
        ctx_size: 8192,
        ..LlamaOptions::default()
    };
    let Some(server) = LlamaServer::start(&peers, dir.path(), &options) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "llama-server or the Qwen model is not installed in {} (.ci/peers.sh installs them)",
            peers.display()
        );
        eprintln!(
            "skipped: no llama-server or Qwen model in {}",
            peers.display()
        );
        return;
    };
    let suite = repo("spec/eval/suite.toml");
    let record = dir.path().join("recordings");
    let base_url = format!("{}/v1", server.url());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args([
            "eval",
            suite.to_str().expect("utf-8"),
            "--only",
            "everything",
        ])
        .args([
            "--trials",
            "1",
            "--base-url",
            &base_url,
            "--json",
            "--record",
        ])
        .arg(&record)
        .env("TERMINUS_PEERS", &peers)
        .output()
        .expect("the binary runs");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{}", server.log());
    assert_eq!(
        stderr.matches("terminus: eval [").count(),
        2,
        "a progress line per trial: {stderr}"
    );
    let live = rows(&out.stdout);
    for r in &live {
        assert!(r["errors"] == 0, "{r}\n{stderr}");
    }
    assert_eq!(
        row(&live, "everything", "kernel")["complete_with_a_call_as_result"],
        0
    );
    let table: String = text(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| format!("{l}\n"))
        .collect();
    let replayed = run_terminus(&[
        "eval",
        suite.to_str().expect("utf-8"),
        "--only",
        "everything",
        "--replay",
        record.to_str().expect("utf-8"),
    ]);
    assert_eq!(
        replayed.status.code(),
        Some(0),
        "{}",
        text(&replayed.stderr)
    );
    assert_eq!(text(&replayed.stdout), table);
}
