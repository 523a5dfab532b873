//! A multi-agent plan run in process: two scripted agents feed a third (its task quotes their
//! results), and one of them fails and is skipped with its degraded result, so the plan ends
//! `degraded` instead of failing.
//!
//! `cargo run -p terminus-examples --example plan`

use serde_json::json;
use std::path::Path;
use terminus_orchestrator::{Context, Orchestration, Plan, Status};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let plan = json!({
        "name": "site-audit",
        "limits": { "max_phases": 10, "max_concurrency": 2 },
        "agents": [
            { "id": "crawl", "depends_on": [],
              "scenario": { "task": "List the pages.",
                            "model": { "turns": [ { "text": "/, /about, /pricing" } ] } } },
            { "id": "speed", "depends_on": [], "on_error": "skip", "retryable": false,
              "degraded_result": "no speed data",
              "scenario": { "task": "Measure the pages.",
                            "model": { "turns": [ { "error": "auth" } ] } } },
            { "id": "report", "depends_on": ["crawl", "speed"],
              "scenario": { "task": "Write the audit of {crawl} with {speed}.",
                            "model": { "turns": [ { "text": "Audit written." } ] } } }
        ]
    });
    // Where relative scenario files would be read from, the environment the plan's limits may
    // come from (none here), how a live agent's config would be checked (none here), and how a
    // scenario is read: the orchestrator knows no program format, `terminus-scenario` does.
    let no_env = |_: &str| None;
    let no_live =
        |_: &Path, _: Option<u64>| Err("this example runs scripted agents only".to_owned());
    let cx = Context {
        base: Path::new("."),
        env: &no_env,
        live: &no_live,
        scenario: &terminus_scenario::plan::script,
        host_agents: false,
    };
    let plan = match Plan::parse(&plan.to_string(), &cx) {
        Ok(plan) => plan,
        Err(problems) => {
            for p in problems {
                eprintln!("{p}");
            }
            std::process::exit(2);
        }
    };
    // The scenario side runs what it read.
    let report = Orchestration::new(plan, "audit-1")
        .launcher(std::sync::Arc::new(
            terminus_scenario::plan::ScenarioLauncher,
        ))
        .execute()
        .await
        .expect("the plan runs");
    for agent in &report.agents {
        println!(
            "{:<7} {:?} after {} attempt(s): {}",
            agent.id,
            agent.status,
            agent.attempts,
            agent.result.clone().unwrap_or_default()
        );
    }
    println!("plan: {}", report.reason);
    assert_eq!(report.outcome, "complete");
    assert_eq!(report.agents[1].status, Status::Degraded);
    assert_eq!(report.agents[2].status, Status::Complete);
}
