//! Time and interruption under tokio's paused clock: the run's deadline, backoff, per-call
//! timeouts, the kill switch, tool concurrency and lease renewal.

mod common;

use common::{Answer, Echo, Script, calls, done, empty, text};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use terminus_kernel::{AbortReason, CompleteReason, Entry, ModelErrorKind, Outcome, Policy, Rule};
use terminus_runtime::{
    Claims, Journal, KillSwitch, MemoryStore, ModelFailure, Run, RuntimeConfig, StoreError,
    ToolSet, Transition,
};
use tokio::time::Instant;

fn slow_tools(delay: Duration) -> (ToolSet, Arc<Echo>) {
    let echo = Echo::new(delay);
    (ToolSet::new().with("echo", echo.clone()), echo)
}

#[tokio::test(start_paused = true)]
async fn the_deadline_interrupts_a_slow_tool_at_the_exact_time() {
    let (tools, _) = slow_tools(Duration::from_secs(10));
    let model = Script::new([Answer::Turn(terminus_kernel::ModelTurn {
        text: "Looking it up.".into(),
        tool_calls: vec![terminus_kernel::ToolCall {
            id: "c1".into(),
            name: "echo".into(),
            arguments: json!({}).into(),
        }],
        ..Default::default()
    })]);
    let policy = Policy {
        deadline_ms: Some(1_000),
        ..Policy::default()
    };
    let start = Instant::now();
    let report = Run::new("Slow", policy, model)
        .tools(tools)
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(start.elapsed(), Duration::from_millis(1_000));
    assert_eq!(report.outcome, Outcome::Aborted(AbortReason::Deadline));
    assert_eq!(report.rule, Rule::DeadlinePassed);
    assert_eq!(report.result.as_deref(), Some("Looking it up."));
    assert_eq!(report.steps, 2);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_interrupts_a_backoff_wait() {
    let failure = ModelFailure {
        kind: ModelErrorKind::RateLimited,
        retry_after_ms: Some(60_000),
        message: "slow down".into(),
    };
    let model = Script::new([Answer::Fail(failure), text("never reached")]);
    let policy = Policy {
        deadline_ms: Some(2_000),
        ..Policy::default()
    };
    let start = Instant::now();
    let report = Run::new("t", policy, model.clone())
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(start.elapsed(), Duration::from_millis(2_000));
    assert_eq!(report.outcome, Outcome::Aborted(AbortReason::Deadline));
    assert_eq!(model.requests(), 1, "the retry never went out");
    assert_eq!(report.stats.model_errors, 1);
}

#[tokio::test(start_paused = true)]
async fn empty_replies_are_retried_after_the_kernels_backoff() {
    let model = Script::new([empty(), empty(), text("Here it is.")]);
    let policy = Policy {
        retry_base_ms: 1_000,
        retry_max_ms: 1_000,
        ..Policy::default()
    };
    let start = Instant::now();
    let report = Run::new("t", policy, model)
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Answered));
    assert_eq!(report.empty_responses, 2);
    // Equal jitter: each delay is between half the capped backoff and all of it.
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(1_000) && waited <= Duration::from_millis(2_000),
        "waited {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hanging_model_call_times_out_and_is_retried() {
    let model = Script::new([Answer::Hang, text("Answer.")]);
    let config = RuntimeConfig {
        model_timeout: Some(Duration::from_secs(5)),
        ..RuntimeConfig::default()
    };
    let policy = Policy {
        retry_base_ms: 100,
        retry_max_ms: 100,
        ..Policy::default()
    };
    let store = MemoryStore::new();
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = Arc::clone(&lines);
    let start = Instant::now();
    let report = Run::new("t", policy, model)
        .config(config)
        .store(Arc::new(store.clone()))
        .execution("hang")
        .observer(move |t: &Transition<'_>| {
            if let Ok(mut l) = sink.lock() {
                l.push(t.summary.to_owned());
            }
        })
        .execute()
        .await
        .expect("the run reaches a stop");
    assert!(start.elapsed() >= Duration::from_secs(5));
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Answered));
    assert_eq!(report.stats.model_errors, 1);
    let lines = lines.lock().expect("not poisoned").clone();
    assert_eq!(lines[0], "timeout: no answer within 5000 ms");
    let journaled = store.records("hang").await.expect("stored");
    assert!(journaled.iter().any(|r| matches!(
        r.entry,
        Entry::ModelError {
            error: ModelErrorKind::Timeout,
            retry_after_ms: None
        }
    )));
}

#[tokio::test(start_paused = true)]
async fn a_hanging_tool_call_times_out_as_a_tool_error() {
    let (tools, _) = slow_tools(Duration::from_secs(3_600));
    let model = Script::new([calls(&[("echo", json!({}))]), done("Gave up.")]);
    let config = RuntimeConfig {
        tool_timeout: Some(Duration::from_secs(2)),
        ..RuntimeConfig::default()
    };
    let start = Instant::now();
    let report = Run::new("t", Policy::default(), model.clone())
        .tools(tools)
        .config(config)
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    assert_eq!(report.stats.tool_failures, 1);
    let seen = model.last_messages();
    let result = seen.iter().rev().find(|m| m.tool_call_id.is_some());
    assert_eq!(
        result.map(|m| m.content.as_str()),
        Some("error (timeout): no result within 2000 ms")
    );
}

#[tokio::test(start_paused = true)]
async fn the_kill_switch_cancels_a_running_tool() {
    let (tools, _) = slow_tools(Duration::from_secs(60));
    let model = Script::new([calls(&[("echo", json!({}))])]);
    let kill = KillSwitch::new();
    let run = Run::new("t", Policy::default(), model)
        .tools(tools)
        .kill_switch(kill.clone())
        .execute();
    let handle = tokio::spawn(run);
    tokio::time::sleep(Duration::from_millis(500)).await;
    kill.kill();
    let start = Instant::now();
    let report = handle
        .await
        .expect("the task did not panic")
        .expect("the run reaches a stop");
    assert_eq!(start.elapsed(), Duration::ZERO, "cancel is immediate");
    assert_eq!(report.outcome, Outcome::Aborted(AbortReason::Cancelled));
    assert_eq!(report.rule, Rule::Cancelled);
    assert_eq!(report.steps, 2);
}

#[tokio::test(start_paused = true)]
async fn a_run_killed_before_it_starts_never_calls_the_model() {
    let model = Script::new([text("never")]);
    let kill = KillSwitch::new();
    kill.kill();
    let report = Run::new("t", Policy::default(), model.clone())
        .kill_switch(kill)
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Aborted(AbortReason::Cancelled));
    assert_eq!(model.requests(), 0);
    assert_eq!(report.steps, 1);
}

/// Sleeps (on the real clock) at the run's first transition, outside any action.
struct Stalls;

impl terminus_runtime::Observer for Stalls {
    fn on_transition(&mut self, t: &Transition<'_>) {
        if t.record.step == 1 {
            std::thread::sleep(Duration::from_millis(60));
        }
    }
}

/// An action that is ready at once is still raced against a kill timer that ran out before
/// it (here while the first step was reported): the tool is never called.
#[tokio::test]
async fn a_kill_timer_that_ran_out_between_actions_stops_the_next_one() {
    let (tools, echo) = slow_tools(Duration::ZERO);
    let model = Script::new([calls(&[("echo", json!({}))]), done("Echoed.")]);
    let kill = KillSwitch::after(Duration::from_millis(20));
    let report = Run::new("t", Policy::default(), model.clone())
        .tools(tools)
        .kill_switch(kill.clone())
        .observer(Stalls)
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Aborted(AbortReason::Cancelled));
    assert_eq!(echo.calls.load(Ordering::SeqCst), 0, "the tool never ran");
    assert_eq!(model.requests(), 1);
    assert!(
        kill.is_killed(),
        "the switch reads killed once its timer ran out"
    );
}

/// The same for the run's deadline: the tool is never called, and the run ends at its deadline.
#[tokio::test]
async fn a_deadline_that_passed_between_actions_stops_the_next_one() {
    let (tools, echo) = slow_tools(Duration::ZERO);
    let model = Script::new([calls(&[("echo", json!({}))]), done("Echoed.")]);
    let policy = Policy {
        deadline_ms: Some(20),
        ..Policy::default()
    };
    let report = Run::new("t", policy, model.clone())
        .tools(tools)
        .observer(Stalls)
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Aborted(AbortReason::Deadline));
    assert_eq!(report.rule, Rule::DeadlinePassed);
    assert_eq!(echo.calls.load(Ordering::SeqCst), 0, "the tool never ran");
}

async fn run_batch(calls_in_turn: usize, limit: usize) -> (Duration, usize, Vec<String>) {
    let (tools, echo) = slow_tools(Duration::from_millis(100));
    let args: Vec<(&str, serde_json::Value)> = (0..calls_in_turn)
        .map(|i| ("echo", json!({ "i": i })))
        .collect();
    let model = Script::new([calls(&args), done("All echoed.")]);
    let config = RuntimeConfig {
        max_concurrent_tools: limit,
        ..RuntimeConfig::default()
    };
    let start = Instant::now();
    let report = Run::new("t", Policy::default(), model.clone())
        .tools(tools)
        .config(config)
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.tool_calls as usize, calls_in_turn);
    let order = model
        .last_messages()
        .iter()
        .filter(|m| m.tool_call_id.is_some())
        .map(|m| m.content.clone())
        .collect();
    (
        start.elapsed(),
        echo.max_running.load(Ordering::SeqCst),
        order,
    )
}

#[tokio::test(start_paused = true)]
async fn concurrent_tool_calls_are_bounded_by_the_limit() {
    let (elapsed, max, order) = run_batch(5, 2).await;
    assert_eq!(max, 2);
    assert_eq!(elapsed, Duration::from_millis(300));
    assert_eq!(
        order,
        (0..5)
            .map(|i| format!(r#"{{"i":{i}}}"#))
            .collect::<Vec<_>>(),
        "results in call order"
    );

    let (elapsed, max, _) = run_batch(5, 10).await;
    assert_eq!(max, 5);
    assert_eq!(elapsed, Duration::from_millis(100));

    let (elapsed, max, _) = run_batch(3, 1).await;
    assert_eq!(max, 1);
    assert_eq!(elapsed, Duration::from_millis(300));
}

#[tokio::test(start_paused = true)]
async fn the_lease_is_renewed_while_the_run_lives() {
    let store = MemoryStore::new();
    let (tools, _) = slow_tools(Duration::from_secs(1));
    let model = Script::new([calls(&[("echo", json!({}))]), done("Done.")]);
    let config = RuntimeConfig {
        worker: "w1".into(),
        lease: Duration::from_millis(300),
        ..RuntimeConfig::default()
    };
    let run = Run::new("t", Policy::default(), model)
        .tools(tools)
        .config(config)
        .store(Arc::new(store.clone()))
        .execution("leased")
        .execute();
    let handle = tokio::spawn(run);
    // Well past the 300 ms lease: only renewal keeps it.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let other = store
        .claim("leased", "w2", Duration::from_secs(1))
        .await
        .expect_err("w1 still holds the claim");
    assert!(
        matches!(&other, StoreError::Claimed { execution, worker }
            if execution == "leased" && worker == "w1"),
        "{other:?}"
    );
    let report = handle
        .await
        .expect("the task did not panic")
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Explicit));
    // Released at the end.
    store
        .claim("leased", "w2", Duration::from_secs(1))
        .await
        .expect("the claim was released");
}
