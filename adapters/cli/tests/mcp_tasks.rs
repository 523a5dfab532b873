//! A long-running MCP tool across a crash, with real processes: `terminus agent` starts a job as
//! an MCP task on a server whose jobs outlive the client's session (`tools/tests/servers/
//! tasks.js`, the official TypeScript SDK over streamable HTTP), is killed (SIGKILL) while it
//! waits, and `terminus resume` waits for the same task: the server saw one `tools/call`, and
//! the run completes with the task's result. The same on PostgreSQL, taken up by a `terminus
//! worker` that finds the killed run orphaned; a task's question for a person, answered through
//! `terminus answer` and through an AG-UI interrupt of `terminus serve`.

mod common;

use common::tasks::{TaskServer, building, deploying, task_config, tool_result};
use common::{KEY, last_json, postgres_url, text};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use terminus_fixture::{Fixture, peers};
use tokio::io::AsyncBufReadExt as _;

/// What a test runs in: a temp home, the task server, the agent's model and the agent's config.
struct Setup {
    _dir: tempfile::TempDir,
    home: PathBuf,
    server: TaskServer,
    model: Fixture,
    config: String,
}

impl Setup {
    /// The task server of `peers` and `model`, in a config whose MCP server `builds` has
    /// `server` as the rest of its table (`tasks = ["build"]`, say).
    async fn new(peers: &Path, model: Fixture, server: &str) -> Setup {
        let dir = tempfile::tempdir().expect("a temp dir");
        let home = dir.path().canonicalize().expect("a real path");
        let tasks = TaskServer::start(peers).await;
        let config = task_config(&home, &model, &tasks, server);
        Setup {
            _dir: dir,
            home,
            server: tasks,
            model,
            config,
        }
    }

    /// The SQLite journal in the test's home.
    fn journal(&self) -> String {
        self.home.join("journal.db").to_string_lossy().into_owned()
    }

    /// `terminus` in the test's home.
    fn terminus(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_terminus"));
        cmd.current_dir(&self.home).env("TERMINUS_TEST_KEY", KEY);
        cmd
    }

    /// `terminus agent CONFIG --task "Build the app" --json` with `extra`.
    fn agent(&self, extra: &[&str]) -> tokio::process::Child {
        self.terminus()
            .args(["agent", &self.config, "--task", "Build the app", "--json"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("starts")
    }

    /// The tool result the model was last sent.
    fn tool_result(&self) -> Value {
        tool_result(&self.model)
    }

    /// Resumes execution `id` until the killed process's claim is waited out (exit 4 until
    /// its lease expires).
    async fn resume(&self, journal: &str, id: &str, recording: &str) -> std::process::Output {
        loop {
            let out = self
                .terminus()
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

    /// `terminus inspect --json` of execution `id`.
    async fn inspect(&self, journal: &str, id: &str) -> Value {
        let out = self
            .terminus()
            .args(["inspect", "--journal", journal, "--execution", id, "--json"])
            .output()
            .await
            .expect("runs");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        last_json(&out.stdout)
    }

    /// Runs `terminus worker --until-idle` on `journal` until one picks up execution `id` (the
    /// killed process's lease expired): that execution's report line.
    async fn worker(&self, journal: &str, id: &str) -> Value {
        let started = Instant::now();
        loop {
            let out = self
                .terminus()
                .args(["worker", "--journal", journal, "--until-idle"])
                .args(["--lease-ms", "500"])
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

    /// `terminus run RECORDING --json`: the recording's replay, offline.
    async fn replay(&self, recording: &str) -> Value {
        let replay = self
            .terminus()
            .args(["run", recording, "--json"])
            .output()
            .await
            .expect("runs");
        assert!(
            std::fs::read_to_string(recording)
                .expect("recorded")
                .contains("\"mcp_task\""),
            "the call's job is recorded"
        );
        let report = last_json(&replay.stdout);
        assert!(report.is_object(), "{}", text(&replay.stderr));
        report
    }

    /// `terminus serve` on `journal` with the agent `builder`, started; killed when dropped.
    async fn serve(&self, journal: &str) -> Served {
        let mut child = self
            .terminus()
            .args(["serve", "--bind", "127.0.0.1:0", "--journal", journal])
            .args(["--agent", &format!("builder={}", self.config)])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("terminus serve starts");
        let mut lines = tokio::io::BufReader::new(child.stderr.take().expect("piped")).lines();
        let url = loop {
            let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
                .await
                .expect("serve says where it listens")
                .expect("reads")
                .expect("a line before it stops");
            if let Some(at) = line.split(" at http://").nth(1) {
                break format!(
                    "http://{}/agents/builder",
                    at.split_whitespace().next().expect("an address")
                );
            }
        };
        // Read to its end, so the server never writes to a closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Served { _child: child, url }
    }
}

/// A `terminus serve` of [`Setup::serve`].
struct Served {
    _child: tokio::process::Child,
    url: String,
}

impl Served {
    /// Posts `input` (a `RunAgentInput`) to the agent: the stream's events, ended by
    /// `RUN_FINISHED`.
    async fn run(&self, input: &Value) -> Vec<Value> {
        let body = reqwest::Client::new()
            .post(&self.url)
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
        assert_eq!(
            events.last().map(|e| &e["type"]),
            Some(&json!("RUN_FINISHED")),
            "{body}"
        );
        events
    }
}

/// A `RunAgentInput` of run `run` on `thread` giving `task`.
fn input(thread: &str, run: &str, task: &str) -> Value {
    json!({
        "threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
        "forwardedProps": {},
        "messages": [{ "id": "u1", "role": "user", "content": task }],
    })
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
    let setup = Setup::new(&peers, building().await, "tasks = [\"build\"]").await;
    let journal = if journal.is_empty() {
        setup.journal()
    } else {
        journal.to_owned()
    };
    let mut agent = setup.agent(&[
        "--journal",
        &journal,
        "--execution",
        id,
        "--lease-ms",
        "500",
    ]);
    // The job runs and the agent polls it: kill the agent there.
    setup.server.polled(2).await;
    agent.start_kill().expect("SIGKILL");
    let killed = agent.wait_with_output().await.expect("reaped");
    assert_eq!(killed.status.code(), None, "killed by a signal");
    setup
        .server
        .counted(&[("builds_finished", 0)], "killed mid-job")
        .await;

    let recording = setup.home.join("recording.json");
    let recording = recording.to_string_lossy();
    let report = match again {
        Again::Resume => {
            let out = setup.resume(&journal, id, &recording).await;
            assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
            last_json(&out.stdout)
        }
        Again::Worker => setup.worker(&journal, id).await,
    };
    assert_eq!(report["outcome"], "complete", "{report}");
    setup
        .server
        .counted(
            &[
                ("tools/call", 1),
                ("builds_finished", 1),
                ("tasks/cancel", 0),
            ],
            "the server was asked to start the job once",
        )
        .await;
    // The model saw the task's result, as one call's one result.
    assert_eq!(setup.tool_result(), "built app (job 1)");
    // The journal holds the job with the call: what the resume waited for.
    let inspected = setup.inspect(&journal, id).await;
    assert!(
        inspected.to_string().contains("waits for its job"),
        "{inspected}"
    );
    if again == Again::Worker {
        return;
    }
    // The recording keeps the job with the call's result, and replays offline to the same
    // report (the job journaled as the live run journaled it).
    assert_eq!(
        without_id(setup.replay(&recording).await),
        without_id(report)
    );
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
    let setup = Setup::new(&peers, building().await, "tasks = [\"build\"]").await;
    let recording = setup.home.join("recording.json");
    let recording = recording.to_string_lossy();
    let agent = setup.agent(&["--record", &recording]);
    setup.server.polled(2).await;
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
    setup
        .server
        .counted(&[("tasks/cancel", 1)], "the server was told")
        .await;
    // The job stopped on the server: it never finishes.
    tokio::time::sleep(Duration::from_secs(5)).await;
    setup
        .server
        .counted(&[("builds_finished", 0)], "cancelled")
        .await;
    // The recording replays offline to the same report.
    assert_eq!(
        without_id(setup.replay(&recording).await),
        without_id(report)
    );
}

/// `terminus serve`: the wait is shown to an AG-UI client as it happens, each status the
/// task's server reports a `CUSTOM` event `terminus.job` between the call's events and its
/// result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_run_streams_its_jobs_status_as_agui_custom_events() {
    let Some(peers) = peers::dir() else { return };
    let setup = Setup::new(&peers, building().await, "tasks = [\"build\"]").await;
    let served = setup.serve(&setup.journal()).await;
    let events = served.run(&input("build-1", "r1", "Build the app")).await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    let jobs: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "CUSTOM" && e["name"] == "terminus.job")
        .collect();
    assert!(!jobs.is_empty(), "{kinds:?}");
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
    setup.server.counted(&[("tools/call", 1)], "one job").await;
}

/// `terminus serve`: a client that goes away mid-run (it closes the stream) does not stop the
/// run, which is journaled and shown to the next input on its thread: the task is waited for,
/// not cancelled, and finishes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_run_whose_client_goes_away_still_waits_for_its_task() {
    let Some(peers) = peers::dir() else { return };
    let setup = Setup::new(&peers, building().await, "tasks = [\"build\"]").await;
    let served = setup.serve(&setup.journal()).await;
    let input = input("build-gone", "r1", "Build the app");
    let running = tokio::spawn({
        let url = served.url.clone();
        async move {
            let response = reqwest::Client::new()
                .post(url)
                .header("content-type", "application/json")
                .body(input.to_string())
                .send()
                .await
                .expect("serve answers");
            // Reads the stream until dropped.
            let _ = response.text().await;
        }
    });
    setup.server.polled(2).await;
    running.abort();
    let _ = running.await;
    let started = Instant::now();
    while setup.server.counts().await["builds_finished"] == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the job never finished after the client went away: {}",
            setup.server.counts().await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    setup
        .server
        .counted(
            &[
                ("tools/call", 1),
                ("tasks/cancel", 0),
                ("builds_finished", 1),
            ],
            "waited for, not cancelled",
        )
        .await;
}

/// The `[[mcp]]` table's lines of a server whose task questions wait for a person.
const PERSON: &str = "tasks = [\"build\", \"deploy\"]\nelicitation = \"person\"";

/// A task that needs input (`input_required`) on a server whose questions wait for a person
/// (`elicitation = "person"`): the run is suspended with the task's question, its job still
/// running on the server; `terminus answer` gives the form's content, and `terminus resume`
/// gives it to the same task, which completes. One `tools/call`, one question, one answer, no
/// cancel: the job was started once and got the person's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_question_is_answered_through_terminus_answer_and_the_same_task_goes_on() {
    let Some(peers) = peers::dir() else { return };
    let setup = Setup::new(&peers, deploying().await, PERSON).await;
    let journal = setup.journal();
    let on = |command: &str, extra: &[&str]| {
        let mut cmd = setup.terminus();
        cmd.args([command, "--journal", &journal, "--execution", "deploy-1"])
            .args(extra);
        cmd
    };

    let out = setup
        .terminus()
        .args(["agent", &setup.config, "--task", "Deploy the app", "--json"])
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
    asked_unanswered(&setup).await;

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
    answered_once(&setup).await;
}

/// What the server saw of a deploy whose question waits for a person: the job started once,
/// its one question asked and not answered, the task not cancelled.
async fn asked_unanswered(setup: &Setup) {
    setup
        .server
        .counted(
            &[
                ("tools/call", 1),
                ("questions_asked", 1),
                ("questions_answered", 0),
                ("tasks/cancel", 0),
            ],
            "asked, nobody answered, the task waits",
        )
        .await;
}

/// What the server and the model saw of a deploy whose question was answered once: the job
/// started once, one question, one answer, no cancel, each model call made once.
async fn answered_once(setup: &Setup) {
    setup
        .server
        .counted(
            &[
                ("tools/call", 1),
                ("questions_asked", 1),
                ("questions_answered", 1),
                ("deploys_finished", 1),
                ("tasks/cancel", 0),
            ],
            "the job was started once and got the answer",
        )
        .await;
    assert_eq!(setup.tool_result(), "deployed app to staging (job 1)");
    assert_eq!(setup.model.requests().len(), 2, "each model call made once");
}

/// The same through `terminus serve`: the task's question is the run's `input_required`
/// interrupt, and the next run on the thread answers it (`resume` with the form's content):
/// the same task goes on, in the same process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_question_is_an_agui_interrupt_and_resume_answers_the_same_task() {
    let Some(peers) = peers::dir() else { return };
    let setup = Setup::new(&peers, deploying().await, PERSON).await;
    let served = setup.serve(&setup.journal()).await;
    let first = served.run(&input("deploy-1", "r1", "Deploy the app")).await;
    let finished = first.last().expect("events");
    assert_eq!(finished["outcome"]["type"], "interrupt", "{finished}");
    let interrupt = &finished["outcome"]["interrupts"][0];
    assert_eq!(interrupt["id"], "call_1_0", "{interrupt}");
    assert_eq!(interrupt["reason"], "input_required", "{interrupt}");
    assert_eq!(
        interrupt["message"], "Deploy app to which environment?",
        "{interrupt}"
    );
    assert_eq!(
        interrupt["responseSchema"]["properties"]["environment"]["enum"],
        json!(["staging", "production"]),
        "{interrupt}"
    );
    asked_unanswered(&setup).await;

    let mut answer = input("deploy-1", "r2", "Deploy the app");
    answer["resume"] = json!([{
        "interruptId": "call_1_0", "status": "resolved",
        "payload": { "environment": "staging" },
    }]);
    let second = served.run(&answer).await;
    let finished = second.last().expect("events");
    assert_eq!(finished["outcome"]["type"], "success", "{finished}");
    let result = second
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .expect("the call's result");
    assert_eq!(result["toolCallId"], "call_1_0", "{result}");
    answered_once(&setup).await;
}

/// Outside a run (`terminus tools call`) nobody will reply: a task's question on a person's
/// server is cancelled, as any other, and the task ends with what the server makes of that; it
/// is not left waiting on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_a_run_a_tasks_question_for_a_person_is_cancelled() {
    let Some(peers) = peers::dir() else { return };
    let setup = Setup::new(&peers, building().await, PERSON).await;
    let out = setup
        .terminus()
        .args([
            "tools",
            &setup.config,
            "call",
            "deploy",
            r#"{"target": "app"}"#,
        ])
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "deploy of app not done: cancel");
    setup
        .server
        .counted(
            &[("questions_answered", 1), ("deploys_finished", 0)],
            "the question was cancelled",
        )
        .await;
}
