//! Whole runs through the kernel and the runtime with each provider against the fixture server:
//! retries with the kernel's backoff, failures that stop the run, the architect task, and the
//! API key that must appear nowhere.

mod common;

use async_trait::async_trait;
use common::{Turn, call, model, model_with, raw_call, say};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use terminus_fixture::{Fixture, Response};
use terminus_kernel::{AbortReason, CompleteReason, Outcome, Policy, ToolErrorKind, ToolOutcome};
use terminus_llm::{ApiKey, LlmModel, Provider};
use terminus_runtime::{Fault, Model, Report, Run, Tool, ToolSet, Transition};

const ALL: [Provider; 3] = Provider::ALL;

/// Fast backoff, so that only the provider's `Retry-After` can make a run wait.
fn policy() -> Policy {
    Policy {
        retry_base_ms: 1,
        retry_max_ms: 4,
        ..Policy::default()
    }
}

async fn serve(responses: Vec<Response>) -> Fixture {
    Fixture::start(responses).await.expect("a loopback port")
}

/// A run under [`policy`] and its progress lines' summaries, one a line.
async fn run_seen(task: &str, model: Arc<dyn Model>) -> (Report, String) {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = lines.clone();
    let report = Run::new(task, policy(), model)
        .observer(move |t: &Transition<'_>| {
            if let Ok(mut l) = seen.lock() {
                l.push(t.summary.to_owned());
            }
        })
        .execute()
        .await
        .expect("the run reaches a stop");
    let lines = lines.lock().map(|l| l.join("\n")).unwrap_or_default();
    (report, lines)
}

async fn run(task: &str, policy: Policy, model: Arc<dyn Model>) -> Report {
    Run::new(task, policy, model)
        .execute()
        .await
        .expect("the run reaches a stop")
}

#[tokio::test]
async fn a_429_with_retry_after_then_success_waits_that_long() {
    let rate = r#"{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
    for (provider, header, value, wait_ms) in [
        (Provider::OpenAi, "retry-after-ms", "400", 400),
        (Provider::Anthropic, "retry-after", "1", 1000),
    ] {
        let fixture = serve(vec![
            Response::json(429, rate).header(header, value),
            say("Done.").response(provider, true),
        ])
        .await;
        let report = run("Say done.", policy(), model(&fixture, provider, true)).await;
        assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Answered));
        assert_eq!(report.model_calls, 2);
        let requests = fixture.requests();
        let gap = requests[1].received - requests[0].received;
        assert!(
            gap >= Duration::from_millis(wait_ms),
            "{provider:?}: the retry came after {gap:?}, the server asked for {wait_ms} ms"
        );
    }
}

#[tokio::test]
async fn a_500_then_success_is_retried() {
    for provider in ALL {
        let fixture = serve(vec![
            Response::json(500, r#"{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}"#),
            Response::json(529, r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
            say("Done.").response(provider, true),
        ])
        .await;
        let report = run("Say done.", policy(), model(&fixture, provider, true)).await;
        assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Answered));
        assert_eq!((report.model_calls, fixture.count()), (3, 3));
        assert_eq!(report.result.as_deref(), Some("Done."));
    }
}

#[tokio::test]
async fn a_401_stops_the_run_after_exactly_one_request() {
    for provider in ALL {
        let fixture = serve(vec![
            Response::json(401, r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#),
            say("never served").response(provider, true),
        ])
        .await;
        let report = run("Say done.", policy(), model(&fixture, provider, true)).await;
        assert_eq!(report.outcome, Outcome::Aborted(AbortReason::ModelError));
        assert_eq!(fixture.count(), 1, "auth errors are not retried");
        assert_eq!(report.exit_code(), 1);
    }
}

#[tokio::test]
async fn a_404_names_the_address_it_asked() {
    for provider in ALL {
        let fixture = serve(vec![Response::json(404, "File Not Found")]).await;
        let (report, lines) = run_seen("Say done.", model(&fixture, provider, true)).await;
        assert_eq!(report.outcome, Outcome::Aborted(AbortReason::ModelError));
        assert!(
            lines.contains("HTTP 404") && lines.contains(&format!("(POST {}/", fixture.url())),
            "{provider:?}: {lines}"
        );
        assert!(lines.contains("is base_url the API root"), "{lines}");
    }
}

#[tokio::test]
async fn retries_stop_at_max_model_retries_with_model_error() {
    let fixture = Fixture::with(|_, _| Response::json(503, "upstream connect error"))
        .await
        .expect("port");
    let report = run(
        "Say done.",
        policy(),
        model(&fixture, Provider::OpenAi, true),
    )
    .await;
    assert_eq!(report.outcome, Outcome::Aborted(AbortReason::ModelError));
    // `max_model_retries: 3` (the default) allows the first call and 3 retries.
    assert_eq!(fixture.count(), 4);
}

#[tokio::test]
async fn a_cut_stream_is_retried_and_never_taken_as_an_answer() {
    for provider in ALL {
        let cut = say("The full answer, which the first time is cut.")
            .response(provider, true)
            .cut_after(4);
        let fixture = serve(vec![
            cut,
            say("The full answer, which the first time is cut.").response(provider, true),
        ])
        .await;
        let report = run("Answer.", policy(), model(&fixture, provider, true)).await;
        assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Answered));
        assert_eq!(report.model_calls, 2);
        assert_eq!(
            report.result.as_deref(),
            Some("The full answer, which the first time is cut.")
        );
    }
}

#[tokio::test]
async fn a_reply_slower_than_timeout_ms_is_retried() {
    for provider in ALL {
        let fixture = serve(vec![
            say("late")
                .response(provider, true)
                .wait(Duration::from_millis(1500)),
            say("on time").response(provider, true),
        ])
        .await;
        let model = model_with(&fixture, provider, true, |c| {
            c.timeout = Duration::from_millis(300);
        });
        let report = run("Answer.", policy(), Arc::new(model)).await;
        assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Answered));
        assert_eq!(report.result.as_deref(), Some("on time"));
        assert_eq!(report.model_calls, 2);
    }
}

#[tokio::test]
async fn an_error_event_in_a_200_stream_is_retried() {
    let fixture = serve(vec![
        Response::sse([
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n",
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
        ]),
        say("Recovered.").response(Provider::Anthropic, true),
    ])
    .await;
    let report = run(
        "Answer.",
        policy(),
        model(&fixture, Provider::Anthropic, true),
    )
    .await;
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Answered));
    assert_eq!(report.result.as_deref(), Some("Recovered."));
}

#[tokio::test]
async fn empty_content_with_zero_usage_three_times_ends_empty_responses() {
    // OpenRouter's shape of an empty reply: `content: []` and zero usage.
    let empty = json!({ "id": "gen-1", "object": "chat.completion", "choices": [{ "index": 0,
        "message": { "role": "assistant", "content": [] }, "finish_reason": "stop" }],
        "usage": { "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0 } })
    .to_string();
    let fixture = Fixture::with(move |_, _| Response::json(200, empty.clone()))
        .await
        .expect("port");
    let report = run(
        "Answer.",
        policy(),
        model(&fixture, Provider::OpenAi, false),
    )
    .await;
    assert_eq!(
        report.outcome,
        Outcome::Aborted(AbortReason::EmptyResponses)
    );
    assert_eq!((report.model_calls, report.empty_responses), (3, 3));
    assert_eq!(fixture.count(), 3);
}

#[tokio::test]
async fn malformed_tool_call_json_reaches_the_model_as_invalid_arguments() {
    for provider in ALL {
        let fixture = serve(vec![
            raw_call("call_bad", "read_file", r#"{"path": "src/lib.rs"#).response(provider, true),
            say("I could not read it.").response(provider, true),
        ])
        .await;
        let files = Files::new(&[("src/lib.rs", "fn main() {}")]);
        let report = Run::new("Read src/lib.rs", policy(), model(&fixture, provider, true))
            .tools(files.tools())
            .execute()
            .await
            .expect("a stop");
        assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Answered));
        assert_eq!(files.reads(), 0, "the tool was not called");
        let second = fixture.requests()[1].json().to_string();
        assert!(
            second.contains("error (invalid_arguments): the arguments must be a JSON object"),
            "{second}"
        );
        assert!(
            second.contains("call_bad"),
            "the result answers the call by its id"
        );
    }
}

/// In-memory files behind `read_file` and `write_file`.
#[derive(Clone, Default)]
struct Files {
    files: Arc<Mutex<BTreeMap<String, String>>>,
    reads: Arc<Mutex<u32>>,
}

struct ReadFile(Files);
struct WriteFile(Files);

impl Files {
    fn new(files: &[(&str, &str)]) -> Files {
        let f = Files::default();
        for (path, text) in files {
            f.lock().insert((*path).into(), (*text).into());
        }
        f
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn reads(&self) -> u32 {
        *self
            .reads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn tools(&self) -> ToolSet {
        ToolSet::new()
            .with("read_file", Arc::new(ReadFile(self.clone())))
            .with("write_file", Arc::new(WriteFile(self.clone())))
    }
}

#[async_trait]
impl Tool for ReadFile {
    fn description(&self) -> &str {
        "Read a file."
    }
    fn parameters(&self) -> Value {
        json!({ "type": "object", "required": ["path"], "properties": { "path": { "type": "string" } } })
    }
    async fn call(&self, arguments: Value) -> Result<ToolOutcome, Fault> {
        *self
            .0
            .reads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
        let path = arguments["path"].as_str().unwrap_or_default();
        Ok(match self.0.lock().get(path) {
            Some(text) => ToolOutcome::ok(Value::String(text.clone())),
            None => ToolOutcome::Error {
                kind: ToolErrorKind::NotFound,
                message: format!("{path}: no such file"),
            },
        })
    }
}

#[async_trait]
impl Tool for WriteFile {
    fn description(&self) -> &str {
        "Write a file."
    }
    fn parameters(&self) -> Value {
        json!({ "type": "object", "required": ["path", "content"],
                "properties": { "path": { "type": "string" }, "content": { "type": "string" } } })
    }
    fn idempotent(&self) -> bool {
        false
    }
    async fn call(&self, arguments: Value) -> Result<ToolOutcome, Fault> {
        let path = arguments["path"].as_str().unwrap_or_default().to_owned();
        let content = arguments["content"].as_str().unwrap_or_default().to_owned();
        self.0.lock().insert(path, content);
        Ok(ToolOutcome::ok(json!("written")))
    }
}

fn todos(status: &str) -> Value {
    json!({ "todos": [{ "content": "write plan", "status": status }] })
}

/// The architect of seed 000: it reads, writes a todo, claims it is done with the todo open (the
/// kernel refuses and nudges), writes the plan and closes the todo, claims again and is verified.
fn architect() -> Vec<Turn> {
    vec![
        call(&[
            ("call_read_1", "read_file", json!({ "path": "src/lib.rs" })),
            ("call_todos_1", "write_todos", todos("in_progress")),
        ]),
        say("I will now write the plan."),
        call(&[
            (
                "call_write_1",
                "write_file",
                json!({ "path": "plan.md", "content": "# Plan\n1. Add tests." }),
            ),
            ("call_todos_2", "write_todos", todos("completed")),
        ]),
        say("Plan written to plan.md."),
    ]
}

fn architect_policy() -> Policy {
    Policy {
        verify_completion: true,
        completion_requires: vec!["write_file".into()],
        max_nudges: 2,
        ..policy()
    }
}

#[tokio::test]
async fn the_architect_is_nudged_once_then_verified_with_each_provider() {
    for provider in ALL {
        for stream in [true, false] {
            let fixture = serve(
                architect()
                    .iter()
                    .map(|t| t.response(provider, stream))
                    .collect(),
            )
            .await;
            let files =
                Files::new(&[("src/lib.rs", "pub fn add(a: i32, b: i32) -> i32 { a + b }")]);
            let report = Run::new(
                "Write an implementation plan to plan.md",
                architect_policy(),
                model(&fixture, provider, stream),
            )
            .tools(files.tools())
            .execute()
            .await
            .expect("a stop");
            let at = format!("{provider:?}, stream {stream}");
            assert_eq!(
                report.outcome,
                Outcome::Complete(CompleteReason::Verified),
                "{at}"
            );
            assert_eq!(
                (report.nudges, report.model_calls, report.tool_calls),
                (1, 4, 4),
                "{at}"
            );
            assert_eq!(report.result.as_deref(), Some("Plan written to plan.md."));
            assert_eq!(
                files.lock().get("plan.md").map(String::as_str),
                Some("# Plan\n1. Add tests.")
            );
            let sent: Vec<Value> = fixture.requests().iter().map(|r| r.json()).collect();
            assert_eq!(sent.len(), 4, "{at}");
            check_pairing(provider, &sent[1], &["call_read_1", "call_todos_1"], &at);
            check_pairing(provider, &sent[3], &["call_write_1", "call_todos_2"], &at);
            // The nudge is in the conversation of the third request, after the refused claim.
            let third = sent[2].to_string();
            assert!(third.contains("I will now write the plan."), "{at}");
            assert!(
                third.contains("not done"),
                "{at}: the nudge is missing: {third}"
            );
            assert!(
                !sent[1].to_string().contains("not done"),
                "{at}: no nudge before the claim"
            );
        }
    }
}

/// Every call id of the last assistant turn is answered, in order, by a tool result with that id.
fn check_pairing(provider: Provider, request: &Value, ids: &[&str], at: &str) {
    if provider == Provider::OpenAiResponses {
        // Items: the last turn's `function_call` items, then their outputs, by `call_id`.
        let items = request["input"].as_array().expect("input items");
        let ids_of = |kind: &str| -> Vec<&str> {
            items
                .iter()
                .filter(|m| m["type"] == kind)
                .filter_map(|m| m["call_id"].as_str())
                .collect()
        };
        let (called, answered) = (ids_of("function_call"), ids_of("function_call_output"));
        assert_eq!(called[called.len() - ids.len()..], *ids, "{at}");
        assert_eq!(answered[answered.len() - ids.len()..], *ids, "{at}");
        let last_call = items.iter().rposition(|m| m["type"] == "function_call");
        let first_answer = items
            .iter()
            .rposition(|m| m["type"] == "function_call_output" && m["call_id"] == ids[0]);
        assert!(last_call < first_answer, "{at}: outputs after their calls");
        return;
    }
    let messages = request["messages"].as_array().expect("messages");
    match provider {
        Provider::OpenAi => {
            let (i, assistant) = messages
                .iter()
                .enumerate()
                .rfind(|(_, m)| m["role"] == "assistant")
                .expect("an assistant message");
            let called: Vec<&str> = assistant["tool_calls"]
                .as_array()
                .expect("tool calls")
                .iter()
                .filter_map(|c| c["id"].as_str())
                .collect();
            assert_eq!(called, ids, "{at}");
            let answered: Vec<&str> = messages[i + 1..]
                .iter()
                .filter(|m| m["role"] == "tool")
                .filter_map(|m| m["tool_call_id"].as_str())
                .collect();
            assert_eq!(answered, ids, "{at}");
        }
        Provider::Anthropic => {
            let (i, assistant) = messages
                .iter()
                .enumerate()
                .rfind(|(_, m)| m["role"] == "assistant")
                .expect("an assistant message");
            let called: Vec<&str> = assistant["content"]
                .as_array()
                .expect("blocks")
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .filter_map(|b| b["id"].as_str())
                .collect();
            assert_eq!(called, ids, "{at}");
            let next = &messages[i + 1];
            assert_eq!(next["role"], "user", "{at}");
            let answered: Vec<&str> = next["content"]
                .as_array()
                .expect("blocks")
                .iter()
                .filter(|b| b["type"] == "tool_result")
                .filter_map(|b| b["tool_use_id"].as_str())
                .collect();
            assert_eq!(answered, ids, "{at}");
        }
        Provider::OpenAiResponses => {}
    }
}

#[tokio::test]
async fn the_api_key_appears_in_no_progress_line_report_or_journal() {
    const SENTINEL: &str = "sk-terminus-SENTINEL-7f3a9c2e51d8";
    for provider in ALL {
        let fixture = serve(
            std::iter::once(
                // A server that echoes the key in its error: the message is shown, the key not.
                Response::json(429, format!(r#"{{"error":{{"message":"slow down, {SENTINEL}","type":"requests","code":"rate_limit_exceeded"}}}}"#))
                    .header("retry-after-ms", "10"),
            )
            .chain(architect().iter().map(|t| t.response(provider, true)))
            .collect(),
        )
        .await;
        let model: LlmModel = model_with(&fixture, provider, true, |c| {
            c.api_key = Some(ApiKey::new(SENTINEL));
        });
        let debug = format!("{model:?}");
        let dir = tempfile::tempdir().expect("a temp dir");
        let db = dir.path().join("journal.db");
        let store = terminus_store::SqliteStore::open(&db, terminus_store::Durability::Process)
            .expect("a journal");
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = lines.clone();
        let files = Files::new(&[("src/lib.rs", "fn main() {}")]);
        let report = Run::new(
            "Write an implementation plan to plan.md",
            architect_policy(),
            Arc::new(model),
        )
        .tools(files.tools())
        .store(Arc::new(store))
        .execution("secret-check")
        .observer(move |t: &Transition<'_>| {
            sink.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(t.to_string());
        })
        .execute()
        .await
        .expect("a stop");
        assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Verified));
        // The key did travel, to the server only.
        let sent = fixture.requests();
        assert!(
            sent.iter()
                .all(|r| r.headers.iter().any(|(_, v)| v.contains(SENTINEL)))
        );
        let progress = lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .join("\n");
        assert!(
            progress.contains("rate_limited") && progress.contains("slow down, ***"),
            "the progress lines were captured, the key masked: {progress}"
        );
        let mut journal = Vec::new();
        for entry in std::fs::read_dir(dir.path()).expect("the journal's folder") {
            journal.extend(std::fs::read(entry.expect("an entry").path()).expect("a file"));
        }
        assert!(
            journal.windows(b"plan.md".len()).any(|w| w == b"plan.md"),
            "the journal was read"
        );
        for (what, text) in [
            ("progress", progress.as_bytes()),
            ("report", report.to_json_line().as_bytes()),
            ("journal", &journal[..]),
            ("debug", debug.as_bytes()),
        ] {
            assert!(
                !text
                    .windows(SENTINEL.len())
                    .any(|w| w == SENTINEL.as_bytes()),
                "{provider:?}: the key is in the {what}"
            );
        }
    }
}

#[tokio::test]
async fn the_model_name_picks_the_tokenizer_and_reported_usage_feeds_the_window() {
    let first = Turn {
        usage: Some((3_000, 12)),
        ..call(&[("call_1", "write_todos", todos("completed"))])
    };
    let fixture = serve(vec![
        first.response(Provider::OpenAi, true),
        say("Done.").response(Provider::OpenAi, true),
    ])
    .await;
    let openai = model(&fixture, Provider::OpenAi, true);
    let tokenizer = openai.tokenizer();
    assert!(tokenizer.exact(), "gpt-4o-mini has tiktoken's o200k_base");
    assert_eq!(tokenizer.name(), "o200k_base");
    let anthropic = model(&fixture, Provider::Anthropic, true);
    assert!(
        !anthropic.tokenizer().exact(),
        "Claude models get the heuristic"
    );
    let report = Run::new("Say done.", policy(), openai.clone())
        .context(
            terminus_runtime::ContextPolicy::for_window(128_000),
            tokenizer,
        )
        .execute()
        .await
        .expect("a stop");
    let context = report.context.expect("the run had a context window");
    // The messages are a few dozen tokens; the provider said the first request held 3,000, so
    // the second is counted from that.
    assert!(
        context.peak_tokens >= 3_000,
        "the reported usage is what the window counts: {context:?}"
    );
}

/// A reply that repeats the same four list items over and over (as the real 1.5B model did, 88
/// times until its output cap) is cut where the repetition shows, on every wire protocol: the
/// turn ends `repetition` with the items once, it is a no-op (never the answer), and the model's
/// next reply completes the run. A list whose lines are short and repeat is left alone.
#[tokio::test]
async fn a_reply_that_repeats_itself_is_cut_and_is_never_the_answer() {
    let items = "- Count the words of each file.\n- Count the lines.\n- Accept several files.\n- Add tests.\n";
    let degenerate = format!("Here is the plan:\n{}", items.repeat(88));
    // The cut's event, with what it saved: kept from this thread's spans.
    let events = Arc::new(Mutex::new(Vec::<String>::new()));
    let _guard = tracing::subscriber::set_default({
        use tracing_subscriber::layer::SubscriberExt as _;
        tracing_subscriber::registry().with(Events(events.clone()))
    });
    for provider in ALL {
        let fixture = serve(vec![
            say(&degenerate).response(provider, true),
            say("1. Count. 2. Files. 3. Tests.").response(provider, true),
        ])
        .await;
        let (report, lines) = run_seen("Write the plan.", model(&fixture, provider, true)).await;
        assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Answered));
        assert_eq!((report.no_ops, report.model_calls), (1, 2), "{provider:?}");
        assert_eq!(
            report.result.as_deref(),
            Some("1. Count. 2. Files. 3. Tests.")
        );
        assert!(
            lines.contains("reply cut: it repeated itself"),
            "{provider:?}: {lines}"
        );
        assert_eq!(report.trace[0].rule.name(), "no_op_continue");
    }
    let events = events.lock().map(|e| e.join("\n")).unwrap_or_default();
    assert_eq!(
        events.matches("reply_cut_for_repetition").count(),
        3,
        "{events}"
    );
    // The default cap (4,096 tokens) less what was generated: the text, at four bytes a token.
    assert!(
        events.contains("terminus.repetition.saved_tokens="),
        "{events}"
    );
    assert!(events.contains("terminus.repetition.times="), "{events}");
    // Short lines repeating (a table's rows) are not degenerate: the reply is the answer.
    let table = format!(
        "| file | words |\n|---|---|\n{}",
        "| a.txt | 3 |\n".repeat(60)
    );
    let fixture = serve(vec![say(&table).response(Provider::OpenAi, true)]).await;
    let report = run(
        "Tabulate.",
        policy(),
        model(&fixture, Provider::OpenAi, true),
    )
    .await;
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Answered));
    assert_eq!(report.no_ops, 0);
}

/// Keeps each event's message and fields as one line.
struct Events(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Line(String);
        impl tracing::field::Visit for Line {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {}={value:?}", field.name()));
            }
        }
        let mut line = Line(String::new());
        event.record(&mut line);
        if let Ok(mut lines) = self.0.lock() {
            lines.push(line.0);
        }
    }
}
