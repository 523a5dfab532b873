//! The model is told, once each, when the run's tokens pass 80 % and 90 % of `token_budget`:
//! where a kernel message may go into the conversation (before a model call, so after a tool
//! turn's results, never between the turn and them), never once the budget is spent, and never
//! again after a snapshot round trip.

use serde_json::json;
use terminus_kernel::{
    AbortReason, Command, Event, Machine, ModelTurn, Notice, Outcome, Policy, ToolBatch, ToolCall,
    ToolOutcome, ToolResult, Usage,
};

/// What the host saw, in order: `call`, `tools`, `notice N` (its percent), `stop`.
fn drain(m: &mut Machine, seen: &mut Vec<String>) -> Option<Command> {
    let mut action = None;
    while let Some(command) = m.poll_command() {
        match &command {
            Command::Notice(Notice::TokenBudget { percent, .. }) => {
                seen.push(format!("notice {percent}"));
            }
            Command::Notice(_) | Command::Nudge(_) => {}
            Command::Checkpoint(_) => seen.push("checkpoint".into()),
            Command::CallModel(_) => seen.push("call".into()),
            Command::RunTools(_) => seen.push("tools".into()),
            Command::Stop(_) => seen.push("stop".into()),
            _ => {}
        }
        if !matches!(
            command,
            Command::Notice(_) | Command::Nudge(_) | Command::Checkpoint(_)
        ) {
            action = Some(command);
        }
    }
    action
}

fn used(tokens: u64) -> Option<Usage> {
    Some(Usage {
        input_tokens: tokens,
        output_tokens: 0,
    })
}

fn tool_turn(n: u64, tokens: u64) -> ModelTurn {
    ModelTurn {
        tool_calls: vec![ToolCall::new(
            format!("c{n}"),
            "read",
            json!({ "path": format!("f{n}") }),
        )],
        usage: used(tokens),
        ..ModelTurn::default()
    }
}

/// Every call of `batch` answered ok.
fn ok_results(batch: &ToolBatch) -> Vec<ToolResult> {
    batch
        .calls
        .iter()
        .map(|c| ToolResult {
            call_id: c.id.clone(),
            name: c.name.clone(),
            outcome: ToolOutcome::ok(json!("ok")),
        })
        .collect()
}

/// Drives `turns` (tool turns, each answered ok) and returns what the host saw.
fn run(policy: Policy, turns: &[u64]) -> (Machine, Vec<String>) {
    let mut m = Machine::new(policy).expect("a valid policy");
    let mut seen = Vec::new();
    let mut turns = turns.iter().enumerate();
    loop {
        match drain(&mut m, &mut seen) {
            Some(Command::CallModel(_)) => {
                let Some((n, tokens)) = turns.next() else {
                    return (m, seen);
                };
                m.handle(Event::ModelTurn(tool_turn(n as u64, *tokens)));
            }
            Some(Command::RunTools(batch)) => {
                m.handle_results(&ok_results(&batch));
            }
            _ => return (m, seen),
        }
    }
}

fn budget(tokens: u64) -> Policy {
    Policy {
        token_budget: Some(tokens),
        max_steps: 100,
        max_model_calls: 50,
        ..Policy::default()
    }
}

#[test]
fn each_share_is_told_once_after_the_results_and_before_the_next_call() {
    // 520, 810 (81 %), 880, 910 (91 %), 950 tokens.
    let (_, seen) = run(budget(1000), &[520, 290, 70, 30, 40]);
    assert_eq!(
        seen,
        [
            "call",
            "tools",
            "call",
            "tools",
            "notice 80",
            "call",
            "tools",
            "call",
            "tools",
            "notice 90",
            "call",
            "tools",
            "call"
        ]
    );
}

#[test]
fn a_turn_that_passes_both_shares_tells_both_in_order() {
    let (_, seen) = run(budget(1000), &[100, 850]);
    assert_eq!(
        seen,
        [
            "call",
            "tools",
            "call",
            "tools",
            "notice 80",
            "notice 90",
            "call"
        ]
    );
}

#[test]
fn a_spent_budget_is_not_told_it_stops_the_run() {
    let (m, seen) = run(budget(1000), &[100, 900]);
    assert!(!seen.iter().any(|s| s.starts_with("notice")), "{seen:?}");
    assert_eq!(
        m.outcome(),
        Some(Outcome::Aborted(AbortReason::TokenBudget))
    );
}

#[test]
fn without_a_token_budget_nothing_is_told() {
    let policy = Policy {
        max_steps: 100,
        max_model_calls: 50,
        ..Policy::default()
    };
    let (_, seen) = run(policy, &[1_000_000, 5_000_000]);
    assert!(!seen.iter().any(|s| s.starts_with("notice")), "{seen:?}");
}

#[test]
fn a_restored_machine_does_not_tell_a_share_again() {
    let (m, seen) = run(budget(1000), &[850]);
    assert_eq!(seen.iter().filter(|s| *s == "notice 80").count(), 1);
    let mut restored = Machine::restore(&m.save()).expect("restores");
    let mut again = Vec::new();
    // Another turn below 90 %: nothing new to tell.
    restored.handle(Event::ModelTurn(tool_turn(9, 20)));
    let Some(Command::RunTools(batch)) = drain(&mut restored, &mut again) else {
        panic!("a tool turn runs its tools: {again:?}");
    };
    restored.handle_results(&ok_results(&batch));
    drain(&mut restored, &mut again);
    assert_eq!(again, ["tools", "call"]);
}

#[test]
fn restore_refuses_a_token_warning_the_tokens_do_not_reach() {
    let (m, _) = run(budget(1000), &[850]);
    let text = String::from_utf8(m.save()).expect("JSON");
    // The saved machine says it told 80 %; claim 90 % instead.
    assert!(text.contains("\"told_tokens\":80"), "{text}");
    let forged = text.replace("\"told_tokens\":80", "\"told_tokens\":90");
    assert!(Machine::restore(forged.as_bytes()).is_err());
    let odd = text.replace("\"told_tokens\":80", "\"told_tokens\":50");
    assert!(Machine::restore(odd.as_bytes()).is_err());
}

#[test]
fn at_90_percent_a_checkpoint_is_written_unless_one_came_since_80() {
    let policy = Policy {
        token_budget: Some(1000),
        auto_checkpoints: 2,
        max_repeats: 50,
        ..Policy::default()
    };
    let (m, seen) = run(policy.clone(), &[500, 300, 150]);
    assert_eq!(
        seen,
        [
            "call",
            "tools",
            "call",
            "tools",
            "notice 80",
            "call",
            "tools",
            "notice 90",
            "checkpoint",
            "call"
        ]
    );
    assert_eq!(m.stats().auto_checkpoints, 1);

    // The agent posted one after 80 % (a success of a tool a budget resets on): none is due.
    let mut posted = policy.clone();
    posted.tool_budgets.insert(
        "other".into(),
        terminus_kernel::ToolBudget {
            reset_on: vec!["read".into()],
            ..terminus_kernel::ToolBudget::default()
        },
    );
    let (m, seen) = run(posted, &[500, 300, 150]);
    assert!(!seen.contains(&"checkpoint".to_owned()), "{seen:?}");
    assert_eq!(m.stats().auto_checkpoints, 0);

    // Off by default.
    let off = Policy {
        auto_checkpoints: 0,
        ..policy
    };
    let (m, seen) = run(off, &[500, 300, 150]);
    assert!(!seen.contains(&"checkpoint".to_owned()), "{seen:?}");
    assert_eq!(m.stats().auto_checkpoints, 0);
}

#[test]
fn a_checkpoint_at_90_percent_says_why_and_lifts_nothing_it_need_not() {
    let policy = Policy {
        token_budget: Some(1000),
        auto_checkpoints: 1,
        ..Policy::default()
    };
    let mut m = Machine::new(policy).expect("a valid policy");
    let _ = m.poll_command();
    m.handle(Event::ModelTurn(tool_turn(0, 950)));
    let Some(Command::RunTools(batch)) = m.poll_command() else {
        panic!("a tool batch");
    };
    m.handle_results(&ok_results(&batch));
    let commands: Vec<Command> = std::iter::from_fn(|| m.poll_command()).collect();
    let request = commands
        .iter()
        .find_map(|c| match c {
            Command::Checkpoint(r) => Some(r),
            _ => None,
        })
        .expect("a checkpoint at 90 %");
    assert!(
        request.blocked.is_empty() && request.lifted.is_empty(),
        "{request:?}"
    );
    assert!(
        request
            .note
            .starts_with("A checkpoint was written for you: 90 % of the run's token budget"),
        "{}",
        request.note
    );
}
