//! The kernel driven by hand: a host loop feeds events and carries out commands. The scripted
//! "model" writes a todo, then claims to be done before it wrote the file the policy requires:
//! the kernel refuses that stop with a nudge, the model goes on, and the run completes.
//!
//! `cargo run -p terminus-examples --example kernel_by_hand`

use serde_json::json;
use terminus_kernel::{
    Command, CompleteReason, Event, Machine, ModelTurn, Outcome, Policy, ToolCall, ToolOutcome,
    ToolResult,
};

fn turn(text: &str) -> ModelTurn {
    ModelTurn {
        text: text.into(),
        ..ModelTurn::default()
    }
}

fn call(id: &str, name: &str, arguments: serde_json::Value) -> ModelTurn {
    ModelTurn {
        tool_calls: vec![ToolCall::new(id, name, arguments)],
        ..ModelTurn::default()
    }
}

fn main() {
    let policy = Policy {
        completion_requires: vec!["write_file".into()],
        max_nudges: 2,
        ..Policy::default()
    };
    let mut machine = Machine::new(policy).expect("a valid policy");
    let todo =
        |status: &str| json!({ "todos": [{ "content": "write plan.md", "status": status }] });
    // What the model answers, call after call.
    let mut script = vec![
        call("c1", "write_todos", todo("in_progress")),
        turn("I will write the plan now."), // a premature stop: refused
        call(
            "c2",
            "write_file",
            json!({ "path": "plan.md", "content": "# Plan" }),
        ),
        call("c3", "write_todos", todo("completed")),
        ModelTurn {
            needs_more_work: Some(false),
            ..turn("plan.md is written.")
        },
    ]
    .into_iter();
    let mut nudges = Vec::new();
    let stop = loop {
        let Some(command) = machine.poll_command() else {
            unreachable!("a machine that has not stopped always has a command")
        };
        match command {
            Command::CallModel(_) => {
                let turn = script.next().expect("the script covers the run");
                match turn.tool_calls.first() {
                    Some(call) => println!("model  -> calls {}", call.name),
                    None => println!("model  -> {:?}", turn.text),
                }
                machine.handle(Event::ModelTurn(turn));
            }
            Command::RunTools(batch) => {
                let results: Vec<ToolResult> = batch
                    .calls
                    .iter()
                    .map(|c| {
                        println!("tool   -> {} {}", c.name, *c.arguments);
                        ToolResult {
                            call_id: c.id.clone(),
                            name: c.name.clone(),
                            outcome: ToolOutcome::ok(json!("done")),
                        }
                    })
                    .collect();
                machine.handle_results(&results);
            }
            // The host adds guidance to the conversation before the next model call.
            Command::Nudge(nudge) => {
                println!("nudge  -> {}", nudge.text);
                nudges.push(nudge.text);
            }
            Command::Stop(stop) => break stop,
            // Notices go into the conversation too; this policy verifies nothing.
            _ => {}
        }
    };
    println!(
        "stopped: {:?} after {} steps, {} model calls, {} nudge(s)",
        stop.outcome, stop.stats.steps, stop.stats.model_calls, stop.stats.nudges
    );
    assert_eq!(stop.outcome, Outcome::Complete(CompleteReason::Explicit));
    assert_eq!(stop.stats.nudges, 1);
    assert_eq!(nudges.len(), 1);
    assert_eq!(stop.result.as_deref(), Some("plan.md is written."));
}
