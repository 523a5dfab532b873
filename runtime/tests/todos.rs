//! The built-in `write_todos` tool: valid arguments update the kernel's todo list (and hold
//! completion back while a todo is open), invalid ones are an `invalid_arguments` error.

mod common;

use common::{Script, calls, done, text, todos};
use serde_json::json;
use terminus_kernel::{
    CompleteReason, Outcome, Policy, Todo, TodoStatus, ToolErrorKind, ToolOutcome, WRITE_TODOS,
};
use terminus_runtime::{Role, Run, Tool, WriteTodos};

#[tokio::test]
async fn write_todos_updates_the_kernels_todos() {
    let model = Script::new([
        calls(&[(WRITE_TODOS, todos(&[("write plan", "in_progress")]))]),
        // Refused: the todo is open.
        text("Plan written."),
        calls(&[(WRITE_TODOS, todos(&[("write plan", "completed")]))]),
        done("Plan written."),
    ]);
    let report = Run::new("Plan", Policy::default(), model.clone())
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Explicit));
    assert_eq!(report.nudges, 1);
    assert_eq!(
        report.todos,
        [Todo {
            content: "write plan".into(),
            status: TodoStatus::Completed
        }]
    );
    let seen = model.last_messages();
    let nudge = seen
        .iter()
        .find(|m| m.content.contains("You tried to finish"))
        .expect("the refused claim was nudged");
    assert!(
        nudge.content.contains("Open todos: write plan."),
        "{}",
        nudge.content
    );
    let result = seen
        .iter()
        .find(|m| m.role == Role::Tool)
        .expect("a result");
    assert_eq!(result.content, "Todo list updated: 1 of 1 open.");
}

#[tokio::test]
async fn invalid_todos_are_an_invalid_arguments_error_and_change_nothing() {
    let model = Script::new([
        calls(&[(WRITE_TODOS, json!({ "todos": "write plan" }))]),
        done("Done."),
    ]);
    let report = Run::new("Plan", Policy::default(), model.clone())
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Explicit));
    assert!(report.todos.is_empty());
    assert_eq!(report.stats.tool_failures, 1);
    let seen = model.last_messages();
    let result = seen
        .iter()
        .find(|m| m.role == Role::Tool)
        .expect("a result");
    assert_eq!(
        result.content,
        "error (invalid_arguments): $.todos: expected an array"
    );
}

#[tokio::test]
async fn the_builtin_validates_every_todo() {
    let ok = WriteTodos
        .call(todos(&[("a", "pending"), ("b", "cancelled")]))
        .await
        .expect("never faults");
    assert_eq!(
        ok,
        ToolOutcome::ok(json!("Todo list updated: 1 of 2 open."))
    );
    let bad = WriteTodos
        .call(json!({ "todos": [ { "content": "a", "status": "later" } ] }))
        .await
        .expect("never faults");
    let ToolOutcome::Error { kind, message } = bad else {
        panic!("expected an error, got {bad:?}");
    };
    assert_eq!(kind, ToolErrorKind::InvalidArguments);
    assert!(
        message.starts_with("$.todos[0]: unknown variant `later`"),
        "{message}"
    );
    let missing = WriteTodos.call(json!({})).await.expect("never faults");
    assert_eq!(
        missing,
        ToolOutcome::Error {
            kind: ToolErrorKind::InvalidArguments,
            message: "$.todos: missing".into()
        }
    );
}
