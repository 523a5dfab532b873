//! Scheduling overhead of a 10,000-agent random DAG of trivial scenarios (issue: under 20 µs
//! per agent beyond the agents' own runs).
//!
//! In one process, alternating, several rounds of:
//! - baseline: every agent's scenario run on its own, one after another, with the same task,
//!   policy and in-memory store kind the orchestrator gives it;
//! - plan: the same agents as one plan through [`Orchestration`] (`max_concurrency` 1, so the
//!   runs are serial as in the baseline), breakers and dependency results included.
//!
//! The overhead per agent is (plan − baseline) / agents, reported as the median over rounds,
//! with the ratio plan / baseline. A third figure is the scheduler alone (no runs at all).
//!
//! `cargo bench -p terminus-orchestrator --bench plan` (`-- --agents N --rounds R`).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use terminus_orchestrator::{
    Command, Context, Input, Orchestration, Plan, Ran, Scheduler, Usage, fill,
};
use terminus_runtime::MemoryStore;

/// xorshift64*: the same DAG every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn plan_json(agents: usize, concurrency: u32) -> serde_json::Value {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let list: Vec<serde_json::Value> = (0..agents)
        .map(|i| {
            let mut deps: Vec<String> = Vec::new();
            if i > 0 {
                for _ in 0..rng.next() % 4 {
                    let d = format!("a{}", rng.next() % i as u64);
                    if !deps.contains(&d) {
                        deps.push(d);
                    }
                }
            }
            let task = deps
                .iter()
                .map(|d| format!("{{{d}}}"))
                .collect::<Vec<_>>()
                .join(" ");
            serde_json::json!({
                "id": format!("a{i}"),
                "depends_on": deps,
                "task": format!("step {i}: {task}"),
                "scenario": { "task": "t", "model": { "turns": [ { "text": "ok" } ] } }
            })
        })
        .collect();
    serde_json::json!({
        "name": "bench",
        "limits": { "max_concurrency": concurrency, "max_phases": 1000,
                    "execution_timeout_ms": 3_600_000 },
        "agents": list
    })
}

fn plan(json: &serde_json::Value) -> Plan {
    let no_env = |_: &str| None;
    let no_live = |_: &Path, _: Option<u64>| Err("no live agents".to_owned());
    let cx = Context {
        base: Path::new("."),
        env: &no_env,
        live: &no_live,
        scenario: &terminus_scenario::plan::script,
        host_agents: false,
    };
    Plan::parse(&json.to_string(), &cx).unwrap_or_else(|p| panic!("invalid bench plan: {p:?}"))
}

/// Every agent's own run, serially, as the orchestrator would start it.
async fn baseline(plan: &Plan) -> Duration {
    let store = Arc::new(MemoryStore::new());
    let results: Vec<(String, Option<serde_json::Value>)> = plan
        .agents
        .iter()
        .map(|a| (a.id.clone(), Some(serde_json::Value::String("ok".into()))))
        .collect();
    let start = Instant::now();
    for (i, agent) in plan.agents.iter().enumerate() {
        let terminus_orchestrator::Program::Scenario(script) = &agent.program else {
            panic!("scenario agents only");
        };
        let scenario = (script.as_ref() as &dyn std::any::Any)
            .downcast_ref::<terminus_scenario::Scenario>()
            .expect("read by terminus_scenario::plan::script");
        let deps: Vec<(&str, Option<&serde_json::Value>)> = plan.nodes[i]
            .deps
            .iter()
            .map(|&d| (results[d].0.as_str(), results[d].1.as_ref()))
            .collect();
        let task = fill(agent.task.as_deref().unwrap_or(""), &deps);
        let mut policy = scenario.policy().clone();
        policy.deadline_ms = Some(300_000);
        let report = scenario
            .run_as(task, policy)
            .execution(format!("bench/{}/1", agent.id))
            .store(store.clone())
            .execute()
            .await
            .expect("a trivial run");
        assert!(report.is_complete());
    }
    start.elapsed()
}

async fn orchestrated(plan: Plan) -> Duration {
    let n = plan.agents.len();
    let start = Instant::now();
    let report = Orchestration::new(plan, "bench")
        .launcher(std::sync::Arc::new(
            terminus_scenario::plan::ScenarioLauncher,
        ))
        .execute()
        .await
        .expect("the plan runs");
    let took = start.elapsed();
    assert_eq!(report.reason.name(), "all_complete");
    assert_eq!(report.agents.len(), n);
    took
}

/// The scheduler alone: every attempt completes at once.
fn scheduler_only(plan: &Plan) -> Duration {
    let start = Instant::now();
    let mut s = Scheduler::new(plan.nodes.clone(), plan.limits);
    let mut running = Vec::new();
    loop {
        let mut done = false;
        for c in s.poll(0) {
            match c {
                Command::Start { agent, .. } => running.push(agent),
                Command::Done(_) => done = true,
                _ => {}
            }
        }
        if done {
            break;
        }
        let agent = running.pop().expect("something runs");
        s.feed(
            0,
            Input::Ended {
                agent,
                ran: Ran::Complete,
                used: Usage::default(),
            },
        );
    }
    start.elapsed()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let agents = arg("--agents", 10_000);
    let rounds = arg("--rounds", 5);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let json = plan_json(agents, 1);
    let template = plan(&json);
    let levels = template.nodes.iter().map(|n| n.level).max().unwrap_or(0);
    let edges: usize = template.nodes.iter().map(|n| n.deps.len()).sum();
    println!("plan: {agents} agents, {edges} dependencies, {levels} levels; {rounds} rounds");
    let (mut base, mut orch, mut sched) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let b = rt.block_on(baseline(&template));
        let o = rt.block_on(orchestrated(template.clone()));
        let s = scheduler_only(&template);
        base.push(b.as_secs_f64());
        orch.push(o.as_secs_f64());
        sched.push(s.as_secs_f64());
    }
    let per = |s: f64| s * 1e6 / agents as f64;
    let overheads: Vec<f64> = orch.iter().zip(&base).map(|(o, b)| per(o - b)).collect();
    let ratios: Vec<f64> = orch.iter().zip(&base).map(|(o, b)| o / b).collect();
    println!(
        "baseline (agents' own runs): median {:.1} µs/agent",
        per(median(base.clone()))
    );
    println!(
        "plan (orchestrated):         median {:.1} µs/agent",
        per(median(orch.clone()))
    );
    println!(
        "overhead beyond the runs:    median {:.1} µs/agent (rounds: {}), plan/baseline {:.3}",
        median(overheads.clone()),
        overheads
            .iter()
            .map(|o| format!("{o:.1}"))
            .collect::<Vec<_>>()
            .join(" "),
        median(ratios)
    );
    println!(
        "scheduler alone:             median {:.2} µs/agent",
        per(median(sched))
    );
}
