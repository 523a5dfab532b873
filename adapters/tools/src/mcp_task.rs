//! MCP tasks (protocol 2025-11-25, "tasks", experimental): a tool named in `[[mcp]] tasks` is
//! called with a `task` on `tools/call`; the server answers at once with a task (its id, status
//! and `pollInterval`), and the client, not the model, waits: it asks `tasks/get` at the
//! server's interval until the task leaves `working`, then `tasks/result` for the call's one
//! result. The kernel sees one call and one result. A task not done by the deadline (the tool's
//! timeout) is cancelled (`tasks/cancel`) and the call is a `timeout`.
//!
//! The task's id is journaled with the call before the first poll
//! ([`terminus_runtime::jobs::started`]): a run killed while it waits resumes by asking
//! `tasks/get` about that task, never by calling the tool again; a task the server no longer
//! knows is reported lost, and the call is answered as in doubt.
//!
//! A task's question (`input_required`) reaches the client's elicitation handler on the stream
//! of `tasks/result`. On a server whose questions wait for a person, the handler leaves it open
//! and the wait ends there ([`Wait::parked`]): the run is suspended with the call held, and the
//! call's second run, with the person's reply, waits for the same task and answers it.
//!
//! The 2026-07-28 revision moved tasks to an extension (`io.modelcontextprotocol/tasks`,
//! SEP-2663), which a server declares in its capabilities and the client in its own: the server
//! decides to answer `tools/call` with a task (`resultType: "task"`), `tasks/get` gives the
//! task's result or error inline once it ends, and its questions (`input_required`) as
//! `inputRequests`, which the client answers with `tasks/update` by the server's elicitation
//! policy (a question left for a person ends the wait the same way). The client speaks the
//! revision the server declares ([`Revision`]). rmcp 3.11 types only the later one, so the
//! 2025-11-25 requests go out as custom requests; both revisions' results are read from their
//! JSON, whichever of rmcp's result types decoded them.

use crate::content::render;
use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelTaskParams, CancelTaskRequest,
    ClientRequest, CustomRequest, ElicitRequestParams, ElicitResult, GetTaskParams, GetTaskRequest,
    InputResponses, UpdateTaskParams, UpdateTaskRequest,
};
use rmcp::service::{Peer, ServiceError};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use terminus_kernel::{ToolErrorKind, ToolOutcome};
use terminus_runtime::jobs;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
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
    /// The rest: in 2026-07-28's `tasks/get`, the ended task's `result` or `error`, or the
    /// `inputRequests` it waits on.
    #[serde(flatten)]
    pub(crate) payload: serde_json::Map<String, Value>,
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

/// The revision of MCP tasks a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Revision {
    /// 2025-11-25 ("tasks", experimental): a `task` on `tools/call`, `tasks/get` for the
    /// status, `tasks/result` for the result, the questions on that result's stream.
    Experimental,
    /// 2026-07-28's extension (`io.modelcontextprotocol/tasks`, declared by the server): the
    /// result, the error and the questions inline in `tasks/get`, answered with `tasks/update`.
    Extension,
}

impl Revision {
    /// The request that calls tool `name` as a task.
    fn tools_call(self, name: &str, arguments: Value) -> ClientRequest {
        match self {
            Revision::Experimental => custom(
                "tools/call",
                json!({ "name": name, "arguments": arguments, "task": {} }),
            ),
            Revision::Extension => {
                let mut params = CallToolRequestParams::new(name.to_owned());
                if let Value::Object(map) = arguments {
                    params = params.with_arguments(map);
                }
                ClientRequest::CallToolRequest(CallToolRequest::new(params))
            }
        }
    }

    /// The request for task `task_id`'s status (`tasks/get`).
    fn tasks_get(self, task_id: &str) -> ClientRequest {
        match self {
            Revision::Experimental => custom("tasks/get", json!({ "taskId": task_id })),
            Revision::Extension => {
                ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(task_id)))
            }
        }
    }

    /// The request that cancels task `task_id` (`tasks/cancel`).
    fn tasks_cancel(self, task_id: &str) -> ClientRequest {
        match self {
            Revision::Experimental => custom("tasks/cancel", json!({ "taskId": task_id })),
            Revision::Extension => ClientRequest::CancelTaskRequest(CancelTaskRequest::new(
                CancelTaskParams::new(task_id),
            )),
        }
    }
}

/// A request rmcp does not type (2025-11-25's tasks).
fn custom(method: &str, params: Value) -> ClientRequest {
    ClientRequest::CustomRequest(CustomRequest::new(method, Some(params)))
}

/// Sends `request` and gives its result as JSON, whichever result type rmcp read it into.
async fn request(peer: &Peer<RoleClient>, request: ClientRequest) -> Result<Value, ServiceError> {
    let result = peer.send_request(request).await?;
    Ok(serde_json::to_value(&result).unwrap_or(Value::Null))
}

fn failed(kind: ToolErrorKind, message: String) -> ToolOutcome {
    ToolOutcome::Error { kind, message }
}

/// The journaled handle of task `task_id` of server `server`.
pub(crate) fn job(server: &str, task_id: &str) -> Value {
    json!({ "mcp_task": { "server": server, "task_id": task_id } })
}

/// The task id in `job`, when it is a task of `server`.
pub(crate) fn resumed_task(job: &Value, server: &str) -> Option<String> {
    let task = job.get("mcp_task")?;
    (task.get("server")?.as_str()? == server)
        .then(|| task.get("task_id")?.as_str().map(str::to_owned))
        .flatten()
}

fn late(limit: Duration) -> ToolOutcome {
    failed(
        ToolErrorKind::Timeout,
        format!("no result within {} ms", limit.as_millis()),
    )
}

/// The waits of one server's tasks: its peer and name, where dropped waits send their
/// `tasks/cancel`, and (a server whose questions wait for a person) what is told when a task's
/// question is left for the person.
pub(crate) struct Wait<'a> {
    pub(crate) peer: &'a Peer<RoleClient>,
    pub(crate) server: &'a str,
    pub(crate) cancels: &'a Cancels,
    /// Told by the elicitation handler when it leaves a task's question unanswered: the wait ends
    /// there, the task still running on the server (`input_required`), and the call's second
    /// run, with the person's answer, waits for the same task again.
    pub(crate) parked: Option<&'a Notify>,
    /// The revision of tasks the server speaks.
    pub(crate) revision: Revision,
    /// The answer to a task's question in 2026-07-28's `inputRequests`, by the server's
    /// elicitation policy; `None`: it is left for a person, and the wait ends there, as for a
    /// parked question.
    pub(crate) answer: &'a (dyn Fn(&ElicitRequestParams) -> Option<ElicitResult> + Send + Sync),
}

impl Wait<'_> {
    /// Calls tool `name` as a task and waits for its result, at most `limit` in all. The task's
    /// id is journaled with the call ([`jobs::started`]) before the first poll; a resumed run
    /// whose call started a task waits for that task and calls nothing. Never a fault: every
    /// failure is an outcome, and a task given up on is cancelled.
    pub(crate) async fn call(&self, name: &str, arguments: Value, limit: Duration) -> ToolOutcome {
        let deadline = Instant::now() + limit;
        if let Some(task_id) = jobs::resumed().and_then(|job| resumed_task(&job, self.server)) {
            return self.resume(&task_id, deadline, limit).await;
        }
        let call = self.revision.tools_call(name, arguments);
        let answer = tokio::time::timeout_at(deadline, request(self.peer, call)).await;
        let task = match answer {
            Err(_) => return late(limit),
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
        // Journaled before the first poll: a crash from here on resumes by waiting for this task.
        jobs::started(job(self.server, &task.task_id)).await;
        self.wait(task, deadline, limit).await
    }

    /// Waits again for task `task_id`, started by the run before it stopped: its status first; a
    /// task the server does not know (any more) is reported lost ([`jobs::lost`]), and the runtime
    /// answers the call as in doubt.
    async fn resume(&self, task_id: &str, deadline: Instant, limit: Duration) -> ToolOutcome {
        let asked = tokio::time::timeout_at(
            deadline,
            request(self.peer, self.revision.tasks_get(task_id)),
        )
        .await;
        let unknown = |why: String| {
            let why = format!("task {task_id}: {why}");
            jobs::lost(why.clone());
            failed(ToolErrorKind::Failed, why)
        };
        match asked {
            Err(_) => late(limit),
            Ok(Err(e)) => unknown(crate::mcp::error_kind(&e).1),
            Ok(Ok(value)) => match serde_json::from_value::<TaskState>(value) {
                Ok(state) => self.wait(state, deadline, limit).await,
                Err(e) => unknown(format!("its status is unreadable: {e}")),
            },
        }
    }

    /// Polls `task` at its interval until it leaves `working` or `deadline` passes, then gives its
    /// result. A wait dropped before that (the run's kill switch, a timeout around the call)
    /// cancels the task ([`Abandoned`]).
    async fn wait(&self, task: TaskState, deadline: Instant, limit: Duration) -> ToolOutcome {
        let mut abandoned = Abandoned {
            peer: self.peer,
            revision: self.revision,
            cancels: self.cancels,
            task_id: &task.task_id,
            armed: true,
        };
        let outcome = self.poll(&task, deadline, limit).await;
        abandoned.armed = false;
        outcome
    }

    /// [`Wait::wait`]'s polling.
    async fn poll(&self, task: &TaskState, deadline: Instant, limit: Duration) -> ToolOutcome {
        let peer = self.peer;
        let every = task.interval(DEFAULT_POLL);
        let mut now = task.clone();
        jobs::status(now.describe());
        loop {
            if !now.working() {
                match self.revision {
                    Revision::Experimental => return self.result(&now, deadline, limit).await,
                    Revision::Extension => {
                        // `None`: its questions answered, it works again.
                        if let Some(outcome) = self.ended(&now, deadline, limit).await {
                            return outcome;
                        }
                    }
                }
            }
            if Instant::now() + every >= deadline {
                return give_up(peer, self.revision, &now, limit).await;
            }
            tokio::time::sleep(every).await;
            let asked = tokio::time::timeout_at(
                deadline,
                request(peer, self.revision.tasks_get(&task.task_id)),
            )
            .await;
            now = match asked {
                Err(_) => return give_up(peer, self.revision, &now, limit).await,
                Ok(Err(e)) => {
                    let (kind, message) = crate::mcp::error_kind(&e);
                    return failed(kind, format!("task {}: {message}", task.task_id));
                }
                Ok(Ok(value)) => match serde_json::from_value::<TaskState>(value) {
                    Ok(state) => {
                        if state.describe() != now.describe() {
                            jobs::status(state.describe());
                        }
                        state
                    }
                    Err(e) => {
                        return failed(
                            ToolErrorKind::Failed,
                            format!("task {}: its status is unreadable: {e}", task.task_id),
                        );
                    }
                },
            };
        }
    }

    /// A 2026-07-28 task out of `working`, as `tasks/get` gave it: the call's outcome when it
    /// ended (its result, or how it failed), or `None` once its questions are answered
    /// (`tasks/update`) and it goes on. A question left for a person ends the wait, the task
    /// still waiting on the server.
    async fn ended(
        &self,
        task: &TaskState,
        deadline: Instant,
        limit: Duration,
    ) -> Option<ToolOutcome> {
        let id = &task.task_id;
        let unreadable = |what: &str, e: String| {
            failed(
                ToolErrorKind::Failed,
                format!("task {id}: its {what} is unreadable: {e}"),
            )
        };
        let payload = |name: &str| task.payload.get(name).cloned().unwrap_or(Value::Null);
        match task.status.as_str() {
            "completed" => Some(
                match serde_json::from_value::<CallToolResult>(payload("result")) {
                    Ok(result) => render(&result),
                    Err(e) => unreadable("result", e.to_string()),
                },
            ),
            "failed" => {
                let error = payload("error");
                let message = error["message"]
                    .as_str()
                    .map_or_else(|| error.to_string(), str::to_owned);
                Some(failed(
                    ToolErrorKind::Failed,
                    format!("task {id} failed: {message}"),
                ))
            }
            "input_required" => {
                let asked = payload("inputRequests");
                let Some(asked) = asked.as_object() else {
                    return Some(unreadable("questions", "no `inputRequests`".to_owned()));
                };
                let mut answers = InputResponses::new();
                for (key, question) in asked {
                    let params = match question.get("method").and_then(Value::as_str) {
                        Some("elicitation/create") => {
                            serde_json::from_value::<ElicitRequestParams>(
                                question["params"].clone(),
                            )
                        }
                        other => {
                            // Sampling or roots: nothing here answers them.
                            let why = format!(
                                "task {id} asked `{}`, which this client does not answer",
                                other.unwrap_or("?")
                            );
                            return Some(self.cancelled(task, why).await);
                        }
                    };
                    let params = match params {
                        Ok(params) => params,
                        Err(e) => return Some(unreadable("question", e.to_string())),
                    };
                    let Some(answer) = (self.answer)(&params) else {
                        return Some(failed(
                            ToolErrorKind::Failed,
                            format!("task {id} waits for a person's answer to its question"),
                        ));
                    };
                    answers.insert(
                        key.clone(),
                        serde_json::to_value(answer).unwrap_or(Value::Null),
                    );
                }
                let update = ClientRequest::UpdateTaskRequest(UpdateTaskRequest::new(
                    UpdateTaskParams::new(id.clone(), answers),
                ));
                match tokio::time::timeout_at(deadline, request(self.peer, update)).await {
                    Err(_) => Some(give_up(self.peer, self.revision, task, limit).await),
                    Ok(Err(e)) => {
                        let (kind, message) = crate::mcp::error_kind(&e);
                        Some(failed(kind, format!("task {id}: tasks/update: {message}")))
                    }
                    Ok(Ok(_)) => None,
                }
            }
            _ => Some(failed(
                ToolErrorKind::Failed,
                format!("task {id} ended {}", task.describe()),
            )),
        }
    }

    /// Cancels `task` (`tasks/cancel`, bounded) for `why`, the call's failure.
    async fn cancelled(&self, task: &TaskState, why: String) -> ToolOutcome {
        let cancelled = cancel(self.peer, self.revision, task).await;
        failed(ToolErrorKind::Failed, format!("{why}; {cancelled}"))
    }

    /// A 2025-11-25 task out of `working`: its result from `tasks/result`.
    async fn result(&self, task: &TaskState, deadline: Instant, limit: Duration) -> ToolOutcome {
        let peer = self.peer;
        // Out of `working`: `tasks/result` gives the result (after the server's questions, for
        // `input_required`: they reach the client's elicitation handler first). A question left
        // for a person ends the wait there, the task running: not cancelled, it waits for the
        // answer the call's second run gives.
        let mut notified = std::pin::pin!(self.parked.map(Notify::notified));
        if let Some(notified) = notified.as_mut().as_pin_mut() {
            notified.enable(); // before the request: its question cannot come first
        }
        let parked = async {
            match notified.as_mut().as_pin_mut() {
                Some(notified) => notified.await,
                None => std::future::pending().await,
            }
        };
        let asked = tokio::time::timeout_at(
            deadline,
            request(
                peer,
                custom("tasks/result", json!({ "taskId": task.task_id })),
            ),
        );
        let result = tokio::select! {
            result = asked => result,
            () = parked => {
                return failed(
                    ToolErrorKind::Failed,
                    format!("task {} waits for a person's answer to its question", task.task_id),
                );
            }
        };
        match result {
            Err(_) => give_up(peer, self.revision, task, limit).await,
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
                    format!("task {} ended {}: {message}", task.task_id, task.describe()),
                )
            }
        }
    }
}

/// The `tasks/cancel` requests of tasks whose wait was dropped, sent in the background; the
/// server's [`shutdown`](crate::McpServer::shutdown) waits for them before it closes the
/// connection, so a cancelled run's tasks are cancelled on the server too.
#[derive(Debug, Default)]
pub(crate) struct Cancels(Mutex<Vec<JoinHandle<()>>>);

impl Cancels {
    /// Waits for the cancellations sent so far (each bounded).
    pub(crate) async fn finish(&self) {
        let sent = std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner));
        for cancel in sent {
            let _ = cancel.await;
        }
    }
}

/// A task being waited for: dropped while armed (the wait was abandoned), it sends
/// `tasks/cancel`.
struct Abandoned<'a> {
    peer: &'a Peer<RoleClient>,
    revision: Revision,
    cancels: &'a Cancels,
    task_id: &'a str,
    armed: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        let cancel = self.revision.tasks_cancel(self.task_id);
        let cancel = runtime.spawn(async move {
            let _ = tokio::time::timeout(CANCEL_WAIT, request(&peer, cancel)).await;
        });
        self.cancels
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(cancel);
    }
}

/// How long a `tasks/cancel` sent for an abandoned wait may take.
const CANCEL_WAIT: Duration = Duration::from_secs(3);

/// Sends `tasks/cancel` for `task`, bounded by a poll interval (at least a second), and says
/// how the server took it.
async fn cancel(peer: &Peer<RoleClient>, revision: Revision, task: &TaskState) -> String {
    let wait = task.interval(DEFAULT_POLL).max(Duration::from_secs(1));
    let cancel = request(peer, revision.tasks_cancel(&task.task_id));
    match tokio::time::timeout(wait, cancel).await {
        Ok(Ok(_)) => "cancelled (tasks/cancel)".to_owned(),
        Ok(Err(e)) => format!("tasks/cancel failed: {}", crate::mcp::error_kind(&e).1),
        Err(_) => "tasks/cancel sent, no answer".to_owned(),
    }
}

/// The deadline passed with the task still running: cancel it (`tasks/cancel`, bounded by a
/// poll interval) and say so.
async fn give_up(
    peer: &Peer<RoleClient>,
    revision: Revision,
    task: &TaskState,
    limit: Duration,
) -> ToolOutcome {
    let cancelled = cancel(peer, revision, task).await;
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

    #[test]
    fn a_journaled_job_names_its_server_and_task() {
        let journaled = job("builds", "t-9");
        assert_eq!(resumed_task(&journaled, "builds").as_deref(), Some("t-9"));
        assert_eq!(
            resumed_task(&journaled, "other"),
            None,
            "another server's task"
        );
        assert_eq!(resumed_task(&json!({"pid": 7}), "builds"), None);
    }
}
