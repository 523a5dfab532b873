//! `terminus serve` end to end (`docs/serve.md`): a real `terminus serve` process, the fixture
//! model server and the real filesystem MCP server; AG-UI requests over HTTP and the event
//! streams they answer. A run streams to `RUN_FINISHED` with the journal's report; a held call
//! finishes with the interrupt outcome, and the next input's `resume` runs it exactly once, even
//! across a `SIGKILL` of the server; requests without the key, for an unknown agent, with an
//! inline config or a bad body are refused before anything runs.

mod common;

use common::journal::Journal;
use common::{
    KEY, architect, asking_server, fs_server, keyless_config, last_json, reply, streamed_reply,
    text, write_config,
};
use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use terminus_fixture::{Fixture, peers};
use terminus_kernel::Entry;

/// The bearer key the served endpoint wants in the tests that give `--key-env`.
const SERVE_KEY: &str = "serve-test-key-41";

const TASK: &str = "Write an implementation plan to plan.md";

/// The text of the architect's first reply when its replies stream (with the listing call).
const LISTING: &str = "Let me look at the sources before I plan anything.";

/// The fixture model server answering `threads` runs one after the other with `script` each;
/// then a 500.
async fn script_server(script: Vec<terminus_fixture::Response>, threads: usize) -> Fixture {
    Fixture::with(move |n, _| {
        script
            .get(n % script.len())
            .filter(|_| n < threads * script.len())
            .cloned()
            .unwrap_or_else(|| {
                terminus_fixture::Response::json(500, r#"{"error":{"message":"no more replies"}}"#)
            })
    })
    .await
    .expect("a port")
}

/// A `terminus serve` process (killed when dropped) and where it listens.
struct Serve {
    child: Child,
    url: String,
    log: Arc<Mutex<String>>,
}

impl Serve {
    /// Starts `terminus serve --agent architect=CONFIG --journal JOURNAL` on a free port of
    /// loopback, with `extra` arguments, and waits for its "serving" line.
    fn start(config: &str, journal: &str, extra: &[&str]) -> Serve {
        Serve::agents(&[format!("architect={config}")], journal, extra)
    }

    /// Starts `terminus serve` with each of `agents` (`NAME=FILE`) on `journal`.
    fn agents(agents: &[String], journal: &str, extra: &[&str]) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_terminus"))
            .args(["serve", "--bind", "127.0.0.1:0", "--journal", journal])
            .args(agents.iter().flat_map(|a| ["--agent", a.as_str()]))
            .args(extra)
            .env("TERMINUS_TEST_KEY", KEY)
            .env("TERMINUS_SERVE_KEY", SERVE_KEY)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("terminus serve starts");
        let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
        let mut log = String::new();
        let url = loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.kill();
                panic!("terminus serve stopped before serving:\n{log}");
            };
            log.push_str(&line);
            log.push('\n');
            if let Some(at) = line.split(" at http://").nth(1) {
                let addr = at.split_whitespace().next().expect("an address");
                break format!("http://{addr}");
            }
        };
        let log = Arc::new(Mutex::new(log));
        let rest = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut log = rest
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                log.push_str(&line);
                log.push('\n');
            }
        });
        Serve { child, url, log }
    }

    fn log(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// `POST path` with `body` (and the key, if given); the status and the body's text.
    async fn post(&self, path: &str, body: &str, key: Option<&str>) -> (u16, String) {
        let mut request = reqwest::Client::new()
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(body.to_owned());
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status().as_u16();
        (status, response.text().await.expect("a body"))
    }

    /// Runs `input` on the architect (with the key) and reads its event stream as it comes:
    /// each event with when it arrived.
    async fn run_timed(&self, input: &Value) -> Vec<(std::time::Instant, Value)> {
        let mut response = reqwest::Client::new()
            .post(format!("{}/agents/architect", self.url))
            .header("content-type", "application/json")
            .bearer_auth(SERVE_KEY)
            .body(input.to_string())
            .send()
            .await
            .expect("the server answers");
        assert_eq!(response.status().as_u16(), 200, "{}", self.log());
        let (mut events, mut buffer) = (Vec::new(), String::new());
        while let Some(chunk) = response.chunk().await.expect("the stream") {
            let now = std::time::Instant::now();
            buffer.push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
            while let Some(end) = buffer.find("\n\n") {
                let event: String = buffer.drain(..end + 2).collect();
                events.extend(self::events(&event).into_iter().map(|e| (now, e)));
            }
        }
        assert!(
            buffer.is_empty(),
            "the stream ends with a whole event: {buffer}"
        );
        events
    }

    /// Runs `input` on the architect (with the key) and reads its whole event stream.
    async fn run(&self, input: &Value) -> Vec<Value> {
        let (status, body) = self
            .post("/agents/architect", &input.to_string(), Some(SERVE_KEY))
            .await;
        assert_eq!(status, 200, "{body}\n{}", self.log());
        events(&body)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The events of a server-sent event stream: each `data: {json}` and a blank line.
fn events(body: &str) -> Vec<Value> {
    assert!(
        body.ends_with("\n\n"),
        "the stream ends with a whole event: {body}"
    );
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let data = e
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("an event is one data line: {e:?}"));
            assert!(!data.contains('\n'), "one line: {data}");
            serde_json::from_str(data).unwrap_or_else(|err| panic!("JSON ({err}): {data}"))
        })
        .collect()
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["type"].as_str()).collect()
}

/// The `RunAgentInput` that starts the architect's task on `thread`.
fn input(thread: &str, run: &str) -> Value {
    json!({
        "threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
        "forwardedProps": {},
        "messages": [{ "id": "u1", "role": "user", "content": TASK }],
    })
}

/// Applies an RFC 6902 patch of `add`, `remove` and `replace` operations to `doc`.
fn apply(doc: &mut Value, patch: &Value) {
    for op in patch.as_array().expect("a patch is a list") {
        let path = op["path"].as_str().expect("a path");
        let (parent, key) = path.rsplit_once('/').expect("below the root");
        let key = key.replace("~1", "/").replace("~0", "~");
        let object = doc
            .pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .unwrap_or_else(|| panic!("{parent} is an object"));
        match op["op"].as_str() {
            Some("remove") => assert!(object.remove(&key).is_some(), "{path} was there"),
            Some("add" | "replace") => {
                object.insert(key, op["value"].clone());
            }
            other => panic!("unexpected operation {other:?}"),
        }
    }
}

/// The state the events leave: the last snapshot with every delta after it applied.
fn final_state(events: &[Value]) -> Value {
    let mut state = Value::Null;
    for event in events {
        match event["type"].as_str() {
            Some("STATE_SNAPSHOT") => state = event["snapshot"].clone(),
            Some("STATE_DELTA") => apply(&mut state, &event["delta"]),
            _ => {}
        }
    }
    state
}

/// The lifecycle every stream keeps: `RUN_STARTED` first with the input's ids, one
/// `RUN_FINISHED` or `RUN_ERROR` last, steps opened and closed in pairs, each tool call's
/// start, arguments and end in order, text messages likewise (not nested, no empty piece).
fn check_lifecycle(events: &[Value], thread: &str, run: &str) {
    let kinds = types(events);
    assert_eq!(events[0]["type"], "RUN_STARTED");
    assert_eq!(
        (&events[0]["threadId"], &events[0]["runId"]),
        (&json!(thread), &json!(run))
    );
    let last = kinds.last().copied();
    assert!(
        matches!(last, Some("RUN_FINISHED" | "RUN_ERROR")),
        "{kinds:?}"
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| matches!(**k, "RUN_FINISHED" | "RUN_ERROR" | "RUN_STARTED"))
            .count(),
        2,
        "{kinds:?}"
    );
    let mut open_step: Option<&Value> = None;
    let mut open_calls: Vec<&Value> = Vec::new();
    let mut open_message: Option<&Value> = None;
    for event in events {
        match event["type"].as_str() {
            Some("STEP_STARTED") => {
                assert!(open_step.is_none(), "steps do not nest: {kinds:?}");
                open_step = Some(&event["stepName"]);
            }
            Some("STEP_FINISHED") => {
                assert_eq!(open_step.take(), Some(&event["stepName"]), "{kinds:?}");
            }
            Some("TOOL_CALL_START") => open_calls.push(&event["toolCallId"]),
            Some("TOOL_CALL_ARGS") => {
                assert_eq!(open_calls.last(), Some(&&event["toolCallId"]));
                let args: Value = serde_json::from_str(event["delta"].as_str().expect("text"))
                    .expect("the arguments are JSON");
                assert!(args.is_object(), "{args}");
            }
            Some("TOOL_CALL_END") => {
                assert_eq!(open_calls.pop(), Some(&event["toolCallId"]));
            }
            // A streamed text goes out as it arrives, before the step that takes the turn.
            Some("TEXT_MESSAGE_START") => {
                assert!(open_message.is_none(), "messages do not nest: {kinds:?}");
                assert_eq!(event["role"], "assistant");
                open_message = Some(&event["messageId"]);
            }
            Some("TEXT_MESSAGE_CONTENT") => {
                assert_eq!(open_message, Some(&event["messageId"]), "{kinds:?}");
                assert!(event["delta"].as_str().is_some_and(|d| !d.is_empty()));
            }
            Some("TEXT_MESSAGE_END") => {
                assert_eq!(open_message.take(), Some(&event["messageId"]), "{kinds:?}");
            }
            Some("TOOL_CALL_RESULT") => {
                assert!(open_step.is_some(), "a result comes within a step");
            }
            _ => {}
        }
    }
    assert!(
        open_step.is_none() && open_calls.is_empty() && open_message.is_none(),
        "{kinds:?}"
    );
}

/// One live setup: the architect's six scripted replies on the fixture model server, the real
/// filesystem server rooted in a temp folder (with `approval = ["write_file"]` when `held`),
/// and a journal.
struct Setup {
    _dir: tempfile::TempDir,
    fixture: Fixture,
    plan: PathBuf,
    config: String,
    journal: String,
}

/// The `[[mcp]]` line that holds the architect's write for approval.
const APPROVAL: &str = "approval = [\"write_file\"]\n";

impl Setup {
    async fn new(peers: &Path, held: bool) -> Setup {
        Setup::serving(peers, if held { APPROVAL } else { "" }, 1).await
    }

    /// The setup for `threads` runs of the architect, one after the other: the model server
    /// answers each with the six replies again. `hold` is added to the `[[mcp]]` entry.
    async fn serving(peers: &Path, hold: &str, threads: usize) -> Setup {
        Setup::architect(peers, hold, threads, None).await
    }

    /// [`Setup::serving`]; with `streamed`, the model's replies stream (`stream = true`), and
    /// the three with text (the first, with the listing call, the claim and the answer) come in
    /// pieces of that many characters, with a pause before each.
    async fn architect(
        peers: &Path,
        hold: &str,
        threads: usize,
        streamed: Option<(usize, std::time::Duration)>,
    ) -> Setup {
        let dir = tempfile::tempdir().expect("a temp dir");
        let root = dir.path().canonicalize().expect("a real path").join("work");
        let (mut script, plan) = architect(&root);
        if let Some((size, pause)) = streamed {
            let listing = [("list_directory", json!({ "path": root.join("src") }))];
            script[0] = streamed_reply(LISTING, &listing, 1, size, pause);
            script[2] = streamed_reply("I will now write the plan.", &[], 3, size, pause);
            script[5] = streamed_reply("Plan written to plan.md.", &[], 6, size, pause);
        }
        let fixture = script_server(script.to_vec(), threads).await;
        let mut mcp = fs_server(peers, &root.to_string_lossy());
        mcp.push_str(hold);
        let config = write_config(dir.path(), &format!("{}/v1", fixture.url()), &mcp);
        if streamed.is_some() {
            let text = std::fs::read_to_string(&config).expect("the config");
            std::fs::write(&config, text.replace("stream = false", "stream = true"))
                .expect("write the config");
        }
        let journal = dir.path().join("journal.db").to_string_lossy().into_owned();
        Setup {
            _dir: dir,
            fixture,
            plan,
            config,
            journal,
        }
    }

    /// An agent whose one tool, `delete_branch` (a server on the official MCP SDK), asks its user
    /// to confirm (`elicitation = "person"`), and a model that calls it then says it is done,
    /// for `threads` runs one after the other. `plan` is the server's log of deletions.
    async fn asking(peers: &Path, threads: usize) -> Setup {
        let dir = tempfile::tempdir().expect("a temp dir");
        let log = dir.path().join("deleted.log");
        let script = vec![
            reply("", &[("delete_branch", json!({ "branch": "main" }))], 1),
            reply("Deleted main.", &[], 2),
        ];
        let fixture = script_server(script, threads).await;
        let config = keyless_config(dir.path(), &fixture.url(), &asking_server(peers, &log))
            .to_string_lossy()
            .into_owned();
        let journal = dir.path().join("journal.db").to_string_lossy().into_owned();
        Setup {
            _dir: dir,
            fixture,
            plan: log,
            config,
            journal,
        }
    }

    fn serve(&self) -> Serve {
        Serve::start(
            &self.config,
            &self.journal,
            &["--key-env", "TERMINUS_SERVE_KEY"],
        )
    }

    /// `terminus ARGS...` on this setup's journal; the exit code, stdout and stderr.
    fn terminus(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_terminus"))
            .args(args)
            .args(["--journal", &self.journal])
            .output()
            .expect("the binary runs");
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    }

    /// The journal's entries of `execution`.
    async fn records(&self, execution: &str) -> Vec<Entry> {
        Journal::Sqlite(PathBuf::from(&self.journal))
            .open()
            .await
            .records(execution)
            .await
            .expect("readable")
            .iter()
            .map(|r| r.entry.clone())
            .collect()
    }

    /// How often the journal holds the intent and the result of call `id`.
    async fn intents_and_results(&self, execution: &str, id: &str) -> (usize, usize) {
        let records = self.records(execution).await;
        let intents = records
            .iter()
            .filter(|e| matches!(e, Entry::ToolCall { call, .. } if call.id.as_str() == id))
            .count();
        let results = records
            .iter()
            .filter_map(|e| match e {
                Entry::ToolResults { results } => Some(results),
                _ => None,
            })
            .flatten()
            .filter(|r| r.call_id.as_str() == id)
            .count();
        (intents, results)
    }
}

/// A run streams to `RUN_FINISHED`: its events in order (a step per kernel transition named by
/// its rule, the model's text and tool calls, the tool results, the state as snapshot and
/// deltas), and the report it carries is the journal's own, as `terminus resume` prints it for
/// the ended execution; the `inspect` text it carries is `terminus inspect`'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_streams_to_run_finished_with_the_journals_report() {
    let Some(peers) = peers::dir() else { return };
    let setup = Setup::new(&peers, false).await;
    let serve = setup.serve();
    let events = serve.run(&input("thread-1", "run-1")).await;
    check_lifecycle(&events, "thread-1", "run-1");
    let kinds = types(&events);
    assert_eq!(kinds[1], "STATE_SNAPSHOT", "{kinds:?}");
    let finished = events.last().expect("events");
    assert_eq!(
        finished["type"],
        "RUN_FINISHED",
        "{kinds:?}\n{}",
        serve.log()
    );
    assert_eq!(finished["outcome"], json!({ "type": "success" }));
    assert_eq!(finished["result"]["result"], "Plan written to plan.md.");
    let report = &finished["result"]["report"];
    assert_eq!(
        (&report["outcome"], &report["reason"], &report["execution"]),
        (&json!("complete"), &json!("verified"), &json!("thread-1"))
    );
    assert_eq!(
        std::fs::read_to_string(&setup.plan).expect("written"),
        "# Plan\n1. Fix parse.\n"
    );

    // One step per transition, named by the rule that fired, in the report's order.
    let steps: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "STEP_STARTED")
        .map(|e| &e["stepName"])
        .collect();
    let trace: Vec<&Value> = report["trace"]
        .as_array()
        .expect("a trace")
        .iter()
        .map(|s| &s["rule"])
        .collect();
    assert_eq!(steps, trace);
    // The model's calls and their results, by the provider's ids, in the order they ran.
    let calls: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_START")
        .map(|e| {
            (
                e["toolCallId"].as_str().unwrap_or(""),
                e["toolCallName"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("call_1_0", "list_directory"),
            ("call_2_0", "write_todos"),
            ("call_4_0", "write_file"),
            ("call_5_0", "write_todos")
        ]
    );
    let results: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_RESULT")
        .filter_map(|e| e["toolCallId"].as_str())
        .collect();
    assert_eq!(results, ["call_1_0", "call_2_0", "call_4_0", "call_5_0"]);
    let listing = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .expect("a result");
    assert!(
        listing["content"]
            .as_str()
            .is_some_and(|c| c.contains("lib.rs")),
        "{listing}"
    );
    let said: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(
        said,
        ["I will now write the plan.", "Plan written to plan.md."]
    );

    // The snapshot and its deltas end where the report does.
    let state = final_state(&events);
    assert_eq!(state["status"], "complete");
    assert_eq!(state["reason"], "verified");
    assert_eq!(state["counters"], report["stats"]);
    assert_eq!(state["todos"], report["todos"]);
    assert_eq!(state["budgets"]["model_calls"]["spent"], 6, "{state}");
    assert_eq!(state["step"], report["steps"]);

    // The journal's report and explanation.
    let (code, stdout, stderr) = setup.terminus(&["resume", "--execution", "thread-1", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(&last_json(stdout.as_bytes()), report);
    let (code, explained, stderr) = setup.terminus(&["inspect", "--execution", "thread-1"]);
    assert_eq!(code, Some(0), "{stderr}");
    let inspect = events
        .iter()
        .find(|e| e["type"] == "CUSTOM" && e["name"] == "terminus.inspect")
        .expect("the inspect text");
    assert_eq!(inspect["value"], json!(explained));
    assert_eq!(setup.fixture.requests().len(), 6);

    // The same input again runs nothing: it shows the thread's end.
    let again = serve.run(&input("thread-1", "run-1b")).await;
    assert_eq!(again.last().expect("events")["result"]["report"], *report);
    assert_eq!(setup.fixture.requests().len(), 6);
    // A new task on an ended thread is refused.
    let mut other = input("thread-1", "run-1c");
    other["messages"][0]["content"] = json!("Something else");
    let refused = serve.run(&other).await;
    let last = refused.last().expect("events");
    assert_eq!(
        (&last["type"], &last["code"]),
        (&json!("RUN_ERROR"), &json!("thread_ended"))
    );
}

/// The interrupt of the held write, after running `input` on `serve`; its call id.
async fn interrupted(serve: &Serve, setup: &Setup, thread: &str) -> String {
    let events = serve.run(&input(thread, "run-a")).await;
    check_lifecycle(&events, thread, "run-a");
    let finished = events.last().expect("events");
    assert_eq!(finished["type"], "RUN_FINISHED", "{}", serve.log());
    let outcome = &finished["outcome"];
    assert_eq!(outcome["type"], "interrupt", "{finished}");
    let interrupt = &outcome["interrupts"][0];
    assert_eq!(outcome["interrupts"].as_array().map(Vec::len), Some(1));
    assert_eq!(interrupt["reason"], "tool_call");
    assert_eq!(interrupt["toolCallId"], interrupt["id"]);
    assert_eq!(interrupt["metadata"]["terminus"]["kind"], "approval");
    assert_eq!(interrupt["metadata"]["terminus"]["tool"], "write_file");
    // The messages and the state a resume needs come before the interrupt.
    let kinds = types(&events);
    assert_eq!(
        kinds[kinds.len() - 4..],
        [
            "MESSAGES_SNAPSHOT",
            "STATE_SNAPSHOT",
            "CUSTOM",
            "RUN_FINISHED"
        ]
    );
    let messages = events[events.len() - 4]["messages"]
        .as_array()
        .expect("messages")
        .clone();
    assert_eq!(
        (&messages[0]["role"], &messages[0]["content"]),
        (&json!("user"), &json!(TASK))
    );
    let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
    // The task, four turns (the third a claim, text only) and the three results before the
    // held write.
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "assistant"
        ]
    );
    let proposed = &messages[6]["toolCalls"][0];
    assert_eq!(proposed["function"]["name"], "write_file");
    assert_eq!(messages[5]["content"], "I will now write the plan.");
    let state = final_state(&events);
    assert_eq!(state["status"], "suspended");
    assert_eq!(state["pending"][0]["name"], "write_file");
    assert!(!setup.plan.exists(), "a held write does not run");
    assert_eq!(setup.fixture.requests().len(), 4);
    let id = interrupt["id"].as_str().expect("an id").to_owned();
    assert_eq!(setup.intents_and_results(thread, &id).await, (0, 0));
    // The thread is a suspended execution of the journal.
    let (_, listed, _) = setup.terminus(&["runs"]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(thread) && l.contains("suspended")),
        "{listed}"
    );
    id
}

/// The input that approves call `id` of `thread`.
fn approving(thread: &str, run: &str, id: &str) -> Value {
    let mut input = input(thread, run);
    input["resume"] =
        json!([{ "interruptId": id, "status": "resolved", "payload": { "approved": true } }]);
    input
}

/// After the approval: the write ran once (the journal holds one intent and one result of it),
/// the run finished, and the model was asked only for the turns after the held one.
async fn ran_once(events: &[Value], setup: &Setup, thread: &str, id: &str) {
    check_lifecycle(events, thread, "run-b");
    let finished = events.last().expect("events");
    assert_eq!(finished["type"], "RUN_FINISHED", "{:?}", types(events));
    assert_eq!(finished["outcome"]["type"], "success");
    assert_eq!(finished["result"]["report"]["reason"], "verified");
    // The resumed run answers the original call; it does not propose it again.
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == id)
    );
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "TOOL_CALL_START" && e["toolCallId"] == id)
    );
    assert_eq!(
        std::fs::read_to_string(&setup.plan).expect("written once approved"),
        "# Plan\n1. Fix parse.\n"
    );
    assert_eq!(setup.intents_and_results(thread, id).await, (1, 1));
    assert_eq!(setup.fixture.requests().len(), 6);
}

/// A held call finishes the run with the interrupt outcome; the next input's `resume` approves
/// it, and the call runs once. The same approval again is safe: it runs nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_is_an_interrupt_and_resume_runs_it_once() {
    let Some(peers) = peers::dir() else { return };
    let setup = Setup::new(&peers, true).await;
    let serve = setup.serve();
    let id = interrupted(&serve, &setup, "held-1").await;

    // A new input that does not answer the held call is refused, and runs nothing.
    let pending = serve.run(&input("held-1", "run-x")).await;
    let last = pending.last().expect("events");
    assert_eq!(last["code"], "interrupts_pending", "{last}");
    let unknown = serve
        .run(&approving("held-1", "run-y", "no-such-call"))
        .await;
    let last = unknown.last().expect("events");
    assert_eq!(last["code"], "unknown_interrupt", "{last}");
    assert!(
        last["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("$.resume[0].interruptId: ")),
        "{last}"
    );
    let mut bad = approving("held-1", "run-z", &id);
    bad["resume"][0]["payload"] = json!({ "approved": "yes" });
    let bad = serve.run(&bad).await;
    let last = bad.last().expect("events");
    assert_eq!(last["code"], "invalid_resume", "{last}");
    assert!(
        last["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("$.resume[0].payload.approved: ")),
        "{last}"
    );
    assert_eq!(setup.fixture.requests().len(), 4);

    let events = serve.run(&approving("held-1", "run-b", &id)).await;
    ran_once(&events, &setup, "held-1", &id).await;

    // The same resume again is safe to replay: the thread's end, nothing run.
    let replayed = serve.run(&approving("held-1", "run-c", &id)).await;
    assert_eq!(
        replayed.last().expect("events")["outcome"]["type"],
        "success"
    );
    assert_eq!(setup.intents_and_results("held-1", &id).await, (1, 1));
    assert_eq!(setup.fixture.requests().len(), 6);
}

/// `terminus serve` killed (SIGKILL) while a call is held, and started again on the same
/// journal: the approval then runs the call exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_survives_a_killed_server_and_runs_once() {
    let Some(peers) = peers::dir() else { return };
    let setup = Setup::new(&peers, true).await;
    let mut serve = setup.serve();
    let id = interrupted(&serve, &setup, "held-2").await;
    serve.child.kill().expect("SIGKILL");
    let status = serve.child.wait().expect("reaped");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    let again = setup.serve();
    let events = again.run(&approving("held-2", "run-b", &id)).await;
    ran_once(&events, &setup, "held-2", &id).await;
}

/// Requests the endpoint refuses before anything runs: no key or a wrong one (401), an agent it
/// does not serve (404), a body that is not a `RunAgentInput` (400 naming the JSON path), and an
/// inline config or frontend tools (400). The model server gets no request and the journal no
/// execution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_run_nothing() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let fixture = Fixture::start(Vec::new()).await.expect("a port");
    let config = write_config(dir.path(), &format!("{}/v1", fixture.url()), "");
    let journal = dir.path().join("journal.db").to_string_lossy().into_owned();
    let serve = Serve::start(&config, &journal, &["--key-env", "TERMINUS_SERVE_KEY"]);
    let body = input("t", "r").to_string();
    let error = |answer: &str| -> String {
        serde_json::from_str::<Value>(answer).expect("a JSON error")["error"]
            .as_str()
            .expect("a message")
            .to_owned()
    };

    let (status, _) = serve.post("/agents/architect", &body, None).await;
    assert_eq!(status, 401);
    let (status, _) = serve.post("/agents/architect", &body, Some("wrong")).await;
    assert_eq!(status, 401);
    let (status, _) = serve.post("/agents", "", None).await;
    assert_eq!(status, 401);

    let (status, answer) = serve.post("/agents/nobody", &body, Some(SERVE_KEY)).await;
    assert_eq!(status, 404);
    assert_eq!(
        error(&answer),
        "no agent named `nobody`; this endpoint serves architect"
    );

    let cases = [
        (json!({ "threadId": "t", "messages": [] }).to_string(), "$: missing field `runId`"),
        ("{\"threadId\": ".to_owned(), "$.threadId: invalid JSON"),
        (
            json!({ "threadId": "t", "runId": "r", "messages": [{ "role": 7 }] }).to_string(),
            "$.messages[0].role: invalid type",
        ),
        (
            json!({ "threadId": "t", "runId": "r", "messages": [],
                    "resume": [{ "interruptId": "c", "status": "approved" }] })
            .to_string(),
            "$.resume[0].status: unknown variant `approved`",
        ),
        (
            json!({ "threadId": "t", "runId": "r", "messages": [],
                    "forwardedProps": { "agent": { "model": { "base_url": "http://127.0.0.1:9" },
                                                   "mcp": [{ "command": ["sh", "-c", "touch x"] }] } } })
            .to_string(),
            "$.forwardedProps.agent: an inline agent config is refused",
        ),
        (
            json!({ "threadId": "t", "runId": "r", "messages": [],
                    "tools": [{ "name": "shell", "description": "d", "parameters": {} }] })
            .to_string(),
            "$.tools: frontend tools are not served",
        ),
    ];
    for (body, start) in cases {
        let (status, answer) = serve
            .post("/agents/architect", &body, Some(SERVE_KEY))
            .await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(error(&answer).starts_with(start), "{body}: {answer}");
    }

    let get = |path: &str| {
        reqwest::Client::new()
            .get(format!("{}{path}", serve.url))
            .bearer_auth(SERVE_KEY)
            .send()
    };
    let wrong = get("/agents/architect").await.expect("answered");
    assert_eq!(wrong.status().as_u16(), 405);
    let elsewhere = get("/admin").await.expect("answered");
    assert_eq!(elsewhere.status().as_u16(), 404);
    // The page needs no key (it holds nothing of the server's), and loads nothing from elsewhere.
    let page = reqwest::get(format!("{}/", serve.url))
        .await
        .expect("answered");
    assert_eq!(page.status().as_u16(), 200);
    let policy = page.headers()["content-security-policy"]
        .to_str()
        .expect("text")
        .to_owned();
    assert!(policy.starts_with("default-src 'none'"), "{policy}");
    assert!(
        page.text()
            .await
            .expect("html")
            .contains("<title>Terminus</title>")
    );

    // The key opens the listing.
    let listing = reqwest::Client::new()
        .get(format!("{}/agents", serve.url))
        .bearer_auth(SERVE_KEY)
        .send()
        .await
        .expect("answered");
    assert_eq!(listing.status().as_u16(), 200);
    assert_eq!(
        listing.json::<Value>().await.expect("JSON"),
        json!({ "agents": ["architect"] })
    );
    assert!(fixture.requests().is_empty(), "nothing ran");
    let (_, listed, _) = {
        let out = Command::new(env!("CARGO_BIN_EXE_terminus"))
            .args(["runs", "--journal", &journal])
            .output()
            .expect("runs");
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    assert_eq!(
        listed.lines().count(),
        1,
        "only the header, no execution: {listed}"
    );
}

/// A config that does not build, or a key variable that is unset, stops the start (exit 2).
#[test]
fn serve_refuses_bad_agents_and_an_unset_key_with_exit_2() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let journal = dir.path().join("journal.db").to_string_lossy().into_owned();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[model]\nprovider = \"openai\"\nbase_url = \"x\"\nmodle = 1\n",
    )
    .expect("written");
    let out = Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(["serve", "--bind", "127.0.0.1:0", "--journal", &journal])
        .arg("--agent")
        .arg(format!("a={}", bad.display()))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--agent a"),
        "{}",
        text(&out.stderr)
    );

    let good = write_config(dir.path(), "http://127.0.0.1:9/v1", "");
    let out = Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(["serve", "--bind", "127.0.0.1:0", "--journal", &journal])
        .arg("--agent")
        .arg(format!("a={good}"))
        .args(["--key-env", "TERMINUS_SERVE_KEY_UNSET"])
        .env_remove("TERMINUS_SERVE_KEY_UNSET")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--key-env TERMINUS_SERVE_KEY_UNSET: the variable is unset"),
        "{}",
        text(&out.stderr)
    );
}

/// `tests/agui`, its npm packages and the AG-UI Python SDK's virtualenv installed by
/// `.ci/agui.sh` (run here when they are not); `None` when npm is missing outside CI.
fn agui() -> Option<(PathBuf, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let peers =
        std::env::var_os("TERMINUS_PEERS").map_or_else(|| root.join("target/peers"), PathBuf::from);
    let python = peers.join("agui-python/bin/python");
    let folder = root.join("tests/agui");
    // `.ci/agui.sh` copies the lock it installed from next to the packages.
    let lock = std::fs::read(folder.join("package-lock.json")).expect("tests/agui's lock");
    let installed = std::fs::read(folder.join("node_modules/.pins")).ok();
    if installed.as_deref() != Some(lock.as_slice())
        || !python.is_file()
        || !Path::new("/usr/bin/chromium").is_file()
    {
        let npm = Command::new("npm").arg("--version").output();
        if !npm.is_ok_and(|o| o.status.success()) {
            assert!(
                std::env::var_os("CI").is_none(),
                "npm is not installed: the AG-UI clients cannot be installed"
            );
            eprintln!("skipped: npm is not installed, so the AG-UI clients cannot be installed");
            return None;
        }
        let out = Command::new("bash")
            .arg(root.join(".ci/agui.sh"))
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            ".ci/agui.sh failed:\n{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    Some((folder, python))
}

/// What a client script printed: its one JSON line (exit 0), or the test fails with its output.
fn client_output(out: &std::process::Output, who: &str) -> Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{who}:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    last_json(&out.stdout)
}

/// The official clients, `@ag-ui/client` (its `HttpAgent`, every event checked against
/// `@ag-ui/core`'s schema) and the Python SDK `ag-ui-protocol` (every event parsed with its
/// `Event` model), each run the architect to its interrupt and approve the held call with
/// `resume`; the call then runs once on each thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_clients_parse_every_event_and_approve_through_resume() {
    let Some(peers) = peers::dir() else { return };
    let Some((folder, python)) = agui() else {
        return;
    };
    let setup = Setup::serving(&peers, APPROVAL, 2).await;
    let serve = setup.serve();
    let endpoint = format!("{}/agents/architect", serve.url);

    let js = tokio::process::Command::new("node")
        .arg(folder.join("client.mjs"))
        .args([&endpoint, SERVE_KEY, "js-thread", TASK])
        .current_dir(&folder)
        .output()
        .await
        .expect("node runs");
    let js = client_output(&js, "@ag-ui/client");
    let runs = js["runs"].as_array().expect("two runs");
    assert_eq!(runs[0]["types"][0], "RUN_STARTED");
    assert_eq!(
        runs[0]["types"].as_array().and_then(|t| t.last()),
        Some(&json!("RUN_FINISHED"))
    );
    let interrupt = &runs[0]["interrupts"][0];
    assert_eq!(interrupt["reason"], "tool_call", "{js}");
    let js_call = interrupt["toolCallId"].as_str().expect("a call").to_owned();
    assert_eq!(runs[1]["pending"], 0);
    assert_eq!(js["result"]["report"]["reason"], "verified", "{js}");
    // The client's own reading of the stream: the tool's answer to the held call is a message.
    assert!(
        js["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .any(|m| m["role"] == "tool" && m["toolCallId"] == json!(js_call)),
        "{js}"
    );
    assert_eq!(js["state"]["status"], "complete", "{js}");
    assert_eq!(
        setup.intents_and_results("js-thread", &js_call).await,
        (1, 1)
    );

    let py = tokio::process::Command::new(&python)
        .arg(folder.join("client.py"))
        .args([&endpoint, SERVE_KEY, "py-thread", TASK])
        .output()
        .await
        .expect("python runs");
    let py = client_output(&py, "ag-ui-protocol");
    assert_eq!(py["runs"][0][0], "RUN_STARTED");
    let py_call = py["interrupts"][0]["toolCallId"]
        .as_str()
        .expect("a call")
        .to_owned();
    assert_eq!(py["interrupts"][0]["id"], json!(py_call));
    assert_eq!(py["outcome"], "success", "{py}");
    assert_eq!(py["result"]["report"]["reason"], "verified");
    assert!(
        py["results"]
            .as_array()
            .expect("results")
            .contains(&json!(py_call))
    );
    assert_eq!(
        setup.intents_and_results("py-thread", &py_call).await,
        (1, 1)
    );
    assert_eq!(setup.fixture.requests().len(), 12);
}

/// The page at `GET /` in Debian's headless chromium (driven by `playwright-core`): a person
/// gives the key, picks the agent, gives the task, watches the run reach the held write, clicks
/// Approve, and sees the stop reason and the `inspect` text. The write runs once. Screenshots of
/// the held call and of the end go to `target/agui-screenshots/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_runs_an_agent_to_its_stop_with_an_approval_clicked() {
    let Some(peers) = peers::dir() else { return };
    let Some((folder, _)) = agui() else {
        return;
    };
    // The replies stream: the page shows each message as its pieces arrive.
    let streamed = Some((8, std::time::Duration::from_millis(20)));
    let setup = Setup::architect(&peers, APPROVAL, 1, streamed).await;
    let serve = setup.serve();
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/agui-screenshots");
    std::fs::create_dir_all(&shots).expect("a folder for the screenshots");
    for shot in ["held.png", "end.png"] {
        let _ = std::fs::remove_file(shots.join(shot));
    }
    let out = tokio::process::Command::new("node")
        .arg(folder.join("browser.mjs"))
        .arg(format!("{}/", serve.url))
        .args([SERVE_KEY, TASK])
        .arg(&shots)
        .current_dir(&folder)
        .output()
        .await
        .expect("node runs");
    let page = client_output(&out, "the page in chromium");
    assert_eq!(page["agents"], json!(["architect"]));
    assert_eq!(page["problems"], json!([]), "no script error: {page}");
    assert_eq!(
        page["outside"],
        json!([]),
        "the page loads nothing from elsewhere: {page}"
    );
    assert_eq!(page["held"]["status"], "waiting for a decision");
    assert!(
        page["held"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Approve the call of `write_file`")),
        "{page}"
    );
    let end = &page["end"];
    assert_eq!(end["status"], "complete", "{page}");
    assert!(
        end["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("complete (verified) after")),
        "{page}"
    );
    assert_eq!(end["result"], "Plan written to plan.md.");
    let thread = end["thread"].as_str().expect("the thread");
    let (code, explained, stderr) = setup.terminus(&["inspect", "--execution", thread]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(end["inspect"], json!(explained));
    // Every step of both runs was shown, and every tool call.
    let report = setup.terminus(&["resume", "--execution", thread, "--json"]);
    let report = last_json(report.1.as_bytes());
    assert_eq!(
        end["steps"].as_array().map(Vec::len),
        report["steps"].as_u64().map(|n| n as usize),
        "{page}"
    );
    assert_eq!(end["calls"], 4);
    // Each streamed message whole, in one place, in the step that took it.
    let mut texts: Vec<&str> = end["texts"]
        .as_array()
        .expect("texts")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    texts.sort_unstable();
    assert_eq!(
        texts,
        [
            "I will now write the plan.",
            LISTING,
            "Plan written to plan.md."
        ],
        "{page}"
    );
    assert!(
        end["budgets"].as_array().expect("budgets").iter().any(|b| b
            .as_str()
            .is_some_and(|b| b.starts_with("model_calls: 6 of "))),
        "{page}"
    );
    assert_eq!(setup.intents_and_results(thread, "call_4_0").await, (1, 1));
    assert_eq!(
        std::fs::read_to_string(&setup.plan).expect("written once approved"),
        "# Plan\n1. Fix parse.\n"
    );
    for shot in ["held.png", "end.png"] {
        let png = std::fs::read(shots.join(shot)).expect("a screenshot");
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
            "{shot}"
        );
    }
}

/// A run the kernel aborts (here: the model server refuses the key, a fatal model error) ends
/// with `RUN_ERROR` whose code is the stop reason, after the report (`CUSTOM` `terminus.report`,
/// the journal's) and the `inspect` text; the state ends `aborted` with that reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_run_ends_with_run_error_naming_the_stop_reason() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let fixture = Fixture::start(vec![terminus_fixture::Response::json(
        401,
        r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#,
    )])
    .await
    .expect("a port");
    let config = write_config(dir.path(), &format!("{}/v1", fixture.url()), "");
    let journal = dir.path().join("journal.db").to_string_lossy().into_owned();
    let serve = Serve::start(&config, &journal, &[]);
    let (status, body) = serve
        .post(
            "/agents/architect",
            &input("denied", "run-1").to_string(),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let events = events(&body);
    check_lifecycle(&events, "denied", "run-1");
    let last = events.last().expect("events");
    assert_eq!(last["type"], "RUN_ERROR", "{body}");
    let report = &events
        .iter()
        .find(|e| e["type"] == "CUSTOM" && e["name"] == "terminus.report")
        .expect("the report")["value"];
    assert_eq!(report["outcome"], "aborted");
    assert_eq!(last["code"], report["reason"]);
    assert_eq!(last["code"], "model_error", "{last}");
    assert_eq!(
        last["message"],
        "aborted (model_error) after 1 step (rule model_fatal)"
    );
    let state = final_state(&events);
    assert_eq!(
        (&state["status"], &state["reason"], &state["rule"]),
        (
            &json!("aborted"),
            &json!("model_error"),
            &json!("model_fatal")
        )
    );
    assert_eq!(fixture.requests().len(), 1, "an auth error is not retried");
    let out = Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args([
            "resume",
            "--journal",
            &journal,
            "--execution",
            "denied",
            "--json",
        ])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(&last_json(&out.stdout), report);
}

/// A held call denied through `resume` (`approved: false` with a reason) never runs: the model
/// is told it was denied, with the reason, as the call's result (`TOOL_CALL_RESULT` against the
/// first run's call id), and the journal holds no intent of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_denied_through_resume_never_runs() {
    let Some(peers) = peers::dir() else { return };
    let setup = Setup::new(&peers, true).await;
    let serve = setup.serve();
    let id = interrupted(&serve, &setup, "denied-1").await;
    let mut deny = approving("denied-1", "run-b", &id);
    deny["resume"][0]["payload"] = json!({ "approved": false, "reason": "not on a Friday" });
    let events = serve.run(&deny).await;
    check_lifecycle(&events, "denied-1", "run-b");
    let told = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == json!(id))
        .expect("the denial answers the call");
    let content = told["content"].as_str().expect("text");
    assert!(
        content.contains("permission_denied") && content.contains("not on a Friday"),
        "{content}"
    );
    assert!(!setup.plan.exists(), "a denied write never runs");
    assert_eq!(setup.intents_and_results("denied-1", &id).await, (0, 1));
    // The model was asked again, with the denial in its conversation.
    let requests = setup.fixture.requests();
    assert!(requests.len() > 4);
    assert!(requests[4].json().to_string().contains("not on a Friday"));
}

/// The model's text streams (`stream = true`): each piece of a reply the model server sends
/// reaches the client as a `TEXT_MESSAGE_CONTENT` while the server is still sending the rest
/// (the first piece arrives before the pauses between the others are over), inside
/// `TEXT_MESSAGE_START`/`END` named `msg-STEP` (the step that takes the turn; the end comes
/// before that step); a call of the same reply names that message as its parent. The journal
/// keeps each turn's text whole, as the pieces make it, and the run ends as the unstreamed one
/// does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_text_streams_to_the_client_while_it_generates() {
    let Some(peers) = peers::dir() else { return };
    let pause = std::time::Duration::from_millis(150);
    let setup = Setup::architect(&peers, "", 1, Some((8, pause))).await;
    let serve = setup.serve();
    let timed = serve.run_timed(&input("streamed-1", "run-1")).await;
    let events: Vec<Value> = timed.iter().map(|(_, e)| e.clone()).collect();
    check_lifecycle(&events, "streamed-1", "run-1");
    let finished = events.last().expect("events");
    assert_eq!(finished["outcome"]["type"], "success", "{}", serve.log());
    assert_eq!(finished["result"]["report"]["reason"], "verified");

    let texts = [
        LISTING,
        "I will now write the plan.",
        "Plan written to plan.md.",
    ];
    let ids: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_START")
        .filter_map(|e| e["messageId"].as_str())
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    for (&id, text) in ids.iter().zip(texts) {
        let of = |kind: &str| -> Vec<usize> {
            (0..events.len())
                .filter(|&i| events[i]["type"] == kind && events[i]["messageId"] == id)
                .collect()
        };
        let (starts, contents, ends) = (
            of("TEXT_MESSAGE_START"),
            of("TEXT_MESSAGE_CONTENT"),
            of("TEXT_MESSAGE_END"),
        );
        let pieces = text.chars().count().div_ceil(8);
        assert_eq!(contents.len(), pieces, "{id}: one event per piece");
        let said: String = contents
            .iter()
            .filter_map(|&i| events[i]["delta"].as_str())
            .collect();
        assert_eq!(said, text);
        assert_eq!((starts.len(), ends.len()), (1, 1), "{id}");
        assert!(starts[0] < contents[0] && contents[pieces - 1] < ends[0]);
        // While it generates: the first piece reached the client before the server had sent
        // the last (the pauses between them are the server's).
        let early = timed[ends[0]].0 - timed[contents[0]].0;
        assert!(
            early >= pause * u32::try_from(pieces - 2).expect("few"),
            "{id}: the first piece came only {early:?} before the end"
        );
        // The message ends before the step that takes the turn, named by it.
        let step = events[ends[0] + 1..]
            .iter()
            .find(|e| e["type"] == "STEP_STARTED")
            .expect("the turn's step");
        assert!(step["stepName"].is_string());
    }
    let listing = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_START")
        .expect("the listing call");
    assert_eq!(
        (&listing["toolCallName"], &listing["parentMessageId"]),
        (&json!("list_directory"), &json!(ids[0]))
    );
    let args: Value = serde_json::from_str(
        events
            .iter()
            .find(|e| e["type"] == "TOOL_CALL_ARGS")
            .and_then(|e| e["delta"].as_str())
            .expect("the arguments"),
    )
    .expect("JSON");
    assert!(args["path"].as_str().is_some_and(|p| p.ends_with("/src")));

    // The journal keeps each turn whole, at the step the message is named by.
    let records = Journal::Sqlite(PathBuf::from(&setup.journal))
        .open()
        .await
        .records("streamed-1")
        .await
        .expect("readable");
    let turns: Vec<(String, &str)> = records
        .iter()
        .filter_map(|r| match &r.entry {
            Entry::Assistant(turn) if !turn.text.is_empty() => {
                Some((format!("msg-{}", r.key.checkpoint), turn.text.as_str()))
            }
            _ => None,
        })
        .collect();
    let expected: Vec<(String, &str)> = ids.iter().map(|id| (*id).to_owned()).zip(texts).collect();
    assert_eq!(turns, expected);
    assert_eq!(
        std::fs::read_to_string(&setup.plan).expect("written"),
        "# Plan\n1. Fix parse.\n"
    );
    assert_eq!(setup.fixture.requests().len(), 6);
    assert!(
        setup
            .fixture
            .requests()
            .iter()
            .all(|r| r.json()["stream"] == true)
    );
}

/// A client script of `tests/agui` (`client.mjs` on node, `client.py` on the SDK's virtualenv)
/// run on `endpoint`'s new `thread` with `task`, answering interrupts with `answers` (by kind).
async fn client(
    (folder, python): &(PathBuf, PathBuf),
    js: bool,
    endpoint: &str,
    thread: &str,
    task: &str,
    answers: &Value,
) -> Value {
    let (program, script, who) = if js {
        (PathBuf::from("node"), "client.mjs", "@ag-ui/client")
    } else {
        (python.clone(), "client.py", "ag-ui-protocol")
    };
    let out = tokio::process::Command::new(program)
        .arg(folder.join(script))
        .args([endpoint, SERVE_KEY, thread, task, &answers.to_string()])
        .current_dir(folder)
        .output()
        .await
        .expect("the client runs");
    client_output(&out, who)
}

/// Every kind of held call round-trips through `RunAgentInput.resume` with both official
/// clients: a deferred call (the architect's listing, `deferred = ["list_directory"]`, its
/// replies streamed) answered with its result, and a question a tool asks
/// (`elicitation = "person"`, the official MCP SDK's form elicitation) answered with the form's
/// content. Each client sees the interrupt of its kind (`tool_call` or `input_required`, with
/// the question as its message), resumes, and the run finishes: the answer is the deferred
/// call's result, the question's answer reaches the tool, which acts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_held_kind_round_trips_through_resume_with_the_official_clients() {
    let Some(peers) = peers::dir() else { return };
    let Some(agui) = agui() else { return };

    let streamed = Some((8, std::time::Duration::from_millis(20)));
    let setup = Setup::architect(&peers, "deferred = [\"list_directory\"]\n", 2, streamed).await;
    let serve = setup.serve();
    let endpoint = format!("{}/agents/architect", serve.url);
    let answers = json!({ "deferred": { "result": "[FILE] lib.rs" } });
    for (js, thread) in [(true, "js-deferred"), (false, "py-deferred")] {
        let out = client(&agui, js, &endpoint, thread, TASK, &answers).await;
        // `client.mjs` gives each run's interrupts and pieces; `client.py` all of them at once.
        let (call, pieces) = if js {
            (
                &out["runs"][0]["interrupts"][0],
                &out["runs"][1]["contents"],
            )
        } else {
            (&out["interrupts"][0], &out["contents"])
        };
        assert_eq!(out["runs"].as_array().map(Vec::len), Some(2), "{out}");
        assert_eq!(
            (&call["kind"], &call["reason"]),
            (&json!("deferred"), &json!("tool_call")),
            "{out}"
        );
        assert_eq!(out["result"]["report"]["reason"], "verified", "{out}");
        // The replies streamed: the client took a message in more than one piece.
        let pieces = pieces.as_object().expect("pieces by message");
        assert!(pieces.values().any(|n| n.as_u64() > Some(1)), "{out}");
        let id = call["toolCallId"].as_str().expect("a call id");
        let (_, answered) = setup.intents_and_results(thread, id).await;
        assert_eq!(answered, 1, "{out}");
    }
    assert_eq!(setup.fixture.requests().len(), 12);
    drop(serve);

    let setup = Setup::asking(&peers, 2).await;
    let serve = setup.serve();
    let endpoint = format!("{}/agents/architect", serve.url);
    let answers = json!({ "elicitation": { "confirm": true, "reason": "merged" } });
    let mut deleted = String::new();
    for (js, thread) in [(true, "js-asked"), (false, "py-asked")] {
        let out = client(
            &agui,
            js,
            &endpoint,
            thread,
            "Delete the main branch.",
            &answers,
        )
        .await;
        let call = if js {
            &out["runs"][0]["interrupts"][0]
        } else {
            &out["interrupts"][0]
        };
        assert_eq!(
            (&call["kind"], &call["reason"], &call["message"]),
            (
                &json!("elicitation"),
                &json!("input_required"),
                &json!("Delete branch main?")
            ),
            "{out}"
        );
        assert_eq!(out["result"]["report"]["outcome"], "complete", "{out}");
        deleted.push_str("deleted main (merged)\n");
        assert_eq!(
            std::fs::read_to_string(&setup.plan).unwrap_or_default(),
            deleted,
            "{out}"
        );
    }
    assert_eq!(setup.fixture.requests().len(), 4);
}

/// The conformance scenarios (`spec/scenarios/*.json`), each served as an agent of its own
/// (`--agent NAME=FILE.json`: its scripted model and tools, its policy) and run with its task by
/// both official clients, every event parsed by each: each run ends as the scenario's `expect`
/// says, `RUN_FINISHED` with the report's reason for a complete one, `RUN_ERROR` whose `code`
/// is the stop reason for an aborted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_clients_parse_every_conformance_scenarios_run() {
    let Some(agui) = agui() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/scenarios");
    let mut scenarios: Vec<(String, Value, String)> = std::fs::read_dir(&suite)
        .expect("the suite")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|path| {
            let file: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).expect("readable"))
                    .expect("JSON");
            let name = path
                .file_stem()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            (name, file, path.to_string_lossy().into_owned())
        })
        .collect();
    scenarios.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(scenarios.len() > 40, "{}", scenarios.len());
    let agents: Vec<String> = scenarios
        .iter()
        .map(|(name, _, path)| format!("{name}={path}"))
        .collect();
    let journal = dir.path().join("journal.db").to_string_lossy().into_owned();
    let serve = Serve::agents(&agents, &journal, &["--key-env", "TERMINUS_SERVE_KEY"]);
    for js in [true, false] {
        let who = if js { "js" } else { "py" };
        let runs: Vec<Value> = scenarios
            .iter()
            .map(|(name, file, _)| {
                json!({ "url": format!("{}/agents/{name}", serve.url),
                        "thread": format!("{who}-{name}"), "task": file["task"] })
            })
            .collect();
        let runs = Value::Array(runs).to_string();
        let (folder, python) = &agui;
        let out = if js {
            tokio::process::Command::new("node")
                .arg(folder.join("client.mjs"))
                .args(["--runs", SERVE_KEY, &runs])
                .current_dir(folder)
                .output()
                .await
        } else {
            tokio::process::Command::new(python)
                .arg(folder.join("client.py"))
                .args(["--runs", SERVE_KEY, &runs])
                .output()
                .await
        }
        .expect("the client runs");
        let out = client_output(&out, who);
        let ran = out.as_array().expect("one entry per scenario");
        assert_eq!(ran.len(), scenarios.len());
        for ((name, file, _), run) in scenarios.iter().zip(ran) {
            let expect = &file["expect"];
            let last = &run["last"];
            assert_eq!(run["types"][0], "RUN_STARTED", "{name}");
            let reason = if expect["outcome"] == "complete" {
                assert_eq!(
                    last["type"],
                    "RUN_FINISHED",
                    "{who} {name}: {run}\n{}",
                    serve.log()
                );
                &last["reason"]
            } else {
                assert_eq!(
                    last["type"],
                    "RUN_ERROR",
                    "{who} {name}: {run}\n{}",
                    serve.log()
                );
                &last["code"]
            };
            if !expect["reason"].is_null() {
                assert_eq!(reason, &expect["reason"], "{who} {name}: {run}");
            }
        }
    }
}

/// A real model server (llama.cpp's `llama-server` with SmolLM2-135M, installed by
/// `.ci/peers.sh`), streaming: its reply reaches the client as more than one
/// `TEXT_MESSAGE_CONTENT` of one message, and the pieces make the turn the journal keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_model_servers_reply_streams_in_pieces() {
    let Some(peers) = peers::dir() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let Some(llama) = terminus_fixture::LlamaServer::start(&peers, dir.path(), &Default::default())
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "llama-server is not installed in {} (.ci/peers.sh installs it)",
            peers.display()
        );
        eprintln!("skipped: llama-server is not installed");
        return;
    };
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "system_prompt = \"Answer in one short sentence.\"\n\
             [model]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"smollm2\"\n\
             stream = true\ntimeout_ms = 60000\nmax_output_tokens = 32\n\
             [policy]\nmax_steps = 6\nmax_model_calls = 2\nmax_nudges = 1\n",
            llama.url()
        ),
    )
    .expect("write the config");
    let journal = dir.path().join("journal.db").to_string_lossy().into_owned();
    let serve = Serve::start(&config.to_string_lossy(), &journal, &[]);
    let mut first = input("llama-1", "run-1");
    first["messages"][0]["content"] = json!("What colour is the sky?");
    let events = serve.run(&first).await;
    check_lifecycle(&events, "llama-1", "run-1");
    let id = events
        .iter()
        .find(|e| e["type"] == "TEXT_MESSAGE_START")
        .map(|e| e["messageId"].clone())
        .unwrap_or_else(|| panic!("a text message: {:?}\n{}", types(&events), llama.log()));
    let pieces: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT" && e["messageId"] == id)
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert!(pieces.len() > 1, "{pieces:?}");
    eprintln!("llama-server's reply: {} pieces", pieces.len());
    let records = Journal::Sqlite(PathBuf::from(&journal))
        .open()
        .await
        .records("llama-1")
        .await
        .expect("readable");
    let turn = records
        .iter()
        .find_map(|r| match &r.entry {
            Entry::Assistant(turn) if json!(format!("msg-{}", r.key.checkpoint)) == id => {
                Some(turn.text.clone())
            }
            _ => None,
        })
        .expect("the turn in the journal");
    assert_eq!(pieces.concat(), turn);
}

/// Runs `first` on a server of `setup` to its one interrupt, then kills the server (`SIGKILL`)
/// with the call held: the interrupt's id and kind.
async fn killed_at_the_interrupt(setup: &Setup, first: &Value) -> (String, Value) {
    let mut serve = setup.serve();
    let events = serve.run(first).await;
    let finished = events.last().expect("events");
    assert_eq!(finished["outcome"]["type"], "interrupt", "{}", serve.log());
    let interrupt = &finished["outcome"]["interrupts"][0];
    serve.child.kill().expect("SIGKILL");
    serve.child.wait().expect("reaped");
    (
        interrupt["id"].as_str().expect("an id").to_owned(),
        interrupt["metadata"]["terminus"]["kind"].clone(),
    )
}

/// `input` on `thread` with `resume` answering call `id` with `payload`.
fn answering(thread: &str, id: &str, payload: Value) -> Value {
    let mut input = input(thread, "run-b");
    input["resume"] = json!([{ "interruptId": id, "status": "resolved", "payload": payload }]);
    input
}

/// A crash of `terminus serve` while a deferred call or a question is held loses nothing: a new
/// server on the same journal takes the answer through `resume`, and the answer reaches the
/// call once (the deferred call's one result; the tool acting once on the question's answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_calls_and_questions_survive_a_killed_server() {
    let Some(peers) = peers::dir() else { return };
    let setup = Setup::serving(&peers, "deferred = [\"list_directory\"]\n", 1).await;
    let (id, kind) = killed_at_the_interrupt(&setup, &input("deferred-1", "run-a")).await;
    assert_eq!(kind, "deferred");
    let again = setup.serve();
    let payload = json!({ "result": "[FILE] lib.rs" });
    let events = again.run(&answering("deferred-1", &id, payload)).await;
    check_lifecycle(&events, "deferred-1", "run-b");
    let last = events.last().expect("events");
    assert_eq!(last["outcome"]["type"], "success", "{}", again.log());
    assert_eq!(setup.intents_and_results("deferred-1", &id).await.1, 1);
    assert_eq!(setup.fixture.requests().len(), 6);

    let setup = Setup::asking(&peers, 1).await;
    let mut first = input("asked-1", "run-a");
    first["messages"][0]["content"] = json!("Delete the main branch.");
    let (id, kind) = killed_at_the_interrupt(&setup, &first).await;
    assert_eq!(kind, "elicitation");
    assert_eq!(std::fs::read_to_string(&setup.plan).unwrap_or_default(), "");
    let again = setup.serve();
    let payload = json!({ "confirm": true, "reason": "merged" });
    let mut answer = answering("asked-1", &id, payload);
    answer["messages"][0]["content"] = json!("Delete the main branch.");
    let events = again.run(&answer).await;
    check_lifecycle(&events, "asked-1", "run-b");
    let last = events.last().expect("events");
    assert_eq!(last["outcome"]["type"], "success", "{}", again.log());
    assert_eq!(
        std::fs::read_to_string(&setup.plan).expect("the log"),
        "deleted main (merged)\n"
    );
    assert_eq!(setup.fixture.requests().len(), 2);
}
