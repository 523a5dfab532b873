//! Record then replay, as a property: for generated sequences of model answers served over HTTP
//! by the scripted fixture server (tool calls, todo updates, claims, empty replies, cut-off
//! answers, provider errors, and whatever the kernel does when the script runs out),
//! `terminus agent --record` then `terminus run` of the recording takes the same path (every
//! progress line) and gives the same report, field by field but the execution id.

mod common;

use common::{fs_server, reply, terminus, text};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use std::path::Path;
use terminus_fixture::{Fixture, Response, peers};

/// One answer of the model server.
#[derive(Debug, Clone)]
enum Answer {
    /// A final answer.
    Claim,
    /// Text the model says it will go on from.
    Progress,
    /// A `write_todos` call.
    Todos(&'static str),
    /// A filesystem tool that succeeds (the server lists the work folder).
    List,
    /// A filesystem tool that fails (the file does not exist).
    ReadMissing,
    /// No content, no calls, no usage.
    Empty,
    /// Cut off by the output limit.
    Length,
    /// A provider error.
    Status(u16),
}

fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        2 => Just(Answer::Claim),
        1 => Just(Answer::Progress),
        2 => prop_oneof![Just("in_progress"), Just("completed")].prop_map(Answer::Todos),
        2 => Just(Answer::List),
        2 => Just(Answer::ReadMissing),
        1 => Just(Answer::Empty),
        1 => Just(Answer::Length),
        1 => prop_oneof![Just(429u16), Just(500), Just(503)].prop_map(Answer::Status),
    ]
}

fn chat(n: usize, message: Value, finish: &str, usage: (u32, u32)) -> Response {
    Response::json(
        200,
        json!({ "id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": 1,
                "model": "gpt-4o-mini",
                "choices": [{ "index": 0, "message": message, "finish_reason": finish }],
                "usage": { "prompt_tokens": usage.0, "completion_tokens": usage.1,
                           "total_tokens": usage.0 + usage.1 } })
        .to_string(),
    )
}

fn serve(answer: &Answer, n: usize, root: &Path) -> Response {
    let todos = |status: &str| json!({ "todos": [{ "content": "the plan", "status": status }] });
    match answer {
        Answer::Claim => reply(&format!("Finished after {n} answers."), &[], n),
        Answer::Progress => reply("Next I will look at the files.", &[], n),
        Answer::Todos(status) => reply("", &[("write_todos", todos(status))], n),
        Answer::List => reply("", &[("list_directory", json!({ "path": root }))], n),
        Answer::ReadMissing => reply(
            "",
            &[(
                "read_text_file",
                json!({ "path": root.join("missing.txt") }),
            )],
            n,
        ),
        Answer::Empty => chat(
            n,
            json!({ "role": "assistant", "content": "" }),
            "stop",
            (0, 0),
        ),
        Answer::Length => chat(
            n,
            json!({ "role": "assistant", "content": "The plan is: first" }),
            "length",
            (300, 4096),
        ),
        Answer::Status(status) => Response::json(
            *status,
            r#"{"error":{"message":"try again","type":"server_error"}}"#,
        ),
    }
}

/// The progress lines without their clocks: the path, one transition a line.
fn path(stderr: &[u8]) -> Vec<String> {
    text(stderr)
        .lines()
        .filter(|l| l.starts_with('['))
        .map(|l| l.split_once("] ").map_or(l, |(_, t)| t).to_owned())
        .collect()
}

fn report(stdout: &[u8]) -> Result<Value, TestCaseError> {
    let mut v: Value = serde_json::from_str(text(stdout).lines().last().unwrap_or_default())
        .map_err(|e| TestCaseError::fail(format!("no JSON report: {e}")))?;
    if let Some(o) = v.as_object_mut() {
        o.remove("execution");
    }
    Ok(v)
}

async fn round_trip(
    answers: Vec<Answer>,
    peers: Option<&Path>,
    dir: &Path,
) -> Result<(), TestCaseError> {
    let root = dir.join("work");
    std::fs::create_dir_all(&root).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let script: Vec<Response> = answers
        .iter()
        .enumerate()
        .map(|(n, a)| serve(a, n, &root))
        .collect();
    let fixture = Fixture::start(script)
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mcp = match peers {
        Some(peers) => fs_server(peers, &root.to_string_lossy()),
        None => String::new(),
    };
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[model]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"gpt-4o-mini\"\n\
             stream = false\ntimeout_ms = 5000\n\
             [policy]\nmax_steps = 30\nretry_base_ms = 1\nretry_max_ms = 4\n\
             [context]\nwindow = 16000\n{mcp}",
            fixture.url()
        ),
    )
    .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let recording = dir.join("recording.json").to_string_lossy().into_owned();
    let live = terminus(vec![
        "agent".into(),
        config.to_string_lossy().into_owned(),
        "--task".into(),
        "Write the plan.".into(),
        "--record".into(),
        recording.clone(),
        "--json".into(),
    ])
    .await;
    prop_assert!(
        matches!(live.status.code(), Some(0 | 1)),
        "{}",
        text(&live.stderr)
    );
    drop(fixture);
    let replay = terminus(vec!["run".into(), recording, "--json".into()]).await;
    prop_assert_eq!(
        replay.status.code(),
        live.status.code(),
        "{}",
        text(&replay.stderr)
    );
    let live_path = path(&live.stderr);
    prop_assert!(!live_path.is_empty());
    prop_assert_eq!(&live_path, &path(&replay.stderr));
    prop_assert_eq!(report(&live.stdout)?, report(&replay.stdout)?);
    Ok(())
}

#[test]
fn recording_then_replaying_gives_the_same_path_and_report() {
    let peers = peers::dir();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let mut runner = TestRunner::new(Config {
        cases: 12,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&proptest::collection::vec(answer(), 1..10), |answers| {
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        rt.block_on(round_trip(answers, peers.as_deref(), dir.path()))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
