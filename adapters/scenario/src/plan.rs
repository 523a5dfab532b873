//! Scenario agents of multi-agent plans (`terminus-orchestrator`, feature `plan`): the
//! orchestrator knows no program format, so a host gives it [`script`] to read a plan agent's
//! `scenario` ([`Context::scenario`](terminus_orchestrator::Context::scenario)) and
//! [`ScenarioLauncher`] to run it.

use crate::Scenario;
use async_trait::async_trait;
use serde_json::json;
use std::any::Any;
use std::sync::Arc;
use terminus_orchestrator::{Launch, Launcher, Own, Program, Script, ScriptError};
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
