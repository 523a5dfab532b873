//! The orchestrator knows no program format: the host's reader gives each scenario agent its
//! task and limits (its errors' paths appended to the agent's), and the host's launcher runs it.

use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use terminus_orchestrator::{
    Context, Orchestration, Own, Plan, Problem, Program, Script, ScriptError, Status,
};

/// A format of the host's own: `{"steps": N}`, N at most 3.
#[derive(Debug)]
struct Steps(u64);

impl Script for Steps {
    fn task(&self) -> &str {
        "count the steps"
    }

    fn own(&self) -> Own {
        Own {
            model_calls: 7,
            tokens: Some(self.0 * 100),
            deadline_ms: None,
        }
    }
}

fn read(text: &str) -> Result<Arc<dyn Script>, ScriptError> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| ScriptError {
        path: "$".into(),
        problem: e.to_string(),
        message: format!("$: {e}"),
    })?;
    match value.get("steps").and_then(serde_json::Value::as_u64) {
        Some(n) if n <= 3 => Ok(Arc::new(Steps(n))),
        _ => Err(ScriptError {
            path: "$.steps".into(),
            problem: "must be a number up to 3".into(),
            message: "$.steps: must be a number up to 3".into(),
        }),
    }
}

fn parse(plan: &serde_json::Value) -> Result<Plan, Vec<String>> {
    let no_env = |_: &str| None;
    let no_live = |_: &Path, _: Option<u64>| Err("no live agents".to_owned());
    let cx = Context {
        base: Path::new("."),
        env: &no_env,
        live: &no_live,
        scenario: &read,
        host_agents: false,
    };
    Plan::parse(&plan.to_string(), &cx).map_err(|ps| ps.iter().map(Problem::to_string).collect())
}

#[test]
fn the_hosts_reader_gives_limits_and_its_errors_paths_extend_the_agents() {
    let plan =
        parse(&json!({ "agents": [ { "id": "a", "scenario": { "steps": 2 } } ] })).expect("valid");
    assert_eq!(plan.nodes[0].own.model_calls, 7);
    assert_eq!(plan.nodes[0].own.tokens, Some(200));
    let Program::Scenario(script) = &plan.agents[0].program else {
        panic!("a scenario agent");
    };
    assert_eq!(script.task(), "count the steps");
    let problems = parse(&json!({ "agents": [
        { "id": "a", "scenario": { "steps": 2 } },
        { "id": "b", "scenario": { "steps": 9 } } ] }))
    .expect_err("invalid");
    assert_eq!(
        problems,
        ["$.agents[1].scenario.steps: must be a number up to 3"]
    );
}

#[tokio::test]
async fn an_orchestration_given_no_launcher_refuses_its_agents() {
    let plan =
        parse(&json!({ "agents": [ { "id": "a", "scenario": { "steps": 1 } } ] })).expect("valid");
    let report = Orchestration::new(plan, "no-launcher")
        .execute()
        .await
        .expect("the plan ends");
    assert_ne!(report.exit_code(), 0);
    assert_eq!(report.agents[0].status, Status::Failed);
    assert_eq!(report.agents[0].result, None);
}
