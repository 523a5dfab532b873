//! The spans of three conformance scenarios, exported through the same layer as OTLP into
//! memory and drawn as a tree (`terminus_telemetry::render`): a verified run with a nudge, a run
//! that excludes a failing tool, and a run the step budget aborts after a budget warning.
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
