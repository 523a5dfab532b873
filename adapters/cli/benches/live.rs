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
//! Each run is given two ways. "mean": the run's time over its steps, everything included (the
//! run's setup, buffers that grow now and then). "step": the median of the run's steps, each
//! timed from one model call's start to the next one's (the round trips: from one request's
//! start to its answer), by a wrapper around the model that the scripted and the live run both
//! get. The machine that measures is shared (two vCPUs, other builds beside): a run of a
//! thousand requests is preempted many times, each pause lands in its mean, and the means of
//! one run repeated differ by tens of microseconds per step; a run's median step leaves out
//! the steps a preemption hit, so "step" is the figure that compares one build with another,
//! and "mean" says what the rest costs when it is quiet enough to see.
//!
//! Three things keep the subtraction about Terminus:
//!
//! - The round trips are not sent back to back. In the live run the client is busy between two
//!   requests with the step's own work (the runtime's, which the scripted run measures, and the
//!   adapter's); against a server that answers at once, a request sent after such a pause costs
//!   more than one sent right after the last answer, whatever the pause was spent on: the
//!   server's and the connection's threads have gone idle by then, and waking an idle CPU costs
//!   more than waking a busy one (on the 2-vCPU KVM guest that measured the figures in
//!   `docs/performance.md`, a 15-20 us busy pause before each request of a back-to-back loop
//!   made each round trip 10-30 us slower). A back-to-back loop charged that to Terminus. Each
//!   round trip now follows a busy pause as long as a scripted step (the median step of three
//!   scripted warm-up runs of the same size: the shortest pause the live run makes), and the
//!   pause is not counted in the round trip. The adapter's own work makes the live run's pause
//!   longer than the scripted step, and that, with whatever it costs the next round trip, still
//!   counts as Terminus's.
//! - A streamed answer is read up to its `data: [DONE]` event, where the adapter stops too; the
//!   chunked body's terminator may come in a segment of its own, and waiting for it made the
//!   round trip longer than what the adapter waits for.
//! - The HTTP client the adapter made is dropped after the clock stops, as it was made before
//!   the clock started (a host makes one per model, not one per run).
//!
//! The fixture sends each part of a streamed answer as soon as it flushes it (`TCP_NODELAY`);
//! before, Nagle's algorithm held each part back until the client had acknowledged the one
//! before, and a streamed round trip at 10 or 100 turns took about 230 or about 360 us, as the
//! client's acknowledgement went out sooner or later, in the live run and its baseline alike.
//!
//! Run: `cargo bench -p terminus-cli --bench live` (`TERMINUS_LIVE_TURNS=100` for one size).

use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use terminus_fixture::{Fixture, Response};
use terminus_kernel::{ModelTurn, Policy, ToolOutcome};
use terminus_llm::{LlmConfig, LlmModel, Provider};
use terminus_runtime::{Fault, Model, ModelError, ModelInfo, ModelRequest, Run, Tool, ToolSet};
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

/// A model that notes when each call began, around the model of a run.
struct Stamped {
    inner: Arc<dyn Model>,
    calls: Mutex<Vec<Instant>>,
}

impl Stamped {
    fn new(inner: Arc<dyn Model>, turns: usize) -> Arc<Stamped> {
        Arc::new(Stamped {
            inner,
            calls: Mutex::new(Vec::with_capacity(turns + 1)),
        })
    }

    /// Microseconds from each call's start to the next one's: a whole agent step each.
    fn steps(&self) -> Vec<f64> {
        let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() * 1e6)
            .collect()
    }
}

#[async_trait]
impl Model for Stamped {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Instant::now());
        self.inner.complete(request).await
    }

    fn info(&self) -> ModelInfo {
        self.inner.info()
    }

    fn reads_messages(&self) -> bool {
        self.inner.reads_messages()
    }
}

/// One run's time per step: its mean (the run's time over its steps, fixed costs included) and
/// its median (of each step's own time).
#[derive(Clone, Copy)]
struct PerStep {
    mean: f64,
    median: f64,
}

/// The scripted run's time per step.
async fn scripted(turns: usize) -> PerStep {
    let s = scenario(turns);
    let mut stamped = None;
    let run = s.run().adapters(|a| {
        let model = Stamped::new(a.model.clone(), turns);
        stamped = Some(model.clone());
        *a.model = model;
    });
    let start = Instant::now();
    let report = run.execute().await.unwrap_or_else(|e| panic!("{e}"));
    let mean = start.elapsed().as_secs_f64() * 1e6 / turns as f64;
    assert!(report.is_complete() && report.tool_calls as usize == turns);
    let steps = stamped.map(|m| m.steps()).unwrap_or_default();
    PerStep {
        mean,
        median: median(steps),
    }
}

/// The live run's time per step, and the request bodies it sent.
async fn live(turns: usize, stream: bool) -> (PerStep, Vec<Vec<u8>>) {
    let fixture = Fixture::start(replies(turns, stream))
        .await
        .unwrap_or_else(|e| panic!("fixture: {e}"));
    let mut config = LlmConfig::new(
        Provider::OpenAi,
        format!("{}/v1", fixture.url()),
        "gpt-4o-mini".to_owned(),
    );
    config.stream = stream;
    let llm: Arc<dyn Model> = Arc::new(LlmModel::new(config).unwrap_or_else(|e| panic!("{e}")));
    let model = Stamped::new(llm.clone(), turns);
    let mut tools = ToolSet::new();
    tools.insert("read", Arc::new(Read));
    let start = Instant::now();
    let report = Run::new("Read every file.", policy(turns), model.clone())
        .tools(tools)
        .execute()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mean = start.elapsed().as_secs_f64() * 1e6 / turns as f64;
    assert!(
        report.is_complete() && report.tool_calls as usize == turns,
        "{report:?}"
    );
    drop(llm);
    let bodies = fixture.requests().into_iter().map(|r| r.body).collect();
    let per_step = PerStep {
        mean,
        median: median(model.steps()),
    };
    (per_step, bodies)
}

/// Keeps this thread busy for `us` microseconds, as a step's own work does; returns how long it
/// was busy.
fn busy(us: f64) -> Duration {
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(us.max(0.0) / 1e6);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
    start.elapsed()
}

/// The time per step of POSTing `bodies` to a fresh fixture with the same replies, reading each
/// answer whole (a stream up to its `[DONE]`), each after a busy pause of `pause_us` (not
/// counted): the HTTP round trips of the live run, without the adapter.
async fn round_trips(bodies: &[Vec<u8>], turns: usize, stream: bool, pause_us: f64) -> PerStep {
    let fixture = Fixture::start(replies(turns, stream))
        .await
        .unwrap_or_else(|e| panic!("fixture: {e}"));
    let client = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", fixture.url());
    let mut trips = Vec::with_capacity(bodies.len());
    let mut paused = Duration::ZERO;
    let start = Instant::now();
    for body in bodies {
        paused += busy(pause_us);
        let trip = Instant::now();
        let mut response = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        if stream {
            // Up to the stream's last event, where the adapter stops reading too (the chunked
            // body's terminator may come in a segment of its own).
            let mut read = Vec::new();
            while !read.ends_with(b"data: [DONE]\n\n") {
                let chunk = response.chunk().await.unwrap_or_else(|e| panic!("{e}"));
                read.extend_from_slice(&chunk.unwrap_or_else(|| panic!("no [DONE]")));
            }
        } else {
            let bytes = response.bytes().await.unwrap_or_else(|e| panic!("{e}"));
            assert!(!bytes.is_empty());
        }
        trips.push(trip.elapsed().as_secs_f64() * 1e6);
    }
    PerStep {
        mean: (start.elapsed() - paused).as_secs_f64() * 1e6 / turns as f64,
        median: median(trips),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let sizes: Vec<usize> = std::env::var("TERMINUS_LIVE_TURNS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10, 100, 1000]);
    println!(
        "live path, us per agent step (one model turn calling one tool), medians of {} paired \
         runs ({} at 1,000 turns)",
        runs(10),
        runs(1000)
    );
    println!(
        "{:>14} | {:<42} | {:<51}",
        "", "step: the median of a run's steps", "mean: a run's time over its steps"
    );
    println!(
        "{:>6} {:>7} | {:>9} {:>9} {:>9} {:>11} | {:>9} {:>9} {:>9} {:>11} {:>9}",
        "turns",
        "stream",
        "scripted",
        "live",
        "http rtt",
        "excl. http",
        "scripted",
        "live",
        "http rtt",
        "excl. http",
        "live/scr"
    );
    for turns in sizes {
        for stream in [false, true] {
            let mut pairs: Vec<[PerStep; 3]> = Vec::new();
            rt.block_on(async {
                // Warm-ups, then paired runs: the baseline in the same process, the same minute.
                // The scripted warm-ups' median step is the pause before each round trip.
                let mut warm = Vec::new();
                for _ in 0..3 {
                    warm.push(scripted(turns).await.median);
                }
                let pause = median(warm);
                let _ = live(turns, stream).await;
                for _ in 0..runs(turns) {
                    let scripted = scripted(turns).await;
                    let (live, bodies) = live(turns, stream).await;
                    let http = round_trips(&bodies, turns, stream, pause).await;
                    pairs.push([scripted, live, http]);
                }
            });
            let column = |f: &dyn Fn(&[PerStep; 3]) -> f64| median(pairs.iter().map(f).collect());
            let step = [
                column(&|p| p[0].median),
                column(&|p| p[1].median),
                column(&|p| p[2].median),
                column(&|p| p[1].median - p[0].median - p[2].median),
            ];
            let mean = [
                column(&|p| p[0].mean),
                column(&|p| p[1].mean),
                column(&|p| p[2].mean),
                column(&|p| p[1].mean - p[0].mean - p[2].mean),
            ];
            println!(
                "{turns:>6} {stream:>7} | {:>9.1} {:>9.1} {:>9.1} {:>11.1} | {:>9.1} {:>9.1} {:>9.1} {:>11.1} {:>8.1}x",
                step[0],
                step[1],
                step[2],
                step[3],
                mean[0],
                mean[1],
                mean[2],
                mean[3],
                mean[1] / mean[0]
            );
        }
    }
}
