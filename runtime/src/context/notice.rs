//! The state notice a pruned view carries: where the run is, from the kernel's counters, tool
//! ledger and todos (rule 8: what has run comes from the ledger, never from the conversation).

use super::prune::NOTICE_HEADER;
use std::fmt::Write as _;
use terminus_kernel::{Machine, TodoStatus};

/// The notice for the machine's current state: the model call and step, the budgets spent,
/// every tool already run with its counts, the excluded tools and the open todos.
pub fn state_notice(machine: &Machine) -> String {
    let s = machine.stats();
    let p = machine.policy();
    let mut out = String::with_capacity(512);
    out.push_str(NOTICE_HEADER);
    out.push_str(
        " Earlier messages are not shown, to fit the context window; the run's journal keeps \
         them all. Where the run is:",
    );
    let _ = write!(
        out,
        "\n- model call {} of {}, step {} of {}",
        s.model_calls, p.max_model_calls, s.steps, p.max_steps
    );
    match p.token_budget {
        Some(budget) => {
            let _ = write!(out, ", tokens {} of {budget}", s.tokens());
        }
        None => {
            let _ = write!(out, ", tokens {}", s.tokens());
        }
    }
    let mut tools = machine
        .ledger()
        .iter()
        .filter(|(_, r)| r.calls > 0)
        .peekable();
    if tools.peek().is_some() {
        out.push_str("\n- tools already run:");
        for (name, r) in tools {
            let _ = write!(
                out,
                " {name} {} time{} ({} ok, {} failed);",
                r.calls,
                if r.calls == 1 { "" } else { "s" },
                r.successes,
                r.failures
            );
        }
        out.pop();
    } else {
        out.push_str("\n- no tool has run yet");
    }
    let mut excluded = machine.ledger().excluded().peekable();
    if excluded.peek().is_some() {
        out.push_str("\n- excluded tools (calls are refused):");
        for (name, why) in excluded {
            let _ = write!(out, " {name} ({why});");
        }
        out.pop();
    }
    let open: Vec<_> = machine
        .todos()
        .iter()
        .filter(|t| matches!(t.status, TodoStatus::Pending | TodoStatus::InProgress))
        .collect();
    if open.is_empty() {
        out.push_str("\n- no open todos");
    } else {
        out.push_str("\n- open todos:");
        for t in open {
            let status = match t.status {
                TodoStatus::InProgress => "in progress",
                _ => "pending",
            };
            let _ = write!(out, "\n  - [{status}] {}", t.content);
        }
    }
    out.push_str(
        "\nThe latest result of every tool is still shown. Do not call a tool again only to see \
         a result that is no longer shown unless you need its content.",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use terminus_kernel::{
        Event, ModelTurn, Policy, ToolCall, ToolErrorKind, ToolOutcome, ToolResult, Usage,
    };

    fn call(id: &str, name: &str, arguments: serde_json::Value) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    fn result(id: &str, name: &str, outcome: ToolOutcome) -> ToolResult {
        ToolResult {
            call_id: id.into(),
            name: name.into(),
            outcome,
        }
    }

    #[test]
    fn the_notice_says_where_the_run_is_from_the_ledger_and_todos() {
        let policy = Policy {
            max_model_calls: 12,
            max_steps: 30,
            token_budget: Some(50_000),
            ..Policy::default()
        };
        let mut m = Machine::new(policy).expect("a valid policy");
        while m.poll_command().is_some() {}
        let todos = json!({ "todos": [
            { "content": "read the code", "status": "completed" },
            { "content": "fix the bug", "status": "in_progress" },
            { "content": "run the tests", "status": "pending" },
        ] });
        m.handle(Event::ModelTurn(ModelTurn {
            tool_calls: vec![
                call("t", "write_todos", todos),
                call("a", "read_file", json!({ "path": "a.rs" })),
                call("b", "read_file", json!({ "path": "b.rs" })),
                call("d", "delete_file", json!({ "path": "c.rs" })),
            ],
            usage: Some(Usage {
                input_tokens: 1_200,
                output_tokens: 30,
            }),
            ..Default::default()
        }));
        while m.poll_command().is_some() {}
        m.handle(Event::ToolResults(vec![
            result("t", "write_todos", ToolOutcome::ok(json!("ok"))),
            result("a", "read_file", ToolOutcome::ok(json!("fn a() {}"))),
            result(
                "b",
                "read_file",
                ToolOutcome::Error {
                    kind: ToolErrorKind::Failed,
                    message: "io error".into(),
                },
            ),
            result(
                "d",
                "delete_file",
                ToolOutcome::Error {
                    kind: ToolErrorKind::PermissionDenied,
                    message: "read-only".into(),
                },
            ),
        ]));

        let notice = state_notice(&m);
        assert!(notice.starts_with(NOTICE_HEADER), "{notice}");
        // The notice is written for the request about to be sent: the machine has issued its
        // second model call.
        for line in [
            "- model call 2 of 12, step 2 of 30, tokens 1230 of 50000",
            "- tools already run: delete_file 1 time (0 ok, 1 failed); read_file 2 times (1 ok, \
             1 failed); write_todos 1 time (1 ok, 0 failed)\n",
            "- excluded tools (calls are refused): delete_file (it failed with permission_denied \
             (not recoverable by retrying))\n",
            "- open todos:\n  - [in progress] fix the bug\n  - [pending] run the tests\n",
        ] {
            assert!(notice.contains(line), "missing {line:?} in:\n{notice}");
        }
        // A closed todo is not open work.
        assert!(!notice.contains("read the code"), "{notice}");
    }

    #[test]
    fn a_fresh_run_has_no_tools_and_no_todos() {
        let m = Machine::new(Policy::default()).expect("a valid policy");
        let notice = state_notice(&m);
        assert!(notice.contains("\n- no tool has run yet"), "{notice}");
        assert!(notice.contains("\n- no open todos"), "{notice}");
        assert!(!notice.contains("excluded"), "{notice}");
        // Without a token budget only the tokens spent are given.
        assert!(notice.contains(", tokens 0\n"), "{notice}");
    }
}
