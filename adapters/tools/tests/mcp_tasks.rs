//! MCP tasks (2025-11-25) against the real server-everything: its `simulate-research-query`
//! requires task execution (four one-second stages, `pollInterval` 1000). Called as a task
//! (`[[mcp]] tasks`), the client waits for it and returns its report as the call's one result;
//! past the tool's timeout it is cancelled with `tasks/cancel`.

mod common;

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use terminus_kernel::{ToolErrorKind, ToolOutcome};
use terminus_tools::McpServer;

fn text(outcome: &ToolOutcome) -> String {
    match outcome {
        ToolOutcome::Ok(v) => match v.value() {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
        ToolOutcome::Error { kind, message } => format!("error {}: {message}", kind.as_str()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_tool_is_waited_for_and_its_report_is_the_calls_one_result() {
    let Some(peers) = common::peers() else { return };
    // Called plainly, as before: the server refuses it.
    let plain = McpServer::connect(common::everything(&peers))
        .await
        .expect("starts");
    let refused = plain
        .call("simulate-research-query", json!({ "topic": "rust" }))
        .await;
    assert!(
        text(&refused).contains("requires task augmentation"),
        "{refused:?}"
    );
    plain.shutdown().await;

    let mut config = common::everything(&peers);
    config.tasks = vec!["simulate-research-query".into()];
    let server = McpServer::connect(config).await.expect("starts");
    let started = Instant::now();
    let report = server
        .call("simulate-research-query", json!({ "topic": "rust" }))
        .await;
    let waited = started.elapsed();
    let report = match report {
        ToolOutcome::Ok(_) => text(&report),
        other => panic!("the task did not complete: {other:?}"),
    };
    assert!(report.contains("rust"), "{report}");
    // Four one-second stages: the client waited for them, polling, not the model.
    assert!(waited >= Duration::from_secs(3), "{waited:?}");
    // The server goes on serving plain calls.
    let echoed = server.call("echo", json!({ "message": "after" })).await;
    assert!(text(&echoed).contains("after"), "{echoed:?}");
    server.shutdown().await;
}

/// Asserts that `outcome` is a timeout at 1500 ms whose task the server cancelled.
fn timed_out_and_cancelled(outcome: &ToolOutcome) {
    let ToolOutcome::Error { kind, message } = outcome else {
        panic!("a task past its timeout completed: {outcome:?}");
    };
    assert_eq!(*kind, ToolErrorKind::Timeout);
    assert!(
        message.contains("not done within 1500 ms") && message.contains("cancelled (tasks/cancel)"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_past_the_tools_timeout_is_cancelled_and_the_call_is_a_timeout() {
    let Some(peers) = common::peers() else { return };
    let mut config = common::everything(&peers);
    config.tasks = vec!["simulate-research-query".into()];
    config.tool_timeout = Duration::from_millis(1500);
    let server = McpServer::connect(config).await.expect("starts");
    let started = Instant::now();
    let outcome = server
        .call("simulate-research-query", json!({ "topic": "rust" }))
        .await;
    // The server answered the cancel with the task cancelled.
    timed_out_and_cancelled(&outcome);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_needs_input_gets_the_clients_elicitation_answer_and_goes_on() {
    let Some(peers) = common::peers() else { return };
    let mut config = common::everything(&peers);
    config.tasks = vec!["simulate-research-query".into()];
    config.elicitation = terminus_tools::Elicitation::Defaults;
    let server = McpServer::connect(config).await.expect("starts");
    let outcome = server
        .call(
            "simulate-research-query",
            json!({ "topic": "python", "ambiguous": true }),
        )
        .await;
    let report = text(&outcome);
    // The question reached the client through `tasks/result`; its answer (accepted, the form's
    // defaults: none) reached the task, which went on with it.
    assert!(
        report.contains("Research Report: python (User accepted without selection)"),
        "{report}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_tool_the_server_does_not_offer_stops_the_start() {
    let Some(peers) = common::peers() else { return };
    let mut config = common::everything(&peers);
    config.tasks = vec!["simulate-research".into()];
    let refused = terminus_tools::McpTools::connect(&[config]).await;
    let Err(e) = refused else {
        panic!("a task tool the server does not offer was accepted");
    };
    assert!(
        e.to_string().contains(
            "approval/deferred/tools/tasks/poll names `simulate-research`, which the server does not \
             offer"
        ),
        "{e}"
    );
}

/// What the 2026-07-28 test server wrote to its log: one line per request or finished job.
fn seen(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Runs `call` as a run's tool call does, with `resumed` (the job an earlier run started): the
/// call's output, the jobs it reported started and the statuses it said.
async fn in_run<F: Future>(
    resumed: Option<Value>,
    call: F,
) -> (F::Output, Vec<Value>, Vec<String>) {
    let started = std::sync::Mutex::new(Vec::new());
    let mut statuses = Vec::new();
    let (out, lost) = terminus_runtime::jobs::scope(
        resumed,
        |job| {
            started.lock().expect("not poisoned").push(job);
            async { true }
        },
        |_: &Value, status| statuses.push(status),
        call,
    )
    .await;
    assert_eq!(lost, None);
    (out, started.into_inner().expect("not poisoned"), statuses)
}

/// The 2026-07-28 revision (`io.modelcontextprotocol/tasks`, SEP-2663), which the server
/// declares: the call answers at once with a task, whose status and, once it ends, result
/// come from `tasks/get` alone. The task's id is reported (journaled) before the first poll,
/// and a resumed run that carries it asks `tasks/get` about that task, calling nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_task_is_polled_to_its_inline_result_and_resumed_by_its_id() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = dir.path().join("server.log");
    let server = McpServer::connect(common::tasks_2026(&log))
        .await
        .expect("starts");
    let started = Instant::now();
    let (outcome, jobs, statuses) = in_run(
        None,
        server.call("build", json!({ "target": "app", "seconds": 2 })),
    )
    .await;
    assert_eq!(text(&outcome), "built app (job 1)");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "waited for the job"
    );
    let [job] = jobs.as_slice() else {
        panic!("one job reported: {jobs:?}");
    };
    assert!(job["mcp_task"]["task_id"].is_string(), "{job}");
    assert!(
        statuses.contains(&"working (building app: second 2 of 2)".to_owned()),
        "{statuses:?}"
    );

    // The call's second run, carrying its job: the same task's result, no second call.
    let (again, jobs, _) = in_run(
        Some(job.clone()),
        server.call("build", json!({ "target": "app", "seconds": 2 })),
    )
    .await;
    assert_eq!(text(&again), "built app (job 1)");
    assert!(jobs.is_empty(), "nothing started: {jobs:?}");

    // A task that fails: its error, inline.
    let (broken, _, _) = in_run(
        None,
        server.call("build", json!({ "target": "broken", "seconds": 1 })),
    )
    .await;
    assert!(
        text(&broken).contains("failed: the build of broken failed"),
        "{broken:?}"
    );
    server.shutdown().await;
    assert_eq!(
        seen(&log),
        [
            "call build",
            "finished build",
            "call build",
            "finished build"
        ],
        "one call per job, none for the resumed run"
    );
}

/// A 2026-07-28 task past the tool's timeout is cancelled (`tasks/cancel`), and the call is a
/// timeout; the job stops on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_task_past_the_tools_timeout_is_cancelled() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = dir.path().join("server.log");
    let mut config = common::tasks_2026(&log);
    config.tool_timeout = Duration::from_millis(1500);
    let server = McpServer::connect(config).await.expect("starts");
    let outcome = server
        .call("build", json!({ "target": "app", "seconds": 5 }))
        .await;
    timed_out_and_cancelled(&outcome);
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.shutdown().await;
    assert_eq!(
        seen(&log),
        ["call build", "cancel"],
        "stopped, never finished"
    );
}

/// A 2026-07-28 task's question (`input_required`, an elicitation form in `inputRequests`):
/// answered by the server's policy with `tasks/update` (`defaults`: the form's defaults,
/// `decline`), or, on a person's server in a run, left open: the call's run ends there with the
/// question for the person, the task still waiting on the server, and the call's second run
/// (with the job and the person's reply) answers the same task, which goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_tasks_question_is_answered_by_the_policy_or_held_for_a_person() {
    use terminus_runtime::asking::{self, Reply};
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = dir.path().join("server.log");
    let deploy = || json!({ "target": "app" });

    let mut config = common::tasks_2026(&log);
    config.elicitation = terminus_tools::Elicitation::Defaults;
    let server = McpServer::connect(config).await.expect("starts");
    let outcome = server.call("deploy", deploy()).await;
    assert_eq!(text(&outcome), "deployed app to staging (job 1)");
    server.shutdown().await;

    let server = McpServer::connect(common::tasks_2026(&log))
        .await
        .expect("starts");
    let outcome = server.call("deploy", deploy()).await;
    assert_eq!(text(&outcome), "deploy of app not done: decline");
    server.shutdown().await;

    let mut config = common::tasks_2026(&log);
    config.elicitation = terminus_tools::Elicitation::Person;
    let server = McpServer::connect(config).await.expect("starts");
    let ((_, asked), jobs, _) =
        in_run(None, asking::scope(None, server.call("deploy", deploy()))).await;
    let question = asked.expect("the question, for the person");
    assert_eq!(question.message, "Deploy app to which environment?");
    let [job] = jobs.as_slice() else {
        panic!("one job reported: {jobs:?}");
    };
    let reply = Some((
        question,
        Reply::Accept(json!({ "environment": "production" })),
    ));
    let ((outcome, asked), jobs, _) = in_run(
        Some(job.clone()),
        asking::scope(reply, server.call("deploy", deploy())),
    )
    .await;
    assert_eq!(asked, None);
    assert!(jobs.is_empty(), "nothing started: {jobs:?}");
    assert_eq!(text(&outcome), "deployed app to production (job 1)");
    server.shutdown().await;
    assert_eq!(
        seen(&log),
        [
            "call deploy",
            "update",
            "finished deploy",
            "call deploy",
            "update",
            "call deploy",
            "update",
            "finished deploy"
        ],
        "the person's deploy called once, its question answered once"
    );
}
