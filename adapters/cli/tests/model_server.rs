//! `terminus agent` against a real model server: llama.cpp's `llama-server` built from PyPI with
//! the SmolLM2-135M-Instruct model (both pinned in `.ci/peers.sh`), on 127.0.0.1. The model is
//! far too weak to use tools, so these tests assert what does not depend on its wit: every reply
//! of both wire protocols, streamed or not, parses; the report's token counts are the server's
//! usage; every run ends with a named reason inside its budgets; the recording replays offline to
//! the same report; a prompt longer than the server's context is `context_overflow` (from the
//! server's own error body) and a wrong key is `auth` after one request.
//!
//! Without the server (no peers installed) each test prints why and passes, except on CI (`CI`
//! set), where that is a failure.

mod common;

use common::{KEY, text};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;
use terminus_fixture::{LlamaOptions, LlamaServer, peers};

/// The reasons a run may end with (the kernel's names).
const REASONS: [&str; 17] = [
    "verified",
    "explicit",
    "answered",
    "forced",
    "max_steps",
    "max_model_calls",
    "deadline",
    "cancelled",
    "no_progress",
    "incomplete",
    "verification_loop",
    "tool_failures",
    "unrecoverable_tool_error",
    "empty_responses",
    "model_error",
    "context_exhausted",
    "token_budget",
];

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

/// A config for `provider` at `url`: small budgets (each reply capped at 48 tokens), no tools.
fn config(dir: &Path, name: &str, provider: &str, url: &str, stream: bool, key: &str) -> PathBuf {
    // Both protocols under one root: `/v1/chat/completions` and `/v1/messages`.
    let base = format!("{url}/v1");
    let body = format!(
        "system_prompt = \"Answer in one short sentence.\"\n\
         [model]\nprovider = \"{provider}\"\nbase_url = \"{base}\"\nmodel = \"smollm2\"\n\
         api_key_env = \"{key}\"\nstream = {stream}\ntimeout_ms = 60000\nmax_output_tokens = 48\n\
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
fn both_wire_protocols_streamed_or_not_parse_count_the_servers_usage_and_replay() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let Some(llama) = server(dir.path(), &LlamaOptions::default()) else {
        return;
    };
    for provider in ["openai", "anthropic"] {
        for stream in [false, true] {
            let name = format!("{provider}-{}", if stream { "stream" } else { "whole" });
            let config = config(
                dir.path(),
                &name,
                provider,
                &llama.url(),
                stream,
                "TERMINUS_TEST_KEY",
            );
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
            assert!(REASONS.contains(&reason), "{name}: {live}\n{stderr}");
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
            let turns = recorded["model"]["turns"].as_array().expect("turns");
            assert_eq!(turns.len() as u64, calls, "{name}: one turn a call");
            let sum = |field: &str| -> u64 {
                turns
                    .iter()
                    .map(|t| t["usage"][field].as_u64().expect("the server sent usage"))
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
            for t in turns {
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
    for provider in ["openai", "anthropic"] {
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
    for provider in ["openai", "anthropic"] {
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
