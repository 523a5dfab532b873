//! A test server, not an example to follow: a stdio MCP server on rmcp's own server side that
//! speaks the 2026-07-28 revision and declares its tasks extension (`io.modelcontextprotocol/
//! tasks`, SEP-2663, rmcp's `TaskManager`): a `tools/call` answers at once with a task
//! (`resultType: "task"`), `tasks/get` gives its status and, once it ends, its result or error
//! inline, `tasks/update` answers its questions (`inputRequests`), `tasks/cancel` stops it.
//! `adapters/tools/tests/mcp_tasks.rs` runs it (cargo builds examples with the tests).
//!
//! - `build {target, seconds}`: works `seconds` (default 2) with a status message a second
//!   (`building TARGET: second S of N`), polled every 100 ms, then completes with `built TARGET
//!   (job N)`; `target` "broken" fails instead (`the build of broken failed`).
//! - `deploy {target}`: asks which environment (an `elicitation/create` form in
//!   `inputRequests`, key `environment`), then completes with `deployed TARGET to ENVIRONMENT
//!   (job N)`, or `deploy of TARGET not done: ACTION` when the answer is not an accept.
//!
//! With a path as its argument it appends a line there for each `tools/call` (`call NAME`),
//! `tasks/update` (`update`), `tasks/cancel` (`cancel`) and each job that finished its work
//! (`finished NAME`), so a test counts what the server saw.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, Implementation, InputRequest, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskContext, TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct Tasks {
    manager: TaskManager,
    jobs: AtomicU64,
    log: Option<Arc<Mutex<std::fs::File>>>,
}

impl Tasks {
    fn note(&self, line: &str) {
        note(self.log.as_ref(), line);
    }
}

fn note(log: Option<&Arc<Mutex<std::fs::File>>>, line: &str) {
    if let Some(Ok(mut file)) = log.map(|f| f.lock()) {
        let _ = writeln!(file, "{line}");
    }
}

fn tool(name: &'static str, description: &'static str, schema: Value) -> Tool {
    let Value::Object(schema) = schema else {
        unreachable!("an object")
    };
    Tool::new(name, description, Arc::new(schema))
}

fn text(text: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn argument(request: &CallToolRequestParams, name: &str) -> Option<Value> {
    request.arguments.as_ref()?.get(name).cloned()
}

async fn build(
    task: TaskContext,
    target: String,
    seconds: u64,
    job: u64,
    log: Option<Arc<Mutex<std::fs::File>>>,
) -> Result<CallToolResult, TaskExit> {
    for second in 1..=seconds {
        task.set_status_message(format!("building {target}: second {second} of {seconds}"));
        tokio::select! {
            () = task.cancelled() => return Err(TaskExit::Cancelled),
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    note(log.as_ref(), "finished build");
    if target == "broken" {
        return Err(
            ErrorData::internal_error(format!("the build of {target} failed"), None).into(),
        );
    }
    Ok(text(format!("built {target} (job {job})")))
}

async fn deploy(
    task: TaskContext,
    target: String,
    job: u64,
    log: Option<Arc<Mutex<std::fs::File>>>,
) -> Result<CallToolResult, TaskExit> {
    let question: InputRequest = serde_json::from_value(json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": format!("Deploy {target} to which environment?"),
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "environment": { "type": "string", "enum": ["staging", "production"],
                                     "default": "staging" }
                },
                "required": ["environment"]
            }
        }
    }))
    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
    let answer = task.request_input("environment", question).await?;
    let environment = answer["content"]["environment"].as_str();
    let text = match (answer["action"].as_str(), environment) {
        (Some("accept"), Some(environment)) => {
            note(log.as_ref(), "finished deploy");
            text(format!("deployed {target} to {environment} (job {job})"))
        }
        (action, _) => text(format!(
            "deploy of {target} not done: {}",
            action.unwrap_or("no answer")
        )),
    };
    Ok(text)
}

impl ServerHandler for Tasks {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("tasks-2026", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            tool(
                "build",
                "Build a target; takes a few seconds.",
                json!({ "type": "object", "properties": {
                    "target": { "type": "string" }, "seconds": { "type": "integer" } },
                    "required": ["target"] }),
            ),
            tool(
                "deploy",
                "Deploy a target; asks where to.",
                json!({ "type": "object", "properties": { "target": { "type": "string" } },
                    "required": ["target"] }),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.note(&format!("call {}", request.name));
        let target = argument(&request, "target")
            .and_then(|t| t.as_str().map(str::to_owned))
            .ok_or_else(|| ErrorData::invalid_params("`target` is required", None))?;
        let job = self.jobs.fetch_add(1, Ordering::SeqCst) + 1;
        let log = self.log.clone();
        let options = TaskOptions::new().with_poll_interval_ms(100);
        let task = match request.name.as_ref() {
            "build" => {
                let seconds = argument(&request, "seconds")
                    .and_then(|s| s.as_u64())
                    .unwrap_or(2);
                self.manager.spawn(options, move |task| {
                    Box::pin(build(task, target, seconds, job, log))
                })
            }
            "deploy" => self.manager.spawn(options, move |task| {
                Box::pin(deploy(task, target, job, log))
            }),
            other => {
                return Err(ErrorData::invalid_params(format!("no tool {other}"), None));
            }
        };
        Ok(CreateTaskResult::new(task).into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.manager
            .get_task(&request.task_id)
            .map(GetTaskResult::new)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.note("update");
        self.manager
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.note("cancel");
        self.manager.cancel_task(&request.task_id)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let log = match std::env::args().nth(1) {
        Some(path) => Some(Arc::new(Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?,
        ))),
        None => None,
    };
    let tasks = Tasks {
        manager: TaskManager::new(),
        jobs: AtomicU64::new(0),
        log,
    };
    let server = tasks.serve(rmcp::transport::stdio()).await?;
    server.waiting().await?;
    Ok(())
}
