//! Helpers of the live-agent tests: Chat Completions replies for the fixture model server, an
//! agent config, and the `terminus` binary with a test API key in its environment.

#![allow(dead_code)] // each test file uses its own subset

pub(crate) mod journal;
pub(crate) mod tasks;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;
use terminus_fixture::Response;

/// The API key the tests' configs name; it must never appear in any output or file.
pub(crate) const KEY: &str = "sk-agent-test-key";

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The report on the last stdout line of a `--json` run.
pub(crate) fn last_json(stdout: &[u8]) -> Value {
    serde_json::from_str(text(stdout).lines().last().unwrap_or_default()).unwrap_or_else(|e| {
        panic!(
            "the last stdout line is a JSON report ({e}): {}",
            text(stdout)
        )
    })
}

/// A Chat Completions object (not streamed) with `content` and `tool_calls`.
pub(crate) fn reply(content: &str, calls: &[(&str, Value)], n: usize) -> Response {
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({ "id": format!("call_{n}_{i}"), "type": "function",
                    "function": { "name": name, "arguments": args.to_string() } })
        })
        .collect();
    let mut message = json!({ "role": "assistant", "content": content });
    if !tool_calls.is_empty() {
        message["content"] = Value::Null;
        message["tool_calls"] = Value::Array(tool_calls);
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    Response::json(
        200,
        json!({ "id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": 1741570283,
                "model": "gpt-4o-mini", "choices": [{ "index": 0, "message": message,
                "finish_reason": finish }],
                "usage": { "prompt_tokens": 200, "completion_tokens": 20, "total_tokens": 220 } })
        .to_string(),
    )
}

/// A Chat Completions reply streamed as OpenAI streams it: the role chunk, `content` in pieces
/// of at most `size` characters with `pause` before each piece but the first, each call's id and
/// name then its arguments, the finish chunk, the usage chunk, `[DONE]`.
pub(crate) fn streamed_reply(
    content: &str,
    calls: &[(&str, Value)],
    n: usize,
    size: usize,
    pause: std::time::Duration,
) -> Response {
    let chunk = |delta: Value, finish: Option<&str>, usage: Option<Value>| {
        let mut c = json!({ "id": format!("chatcmpl-{n}"), "object": "chat.completion.chunk",
                            "created": 1741569952, "model": "gpt-4o-mini",
                            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] });
        if let Some(usage) = usage {
            c["choices"] = json!([]);
            c["usage"] = usage;
        }
        format!("data: {c}\n\n")
    };
    let chars: Vec<char> = content.chars().collect();
    let pieces: Vec<String> = chars.chunks(size.max(1)).map(String::from_iter).collect();
    let mut chunks = vec![chunk(
        json!({ "role": "assistant", "content": "" }),
        None,
        None,
    )];
    chunks.extend(
        pieces
            .iter()
            .map(|p| chunk(json!({ "content": p }), None, None)),
    );
    for (i, (name, args)) in calls.iter().enumerate() {
        chunks.push(chunk(
            json!({ "tool_calls": [{ "index": i, "id": format!("call_{n}_{i}"), "type": "function",
                                     "function": { "name": name, "arguments": "" } }] }),
            None,
            None,
        ));
        chunks.push(chunk(
            json!({ "tool_calls": [{ "index": i, "function": { "arguments": args.to_string() } }] }),
            None,
            None,
        ));
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    chunks.push(chunk(json!({}), Some(finish), None));
    let usage = json!({ "prompt_tokens": 200, "completion_tokens": 20, "total_tokens": 220 });
    chunks.push(chunk(json!({}), None, Some(usage)));
    chunks.push("data: [DONE]\n\n".to_owned());
    // Each pause goes before its piece (the role chunk is part 0): inserted from the last, so
    // the parts before keep their places.
    (2..=pieces.len())
        .rev()
        .fold(Response::sse(chunks), |r, i| r.pause_before(i, pause))
}

pub(crate) fn write_config(dir: &Path, base_url: &str, extra: &str) -> String {
    let path = dir.join("agent.toml");
    let body = format!(
        "system_prompt = \"You are a careful software architect.\"\n\
         [model]\nprovider = \"openai\"\nbase_url = \"{base_url}\"\nmodel = \"gpt-4o-mini\"\n\
         api_key_env = \"TERMINUS_TEST_KEY\"\nstream = false\ntimeout_ms = 5000\n\
         [policy]\nverify_completion = true\ncompletion_requires = [\"write_file\"]\n\
         max_nudges = 2\nretry_base_ms = 1\nretry_max_ms = 5\n{extra}"
    );
    std::fs::write(&path, body).expect("write the config");
    path.to_string_lossy().into_owned()
}

/// Writes `dir/agent.toml`: a model at `fixture_url` (the fixture server, no API key, not
/// streamed, 5 s timeout) and then `rest`, the sections a test adds. Its path.
pub(crate) fn keyless_config(dir: &Path, fixture_url: &str, rest: &str) -> std::path::PathBuf {
    let path = dir.join("agent.toml");
    let body = format!(
        "[model]\nprovider = \"openai\"\nbase_url = \"{fixture_url}/v1\"\nmodel = \"gpt-4o-mini\"\n\
         stream = false\ntimeout_ms = 5000\n{rest}"
    );
    std::fs::write(&path, body).expect("write the config");
    path
}

pub(crate) async fn terminus(args: Vec<String>) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(args)
        .env("TERMINUS_TEST_KEY", KEY)
        .output()
        .await
        .expect("the binary runs")
}

/// The `terminus` binary, run to its end with `args` (no test key: scenario runs need none).
pub(crate) fn run_terminus(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// The path of the conformance scenario `name` (`spec/scenarios/{name}.json`).
pub(crate) fn scenario(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../spec/scenarios")
        .join(format!("{name}.json"))
        .to_string_lossy()
        .into_owned()
}

pub(crate) fn todos(status: &str) -> Value {
    json!({ "todos": [{ "content": "write plan.md", "status": status }] })
}

/// The architect task against the filesystem server rooted at `root` (`root/src/lib.rs` is
/// created): list the sources, open a todo, claim too early (refused: `write_file` is required),
/// write `plan.md`, close the todo, answer. Six replies, and the plan's path.
pub(crate) fn architect(root: &Path) -> ([Response; 6], PathBuf) {
    std::fs::create_dir_all(root.join("src")).expect("mkdir");
    std::fs::write(
        root.join("src/lib.rs"),
        "pub fn parse(s: &str) -> u32 { 0 }",
    )
    .expect("write");
    let plan = root.join("plan.md");
    let script = [
        reply(
            "",
            &[("list_directory", json!({ "path": root.join("src") }))],
            1,
        ),
        reply("", &[("write_todos", todos("in_progress"))], 2),
        reply("I will now write the plan.", &[], 3),
        reply(
            "",
            &[(
                "write_file",
                json!({ "path": plan, "content": "# Plan\n1. Fix parse.\n" }),
            )],
            4,
        ),
        reply("", &[("write_todos", todos("completed"))], 5),
        reply("Plan written to plan.md.", &[], 6),
    ];
    (script, plan)
}

/// An `[[mcp]]` entry named `fs`: the real filesystem MCP server (from `.ci/peers.sh`), allowed
/// into `root` (a path, or `./work` taken from the folder the agent starts in).
pub(crate) fn fs_server(peers: &Path, root: &str) -> String {
    format!(
        "[[mcp]]\nname = \"fs\"\ncommand = [{:?}, {:?}, {root:?}]\n",
        terminus_fixture::peers::node(peers),
        terminus_fixture::peers::server_js(peers, "server-filesystem"),
    )
}

/// An `[[mcp]]` entry named `branches`: a server on the official MCP SDK whose `delete_branch`
/// asks its user to confirm (a form elicitation) and appends each deletion to `log`; its
/// questions wait for a person (`elicitation = "person"`).
pub(crate) fn asking_server(peers: &Path, log: &Path) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/tests/servers/elicit.js");
    format!(
        "[[mcp]]\nname = \"branches\"\ncommand = [{:?}, {:?}, {:?}, {:?}]\n\
         elicitation = \"person\"\n",
        terminus_fixture::peers::node(peers),
        script.to_string_lossy(),
        peers.join("node_modules").to_string_lossy(),
        log.to_string_lossy(),
    )
}

/// `TERMINUS_PG_URL`, or `None` with the reason printed; unset in CI is a failure, not a skip.
pub(crate) fn postgres_url() -> Option<String> {
    match std::env::var("TERMINUS_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "TERMINUS_PG_URL must be set in CI: the PostgreSQL store is tested for real there"
            );
            eprintln!("skipping the PostgreSQL half: TERMINUS_PG_URL is not set");
            None
        }
    }
}

/// The model turns a crash test's processes served, from the scripted model's log (one turn
/// number a line): every turn of `1..=turns` served, and how many were served again (the
/// calls in flight at the kills, whose answers were never journaled).
pub(crate) fn turns_served_again(
    lines: impl IntoIterator<Item = impl AsRef<str>>,
    turns: u64,
    seed: u64,
) -> u64 {
    let served: Vec<u64> = lines
        .into_iter()
        .map(|l| l.as_ref().parse().expect("a turn number"))
        .collect();
    let distinct: std::collections::BTreeSet<u64> = served.iter().copied().collect();
    assert_eq!(
        distinct,
        (1..=turns).collect(),
        "seed {seed}: served {served:?}"
    );
    (served.len() - distinct.len()) as u64
}

/// Writes each of `files` (paths relative to `dir`, folders made as needed) with a line of
/// code: a project folder for `--scale-from` and `plan split --glob`.
pub(crate) fn project(dir: &Path, files: &[&str]) {
    for file in files {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap_or(dir)).expect("make the folder");
        std::fs::write(&path, "fn main() {}").expect("write the file");
    }
}
