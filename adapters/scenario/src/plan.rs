//! Scenario agents of multi-agent plans (`terminus-orchestrator`, feature `plan`): the
//! orchestrator knows no program format, so a host gives it [`script`] to read a plan agent's
//! `scenario` ([`Context::scenario`](terminus_orchestrator::Context::scenario)) and
//! [`ScenarioLauncher`] to run it.

use crate::Scenario;
use async_trait::async_trait;
use serde_json::json;
use std::any::Any;
use std::path::Path;
use std::sync::Arc;
use terminus_orchestrator::{
    Context, Launch, Launcher, LocalPlan, Own, Plan, Program, Script, ScriptError,
};
use terminus_runtime::{Report, RunError, RuntimeConfig};

impl Script for Scenario {
    fn task(&self) -> &str {
        Scenario::task(self)
    }

    fn own(&self) -> Own {
        let p = self.policy();
        Own {
            model_calls: p.max_model_calls,
            tokens: p.token_budget,
            deadline_ms: p.deadline_ms,
        }
    }
}

/// Reads a plan agent's scenario, its JSON text, as a [`Context::scenario`] reader: the error
/// names the JSON path in the scenario's own text.
///
/// [`Context::scenario`]: terminus_orchestrator::Context::scenario
pub fn script(text: &str) -> Result<Arc<dyn Script>, ScriptError> {
    match Scenario::parse(text) {
        Ok(scenario) => Ok(Arc::new(scenario)),
        Err(e) => Err(ScriptError {
            message: e.to_string(),
            path: e.path,
            problem: e.problem,
        }),
    }
}

/// Runs scenario agents (read by [`script`]); refuses live ones (the command line runs those).
#[derive(Debug, Clone, Copy, Default)]
pub struct ScenarioLauncher;

#[async_trait]
impl Launcher for ScenarioLauncher {
    async fn launch(&self, l: Launch) -> Result<Report, RunError> {
        let scenario = match &l.agent.program {
            Program::Scenario(script) => (script.as_ref() as &dyn Any).downcast_ref::<Scenario>(),
            Program::Live { .. } | Program::Host => None,
        };
        let Some(scenario) = scenario else {
            return Err(RunError::Fault(terminus_runtime::Fault::invalid_input(
                format!(
                    "agent `{}` is not a scenario agent; this host runs scenario agents only",
                    l.agent.id
                ),
            )));
        };
        if l.resume {
            return scenario
                .resume(l.execution)
                .store(l.store)
                .kill_switch(l.kill)
                .config(l.config)
                .execute()
                .await;
        }
        let mut policy = scenario.policy().clone();
        l.grant.apply(&mut policy);
        let mut run = scenario
            .run_as(l.task, policy)
            .execution(l.execution)
            .store(l.store)
            .kill_switch(l.kill)
            .config(RuntimeConfig {
                system_prompt: scenario.file().system_prompt.clone(),
                ..l.config
            });
        if l.keep_program {
            run = run.host_data(json!({ "scenario": scenario.file() }));
        }
        run.execute().await
    }
}

/// Why a host's plan cannot run: every problem on its own line (`PATH: PROBLEM`), as
/// `terminus orchestrate` prints them after the file's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub Vec<String>);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

fn refuse_live(_: &Path, _: Option<u64>) -> Result<Own, String> {
    Err(
        "a live agent config runs under `terminus orchestrate`; here give the agent a \
         function of your own instead"
            .into(),
    )
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A plan run for a host that runs its own agents (the Node and Python packages): the plan's
/// JSON text (file scenarios relative to `base`), validated as `terminus orchestrate`
/// validates it, its scenario agents read here, an agent with neither `scenario` nor `agent`
/// the host's own, a live `agent` config refused. `execution` defaults to the plan's name;
/// `progress` (what [`LocalPlan::progress`] gave) goes on from a crash.
pub fn local(
    text: &str,
    base: &Path,
    execution: Option<&str>,
    progress: Option<&str>,
) -> Result<LocalPlan, Refused> {
    let cx = Context {
        base,
        env: &env,
        live: &refuse_live,
        scenario: &script,
        host_agents: true,
    };
    let plan = Plan::parse(text, &cx)
        .map_err(|problems| Refused(problems.iter().map(ToString::to_string).collect()))?;
    let execution = execution.map_or_else(|| plan.name.clone(), str::to_owned);
    match progress {
        None => Ok(LocalPlan::new(plan, &execution)),
        Some(text) => {
            let value: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| Refused(vec![format!("progress: not JSON: {e}")]))?;
            LocalPlan::restore(plan, &execution, &value)
                .map_err(|e| Refused(vec![format!("progress: {e}")]))
        }
    }
}

/// Runs a scenario attempt a [`LocalPlan`] handed out ([`LocalPlan::scenario_launch`]) on a
/// runtime of its own, blocking (a binding calls it off its event loop): its report.
pub fn run_launch(launch: Launch) -> Result<Report, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    runtime
        .block_on(ScenarioLauncher.launch(launch))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_reads_as_a_script_with_its_task_and_limits() {
        let text = r#"{ "task": "t", "policy": { "max_model_calls": 4, "token_budget": 900 },
                        "model": { "turns": [ { "text": "ok" } ] } }"#;
        let script = script(text).expect("a valid scenario");
        assert_eq!(script.task(), "t");
        assert_eq!(script.own().model_calls, 4);
        assert_eq!(script.own().tokens, Some(900));
        assert!((script.as_ref() as &dyn Any).is::<Scenario>());
    }

    #[test]
    fn a_bad_scenario_names_its_path() {
        let e = script(r#"{ "task": "t", "model": { "turns": [ { "txt": "x" } ] } }"#)
            .expect_err("a typo");
        assert!(e.path.starts_with("$.model.turns[0]"), "{e:?}");
        assert!(e.message.starts_with(&e.path), "{e:?}");
        assert!(!e.problem.is_empty());
    }
}
