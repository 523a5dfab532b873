//! Traces and metrics of real runs of the `terminus` binary, read back by peers nobody here
//! wrote: the spans go over OTLP HTTP/protobuf to a receiver built on the `opentelemetry-proto`
//! package from PyPI (`.ci/peers.sh` installs it, pinned), and the metrics are scraped from the
//! worker's Prometheus endpoint over HTTP.

mod common;

use common::{KEY, architect, fs_server, text, write_config};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};
use terminus_fixture::{Fixture, OtlpReceiver, Request, Response, peers};

fn turn_of(request: &Value) -> usize {
    request["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count())
}

fn last_json(stdout: &[u8]) -> Value {
    serde_json::from_str(text(stdout).lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the last stdout line is a report ({e}): {}", text(stdout)))
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

fn named<'a>(spans: &'a [Value], prefix: &str) -> Vec<&'a Value> {
    spans
        .iter()
        .filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
        .collect()
}

fn terminus(dir: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_terminus"));
    cmd.current_dir(dir)
        .env("TERMINUS_TEST_KEY", KEY)
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED");
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_agent_exports_its_spans_over_otlp_and_never_its_api_key() {
    let Some(peers) = peers::dir() else { return };
    let Some(receiver) = OtlpReceiver::start() else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temp dir");
    let home = dir.path().canonicalize().expect("a real path");
    let root = home.join("work");
    let (script, plan) = architect(&root);
    let fixture = Fixture::with(move |_, request: &Request| {
        script
            .get(turn_of(&request.json()))
            .cloned()
            .unwrap_or_else(|| Response::json(500, r#"{"error":{"message":"no such turn"}}"#))
    })
    .await
    .expect("a port");
    let mcp = fs_server(&peers, &root.to_string_lossy());
    let config = write_config(&home, &format!("{}/v1", fixture.url()), &mcp);
    let task = "Write an implementation plan to plan.md";
    let out = terminus(&home)
        .args(["agent", &config, "--task", task])
        .args(["--execution", "otlp-live", "--json"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "authorization=Bearer collector-token",
        )
        .env("OTEL_SERVICE_NAME", "terminus-otlp-test")
        .env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        .output()
        .await
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(plan.exists());
    let report = last_json(&out.stdout);
    let model_calls = report["model_calls"].as_u64().expect("model_calls") as usize;
    let tool_calls = report["tool_calls"].as_u64().expect("tool_calls") as usize;
    // The process flushed before it exited: every span is there when it has ended.
    let expected = 1 + model_calls + tool_calls + 1;
    let spans = receiver.wait_for_spans(expected, Duration::from_secs(10));
    assert_eq!(spans.len(), expected, "{spans:#?}");
    eprintln!(
        "exported {expected} spans: 1 run, {model_calls} chat, {tool_calls} execute_tool, 1 verify; \
         {} steps",
        report["steps"]
    );

    let runs = named(&spans, "invoke_agent ");
    assert_eq!(runs.len(), 1);
    let run = runs[0];
    assert_eq!(run["name"], "invoke_agent agent");
    assert_eq!(run["resource"]["service.name"], "terminus-otlp-test");
    assert_eq!(attr(run, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(attr(run, "gen_ai.conversation.id"), "otlp-live");
    assert_eq!(attr(run, "gen_ai.provider.name"), "openai");
    assert_eq!(attr(run, "terminus.outcome"), "complete");
    assert_eq!(attr(run, "terminus.stop_reason"), "verified");
    assert_eq!(attr(run, "terminus.was_aborted"), false);
    assert_eq!(attr(run, "terminus.total_iterations"), &report["steps"]);
    assert_eq!(attr(run, "terminus.nudges"), 1);
    assert_eq!(attr(run, "gen_ai.usage.input_tokens"), 200 * model_calls);
    let transitions = run["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["name"] == "transition")
        .count();
    assert_eq!(Some(transitions as u64), report["steps"].as_u64());

    let chats = named(&spans, "chat ");
    assert_eq!(chats.len(), model_calls);
    for (n, chat) in chats.iter().enumerate() {
        assert_eq!(chat["name"], "chat gpt-4o-mini");
        assert_eq!(chat["kind"], 3, "a client span");
        assert_eq!(chat["trace_id"], run["trace_id"]);
        assert_eq!(chat["parent_span_id"], run["span_id"]);
        assert_eq!(attr(chat, "gen_ai.request.model"), "gpt-4o-mini");
        assert_eq!(attr(chat, "gen_ai.response.model"), "gpt-4o-mini");
        assert_eq!(attr(chat, "gen_ai.usage.input_tokens"), 200);
        assert_eq!(attr(chat, "gen_ai.usage.output_tokens"), 20);
        let id = attr(chat, "gen_ai.response.id").as_str().expect("an id");
        assert!(id.starts_with("chatcmpl-"), "{id}");
        let finish = attr(chat, "gen_ai.response.finish_reasons");
        assert!(finish == "stop" || finish == "tool_calls", "{n}: {finish}");
        // Opted in: the prompt is on the span.
        let prompt = attr(chat, "gen_ai.input.messages")
            .as_str()
            .expect("captured");
        assert!(prompt.contains(task), "{prompt}");
    }
    let tools = named(&spans, "execute_tool ");
    assert_eq!(tools.len(), tool_calls);
    assert!(tools.iter().any(|t| t["name"] == "execute_tool write_file"));
    for tool in &tools {
        assert_eq!(tool["parent_span_id"], run["span_id"]);
        assert_eq!(attr(tool, "gen_ai.operation.name"), "execute_tool");
        assert!(attr(tool, "gen_ai.tool.call.id").is_string());
    }
    assert_eq!(named(&spans, "verify").len(), 1);

    // The collector's header arrived with every export.
    let headers = receiver.headers();
    assert!(!headers.is_empty());
    for h in &headers {
        assert_eq!(
            h.get("authorization").map(String::as_str),
            Some("Bearer collector-token")
        );
    }
    // No span, attribute or event holds the API key, though the prompts are captured.
    for line in receiver.lines() {
        assert!(!line.to_string().contains(KEY), "the key leaked: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scenario_run_exports_no_conversation_unless_asked() {
    let Some(receiver) = OtlpReceiver::start() else {
        return;
    };
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../spec/scenarios/recursion-limit.json")
        .canonicalize()
        .expect("the scenario");
    let out = terminus(Path::new(env!("CARGO_MANIFEST_DIR")))
        .arg("run")
        .arg(&scenario)
        .args(["--execution", "otlp-scenario", "--json"])
        .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.traces_url())
        .env_remove("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .env_remove("OTEL_SERVICE_NAME")
        .output()
        .await
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("warning: 83 % of max_steps spent (5 of 6) after step 5"),
        "{stderr}"
    );
    let report = last_json(&out.stdout);
    assert_eq!(report["warnings"][0]["budget"], "steps");
    let expected = 1 + 3 + 3;
    let spans = receiver.wait_for_spans(expected, Duration::from_secs(10));
    let run = named(&spans, "invoke_agent ")[0];
    assert_eq!(run["resource"]["service.name"], "terminus");
    assert_eq!(attr(run, "terminus.was_aborted"), true);
    assert_eq!(attr(run, "error.type"), "max_steps");
    assert_eq!(run["status"]["code"], 2, "an error status");
    let warning = run["events"]
        .as_array()
        .expect("events")
        .iter()
        .find(|e| e["name"] == "budget_warning")
        .expect("a budget warning event");
    assert_eq!(warning["attributes"]["terminus.budget"], "steps");
    assert_eq!(warning["attributes"]["terminus.budget.used"], 5);
    let chats = named(&spans, "chat ");
    assert!(!chats.is_empty(), "no chat span to look in: {spans:?}");
    for chat in chats {
        assert!(attr(chat, "gen_ai.input.messages").is_null(), "{chat}");
        assert!(attr(chat, "gen_ai.output.messages").is_null(), "{chat}");
    }
}

#[tokio::test]
async fn a_bad_otlp_endpoint_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let journal = dir.path().join("j.db");
    let scenario =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/scenarios/plain-answer.json");
    let out = terminus(dir.path())
        .arg("run")
        .arg(&scenario)
        .arg("--journal")
        .arg(&journal)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url")
        .output()
        .await
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("OTLP exporter"),
        "{}",
        text(&out.stderr)
    );
    assert!(!journal.exists(), "nothing is written");
}

/// A port nothing listens on now (bound, read, released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_serves_its_metrics_as_prometheus_text() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let journal = dir.path().join("jobs.db").to_string_lossy().into_owned();
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/scenarios");
    for (name, id) in [
        ("recursion-limit", "m-steps"),
        ("architect-stops-early", "m-verified"),
        ("unrecoverable-tool-excluded", "m-excluded"),
        ("soft-tool-budget", "m-tool-budget"),
        ("long-run-pruned", "m-pruned"),
    ] {
        let out = terminus(dir.path())
            .arg("submit")
            .arg(spec.join(format!("{name}.json")))
            .args(["--journal", &journal, "--execution", id])
            .output()
            .await
            .expect("submit runs");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let addr = format!("127.0.0.1:{}", free_port());
    let mut worker = terminus(dir.path())
        .args(["worker", "--journal", &journal, "--poll-ms", "50"])
        .args(["--metrics-addr", &addr])
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the worker starts");
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/metrics");
    let started = Instant::now();
    let body = loop {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no metrics for five runs at {url}"
        );
        if let Ok(response) = client.get(&url).send().await
            && let Ok(body) = response.text().await
            && body.contains("terminus_run_steps_count 5\n")
        {
            break body;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = worker.start_kill();
    let value = |series: &str| -> f64 {
        body.lines()
            .find_map(|l| {
                l.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no `{series}` in:\n{body}"))
    };
    assert_eq!(
        value(r#"terminus_runs_total{outcome="aborted",reason="max_steps"}"#),
        1.0
    );
    assert_eq!(
        value(r#"terminus_runs_total{outcome="complete",reason="verified"}"#),
        1.0
    );
    assert_eq!(
        value(r#"terminus_runs_total{outcome="complete",reason="explicit"}"#),
        3.0
    );
    // soft-tool-budget: read_file warned at its call 2, refused at its call 3.
    let labelled = |name: &str, labels: &[&str]| -> f64 {
        body.lines()
            .find(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{'))
                    && labels.iter().all(|label| l.contains(label))
            })
            .and_then(|l| l.rsplit(' ').next()?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no `{name}` with {labels:?} in:\n{body}"))
    };
    for kind in ["warn", "block"] {
        assert_eq!(
            labelled(
                "terminus_tool_budget_events_total",
                &[r#"tool="read_file""#, &format!("kind=\"{kind}\"")]
            ),
            1.0,
            "{kind}"
        );
    }
    // long-run-pruned: two prunes.
    assert_eq!(value("terminus_context_prunes_total"), 2.0);
    assert_eq!(value("terminus_nudges_total"), 1.0);
    assert_eq!(value(r#"terminus_excluded_tools_total{tool="rm"}"#), 1.0);
    assert_eq!(
        value(r#"terminus_budget_warnings_total{budget="steps"}"#),
        1.0
    );
    assert_eq!(value("terminus_run_steps_count"), 5.0);
    // Steps 6, 11, 5, 7 and 11: three runs within 10 steps, all five within 20.
    assert_eq!(value(r#"terminus_run_steps_bucket{le="10"}"#), 3.0);
    assert_eq!(value(r#"terminus_run_steps_bucket{le="20"}"#), 5.0);
    assert_eq!(value("terminus_run_steps_sum"), 40.0);
    // 3 + 6 + 3 + 4 + 6 model calls, each timed.
    assert_eq!(
        value(r#"terminus_model_call_duration_seconds_count{outcome="ok"}"#),
        22.0
    );
}
