//! Runs through the library: stop reasons, the conversation the model sees, tool ids, unknown
//! tools, refusals, budget warnings, progress records and adapter faults.

mod common;

use common::{Answer, Echo, Script, calls, done, text};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use terminus_kernel::{CompleteReason, Outcome, Policy, Rule, ToolBudget};
use terminus_runtime::{Author, FaultKind, Role, Run, RunError, ToolSet, Transition};

#[tokio::test]
async fn a_plain_answer_completes_as_answered() {
    let model = Script::new([text("Paris.")]);
    let report = Run::new("Capital of France?", Policy::default(), model.clone())
        .execution("plain")
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Answered));
    assert_eq!(report.rule, Rule::ClaimAnswered);
    assert_eq!(report.execution, "plain");
    assert_eq!(report.result.as_deref(), Some("Paris."));
    assert_eq!(
        (report.steps, report.model_calls, report.tool_calls),
        (1, 1, 0)
    );
    // The task, the model turn, its transition, the stop record.
    assert_eq!(report.entries, 4);
    assert_eq!(report.exit_code(), 0);
    let seen = model.last_messages();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].role, Role::User);
    assert_eq!(seen[0].content, "Capital of France?");
}

#[tokio::test]
async fn tool_results_go_back_to_the_model_with_generated_ids() {
    let model = Script::new([calls(&[("echo", json!({ "say": "hi" }))]), done("Echoed.")]);
    let tools = ToolSet::new().with("echo", Echo::new(Default::default()));
    let report = Run::new("Echo hi", Policy::default(), model.clone())
        .tools(tools)
        .system_prompt_for_test("You are terse.")
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Explicit));
    assert_eq!(report.tool_calls, 1);
    let seen = model.last_messages();
    let roles: Vec<Role> = seen.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::System, Role::User, Role::Assistant, Role::Tool]
    );
    assert_eq!(seen[2].tool_calls[0].id, "call-1-0");
    assert_eq!(seen[3].tool_call_id.as_deref(), Some("call-1-0"));
    assert_eq!(seen[3].content, r#"{"say":"hi"}"#);
}

/// Sets the system prompt through the config (a helper so the test reads as a sentence).
trait SystemPrompt {
    fn system_prompt_for_test(self, prompt: &str) -> Self;
}

impl SystemPrompt for Run {
    fn system_prompt_for_test(self, prompt: &str) -> Run {
        self.config(terminus_runtime::RuntimeConfig {
            system_prompt: Some(prompt.into()),
            ..Default::default()
        })
    }
}

#[tokio::test]
async fn an_unknown_tool_answers_not_found_and_the_model_is_told_it_is_excluded() {
    let model = Script::new([calls(&[("nope", json!({}))]), done("Gave up on nope.")]);
    let report = Run::new("Use nope", Policy::default(), model.clone())
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Explicit));
    assert_eq!(report.excluded_tools, ["nope"]);
    assert_eq!(report.stats.tool_failures, 1);
    let seen = model.last_messages();
    let result = seen
        .iter()
        .find(|m| m.role == Role::Tool)
        .expect("a tool result");
    assert!(
        result.content.starts_with("error (not_found)"),
        "{}",
        result.content
    );
    // The notice rides on the result it is about (as the host core puts it): past the
    // evidence, so the verifier never reads it as the tool's words.
    assert_eq!(seen.last().map(|m| m.role), Some(Role::Tool), "{seen:?}");
    assert!(
        result.content.ends_with(
            "\n\nThe tool `nope` is now excluded because it failed with not_found (not \
             recoverable by retrying); do not call it again."
        ),
        "{}",
        result.content
    );
    assert!(
        !result.evidence().contains("excluded"),
        "{}",
        result.evidence()
    );
}

#[tokio::test]
async fn budget_warnings_reach_the_model_and_refusals_answer_every_call() {
    let policy = Policy {
        tool_budgets: BTreeMap::from([(
            "echo".to_owned(),
            ToolBudget {
                warn_at: Some(1),
                block_at: Some(2),
                ..ToolBudget::default()
            },
        )]),
        ..Policy::default()
    };
    let model = Script::new([
        calls(&[("echo", json!({ "n": 1 })), ("echo", json!({ "n": 2 }))]),
        done("Done."),
    ]);
    let echo = Echo::new(Default::default());
    let report = Run::new("Echo twice", policy, model.clone())
        .tools(ToolSet::new().with("echo", echo.clone()))
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Explicit));
    assert_eq!(echo.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!((report.tool_calls, report.stats.refused_calls), (1, 1));
    let seen = model.last_messages();
    let results: Vec<_> = seen.iter().filter(|m| m.role == Role::Tool).collect();
    assert_eq!(results.len(), 2, "one answer per call of the turn");
    assert_eq!(results[0].author, Author::Tool);
    assert!(results[0].content.starts_with(r#"{"n":1}"#));
    assert!(
        results[0].content.contains("[budget]"),
        "{}",
        results[0].content
    );
    assert_eq!(
        results[0].evidence(),
        r#"{"n":1}"#,
        "the warning is not evidence"
    );
    assert_eq!(results[1].author, Author::Kernel);
    assert_eq!(
        results[1].content,
        "Not run: the budget of `echo` is spent: 1 call since its last reset, and calls from \
         the 2nd on are refused (`tool_budgets.echo.block_at`). Nothing in this run lifts it: go \
         on without `echo`."
    );
    assert_eq!(results[1].tool_call_id.as_deref(), Some("call-1-1"));
}

#[tokio::test]
async fn the_observer_gets_one_record_per_transition() {
    let model = Script::new([
        calls(&[("echo", json!({ "v": "a" }))]),
        Answer::Turn(terminus_kernel::ModelTurn {
            text: "still working".into(),
            needs_more_work: Some(true),
            ..Default::default()
        }),
        done("Finished."),
    ]);
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&lines);
    let report = Run::new("Work", Policy::default(), model)
        .tools(ToolSet::new().with("echo", Echo::new(Default::default())))
        .observer(move |t: &Transition<'_>| {
            if let Ok(mut l) = sink.lock() {
                l.push((t.record.step, t.record.rule, t.to_string()));
            }
        })
        .execute()
        .await
        .expect("the run reaches a stop");
    let lines = lines.lock().expect("not poisoned").clone();
    assert_eq!(lines.len(), report.steps as usize);
    let steps: Vec<u32> = lines.iter().map(|l| l.0).collect();
    assert_eq!(steps, (1..=report.steps).collect::<Vec<_>>());
    let rules: Vec<Rule> = lines.iter().map(|l| l.1).collect();
    assert_eq!(
        rules,
        [
            Rule::ToolTurn,
            Rule::ToolResultsBack,
            Rule::NoOpContinue,
            Rule::ClaimExplicit
        ]
    );
    assert!(lines[0].2.contains("calls echo"), "{}", lines[0].2);
    assert_eq!(report.trace.len(), lines.len());
}

/// `Observer::on_event`: each live step's event, as its journal entry, and the machine after
/// the step, just before that step's `on_transition`.
#[tokio::test]
async fn the_observer_sees_each_steps_event_and_the_machine_after_it() {
    use terminus_kernel::{Entry, Machine};
    use terminus_runtime::Observer;

    #[derive(Default)]
    struct Seen {
        /// Per callback: the step it saw, and what.
        log: Vec<(u32, String)>,
    }
    struct Watch(Arc<Mutex<Seen>>);
    impl Observer for Watch {
        fn on_transition(&mut self, t: &Transition<'_>) {
            if let Ok(mut seen) = self.0.lock() {
                seen.log.push((
                    t.record.step,
                    format!("transition {}", t.record.rule.name()),
                ));
            }
        }
        fn on_event(&mut self, event: &Entry, machine: &Machine) {
            let what = match event {
                Entry::Assistant(turn) => format!(
                    "turn {:?} calls {:?}",
                    turn.text,
                    turn.tool_calls
                        .iter()
                        .map(|c| c.id.to_string())
                        .collect::<Vec<_>>()
                ),
                Entry::ToolResults { results } => format!(
                    "results {:?} todos {}",
                    results
                        .iter()
                        .map(|r| r.call_id.to_string())
                        .collect::<Vec<_>>(),
                    machine.todos().len()
                ),
                other => other.kind().to_owned(),
            };
            if let Ok(mut seen) = self.0.lock() {
                seen.log.push((machine.stats().steps, what));
            }
        }
    }

    let model = Script::new([
        calls(&[(
            "write_todos",
            json!({ "todos": [{ "content": "say hi", "status": "completed" }] }),
        )]),
        done("Hi."),
    ]);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let report = Run::new("Say hi", Policy::default(), model)
        .observer(Watch(Arc::clone(&seen)))
        .execute()
        .await
        .expect("the run reaches a stop");
    let log = seen.lock().expect("not poisoned").log.clone();
    let expected: Vec<(u32, String)> = vec![
        (1, r#"turn "" calls ["call-1-0"]"#.to_owned()),
        (1, "transition tool_turn".to_owned()),
        (2, r#"results ["call-1-0"] todos 1"#.to_owned()),
        (2, "transition tool_results_back".to_owned()),
        (3, r#"turn "Hi." calls []"#.to_owned()),
        (3, format!("transition {}", report.rule.name())),
    ];
    assert_eq!(log, expected);
}

#[tokio::test]
async fn an_exhausted_adapter_is_a_fault_not_a_stop_reason() {
    let model = Script::new([calls(&[("echo", json!({}))])]);
    let err = Run::new("Work", Policy::default(), model)
        .tools(ToolSet::new().with("echo", Echo::new(Default::default())))
        .execute()
        .await
        .expect_err("the model runs out");
    let RunError::Fault(fault) = &err else {
        panic!("expected a fault, got {err:?}");
    };
    assert_eq!(fault.kind, FaultKind::InvalidInput);
    assert_eq!(err.exit_code(), 2);
}

#[tokio::test]
async fn an_invalid_policy_runs_nothing() {
    let model = Script::new([text("never")]);
    let err = Run::new(
        "t",
        Policy {
            max_steps: 0,
            ..Policy::default()
        },
        model.clone(),
    )
    .execute()
    .await
    .expect_err("max_steps 0 is invalid");
    assert!(matches!(err, RunError::Policy(_)));
    assert_eq!(err.exit_code(), 2);
    assert_eq!(model.requests(), 0);
}

#[test]
fn run_errors_map_to_the_design_exit_codes() {
    use terminus_runtime::{Fault, StoreError};
    let cases = [
        (RunError::Fault(Fault::invalid_input("script ran out")), 2),
        (RunError::ExecutionExists("x".into()), 2),
        (RunError::Fault(Fault::internal("verifier down")), 3),
        (
            RunError::Store(StoreError::Backend {
                journal: "j.db".into(),
                action: "append".into(),
                source: terminus_runtime::Cause::new(std::io::Error::other("disk full")),
            }),
            3,
        ),
        (
            RunError::Store(StoreError::Corrupt {
                journal: "j.db".into(),
                what: "bad row".into(),
            }),
            3,
        ),
        (RunError::Diverged(terminus_kernel::Key::event(3)), 3),
        (RunError::Internal("bug".into()), 3),
        (
            RunError::Store(StoreError::Claimed {
                execution: "x".into(),
                worker: "w".into(),
            }),
            4,
        ),
        (
            RunError::Store(StoreError::LeaseLost {
                execution: "x".into(),
            }),
            4,
        ),
    ];
    for (error, code) in cases {
        assert_eq!(error.exit_code(), code, "{error}");
    }
}

#[tokio::test]
async fn arguments_that_are_not_an_object_are_answered_invalid_arguments_without_a_call() {
    // A model that sent broken JSON: the adapter keeps the text as a JSON string.
    let model = Script::new([
        calls(&[("echo", json!(r#"{"say": "hi"#))]),
        calls(&[("echo", json!({ "say": "hi" }))]),
        done("Echoed."),
    ]);
    let echo = Echo::new(Default::default());
    let tools = ToolSet::new().with("echo", echo.clone());
    let report = Run::new("Echo hi", Policy::default(), model.clone())
        .tools(tools)
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Explicit));
    assert_eq!(
        echo.calls.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "only the well-formed call ran"
    );
    let seen = model.last_messages();
    let first_result = seen
        .iter()
        .find(|m| m.role == Role::Tool)
        .expect("a tool result");
    assert!(
        first_result
            .content
            .starts_with("error (invalid_arguments): the arguments must be a JSON object"),
        "{}",
        first_result.content
    );
    assert!(first_result.content.contains(r#"{"say": "hi"#));
}

/// A run created with `scale` keeps the scaled policy, with its units, in the execution's spec
/// (what a resume reads); a scale the policy refuses is `RunError::Policy`, nothing created.
#[tokio::test]
async fn a_scaled_run_stores_the_scaled_policy_with_its_units() {
    use terminus_runtime::{Journal, MemoryStore};
    let policy: Policy = serde_json::from_value(json!({
        "max_steps": 10,
        "budget_scale": { "per_unit": { "max_steps": 5 }, "max": { "max_steps": 30 } }
    }))
    .expect("a policy");
    let store = Arc::new(MemoryStore::new());
    let report = Run::new("t", policy.clone(), Script::new([text("done")]))
        .scale(3)
        .store(store.clone())
        .execution("scaled")
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.steps, 1);
    let spec = store.spec("scaled").await.expect("read").expect("stored");
    assert_eq!(spec.policy.max_steps, 25);
    assert_eq!(spec.policy.budget_scale.and_then(|s| s.units), Some(3));

    let scaled = policy.scaled(2).expect("scales");
    let refused = Run::new("t", scaled, Script::new([text("done")]))
        .scale(3)
        .store(store.clone())
        .execution("rescaled")
        .execute()
        .await
        .expect_err("scaled for 2 units already");
    assert!(matches!(refused, RunError::Policy(_)), "{refused:?}");
    assert_eq!(store.spec("rescaled").await.expect("read"), None);
}
