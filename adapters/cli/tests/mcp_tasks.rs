//! A long-running MCP tool across a crash, with real processes: `terminus agent` starts a job as
//! an MCP task on a server whose jobs outlive the client's session (`tools/tests/servers/
//! tasks.js`, the official TypeScript SDK over streamable HTTP), is killed (SIGKILL) while it
//! waits, and `terminus resume` waits for the same task: the server saw one `tools/call`, and
//! the run completes with the task's result. The same on PostgreSQL, taken up by a `terminus
//! worker` that finds the killed run orphaned.

mod common;

use common::{KEY, last_json, postgres_url, reply, text, write_config};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use terminus_fixture::{Fixture, Request, peers};
use tokio::io::AsyncBufReadExt as _;

/// The task server, started on a free port of 127.0.0.1; killed when dropped.
struct TaskServer {
    _child: tokio::process::Child,
    port: u16,
}

impl TaskServer {
    async fn start(peers: &Path) -> TaskServer {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/tests/servers/tasks.js");
        let mut child = tokio::process::Command::new(peers::node(peers))
            .arg(script)
            .arg(peers.join("node_modules"))
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts");
        let stdout = child.stdout.take().expect("piped");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the server says its port")
            .expect("reads")
            .expect("a line");
        let port: Value = serde_json::from_str(&first).expect("JSON");
        let port = u16::try_from(port["port"].as_u64().expect("a port")).expect("a port");
        TaskServer {
            _child: child,
            port,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// The requests the server received, by method.
    async fn counts(&self) -> Value {
        let body = reqwest::get(format!("http://127.0.0.1:{}/counts", self.port))
            .await
            .expect("the server answers")
            .text()
            .await
            .expect("a body");
        serde_json::from_str(&body).expect("JSON")
    }
}

/// The agent's model: turn 0 starts the build (a 4-second job), turn 1 answers with what the
/// build said.
async fn model() -> Fixture {
    Fixture::with(|_, request: &Request| {
        let turns = request.json()["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        match turns {
            0 => reply(
                "",
                &[("build", json!({ "target": "app", "seconds": 4 }))],
                1,
            ),
            _ => reply("The build finished: built app (job 1).", &[], 2),
        }
    })
    .await
    .expect("a port")
}

fn config(home: &Path, model: &Fixture, server: &TaskServer) -> String {
    let config = write_config(
        home,
        &format!("{}/v1", model.url()),
        &format!(
            "[[mcp]]\nname = \"builds\"\nurl = {:?}\ntasks = [\"build\"]\ntool_timeout_ms = 30000\n",
            server.url()
        ),
    );
    // The build is the task's one action: nothing to verify with a file written.
    let body = std::fs::read_to_string(&config)
        .expect("read")
        .replace("completion_requires = [\"write_file\"]\n", "");
    std::fs::write(&config, body).expect("write");
    config
}

fn terminus_in(dir: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_terminus"));
    cmd.current_dir(dir).env("TERMINUS_TEST_KEY", KEY);
    cmd
}

/// `terminus agent CONFIG --task "Build the app" --json` with `extra`, started in `home`.
fn agent(home: &Path, config: &str, extra: &[&str]) -> tokio::process::Child {
    terminus_in(home)
        .args(["agent", config, "--task", "Build the app", "--json"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starts")
}

/// Waits until the server has seen `n` polls of a task (`tasks/get`): the job runs, and the
/// agent waits for it.
async fn polled(server: &TaskServer, n: u64) {
    let started = Instant::now();
    while server.counts().await["tasks/get"].as_u64().unwrap_or(0) < n {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the task was never polled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Resumes execution `id` until the killed process's claim is waited out (exit 4 until its
/// lease expires).
async fn resume(home: &Path, journal: &str, id: &str, recording: &str) -> std::process::Output {
    loop {
        let out = terminus_in(home)
            .args(["resume", "--journal", journal, "--execution", id, "--json"])
            .args(["--record", recording])
            .output()
            .await
            .expect("runs");
        if out.status.code() != Some(4) {
            return out;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The journal's entries of kind `kind`, from `terminus inspect --json`.
async fn entries(home: &Path, journal: &str, id: &str) -> Value {
    let out = terminus_in(home)
        .args(["inspect", "--journal", journal, "--execution", id, "--json"])
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    last_json(&out.stdout)
}

/// Runs `terminus worker --until-idle` on `journal` until one picks up execution `id` (the
/// killed process's lease expired): that execution's report line.
async fn worker(home: &Path, journal: &str, id: &str) -> Value {
    let started = Instant::now();
    loop {
        let out = terminus_in(home)
            .args([
                "worker",
                "--journal",
                journal,
                "--until-idle",
                "--lease-ms",
                "500",
            ])
            .output()
            .await
            .expect("runs");
        let ours = text(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|r| r["execution"] == id);
        if let Some(report) = ours {
            return report;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no worker took up {id}: {}",
            text(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How the killed run is taken up again.
#[derive(Clone, Copy, PartialEq)]
enum Again {
    /// `terminus resume`, recording the resumed run.
    Resume,
    /// A `terminus worker` that finds the execution orphaned.
    Worker,
}

async fn killed_while_waiting(journal: &str, id: &str, again: Again) {
    let Some(peers) = peers::dir() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let home = dir.path().canonicalize().expect("a real path");
    let server = TaskServer::start(&peers).await;
    let model = model().await;
    let config = config(&home, &model, &server);
    let journal = if journal.is_empty() {
        home.join("journal.db").to_string_lossy().into_owned()
    } else {
        journal.to_owned()
    };
    let mut agent = agent(
        &home,
        &config,
        &[
            "--journal",
            &journal,
            "--execution",
            id,
            "--lease-ms",
            "500",
        ],
    );
    // The job runs and the agent polls it: kill the agent there.
    polled(&server, 2).await;
    agent.start_kill().expect("SIGKILL");
    let killed = agent.wait_with_output().await.expect("reaped");
    assert_eq!(killed.status.code(), None, "killed by a signal");
    assert_eq!(
        server.counts().await["builds_finished"],
        0,
        "killed mid-job"
    );

    let recording = home.join("recording.json").to_string_lossy().into_owned();
    let report = match again {
        Again::Resume => {
            let out = resume(&home, &journal, id, &recording).await;
            assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
            last_json(&out.stdout)
        }
        Again::Worker => worker(&home, &journal, id).await,
    };
    assert_eq!(report["outcome"], "complete", "{report}");
    let counts = server.counts().await;
    assert_eq!(
        counts["tools/call"], 1,
        "the server was asked to start the job once: {counts}"
    );
    assert_eq!(counts["builds_finished"], 1, "{counts}");
    assert_eq!(counts["tasks/cancel"], 0, "{counts}");
    // The model saw the task's result, as one call's one result.
    assert_eq!(tool_result(&model), "built app (job 1)");
    // The journal holds the job with the call: what the resume waited for.
    let inspected = entries(&home, &journal, id).await;
    assert!(
        inspected.to_string().contains("waits for its job"),
        "{inspected}"
    );
    if again == Again::Worker {
        return;
    }
    // The recording keeps the job with the call's result, and replays offline to the same
    // report (the job journaled as the live run journaled it).
    let recorded = std::fs::read_to_string(&recording).expect("recorded");
    assert!(recorded.contains("\"mcp_task\""), "{recorded}");
    let replay = terminus_in(&home)
        .args(["run", &recording, "--json"])
        .output()
        .await
        .expect("runs");
    assert_eq!(
        without_id(last_json(&replay.stdout)),
        without_id(report),
        "{}",
        text(&replay.stderr)
    );
    drop(server);
}

/// The tool result the model was last sent.
fn tool_result(model: &Fixture) -> Value {
    let last = model.requests().last().expect("asked").json();
    last["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "tool"))
        .map(|m| m["content"].clone())
        .expect("a tool result")
}

/// A report without what is a fact of one execution rather than of the run: its id, and the
/// appends a resume found already done.
fn without_id(mut report: Value) -> Value {
    if let Some(o) = report.as_object_mut() {
        o.remove("execution");
        o.remove("duplicates_prevented");
    }
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_started_before_a_crash_is_waited_for_after_it_never_started_again() {
    killed_while_waiting("", "task-crash", Again::Resume).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_on_postgresql_through_a_worker() {
    let Some(url) = postgres_url() else { return };
    let id = format!("task-crash-{}", std::process::id());
    killed_while_waiting(&url, &id, Again::Worker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_while_a_task_runs_cancels_it_on_the_server_and_the_recording_replays() {
    let Some(peers) = peers::dir() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let home = dir.path().canonicalize().expect("a real path");
    let server = TaskServer::start(&peers).await;
    let model = model().await;
    let config = config(&home, &model, &server);
    let recording = home.join("recording.json").to_string_lossy().into_owned();
    let agent = agent(&home, &config, &["--record", &recording]);
    polled(&server, 2).await;
    let pid = agent.id().expect("running").to_string();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let out = tokio::time::timeout(Duration::from_secs(30), agent.wait_with_output())
        .await
        .expect("the agent stops")
        .expect("reaped");
    let report = last_json(&out.stdout);
    assert_eq!(
        (report["outcome"].as_str(), report["reason"].as_str()),
        (Some("aborted"), Some("cancelled")),
        "{}",
        text(&out.stderr)
    );
    // The wait was shown as it went.
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("terminus: `build` (call call_1_0) waits for its job: working (building app: second 1 of 4)"),
        "{stderr}"
    );
    let counts = server.counts().await;
    assert_eq!(counts["tasks/cancel"], 1, "the server was told: {counts}");
    // The job stopped on the server: it never finishes.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(server.counts().await["builds_finished"], 0);
    // The recording replays offline to the same report.
    let replay = terminus_in(&home)
        .args(["run", &recording, "--json"])
        .output()
        .await
        .expect("runs");
    assert!(
        std::fs::read_to_string(&recording)
            .expect("recorded")
            .contains("\"mcp_task\""),
        "the cancelled call's job is recorded"
    );
    assert_eq!(
        without_id(last_json(&replay.stdout)),
        without_id(report),
        "{}",
        text(&replay.stderr)
    );
}

/// `terminus serve`: the wait is shown to an AG-UI client as it happens, each status the
/// task's server reports a `CUSTOM` event `terminus.job` between the call's events and its
/// result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_run_streams_its_jobs_status_as_agui_custom_events() {
    let Some(peers) = peers::dir() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let home = dir.path().canonicalize().expect("a real path");
    let server = TaskServer::start(&peers).await;
    let model = model().await;
    let config = config(&home, &model, &server);
    let journal = home.join("journal.db").to_string_lossy().into_owned();
    let mut serve = terminus_in(&home)
        .args(["serve", "--bind", "127.0.0.1:0", "--journal", &journal])
        .args(["--agent", &format!("builder={config}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("terminus serve starts");
    let mut lines = tokio::io::BufReader::new(serve.stderr.take().expect("piped")).lines();
    let url = loop {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("serve says where it listens")
            .expect("reads")
            .expect("a line before it stops");
        if let Some(at) = line.split(" at http://").nth(1) {
            break format!(
                "http://{}",
                at.split_whitespace().next().expect("an address")
            );
        }
    };
    let input = json!({
        "threadId": "build-1", "runId": "r1", "state": {}, "tools": [], "context": [],
        "forwardedProps": {},
        "messages": [{ "id": "u1", "role": "user", "content": "Build the app" }],
    });
    let body = reqwest::Client::new()
        .post(format!("{url}/agents/builder"))
        .header("content-type", "application/json")
        .body(input.to_string())
        .send()
        .await
        .expect("serve answers")
        .text()
        .await
        .expect("the event stream");
    let events: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|l| serde_json::from_str(l).expect("an event"))
        .collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(kinds.last(), Some(&"RUN_FINISHED"), "{body}");
    let jobs: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "CUSTOM" && e["name"] == "terminus.job")
        .collect();
    assert!(!jobs.is_empty(), "{body}");
    assert_eq!(jobs[0]["value"]["toolCallId"], "call_1_0");
    assert_eq!(jobs[0]["value"]["toolCallName"], "build");
    assert!(
        jobs[0]["value"]["job"]["mcp_task"]["task_id"].is_string(),
        "{}",
        jobs[0]
    );
    let statuses: Vec<&str> = jobs
        .iter()
        .filter_map(|j| j["value"]["status"].as_str())
        .collect();
    assert!(
        statuses.contains(&"working (building app: second 1 of 4)"),
        "{statuses:?}"
    );
    // Between the call and its result.
    let at = |kind: &str| kinds.iter().position(|k| *k == kind).expect(kind);
    let first_job = kinds
        .iter()
        .position(|k| *k == "CUSTOM")
        .expect("a job event");
    assert!(
        at("TOOL_CALL_END") < first_job && first_job < at("TOOL_CALL_RESULT"),
        "{kinds:?}"
    );
    assert_eq!(server.counts().await["tools/call"], 1);
}

/// A task that needs input (`input_required`) on a server whose questions wait for a person
/// (`elicitation = "person"`): the run is suspended with the task's question, its job still
/// running on the server; `terminus answer` gives the form's content, and `terminus resume`
/// gives it to the same task, which completes. One `tools/call`, one question, one answer, no
/// cancel: the job was started once and got the person's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_question_is_answered_through_terminus_answer_and_the_same_task_goes_on() {
    let Some(peers) = peers::dir() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let home = dir.path().canonicalize().expect("a real path");
    let server = TaskServer::start(&peers).await;
    let model = Fixture::with(|_, request: &Request| {
        let turns = request.json()["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        match turns {
            0 => reply("", &[("deploy", json!({ "target": "app" }))], 1),
            _ => reply("The app is deployed to staging.", &[], 2),
        }
    })
    .await
    .expect("a port");
    let config = config(&home, &model, &server);
    let body = std::fs::read_to_string(&config).expect("read").replace(
        "tasks = [\"build\"]",
        "tasks = [\"build\", \"deploy\"]\nelicitation = \"person\"",
    );
    std::fs::write(&config, body).expect("write");
    let journal = home.join("journal.db").to_string_lossy().into_owned();
    let on = |command: &str, extra: &[&str]| {
        let mut cmd = terminus_in(&home);
        cmd.args([command, "--journal", &journal, "--execution", "deploy-1"])
            .args(extra);
        cmd
    };

    let out = terminus_in(&home)
        .args(["agent", &config, "--task", "Deploy the app", "--json"])
        .args(["--journal", &journal, "--execution", "deploy-1"])
        .output()
        .await
        .expect("runs");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "suspended: {stderr}");
    let suspended = last_json(&out.stdout);
    let pending = &suspended["pending"][0];
    assert_eq!(pending["kind"], "elicitation", "{suspended}");
    assert_eq!(pending["call_id"], "call_1_0", "{suspended}");
    assert_eq!(
        pending["question"]["message"], "Deploy app to which environment?",
        "{suspended}"
    );
    let counts = server.counts().await;
    assert_eq!(
        (&counts["tools/call"], &counts["questions_asked"]),
        (&json!(1), &json!(1)),
        "{counts}"
    );
    assert_eq!(counts["questions_answered"], 0, "nobody answered: {counts}");
    assert_eq!(
        counts["tasks/cancel"], 0,
        "the task waits, not cancelled: {counts}"
    );

    let form = r#"{"environment": "staging"}"#;
    let answered = on("answer", &["--call", "call_1_0", "--result", form])
        .output()
        .await
        .expect("runs");
    assert_eq!(
        answered.status.code(),
        Some(0),
        "{}",
        text(&answered.stderr)
    );
    let resumed = on("resume", &["--json"]).output().await.expect("runs");
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    let report = last_json(&resumed.stdout);
    assert_eq!(report["outcome"], "complete", "{report}");

    let counts = server.counts().await;
    assert_eq!(
        counts["tools/call"], 1,
        "the job was started once: {counts}"
    );
    assert_eq!(counts["questions_asked"], 1, "{counts}");
    assert_eq!(counts["questions_answered"], 1, "{counts}");
    assert_eq!(counts["deploys_finished"], 1, "{counts}");
    assert_eq!(counts["tasks/cancel"], 0, "{counts}");
    assert_eq!(tool_result(&model), "deployed app to staging (job 1)");
    assert_eq!(model.requests().len(), 2, "each model call made once");
}

/// Outside a run (`terminus tools call`) nobody will reply: a task's question on a person's
/// server is cancelled, as any other, and the task ends with what the server makes of that; it
/// is not left waiting on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_a_run_a_tasks_question_for_a_person_is_cancelled() {
    let Some(peers) = peers::dir() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let home = dir.path().canonicalize().expect("a real path");
    let server = TaskServer::start(&peers).await;
    let model = model().await;
    let config = config(&home, &model, &server);
    let body = std::fs::read_to_string(&config).expect("read").replace(
        "tasks = [\"build\"]",
        "tasks = [\"deploy\"]\nelicitation = \"person\"",
    );
    std::fs::write(&config, body).expect("write");
    let out = terminus_in(&home)
        .args(["tools", &config, "call", "deploy", r#"{"target": "app"}"#])
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "deploy of app not done: cancel");
    let counts = server.counts().await;
    assert_eq!(counts["questions_answered"], 1, "{counts}");
    assert_eq!(counts["deploys_finished"], 0, "{counts}");
}
