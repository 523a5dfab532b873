//! `terminus agent` end to end: a real OpenAI-compatible HTTP exchange with the fixture model
//! server, the real filesystem MCP server as the tools, the kernel's nudge and verification, the
//! report and the exit code; Ctrl-C, config errors and an unreachable model.

mod common;

use common::{
    architect, asking_server, fs_server, keyless_config, last_json, reply, terminus, text, todos,
    write_config,
};
use serde_json::{Value, json};
use std::process::{Output, Stdio};
use std::time::Duration;
use terminus_fixture::{Fixture, Response, peers};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_architect_runs_live_against_a_model_server_and_the_filesystem_server() {
    let Some(peers) = peers::dir() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = dir.path().canonicalize().expect("a real path").join("work");
    let (script, plan) = architect(&root);
    let fixture = Fixture::start(script.to_vec()).await.expect("a port");
    let mcp = fs_server(&peers, &root.to_string_lossy());
    let config = write_config(dir.path(), &format!("{}/v1", fixture.url()), &mcp);
    let journal = dir.path().join("journal.db").to_string_lossy().into_owned();
    let out = terminus(vec![
        "agent".into(),
        config,
        "--task".into(),
        "Write an implementation plan to plan.md".into(),
        "--journal".into(),
        journal.clone(),
        "--execution".into(),
        "live-1".into(),
        "--json".into(),
    ])
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = last_json(&out.stdout);
    assert_eq!(report["outcome"], "complete");
    assert_eq!(report["reason"], "verified");
    assert_eq!(report["execution"], "live-1");
    assert_eq!(
        (report["nudges"].as_u64(), report["model_calls"].as_u64()),
        (Some(1), Some(6))
    );
    assert_eq!(report["result"], "Plan written to plan.md.");
    assert_eq!(
        std::fs::read_to_string(&plan).expect("on disk"),
        "# Plan\n1. Fix parse.\n"
    );
    assert!(
        stderr.lines().filter(|l| l.starts_with('[')).count() >= 6,
        "progress lines: {stderr}"
    );

    let sent: Vec<Value> = fixture.requests().iter().map(|r| r.json()).collect();
    assert_eq!(sent.len(), 6);
    assert_eq!(
        sent[0]["messages"][0]["content"],
        "You are a careful software architect."
    );
    assert!(
        sent[0]["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "write_file"))
    );
    // The listing went back to the model, answering its call by id.
    let second = sent[1]["messages"].as_array().expect("messages");
    let result = second
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("a tool result");
    assert_eq!(result["tool_call_id"], "call_1_0");
    assert!(
        result["content"]
            .as_str()
            .is_some_and(|c| c.contains("lib.rs"))
    );
    // The nudge is in the conversation after the refused claim.
    assert!(sent[3].to_string().contains("not done"), "{}", sent[3]);
    // The key went to the server and nowhere else.
    assert!(
        fixture
            .requests()
            .iter()
            .all(|r| r.header("authorization") == Some("Bearer sk-agent-test-key"))
    );
    assert!(
        !stderr.contains("sk-agent-test-key") && !text(&out.stdout).contains("sk-agent-test-key")
    );
    let db = std::fs::read(&journal).expect("the journal");
    assert!(!db.windows(17).any(|w| w == b"sk-agent-test-key"));
}

/// `terminus run RECORDING --json` exits 1 with the report of the cancelled run it recorded:
/// the same outcome, reason, steps, counts and result.
async fn replays_cancelled(recording: &std::path::Path, report: &Value) {
    let replay = tokio::process::Command::new(env!("CARGO_BIN_EXE_terminus"))
        .arg("run")
        .arg(recording)
        .arg("--json")
        .output()
        .await
        .expect("runs");
    assert_eq!(replay.status.code(), Some(1), "{}", text(&replay.stderr));
    let replayed: Value =
        serde_json::from_str(text(&replay.stdout).lines().last().expect("a report")).expect("JSON");
    for key in [
        "outcome",
        "reason",
        "steps",
        "model_calls",
        "tool_calls",
        "result",
    ] {
        assert_eq!(replayed[key], report[key], "{key}: {replayed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_with_a_report_and_exit_1() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let fixture = Fixture::start(vec![reply("late", &[], 1).wait(Duration::from_secs(30))])
        .await
        .expect("a port");
    let config = write_config(dir.path(), &format!("{}/v1", fixture.url()), "");
    let recording = dir.path().join("cancelled.json");
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(["agent", &config, "--task", "Wait.", "--json", "--record"])
        .arg(&recording)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let pid = child.id().expect("a pid");
    for _ in 0..100 {
        if fixture.count() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fixture.count(), 1, "the model was called");
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
    assert!(status.is_ok_and(|s| s.success()));
    let out = child.wait_with_output().await.expect("exits");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report: Value =
        serde_json::from_str(text(&out.stdout).lines().last().expect("a report")).expect("JSON");
    assert_eq!(
        (report["outcome"].as_str(), report["reason"].as_str()),
        (Some("aborted"), Some("cancelled"))
    );
    // The recording ends with the call the cancel interrupted, and replays to the same report
    // (it used to run out of model turns: exit 2, "model script exhausted").
    let recorded: Value =
        serde_json::from_str(&std::fs::read_to_string(&recording).expect("recorded"))
            .expect("JSON");
    assert_eq!(
        recorded["model"]["turns"][0]["cancelled"], true,
        "{recorded}"
    );
    replays_cancelled(&recording, &report).await;
}

/// Ctrl-C while a tool runs (server-everything's long operation): the run ends `aborted
/// (cancelled)`, and the recording keeps the interrupted call as a `cancelled` result, not as
/// the `timeout` a call the tool timeout drops is recorded as, so its replay pulls the kill
/// switch at the same call and ends with the same report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_during_a_tool_call_is_recorded_and_replays_to_the_same_report() {
    use tokio::io::AsyncBufReadExt as _;
    let Some(peers) = peers::dir() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let slow = "trigger-long-running-operation";
    let fixture = Fixture::start(vec![reply(
        "",
        &[(slow, json!({ "duration": 120, "steps": 1 }))],
        1,
    )])
    .await
    .expect("a port");
    let config = keyless_config(
        dir.path(),
        &fixture.url(),
        &format!(
            "[[mcp]]\nname = \"everything\"\ncommand = [{:?}, {:?}, \"stdio\"]\n\
             tools = [{slow:?}]\ntool_timeout_ms = 300000\n",
            peers::node(&peers),
            peers::server_js(&peers, "server-everything"),
        ),
    );
    let recording = dir.path().join("cancelled.json");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_terminus"))
        .arg("agent")
        .arg(&config)
        .args(["--task", "Wait.", "--json", "--record"])
        .arg(&recording)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let pid = child.id().expect("a pid");
    // The progress line of the step into `Acting` comes just before the batch starts.
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().expect("stderr piped")).lines();
    let mut seen = Vec::new();
    let acting = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = stderr.next_line().await {
            let found = line.contains("Acting");
            seen.push(line);
            if found {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(acting, Ok(true), "no step into Acting: {seen:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
    assert!(status.is_ok_and(|s| s.success()));
    let out = child.wait_with_output().await.expect("exits");
    let mut rest = Vec::new();
    while let Ok(Some(line)) = stderr.next_line().await {
        rest.push(line);
    }
    assert_eq!(out.status.code(), Some(1), "{rest:?}");
    let report: Value =
        serde_json::from_str(text(&out.stdout).lines().last().expect("a report")).expect("JSON");
    assert_eq!(
        (report["outcome"].as_str(), report["reason"].as_str()),
        (Some("aborted"), Some("cancelled")),
        "{report}"
    );
    let recorded: Value =
        serde_json::from_str(&std::fs::read_to_string(&recording).expect("recorded"))
            .expect("JSON");
    assert_eq!(
        recorded["tools"][slow]["results"],
        json!([{ "cancelled": true }]),
        "{recorded}"
    );
    replays_cancelled(&recording, &report).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_errors_exit_2_naming_the_key_and_an_unreachable_model_is_a_model_error() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let config = write_config(dir.path(), "http://127.0.0.1:9/v1", "");
    let typo = std::fs::read_to_string(&config)
        .expect("read")
        .replace("\"openai\"", "\"openia\"");
    std::fs::write(&config, typo).expect("write");
    let out = terminus(vec![
        "agent".into(),
        config.clone(),
        "--task".into(),
        "x".into(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("[model].provider: unknown provider \"openia\", expected one of \"openai\", \"openai-responses\", \"anthropic\""),
        "{}",
        text(&out.stderr)
    );

    // Nobody listens on port 9: the kernel retries the connection errors, then names them.
    let config = write_config(dir.path(), "http://127.0.0.1:9/v1", "");
    let out = terminus(vec![
        "agent".into(),
        config,
        "--task".into(),
        "x".into(),
        "--json".into(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report: Value =
        serde_json::from_str(text(&out.stdout).lines().last().expect("a report")).expect("JSON");
    assert_eq!(report["reason"], "model_error");
    assert_eq!(report["model_calls"], 4, "the first call and 3 retries");
    assert!(
        text(&out.stderr).contains("cannot connect"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_replays_offline_with_the_same_report() {
    let Some(peers) = peers::dir() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = dir.path().canonicalize().expect("a real path").join("work");
    std::fs::create_dir_all(&root).expect("mkdir");
    let plan = root.join("plan.md");
    let fixture = Fixture::start(vec![
        Response::json(
            429,
            r#"{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}"#,
        )
        .header("retry-after-ms", "20"),
        reply(
            "",
            &[
                ("write_todos", todos("in_progress")),
                ("list_directory", json!({ "path": root })),
            ],
            1,
        ),
        reply("I will now write the plan.", &[], 2),
        reply(
            "",
            &[("read_text_file", json!({ "path": "/etc/hostname" }))],
            3,
        ),
        reply(
            "",
            &[
                ("write_file", json!({ "path": plan, "content": "# Plan\n" })),
                ("write_todos", todos("completed")),
            ],
            4,
        ),
        reply("Plan written.", &[], 5),
    ])
    .await
    .expect("a port");
    let mcp = format!(
        "{}[context]\nwindow = 32000\n",
        fs_server(&peers, &root.to_string_lossy())
    );
    let config = write_config(dir.path(), &format!("{}/v1", fixture.url()), &mcp);
    let recording = dir.path().join("recording.json");
    let live = terminus(vec![
        "agent".into(),
        config,
        "--task".into(),
        "Write the plan.".into(),
        "--record".into(),
        recording.to_string_lossy().into_owned(),
        "--json".into(),
    ])
    .await;
    assert_eq!(live.status.code(), Some(0), "{}", text(&live.stderr));
    let recorded = std::fs::read_to_string(&recording).expect("the recording");
    assert!(!recorded.contains("sk-agent-test-key"));
    let scenario: Value = serde_json::from_str(&recorded).expect("JSON");
    assert_eq!(scenario["model"]["turns"][0]["error"], "rate_limited");
    assert_eq!(scenario["model"]["turns"][0]["retry_after_ms"], 20);
    assert_eq!(
        scenario["system_prompt"],
        "You are a careful software architect."
    );
    assert_eq!(scenario["context"]["tokenizer"], "o200k_base");
    assert!(
        scenario["tools"]["read_text_file"]["description"]
            .as_str()
            .is_some_and(|d| !d.is_empty())
    );
    assert_eq!(
        scenario["tools"]["read_text_file"]["results"][0]["error"], "invalid_arguments",
        "a path outside the server's allowed directories is an argument the model can fix"
    );
    assert!(
        scenario["tools"].get("write_todos").is_none(),
        "the built-in is not scripted"
    );

    // Offline: no model server, no MCP server.
    drop(fixture);
    let replay = terminus(vec![
        "run".into(),
        recording.to_string_lossy().into_owned(),
        "--json".into(),
    ])
    .await;
    assert_eq!(replay.status.code(), Some(0), "{}", text(&replay.stderr));
    let report = |out: &Output| -> Value {
        let mut v: Value =
            serde_json::from_str(text(&out.stdout).lines().last().expect("a report"))
                .expect("JSON");
        v.as_object_mut().expect("an object").remove("execution");
        v
    };
    let (live, replayed) = (report(&live), report(&replay));
    assert_eq!(live["reason"], "verified");
    assert_eq!(live["model_calls"], 6);
    assert_eq!(live, replayed, "every field but the execution id");
}

/// `[verifier] kind = "model"`: the same model judges each completion claim. A rejection's
/// missing items reach the model with the nudge; the verifier's own prompt never shows the
/// kernel's nudges (rule 4); the second claim is accepted: verified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_verifier_judges_claims_through_terminus_agent() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let fixture = Fixture::start(vec![
        reply("The plan is done.", &[], 1),
        reply(
            "{\"complete\": false, \"missing\": [\"the risks section\"]}",
            &[],
            2,
        ),
        reply("Added the risks section; the plan is done.", &[], 3),
        reply("{\"complete\": true}", &[], 4),
    ])
    .await
    .expect("a port");
    let config = keyless_config(
        dir.path(),
        &fixture.url(),
        "[policy]\nverify_completion = true\nmax_verification_failures = 3\n\
         [verifier]\nkind = \"model\"\n",
    );
    let out = terminus(vec![
        "agent".into(),
        config.to_string_lossy().into_owned(),
        "--task".into(),
        "Write the plan, with a risks section.".into(),
        "--json".into(),
    ])
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = last_json(&out.stdout);
    assert_eq!(report["reason"], "verified", "{report}");
    assert_eq!(report["verification_failures"], 1, "{report}");
    assert_eq!(report["stats"]["verifications"], 2, "{report}");
    assert_eq!(
        report["result"],
        "Added the risks section; the plan is done."
    );
    let requests: Vec<String> = fixture
        .requests()
        .iter()
        .map(|r| r.json().to_string())
        .collect();
    assert_eq!(requests.len(), 4, "two turns, two verdicts");
    // The model's second call carries the verifier's missing item.
    assert!(requests[2].contains("the risks section"), "{}", requests[2]);
    // Each verifier call asks for a verdict on the claim, and never shows the kernel's nudge.
    for verdict in [&requests[1], &requests[3]] {
        assert!(verdict.contains("\\\"complete\\\""), "{verdict}");
        assert!(
            !verdict.contains("found the task incomplete"),
            "the verifier saw the kernel's nudge: {verdict}"
        );
    }
    assert!(
        requests[3].contains("Added the risks section"),
        "{}",
        requests[3]
    );
}

/// The architect on the real filesystem server with `approval = ["write_file"]`, run by
/// `terminus agent` into a journal as `execution` until it suspends at the held write (exit 5).
struct HeldWrite {
    _dir: tempfile::TempDir,
    fixture: Fixture,
    plan: std::path::PathBuf,
    journal: String,
    execution: &'static str,
    suspended: Value,
}

impl HeldWrite {
    async fn start(peers: &std::path::Path, execution: &'static str) -> HeldWrite {
        let dir = tempfile::tempdir().expect("a temp dir");
        let root = dir.path().canonicalize().expect("a real path").join("work");
        let (script, plan) = architect(&root);
        let fixture = Fixture::start(script.to_vec()).await.expect("a port");
        let mcp = format!(
            "{}approval = [\"write_file\"]\n",
            fs_server(peers, &root.to_string_lossy())
        );
        let config = write_config(dir.path(), &format!("{}/v1", fixture.url()), &mcp);
        let journal = dir.path().join("journal.db").to_string_lossy().into_owned();
        let mut held = HeldWrite {
            _dir: dir,
            fixture,
            plan,
            journal,
            execution,
            suspended: Value::Null,
        };
        let mut run = held.args("agent", &["--json"]);
        run.splice(
            1..1,
            [
                config,
                "--task".into(),
                "Write an implementation plan to plan.md".into(),
            ],
        );
        let out = terminus(run).await;
        assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
        held.suspended = last_json(&out.stdout);
        held
    }

    /// `terminus COMMAND --journal J --execution ID EXTRA...`.
    fn args(&self, command: &str, extra: &[&str]) -> Vec<String> {
        [
            command,
            "--journal",
            &self.journal,
            "--execution",
            self.execution,
        ]
        .iter()
        .chain(extra)
        .map(|s| (*s).to_owned())
        .collect()
    }
}

/// `approval = ["write_file"]` on the filesystem server: the architect's write waits for a
/// person (exit 5, nothing written), is approved from another process, and the resume writes
/// the plan once without asking the model again for any journaled turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_write_waits_for_approval_and_runs_once_when_approved() {
    let Some(peers) = peers::dir() else { return };
    let held = HeldWrite::start(&peers, "live-held").await;
    assert_eq!(held.suspended["pending"][0]["name"], "write_file");
    assert_eq!(held.suspended["pending"][0]["kind"], "approval");
    assert!(!held.plan.exists(), "a held write does not run");
    let served = held.fixture.requests().len();
    assert_eq!(served, 4, "the model was asked up to the held write");

    let approve = terminus(held.args("approve", &["--all"])).await;
    assert_eq!(approve.status.code(), Some(0), "{}", text(&approve.stderr));
    let resumed = terminus(held.args("resume", &["--json"])).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    assert_eq!(last_json(&resumed.stdout)["outcome"], "complete");
    assert_eq!(
        std::fs::read_to_string(&held.plan).expect("written once approved"),
        "# Plan\n1. Fix parse.\n"
    );
    // Turns 5 and 6 only: nothing journaled was asked again.
    assert_eq!(held.fixture.requests().len(), 6);
}

/// The same held write approved with edited arguments (`terminus approve --arguments`): the
/// real filesystem server writes the person's content, once, and the model's next request says
/// the call ran with edited arguments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_write_approved_with_edited_arguments_runs_once_with_them() {
    let Some(peers) = peers::dir() else { return };
    let held = HeldWrite::start(&peers, "edited").await;
    let call = held.suspended["pending"][0]["call_id"]
        .as_str()
        .expect("a held call")
        .to_owned();
    let content = "# Plan\n1. Fix parse, with a test first.\n";
    let edited = json!({ "path": held.plan, "content": content });
    let approve = terminus(held.args(
        "approve",
        &["--call", &call, "--arguments", &edited.to_string()],
    ))
    .await;
    assert_eq!(approve.status.code(), Some(0), "{}", text(&approve.stderr));
    let resumed = terminus(held.args("resume", &["--json"])).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    assert_eq!(last_json(&resumed.stdout)["outcome"], "complete");
    assert_eq!(
        std::fs::read_to_string(&held.plan).expect("written once approved"),
        content
    );
    let requests = held.fixture.requests();
    assert_eq!(requests.len(), 6);
    let told = requests[4].json().to_string();
    assert!(
        told.contains("A person edited this call's arguments before approving it; it ran with"),
        "{told}"
    );
}

/// The stderr of `terminus agent` on the filesystem server with `sections` before its
/// `[[mcp]]` entry and `entry` added to it, which must refuse to start (exit 2) without calling
/// the model.
async fn refused_start(peers: &std::path::Path, sections: &str, entry: &str) -> String {
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = dir.path().canonicalize().expect("a real path").join("work");
    std::fs::create_dir_all(&root).expect("mkdir");
    let fixture = Fixture::start(Vec::new()).await.expect("a port");
    let rest = format!(
        "{sections}{}{entry}",
        fs_server(peers, &root.to_string_lossy())
    );
    let config = write_config(dir.path(), &format!("{}/v1", fixture.url()), &rest);
    let out = terminus(vec!["agent".into(), config, "--task".into(), "t".into()]).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        fixture.requests().is_empty(),
        "no model call before the tools are checked"
    );
    stderr
}

/// A held tool the server does not offer is a typo that would let a call run unasked: the start
/// is refused, naming it and listing what the server offers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_for_a_tool_the_server_lacks_stops_the_start() {
    let Some(peers) = peers::dir() else { return };
    let stderr = refused_start(&peers, "", "approval = [\"write_flie\"]\n").await;
    assert!(
        stderr.contains("`write_flie`") && stderr.contains("write_file"),
        "{stderr}"
    );
}

/// A `[context] keep` naming a tool the agent does not have would keep nothing: the start is
/// refused once the servers have listed their tools, naming the entry and listing the tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_tool_the_agent_lacks_stops_the_start() {
    let Some(peers) = peers::dir() else { return };
    let sections = "[context]\nwindow = 64000\nkeep = [\"read_text_file\", \"read_fle\"]\n";
    let stderr = refused_start(&peers, sections, "").await;
    assert!(
        stderr.contains("[context].keep[1]: unknown tool \"read_fle\"")
            && stderr.contains("read_text_file"),
        "{stderr}"
    );
}

/// `[agent] context_files` are appended to the system prompt under their names (one from the
/// config's folder, one from the folder the agent starts in), and `[context] max_system_tokens`
/// cuts the whole prompt to fit with the truncation marker: the request the model server
/// received holds the cut prompt, and the cut is reported. A missing file, and a cap of 0, stop
/// the start naming the field. (Its `keep` names its one tool, `write_todos`: a valid entry
/// starts.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_files_join_the_system_prompt_and_max_system_tokens_cuts_it() {
    let home = tempfile::tempdir().expect("a temp dir");
    let work = tempfile::tempdir().expect("a temp dir");
    let agents: String = (1..=200)
        .map(|i| format!("Rule {i}: keep the tests green and the diff small.\n"))
        .collect();
    std::fs::write(home.path().join("AGENTS.md"), &agents).expect("write AGENTS.md");
    std::fs::write(
        work.path().join("NOTES.md"),
        "Notes from the work folder.\n",
    )
    .expect("write NOTES.md");
    let fixture = Fixture::start(vec![reply("Done.", &[], 1)])
        .await
        .expect("a port");
    let config_text = |context_files: &str, max: u32| {
        format!(
            "system_prompt = \"You are careful.\"\n\
             [agent]\ncontext_files = {context_files}\n\
             [model]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"gpt-4o-mini\"\n\
             stream = false\ntimeout_ms = 5000\n\
             [context]\nwindow = 100000\nmax_system_tokens = {max}\nkeep = [\"write_todos\"]\n",
            fixture.url()
        )
    };
    let config = home.path().join("agent.toml");
    let run = |config: &std::path::Path| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_terminus"))
            .arg("agent")
            .arg(config)
            .args(["--task", "Check the repository.", "--json"])
            .current_dir(work.path())
            .output()
    };
    std::fs::write(&config, config_text(r#"["NOTES.md", "AGENTS.md"]"#, 300)).expect("write");
    let out = run(&config).await.expect("the binary runs");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = last_json(&out.stdout);
    assert_eq!(report["reason"], "answered", "{report}");

    let whole = format!(
        "You are careful.\n\n## NOTES.md\n\nNotes from the work folder.\n\n## AGENTS.md\n\n{}",
        agents.trim_end()
    );
    let tokenizer = terminus_tokenizer::for_model("gpt-4o-mini");
    let total = tokenizer.count(&whole);
    assert!(total > 2_000, "{total}");
    let sent: Vec<Value> = fixture.requests().iter().map(|r| r.json()).collect();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["messages"][0]["role"], "system");
    let system = sent[0]["messages"][0]["content"]
        .as_str()
        .expect("a system prompt");
    assert!(tokenizer.count(system) <= 300, "{system}");
    let cut = report["context"]["system_cut_tokens"]
        .as_u64()
        .expect("the cut is reported");
    let marker = format!(
        "\n\n[terminus: cut to fit the context, {cut} of {total} tokens not shown; the system \
         prompt is capped at context.max_system_tokens = 300.]"
    );
    let head = system
        .strip_suffix(&marker)
        .unwrap_or_else(|| panic!("no marker {marker:?} at the end of {system:?}"));
    assert!(whole.starts_with(head), "{head}");
    assert!(
        head.starts_with(
            "You are careful.\n\n## NOTES.md\n\nNotes from the work folder.\n\n## AGENTS.md\n\n\
             Rule 1: keep"
        ),
        "{head}"
    );
    assert!(!system.contains("Rule 200:"), "the end is cut");
    assert_eq!(u64::from(tokenizer.count(head)) + cut, u64::from(total));
    assert!(
        stderr.contains(&format!(
            "terminus: warning: the system prompt was cut to fit context.max_system_tokens = \
             300: {cut} of {total} tokens not shown\n"
        )),
        "{stderr}"
    );
    // The task follows the prompt, whole.
    assert_eq!(sent[0]["messages"][1]["content"], "Check the repository.");

    // A file in neither folder, and a cap of 0: exit 2 before any model call.
    std::fs::write(&config, config_text(r#"["MISSING.md"]"#, 300)).expect("write");
    let out = run(&config).await.expect("the binary runs");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("[agent].context_files[0]: \"MISSING.md\": no such file"),
        "{stderr}"
    );
    std::fs::write(&config, config_text(r#"["AGENTS.md"]"#, 0)).expect("write");
    let out = run(&config).await.expect("the binary runs");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("[context].max_system_tokens: must be at least 1"),
        "{stderr}"
    );
    assert_eq!(fixture.requests().len(), 1, "no call for a bad config");
}

/// A server that changes its tool list during a live run (`notifications/tools/list_changed`,
/// from a server on the official TypeScript SDK): the next request offers the new list, the tool
/// that appeared runs, a call of the removed one is answered `not_found`, and the change is a
/// progress line and the report's `tools_changed`, kept in the journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_list_change_is_offered_at_the_next_model_call_and_reported() {
    let Some(peers) = peers::dir() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let fixture = Fixture::start(vec![
        reply("", &[("swap", json!({}))], 1),
        reply("", &[("greet", json!({})), ("echo", json!({}))], 2),
        reply("Greeted.", &[], 3),
    ])
    .await
    .expect("a port");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tools/tests/servers/list_changed.js");
    let config = keyless_config(
        dir.path(),
        &fixture.url(),
        &format!(
            "[[mcp]]\nname = \"changing\"\ncommand = [{:?}, {:?}, {:?}]\n",
            peers::node(&peers),
            script.to_string_lossy(),
            peers.join("node_modules").to_string_lossy(),
        ),
    );
    let journal = dir.path().join("journal.db").to_string_lossy().into_owned();
    let recording = dir.path().join("recording.json");
    let out = terminus(vec![
        "agent".into(),
        config.to_string_lossy().into_owned(),
        "--task".into(),
        "Greet.".into(),
        "--journal".into(),
        journal.clone(),
        "--execution".into(),
        "changing-1".into(),
        "--record".into(),
        recording.to_string_lossy().into_owned(),
        "--json".into(),
    ])
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "terminus: the tool list changed before model call 2: added greet; removed echo\n"
        ),
        "{stderr}"
    );
    let report = last_json(&out.stdout);
    assert_eq!(report["outcome"], "complete");
    assert_eq!(
        report["tools_changed"],
        json!([{ "model_call": 2, "added": ["greet"], "removed": ["echo"], "changed": [] }])
    );
    let sent: Vec<Value> = fixture.requests().iter().map(|r| r.json()).collect();
    let offered = |i: usize| -> Vec<String> {
        sent[i]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(offered(0), ["echo", "swap", "write_todos"]);
    assert_eq!(offered(1), ["greet", "swap", "write_todos"]);
    let results: Vec<&str> = sent[2]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(results[1], "hello from greet", "{results:?}");
    assert!(results[2].starts_with("error (not_found):"), "{results:?}");
    // The journal keeps the report with the change.
    let db = std::fs::read(&journal).expect("the journal");
    assert!(
        db.windows(13).any(|w| w == b"tools_changed"),
        "the stored report names the change"
    );
    // The recording has the tool that appeared, with its result.
    let recorded: Value =
        serde_json::from_str(&std::fs::read_to_string(&recording).expect("the recording"))
            .expect("JSON");
    assert_eq!(recorded["tools"]["greet"]["description"], "Say hello.");
    assert_eq!(
        recorded["tools"]["greet"]["results"][0]["ok"],
        "hello from greet"
    );
}

/// `elicitation = "person"` on a server whose tool asks its user to confirm (a form
/// elicitation, from a server on the official TypeScript SDK): nobody can answer while the run
/// goes on, so the question is cancelled (the server deletes nothing) and the run suspends
/// (exit 5) with the question; `terminus answer` fills the form and the resume runs the call
/// again, whose question gets the answer: the branch is deleted once. A second execution's
/// question is declined with `terminus deny`: nothing is deleted and the model is told so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_a_tool_asks_suspends_the_run_until_a_person_answers_it() {
    let Some(peers) = peers::dir() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = dir.path().join("deleted.log");
    let delete = || reply("", &[("delete_branch", json!({"branch": "main"}))], 1);
    let fixture = Fixture::start(vec![
        delete(),
        delete(),
        reply("Deleted main.", &[], 2),
        reply("Kept main.", &[], 3),
    ])
    .await
    .expect("a port");
    let config = keyless_config(dir.path(), &fixture.url(), &asking_server(&peers, &log));
    let journal = dir.path().join("journal.db").to_string_lossy().into_owned();
    let on = |command: &str, execution: &str, extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = [command, "--journal", &journal, "--execution", execution]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    };
    let config = config.to_string_lossy().into_owned();
    let start = |execution: &str| -> Vec<String> {
        let task = "Delete the main branch.";
        ["agent", &config, "--task", task, "--journal", &journal]
            .into_iter()
            .chain(["--execution", execution, "--json"])
            .map(str::to_owned)
            .collect()
    };
    let deleted = || std::fs::read_to_string(&log).unwrap_or_default();

    for execution in ["asked-1", "asked-2"] {
        let out = terminus(start(execution)).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{stderr}");
        let suspended = last_json(&out.stdout);
        assert_eq!(suspended["status"], "suspended");
        let pending = &suspended["pending"][0];
        assert_eq!(pending["kind"], "elicitation", "{suspended}");
        assert_eq!(pending["call_id"], "call_1_0");
        assert_eq!(pending["question"]["message"], "Delete branch main?");
        assert_eq!(
            pending["question"]["schema"]["required"],
            json!(["confirm"])
        );
        assert!(
            stderr.contains("it asks \"Delete branch main?\""),
            "{stderr}"
        );
        assert_eq!(deleted(), "", "a question nobody answered deletes nothing");
    }
    let inspect = terminus(on("inspect", "asked-1", &[])).await;
    let shown = text(&inspect.stdout);
    assert!(
        shown.contains("elicitation call_1_0 delete_branch"),
        "{shown}"
    );
    assert!(shown.contains("it asks \"Delete branch main?\""), "{shown}");

    // The answer is the form's content: anything but an object is refused, naming the call.
    let wrong = terminus(on(
        "answer",
        "asked-1",
        &["--call", "call_1_0", "--result", "[true]"],
    ))
    .await;
    assert_eq!(wrong.status.code(), Some(2), "{}", text(&wrong.stderr));
    assert!(
        text(&wrong.stderr).contains("`call_1_0`"),
        "{}",
        text(&wrong.stderr)
    );
    let form = r#"{"confirm": true, "reason": "merged"}"#;
    let answer = terminus(on(
        "answer",
        "asked-1",
        &["--call", "call_1_0", "--result", form],
    ))
    .await;
    assert_eq!(answer.status.code(), Some(0), "{}", text(&answer.stderr));
    let deny = terminus(on("deny", "asked-2", &["--call", "call_1_0"])).await;
    assert_eq!(deny.status.code(), Some(0), "{}", text(&deny.stderr));

    let resumed = terminus(on("resume", "asked-1", &["--json"])).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    assert_eq!(last_json(&resumed.stdout)["outcome"], "complete");
    assert_eq!(deleted(), "deleted main (merged)\n");
    let declined = terminus(on("resume", "asked-2", &["--json"])).await;
    assert_eq!(
        declined.status.code(),
        Some(0),
        "{}",
        text(&declined.stderr)
    );
    assert_eq!(
        deleted(),
        "deleted main (merged)\n",
        "a declined form deletes nothing"
    );
    // A resume of a finished run runs nothing again.
    let again = terminus(on("resume", "asked-1", &["--json"])).await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(deleted(), "deleted main (merged)\n", "deleted once");

    // Each model call was made once; the results the model got are the second runs'.
    let sent: Vec<Value> = fixture.requests().iter().map(|r| r.json()).collect();
    assert_eq!(sent.len(), 4);
    let tool_result = |i: usize| -> String {
        sent[i]["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["role"] == "tool")
            .filter_map(|m| m["content"].as_str())
            .collect()
    };
    assert_eq!(tool_result(2), "deleted main");
    assert_eq!(tool_result(3), "kept main: the user chose decline");
}

/// An `[[mcp]]` server whose authorization server wants a person to log in: `terminus agent`
/// runs nothing and exits 5 with the login URL (kind `authorization`, on stderr and as the
/// JSON line), `terminus authorize` completes the login with the address the browser is sent
/// to, and the agent run again uses the kept token: the tool answers as the person who logged
/// in, and the token is in no output and not in the journal. A worker, which cannot wait for a
/// person, marks such an execution failed (exit 5, the URL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_wants_a_person_to_log_in_suspends_the_agent_until_authorize() {
    use std::os::unix::fs::PermissionsExt as _;
    let Some(peers) = peers::dir() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let (_server, base) = peers::login_server(&peers, &dir.path().join("login.log")).await;
    let fixture = Fixture::start(vec![
        reply("", &[("whoami", json!({}))], 1),
        reply("You are alice.", &[], 2),
    ])
    .await
    .expect("a port");
    let config = keyless_config(
        dir.path(),
        &fixture.url(),
        &format!(
            "[[mcp]]\nname = \"hosted\"\nurl = \"{base}/mcp\"\n\
             auth = {{ credentials_file = \"logins/hosted.json\" }}\n"
        ),
    );
    let config = config.to_string_lossy().into_owned();
    let journal = dir.path().join("journal.db").to_string_lossy().into_owned();
    let agent = |execution: &str| -> Vec<String> {
        [
            "agent",
            &config,
            "--task",
            "Who am I?",
            "--journal",
            &journal,
        ]
        .into_iter()
        .chain(["--execution", execution, "--json"])
        .map(str::to_owned)
        .collect()
    };

    let out = terminus(agent("who-1")).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    let suspended = last_json(&out.stdout);
    assert_eq!(suspended["status"], "suspended");
    assert_eq!(suspended["execution"], Value::Null, "nothing was run");
    let pending = &suspended["pending"][0];
    assert_eq!(
        (&pending["kind"], &pending["server"]),
        (&json!("authorization"), &json!("hosted"))
    );
    let url = pending["url"].as_str().expect("the login URL");
    assert!(url.starts_with(&format!("{base}/authorize?")), "{url}");
    assert!(
        stderr.contains(&format!("authorization hosted {url}")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "`terminus authorize {config} --server hosted 'ADDRESS'`"
        )),
        "{stderr}"
    );
    assert_eq!(fixture.count(), 0, "no model call before the login");
    let runs = terminus(vec!["runs".into(), "--journal".into(), journal.clone()]).await;
    assert!(
        !text(&runs.stdout).contains("who-1"),
        "{}",
        text(&runs.stdout)
    );

    // A worker cannot wait for a person: it marks the execution failed, exit 5, with the URL.
    let submit = terminus(vec![
        "submit".into(),
        config.clone(),
        "--task".into(),
        "Who am I?".into(),
        "--journal".into(),
        journal.clone(),
        "--execution".into(),
        "who-w".into(),
    ])
    .await;
    assert_eq!(submit.status.code(), Some(0), "{}", text(&submit.stderr));
    let worker = terminus(vec![
        "worker".into(),
        "--journal".into(),
        journal.clone(),
        "--until-idle".into(),
        "--poll-ms".into(),
        "10".into(),
    ])
    .await;
    let said = text(&worker.stderr);
    assert_eq!(worker.status.code(), Some(0), "{said}");
    assert!(
        said.contains("cannot run who-w")
            && said.contains(&format!(
                "waits for a person to log in at {base}/authorize?"
            ))
            && said.contains("(marked failed, exit 5)"),
        "{said}"
    );
    assert_eq!(fixture.count(), 0, "no model call from the worker either");

    let address = peers::log_in(url, "alice", false);
    let wrong = terminus(vec![
        "authorize".into(),
        config.clone(),
        "--server".into(),
        "elsewhere".into(),
        address.clone(),
    ])
    .await;
    assert_eq!(wrong.status.code(), Some(2));
    assert!(
        text(&wrong.stderr)
            .contains("no [[mcp]] entry is named `elsewhere` (the entries: `hosted`)"),
        "{}",
        text(&wrong.stderr)
    );
    let authorized = terminus(vec![
        "authorize".into(),
        config.clone(),
        "--server".into(),
        "hosted".into(),
        address.clone(),
    ])
    .await;
    let said = text(&authorized.stderr);
    assert_eq!(authorized.status.code(), Some(0), "{said}");
    assert!(said.contains("logged in to [[mcp]] `hosted`"), "{said}");
    let kept = dir.path().join("logins/hosted.json");
    let mode = std::fs::metadata(&kept).expect("kept").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    // The same address again: the login it completed is used up.
    let again = terminus(vec![
        "authorize".into(),
        config.clone(),
        "--server".into(),
        "hosted".into(),
        address,
    ])
    .await;
    assert_eq!(again.status.code(), Some(2));
    assert!(
        text(&again.stderr).contains("no authorization waits for the redirect's state"),
        "{}",
        text(&again.stderr)
    );

    let out = terminus(agent("who-2")).await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = last_json(&out.stdout);
    assert_eq!(report["outcome"], "complete");
    assert_eq!(report["result"], "You are alice.");
    let sent: Vec<Value> = fixture.requests().iter().map(|r| r.json()).collect();
    let result = sent[1]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("the tool's result");
    assert_eq!(result["content"], "hello alice");
    let token: Value =
        serde_json::from_str(&std::fs::read_to_string(&kept).expect("kept")).expect("JSON");
    let token = token["credentials"]["token_response"]["access_token"]
        .as_str()
        .expect("the kept token")
        .to_owned();
    assert!(!stderr.contains(&token) && !text(&out.stdout).contains(&token));
    let db = std::fs::read(&journal).expect("the journal");
    assert!(!db.windows(token.len()).any(|w| w == token.as_bytes()));
}
