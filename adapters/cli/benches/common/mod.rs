//! What the CLI's benches share: the tool-turn scenario, a timed run on a store, medians.

use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Instant;
use terminus_runtime::Store;
use terminus_scenario::Scenario;

/// A scenario of `turns` tool turns (each reading another file) and a final answer.
pub(crate) fn tool_turns(turns: usize) -> Value {
    let mut script: Vec<Value> = (0..turns)
        .map(|i| json!({ "tool_calls": [ { "name": "read", "arguments": { "file": i } } ] }))
        .collect();
    script.push(json!({ "text": "All files read.", "needs_more_work": false }));
    json!({
        "name": format!("bench-{turns}"),
        "task": "Read every file.",
        "policy": {
            "max_model_calls": turns + 10,
            "max_steps": 2 * turns + 20,
            "max_tool_failures": 5
        },
        "model": { "turns": script },
        "tools": { "read": { "results": [ { "ok": "contents" } ], "repeat": "last" } }
    })
}

/// The scenario of `json`, which the bench wrote.
pub(crate) fn parse(json: &Value) -> Scenario {
    Scenario::parse(&json.to_string()).unwrap_or_else(|e| panic!("bench scenario: {e}"))
}

/// The median (the upper one of an even count).
pub(crate) fn median(mut xs: Vec<f64>) -> f64 {
    assert!(!xs.is_empty(), "a median of nothing");
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Microseconds per agent step of one run of `scenario` (`turns` tool turns) on `store`, as
/// execution `id`; the run must complete with one tool call a turn.
pub(crate) async fn run_once(
    store: Arc<dyn Store>,
    scenario: &Scenario,
    id: &str,
    turns: usize,
) -> f64 {
    let start = Instant::now();
    let report = scenario
        .run()
        .store(store)
        .execution(id)
        .execute()
        .await
        .unwrap_or_else(|e| panic!("bench run: {e}"));
    let elapsed = start.elapsed();
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.tool_calls as usize, turns);
    elapsed.as_secs_f64() * 1e6 / turns as f64
}
