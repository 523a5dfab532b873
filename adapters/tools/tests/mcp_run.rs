//! A whole run whose tools are the real filesystem MCP server: the architect of seed 000 lists
//! and reads the project, writes a todo, claims it is done too early (refused with a nudge),
//! writes `plan.md` through the server and closes the todo; the file is checked on disk, and a
//! read outside the allowed directory reaches the model as a tool error.

mod common;

use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex, PoisonError};
use terminus_kernel::{CompleteReason, ModelTurn, Outcome, Policy, ToolCall};
use terminus_runtime::{
    Fault, Message, Model, ModelError, ModelRequest, Role, Run, ToolSet, ToolsChanged,
};
use terminus_tools::McpTools;

/// A model that plays back `turns` and keeps the conversations it was sent, and the tools
/// each request offered.
struct Scripted {
    turns: Mutex<Vec<ModelTurn>>,
    seen: Mutex<Vec<Vec<Message>>>,
    offered: Mutex<Vec<Vec<String>>>,
}

#[async_trait]
impl Model for Scripted {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.messages.to_vec());
        self.offered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.tools.iter().map(|t| t.name.clone()).collect());
        let mut turns = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
        if turns.is_empty() {
            return Err(Fault::invalid_input("the script ran out").into());
        }
        Ok(turns.remove(0))
    }
}

fn calls(calls: &[(&str, Value)]) -> ModelTurn {
    ModelTurn {
        tool_calls: calls
            .iter()
            .map(|(name, arguments)| ToolCall {
                id: "".into(),
                name: (*name).into(),
                arguments: arguments.clone().into(),
            })
            .collect(),
        ..ModelTurn::default()
    }
}

fn say(text: &str) -> ModelTurn {
    ModelTurn {
        text: text.into(),
        ..ModelTurn::default()
    }
}

fn todos(status: &str) -> Value {
    json!({ "todos": [{ "content": "write plan.md", "status": status }] })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_architect_writes_plan_md_through_the_filesystem_server() {
    let Some(peers) = common::peers() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = dir.path().canonicalize().expect("a real path");
    std::fs::create_dir(root.join("src")).expect("mkdir");
    std::fs::write(
        root.join("src/lib.rs"),
        "pub fn parse(s: &str) -> u32 { s.len() as u32 }",
    )
    .expect("write");
    let plan = root.join("plan.md");
    let model = Arc::new(Scripted {
        turns: Mutex::new(vec![
            calls(&[("list_directory", json!({ "path": root.join("src") }))]),
            calls(&[
                ("read_text_file", json!({ "path": root.join("src/lib.rs") })),
                ("read_text_file", json!({ "path": "/etc/hostname" })),
            ]),
            calls(&[("write_todos", todos("in_progress"))]),
            say("I will now write the plan."),
            calls(&[(
                "write_file",
                json!({ "path": plan, "content": "# Plan\n1. Test `parse` on empty input.\n" }),
            )]),
            calls(&[("write_todos", todos("completed"))]),
            say("Plan written to plan.md."),
        ]),
        seen: Mutex::new(Vec::new()),
        offered: Mutex::new(Vec::new()),
    });
    let mcp = McpTools::connect(&[common::filesystem(&peers, &root)])
        .await
        .expect("the server starts");
    let mut tools = ToolSet::new();
    mcp.add_to(&mut tools);
    let policy = Policy {
        verify_completion: true,
        completion_requires: vec!["write_file".into()],
        max_nudges: 2,
        ..Policy::default()
    };
    let report = Run::new(
        "Write an implementation plan to plan.md",
        policy,
        model.clone(),
    )
    .tools(tools)
    .execute()
    .await
    .expect("a stop");
    mcp.shutdown().await;
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Verified));
    assert_eq!((report.nudges, report.model_calls), (1, 7));
    assert_eq!(
        std::fs::read_to_string(&plan).expect("plan.md on disk"),
        "# Plan\n1. Test `parse` on empty input.\n"
    );
    let seen = model.seen.lock().unwrap_or_else(PoisonError::into_inner);
    // The third request holds both results of the second turn: the file, and the refusal of
    // the path outside the allowed directory, as a tool error.
    let results: Vec<&Message> = seen[2].iter().filter(|m| m.role == Role::Tool).collect();
    assert!(results.iter().any(|m| m.content.contains("pub fn parse")));
    assert!(
        results
            .iter()
            .any(|m| m.content.starts_with("error (invalid_arguments):")
                && m.content.contains("Access denied")),
        "{results:?}"
    );
    // The listing reached the model too.
    assert!(seen[1].iter().any(|m| m.content.contains("lib.rs")));
}

/// A server changes its tool list during a run (`notifications/tools/list_changed`): the next
/// model request offers the new list, a tool that appeared runs, a call of the tool that is gone
/// is answered `not_found`, and the report says what changed before which model call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_appears_during_a_run_is_offered_and_runs() {
    let Some(peers) = common::peers() else { return };
    let model = Arc::new(Scripted {
        turns: Mutex::new(vec![
            calls(&[("swap", json!({}))]),
            calls(&[("greet", json!({})), ("echo", json!({}))]),
            say("Greeted."),
        ]),
        seen: Mutex::new(Vec::new()),
        offered: Mutex::new(Vec::new()),
    });
    let mcp = McpTools::connect(&[common::list_changed(&peers)])
        .await
        .expect("the server starts");
    let mut tools = ToolSet::new();
    mcp.add_to(&mut tools);
    let report = Run::new("Greet.", Policy::default(), model.clone())
        .tools(tools)
        .execute()
        .await
        .expect("a stop");
    mcp.shutdown().await;
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.model_calls, 3);
    let offered = model
        .offered
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(offered[0], ["echo", "swap", "write_todos"]);
    assert_eq!(offered[1], ["greet", "swap", "write_todos"]);
    assert_eq!(offered[2], offered[1]);
    assert_eq!(
        report.tools_changed,
        [ToolsChanged {
            model_call: 2,
            added: vec!["greet".into()],
            removed: vec!["echo".into()],
            changed: Vec::new(),
        }]
    );
    let seen = model.seen.lock().unwrap_or_else(PoisonError::into_inner);
    let results: Vec<&str> = seen[2]
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(results[1], "hello from greet", "{results:?}");
    assert!(results[2].starts_with("error (not_found):"), "{results:?}");
}
