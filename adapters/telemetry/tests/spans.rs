//! The spans of three conformance scenarios, exported through the same layer as OTLP into
//! memory and drawn as a tree (`terminus_telemetry::render`): a verified run with a nudge, a run
//! that excludes a failing tool, and a run the step budget aborts after a budget warning; and
//! the events of prunes, tool budgets and a tool list change.
//! Re-bless with `INSTA_UPDATE=always cargo test -p terminus-telemetry --test spans`.

use std::path::PathBuf;
use terminus_runtime::{Report, semconv};
use terminus_scenario::Scenario;
use terminus_telemetry::{capture, render};

fn scenario(name: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../spec/scenarios")
        .join(format!("{name}.json"));
    Scenario::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn run_traced(name: &str) -> (Report, Vec<opentelemetry_sdk::trace::SpanData>) {
    let scenario = scenario(name);
    capture(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime");
        runtime
            .block_on(scenario.run().execution(format!("spans-{name}")).execute())
            .expect("the scenario runs")
    })
}

#[test]
fn a_verified_run_with_a_nudge() {
    let (report, spans) = run_traced("architect-stops-early");
    assert_eq!(report.outcome.reason_str(), "verified");
    // One run span, a chat span per model call, a tool span per execution, one verification.
    let count = |name: &str| spans.iter().filter(|s| s.name.starts_with(name)).count();
    assert_eq!(count("invoke_agent "), 1);
    assert_eq!(count("chat "), report.model_calls as usize);
    assert_eq!(count("execute_tool "), report.tool_calls as usize);
    assert_eq!(count("verify"), 1);
    insta::assert_snapshot!(render(&spans));
}

#[test]
fn a_run_that_excludes_a_failing_tool() {
    let (report, spans) = run_traced("unrecoverable-tool-excluded");
    assert_eq!(report.excluded_tools, ["rm"]);
    insta::assert_snapshot!(render(&spans));
}

#[test]
fn a_run_the_step_budget_aborts() {
    let (report, spans) = run_traced("recursion-limit");
    assert_eq!(report.outcome.reason_str(), "max_steps");
    assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
    let run = spans
        .iter()
        .find(|s| s.name.starts_with("invoke_agent"))
        .expect("a run span");
    let attribute = |key: &str| {
        run.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(
        attribute(semconv::TERMINUS_WAS_ABORTED).as_deref(),
        Some("true")
    );
    assert_eq!(
        attribute(semconv::TERMINUS_TOTAL_ITERATIONS).as_deref(),
        Some("6")
    );
    assert_eq!(attribute(semconv::ERROR_TYPE).as_deref(), Some("max_steps"));
    let events: Vec<&str> = run.events.iter().map(|e| e.name.as_ref()).collect();
    assert_eq!(events.iter().filter(|e| **e == "transition").count(), 6);
    assert!(events.contains(&"budget_warning"), "{events:?}");
    insta::assert_snapshot!(render(&spans));
}

/// The value of attribute `key` of the event, as text.
fn event_attr(event: &opentelemetry::trace::Event, key: &str) -> Option<String> {
    event
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

/// The run span's events named `name`.
fn run_events<'a>(
    spans: &'a [opentelemetry_sdk::trace::SpanData],
    name: &str,
) -> Vec<&'a opentelemetry::trace::Event> {
    let run = spans
        .iter()
        .find(|s| s.name.starts_with("invoke_agent"))
        .expect("a run span");
    run.events.iter().filter(|e| e.name == name).collect()
}

/// The observer's lines of a run, as the command line prints them.
#[derive(Clone, Default)]
struct Lines(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Lines {
    fn push(&self, line: String) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(line);
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl terminus_runtime::Observer for Lines {
    fn on_transition(&mut self, _: &terminus_runtime::Transition<'_>) {}

    fn on_prune(&mut self, prune: &terminus_runtime::ContextPrune) {
        self.push(prune.to_string());
    }

    fn on_tool_budget(&mut self, event: &terminus_runtime::ToolBudgetEvent) {
        self.push(event.to_string());
    }

    fn on_tools_changed(&mut self, change: &terminus_runtime::ToolsChanged) {
        self.push(change.to_string());
    }
}

fn run_observed(name: &str) -> (Report, Vec<opentelemetry_sdk::trace::SpanData>, Vec<String>) {
    let scenario = scenario(name);
    let lines = Lines::default();
    let observer = lines.clone();
    let (report, spans) = capture(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime");
        runtime
            .block_on(
                scenario
                    .run()
                    .execution(format!("spans-{name}"))
                    .observer(observer)
                    .execute(),
            )
            .expect("the scenario runs")
    });
    (report, spans, lines.take())
}

#[test]
fn each_prune_is_an_event_on_the_run_span_an_observer_line_and_a_report_entry() {
    let (report, spans, lines) = run_observed("long-run-pruned");
    let prunes = &report.context_prunes;
    assert_eq!(prunes.len(), 2, "{prunes:?}");
    assert_eq!(report.context.map(|c| c.prunes), Some(2));
    let events = run_events(&spans, semconv::EVENT_CONTEXT_PRUNED);
    assert_eq!(events.len(), 2);
    for (event, prune) in events.iter().zip(prunes) {
        assert!(prune.tokens_after < prune.tokens_before, "{prune:?}");
        assert!(prune.messages_after < prune.messages_before, "{prune:?}");
        for (key, value) in [
            (semconv::TERMINUS_MODEL_CALL, u64::from(prune.model_call)),
            (semconv::TERMINUS_STEP, u64::from(prune.step)),
            (
                semconv::TERMINUS_CONTEXT_MESSAGES_BEFORE,
                u64::from(prune.messages_before),
            ),
            (
                semconv::TERMINUS_CONTEXT_MESSAGES_AFTER,
                u64::from(prune.messages_after),
            ),
            (semconv::TERMINUS_CONTEXT_TOKENS_BEFORE, prune.tokens_before),
            (semconv::TERMINUS_CONTEXT_TOKENS_AFTER, prune.tokens_after),
        ] {
            assert_eq!(event_attr(event, key), Some(value.to_string()), "{key}");
        }
    }
    // Made for later calls than the first, each after the step the call followed.
    assert!(prunes[0].model_call > 1 && prunes[1].model_call > prunes[0].model_call);
    assert_eq!(
        lines,
        prunes.iter().map(ToString::to_string).collect::<Vec<_>>()
    );
    assert!(
        lines[0].starts_with(&format!(
            "context pruned for model call {} (after step {}): ",
            prunes[0].model_call, prunes[0].step
        )),
        "{lines:?}"
    );
}

#[test]
fn a_tool_budget_warning_and_block_are_events_on_the_run_span_and_observer_lines() {
    let (report, spans, lines) = run_observed("soft-tool-budget");
    let events = run_events(&spans, semconv::EVENT_TOOL_BUDGET);
    // Each event's tool, kind, call and step, as text.
    let seen: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            [
                semconv::GEN_AI_TOOL_NAME,
                semconv::TERMINUS_TOOL_BUDGET_KIND,
                semconv::TERMINUS_TOOL_BUDGET_CALL,
                semconv::TERMINUS_STEP,
            ]
            .iter()
            .map(|key| event_attr(e, key).unwrap_or_default())
            .collect()
        })
        .collect();
    assert_eq!(
        seen,
        [
            ["read_file", "warn", "2", "3"],
            ["read_file", "block", "3", "5"],
        ]
    );
    for e in &events {
        assert_eq!(
            event_attr(e, semconv::TERMINUS_TOOL_BUDGET_BLOCK_AT).as_deref(),
            Some("3")
        );
    }
    assert_eq!(report.tool_budget_events.len(), 2);
    assert_eq!(
        lines,
        [
            "tool budget of read_file: call 2 warned (calls are refused from 3) at step 3",
            "tool budget of read_file: call 3 refused (block_at 3) at step 5",
        ]
    );
}

/// A model that calls `swap` first, then answers.
struct SwapThenAnswer(std::sync::atomic::AtomicU32);

#[async_trait::async_trait]
impl terminus_runtime::Model for SwapThenAnswer {
    async fn complete(
        &self,
        _request: terminus_runtime::ModelRequest<'_>,
    ) -> Result<terminus_kernel::ModelTurn, terminus_runtime::ModelError> {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(if n == 0 {
            terminus_kernel::ModelTurn {
                tool_calls: vec![terminus_kernel::ToolCall {
                    id: "".into(),
                    name: "swap".into(),
                    arguments: serde_json::json!({}).into(),
                }],
                ..terminus_kernel::ModelTurn::default()
            }
        } else {
            terminus_kernel::ModelTurn {
                text: "Done.".into(),
                ..terminus_kernel::ModelTurn::default()
            }
        })
    }
}

/// A tool that answers ok.
struct Fine;

#[async_trait::async_trait]
impl terminus_runtime::Tool for Fine {
    async fn call(
        &self,
        _arguments: serde_json::Value,
    ) -> Result<terminus_kernel::ToolOutcome, terminus_runtime::Fault> {
        Ok(terminus_kernel::ToolOutcome::ok(serde_json::json!("ok")))
    }
}

/// A source whose list is `swap` until asked twice, then `greet`.
struct Swapping(std::sync::atomic::AtomicU32);

#[async_trait::async_trait]
impl terminus_runtime::ToolSource for Swapping {
    async fn refresh(&self) -> Option<terminus_runtime::ToolSet> {
        let asked = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        (asked == 1)
            .then(|| terminus_runtime::ToolSet::empty().with("greet", std::sync::Arc::new(Fine)))
    }
}

#[test]
fn a_tool_list_change_is_an_event_on_the_run_span_and_an_observer_line() {
    let lines = Lines::default();
    let observer = lines.clone();
    let (report, spans) = capture(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime");
        let mut tools = terminus_runtime::ToolSet::new().with("swap", std::sync::Arc::new(Fine));
        tools.watch(
            std::sync::Arc::new(Swapping(std::sync::atomic::AtomicU32::new(0))),
            ["swap".to_owned()],
        );
        runtime
            .block_on(
                terminus_runtime::Run::new(
                    "Swap.",
                    terminus_kernel::Policy::default(),
                    std::sync::Arc::new(SwapThenAnswer(std::sync::atomic::AtomicU32::new(0))),
                )
                .execution("spans-tools-changed")
                .tools(tools)
                .observer(observer)
                .execute(),
            )
            .expect("the run ends")
    });
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.tools_changed.len(), 1, "{:?}", report.tools_changed);
    let events = run_events(&spans, semconv::EVENT_TOOLS_CHANGED);
    assert_eq!(events.len(), 1);
    for (key, value) in [
        (semconv::TERMINUS_MODEL_CALL, "2"),
        (semconv::TERMINUS_TOOLS_ADDED, "greet"),
        (semconv::TERMINUS_TOOLS_REMOVED, "swap"),
        (semconv::TERMINUS_TOOLS_CHANGED, ""),
    ] {
        assert_eq!(event_attr(events[0], key).as_deref(), Some(value), "{key}");
    }
    assert_eq!(
        lines.take(),
        ["the tool list changed before model call 2: added greet; removed swap"]
    );
}
