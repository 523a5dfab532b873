//! MCP tasks (protocol 2025-11-25, "tasks", experimental): a tool named in `[[mcp]] tasks` is
//! called with a `task` on `tools/call`; the server answers at once with a task (its id, status
//! and `pollInterval`), and the client, not the model, waits: it asks `tasks/get` at the
//! server's interval until the task leaves `working`, then `tasks/result` for the call's one
//! result. The kernel sees one call and one result. A task not done by the deadline (the tool's
//! timeout) is cancelled (`tasks/cancel`) and the call is a `timeout`.
//!
//! rmcp 3.11 models the later revision of tasks (2026-07-28, an extension with other messages),
//! so these requests go out as custom requests and their results are read from their JSON,
//! whichever of rmcp's result types decoded them.

use crate::content::render;
use rmcp::RoleClient;
use rmcp::model::{CallToolResult, ClientRequest, CustomRequest};
use rmcp::service::{Peer, ServiceError};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;
use terminus_kernel::{ToolErrorKind, ToolOutcome};
use tokio::time::Instant;

/// The interval between two `tasks/get` when the server names none, and the bounds put on the
/// one it names (a server cannot make the client spin, nor sleep past the deadline for long).
const DEFAULT_POLL: Duration = Duration::from_millis(1000);
const MIN_POLL: Duration = Duration::from_millis(50);
const MAX_POLL: Duration = Duration::from_secs(30);

/// A task as the server reports it (`CreateTaskResult.task`, `tasks/get`): the fields the
/// client uses, in either revision's spelling.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskState {
    /// The task's id.
    pub(crate) task_id: String,
    /// `working`, `input_required`, `completed`, `failed` or `cancelled`.
    pub(crate) status: String,
    /// What the task is doing, in the server's words.
    #[serde(default)]
    pub(crate) status_message: Option<String>,
    /// How long to wait between two `tasks/get`, in milliseconds.
    #[serde(default, alias = "pollIntervalMs")]
    pub(crate) poll_interval: Option<u64>,
}

impl TaskState {
    /// Whether the task still runs with nothing asked of the client.
    fn working(&self) -> bool {
        self.status == "working"
    }

    /// The interval to wait before the next `tasks/get`.
    fn interval(&self, default: Duration) -> Duration {
        self.poll_interval
            .map_or(default, Duration::from_millis)
            .clamp(MIN_POLL, MAX_POLL)
    }

    /// `working (Gathering sources...)`.
    fn describe(&self) -> String {
        match &self.status_message {
            Some(message) => format!("{} ({message})", self.status),
            None => self.status.clone(),
        }
    }
}

/// What the `tools/call` of a task answered: a task to wait for, or (a server that ran the call
/// at once) its result.
#[derive(Debug, PartialEq)]
pub(crate) enum Created {
    /// The task, to be waited for.
    Task(TaskState),
    /// The call's result.
    Done(CallToolResult),
}

/// Reads the answer to a task's `tools/call`: `{"task": {...}}` (2025-11-25), a flat task with
/// `"resultType": "task"` (2026-07-28), or a plain `CallToolResult`.
pub(crate) fn created(value: Value) -> Result<Created, String> {
    if let Some(task) = value.get("task") {
        return serde_json::from_value(task.clone())
            .map(Created::Task)
            .map_err(|e| format!("the server's task is unreadable: {e}"));
    }
    if value.get("resultType").and_then(Value::as_str) == Some("task") {
        return serde_json::from_value(value)
            .map(Created::Task)
            .map_err(|e| format!("the server's task is unreadable: {e}"));
    }
    serde_json::from_value(value)
        .map(Created::Done)
        .map_err(|e| format!("the server answered neither a task nor a result: {e}"))
}

/// Sends `method` with `params` and gives its result as JSON, whichever result type rmcp read
/// it into.
async fn request(
    peer: &Peer<RoleClient>,
    method: &str,
    params: Value,
) -> Result<Value, ServiceError> {
    let request = ClientRequest::CustomRequest(CustomRequest::new(method, Some(params)));
    let result = peer.send_request(request).await?;
    Ok(serde_json::to_value(&result).unwrap_or(Value::Null))
}

fn failed(kind: ToolErrorKind, message: String) -> ToolOutcome {
    ToolOutcome::Error { kind, message }
}

/// Calls tool `name` as a task and waits for its result, at most `limit` in all. Never a
/// fault: every failure is an outcome, and a task given up on is cancelled.
pub(crate) async fn call(
    peer: &Peer<RoleClient>,
    name: &str,
    arguments: Value,
    limit: Duration,
) -> ToolOutcome {
    let deadline = Instant::now() + limit;
    let late = || {
        failed(
            ToolErrorKind::Timeout,
            format!("no result within {} ms", limit.as_millis()),
        )
    };
    let params = json!({ "name": name, "arguments": arguments, "task": {} });
    let answer = tokio::time::timeout_at(deadline, request(peer, "tools/call", params)).await;
    let task = match answer {
        Err(_) => return late(),
        Ok(Err(e)) => {
            let (kind, message) = crate::mcp::error_kind(&e);
            return failed(kind, message);
        }
        Ok(Ok(value)) => match created(value) {
            Ok(Created::Done(result)) => return render(&result),
            Ok(Created::Task(task)) => task,
            Err(why) => return failed(ToolErrorKind::Failed, why),
        },
    };
    let every = task.interval(DEFAULT_POLL);
    let mut now = task.clone();
    while now.working() {
        if Instant::now() + every >= deadline {
            return give_up(peer, &now, limit).await;
        }
        tokio::time::sleep(every).await;
        let asked = tokio::time::timeout_at(
            deadline,
            request(peer, "tasks/get", json!({ "taskId": task.task_id })),
        )
        .await;
        now = match asked {
            Err(_) => return give_up(peer, &now, limit).await,
            Ok(Err(e)) => {
                let (kind, message) = crate::mcp::error_kind(&e);
                return failed(kind, format!("task {}: {message}", task.task_id));
            }
            Ok(Ok(value)) => match serde_json::from_value::<TaskState>(value) {
                Ok(state) => state,
                Err(e) => {
                    return failed(
                        ToolErrorKind::Failed,
                        format!("task {}: its status is unreadable: {e}", task.task_id),
                    );
                }
            },
        };
    }
    // Out of `working`: `tasks/result` gives the result (after the server's questions, for
    // `input_required`: they reach the client's elicitation handler first).
    let result = tokio::time::timeout_at(
        deadline,
        request(peer, "tasks/result", json!({ "taskId": task.task_id })),
    )
    .await;
    match result {
        Err(_) => give_up(peer, &now, limit).await,
        Ok(Ok(value)) => match serde_json::from_value::<CallToolResult>(value) {
            Ok(result) => render(&result),
            Err(e) => failed(
                ToolErrorKind::Failed,
                format!("task {}: its result is unreadable: {e}", task.task_id),
            ),
        },
        // A failed or cancelled task has no result: say how it ended.
        Ok(Err(e)) => {
            let (_, message) = crate::mcp::error_kind(&e);
            failed(
                ToolErrorKind::Failed,
                format!("task {} ended {}: {message}", task.task_id, now.describe()),
            )
        }
    }
}

/// The deadline passed with the task still running: cancel it (`tasks/cancel`, bounded by a
/// poll interval) and say so.
async fn give_up(peer: &Peer<RoleClient>, task: &TaskState, limit: Duration) -> ToolOutcome {
    let wait = task.interval(DEFAULT_POLL).max(Duration::from_secs(1));
    let cancel = request(peer, "tasks/cancel", json!({ "taskId": task.task_id }));
    let cancelled = match tokio::time::timeout(wait, cancel).await {
        Ok(Ok(_)) => "cancelled (tasks/cancel)".to_owned(),
        Ok(Err(e)) => format!("tasks/cancel failed: {}", crate::mcp::error_kind(&e).1),
        Err(_) => "tasks/cancel sent, no answer".to_owned(),
    };
    failed(
        ToolErrorKind::Timeout,
        format!(
            "task {} not done within {} ms (last {}); {cancelled}",
            task.task_id,
            limit.as_millis(),
            task.describe()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_revisions_tasks_and_a_plain_result_are_read() {
        let legacy = json!({ "task": { "taskId": "t1", "status": "working",
            "statusMessage": "Gathering sources...", "createdAt": "2026-12-02T00:00:00Z",
            "lastUpdatedAt": "2026-12-02T00:00:00Z", "ttl": 300000, "pollInterval": 1000 } });
        let Ok(Created::Task(task)) = created(legacy) else {
            panic!("a 2025-11-25 task");
        };
        assert_eq!(
            (task.task_id.as_str(), task.interval(DEFAULT_POLL)),
            ("t1", Duration::from_millis(1000))
        );
        assert_eq!(task.describe(), "working (Gathering sources...)");
        let flat = json!({ "resultType": "task", "taskId": "t2", "status": "working",
            "ttlMs": 300000, "pollIntervalMs": 5 });
        let Ok(Created::Task(task)) = created(flat) else {
            panic!("a 2026-07-28 task");
        };
        assert_eq!(
            task.interval(DEFAULT_POLL),
            MIN_POLL,
            "the interval is bounded"
        );
        let plain = json!({ "content": [ { "type": "text", "text": "done" } ] });
        assert!(matches!(created(plain), Ok(Created::Done(_))));
        let neither = created(json!({ "task": { "status": "working" } }));
        assert!(
            neither
                .as_ref()
                .is_err_and(|e| e.contains("missing field `taskId`")),
            "{neither:?}"
        );
    }
}
