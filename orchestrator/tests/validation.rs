//! Validation reports every problem of a plan together, each with its JSON path, before
//! anything runs; a valid plan's levels, timeouts and limits are what the contract says.

use serde_json::json;
use std::path::Path;
use terminus_orchestrator::{Context, Plan, Problem};

fn check(json: serde_json::Value, env: &[(&str, &str)]) -> Result<Plan, Vec<String>> {
    let read = |k: &str| {
        env.iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| (*v).to_owned())
    };
    let live = |p: &Path, _: Option<u64>| Err(format!("{}: no such config", p.display()));
    let cx = Context {
        base: Path::new("/plans"),
        env: &read,
        live: &live,
        scenario: &terminus_scenario::plan::script,
        host_agents: false,
    };
    Plan::parse(&json.to_string(), &cx).map_err(|ps| ps.iter().map(Problem::to_string).collect())
}

fn scenario() -> serde_json::Value {
    json!({ "task": "t", "model": { "turns": [ { "text": "ok" } ] } })
}

#[test]
fn every_problem_is_reported_together_with_its_path() {
    let plan = json!({
        "limits": { "max_phases": 0 },
        "agents": [
            { "id": "collect", "depends_on": ["report"], "scenario": scenario() },
            { "id": "analyse", "depends_on": ["collect", "ghost"], "scenario": scenario() },
            { "id": "report", "depends_on": ["analyse"], "scenario": scenario() },
            { "id": "collect", "scenario": scenario() },
            { "id": "maybe", "on_error": "skip", "scenario": scenario() },
            { "id": "needs", "depends_on": ["maybe"], "task": "use {maybe} and {report}",
              "scenario": scenario() },
            { "id": "both", "scenario": scenario(), "agent": "a.toml" },
            { "id": "none" },
            { "id": "live", "agent": "missing.toml", "task": "go" },
            { "id": "bad scenario", "estimated_duration_ms": 0,
              "scenario": { "task": "t", "model": { "turns": [ { "txt": "typo" } ] } } },
            { "id": "scaled", "scale": 3, "scenario": scenario() }
        ]
    });
    let problems = check(plan, &[("AGENT_MAX_RETRIES", "many")]).expect_err("invalid");
    assert_eq!(
        problems,
        [
            "$.limits.max_phases: must be in 1..=1000, got 0",
            "environment variable AGENT_MAX_RETRIES (for limits.agent_max_retries): `many` is \
             not a whole number",
            "$.agents[3].id: duplicate id `collect` (first at $.agents[0])",
            "$.agents[9].id: `bad scenario` is not an id: use 1 to 64 letters, digits, `_`, `-` \
             or `.`",
            "$.agents[1].depends_on[1]: no agent `ghost` in the plan",
            "$.agents[5].depends_on[0]: unsatisfiable: `needs` (on_error fail) depends on \
             `maybe`, which may be skipped (on_error skip) without a degraded_result; give \
             `maybe` a degraded_result or make `needs` on_error skip",
            "$.agents[5].task: `{report}` names agent `report`, which `needs` does not depend \
             on: add it to depends_on",
            "$.agents[6]: give either `scenario` or `agent`, not both",
            "$.agents[7]: give a `scenario` (inline or a file) or a live `agent` config",
            "$.agents[8].agent: /plans/missing.toml: no such config",
            "$.agents[9].estimated_duration_ms: must be at least 1",
            "$.agents[9].scenario.model.turns[0].txt: unknown field `txt`, expected one of \
             `text`, `tool_calls`, `needs_more_work`, `usage`, `finish`, `reasoning`, `error`, \
             `retry_after_ms`, `message`, `sees`, `not_sees`, `cancelled`",
            "$.agents[10].scale: scales a live agent's policy: a scenario says its own in its \
             \"scale\"",
            "cycle: collect -> analyse -> report -> collect",
        ]
    );
}

#[test]
fn a_json_error_names_its_path_and_position() {
    let problems = check(json!({ "agents": [ { "id": "a", "retry": true } ] }), &[])
        .expect_err("unknown field");
    assert_eq!(problems.len(), 1);
    assert!(
        problems[0].starts_with("$.agents[0].retry: unknown field `retry`"),
        "{problems:?}"
    );
}

#[test]
fn a_valid_plan_has_levels_timeouts_and_limits_from_plan_environment_and_default() {
    let plan = check(
        json!({
            "limits": { "max_concurrency": 3 },
            "agents": [
                { "id": "a", "scenario": scenario(), "estimated_duration_ms": 20_000 },
                { "id": "b", "depends_on": ["a"], "scenario": scenario() },
                { "id": "c", "depends_on": ["a", "b"], "task": "{a} then {b}",
                  "scenario": scenario() }
            ]
        }),
        &[("ORCHESTRATOR_MAX_PHASES", "7")],
    )
    .expect("valid");
    let levels: Vec<u32> = plan.nodes.iter().map(|n| n.level).collect();
    assert_eq!(levels, [1, 2, 3]);
    assert_eq!(plan.nodes[0].timeout_ms, 100_000);
    assert_eq!(plan.nodes[1].timeout_ms, 300_000);
    assert_eq!(plan.limits.max_concurrency, 3);
    assert_eq!(plan.limits.max_phases, 7);
    assert_eq!(plan.limits.agent_max_retries, 3);
}
