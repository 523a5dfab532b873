//! Every stop reason of `docs/design.md`, reached by a scripted run, with the counter that names it
//! at exactly its limit. `kernel/tests/spec.rs` checks that each reason has a `reaches_<reason>`
//! test.

mod common;

use common::*;
use serde_json::json;
use terminus_kernel::{
    AbortReason, CompleteReason, Event, Finish, ModelErrorKind, OnUnrecoverable,
    OnVerificationLimit, Outcome, Policy, ToolErrorKind, ToolOutcome,
};

fn aborted(r: AbortReason) -> Outcome {
    Outcome::Aborted(r)
}

/// A tool that answers differently every call, so the repeat detector never fires.
fn counting_tool() -> impl FnMut(&terminus_kernel::ToolCall, u32) -> ToolOutcome {
    |_, n| ToolOutcome::ok(json!({ "call": n }))
}

fn chain() -> Vec<common::Reply> {
    vec![call("read_file", json!({"path": "a"}))]
}

#[test]
fn reaches_verified() {
    let policy = Policy {
        verify_completion: true,
        ..Policy::default()
    };
    let run = drive(
        policy,
        Script::new(vec![call("read_file", json!({})), done("all done")]),
    );
    assert_eq!(
        run.stop.outcome,
        Outcome::Complete(CompleteReason::Verified)
    );
    assert_eq!(run.stop.stats.verifications, 1);
    assert_eq!(run.stop.stats.verification_failures, 0);
    assert_eq!(
        run.rules(),
        [
            "tool_turn",
            "tool_results_back",
            "claim_verify",
            "verdict_accepted"
        ]
    );
}

#[test]
fn reaches_explicit() {
    let run = drive(Policy::default(), Script::new(vec![done("finished")]));
    assert_eq!(
        run.stop.outcome,
        Outcome::Complete(CompleteReason::Explicit)
    );
    assert_eq!(run.stop.result.as_deref(), Some("finished"));
    assert_eq!(run.stop.stats.steps, 1);
}

#[test]
fn reaches_answered() {
    let run = drive(
        Policy::default(),
        Script::new(vec![text("The answer is 42.")]),
    );
    assert_eq!(
        run.stop.outcome,
        Outcome::Complete(CompleteReason::Answered)
    );
    assert_eq!(run.stop.stats.model_calls, 1);
}

#[test]
fn reaches_forced() {
    let policy = Policy {
        verify_completion: true,
        max_verification_failures: 3,
        on_verification_limit: OnVerificationLimit::Complete,
        ..Policy::default()
    };
    let run = drive(
        policy,
        Script::new(vec![done("done")]).verdicts(vec![
            reject("tests"),
            reject("docs"),
            reject("lint"),
        ]),
    );
    assert_eq!(run.stop.outcome, Outcome::Complete(CompleteReason::Forced));
    assert_eq!(run.stop.stats.verification_failures, 3);
    assert_eq!(run.stop.stats.verifications, 3);
}

#[test]
fn reaches_max_steps() {
    let policy = Policy {
        max_steps: 7,
        max_model_calls: 100,
        ..Policy::default()
    };
    let run = drive(policy, Script::new(chain()).tool(counting_tool()));
    assert_eq!(run.stop.outcome, aborted(AbortReason::MaxSteps));
    assert_eq!(run.stop.stats.steps, 7);
    assert_eq!(run.rules().last(), Some(&"step_budget"));
}

#[test]
fn reaches_tool_call_budget() {
    let policy = Policy {
        max_tool_calls: Some(3),
        ..Policy::default()
    };
    let run = drive(policy.clone(), Script::new(chain()).tool(counting_tool()));
    assert_eq!(run.stop.outcome, aborted(AbortReason::ToolCallBudget));
    // Three calls are spent in full; the fourth turn is refused before it runs.
    assert_eq!(run.stop.stats.tool_calls, 3);
    assert_eq!(run.stop.stats.model_calls, 4);
    assert_eq!(run.rules().last(), Some(&"tool_call_budget"));
    // With final_answer_on_budget, one tool-less call for a final answer first.
    let run = drive(
        Policy {
            final_answer_on_budget: true,
            ..policy
        },
        Script::new(chain()).tool(counting_tool()),
    );
    assert_eq!(run.stop.outcome, aborted(AbortReason::ToolCallBudget));
    assert_eq!(run.stop.stats.tool_calls, 3);
    assert_eq!(run.stop.stats.model_calls, 5);
    assert_eq!(run.rules().last(), Some(&"final_answer_done"));
}

#[test]
fn reaches_max_model_calls() {
    let policy = Policy {
        max_steps: 1000,
        max_model_calls: 4,
        ..Policy::default()
    };
    let run = drive(policy.clone(), Script::new(chain()).tool(counting_tool()));
    assert_eq!(run.stop.outcome, aborted(AbortReason::MaxModelCalls));
    assert_eq!(run.stop.stats.model_calls, 4);
    // The "always calls a tool" chain meets the step bound exactly: 2 steps per model call.
    assert_eq!(u64::from(run.stop.stats.steps), policy.step_bound());
}

#[test]
fn reaches_deadline() {
    let policy = Policy {
        deadline_ms: Some(5_000),
        ..Policy::default()
    };
    let script = Script::new(chain())
        .tool(counting_tool())
        .inject(1, Event::Tick { now_ms: 4_999 })
        .inject(3, Event::Tick { now_ms: 5_000 });
    let run = drive(policy, script);
    assert_eq!(run.stop.outcome, aborted(AbortReason::Deadline));
    assert_eq!(run.rules().last(), Some(&"deadline_passed"));
}

#[test]
fn reaches_cancelled() {
    let run = drive(
        Policy::default(),
        Script::new(chain())
            .tool(counting_tool())
            .inject(2, Event::Cancel),
    );
    assert_eq!(run.stop.outcome, aborted(AbortReason::Cancelled));
    // The answer to the command outstanding at the cancel is absorbed, counted, not applied.
    assert_eq!(run.machine.stats().ignored_events, 1);
    assert_eq!(run.rules().last(), Some(&"cancelled"));
}

#[test]
fn reaches_no_progress() {
    let policy = Policy {
        max_no_ops: 4,
        ..Policy::default()
    };
    let run = drive(
        policy,
        Script::new(vec![needs_more("I still need to look at the tests.")]),
    );
    assert_eq!(run.stop.outcome, aborted(AbortReason::NoProgress));
    assert_eq!(run.stop.stats.no_ops, 4);
    assert_eq!(run.stop.stats.model_calls, 4);
    assert_eq!(run.stop.stats.continuations, 3);
    // The partial result is the last substantive content.
    assert_eq!(
        run.stop.result.as_deref(),
        Some("I still need to look at the tests.")
    );
}

#[test]
fn tight_tool_loop_is_no_progress_long_before_max_steps() {
    let policy = Policy {
        max_repeats: 3,
        max_steps: 200,
        ..Policy::default()
    };
    let run = drive(
        policy,
        Script::new(vec![call("search", json!({"q": "same"}))]),
    );
    assert_eq!(run.stop.outcome, aborted(AbortReason::NoProgress));
    assert_eq!(run.machine.streaks().repeats, 3);
    assert_eq!(run.stop.stats.tool_calls, 3);
    assert_eq!(run.rules().last(), Some(&"repeat_limit"));
}

/// A job's status tool: "not ready" until its `ready_at`-th call (never, for 0), then the report.
fn job(ready_at: u32) -> impl FnMut(&terminus_kernel::ToolCall, u32) -> ToolOutcome {
    move |call, n| match call.name.as_str() {
        "job_status" if ready_at == 0 || n < ready_at => {
            ToolOutcome::ok(json!("not ready, try again"))
        }
        "job_status" => ToolOutcome::ok(json!("ready: 4217 units")),
        _ => ToolOutcome::ok(json!("ok")),
    }
}

fn pollers(max_polls: u32) -> Policy {
    Policy {
        pollers: vec!["job_status".to_owned()],
        max_polls,
        ..Policy::default()
    }
}

#[test]
fn reaches_poll_limit() {
    // A job that never becomes ready: its poller gives the same result, which is waiting, not a
    // loop, until `max_polls` polls in a row have got it.
    let poll = call("job_status", json!({"job": "7"}));
    let run = drive(pollers(6), Script::new(vec![poll]).tool(job(0)));
    assert_eq!(run.stop.outcome, aborted(AbortReason::PollLimit));
    assert_eq!(run.machine.streaks().polls, 6);
    assert_eq!(run.stop.stats.polls, 6);
    assert_eq!(run.stop.stats.tool_calls, 6);
    assert_eq!(run.stop.stats.repeats, 0, "a poll is never a repeat");
    assert_eq!(run.rules().last(), Some(&"poll_limit"));
}

#[test]
fn a_declared_poller_waits_past_max_repeats_and_an_undeclared_tool_still_loops() {
    // Ready at the sixth call: five identical "not ready" polls, past `max_repeats` 3.
    let script = || {
        let mut replies = vec![call("job_status", json!({"job": "7"})); 6];
        replies.push(done("4217 units were shipped."));
        Script::new(replies).tool(job(6))
    };
    let run = drive(pollers(10), script());
    assert_eq!(
        run.stop.outcome,
        Outcome::Complete(terminus_kernel::CompleteReason::Explicit)
    );
    assert_eq!((run.stop.stats.polls, run.stop.stats.tool_calls), (6, 6));
    // Not declared: the third identical turn is a loop, exactly as before.
    let run = drive(Policy::default(), script());
    assert_eq!(run.stop.outcome, aborted(AbortReason::NoProgress));
    assert_eq!(run.stop.stats.tool_calls, 3);
    assert_eq!(run.rules().last(), Some(&"repeat_limit"));
    // Declared, but other calls in the same turn: not a poll, the loop rule applies.
    let both = || {
        Script::new(vec![calls(&[
            ("job_status", json!({"job": "7"})),
            ("read_file", json!({"path": "a"})),
        ])])
        .tool(job(0))
    };
    let run = drive(pollers(10), both());
    assert_eq!(run.stop.outcome, aborted(AbortReason::NoProgress));
    assert_eq!(run.stop.stats.polls, 0);
}

#[test]
fn a_model_that_stops_polling_is_told_what_its_poller_said_last() {
    // A small model on the eval's `poll` task polled two or three times, then wrote prose. The
    // nudge quotes the poller's last result and says to call it again; the model does, the job
    // is ready at the fourth call, and an answer quoting the report is an answer.
    let poll = || call("job_status", json!({"job": "7"}));
    let script = || {
        Script::new(vec![
            poll(),
            poll(),
            text("Please provide the specific response from the tools as instructed."),
            poll(),
            poll(),
            done("The report says: ready: 4217 units were shipped."),
        ])
        .tool(job(4))
    };
    // Nobody answers this run (`autonomous`): a reply that hands the task back is no answer.
    let autonomous = |policy: Policy| Policy {
        autonomous: true,
        ..policy
    };
    let run = drive(autonomous(pollers(10)), script());
    assert!(
        matches!(run.stop.outcome, Outcome::Complete(_)),
        "{:?}",
        run.stop.outcome
    );
    assert_eq!(
        (run.stop.stats.polls, run.stop.stats.tool_calls),
        (4, 4),
        "{:?}",
        run.rules()
    );
    assert_eq!(run.nudges.len(), 1);
    // Two polls, the same result: the wait goes on, and the way on is the poller, said last.
    let said = &run.nudges[0].text;
    assert!(
        said.contains(
            "\n`job_status` gave the same result 2 times in a row: \"not ready, try again\". \
             What it waits for is not done yet."
        ),
        "{said}"
    );
    assert!(
        said.ends_with(
            "\nContinue: call `job_status` again now; reply with your final answer only when the \
             task is done."
        ),
        "{said}"
    );
    // One poll: its result is quoted, and what to do if it is not ready.
    let run = drive(
        autonomous(pollers(10)),
        Script::new(vec![
            poll(),
            text("Please provide the specific response from the tools as instructed."),
            poll(),
            done("4217 units were shipped."),
        ])
        .tool(job(2)),
    );
    assert!(matches!(run.stop.outcome, Outcome::Complete(_)));
    let said = &run.nudges[0].text;
    assert!(
        said.contains(
            "\n`job_status` may need several calls before its result is ready; its last result \
             was: \"not ready, try again\". If that says it is not ready yet, call `job_status` \
             again now."
        ),
        "{said}"
    );
    assert!(!said.contains("Continue: call `job_status`"), "{said}");
    // Not declared, the same nudge says nothing of polling (and the third poll is a loop).
    let run = drive(
        autonomous(Policy::default()),
        Script::new(vec![
            poll(),
            text("Please provide the specific response from the tools as instructed."),
            done("4217 units were shipped."),
        ])
        .tool(job(4)),
    );
    assert_eq!(run.nudges.len(), 1);
    assert!(
        !run.nudges[0].text.contains("several calls"),
        "{}",
        run.nudges[0].text
    );
}

#[test]
fn a_tool_result_the_model_wrote_itself_is_never_the_answer() {
    // The eval's `poll` task, kernel trial 1 at a85580f: one poll, then the model wrote the
    // tool's answer itself, and that ended the run `complete`. Not autonomous: no reader takes
    // an imagined result for an answer either.
    let run = drive(
        pollers(10),
        Script::new(vec![
            call("job_status", json!({"job": "7"})),
            text("<tool_response>not ready, try again</tool_response>"),
            call("job_status", json!({"job": "7"})),
            done("4217 units were shipped."),
        ])
        .tool(job(2)),
    );
    assert!(
        matches!(run.stop.outcome, Outcome::Complete(_)),
        "{:?}",
        run.stop.outcome
    );
    assert_eq!(run.stop.result.as_deref(), Some("4217 units were shipped."));
    assert_eq!(run.stop.stats.non_answers, 1);
    assert_eq!(run.nudges.len(), 1);
    assert_eq!(
        run.nudges[0].kind,
        terminus_kernel::NudgeKind::Continue(terminus_kernel::NoOpKind::ImaginedResult)
    );
    assert!(
        run.nudges[0]
            .text
            .starts_with("Your last reply wrote a tool's result itself: no tool ran"),
        "{}",
        run.nudges[0].text
    );
    assert!(run.rules().contains(&"non_answer"), "{:?}", run.rules());
}

#[test]
fn a_loop_between_polls_is_still_a_loop() {
    // Polls are kept out of the repeat detector without breaking its windows: the same read
    // between polls repeats as if the polls were not there.
    let script = Script::new(vec![
        call("read_file", json!({"path": "a"})),
        call("job_status", json!({"job": "7"})),
        call("read_file", json!({"path": "a"})),
        call("job_status", json!({"job": "7"})),
        call("read_file", json!({"path": "a"})),
    ])
    .tool(job(0));
    let run = drive(pollers(10), script);
    assert_eq!(run.stop.outcome, aborted(AbortReason::NoProgress));
    assert_eq!(run.rules().last(), Some(&"repeat_limit"));
    assert_eq!((run.stop.stats.tool_calls, run.stop.stats.polls), (5, 2));
}

#[test]
fn reaches_incomplete() {
    let policy = Policy {
        max_nudges: 2,
        ..Policy::default()
    };
    let run = drive(
        policy,
        Script::new(vec![todos(&[("write tests", "pending")]), done("done")]),
    );
    assert_eq!(run.stop.outcome, aborted(AbortReason::Incomplete));
    assert_eq!(run.stop.stats.nudges, 2);
    assert_eq!(run.nudges.len(), 2);
    assert_eq!(run.nudges[0].open_todos, ["write tests"]);
}

#[test]
fn reaches_verification_loop() {
    let policy = Policy {
        verify_completion: true,
        max_verification_failures: 2,
        ..Policy::default()
    };
    let run = drive(
        policy,
        Script::new(vec![done("done")]).verdicts(vec![reject("no tests")]),
    );
    assert_eq!(run.stop.outcome, aborted(AbortReason::VerificationLoop));
    assert_eq!(run.stop.stats.verification_failures, 2);
}

#[test]
fn reaches_tool_failures() {
    // Different arguments each turn and a different failing tool each turn: neither the repeat
    // detector nor per-tool exclusion fires; the consecutive-failure counter does.
    let policy = Policy {
        max_consecutive_tool_failures: 3,
        max_tool_failures: 5,
        ..Policy::default()
    };
    let replies = vec![
        call("a", json!({"n": 1})),
        call("b", json!({"n": 2})),
        call("c", json!({"n": 3})),
    ];
    let run = drive(
        policy,
        Script::new(replies).tool(|_, _| fail(ToolErrorKind::Failed)),
    );
    assert_eq!(run.stop.outcome, aborted(AbortReason::ToolFailures));
    assert_eq!(run.machine.streaks().failed_tool_turns, 3);
    assert_eq!(run.rules().last(), Some(&"tool_failure_limit"));
}

#[test]
fn every_requested_tool_excluded_is_tool_failures() {
    let policy = Policy {
        max_tool_failures: 2,
        max_consecutive_tool_failures: 10,
        ..Policy::default()
    };
    let run = drive(
        policy,
        Script::new(vec![
            call("flaky", json!({"n": 1})),
            call("flaky", json!({"n": 2})),
            call("flaky", json!({"n": 3})),
        ])
        .tool(|_, _| fail(ToolErrorKind::Timeout)),
    );
    assert_eq!(run.stop.outcome, aborted(AbortReason::ToolFailures));
    assert_eq!(run.rules().last(), Some(&"all_tools_excluded"));
    assert_eq!(
        run.stop.stats.tool_calls, 2,
        "a refused call is not an execution"
    );
    assert_eq!(run.stop.stats.refused_calls, 1);
    assert_eq!(run.stop.excluded_tools, ["flaky"]);
    let notice = run.commands.iter().find_map(|c| match c {
        terminus_kernel::Command::Notice(n) => Some(n.clone()),
        _ => None,
    });
    assert!(
        notice
            .expect("the model is told")
            .text()
            .contains("`flaky` is now excluded because it failed 2 times")
    );
}

#[test]
fn reaches_unrecoverable_tool_error() {
    let policy = Policy {
        on_unrecoverable_tool_error: OnUnrecoverable::Stop,
        ..Policy::default()
    };
    let run = drive(
        policy,
        Script::new(chain()).tool(|_, _| fail(ToolErrorKind::PermissionDenied)),
    );
    assert_eq!(
        run.stop.outcome,
        aborted(AbortReason::UnrecoverableToolError)
    );
    assert_eq!(
        run.stop.stats.tool_calls, 1,
        "an unrecoverable error is not retried"
    );
}

#[test]
fn reaches_empty_responses() {
    // `docs/design.md`, "The policy": `max_empty_responses: 3` and a model that only returns empty
    // replies gives 3 model calls.
    let policy = Policy {
        max_empty_responses: 3,
        ..Policy::default()
    };
    let run = drive(policy, Script::new(vec![empty()]));
    assert_eq!(run.stop.outcome, aborted(AbortReason::EmptyResponses));
    assert_eq!(run.stop.stats.model_calls, 3);
    assert_eq!(run.stop.stats.empty_responses, 3);
    assert_eq!(run.stop.result, None, "an empty reply is never an answer");
}

#[test]
fn reaches_model_error() {
    let policy = Policy {
        max_model_retries: 2,
        ..Policy::default()
    };
    let run = drive(
        policy,
        Script::new(vec![Reply::Error(ModelErrorKind::RateLimited)]),
    );
    assert_eq!(run.stop.outcome, aborted(AbortReason::ModelError));
    assert_eq!(
        run.stop.stats.model_calls, 3,
        "two retries, then the third error stops"
    );
    let fatal = drive(
        Policy::default(),
        Script::new(vec![Reply::Error(ModelErrorKind::Auth)]),
    );
    assert_eq!(fatal.stop.outcome, aborted(AbortReason::ModelError));
    assert_eq!(
        fatal.stop.stats.model_calls, 1,
        "a fatal error is not retried"
    );
}

#[test]
fn reaches_context_exhausted() {
    let run = drive(
        Policy::default(),
        Script::new(vec![Reply::Error(ModelErrorKind::ContextOverflow)]),
    );
    assert_eq!(run.stop.outcome, aborted(AbortReason::ContextExhausted));
}

fn turn_with_usage(text: &str, needs_more_work: Option<bool>, tokens: u64) -> Reply {
    Reply::Turn(terminus_kernel::ModelTurn {
        text: text.into(),
        needs_more_work,
        usage: Some(terminus_kernel::Usage {
            input_tokens: tokens,
            output_tokens: 0,
        }),
        ..Default::default()
    })
}

#[test]
fn reaches_token_budget() {
    let policy = Policy {
        token_budget: Some(25),
        ..Policy::default()
    };
    let run = drive(
        policy.clone(),
        Script::new(vec![turn_with_usage("working", Some(true), 30)]),
    );
    assert_eq!(run.stop.outcome, aborted(AbortReason::TokenBudget));
    assert_eq!(run.stop.stats.tokens(), 30);
    assert_eq!(run.stop.stats.model_calls, 1);
    // A terminal target wins over the budget: an answer that crosses it still completes.
    let run = drive(
        policy,
        Script::new(vec![turn_with_usage("the answer", None, 30)]),
    );
    assert_eq!(
        run.stop.outcome,
        Outcome::Complete(CompleteReason::Answered)
    );
}

#[test]
fn reaches_output_token_budget() {
    let policy = Policy {
        max_output_tokens: Some(25),
        ..Policy::default()
    };
    let wrote = |input_tokens, output_tokens| {
        Reply::Turn(terminus_kernel::ModelTurn {
            text: "working".into(),
            needs_more_work: Some(true),
            usage: Some(terminus_kernel::Usage {
                input_tokens,
                output_tokens,
            }),
            ..Default::default()
        })
    };
    // A long prompt is not output: 1,000 tokens read and 15 written leave the budget unspent,
    // 15 more spend it.
    let run = drive(
        policy.clone(),
        Script::new(vec![wrote(1_000, 15), wrote(1_000, 15)]),
    );
    assert_eq!(run.stop.outcome, aborted(AbortReason::OutputTokenBudget));
    assert_eq!(run.rules().last(), Some(&"output_token_budget"));
    assert_eq!(run.stop.stats.output_tokens, 30);
    assert_eq!(run.stop.stats.model_calls, 2);
    // The whole-run token budget is a different row: it is not what stopped this run.
    let run = drive(
        Policy {
            max_output_tokens: Some(25),
            token_budget: Some(1_500),
            ..Policy::default()
        },
        Script::new(vec![wrote(1_000, 10), wrote(1_000, 10)]),
    );
    assert_eq!(run.stop.outcome, aborted(AbortReason::TokenBudget));
}

#[test]
fn truncated_and_filtered_replies_are_never_answers() {
    for f in [Finish::Length, Finish::ContentFilter] {
        let run = drive(
            Policy {
                max_no_ops: 2,
                ..Policy::default()
            },
            Script::new(vec![finish("The answer is", f)]),
        );
        assert_eq!(run.stop.outcome, aborted(AbortReason::NoProgress), "{f:?}");
        let run = drive(
            Policy {
                max_empty_responses: 2,
                ..Policy::default()
            },
            Script::new(vec![finish("", f)]),
        );
        assert_eq!(
            run.stop.outcome,
            aborted(AbortReason::EmptyResponses),
            "{f:?}"
        );
    }
    let reasoning_only = Reply::Turn(terminus_kernel::ModelTurn {
        reasoning: true,
        ..Default::default()
    });
    let run = drive(
        Policy {
            max_empty_responses: 2,
            ..Policy::default()
        },
        Script::new(vec![reasoning_only]),
    );
    assert_eq!(run.stop.outcome, aborted(AbortReason::EmptyResponses));
}
