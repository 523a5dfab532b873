//! Rule 4: the verifier never sees the kernel's nudges. Also the rule verifier, the LLM
//! verifier's prompt and the verdict parser.

mod common;

use common::{Echo, Recorder, Script, calls, done, text};
use serde_json::json;
use std::collections::BTreeMap;
use terminus_kernel::{
    AbortReason, CompleteReason, Ledger, Outcome, Policy, Todo, TodoStatus, ToolBudget, Verdict,
};
use terminus_runtime::{
    Author, LLM_VERIFIER_PROMPT, LlmVerifier, Message, Role, RuleVerifier, Run, ToolSet,
    Transcript, Verification, Verifier, parse_verdict,
};

fn verifying(requires: &[&str]) -> Policy {
    Policy {
        verify_completion: true,
        completion_requires: requires.iter().map(|s| (*s).to_owned()).collect(),
        ..Policy::default()
    }
}

#[tokio::test]
async fn the_verifier_never_sees_nudges_notices_or_warnings() {
    let mut policy = verifying(&["echo"]);
    policy.tool_budgets = BTreeMap::from([(
        "echo".to_owned(),
        ToolBudget {
            warn_at: Some(1),
            block_at: None,
            ..ToolBudget::default()
        },
    )]);
    let model = Script::new([
        // Refused (echo has not run): a nudge.
        text("All done."),
        calls(&[("echo", json!({ "said": "the evidence" }))]),
        // Rejected by the verifier: another kind of nudge, with the missing item.
        done("All done."),
        done("All done, with the summary. Let me know if you need anything else."),
    ]);
    let verifier = Recorder::new([false, true]);
    let report = Run::new("Echo the evidence", policy, model.clone())
        .tools(ToolSet::new().with("echo", Echo::new(Default::default())))
        .verifier(verifier.clone())
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Verified));
    assert_eq!((report.nudges, report.verification_failures), (1, 1));

    // The model did get the kernel's text...
    let seen = model.last_messages();
    let kernel: Vec<&Message> = seen.iter().filter(|m| m.author == Author::Kernel).collect();
    assert_eq!(kernel.len(), 2);
    assert!(kernel[0].content.contains("You tried to finish"));
    assert!(kernel[1].content.contains("A check of your work"));
    assert!(kernel[1].content.contains("Still missing: the summary"));
    assert!(seen.iter().any(|m| m.content.contains("[budget]")));

    // ...the verifier never did.
    let transcripts = verifier.transcripts.lock().expect("not poisoned").clone();
    assert_eq!(transcripts.len(), 2);
    for t in &transcripts {
        for kernel_text in [
            "You tried to finish",
            "A check of your work",
            "Continue:",
            "[budget]",
        ] {
            assert!(
                !t.contains(kernel_text),
                "{kernel_text:?} leaked into:\n{t}"
            );
        }
        assert!(t.contains("Echo the evidence"), "the task is evidence");
        assert!(t.contains("the evidence"), "tool results are evidence");
    }
    assert!(transcripts[1].contains("Let me know if you need anything else"));
    let claims = verifier.claims.lock().expect("not poisoned").clone();
    assert_eq!(
        claims,
        [
            "All done.",
            "All done, with the summary. Let me know if you need anything else."
        ]
    );
}

#[tokio::test]
async fn the_llm_verifier_prompt_has_the_evidence_and_no_nudge() {
    let judge = Script::new([text("```json\n{\"complete\": true}\n```")]);
    let model = Script::new([
        text("Finished."),
        calls(&[("echo", json!({ "said": "report.txt written" }))]),
        done("Finished. Let me know if you need anything else!"),
    ]);
    let report = Run::new("Write report.txt", verifying(&["echo"]), model)
        .tools(ToolSet::new().with("echo", Echo::new(Default::default())))
        .verifier(std::sync::Arc::new(LlmVerifier::new(judge.clone())))
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Verified));
    assert_eq!(report.nudges, 1);
    let prompt = judge.last_messages();
    assert_eq!(prompt.len(), 2);
    assert_eq!(prompt[0].role, Role::System);
    assert_eq!(prompt[0].content, LLM_VERIFIER_PROMPT);
    assert!(
        prompt[0]
            .content
            .contains("Let me know if you need anything else")
    );
    assert!(prompt[0].content.contains("not a sign that work remains"));
    let evidence = &prompt[1].content;
    assert!(evidence.contains("Task:\nWrite report.txt"));
    assert!(evidence.contains("report.txt written"));
    assert!(evidence.ends_with("Finished. Let me know if you need anything else!"));
    assert!(!evidence.contains("You tried to finish"), "{evidence}");
    let tools_enabled = judge.tools_enabled.lock().expect("not poisoned").clone();
    assert_eq!(tools_enabled, [false]);
}

#[tokio::test]
async fn an_llm_verifier_rejection_counts_as_a_verification_failure() {
    let judge = Script::new([text(r#"{"complete": false, "missing": ["tests"]}"#)]);
    let model = Script::new([done("Done.")]);
    let policy = Policy {
        max_verification_failures: 1,
        ..verifying(&[])
    };
    let report = Run::new("t", policy, model)
        .verifier(std::sync::Arc::new(LlmVerifier::new(judge)))
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(
        report.outcome,
        Outcome::Aborted(AbortReason::VerificationLoop)
    );
    assert_eq!(report.verification_failures, 1);
}

#[tokio::test]
async fn without_a_verifier_the_rule_verifier_decides() {
    let model = Script::new([done("Done.")]);
    let report = Run::new("t", verifying(&[]), model)
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Verified));
    assert_eq!(report.stats.verifications, 1);
}

#[tokio::test]
async fn the_rule_verifier_names_open_todos_and_missing_tools() {
    let todos = [
        Todo {
            content: "write tests".into(),
            status: TodoStatus::InProgress,
        },
        Todo {
            content: "read code".into(),
            status: TodoStatus::Completed,
        },
    ];
    let ledger = Ledger::default();
    let requires = ["write_file".to_owned()];
    let messages = [Message::user("t")];
    let v = Verification {
        task: "t",
        claim: "done",
        todos: &todos,
        ledger: &ledger,
        completion_requires: &requires,
        transcript: Transcript::new(&messages),
    };
    assert!(v.gate().open_todos && v.gate().missing_required);
    let verdict = RuleVerifier.verify(v).await.expect("never faults");
    assert_eq!(
        verdict,
        Verdict {
            complete: false,
            missing: vec![
                "todo not done: write tests".into(),
                "required tool not yet run successfully: write_file".into()
            ]
        }
    );
    let v = Verification {
        todos: &todos[1..],
        completion_requires: &[],
        ..v
    };
    assert!(RuleVerifier.verify(v).await.expect("never faults").complete);
}

#[test]
fn verdicts_are_read_from_json_fences_prose_or_a_leading_word() {
    let yes = Verdict {
        complete: true,
        missing: vec![],
    };
    assert_eq!(parse_verdict(r#"{"complete": true}"#), Some(yes.clone()));
    assert_eq!(
        parse_verdict("Sure.\n```json\n{\"complete\": true}\n```\n"),
        Some(yes.clone())
    );
    assert_eq!(
        parse_verdict(r#"{"complete": false, "missing": ["a", "b"]}"#),
        Some(Verdict {
            complete: false,
            missing: vec!["a".into(), "b".into()]
        })
    );
    assert_eq!(parse_verdict("COMPLETE"), Some(yes));
    assert_eq!(
        parse_verdict("**Incomplete**: no tests").map(|v| v.complete),
        Some(false)
    );
    assert_eq!(parse_verdict("I think so?"), None);
    assert_eq!(parse_verdict(r#"{"done": true}"#), None);
}

/// A verifier whose model fails twice the way a provider does under load (a 503, then no answer
/// within the verifier timeout) is asked again with the policy's backoff, like the agent's own
/// model calls; its third answer decides.
#[tokio::test(start_paused = true)]
async fn a_verifier_model_that_fails_transiently_is_retried_with_backoff() {
    use common::Answer;
    use terminus_kernel::ModelErrorKind;
    use terminus_runtime::{ModelFailure, RuntimeConfig};
    let judge = Script::new([
        Answer::Fail(ModelFailure::new(ModelErrorKind::Server, "503 overloaded")),
        Answer::Hang,
        text(r#"{"complete": true}"#),
    ]);
    let model = Script::new([done("Done.")]);
    let policy = Policy {
        retry_base_ms: 1_000,
        retry_max_ms: 8_000,
        ..verifying(&[])
    };
    let started = tokio::time::Instant::now();
    let report = Run::new("t", policy, model)
        .verifier(std::sync::Arc::new(LlmVerifier::new(judge.clone())))
        .config(RuntimeConfig {
            verifier_timeout: Some(std::time::Duration::from_secs(30)),
            ..RuntimeConfig::default()
        })
        .execute()
        .await
        .expect("the verifier answers on its third try");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Verified));
    assert_eq!(judge.requests(), 3);
    // Two backoffs (at least the base delay each, jittered) and one 30 s timeout passed.
    let waited = started.elapsed();
    assert!(
        waited >= std::time::Duration::from_secs(31),
        "waited {waited:?}"
    );
}

/// A verifier model that keeps failing ends the run with an internal fault (exit code 3) after
/// `max_model_retries` retries, not on its first failure and never in a loop.
#[tokio::test(start_paused = true)]
async fn a_verifier_model_that_keeps_failing_ends_the_run_after_the_retries() {
    use common::Answer;
    use terminus_kernel::ModelErrorKind;
    use terminus_runtime::{FaultKind, ModelFailure, RunError};
    let failure = || Answer::Fail(ModelFailure::new(ModelErrorKind::RateLimited, "429"));
    let judge = Script::new((0..10).map(|_| failure()));
    let model = Script::new([done("Done.")]);
    let policy = Policy {
        max_model_retries: 2,
        ..verifying(&[])
    };
    let err = Run::new("t", policy, model)
        .verifier(std::sync::Arc::new(LlmVerifier::new(judge.clone())))
        .execute()
        .await
        .expect_err("the verifier never answers");
    assert_eq!(judge.requests(), 3, "one try and two retries");
    let RunError::Fault(fault) = &err else {
        panic!("not a fault: {err}");
    };
    assert_eq!(fault.kind, FaultKind::Internal);
    assert!(fault.message.contains("after 2 retries"), "{fault}");
    assert_eq!(err.exit_code(), 3);
}

/// A verifier model that answers something that is not a verdict is not asked again: retrying
/// cannot help a reply that was read.
#[tokio::test(start_paused = true)]
async fn a_verifier_reply_without_a_verdict_is_not_retried() {
    let judge = Script::new([text("I think it is fine?"), text(r#"{"complete": true}"#)]);
    let model = Script::new([done("Done.")]);
    let err = Run::new("t", verifying(&[]), model)
        .verifier(std::sync::Arc::new(LlmVerifier::new(judge.clone())))
        .execute()
        .await
        .expect_err("no verdict");
    assert_eq!(judge.requests(), 1);
    assert_eq!(err.exit_code(), 3);
}

/// The LLM verifier's prompt is bounded like the model's view: with a window, the instructions,
/// task, claim and todos always go, and the transcript keeps its newest messages that fit.
#[test]
fn the_llm_verifier_prompt_fits_its_window() {
    use terminus_runtime::{Heuristic, Tokenizer};
    let task = "Summarize the logs.";
    let mut messages = vec![Message::user(task)];
    for i in 0..40 {
        messages.push(Message::assistant(format!("Reading part {i}."), Vec::new()));
        messages.push(Message::tool_result(
            format!("c{i}"),
            "read_log",
            format!("part {i}: {}", "x".repeat(2_000)),
            None,
        ));
    }
    let todos = [Todo {
        content: "summarize".into(),
        status: TodoStatus::Completed,
    }];
    let verification = Verification {
        task,
        claim: "The summary is in summary.md.",
        todos: &todos,
        ledger: &Ledger::default(),
        completion_requires: &[],
        transcript: Transcript::new(&messages),
    };
    let count =
        |prompt: &[Message; 2]| -> u32 { prompt.iter().map(|m| Heuristic.count(&m.content)).sum() };
    let whole = LlmVerifier::prompt(&verification);
    assert!(count(&whole) > 10_000, "{}", count(&whole));
    let bounded = LlmVerifier::prompt_within(&verification, 4_000, &Heuristic);
    assert!(count(&bounded) <= 4_000, "{}", count(&bounded));
    let evidence = &bounded[1].content;
    assert!(evidence.contains(task) && evidence.contains("The summary is in summary.md."));
    assert!(evidence.contains("summarize (completed)"), "{evidence}");
    assert!(evidence.contains("part 39: "), "the newest result is kept");
    assert!(!evidence.contains("part 0: "), "the oldest is left out");
    assert!(
        evidence.contains("earlier messages left out to fit the verifier's context window"),
        "{evidence}"
    );
    // A window the whole transcript fits in changes nothing.
    assert_eq!(
        LlmVerifier::prompt_within(&verification, 1_000_000, &Heuristic)[1].content,
        whole[1].content
    );
}
