//! `terminus eval`: the suite of `spec/eval/` recorded on the real model (Qwen2.5-Coder-1.5B on
//! llama.cpp) replays offline (every run through the kernel, every check again on the files the
//! run left) to the table `docs/eval.md` shows, byte for byte, and says what the issue must show;
//! a replay refuses a recording that is not the suite's; a bad suite is exit 2 naming its field;
//! and a live trial on the real model of the tests records a run that replays to the same table.

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

/// The tasks the kept recording holds (its manifest), in the suite's order.
fn recorded_tasks() -> Vec<String> {
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(repo("spec/eval/recordings/manifest.json")).expect("a manifest"),
    )
    .expect("JSON");
    let recorded: Vec<&str> = manifest["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    SUITE_TASKS
        .iter()
        .filter(|t| recorded.contains(t))
        .map(|t| (*t).to_owned())
        .collect()
}

/// The tasks of `spec/eval/suite.toml`, in its order.
const SUITE_TASKS: [&str; 8] = [
    "architect",
    "reading",
    "poll",
    "wait",
    "never",
    "verifier",
    "trap",
    "everything",
];

#[test]
fn the_kept_recordings_replay_to_the_documented_table() {
    let suite = repo("spec/eval/suite.toml");
    let recordings = repo("spec/eval/recordings");
    let tasks = recorded_tasks();
    assert!(tasks.len() >= 5, "{tasks:?}");
    let mut args = vec![
        "eval".to_owned(),
        suite.to_str().expect("utf-8").to_owned(),
        "--replay".to_owned(),
        recordings.to_str().expect("utf-8").to_owned(),
    ];
    if tasks.len() < SUITE_TASKS.len() {
        for t in &tasks {
            args.extend(["--only".to_owned(), t.clone()]);
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
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
    assert_eq!(
        rows.len(),
        3 * tasks.len(),
        "each task under three conditions"
    );
    for r in &rows {
        assert!(r["trials"].as_u64() >= Some(5), "{r}");
        assert_eq!(r["errors"], 0, "{r}");
    }
    // What a final answer is: no kernel trial ends complete on a reply that is not an answer
    // (every task's config is autonomous), nor on a tool call written as text.
    let trials = trials(&with_json.stdout);
    for t in trials.iter().filter(|t| t["condition"] == "kernel") {
        let report = &t["report"];
        if report["outcome"] != "complete" {
            continue;
        }
        let result = report["result"].as_str().unwrap_or_default();
        assert!(!result.trim().is_empty(), "{t}");
        assert!(
            !terminus_kernel::answer::hands_back(result, &terminus_kernel::answer::Said::default()),
            "{t}"
        );
        assert!(terminus_kernel::textcall::find(result).is_none(), "{t}");
    }
    // Kernel success at least the plain recovering loop's on every task.
    for task in &tasks {
        let kernel = row(&rows, task, "kernel")["successes"].as_u64();
        let recover = row(&rows, task, "recover")["successes"].as_u64();
        assert!(
            kernel >= recover,
            "{task}: kernel {kernel:?} < recover {recover:?}"
        );
    }
    // Fewer false completions than the plain loop over the suite.
    let false_completions = |condition: &str| -> u64 {
        rows.iter()
            .filter(|r| r["condition"] == condition)
            .filter_map(|r| r["complete_failed"].as_u64())
            .sum()
    };
    assert!(
        false_completions("kernel") < false_completions("recover"),
        "kernel {} against recover {}",
        false_completions("kernel"),
        false_completions("recover")
    );
}

/// The trials of `--json` (its last stdout line).
fn trials(stdout: &[u8]) -> Vec<Value> {
    let line = text(stdout).lines().last().unwrap_or_default().to_owned();
    let json: Value = serde_json::from_str(&line).expect("the last line is JSON");
    json["trials"].as_array().expect("trials").clone()
}

/// A suite like `spec/eval/suite.toml` in `dir` (as `name`), its paths made absolute, with
/// `edit` applied to its text.
fn suite_copy(dir: &Path, name: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let eval = repo("spec/eval");
    let text = std::fs::read_to_string(eval.join("suite.toml")).expect("the suite");
    let root = eval.canonicalize().expect("spec/eval");
    let text = text
        .replace("config = \"", &format!("config = \"{}/", root.display()))
        .replace("folder = \"", &format!("folder = \"{}/", root.display()));
    let path = dir.join(name);
    std::fs::write(&path, edit(text)).expect("write the suite");
    path
}

/// A replay is evidence only if it can disagree: a task whose check, text or condition is not
/// the recorded one, a trial missing, another trial count, all refused (exit 2) naming it.
#[test]
fn replay_refuses_a_recording_that_is_not_the_suites() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let recordings = repo("spec/eval/recordings");
    let replay = |suite: &Path, extra: &[&str]| {
        let mut args = vec![
            "eval",
            suite.to_str().expect("utf-8"),
            "--only",
            "trap",
            "--replay",
            recordings.to_str().expect("utf-8"),
        ];
        args.extend_from_slice(extra);
        run_terminus(&args)
    };
    // The same suite, copied: it replays.
    let same = suite_copy(dir.path(), "same.toml", |t| t);
    let out = replay(&same, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let edited = suite_copy(dir.path(), "check.toml", |t| {
        t.replace(
            r#"check = { files = [{ path = "answer.txt", matches = ["51"] }] }"#,
            r#"check = { files = [{ path = "answer.txt", matches = ["5[01]"] }] }"#,
        )
    });
    let out = replay(&edited, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("not this suite's trial: the check was"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "no table from a refused recording");

    let task = suite_copy(dir.path(), "task.toml", |t| {
        t.replace("then say what you did.", "then say what you have done.")
    });
    let stderr = text(&replay(&task, &[]).stderr);
    assert!(
        stderr.contains("not this suite's trial: the task was"),
        "{stderr}"
    );

    let condition = suite_copy(dir.path(), "condition.toml", |t| {
        t.replace("max_no_ops = 1, max_empty", "max_no_ops = 2, max_empty")
    });
    let stderr = text(&replay(&condition, &[]).stderr);
    assert!(stderr.contains("the condition's policy was"), "{stderr}");

    let out = replay(&same, &["--trials", "4"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not --trials 4"));

    // A trial missing.
    let copy = dir.path().join("recordings");
    copy_tree(&recordings, &copy);
    std::fs::remove_file(copy.join("trap/kernel/2.json")).expect("remove a trial");
    let out = run_terminus(&[
        "eval",
        same.to_str().expect("utf-8"),
        "--only",
        "trap",
        "--replay",
        copy.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("trap/kernel: 4 recorded trials, the recording says 5"),
        "{}",
        text(&out.stderr)
    );
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("an entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
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
        6,
        "a progress line as each trial starts and as it ends: {stderr}"
    );
    let live = rows(&out.stdout);
    for r in &live {
        assert!(r["errors"] == 0, "{r}\n{stderr}");
    }
    let table = |stdout: &[u8]| -> String {
        text(stdout)
            .lines()
            .filter(|l| l.starts_with('|'))
            .map(|l| format!("{l}\n"))
            .collect()
    };
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
    assert_eq!(
        table(&replayed.stdout),
        table(&out.stdout),
        "the replay prints the live run's tables"
    );
}
