//! Simulation: thousands of generated (not hand-written) scenarios, with model errors, empty and
//! truncated replies, slow and failing tools, verifier rejections, deadlines and cancellations,
//! run through the scenario adapters and the runtime under tokio's paused clock. Every run must
//! end within its policy's step bound with a consistent report: its counters are the ones a
//! replay of its journal rebuilds, its reason agrees with them (the kernel's invariants), and its
//! trace is its path.
//!
//! Reproduce one run: the failing message prints its seed and scenario JSON.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use terminus_kernel::invariants::check_machine;
use terminus_kernel::{Record, recover};
use terminus_runtime::{MemoryStore, Store};
use terminus_scenario::Scenario;

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
    scenario
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
        let report = scenario
            .run()
            .store(Arc::new(store.clone()))
            .execution(id.clone())
            .execute()
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: the run failed: {e}\n{json}"));
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
    // The generator is not degenerate: it reaches most of the stop reasons.
    assert!(
        reasons.len() >= 12,
        "only {} distinct stop reasons: {reasons:?}",
        reasons.len()
    );
}
