//! Simulation: thousands of generated (not hand-written) scenarios, with model errors, empty and
//! truncated replies, slow and failing tools, verifier rejections, deadlines and cancellations
//! (the scenario's kill switch), run through the scenario adapters and the runtime under tokio's
//! paused clock. Every run must end within its policy's step bound (and its model-call budget,
//! plus the one final-answer call `final_answer_on_budget` allows), by its deadline and kill
//! switch, with a consistent report: its trace is its path, its counters are the ones the path
//! determines and the ones a replay of its journal rebuilds, and its reason agrees with them (the
//! kernel's invariants). It prints how many runs ran and how they ended.
//!
//! Reproduce one run: the failing message prints its seed and scenario JSON.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use terminus_kernel::testing::check_machine;
use terminus_kernel::{
    AbortReason, CompleteReason, Input, Outcome, Phase, Record, Rule, Stats, TurnKind, recover,
};
use terminus_runtime::{Journal, MemoryStore};
use terminus_scenario::Scenario;
use tokio::time::Instant;

const RUNS: u64 = 5000;

/// xorshift64*: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

const TOOLS: [&str; 3] = ["read", "write", "flaky"];

fn turn(r: &mut Rng, i: u64) -> Value {
    match r.below(12) {
        0..=4 => {
            let calls: Vec<Value> = (0..1 + r.below(2))
                .map(|_| json!({ "name": r.pick(&TOOLS), "arguments": { "n": r.below(4) } }))
                .collect();
            json!({ "tool_calls": calls })
        }
        5 => json!({ "tool_calls": [ { "name": "write_todos", "arguments": { "todos": [
            { "content": "task", "status": r.pick(&["pending", "completed"]) } ] } } ] }),
        6 => json!({ "text": format!("Done ({i})."), "needs_more_work": false }),
        7 => json!({ "text": format!("Answer {i}.") }),
        8 => json!({ "text": "Still working.", "needs_more_work": true }),
        9 => json!({ "text": "", "usage": { "input_tokens": 0, "output_tokens": 0 } }),
        10 => {
            json!({ "text": "cut off", "finish": "length", "usage": { "input_tokens": 50, "output_tokens": 50 } })
        }
        _ => {
            json!({ "error": r.pick(&["rate_limited", "server", "timeout", "auth", "context_overflow"]),
                      "retry_after_ms": r.below(50) })
        }
    }
}

fn result(r: &mut Rng, fail_percent: u64) -> Value {
    let delay = if r.chance(20) { r.below(400) } else { 0 };
    if r.chance(fail_percent) {
        json!({ "error": r.pick(&["failed", "timeout", "not_found", "permission_denied"]), "delay_ms": delay })
    } else {
        json!({ "ok": r.below(3), "delay_ms": delay })
    }
}

fn generate(seed: u64) -> Value {
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let turns: Vec<Value> = (0..1 + r.below(10)).map(|i| turn(&mut r, i)).collect();
    let mut tools = BTreeMap::new();
    for (name, fail) in [("read", 10), ("write", 25), ("flaky", 70)] {
        let results: Vec<Value> = (0..1 + r.below(4)).map(|_| result(&mut r, fail)).collect();
        tools.insert(
            name,
            json!({ "results": results, "repeat": r.pick(&["last", "cycle"]), "idempotent": r.chance(50) }),
        );
    }
    let verify = r.chance(30);
    let mut policy = json!({
        "max_steps": 5 + r.below(40),
        "max_model_calls": 2 + r.below(15),
        "max_no_ops": 1 + r.below(3),
        "max_nudges": 1 + r.below(3),
        "max_verification_failures": 1 + r.below(3),
        "on_verification_limit": r.pick(&["abort", "complete"]),
        "verify_completion": verify,
        "max_tool_failures": 1 + r.below(4),
        "max_consecutive_tool_failures": 1 + r.below(4),
        "on_unrecoverable_tool_error": r.pick(&["stop", "exclude"]),
        "max_repeats": 2 + r.below(3),
        "max_empty_responses": 1 + r.below(3),
        "max_model_retries": r.below(4),
        "retry_base_ms": 1 + r.below(100),
        "retry_max_ms": 100 + r.below(2000),
        "seed": r.next() % 1000,
        "final_answer_on_budget": r.chance(30),
    });
    if r.chance(30) {
        policy["deadline_ms"] = json!(50 + r.below(1500));
    }
    if r.chance(15) {
        policy["token_budget"] = json!(100 + r.below(400));
    }
    if r.chance(15) {
        policy["max_tool_calls"] = json!(1 + r.below(8));
    }
    if r.chance(20) {
        policy["completion_requires"] = json!(["write"]);
    }
    let mut scenario = json!({
        "name": format!("sim-{seed}"),
        "task": "A generated task.",
        "policy": policy,
        "model": { "turns": turns, "repeat": "cycle" },
        "tools": tools,
    });
    if verify {
        let verdicts: Vec<Value> = (0..1 + r.below(3))
            .map(|i| json!({ "complete": r.chance(50), "missing": [format!("item {i}")] }))
            .collect();
        scenario["verifier"] = json!({ "verdicts": verdicts, "repeat": "cycle" });
    }
    if r.chance(15) {
        scenario["cancel_after_ms"] = json!(r.below(1000));
    }
    // Drawn last, so the draws above (and the runs they make) stay as they were: `read` declared
    // a poller, its identical results polls bounded by `max_polls`.
    if r.chance(20) {
        scenario["policy"]["pollers"] = json!(["read"]);
        scenario["policy"]["max_polls"] = json!(2 + r.below(3));
    }
    // Drawn after it for the same reason: a budget on output tokens (a cut reply writes 50).
    if r.chance(15) {
        scenario["policy"]["max_output_tokens"] = json!(50 + r.below(100));
    }
    scenario
}

/// Recomputes the counters a run's path determines and compares them with its report.
///
/// The kernel counts what an input is (a tool turn's calls, an empty reply, a refused claim, a
/// verdict) before a run-wide budget guard may divert the step (rule 3: every verification
/// failure counts, on every path); only the reply to the final-answer call is not counted.
/// Model calls are the ones transitions issued, plus the first.
fn check_counters_against_trace(report: &terminus_runtime::Report) -> Result<(), String> {
    let mut want = Stats::default();
    // The first model call is issued when the run starts; every other one by a transition.
    want.model_calls = 1;
    for step in &report.trace {
        if step.rule == Rule::FinalAnswerDone {
            continue;
        }
        if matches!(
            step.rule,
            Rule::EmptyRetry
                | Rule::NoOpContinue
                | Rule::ClaimRefused
                | Rule::ModelRetry
                | Rule::ToolResultsBack
                | Rule::VerdictRejected
                | Rule::FinalAnswerCall
        ) {
            want.model_calls += 1;
        }
        match step.input {
            Input::Turn {
                kind: TurnKind::Tools {
                    runnable, refused, ..
                },
                ..
            } => {
                want.refused_calls += refused;
                // Executions: only when the turn's calls were run (not when a budget stopped
                // the run at that turn).
                if step.rule == Rule::ToolTurn {
                    want.tool_calls += runnable;
                }
            }
            Input::Turn {
                kind: TurnKind::Empty(_),
                ..
            } => want.empty_responses += 1,
            Input::Turn {
                kind: TurnKind::NoOp(_),
                ..
            } => {
                want.no_ops += 1;
                if step.rule == Rule::NoOpContinue {
                    want.continuations += 1;
                }
            }
            Input::Turn {
                kind: TurnKind::Claim { gate, .. },
                ..
            } if gate.refuses() && step.rule == Rule::ClaimRefused => want.nudges += 1,
            Input::Verdict { accepted } => {
                want.verifications += 1;
                if !accepted {
                    want.verification_failures += 1;
                }
            }
            _ => {}
        }
    }
    let s = report.stats;
    let checks = [
        ("model_calls", s.model_calls, want.model_calls),
        ("tool_calls", s.tool_calls, want.tool_calls),
        ("refused_calls", s.refused_calls, want.refused_calls),
        ("nudges", s.nudges, want.nudges),
        ("continuations", s.continuations, want.continuations),
        ("no_ops", s.no_ops, want.no_ops),
        ("empty_responses", s.empty_responses, want.empty_responses),
        ("verifications", s.verifications, want.verifications),
        (
            "verification_failures",
            s.verification_failures,
            want.verification_failures,
        ),
    ];
    for (name, got, want) in checks {
        if got != want {
            return Err(format!("{name} is {got}, the trace says {want}"));
        }
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn generated_scenarios_all_end_within_their_bound_with_consistent_reports() {
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    let mut steps_total = 0u64;
    for seed in 0..RUNS {
        let json = generate(seed);
        let scenario = Scenario::parse(&json.to_string())
            .unwrap_or_else(|e| panic!("seed {seed}: generated an invalid scenario: {e}\n{json}"));
        let policy = scenario.policy().clone();
        let store = MemoryStore::new();
        let id = format!("sim-{seed}");
        let started = Instant::now();
        let report = scenario
            .run()
            .store(Arc::new(store.clone()))
            .execution(id.clone())
            .execute()
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: the run failed: {e}\n{json}"));
        let elapsed_ms = started.elapsed().as_millis();
        let ctx = || format!("seed {seed}: {report:?}\n{json}");

        // Bounded.
        assert!(u64::from(report.steps) <= policy.step_bound(), "{}", ctx());
        let extra = u32::from(policy.final_answer_on_budget);
        assert!(
            report.model_calls <= policy.max_model_calls + extra,
            "{}",
            ctx()
        );
        // The trace is the path: numbered steps, ending in the reported terminal state.
        assert_eq!(report.trace.len(), report.steps as usize, "{}", ctx());
        for (i, step) in report.trace.iter().enumerate() {
            assert_eq!(step.step as usize, i + 1, "{}", ctx());
        }
        let last = report.trace.last().unwrap_or_else(|| panic!("{}", ctx()));
        assert!(last.to.is_terminal(), "{}", ctx());
        assert_eq!(last.rule, report.rule, "{}", ctx());
        assert_eq!(
            report.is_complete(),
            last.to == Phase::Complete,
            "{}",
            ctx()
        );
        // The counters agree with the path taken (independently of the kernel's own checks).
        check_counters_against_trace(&report).unwrap_or_else(|why| panic!("{why}: {}", ctx()));
        // The clock: a run with a deadline or a kill switch ends by then (paused clock, so
        // exactly), and a reason that names one of them had it.
        let cancel_after = json["cancel_after_ms"].as_u64();
        for limit in [policy.deadline_ms, cancel_after].into_iter().flatten() {
            assert!(
                elapsed_ms <= u128::from(limit),
                "ran {elapsed_ms} ms: {}",
                ctx()
            );
        }
        match report.outcome {
            Outcome::Aborted(AbortReason::Cancelled) => {
                assert!(cancel_after.is_some(), "{}", ctx());
            }
            Outcome::Aborted(AbortReason::Deadline) => {
                assert!(policy.deadline_ms.is_some(), "{}", ctx());
            }
            Outcome::Aborted(AbortReason::TokenBudget) => {
                assert!(policy.token_budget.is_some(), "{}", ctx());
            }
            Outcome::Aborted(AbortReason::OutputTokenBudget) => {
                let limit = policy.max_output_tokens.unwrap_or(u64::MAX);
                assert!(report.stats.output_tokens >= limit, "{}", ctx());
            }
            Outcome::Aborted(AbortReason::ToolCallBudget) => {
                let limit = policy.max_tool_calls.unwrap_or(u32::MAX);
                assert!(report.tool_calls <= limit, "{}", ctx());
            }
            _ => {}
        }
        if report.trace.iter().any(|s| s.rule == Rule::FinalAnswerCall) {
            assert!(policy.final_answer_on_budget, "{}", ctx());
        }
        if report.rule == Rule::FinalAnswerDone {
            assert!(
                matches!(report.outcome, Outcome::Aborted(r) if r.is_budget()),
                "{}",
                ctx()
            );
        }
        // The report's fields are its counters.
        let s = report.stats;
        assert_eq!(
            (
                report.steps,
                report.model_calls,
                report.tool_calls,
                report.nudges
            ),
            (s.steps, s.model_calls, s.tool_calls, s.nudges),
            "{}",
            ctx()
        );
        // Replaying the journal rebuilds exactly these counters, and the kernel's invariants
        // (every counter within its limit, the reason agreeing with the counters) hold.
        let records: Vec<Record> = store
            .records(&id)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .iter()
            .map(|r| Record::clone(r))
            .collect();
        assert_eq!(report.entries, records.len() as u64, "{}", ctx());
        assert_eq!(report.duplicates_prevented, 0, "{}", ctx());
        let recovered =
            recover(policy.clone(), records).unwrap_or_else(|e| panic!("{e}: {}", ctx()));
        assert_eq!(recovered.machine.stats(), report.stats, "{}", ctx());
        assert_eq!(
            recovered.machine.outcome(),
            Some(report.outcome),
            "{}",
            ctx()
        );
        if let Err(why) = check_machine(&recovered.machine) {
            panic!("{why}: {}", ctx());
        }

        *reasons.entry(report.outcome.to_string()).or_default() += 1;
        steps_total += u64::from(report.steps);
    }
    let runs: u64 = reasons.values().sum();
    assert_eq!(runs, RUNS);
    eprintln!("simulation: {runs} generated runs, {steps_total} steps in all; stop reasons:");
    for (reason, n) in &reasons {
        eprintln!("  {n:>5}  {reason}");
    }
    // The generator is not degenerate: it reaches every stop reason the kernel defines.
    let unreached: Vec<String> = CompleteReason::ALL
        .into_iter()
        .map(Outcome::Complete)
        .chain(AbortReason::ALL.into_iter().map(Outcome::Aborted))
        .map(|o| o.to_string())
        .filter(|o| !reasons.contains_key(o))
        .collect();
    assert!(
        unreached.is_empty(),
        "no generated run ends {unreached:?}: {reasons:?}"
    );
}
