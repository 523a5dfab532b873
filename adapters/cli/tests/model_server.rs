//! `terminus agent` against a real model server: llama.cpp's `llama-server` built from PyPI with
//! the SmolLM2-135M-Instruct model (both pinned in `.ci/peers.sh`), on 127.0.0.1. The model is
//! far too weak to use tools, so these tests assert what does not depend on its wit: every reply
//! of the three wire protocols (Chat Completions, Responses, Messages), streamed or not, parses;
//! the report's token counts are the server's usage; every run ends with a named reason inside
//! its budgets; the recording replays offline to the same report; a reply cut by the output cap
//! is `length` and never an answer; the default cap is in every request; a prompt longer than the
//! server's context is `context_overflow` (from the server's own error body) and a wrong key is
//! `auth` after one request.
//!
//! Without the server (no peers installed) each test prints why and passes, except on CI (`CI`
//! set), where that is a failure.

mod common;

use common::{KEY, text};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;
use terminus_fixture::{LlamaOptions, LlamaServer, peers};

/// Whether `reason` is one of the kernel's stop reasons.
fn is_stop_reason(reason: &str) -> bool {
    use terminus_kernel::{AbortReason, CompleteReason, Outcome};
    CompleteReason::ALL
        .into_iter()
        .map(Outcome::Complete)
        .chain(AbortReason::ALL.into_iter().map(Outcome::Aborted))
        .any(|o| o.reason_str() == reason)
}

/// The server, or `None` (printed) where the peers hold none; on CI a missing server fails.
fn server(dir: &Path, options: &LlamaOptions) -> Option<LlamaServer> {
    let peers = peers::dir()?;
    let server = LlamaServer::start(&peers, dir, options);
    if server.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "llama-server is not installed in {} (.ci/peers.sh installs it)",
            peers.display()
        );
        eprintln!(
            "skipped: llama-server is not installed in {}",
            peers.display()
        );
    }
    server
}

/// The wire protocols, by their config names.
const PROVIDERS: [&str; 3] = ["openai", "openai-responses", "anthropic"];

/// A config for `provider` at `url`: small budgets (each reply capped at 48 tokens), no tools.
fn config(dir: &Path, name: &str, provider: &str, url: &str, stream: bool, key: &str) -> PathBuf {
    config_with(dir, name, provider, url, stream, key, Some(48))
}

/// Each provider, streamed and not: its name (`{provider}-{stream|whole}{suffix}`) and a config
/// against `url` with the output cap `cap`.
fn each_protocol(
    dir: &Path,
    url: &str,
    suffix: &str,
    cap: Option<u32>,
) -> Vec<(&'static str, String, PathBuf)> {
    let mut out = Vec::new();
    for provider in PROVIDERS {
        for stream in [false, true] {
            let name = format!(
                "{provider}-{}{suffix}",
                if stream { "stream" } else { "whole" }
            );
            let config = config_with(dir, &name, provider, url, stream, "TERMINUS_TEST_KEY", cap);
            out.push((provider, name, config));
        }
    }
    out
}

/// [`config`] with the output cap `cap` (`None`: none in the config, the adapter's default).
fn config_with(
    dir: &Path,
    name: &str,
    provider: &str,
    url: &str,
    stream: bool,
    key: &str,
    cap: Option<u32>,
) -> PathBuf {
    // The protocols under one root: `/v1/chat/completions`, `/v1/responses`, `/v1/messages`.
    let base = format!("{url}/v1");
    let cap = cap.map_or_else(String::new, |cap| format!("max_output_tokens = {cap}\n"));
    let body = format!(
        "system_prompt = \"Answer in one short sentence.\"\n\
         [model]\nprovider = \"{provider}\"\nbase_url = \"{base}\"\nmodel = \"smollm2\"\n\
         api_key_env = \"{key}\"\nstream = {stream}\ntimeout_ms = 60000\n{cap}\
         [policy]\nmax_steps = 12\nmax_model_calls = 4\nmax_nudges = 1\nmax_no_ops = 2\n\
         max_empty_responses = 2\nmax_model_retries = 1\nretry_base_ms = 1\nretry_max_ms = 5\n"
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, body).expect("write the config");
    path
}

fn terminus(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(args)
        .env("TERMINUS_TEST_KEY", KEY)
        .env("TERMINUS_WRONG_KEY", "sk-not-the-key")
        .output()
        .expect("the binary runs")
}

/// The last stdout line, a report.
fn report(out: &Output) -> Value {
    let stdout = text(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| {
        panic!(
            "no report ({e}):\nstdout: {stdout}\nstderr: {}",
            text(&out.stderr)
        )
    })
}

fn without_execution(mut report: Value) -> Value {
    if let Some(o) = report.as_object_mut() {
        o.remove("execution");
    }
    report
}

#[test]
fn every_wire_protocol_streamed_or_not_parses_counts_the_servers_usage_and_replays() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let Some(llama) = server(dir.path(), &LlamaOptions::default()) else {
        return;
    };
    for (_, name, config) in each_protocol(dir.path(), &llama.url(), "", Some(48)) {
        let recording = dir.path().join(format!("{name}.json"));
        let config_arg = config.to_string_lossy().into_owned();
        let recording_arg = recording.to_string_lossy().into_owned();
        let out = terminus(&[
            "agent",
            &config_arg,
            "--task",
            "Name the capital of France.",
            "--record",
            &recording_arg,
            "--json",
        ]);
        let live = report(&out);
        let stderr = text(&out.stderr);
        // Every run ends with a named reason, inside its budgets.
        let reason = live["reason"].as_str().unwrap_or_default();
        assert!(is_stop_reason(reason), "{name}: {live}\n{stderr}");
        assert_ne!(
            reason, "model_error",
            "{name}: a reply did not parse\n{stderr}"
        );
        assert_eq!(
            out.status.code(),
            Some(if live["outcome"] == "complete" { 0 } else { 1 }),
            "{name}: {stderr}"
        );
        let calls = live["model_calls"].as_u64().unwrap_or_default();
        assert!((1..=4).contains(&calls), "{name}: {live}");
        assert!(live["steps"].as_u64().unwrap_or_default() <= 12, "{name}");
        // The report's tokens are the sum of the usage the server sent with each reply (the
        // recording keeps each turn as received).
        let recorded: Value =
            serde_json::from_str(&std::fs::read_to_string(&recording).expect("the recording"))
                .expect("JSON");
        let all = recorded["model"]["turns"].as_array().expect("turns");
        assert_eq!(all.len() as u64, calls, "{name}: one turn a call");
        // A call the machine's load made time out is kept as its error (and retried); it
        // parsed nothing and the server's usage never came. Every other call is a reply.
        let turns: Vec<&Value> = all.iter().filter(|t| t.get("error").is_none()).collect();
        for t in all.iter().filter(|t| t.get("error").is_some()) {
            assert_eq!(
                t["error"], "timeout",
                "{name}: only a timeout is not a reply: {t}"
            );
        }
        assert!(!turns.is_empty(), "{name}: no reply");
        let sum = |field: &str| -> u64 {
            turns
                .iter()
                .map(|t| {
                    t["usage"][field]
                        .as_u64()
                        .unwrap_or_else(|| panic!("{name}: the server sent no usage: {t}"))
                })
                .sum()
        };
        assert!(
            sum("input_tokens") > 0 && sum("output_tokens") > 0,
            "{name}"
        );
        assert_eq!(
            live["stats"]["input_tokens"].as_u64(),
            Some(sum("input_tokens")),
            "{name}"
        );
        assert_eq!(
            live["stats"]["output_tokens"].as_u64(),
            Some(sum("output_tokens")),
            "{name}"
        );
        // Every reply was cut at 48 tokens at most: the cap was sent.
        for t in &turns {
            assert!(
                t["usage"]["output_tokens"].as_u64().unwrap_or(u64::MAX) <= 48,
                "{name}: {t}"
            );
        }
        // Replayed offline: the same report.
        let replay = terminus(&["run", &recording_arg, "--json"]);
        assert_eq!(
            without_execution(report(&replay)),
            without_execution(live.clone()),
            "{name}: the replay differs\n{}",
            text(&replay.stderr)
        );
        eprintln!(
            "{name}: {} after {calls} calls, {} + {} tokens",
            reason,
            sum("input_tokens"),
            sum("output_tokens")
        );
    }
}

#[test]
fn a_prompt_longer_than_the_servers_context_is_context_overflow() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let options = LlamaOptions {
        ctx_size: 256,
        ..LlamaOptions::default()
    };
    let Some(llama) = server(dir.path(), &options) else {
        return;
    };
    let task = "Summarise this list: ".to_owned() + &"apples, pears, plums, ".repeat(200);
    for provider in PROVIDERS {
        let config = config(
            dir.path(),
            provider,
            provider,
            &llama.url(),
            false,
            "TERMINUS_TEST_KEY",
        );
        let out = terminus(&[
            "agent",
            &config.to_string_lossy(),
            "--task",
            &task,
            "--json",
        ]);
        let stderr = text(&out.stderr);
        let live = report(&out);
        // Not retried, not a fatal bad request: the kernel's context stop.
        assert_eq!(
            live["reason"], "context_exhausted",
            "{provider}: {live}\n{stderr}"
        );
        assert_eq!(live["model_calls"], 1, "{provider}: {live}");
        assert!(
            stderr.contains("exceed_context_size_error"),
            "{provider}: the server's own error: {stderr}"
        );
        assert_eq!(out.status.code(), Some(1));
    }
}

#[test]
fn a_wrong_key_is_auth_after_one_request_and_never_printed() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let options = LlamaOptions {
        api_key: Some(KEY.to_owned()),
        ..LlamaOptions::default()
    };
    let Some(llama) = server(dir.path(), &options) else {
        return;
    };
    for provider in PROVIDERS {
        let wrong = config(
            dir.path(),
            &format!("{provider}-wrong"),
            provider,
            &llama.url(),
            false,
            "TERMINUS_WRONG_KEY",
        );
        let out = terminus(&["agent", &wrong.to_string_lossy(), "--task", "Hi.", "--json"]);
        let stderr = text(&out.stderr);
        let live = report(&out);
        assert_eq!(
            live["reason"], "model_error",
            "{provider}: {live}\n{stderr}"
        );
        assert_eq!(live["model_calls"], 1, "{provider}: auth is not retried");
        assert!(stderr.contains("auth"), "{provider}: {stderr}");
        assert!(
            !stderr.contains("sk-not-the-key") && !text(&out.stdout).contains("sk-not-the-key")
        );
        // The right key: served.
        let right = config(
            dir.path(),
            &format!("{provider}-right"),
            provider,
            &llama.url(),
            false,
            "TERMINUS_TEST_KEY",
        );
        let out = terminus(&["agent", &right.to_string_lossy(), "--task", "Hi.", "--json"]);
        let live = report(&out);
        assert_ne!(
            live["reason"],
            "model_error",
            "{provider}: {live}\n{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_reply_cut_by_the_output_cap_is_length_and_never_an_answer() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let Some(llama) = server(dir.path(), &LlamaOptions::default()) else {
        return;
    };
    for (_, name, config) in each_protocol(dir.path(), &llama.url(), "-cut", Some(3)) {
        let recording = dir.path().join(format!("{name}.json"));
        let out = terminus(&[
            "agent",
            &config.to_string_lossy(),
            "--task",
            "Count from one to twenty in words, one number a line.",
            "--record",
            &recording.to_string_lossy(),
            "--json",
        ]);
        let live = report(&out);
        let stderr = text(&out.stderr);
        let recorded: Value =
            serde_json::from_str(&std::fs::read_to_string(&recording).expect("the recording"))
                .expect("JSON");
        let turns = recorded["model"]["turns"].as_array().expect("turns");
        assert!(!turns.is_empty(), "{name}: {live}\n{stderr}");
        // Every reply was cut at 3 tokens: `length`, whatever the server called it (a call the
        // machine's load made time out is kept as its error, and is no reply).
        for t in turns.iter().filter(|t| t["error"] != "timeout") {
            assert_eq!(t["finish"], "length", "{name}: {t}");
            assert!(
                t["usage"]["output_tokens"].as_u64().unwrap_or(u64::MAX) <= 3,
                "{name}: {t}"
            );
        }
        // A cut reply is never the answer: the kernel takes every turn as truncated (a no-op
        // when it has text, an empty reply when not) and the run ends aborted on a budget; its
        // text is at most the partial result of an aborted run.
        let kinds: Vec<&Value> = live["trace"]
            .as_array()
            .expect("the trace")
            .iter()
            .filter_map(|t| t["input"]["turn"]["kind"].as_object())
            .filter_map(|kind| kind.get("no_op").or_else(|| kind.get("empty")))
            .collect();
        assert_eq!(kinds.len(), turns.len(), "{name}: {live}");
        assert!(kinds.iter().all(|k| *k == "truncated"), "{name}: {live}");
        assert_eq!(live["outcome"], "aborted", "{name}: {live}\n{stderr}");
        assert!(
            ["no_progress", "empty_responses", "max_model_calls"]
                .contains(&live["reason"].as_str().unwrap_or_default()),
            "{name}: {live}"
        );
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
    }
}

#[test]
fn the_default_output_cap_is_in_every_request() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let Some(llama) = server(dir.path(), &LlamaOptions::default()) else {
        return;
    };
    let proxy = Proxy::start(&llama.url());
    for (provider, name, config) in each_protocol(dir.path(), &proxy.url(), "-default-cap", None) {
        let before = proxy.requests().len();
        let out = terminus(&[
            "agent",
            &config.to_string_lossy(),
            "--task",
            "Say hi.",
            "--json",
        ]);
        let live = report(&out);
        let calls = live["model_calls"].as_u64().unwrap_or_default();
        let sent = &proxy.requests()[before..];
        assert!(calls >= 1, "{name}: {live}\n{}", text(&out.stderr));
        assert_eq!(sent.len() as u64, calls, "{name}: one request a call");
        let field = match provider {
            "openai" => "max_completion_tokens",
            "openai-responses" => "max_output_tokens",
            _ => "max_tokens",
        };
        for body in sent {
            assert_eq!(body[field], 4096, "{name}: {body}");
        }
    }
}

/// A loopback proxy in front of the server that keeps each request's JSON body (what Terminus
/// sent) and passes it on with its output cap lowered to [`PROXY_CAP`], so that a reply with the
/// default cap of 4096 takes a few tokens, not minutes.
struct Proxy {
    port: u16,
    bodies: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

impl Proxy {
    fn start(upstream: &str) -> Proxy {
        use std::io::{Read, Write};
        use std::net::{TcpListener, TcpStream};
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = bodies.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let (mut from_client, mut to_server) = (client, server);
                let (Ok(mut to_client), Ok(mut from_server)) =
                    (from_client.try_clone(), to_server.try_clone())
                else {
                    continue;
                };
                // Each request goes with `connection: close` (`with_body`): the server closes its
                // side once it has answered, and the client's side is closed then too, so the
                // client's next request opens a new connection rather than waiting on this one
                // (which cost a client timeout, 60 s, a request).
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from_server, &mut to_client);
                    let _ = to_client.shutdown(std::net::Shutdown::Both);
                });
                let kept = kept.clone();
                std::thread::spawn(move || {
                    // Requests, each passed on once whole (head, then its Content-Length body).
                    let mut buffer = Vec::new();
                    let mut chunk = [0u8; 16384];
                    loop {
                        let n = match from_client.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        buffer.extend_from_slice(&chunk[..n]);
                        while let Some((head, body, used)) = whole_request(&buffer) {
                            let sent = match serde_json::from_slice::<Value>(body) {
                                Ok(json) => {
                                    let lowered = lower_cap(&json);
                                    kept.lock().expect("the bodies").push(json);
                                    with_body(head, &lowered)
                                }
                                Err(_) => with_body(head, body),
                            };
                            if to_server.write_all(&sent).is_err() {
                                return;
                            }
                            buffer.drain(..used);
                        }
                    }
                });
            }
        });
        Proxy { port, bodies }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn requests(&self) -> Vec<Value> {
        self.bodies.lock().expect("the bodies").clone()
    }
}

/// The output cap of the requests the proxy passes on.
const PROXY_CAP: u32 = 8;

/// `body` with each protocol's output cap lowered to [`PROXY_CAP`].
fn lower_cap(body: &Value) -> Vec<u8> {
    let mut body = body.clone();
    for field in ["max_completion_tokens", "max_output_tokens", "max_tokens"] {
        if let Some(cap) = body.get_mut(field) {
            *cap = PROXY_CAP.into();
        }
    }
    serde_json::to_vec(&body).expect("JSON")
}

/// The request with the head `head` (its lines, the blank one excluded) and the body `body`,
/// asking the server to close the connection once it has answered (see [`Proxy::start`]).
fn with_body(head: &str, body: &[u8]) -> Vec<u8> {
    let mut out = String::new();
    for line in head.split("\r\n").filter(|l| !l.is_empty()) {
        let lower = line.to_ascii_lowercase();
        if !lower.starts_with("content-length:") && !lower.starts_with("connection:") {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str(&format!(
        "connection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    ));
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// The head and body of the first whole request in `buffer` and the bytes it takes, if it is
/// all there.
fn whole_request(buffer: &[u8]) -> Option<(&str, &[u8], usize)> {
    let head_end = buffer.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buffer[..head_end]).ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length").then_some(value)
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let end = head_end + length;
    (buffer.len() >= end).then(|| (head, &buffer[head_end..end], end))
}

/// The architect task on the real filesystem MCP server and the real model server, killed
/// (SIGKILL) mid-run and resumed: the run ends with a named reason, and no model call answered
/// in the journal is asked again (the requests the server saw: the run's model calls, plus at
/// most the one in flight at the kill).
#[test]
fn a_killed_architect_on_the_real_server_resumes_without_asking_again() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let Some(llama) = server(dir.path(), &LlamaOptions::default()) else {
        return;
    };
    let Some(peers) = peers::dir() else { return };
    let proxy = Proxy::start(&llama.url());
    let root = dir.path().join("work");
    std::fs::create_dir_all(root.join("src")).expect("mkdir");
    std::fs::write(
        root.join("src/lib.rs"),
        "pub fn parse(s: &str) -> u32 { 0 }",
    )
    .expect("a source");
    let config = config_with(
        dir.path(),
        "architect",
        "openai",
        &proxy.url(),
        false,
        "TERMINUS_TEST_KEY",
        Some(24),
    );
    let mut text_of_config = std::fs::read_to_string(&config).expect("the config");
    text_of_config = text_of_config.replace(
        "max_model_calls = 4",
        "max_model_calls = 8\ncompletion_requires = [\"write_file\"]\nmax_nudges = 3",
    );
    text_of_config = text_of_config.replace("max_nudges = 1\n", "");
    text_of_config.push_str(&common::fs_server(&peers, &root.to_string_lossy()));
    std::fs::write(&config, text_of_config).expect("the architect's config");
    let journal = dir.path().join("journal.db").to_string_lossy().into_owned();
    let args = |command: &str| -> Vec<String> {
        let mut args: Vec<String> = match command {
            "agent" => vec![
                "agent".into(),
                config.to_string_lossy().into_owned(),
                "--task".into(),
                "Write an implementation plan for src/lib.rs to plan.md".into(),
            ],
            other => vec![other.into()],
        };
        args.extend(
            [
                "--journal",
                &journal,
                "--execution",
                "architect",
                "--lease-ms",
                "1000",
                "--json",
            ]
            .map(String::from),
        );
        args
    };
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(args("agent"))
        .env("TERMINUS_TEST_KEY", KEY)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the agent starts");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while proxy.requests().len() < 2 {
        assert!(
            std::time::Instant::now() < until,
            "the agent made no second model call"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let asked_before = proxy.requests().len();
    // The killed process's claim must run out first (its lease is 1 s); a resume refused
    // meanwhile exits 4.
    let resumed = loop {
        let refs: Vec<String> = args("resume");
        let refs: Vec<&str> = refs.iter().map(String::as_str).collect();
        let out = terminus(&refs);
        if out.status.code() != Some(4) {
            break out;
        }
        assert!(std::time::Instant::now() < until, "the claim never ran out");
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let report = report(&resumed);
    let reason = report["reason"].as_str().unwrap_or_default();
    assert!(
        is_stop_reason(reason),
        "{report}\n{}",
        text(&resumed.stderr)
    );
    let calls = report["model_calls"].as_u64().unwrap_or_default() as usize;
    let asked = proxy.requests().len();
    assert!(asked > asked_before, "the resume asked the model nothing");
    assert!(
        asked <= calls + 1,
        "{asked} requests for {calls} model calls: a journaled turn was asked again"
    );
}
