//! Property tests over arbitrary policies and arbitrary event streams, including the adversarial
//! families of the issue: every run ends within `Policy::step_bound()`, each adversarial loop is
//! cut by its own counter at exactly its limit (not by `max_steps`), counters never decrease, the
//! variant strictly decreases on every step, the reason agrees with the counters, terminal states
//! absorb, and the same policy and events give the same path byte for byte.
//!
//! Case counts: `CASES` per property (set `PROPTEST_CASES` to run more).

mod common;

use common::*;
use proptest::prelude::*;
use serde_json::json;
use terminus_kernel::{
    AbortReason, Command, CompleteReason, Event, Finish, Handled, Machine, ModelErrorKind,
    ModelTurn, OnUnrecoverable, OnVerificationLimit, Outcome, Policy, StepRecord, Tier, TierCount,
    ToolCall, ToolErrorKind, ToolOutcome, ToolResult, Usage, Verdict,
};

const CASES: u32 = 512;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: CASES,
        ..ProptestConfig::default()
    }
}

prop_compose! {
    fn limits()(max_steps in 1u32..60, max_model_calls in 1u32..30, max_no_ops in 1u32..5,
                max_nudges in 0u32..4, max_verification_failures in 1u32..4,
                max_tool_failures in 1u32..4, max_consecutive_tool_failures in 1u32..5,
                max_repeats in 2u32..5, max_empty_responses in 1u32..5, max_model_retries in 0u32..4,
                max_loop_period in 1u32..=16, max_blocked_turns in 1u32..4)
        -> Policy {
        Policy { max_steps, max_model_calls, max_no_ops, max_nudges, max_verification_failures,
                 max_tool_failures, max_consecutive_tool_failures, max_repeats, max_empty_responses,
                 max_model_retries, max_loop_period, max_blocked_turns, ..Policy::default() }
    }
}

prop_compose! {
    fn policy()(base in limits(), verify in any::<bool>(), complete_at_limit in any::<bool>(),
                stop_on_unrecoverable in any::<bool>(), final_answer in any::<bool>(),
                deadline in proptest::option::of(0u64..5_000), token_budget in proptest::option::of(1u64..400),
                output_tokens in proptest::option::of(1u64..200),
                requires in proptest::sample::subsequence(vec!["a", "b", "write_todos"], 0..=2),
                budget in proptest::option::of((1u32..4, 1u32..6, proptest::option::of(1u32..8), any::<bool>())),
                auto_checkpoints in 0u32..3,
                polls in proptest::option::of(2u32..5),
                tiered in proptest::option::of((0u32..3, any::<bool>(), any::<bool>())),
                seed in any::<u64>())
        -> Policy {
        let mut p = Policy {
            verify_completion: verify,
            on_verification_limit: if complete_at_limit { OnVerificationLimit::Complete } else { OnVerificationLimit::Abort },
            on_unrecoverable_tool_error: if stop_on_unrecoverable { OnUnrecoverable::Stop } else { OnUnrecoverable::Exclude },
            final_answer_on_budget: final_answer,
            deadline_ms: deadline,
            token_budget,
            max_output_tokens: output_tokens,
            completion_requires: requires.into_iter().map(String::from).collect(),
            // Checkpoints written for the agent when it does not post one (`b`).
            auto_checkpoints,
            seed,
            ..base
        };
        // A budget on `a`: warn, a soft block that a success of `b` resets (the checkpoint),
        // and a hard block over the whole run that nothing lifts.
        // `c` declared a poller in some policies: its identical results are polls, bounded by
        // `max_polls`, not repeats.
        if let Some(max_polls) = polls {
            p.pollers = vec!["c".into()];
            p.max_polls = max_polls;
        }
        // Or the same numbers as two tiers (seed 004's form): the first lifted by `b`, counted
        // over the run or since its lift; the second from a few calls past it, lifted by `c` or
        // by nothing.
        match (budget, tiered) {
            (Some((warn, extra, _, resets)), Some((past, since_lift, hard))) => {
                let count = if since_lift { TierCount::SinceLift } else { TierCount::Run };
                let lift = |on: &str, yes: bool| if yes { vec![on.to_owned()] } else { Vec::new() };
                let second = warn + extra + past;
                p.tool_budgets.insert("a".into(), terminus_kernel::ToolBudget {
                    tiers: vec![
                        Tier { warn_at: Some(warn), block_at: Some(warn + extra), reset_on: lift("b", resets), count, ..Tier::default() },
                        Tier { warn_at: Some(second), block_at: Some(second + 1), reset_on: lift("c", !hard), ..Tier::default() },
                    ],
                    ..terminus_kernel::ToolBudget::default()
                });
            }
            (Some((warn, extra, hard, resets)), None) => {
                p.tool_budgets.insert("a".into(), terminus_kernel::ToolBudget {
                    warn_at: Some(warn),
                    block_at: Some(warn + extra),
                    hard_block_at: hard.map(|h| h.max(warn)),
                    reset_on: if resets { vec!["b".into()] } else { Vec::new() },
                    ..terminus_kernel::ToolBudget::default()
                });
            }
            (None, _) => {}
        }
        p
    }
}

/// How the world answers one command (or interrupts).
#[derive(Debug, Clone)]
enum Move {
    Tool {
        name: &'static str,
        arg: u8,
        needs_more_work: Option<bool>,
        text: bool,
    },
    Todos {
        open: bool,
    },
    Text {
        needs_more_work: Option<bool>,
        tokens: Option<u64>,
        finish: Finish,
    },
    Empty {
        reasoning: bool,
    },
    ModelError(ModelErrorKind),
    ToolOk(u8),
    ToolErr(ToolErrorKind),
    Verdict(bool, u8),
    Tick(u64),
    Cancel,
    Stray(u8),
}

fn moves() -> impl Strategy<Value = Move> {
    let name = prop_oneof![Just("a"), Just("b"), Just("c")];
    prop_oneof![
        4 => (name, 0u8..3, proptest::option::of(any::<bool>()), any::<bool>())
            .prop_map(|(name, arg, needs_more_work, text)| Move::Tool { name, arg, needs_more_work, text }),
        1 => any::<bool>().prop_map(|open| Move::Todos { open }),
        3 => (proptest::option::of(any::<bool>()), proptest::option::of(0u64..120),
              prop_oneof![4 => Just(Finish::Stop), 1 => Just(Finish::Length), 1 => Just(Finish::ContentFilter)])
            .prop_map(|(needs_more_work, tokens, finish)| Move::Text { needs_more_work, tokens, finish }),
        1 => any::<bool>().prop_map(|reasoning| Move::Empty { reasoning }),
        1 => proptest::sample::select(ModelErrorKind::ALL.to_vec()).prop_map(Move::ModelError),
        3 => (0u8..3).prop_map(Move::ToolOk),
        2 => proptest::sample::select(ToolErrorKind::ALL.to_vec()).prop_map(Move::ToolErr),
        2 => (any::<bool>(), 0u8..4).prop_map(|(ok, why)| Move::Verdict(ok, why)),
        1 => (0u64..6_000).prop_map(Move::Tick),
        1 => Just(Move::Cancel).prop_filter("rare", |_| true),
        1 => (0u8..4).prop_map(Move::Stray),
    ]
}

const PLAIN: Move = Move::ToolOk(0);

fn model_event(m: &Move, turn: usize) -> Option<Event> {
    let id = |i: usize| format!("t{turn}-{i}");
    Some(match *m {
        Move::Tool {
            name,
            arg,
            needs_more_work,
            text,
        } => Event::ModelTurn(ModelTurn {
            text: if text {
                "calling a tool".into()
            } else {
                String::new()
            },
            tool_calls: vec![ToolCall {
                id: id(0).into(),
                name: name.into(),
                arguments: json!({ "arg": arg }).into(),
            }],
            needs_more_work,
            finish: Finish::ToolCalls,
            ..Default::default()
        }),
        Move::Todos { open } => Event::ModelTurn(ModelTurn {
            tool_calls: vec![ToolCall {
                id: id(0).into(),
                name: "write_todos".into(),
                arguments: json!({"todos": [{"content": "x", "status": if open { "in_progress" } else { "completed" }}]}).into(),
            }],
            ..Default::default()
        }),
        Move::Text {
            needs_more_work,
            tokens,
            finish,
        } => Event::ModelTurn(ModelTurn {
            text: "some content".into(),
            needs_more_work,
            usage: tokens.map(|t| Usage {
                input_tokens: t,
                output_tokens: 1,
            }),
            finish,
            ..Default::default()
        }),
        Move::Empty { reasoning } => Event::ModelTurn(ModelTurn {
            usage: Some(Usage::default()),
            reasoning,
            ..Default::default()
        }),
        Move::ModelError(kind) => Event::ModelError {
            kind,
            retry_after_ms: Some(10),
        },
        _ => return None,
    })
}

fn stray(kind: u8) -> Event {
    match kind {
        0 => Event::ToolResults(vec![ToolResult {
            call_id: "nope".into(),
            name: "a".into(),
            outcome: ToolOutcome::ok(json!(1)),
        }]),
        1 => Event::Verdict(Verdict {
            complete: true,
            missing: vec![],
        }),
        2 => Event::ModelTurn(ModelTurn {
            text: "stray".into(),
            ..Default::default()
        }),
        _ => Event::ModelError {
            kind: ModelErrorKind::Server,
            retry_after_ms: None,
        },
    }
}

/// Plays `moves` (cycled) against the machine, answering each command with the next move that
/// fits it; moves that do not fit (ticks, cancel, strays) are fed as they come. Returns the trace.
fn play(policy: &Policy, script: &[Move], max_events: usize) -> (Machine, Vec<StepRecord>, usize) {
    let mut m = Machine::new(policy.clone()).expect("generated policies are valid");
    let mut trace = Vec::new();
    let mut k = 0usize;
    let mut events = 0usize;
    let mut turn = 0usize;
    let mut pending: Option<Command> = None;
    let mut noise_in_row = 0usize;
    while events < max_events {
        if pending.is_none() {
            while let Some(c) = m.poll_command() {
                match c {
                    Command::Nudge(_) | Command::Notice(_) | Command::Checkpoint(_) => {}
                    other => pending = Some(other),
                }
            }
        }
        let Some(cmd) = pending.clone() else { break };
        if let Command::Stop(_) = cmd {
            break;
        }
        let mut mv = &script[k % script.len()];
        k += 1;
        // A responsive world answers eventually: after a whole cycle of noise, answer plainly.
        let noise = matches!(mv, Move::Tick(_) | Move::Cancel | Move::Stray(_));
        noise_in_row = if noise { noise_in_row + 1 } else { 0 };
        if noise_in_row > script.len() {
            mv = &PLAIN;
            noise_in_row = 0;
        }
        let event = match (&cmd, mv) {
            (_, Move::Tick(t)) => Some(Event::Tick { now_ms: *t }),
            (_, Move::Cancel) if k.is_multiple_of(7) => Some(Event::Cancel),
            (_, Move::Stray(s)) => Some(stray(*s)),
            (Command::CallModel(_), mv) => {
                turn += 1;
                model_event(mv, turn).or_else(|| {
                    model_event(
                        &Move::Text {
                            needs_more_work: None,
                            tokens: None,
                            finish: Finish::Stop,
                        },
                        turn,
                    )
                })
            }
            (Command::RunTools(batch), mv) => {
                let results = batch
                    .calls
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| batch.refusal(*i).is_none())
                    .map(|(_, c)| ToolResult {
                        call_id: c.id.clone(),
                        name: c.name.clone(),
                        outcome: match mv {
                            Move::ToolErr(kind) if c.name != "write_todos" => ToolOutcome::Error {
                                kind: *kind,
                                message: "scripted".into(),
                            },
                            Move::ToolOk(v) => ToolOutcome::ok(json!(v)),
                            _ => ToolOutcome::ok(json!("ok")),
                        },
                    })
                    .collect();
                Some(Event::ToolResults(results))
            }
            (Command::Verify(_), Move::Verdict(ok, why)) => Some(Event::Verdict(Verdict {
                complete: *ok,
                missing: vec![format!("item {why}")],
            })),
            (Command::Verify(_), _) => Some(Event::Verdict(Verdict {
                complete: false,
                missing: vec![],
            })),
            _ => None,
        };
        let Some(event) = event else { continue };
        events += 1;
        let answers =
            !matches!(event, Event::Tick { .. } | Event::Cancel) && !matches!(mv, Move::Stray(_));
        let handled = feed(&mut m, event);
        if let Handled::Step(r) = handled {
            trace.push(r);
        }
        if answers || m.phase().is_terminal() || matches!(handled, Handled::Step(_)) {
            pending = None;
        }
    }
    (m, trace, events)
}

proptest! {
    #![proptest_config(config())]

    /// Arbitrary policies, arbitrary (responsive) event streams with noise: the run ends within
    /// the step bound and every invariant holds after every event (checked inside `feed`).
    #[test]
    fn every_run_ends_within_the_step_bound(policy in policy(), script in proptest::collection::vec(moves(), 1..40)) {
        let bound = policy.step_bound();
        let (m, trace, _events) = play(&policy, &script, 50_000);
        prop_assert!(m.phase().is_terminal(), "no terminal state after 50,000 events: {m:?}");
        prop_assert!(trace.len() as u64 <= bound);
        prop_assert_eq!(u64::from(m.stats().steps), trace.len() as u64);
    }

    /// Blind event streams (not answering commands at all): invariants hold, steps stay within
    /// the bound, and once terminal the machine stays terminal and ignores everything.
    #[test]
    fn blind_streams_keep_every_invariant(policy in policy(), script in proptest::collection::vec(moves(), 0..200)) {
        let mut m = Machine::new(policy.clone()).expect("valid");
        for (turn, mv) in script.iter().enumerate() {
            let event = match mv {
                Move::Tick(t) => Event::Tick { now_ms: *t },
                Move::Cancel => Event::Cancel,
                Move::Stray(s) => stray(*s),
                Move::ToolOk(_) | Move::ToolErr(_) => stray(0),
                Move::Verdict(ok, _) => Event::Verdict(Verdict { complete: *ok, missing: vec![] }),
                other => model_event(other, turn).unwrap_or(Event::Cancel),
            };
            let was_terminal = m.phase().is_terminal();
            let handled = feed(&mut m, event);
            if was_terminal {
                let is_ignored = matches!(handled, Handled::Ignored { .. });
                prop_assert!(is_ignored, "a terminal state accepted an event: {:?}", handled);
            }
            while m.poll_command().is_some() {}
        }
        prop_assert!(u64::from(m.stats().steps) <= policy.step_bound());
    }

    /// Same policy, same events: same path and same saved bytes.
    #[test]
    fn runs_are_deterministic(policy in policy(), script in proptest::collection::vec(moves(), 1..30)) {
        let (a, ta, _) = play(&policy, &script, 10_000);
        let (b, tb, _) = play(&policy, &script, 10_000);
        prop_assert_eq!(ta, tb);
        prop_assert_eq!(a.save(), b.save());
        // And a saved machine restores to an equal one.
        let restored = Machine::restore(&a.save());
        prop_assert!(restored.is_ok(), "restore failed: {:?}", restored.err());
        prop_assert!(restored.ok() == Some(a));
    }
}

/// A policy whose run-wide budgets are far out of reach, so only the family's own counter can
/// stop it.
fn roomy(base: Policy) -> Policy {
    Policy {
        max_steps: 10_000,
        max_model_calls: 5_000,
        deadline_ms: None,
        token_budget: None,
        ..base
    }
}

proptest! {
    #![proptest_config(config())]

    /// The model always calls the same tool with the same arguments and gets the same result.
    #[test]
    fn same_tool_loop_is_cut_by_max_repeats(base in limits()) {
        let p = roomy(base);
        let run = drive(p.clone(), Script::new(vec![call("search", json!({"q": "x"}))]));
        prop_assert_eq!(run.stop.outcome, Outcome::Aborted(AbortReason::NoProgress));
        prop_assert_eq!(run.machine.streaks().repeats, p.max_repeats);
        prop_assert_eq!(run.stop.stats.tool_calls, p.max_repeats);
    }

    /// The model always polls a declared poller that is never ready: `max_polls` polls end the
    /// run `poll_limit`, past `max_repeats`, and none of them is a repeat.
    #[test]
    fn a_never_ready_poller_is_cut_by_max_polls(base in limits(), max_polls in 2u32..8) {
        let p = Policy { pollers: vec!["status".into()], max_polls, ..roomy(base) };
        let run = drive(p.clone(), Script::new(vec![call("status", json!({"job": 1}))]));
        prop_assert_eq!(run.stop.outcome, Outcome::Aborted(AbortReason::PollLimit));
        prop_assert_eq!(run.machine.streaks().polls, max_polls);
        prop_assert_eq!(run.stop.stats.tool_calls, max_polls);
        prop_assert_eq!(run.stop.stats.repeats, 0);
    }

    /// The model reads new files forever, never posting what lifts the tiers of the read
    /// budget: the first block it reaches refuses every later read, and `max_blocked_turns`
    /// such turns end the run `no_progress`, within the step bound, whatever the tiers' numbers.
    #[test]
    fn reads_past_a_tier_nothing_lifts_are_cut_by_max_blocked_turns(
        base in limits(),
        tiers in proptest::collection::vec((1u32..6, 0u32..4, any::<bool>()), 1..=4),
    ) {
        let mut p = roomy(Policy { max_repeats: 50, ..base });
        let tiers: Vec<Tier> = tiers
            .into_iter()
            .map(|(warn, extra, since_lift)| Tier {
                warn_at: Some(warn),
                block_at: Some(warn + extra),
                reset_on: vec!["checkpoint".into()],
                count: if since_lift { TierCount::SinceLift } else { TierCount::Run },
                ..Tier::default()
            })
            .collect();
        let first_block = tiers.iter().filter_map(|t| t.block_at).min().unwrap_or(1);
        p.tool_budgets.insert("read".into(), terminus_kernel::ToolBudget {
            tiers,
            ..terminus_kernel::ToolBudget::default()
        });
        let reads: Vec<Reply> = (0..200).map(|n| call("read", json!({ "n": n }))).collect();
        let run = drive(p.clone(), Script::new(reads));
        prop_assert_eq!(run.stop.outcome, Outcome::Aborted(AbortReason::NoProgress));
        prop_assert_eq!(run.stop.stats.tool_calls, first_block - 1);
        prop_assert_eq!(run.stop.stats.refused_calls, p.max_blocked_turns);
        prop_assert!(u64::from(run.stop.stats.steps) <= p.step_bound());
    }

    /// The model always says it needs more work and does nothing.
    #[test]
    fn needs_more_work_loop_is_cut_by_max_no_ops(base in limits()) {
        let p = roomy(base);
        let run = drive(p.clone(), Script::new(vec![needs_more("not done yet")]));
        prop_assert_eq!(run.stop.outcome, Outcome::Aborted(AbortReason::NoProgress));
        prop_assert_eq!(run.stop.stats.no_ops, p.max_no_ops);
        prop_assert_eq!(run.stop.stats.model_calls, p.max_no_ops);
    }

    /// The model always claims it is done while a todo is open.
    #[test]
    fn premature_stop_loop_is_cut_by_max_nudges(base in limits()) {
        let p = roomy(base);
        let run = drive(p.clone(), Script::new(vec![todos(&[("task", "pending")]), done("done")]));
        prop_assert_eq!(run.stop.outcome, Outcome::Aborted(AbortReason::Incomplete));
        prop_assert_eq!(run.stop.stats.nudges, p.max_nudges);
    }

    /// The verifier always rejects, with a new reason each time.
    #[test]
    fn rejecting_verifier_is_cut_by_max_verification_failures(base in limits(), complete in any::<bool>()) {
        let p = roomy(Policy {
            verify_completion: true,
            on_verification_limit: if complete { OnVerificationLimit::Complete } else { OnVerificationLimit::Abort },
            ..base
        });
        let verdicts = (0..20).map(|i| reject(&format!("reason {i}"))).collect();
        let run = drive(p.clone(), Script::new(vec![done("done")]).verdicts(verdicts));
        let want = if complete { Outcome::Complete(CompleteReason::Forced) } else { Outcome::Aborted(AbortReason::VerificationLoop) };
        prop_assert_eq!(run.stop.outcome, want);
        prop_assert_eq!(run.stop.stats.verification_failures, p.max_verification_failures);
        // Every rejection after the first carries the deduplicated missing items so far.
        if let Some(last) = run.nudges.last() {
            prop_assert_eq!(last.missing_items.len() as u32, p.max_verification_failures - 1);
        }
    }

    /// The model always returns empty replies.
    #[test]
    fn empty_replies_are_cut_by_max_empty_responses(base in limits()) {
        let p = roomy(base);
        let run = drive(p.clone(), Script::new(vec![empty()]));
        prop_assert_eq!(run.stop.outcome, Outcome::Aborted(AbortReason::EmptyResponses));
        prop_assert_eq!(run.stop.stats.empty_responses, p.max_empty_responses);
        prop_assert_eq!(run.stop.stats.model_calls, p.max_empty_responses);
    }

    /// Tools always fail (a fresh tool name and arguments every turn, so neither exclusion nor
    /// the repeat detector interferes).
    #[test]
    fn failing_tools_are_cut_by_max_consecutive_tool_failures(base in limits()) {
        let p = roomy(base);
        let replies = (0..50).map(|i| call(&format!("tool{i}"), json!({"i": i}))).collect();
        let run = drive(p.clone(), Script::new(replies).tool(|_, _| fail(ToolErrorKind::Failed)));
        prop_assert_eq!(run.stop.outcome, Outcome::Aborted(AbortReason::ToolFailures));
        prop_assert_eq!(run.machine.streaks().failed_tool_turns, p.max_consecutive_tool_failures);
    }

    /// The same tool always fails: excluded at its `max_tool_failures`-th failure, then the next
    /// call to it is refused and the run ends (every requested tool is excluded).
    #[test]
    fn one_failing_tool_is_excluded_at_max_tool_failures(base in limits()) {
        let p = roomy(Policy { max_consecutive_tool_failures: 100, ..base });
        let replies = (0..50).map(|i| call("flaky", json!({"i": i}))).collect();
        let run = drive(p.clone(), Script::new(replies).tool(|_, _| fail(ToolErrorKind::Timeout)));
        prop_assert_eq!(run.stop.outcome, Outcome::Aborted(AbortReason::ToolFailures));
        prop_assert_eq!(run.stop.stats.tool_calls, p.max_tool_failures);
        prop_assert_eq!(run.stop.stats.refused_calls, 1);
    }

    /// The model always fails with a retryable error.
    #[test]
    fn retryable_errors_are_cut_by_max_model_retries(base in limits()) {
        let p = roomy(base);
        let run = drive(p.clone(), Script::new(vec![Reply::Error(ModelErrorKind::Server)]));
        prop_assert_eq!(run.stop.outcome, Outcome::Aborted(AbortReason::ModelError));
        prop_assert_eq!(run.stop.stats.model_calls, p.max_model_retries + 1);
        // Backoff delays never shrink across consecutive retries beyond the jitter band.
        let delays: Vec<u64> = run.commands.iter().filter_map(|c| match c {
            Command::CallModel(call) if call.delay_ms > 0 => Some(call.delay_ms),
            _ => None,
        }).collect();
        prop_assert_eq!(delays.len() as u32, p.max_model_retries);
    }

    /// An honest chain (new arguments, new results every turn) is not a loop: only the budget
    /// ends it, and with a final answer the reason still names the budget.
    #[test]
    fn honest_chains_are_cut_by_the_budget_with_an_optional_final_answer(
        steps in 2u32..40, calls in 1u32..20, final_answer in any::<bool>()
    ) {
        let p = Policy { max_steps: steps, max_model_calls: calls, final_answer_on_budget: final_answer, ..Policy::default() };
        let replies: Vec<Reply> = (0..100).map(|i| call("read", json!({"page": i}))).collect();
        let run = drive(p.clone(), Script::new(replies).tool(|_, n| ToolOutcome::ok(json!(n))));
        let budget = if 2 * calls < steps { AbortReason::MaxModelCalls } else { AbortReason::MaxSteps };
        prop_assert_eq!(run.stop.outcome, Outcome::Aborted(budget));
        prop_assert_eq!(u64::from(run.stop.stats.steps), p.step_bound(), "the chain meets the step bound exactly");
        let final_calls = run.commands.iter().filter(|c| matches!(c, Command::CallModel(m) if !m.tools)).count();
        prop_assert_eq!(final_calls, usize::from(final_answer));
    }
}

/// A machine that sent one nudge: the model's empty (but spending) reply was answered with the
/// continuation guidance, which this returns.
fn nudged(autonomous: bool) -> (Machine, String) {
    let policy = Policy {
        completion_requires: vec!["write_file".into()],
        max_no_ops: 5,
        autonomous,
        ..Policy::default()
    };
    let mut m = Machine::new(policy).expect("a valid policy");
    while m.poll_command().is_some() {}
    m.handle(Event::ModelTurn(ModelTurn {
        usage: Some(Usage {
            input_tokens: 10,
            output_tokens: 1,
        }),
        ..ModelTurn::default()
    }));
    let mut text = String::new();
    while let Some(c) = m.poll_command() {
        if let Command::Nudge(n) = c {
            text = n.text.clone();
        }
    }
    assert!(!text.is_empty(), "a nudge was sent");
    (m, text)
}

fn rule_of(m: &mut Machine, text: String) -> terminus_kernel::Rule {
    match m.handle(Event::ModelTurn(ModelTurn {
        text,
        ..ModelTurn::default()
    })) {
        Handled::Step(record) => record.rule,
        other => panic!("not a step: {other:?}"),
    }
}

/// Words that are not the kernel's (none occurs in its guidance).
fn prose() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop::sample::select(vec![
            "alpha",
            "bravo",
            "zebra",
            "quartz",
            "Plan.",
            "okay,",
            "\n",
            "ünïcode",
            "42",
            "—",
        ]),
        0..30,
    )
    .prop_map(|w| w.join(" "))
}

proptest! {
    #![proptest_config(config())]

    /// What a final answer is: the kernel's own guidance with any prose around it is never
    /// accepted (rule `non_answer`), whatever the policy says of autonomy.
    #[test]
    fn the_kernels_words_with_any_prose_around_them_are_not_an_answer(
        before in prose(), after in prose(), autonomous in any::<bool>()
    ) {
        let (mut m, nudge) = nudged(autonomous);
        let rule = rule_of(&mut m, format!("{before} {nudge} {after}"));
        prop_assert_eq!(rule, terminus_kernel::Rule::NonAnswer);
        prop_assert_eq!(m.stats().non_answers, 1);
    }

    /// ... and an answer that quotes up to three consecutive words of it is one (here a claim
    /// the gate refuses, since `write_file` has not run: never a non-answer).
    #[test]
    fn an_answer_quoting_a_few_of_the_kernels_words_is_an_answer(
        before in prose(), after in prose(), start in 0usize..40, len in 1usize..=3
    ) {
        let (mut m, nudge) = nudged(false);
        let words: Vec<&str> = nudge.split_whitespace().collect();
        let start = start % words.len();
        let quote = words[start..(start + len).min(words.len())].join(" ");
        let rule = rule_of(&mut m, format!("The result is 51. {before} {quote} {after}"));
        prop_assert_eq!(rule, terminus_kernel::Rule::ClaimRefused);
        prop_assert_eq!(m.stats().non_answers, 0);
    }
}

/// The words of a nudge that the model wrote (its todos) are not the kernel's: an answer that
/// repeats its own todo is an answer.
#[test]
fn an_answer_repeating_the_models_own_todo_is_not_an_echo() {
    let todo = "write the implementation plan to plan.md";
    let mut m = Machine::new(Policy::default()).expect("a valid policy");
    let drain = |m: &mut Machine| {
        let mut calls = Vec::new();
        while let Some(c) = m.poll_command() {
            if let Command::RunTools(batch) = c {
                calls.extend(batch.calls.iter().cloned());
            }
        }
        calls
    };
    let todos = |status: &str| {
        let call = ToolCall::new(
            format!("t-{status}"),
            "write_todos",
            json!({ "todos": [{ "content": todo, "status": status }] }),
        );
        ModelTurn {
            tool_calls: vec![call],
            ..ModelTurn::default()
        }
    };
    let ok = |calls: Vec<ToolCall>| -> Vec<ToolResult> {
        calls
            .into_iter()
            .map(|c| ToolResult {
                call_id: c.id,
                name: c.name,
                outcome: ToolOutcome::ok(json!("ok")),
            })
            .collect()
    };
    drain(&mut m);
    m.handle(Event::ModelTurn(todos("in_progress")));
    let calls = drain(&mut m);
    m.handle(Event::ToolResults(ok(calls)));
    drain(&mut m);
    // A claim with the todo open: refused, the nudge names the todo.
    assert_eq!(
        rule_of(&mut m, "Done.".into()),
        terminus_kernel::Rule::ClaimRefused
    );
    drain(&mut m);
    m.handle(Event::ModelTurn(todos("completed")));
    let calls = drain(&mut m);
    m.handle(Event::ToolResults(ok(calls)));
    drain(&mut m);
    assert_eq!(
        rule_of(&mut m, format!("I did it: {todo}.")),
        terminus_kernel::Rule::ClaimAnswered
    );
    assert_eq!(m.stats().non_answers, 0);
}
