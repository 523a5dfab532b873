//! The todo list the kernel tracks (replaced whole by the built-in `write_todos` tool).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The name of the built-in todo tool.
pub const WRITE_TODOS: &str = "write_todos";

/// The status of one todo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on.
    InProgress,
    /// Done.
    Completed,
    /// Dropped on purpose.
    Cancelled,
}

impl TodoStatus {
    /// Whether this todo blocks completion (rule 5).
    pub const fn is_open(self) -> bool {
        matches!(self, TodoStatus::Pending | TodoStatus::InProgress)
    }
}

/// The contents of the todos that block completion (pending or in progress), in order.
pub fn open_todos(todos: &[Todo]) -> Vec<String> {
    todos
        .iter()
        .filter(|t| t.status.is_open())
        .map(|t| t.content.clone())
        .collect()
}

/// One todo.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Todo {
    /// What is to be done.
    pub content: String,
    /// Its status.
    pub status: TodoStatus,
}

/// Reads the `todos` argument of a `write_todos` call. The error names the JSON path at fault.
pub fn parse_todos(arguments: &Value) -> Result<Vec<Todo>, String> {
    let Some(list) = arguments.get("todos") else {
        return Err("$.todos: missing".into());
    };
    let Some(items) = list.as_array() else {
        return Err("$.todos: expected an array".into());
    };
    let mut todos = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let todo: Todo =
            serde_json::from_value(item.clone()).map_err(|e| format!("$.todos[{i}]: {e}"))?;
        todos.push(todo);
    }
    Ok(todos)
}
