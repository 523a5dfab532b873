//! Live-path bench (issue 11): what an agent step costs when the model is a real HTTP server and
//! the tool a native one, against the same run with the scripted model and tool, in the same
//! process; and the HTTP round trip alone, with the same request bodies against the same
//! zero-latency fixture server, so the live path's own overhead is reported with and without it.
//!
//! An agent step is one model turn calling one tool, plus the tool's result. The live model is
//! the OpenAI-compatible adapter (`stream = false` and `stream = true`) against the fixture
//! server on loopback, answering at once; the journal is in memory in all three, so the figures
//! are the live path's and not the store's. Each run is paired with a scripted run and an HTTP
//! round trip of the same bodies, right after it; "excl. http" is the median of those per-run
//! differences (live - scripted - http round trip): Terminus's own time per step on the live
//! path, which should not grow with the conversation (10, 100 and 1,000 turns).
//!
//! Run: `cargo bench -p terminus-cli --bench live`.

use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Instant;
use terminus_fixture::{Fixture, Response};
use terminus_kernel::{Policy, ToolOutcome};
use terminus_llm::{LlmConfig, LlmModel, Provider};
use terminus_runtime::{Fault, Run, Tool, ToolSet};
use terminus_scenario::Scenario;

/// Paired runs per size: fewer at 1,000 turns, where one live run is a thousand requests.
fn runs(turns: usize) -> usize {
    if turns >= 1000 { 5 } else { 15 }
}

fn policy(turns: usize) -> Policy {
    Policy {
        max_model_calls: u32::try_from(turns + 10).unwrap_or(u32::MAX),
        max_steps: u32::try_from(2 * turns + 20).unwrap_or(u32::MAX),
        ..Policy::default()
    }
}

/// The scripted baseline: `turns` tool turns (each reading another file) and a final answer.
fn scenario(turns: usize) -> Scenario {
    let mut script: Vec<Value> = (0..turns)
        .map(|i| json!({ "tool_calls": [ { "name": "read", "arguments": { "file": i } } ] }))
        .collect();
    script.push(json!({ "text": "All files read.", "needs_more_work": false }));
    let file = json!({
        "name": format!("bench-{turns}"),
        "task": "Read every file.",
        "policy": policy(turns),
        "model": { "turns": script },
        "tools": { "read": { "results": [ { "ok": "contents" } ], "repeat": "last" } }
    });
    Scenario::parse(&file.to_string()).unwrap_or_else(|e| panic!("bench scenario: {e}"))
}

/// The same turns as Chat Completions replies, plain JSON or as an event stream.
fn replies(turns: usize, stream: bool) -> Vec<Response> {
    let usage = json!({ "prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110 });
    let mut out: Vec<Response> = (0..=turns)
        .map(|i| {
            let (content, calls, finish) = if i < turns {
                let call = json!({ "id": format!("call_{i}"), "type": "function",
                    "function": { "name": "read", "arguments": json!({ "file": i }).to_string() } });
                (Value::Null, Some(vec![call]), "tool_calls")
            } else {
                (json!("All files read."), None, "stop")
            };
            if stream {
                let mut delta = json!({ "role": "assistant", "content": content });
                if let Some(calls) = &calls {
                    delta["tool_calls"] = Value::Array(
                        calls
                            .iter()
                            .enumerate()
                            .map(|(k, c)| {
                                let mut c = c.clone();
                                c["index"] = json!(k);
                                c
                            })
                            .collect(),
                    );
                }
                let chunk = |choice: Value, usage: Value| {
                    format!(
                        "data: {}\n\n",
                        json!({ "id": format!("chatcmpl-{i}"), "object": "chat.completion.chunk",
                                "created": 1, "model": "gpt-4o-mini", "choices": choice,
                                "usage": usage })
                    )
                };
                Response::sse([
                    chunk(json!([{ "index": 0, "delta": delta }]), Value::Null),
                    chunk(
                        json!([{ "index": 0, "delta": {}, "finish_reason": finish }]),
                        Value::Null,
                    ),
                    chunk(json!([]), usage.clone()),
                    "data: [DONE]\n\n".to_owned(),
                ])
            } else {
                let mut message = json!({ "role": "assistant", "content": content });
                if let Some(calls) = calls {
                    message["tool_calls"] = Value::Array(calls);
                }
                Response::json(
                    200,
                    json!({ "id": format!("chatcmpl-{i}"), "object": "chat.completion",
                            "created": 1, "model": "gpt-4o-mini",
                            "choices": [{ "index": 0, "message": message, "finish_reason": finish }],
                            "usage": usage })
                    .to_string(),
                )
            }
        })
        .collect();
    out.shrink_to_fit();
    out
}

/// A native tool answering at once.
struct Read;

#[async_trait]
impl Tool for Read {
    fn description(&self) -> &str {
        "Reads a file."
    }

    fn parameters(&self) -> Value {
        json!({ "type": "object", "properties": { "file": { "type": "integer" } } })
    }

    async fn call(&self, _arguments: Value) -> Result<ToolOutcome, Fault> {
        Ok(ToolOutcome::ok(json!("contents")))
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Microseconds per step of the scripted run.
async fn scripted(turns: usize) -> f64 {
    let s = scenario(turns);
    let start = Instant::now();
    let report = s.run().execute().await.unwrap_or_else(|e| panic!("{e}"));
    let us = start.elapsed().as_secs_f64() * 1e6 / turns as f64;
    assert!(report.is_complete() && report.tool_calls as usize == turns);
    us
}

/// Microseconds per step of the live run, and the request bodies it sent.
async fn live(turns: usize, stream: bool) -> (f64, Vec<Vec<u8>>) {
    let fixture = Fixture::start(replies(turns, stream))
        .await
        .unwrap_or_else(|e| panic!("fixture: {e}"));
    let mut config = LlmConfig::new(
        Provider::OpenAi,
        format!("{}/v1", fixture.url()),
        "gpt-4o-mini".to_owned(),
    );
    config.stream = stream;
    let model = Arc::new(LlmModel::new(config).unwrap_or_else(|e| panic!("{e}")));
    let mut tools = ToolSet::new();
    tools.insert("read", Arc::new(Read));
    let start = Instant::now();
    let report = Run::new("Read every file.", policy(turns), model)
        .tools(tools)
        .execute()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let us = start.elapsed().as_secs_f64() * 1e6 / turns as f64;
    assert!(
        report.is_complete() && report.tool_calls as usize == turns,
        "{report:?}"
    );
    let bodies = fixture.requests().into_iter().map(|r| r.body).collect();
    (us, bodies)
}

/// Microseconds per request of POSTing `bodies` to a fresh fixture with the same replies,
/// reading each answer whole: the HTTP round trip of the live run, without the adapter.
async fn round_trips(bodies: &[Vec<u8>], turns: usize, stream: bool) -> f64 {
    let fixture = Fixture::start(replies(turns, stream))
        .await
        .unwrap_or_else(|e| panic!("fixture: {e}"));
    let client = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", fixture.url());
    let start = Instant::now();
    for body in bodies {
        let response = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let bytes = response.bytes().await.unwrap_or_else(|e| panic!("{e}"));
        assert!(!bytes.is_empty());
    }
    start.elapsed().as_secs_f64() * 1e6 / turns as f64
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    println!(
        "live path, per agent step (one model turn calling one tool), medians of paired runs \
         (15; 5 at 1,000 turns)"
    );
    println!(
        "{:>6} {:>7} {:>12} {:>12} {:>12} {:>14} {:>14} {:>8}",
        "turns",
        "stream",
        "scripted us",
        "live us",
        "http rtt us",
        "overhead us",
        "excl. http us",
        "live/scr"
    );
    for turns in [10usize, 100, 1000] {
        for stream in [false, true] {
            let (mut s, mut l, mut h, mut own) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            rt.block_on(async {
                // One warm-up of each, then paired runs: the baseline in the same process, the
                // same minute.
                let _ = scripted(turns).await;
                let _ = live(turns, stream).await;
                for _ in 0..runs(turns) {
                    let scripted = scripted(turns).await;
                    let (us, bodies) = live(turns, stream).await;
                    let http = round_trips(&bodies, turns, stream).await;
                    s.push(scripted);
                    l.push(us);
                    h.push(http);
                    own.push(us - scripted - http);
                }
            });
            let (s, l, h, own) = (median(s), median(l), median(h), median(own));
            println!(
                "{turns:>6} {stream:>7} {s:>12.1} {l:>12.1} {h:>12.1} {:>14.1} {own:>14.1} {:>7.1}x",
                l - s,
                l / s
            );
        }
    }
}
