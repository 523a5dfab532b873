//! Rules 1-8 of `docs/design.md`, each as an explicit transition a test drives, plus the absorbing
//! terminal states, the partial result, budget warnings and the final-answer option.

mod common;

use common::*;
use serde_json::json;
use terminus_kernel::{
    AbortReason, CHECKPOINT_NOTE_START, CheckpointRequest, Command, CompleteReason, Event,
    Exclusion, Handled, Ignored, Machine, ModelTurn, NudgeKind, Outcome, Phase, Policy, Rule,
    ToolBudget, ToolCall, ToolErrorKind, ToolOutcome, ToolResult, Usage,
};

#[test]
fn rule_1_a_turn_with_tool_calls_never_completes() {
    let mut m = Machine::new(Policy::default()).expect("valid");
    assert!(matches!(m.poll_command(), Some(Command::CallModel(_))));
    let turn = ModelTurn {
        text: "All done!".into(),
        needs_more_work: Some(false),
        tool_calls: vec![ToolCall {
            id: "1".into(),
            name: "write_file".into(),
            arguments: json!({}).into(),
        }],
        ..Default::default()
    };
    let Handled::Step(step) = feed(&mut m, Event::ModelTurn(turn)) else {
        panic!("a step")
    };
    assert_eq!((step.to, step.rule.name()), (Phase::Acting, "tool_turn"));
    assert!(matches!(m.poll_command(), Some(Command::RunTools(_))));
    let results = vec![ToolResult {
        call_id: "1".into(),
        name: "write_file".into(),
        outcome: ToolOutcome::ok(json!("ok")),
    }];
    feed(&mut m, Event::ToolResults(results));
    // The results go back to the model first.
    assert_eq!(m.phase(), Phase::Exploring);
    assert!(matches!(m.poll_command(), Some(Command::CallModel(_))));
}

#[test]
fn rule_2_needs_more_work_is_tri_state() {
    let explicit = drive(Policy::default(), Script::new(vec![done("done")]));
    assert_eq!(
        explicit.stop.outcome,
        Outcome::Complete(CompleteReason::Explicit)
    );
    let answered = drive(Policy::default(), Script::new(vec![text("done")]));
    assert_eq!(
        answered.stop.outcome,
        Outcome::Complete(CompleteReason::Answered)
    );
    // A JSON reply without the field decodes to the same turn as text without it: absent, not false.
    let from_json: ModelTurn = serde_json::from_value(
        json!({"text": "done", "tool_calls": [], "needs_more_work": null,
        "usage": null, "finish": "stop", "reasoning": false}),
    )
    .expect("a turn");
    assert_eq!(from_json.needs_more_work, None);
    let more = drive(
        Policy {
            max_no_ops: 1,
            ..Policy::default()
        },
        Script::new(vec![needs_more("done?")]),
    );
    assert_eq!(more.stop.outcome, Outcome::Aborted(AbortReason::NoProgress));
}

#[test]
fn rule_3_every_verification_failure_counts_on_every_path() {
    // A rejection, then a premature stop (nudge), then another rejection: both rejections count.
    let policy = Policy {
        verify_completion: true,
        max_verification_failures: 2,
        ..Policy::default()
    };
    let replies = vec![
        done("v1"),
        todos(&[("fix", "pending")]),
        done("v2"),
        todos(&[("fix", "completed")]),
        done("v3"),
    ];
    let run = drive(
        policy,
        Script::new(replies).verdicts(vec![reject("a"), reject("b")]),
    );
    assert_eq!(
        run.stop.outcome,
        Outcome::Aborted(AbortReason::VerificationLoop)
    );
    assert_eq!(run.stop.stats.verification_failures, 2);
    assert_eq!(run.stop.stats.nudges, 1);
}

#[test]
fn rule_4_the_verifier_never_sees_nudges() {
    let policy = Policy {
        verify_completion: true,
        completion_requires: vec!["test".into()],
        ..Policy::default()
    };
    let replies = vec![
        done("first claim"),
        call("test", json!({})),
        done("second claim"),
    ];
    let run = drive(policy, Script::new(replies));
    assert_eq!(
        run.stop.outcome,
        Outcome::Complete(CompleteReason::Verified)
    );
    let nudge_texts: Vec<&str> = run.nudges.iter().map(|n| n.text.as_str()).collect();
    assert_eq!(nudge_texts.len(), 1);
    for c in &run.commands {
        if let Command::Verify(v) = c {
            assert_eq!(v.claim, "second claim");
            assert!(nudge_texts.iter().all(|n| !v.claim.contains(n)));
        }
    }
}

#[test]
fn rule_5_design_example_is_nudged_once_then_verified() {
    // The scenario of `docs/design.md`, "Scenario files": the third turn is refused with a nudge (a
    // todo is still open and `write_file` has not run), so `nudges` is 1.
    let policy = Policy {
        max_nudges: 2,
        verify_completion: true,
        completion_requires: vec!["write_file".into()],
        ..Policy::default()
    };
    let replies = vec![
        call("read_file", json!({"path": "src/lib.rs"})),
        todos(&[("write plan", "in_progress")]),
        Reply::Turn(ModelTurn {
            text: "I will now write the plan.".into(),
            usage: Some(Usage {
                input_tokens: 900,
                output_tokens: 9,
            }),
            ..Default::default()
        }),
        call("write_file", json!({"path": "plan.md", "content": "..."})),
        todos(&[("write plan", "completed")]),
        done("Plan written."),
    ];
    let run = drive(policy, Script::new(replies));
    assert_eq!(
        run.stop.outcome,
        Outcome::Complete(CompleteReason::Verified)
    );
    assert_eq!(run.stop.stats.nudges, 1);
    assert_eq!(run.stop.stats.model_calls, 6);
    assert_eq!(run.stop.stats.tool_calls, 4);
    assert_eq!(run.nudges[0].kind, NudgeKind::Incomplete);
    assert_eq!(run.nudges[0].open_todos, ["write plan"]);
    assert_eq!(run.nudges[0].missing_tools, ["write_file"]);
    assert!(run.nudges[0].text.contains("write plan") && run.nudges[0].text.contains("write_file"));
}

#[test]
fn rule_6_empty_replies_are_retried_with_exponential_backoff() {
    let policy = Policy {
        max_empty_responses: 5,
        retry_base_ms: 100,
        retry_max_ms: 100_000,
        ..Policy::default()
    };
    let run = drive(
        policy,
        Script::new(vec![empty(), empty(), empty(), empty(), text("finally")]),
    );
    assert_eq!(
        run.stop.outcome,
        Outcome::Complete(CompleteReason::Answered)
    );
    let delays: Vec<u64> = run
        .commands
        .iter()
        .filter_map(|c| match c {
            Command::CallModel(m) if m.delay_ms > 0 => Some(m.delay_ms),
            _ => None,
        })
        .collect();
    assert_eq!(delays.len(), 4);
    for (i, d) in delays.iter().enumerate() {
        let exp = 100u64 << i;
        assert!(
            (exp / 2..=exp).contains(d),
            "retry {} waited {d} ms, expected [{}, {exp}]",
            i + 1,
            exp / 2
        );
    }
}

#[test]
fn rule_7_unrecoverable_errors_exclude_at_once_and_the_model_is_told() {
    // The third turn asks for the excluded tool and another one: the excluded call is refused
    // (not executed), the other runs. (A turn asking only for excluded tools ends the run with
    // `tool_failures`: see `every_requested_tool_excluded_is_tool_failures`.)
    let replies = vec![
        call("secret", json!({})),
        call("other", json!({})),
        calls(&[
            ("secret", json!({"again": true})),
            ("other", json!({"n": 2})),
        ]),
        text("gave up"),
    ];
    let run = drive(
        Policy::default(),
        Script::new(replies).tool(|c, _| {
            if c.name == "secret" {
                fail(ToolErrorKind::PermissionDenied)
            } else {
                ToolOutcome::ok(json!("fine"))
            }
        }),
    );
    assert_eq!(
        run.stop.outcome,
        Outcome::Complete(CompleteReason::Answered)
    );
    let secret = run.machine.ledger().get("secret").expect("recorded");
    assert_eq!(
        (secret.calls, secret.failures, secret.refused),
        (1, 1, 1),
        "never retried"
    );
    assert_eq!(
        secret.excluded,
        Some(Exclusion::Unrecoverable {
            kind: ToolErrorKind::PermissionDenied
        })
    );
    let refused = run.commands.iter().find_map(|c| match c {
        Command::RunTools(b) if !b.refused.is_empty() => Some(b.refused.clone()),
        _ => None,
    });
    assert_eq!(
        refused,
        Some(vec![(
            0,
            Exclusion::Unrecoverable {
                kind: ToolErrorKind::PermissionDenied
            }
        )])
    );
}

#[test]
fn rule_8_tools_already_used_comes_from_the_ledger() {
    // The required tool ran long ago; the conversation the host keeps may be pruned, but the
    // ledger still knows, so the claim is accepted without re-running it.
    let policy = Policy {
        completion_requires: vec!["deploy".into()],
        max_repeats: 50,
        ..Policy::default()
    };
    let mut replies = vec![call("deploy", json!({}))];
    replies.extend((0..20).map(|i| call("read", json!({"i": i}))));
    replies.push(done("deployed"));
    let run = drive(
        policy,
        Script::new(replies).tool(|_, n| ToolOutcome::ok(json!(n))),
    );
    assert_eq!(
        run.stop.outcome,
        Outcome::Complete(CompleteReason::Explicit)
    );
    assert_eq!(run.stop.stats.nudges, 0);
    assert!(run.machine.ledger().succeeded("deploy"));
}

/// A tool batch's first budget warning (call number, whether it is the last before the block)
/// and its first refusal.
type BudgetMarks = (Option<(u32, bool)>, Option<Exclusion>);

/// [`BudgetMarks`] of every tool batch, in order.
fn budget_marks(commands: &[Command]) -> Vec<BudgetMarks> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::RunTools(b) => Some((
                b.warnings.first().map(|w| (w.1.call, w.1.last)),
                b.refused.first().map(|r| r.1),
            )),
            _ => None,
        })
        .collect()
}

/// The refusal of a call at `block_at`.
fn soft_block(at: u32) -> Exclusion {
    Exclusion::Budget(terminus_kernel::Block::bound(
        &terminus_kernel::catalog::BLOCK_AT,
        at,
    ))
}

#[test]
fn tool_budgets_warn_then_block() {
    let mut policy = Policy {
        max_repeats: 50,
        ..Policy::default()
    };
    policy.tool_budgets.insert(
        "read_file".into(),
        ToolBudget {
            warn_at: Some(2),
            block_at: Some(4),
            ..ToolBudget::default()
        },
    );
    let replies: Vec<Reply> = (0..3)
        .map(|i| call("read_file", json!({"i": i})))
        .chain([
            calls(&[("read_file", json!({"i": 3})), ("grep", json!({}))]),
            text("done"),
        ])
        .collect();
    let run = drive(
        policy,
        Script::new(replies).tool(|_, n| ToolOutcome::ok(json!(n))),
    );
    let batches = budget_marks(&run.commands);
    assert_eq!(
        batches,
        vec![
            (None, None),
            (Some((2, false)), None),
            (Some((3, true)), None),
            (None, Some(soft_block(4))),
        ]
    );
    assert_eq!(
        run.stop.outcome,
        Outcome::Complete(CompleteReason::Answered)
    );
    assert_eq!(
        run.stop.stats.tool_calls, 4,
        "three reads and the grep; the fourth read was refused"
    );
    // A budget's block follows from the counts: the tool is not excluded.
    assert_eq!(run.machine.ledger().exclusion("read_file"), None);
}

#[test]
fn a_checkpoint_resets_a_tool_budget_and_lifts_its_block() {
    let mut policy = Policy {
        max_repeats: 50,
        ..Policy::default()
    };
    policy.tool_budgets.insert(
        "search".into(),
        ToolBudget {
            warn_at: Some(1),
            block_at: Some(3),
            reset_on: vec!["checkpoint".into()],
            ..ToolBudget::default()
        },
    );
    let replies = vec![
        call("search", json!({"q": 1})),
        call("search", json!({"q": 2})),
        calls(&[("search", json!({"q": 3})), ("grep", json!({}))]),
        call("checkpoint", json!({"note": "found two"})),
        call("search", json!({"q": 4})),
        text("done"),
    ];
    let run = drive(
        policy,
        Script::new(replies).tool(|_, n| ToolOutcome::ok(json!(n))),
    );
    let batches = budget_marks(&run.commands);
    assert_eq!(
        batches,
        vec![
            (Some((1, false)), None),
            (Some((2, true)), None),
            (None, Some(soft_block(3))),
            (None, None),
            // After the checkpoint the count starts again: call 1, warned, not refused.
            (Some((1, false)), None),
        ]
    );
    assert_eq!(
        run.stop.outcome,
        Outcome::Complete(CompleteReason::Answered)
    );
    assert_eq!(run.stop.stats.tool_calls, 5);
    assert_eq!(run.stop.stats.refused_calls, 1);
    let search = run
        .machine
        .ledger()
        .get("search")
        .copied()
        .unwrap_or_default();
    assert_eq!(
        (search.calls, search.budget_calls(), search.refused),
        (3, 1, 1)
    );
    assert_eq!(run.machine.ledger().exclusion("search"), None);
    assert!(
        run.stop.excluded_tools.is_empty(),
        "{:?}",
        run.stop.excluded_tools
    );
}

/// Seed 004's read budget, its exact numbers: a checkpoint tier (reads 8-9 warned, 10 and on
/// refused until `checkpoint`) and a hard stop (read 13 warned, 14 and on refused until `plan`),
/// both counted from the run's start.
fn seed_004_tiers() -> Policy {
    let mut policy = Policy {
        max_repeats: 50,
        max_blocked_turns: 10,
        ..Policy::default()
    };
    let tier = |warn_at, block_at, lift: &str| terminus_kernel::Tier {
        warn_at: Some(warn_at),
        block_at: Some(block_at),
        reset_on: vec![lift.into()],
        ..terminus_kernel::Tier::default()
    };
    policy.tool_budgets.insert(
        "read".into(),
        ToolBudget {
            tiers: vec![tier(8, 10, "checkpoint"), tier(13, 14, "plan")],
            ..ToolBudget::default()
        },
    );
    policy
}

/// What the budget did to each `read` of a run: `warn(tier, call)`, `block(tier, call)` or
/// `ran`, one per read, in order.
fn read_fates(commands: &[Command]) -> Vec<String> {
    let mut out = Vec::new();
    for command in commands {
        let Command::RunTools(batch) = command else {
            continue;
        };
        for (i, call) in batch.calls.iter().enumerate() {
            if call.name.as_str() != "read" {
                continue;
            }
            out.push(match (batch.refusal(i), batch.warning(i)) {
                (Some(Exclusion::Budget(block)), _) => match block.by {
                    terminus_kernel::BlockedBy::Tier { index, call } => {
                        format!("block({index}, {call})")
                    }
                    terminus_kernel::BlockedBy::Bound(b) => format!("{}({})", b.field, block.at),
                },
                (Some(other), _) => format!("excluded({other})"),
                (None, Some(w)) => format!("warn({:?}, {})", w.tier, w.call),
                (None, None) => "ran".into(),
            });
        }
    }
    out
}

#[test]
fn seed_004_tiers_warn_block_and_lift_each_read_as_the_seed_wrote() {
    let reads = |from: u32, to: u32| (from..=to).map(|n| call("read", json!({ "n": n })));
    // With the checkpoint posted after read 9 and the plan after two refused reads.
    let replies: Vec<Reply> = reads(1, 9)
        .chain([call("checkpoint", json!({"note": "nine read"}))])
        .chain(reads(10, 15))
        .chain([call("plan", json!({"steps": 2}))])
        .chain(reads(14, 15))
        .chain([text("done")])
        .collect();
    let run = drive(
        seed_004_tiers(),
        Script::new(replies).tool(|_, n| ToolOutcome::ok(json!(n))),
    );
    let mut expected: Vec<String> = (1..=7).map(|_| "ran".to_owned()).collect();
    expected.extend(["warn(Some(0), 8)".into(), "warn(Some(0), 9)".into()]);
    expected.extend((10..=12).map(|_| "ran".to_owned()));
    expected.push("warn(Some(1), 13)".into());
    // Refused calls are not reads: both attempts are the 14th.
    expected.extend(["block(1, 14)".into(), "block(1, 14)".into()]);
    expected.extend(["ran".into(), "ran".into()]);
    assert_eq!(read_fates(&run.commands), expected);
    assert_eq!(
        run.stop.outcome,
        Outcome::Complete(CompleteReason::Answered)
    );
    let read = run
        .machine
        .ledger()
        .get("read")
        .copied()
        .unwrap_or_default();
    assert_eq!((read.calls, read.refused), (15, 2));
    // The checkpoint passed the first tier at 9 reads, the plan the second at 13.
    assert_eq!(read.tier_marks.0[..2], [9, 13]);

    // Without the checkpoint: reads 10 on are refused by the first tier; the second never
    // falls due, since a refused read is not a read.
    // The seventh blocked turn in a row (a 16th read) ends the run.
    let replies: Vec<Reply> = reads(1, 16).chain([text("never reached")]).collect();
    let run = drive(
        Policy {
            max_blocked_turns: 7,
            ..seed_004_tiers()
        },
        Script::new(replies).tool(|_, n| ToolOutcome::ok(json!(n))),
    );
    let mut expected: Vec<String> = (1..=7).map(|_| "ran".to_owned()).collect();
    expected.extend(["warn(Some(0), 8)".into(), "warn(Some(0), 9)".into()]);
    expected.extend((10..=15).map(|_| "block(0, 10)".to_owned()));
    assert_eq!(read_fates(&run.commands), expected);
    assert_eq!(run.stop.outcome, Outcome::Aborted(AbortReason::NoProgress));
    // The six answered refusals and the 16th read, refused by the turn that ends the run.
    assert_eq!(run.stop.stats.refused_calls, 7);
}

#[test]
fn a_checkpoint_before_a_tier_is_due_does_not_pass_it_and_since_lift_tiers_come_back() {
    // A checkpoint posted at read 3 is not the one the tier counted over the run asks for.
    let mut early = seed_004_tiers();
    if let Some(budget) = early.tool_budgets.get_mut("read") {
        budget.tiers.truncate(1);
    }
    let reads = |from: u32, to: u32| (from..=to).map(|n| call("read", json!({ "n": n })));
    let replies: Vec<Reply> = reads(1, 3)
        .chain([call("checkpoint", json!({"note": "early"}))])
        .chain(reads(4, 10))
        .chain([text("done")])
        .collect();
    let run = drive(
        early,
        Script::new(replies).tool(|_, n| ToolOutcome::ok(json!(n))),
    );
    let fates = read_fates(&run.commands);
    assert_eq!(
        fates.last().map(String::as_str),
        Some("block(0, 10)"),
        "{fates:?}"
    );

    // Counted since its lift, a tier starts again at each lift: every third read is refused
    // until a checkpoint.
    let mut every = Policy {
        max_repeats: 50,
        ..Policy::default()
    };
    every.tool_budgets.insert(
        "read".into(),
        ToolBudget {
            tiers: vec![terminus_kernel::Tier {
                block_at: Some(3),
                reset_on: vec!["checkpoint".into()],
                count: terminus_kernel::TierCount::SinceLift,
                ..terminus_kernel::Tier::default()
            }],
            ..ToolBudget::default()
        },
    );
    let replies: Vec<Reply> = reads(1, 3)
        .chain([call("checkpoint", json!({"note": "two"}))])
        .chain(reads(3, 5))
        .chain([text("done")])
        .collect();
    let run = drive(
        every,
        Script::new(replies).tool(|_, n| ToolOutcome::ok(json!(n))),
    );
    assert_eq!(
        read_fates(&run.commands),
        ["ran", "ran", "block(0, 3)", "ran", "ran", "block(0, 3)"]
    );
}

#[test]
fn tiers_are_checked_field_by_field() {
    let refused = |budget: serde_json::Value| {
        let policy: Policy = serde_json::from_value(json!({ "tool_budgets": { "read": budget } }))
            .unwrap_or_else(|e| panic!("{e}"));
        policy.validate().map(|_| ()).map_err(|e| e.to_string())
    };
    assert_eq!(
        refused(json!({ "block_at": 3, "tiers": [{ "block_at": 5 }] })),
        Err(
            "policy.tool_budgets.read.block_at: a budget with tiers sets its bounds in its \
             tiers, not beside them"
                .into()
        )
    );
    assert_eq!(
        refused(json!({ "tiers": [{ "block_at": 5 }, { "name": "x" }] })),
        Err("policy.tool_budgets.read.tiers[1]: a tier needs warn_at or block_at".into())
    );
    assert_eq!(
        refused(json!({ "tiers": [{ "warn_at": 6, "block_at": 5 }] })),
        Err("policy.tool_budgets.read.tiers[0].warn_at: must not exceed block_at (5)".into())
    );
    assert_eq!(
        refused(json!({ "tiers": [{ "block_at": 0 }] })),
        Err("policy.tool_budgets.read.tiers[0].block_at: must be at least 1".into())
    );
    assert_eq!(
        refused(json!({ "tiers": [{ "block_at": 2, "reset_on": [" "] }] })),
        Err("policy.tool_budgets.read.tiers[0].reset_on: must name tools (an empty name)".into())
    );
    let five: Vec<serde_json::Value> = (1..=5).map(|n| json!({ "block_at": n })).collect();
    assert_eq!(
        refused(json!({ "tiers": five })),
        Err("policy.tool_budgets.read.tiers: 5 tiers, at most 4".into())
    );
    let bad: Result<Policy, _> = serde_json::from_value(
        json!({ "tool_budgets": { "read": { "tiers": [{ "count": "ever" }] } } }),
    );
    assert!(bad.is_err_and(|e| e.to_string().contains("unknown variant `ever`")));
    assert_eq!(
        refused(json!({ "tiers": [{ "warn_at": 2, "block_at": 2 }] })),
        Ok(())
    );
}

/// The read budget of seed 004 with a checkpoint tool, and `auto_checkpoints` written for the
/// agent at most.
fn forgetful_policy(auto_checkpoints: u32) -> Policy {
    let mut policy = Policy {
        max_repeats: 50,
        auto_checkpoints,
        ..Policy::default()
    };
    policy.tool_budgets.insert(
        "search".into(),
        ToolBudget {
            block_at: Some(2),
            reset_on: vec!["checkpoint".into()],
            ..ToolBudget::default()
        },
    );
    policy
}

fn checkpoints(commands: &[Command]) -> Vec<&CheckpointRequest> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Checkpoint(request) => Some(&**request),
            _ => None,
        })
        .collect()
}

#[test]
fn a_checkpoint_is_written_for_an_agent_that_was_told_and_did_not_post_one() {
    let replies = vec![
        call("search", json!({"q": 1})),
        call("search", json!({"q": 2})), // refused: the agent is told
        call("search", json!({"q": 2})), // refused again: the checkpoint is due
        call("search", json!({"q": 3})), // runs: the count started again
        text("done"),
    ];
    let script = || Script::new(replies.clone()).tool(|_, n| ToolOutcome::ok(json!(n)));
    let run = drive(forgetful_policy(1), script());
    let written = checkpoints(&run.commands);
    assert_eq!(written.len(), 1, "{:?}", run.commands);
    assert_eq!(written[0].blocked, vec!["search".to_owned()]);
    assert_eq!(written[0].lifted, vec!["search".to_owned()]);
    assert!(written[0].note.starts_with(CHECKPOINT_NOTE_START));
    // Emitted before the model call it precedes, after the second refused turn's results.
    let at = run
        .commands
        .iter()
        .position(|c| matches!(c, Command::Checkpoint(_)))
        .expect("a checkpoint");
    assert!(matches!(run.commands[at + 1], Command::CallModel(_)));
    assert_eq!(
        run.rules(),
        vec![
            "tool_turn",
            "tool_results_back",
            "tool_turn",
            "tool_results_back",
            "tool_turn",
            "auto_checkpoint",
            "tool_turn",
            "tool_results_back",
            "claim_answered",
        ]
    );
    assert_eq!(
        (
            run.stop.stats.auto_checkpoints,
            run.stop.stats.refused_calls,
            run.stop.stats.tool_calls
        ),
        (1, 2, 2)
    );
    // The checkpoint is the model's text, not a call: the ledger never saw `checkpoint`.
    assert!(!run.machine.ledger().succeeded("checkpoint"));

    // Off by default: the same script never gets one, and the third read is refused too.
    let off = drive(forgetful_policy(0), script());
    assert!(checkpoints(&off.commands).is_empty());
    assert_eq!(off.stop.stats.auto_checkpoints, 0);
    assert_eq!(off.stop.stats.refused_calls, 3);
}

#[test]
fn a_posted_checkpoint_leaves_nothing_to_write_and_the_bound_holds() {
    // The agent posts its checkpoint in the second refused turn: the block lifts, nothing is
    // written for it.
    let posted = drive(
        forgetful_policy(3),
        Script::new(vec![
            call("search", json!({"q": 1})),
            call("search", json!({"q": 2})),
            calls(&[("search", json!({"q": 2})), ("checkpoint", json!({}))]),
            call("search", json!({"q": 2})),
            text("done"),
        ])
        .tool(|_, n| ToolOutcome::ok(json!(n))),
    );
    assert!(checkpoints(&posted.commands).is_empty());
    assert_eq!(posted.stop.stats.auto_checkpoints, 0);
    // An agent that never posts gets `auto_checkpoints` of them, one per block, then stops on
    // `blocked_limit`.
    let forever = drive(
        forgetful_policy(2),
        Script::new(vec![call("search", json!({"q": 1}))]).tool(|_, n| ToolOutcome::ok(json!(n))),
    );
    assert_eq!(checkpoints(&forever.commands).len(), 2);
    assert_eq!(forever.stop.stats.auto_checkpoints, 2);
    assert_eq!(
        forever.stop.outcome,
        Outcome::Aborted(AbortReason::NoProgress)
    );
    assert_eq!(
        forever.trace.last().map(|r| r.rule),
        Some(Rule::BlockedLimit)
    );
}

#[test]
fn a_hard_block_outlasts_the_checkpoint_that_lifts_the_soft_one() {
    // Seed 004's two tiers on one tool: warn and block from the 3rd read, lifted by the
    // checkpoint; and from the 4th read of the whole run a hard block nothing lifts.
    let mut policy = Policy {
        max_repeats: 50,
        ..Policy::default()
    };
    policy.tool_budgets.insert(
        "read".into(),
        ToolBudget {
            block_at: Some(3),
            hard_block_at: Some(4),
            reset_on: vec!["checkpoint".into()],
            ..ToolBudget::default()
        },
    );
    let replies = vec![
        call("read", json!({"n": 1})),
        call("read", json!({"n": 2})),
        call("read", json!({"n": 3})), // the soft block
        call("checkpoint", json!({"note": "two read"})),
        call("read", json!({"n": 4})), // the third read that runs
        call("read", json!({"n": 5})), // the hard block, after the reset
        call("checkpoint", json!({"note": "four read"})),
        call("read", json!({"n": 6})), // still refused: no reset lifts it
        call("read", json!({"n": 7})),
        call("read", json!({"n": 8})),
        text("never reached"),
    ];
    let run = drive(
        policy,
        Script::new(replies).tool(|_, n| ToolOutcome::ok(json!(n))),
    );
    let hard = |at| {
        Exclusion::Budget(terminus_kernel::Block::bound(
            &terminus_kernel::catalog::HARD_BLOCK_AT,
            at,
        ))
    };
    let refusals: Vec<Option<Exclusion>> = budget_marks(&run.commands)
        .into_iter()
        .map(|(_, refused)| refused)
        .collect();
    assert_eq!(
        refusals,
        vec![
            None,
            None,
            Some(soft_block(3)),
            None,
            None,
            Some(hard(4)),
            None,
            Some(hard(4)),
            Some(hard(4)),
        ]
    );
    // Three reads ran; the three blocked turns in a row after the second checkpoint end the run.
    assert_eq!(run.stop.rule, terminus_kernel::Rule::BlockedLimit);
    assert_eq!(
        run.stop.outcome,
        Outcome::Aborted(terminus_kernel::AbortReason::NoProgress)
    );
    assert_eq!(run.machine.ledger().calls("read"), 3);
    assert_eq!(run.stop.stats.refused_calls, 5);
    // Both bounds reached: the refusal names the one nothing lifts.
    let mut both = Policy::default();
    both.tool_budgets.insert(
        "read".into(),
        ToolBudget {
            block_at: Some(2),
            hard_block_at: Some(2),
            reset_on: vec!["checkpoint".into()],
            ..ToolBudget::default()
        },
    );
    let first = drive(
        both,
        Script::new(vec![
            call("read", json!({"n": 1})),
            call("read", json!({"n": 2})),
            text("done"),
        ])
        .tool(|_, n| ToolOutcome::ok(json!(n))),
    );
    let refused: Vec<Exclusion> = budget_marks(&first.commands)
        .into_iter()
        .filter_map(|(_, refused)| refused)
        .collect();
    assert_eq!(refused, vec![hard(2)]);
    // The policy's JSON form names the bound only where it is set.
    let json = serde_json::to_string(&run.machine.policy().tool_budgets).unwrap_or_default();
    assert!(json.contains(r#""hard_block_at":4"#), "{json}");
    let plain = serde_json::to_string(&ToolBudget::default()).unwrap_or_default();
    assert!(!plain.contains("hard_block_at"), "{plain}");
}

#[test]
fn terminal_states_absorb_and_say_so() {
    let mut run = drive(Policy::default(), Script::new(vec![text("answer")]));
    for e in [
        Event::Cancel,
        Event::Tick { now_ms: u64::MAX },
        Event::ModelTurn(ModelTurn::default()),
        Event::ToolResults(vec![]),
    ] {
        let h = feed(&mut run.machine, e);
        assert_eq!(
            h,
            Handled::Ignored {
                why: Ignored::Terminal,
                phase: Phase::Complete
            }
        );
        assert!(run.machine.poll_command().is_none());
    }
    assert_eq!(run.machine.stats().ignored_events, 4);
    assert_eq!(
        run.machine.outcome(),
        Some(Outcome::Complete(CompleteReason::Answered))
    );
}

#[test]
fn unexpected_events_are_counted_not_dropped() {
    let mut m = Machine::new(Policy::default()).expect("valid");
    let h = feed(&mut m, Event::ToolResults(vec![]));
    assert_eq!(
        h,
        Handled::Ignored {
            why: Ignored::Unexpected,
            phase: Phase::Exploring
        }
    );
    let h = feed(&mut m, Event::Verdict(Default::default()));
    assert_eq!(
        h,
        Handled::Ignored {
            why: Ignored::Unexpected,
            phase: Phase::Exploring
        }
    );
    assert_eq!(m.stats().ignored_events, 2);
    assert_eq!(m.stats().steps, 0);
}

#[test]
fn results_arrive_in_any_order_but_must_match_the_calls() {
    let mut m = Machine::new(Policy::default()).expect("valid");
    let _ = m.poll_command();
    let calls = vec![
        ToolCall {
            id: "x".into(),
            name: "a".into(),
            arguments: json!(1).into(),
        },
        ToolCall {
            id: "y".into(),
            name: "b".into(),
            arguments: json!(2).into(),
        },
    ];
    feed(
        &mut m,
        Event::ModelTurn(ModelTurn {
            tool_calls: calls,
            ..Default::default()
        }),
    );
    let r = |id: &str, name: &str| ToolResult {
        call_id: id.into(),
        name: name.into(),
        outcome: ToolOutcome::ok(json!(0)),
    };
    // A missing result and a foreign id are not accepted.
    assert!(matches!(
        feed(&mut m, Event::ToolResults(vec![r("x", "a")])),
        Handled::Ignored { .. }
    ));
    assert!(matches!(
        feed(&mut m, Event::ToolResults(vec![r("x", "a"), r("z", "b")])),
        Handled::Ignored { .. }
    ));
    assert!(matches!(
        feed(&mut m, Event::ToolResults(vec![r("y", "b"), r("x", "a")])),
        Handled::Step(_)
    ));
    assert_eq!(m.ledger().get("a").map(|t| t.successes), Some(1));
}

#[test]
fn a_budget_stop_can_get_one_final_tool_less_answer() {
    let policy = Policy {
        max_model_calls: 3,
        final_answer_on_budget: true,
        ..Policy::default()
    };
    let replies = vec![
        call("read", json!({"i": 0})),
        call("read", json!({"i": 1})),
        call("read", json!({"i": 2})),
        text("Here is what I found so far."),
    ];
    let run = drive(
        policy,
        Script::new(replies).tool(|_, n| ToolOutcome::ok(json!(n))),
    );
    assert_eq!(
        run.stop.outcome,
        Outcome::Aborted(AbortReason::MaxModelCalls),
        "the reason still names the budget"
    );
    assert_eq!(
        run.stop.result.as_deref(),
        Some("Here is what I found so far.")
    );
    assert_eq!(run.stop.stats.model_calls, 4);
    let last_call = run.commands.iter().rev().find_map(|c| match c {
        Command::CallModel(m) => Some(m.clone()),
        _ => None,
    });
    assert_eq!(
        last_call.map(|c| c.tools),
        Some(false),
        "the final call offers no tools"
    );
    assert_eq!(run.rules().last(), Some(&"final_answer_done"));
}

#[test]
fn every_stop_carries_the_partial_result_and_all_counters() {
    let policy = Policy {
        max_model_calls: 2,
        ..Policy::default()
    };
    let replies = vec![
        Reply::Turn(ModelTurn {
            text: "Found the bug in parser.rs; fixing it next.".into(),
            tool_calls: vec![ToolCall {
                id: "".into(),
                name: "read".into(),
                arguments: json!({}).into(),
            }],
            ..Default::default()
        }),
        call("read", json!({"n": 2})),
    ];
    let run = drive(
        policy,
        Script::new(replies).tool(|_, n| ToolOutcome::ok(json!(n))),
    );
    assert_eq!(
        run.stop.outcome,
        Outcome::Aborted(AbortReason::MaxModelCalls)
    );
    assert_eq!(
        run.stop.result.as_deref(),
        Some("Found the bug in parser.rs; fixing it next.")
    );
    assert_eq!(run.stop.stats, run.machine.stats());
}

#[test]
fn counters_count_what_was_carried_out_not_what_a_budget_stopped() {
    // `docs/design.md`, "The report": `tool_calls` counts tool executions. A tool turn that arrives
    // when the step budget is spent stops the run; its calls never run and are not counted. The
    // same holds for a nudge and a continuation that a budget stops before they are sent.
    let call = |i: u32| ModelTurn {
        tool_calls: vec![ToolCall {
            id: format!("c{i}").into(),
            name: "read_file".into(),
            arguments: json!({ "n": i }).into(),
        }],
        ..Default::default()
    };
    for (turn, counter) in [
        (call(2), "tool_calls"),
        (
            ModelTurn {
                text: "I will now do it.".into(),
                needs_more_work: Some(true),
                ..Default::default()
            },
            "continuations",
        ),
    ] {
        let policy = Policy {
            max_steps: 3,
            ..Policy::default()
        };
        let mut m = Machine::new(policy).expect("valid");
        let _ = m.poll_command();
        feed(&mut m, Event::ModelTurn(call(1)));
        let _ = m.poll_command();
        feed(
            &mut m,
            Event::ToolResults(vec![ToolResult {
                call_id: "c1".into(),
                name: "read_file".into(),
                outcome: ToolOutcome::ok(json!("x")),
            }]),
        );
        while m.poll_command().is_some() {}
        feed(&mut m, Event::ModelTurn(turn));
        assert_eq!(
            m.outcome(),
            Some(Outcome::Aborted(AbortReason::MaxSteps)),
            "{counter}"
        );
        let s = m.stats();
        assert_eq!(s.tool_calls, 1, "{counter}: only the executed call counts");
        assert_eq!((s.continuations, s.nudges), (0, 0), "{counter}");
    }

    // A premature claim (a todo open) when the budget is spent: refused, but no nudge is sent.
    let policy = Policy {
        max_steps: 3,
        ..Policy::default()
    };
    let mut m = Machine::new(policy).expect("valid");
    let _ = m.poll_command();
    let todos = ModelTurn {
        tool_calls: vec![ToolCall {
            id: "t".into(),
            name: "write_todos".into(),
            arguments: json!({ "todos": [ { "content": "x", "status": "pending" } ] }).into(),
        }],
        ..Default::default()
    };
    feed(&mut m, Event::ModelTurn(todos));
    let _ = m.poll_command();
    feed(
        &mut m,
        Event::ToolResults(vec![ToolResult {
            call_id: "t".into(),
            name: "write_todos".into(),
            outcome: ToolOutcome::ok(json!("ok")),
        }]),
    );
    while m.poll_command().is_some() {}
    feed(
        &mut m,
        Event::ModelTurn(ModelTurn {
            text: "Done.".into(),
            ..Default::default()
        }),
    );
    assert_eq!(m.outcome(), Some(Outcome::Aborted(AbortReason::MaxSteps)));
    assert_eq!(m.stats().nudges, 0);
}
