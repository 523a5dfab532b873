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
    Context, GenerateFile, Generator, Launch, Launcher, LocalPlan, Own, Plan, PlanReport, Program,
    Reply, Script, ScriptError, Step,
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

/// What validation reads for a host that runs its own agents: scenarios read here, an agent
/// with neither `scenario` nor `agent` the host's own, a live `agent` config refused.
fn host_context(base: &Path) -> Context<'_> {
    Context {
        base,
        env: &env,
        live: &refuse_live,
        scenario: &script,
        host_agents: true,
    }
}

/// A plan written by a model, for a host that runs its own agents and calls its own model (the
/// Node and Python packages' `generatePlan` / `generate_plan`): [`Generator`] with the host's
/// context, spoken in JSON.
#[derive(Debug)]
pub struct HostGenerator {
    generator: Generator,
    base: std::path::PathBuf,
    /// The last step, once the generation is over.
    ended: Option<serde_json::Value>,
}

impl HostGenerator {
    /// The generation of a plan for `task` from the generator file `text` (JSON; file
    /// scenarios relative to `base`), checked before the model is asked: every problem on its
    /// own line (`PATH: PROBLEM`).
    pub fn new(text: &str, base: &Path, task: &str) -> Result<HostGenerator, Refused> {
        let file: GenerateFile = terminus_runtime::json_path::read(text).map_err(|e| {
            Refused(vec![match e.position {
                Some((line, column)) => {
                    format!("{}: {} (line {line}, column {column})", e.path, e.problem)
                }
                None => format!("{}: {}", e.path, e.problem),
            }])
        })?;
        let generator = Generator::new(file, task, &host_context(base))
            .map_err(|problems| Refused(problems.iter().map(ToString::to_string).collect()))?;
        Ok(HostGenerator {
            generator,
            base: base.to_path_buf(),
            ended: None,
        })
    }

    /// What to do next: `{"ask": [{"role", "content"}...]}` (call the model with these
    /// messages and give its reply to [`HostGenerator::answer`]), `{"run": PLAN, "generation"}`
    /// (the plan file to run, as an object) or `{"no_plan": REPORT, "generation"}` (no written
    /// plan was valid and there is no fallback: the report of the plan that never ran, as
    /// `execution`).
    pub fn step(&mut self, execution: &str) -> serde_json::Value {
        if let Some(end) = &self.ended {
            return end.clone();
        }
        let plan = match self.generator.step() {
            Step::Ask(messages) => {
                let messages: Vec<serde_json::Value> = messages
                    .iter()
                    .map(|m| json!({ "role": m.role, "content": m.content }))
                    .collect();
                return json!({ "ask": messages });
            }
            Step::Run(plan) => Some(plan.file),
            Step::NoPlan => None,
        };
        let generation = self.generator.generation();
        let end = match plan {
            Some(file) => json!({ "run": file, "generation": generation }),
            None => {
                let name = self.generator.file().name.clone();
                // Counted (in `terminus_plans_total`) here, once.
                let report = PlanReport::no_plan(execution, &name, generation.clone());
                json!({ "no_plan": report, "generation": generation })
            }
        };
        self.ended = Some(end.clone());
        end
    }

    /// The model's reply to the last `ask`: `{"text": TEXT}`, `{"text": TEXT, "cut": true}`
    /// (the output limit cut it) or `{"error": TEXT}` (the call failed).
    pub fn answer(&mut self, reply: &serde_json::Value) -> Result<(), String> {
        let text = |key: &str| reply.get(key).and_then(serde_json::Value::as_str);
        let reply = match (text("text"), text("error")) {
            (Some(t), None)
                if reply.get("cut").and_then(serde_json::Value::as_bool) == Some(true) =>
            {
                Reply::Cut(t)
            }
            (Some(t), None) => Reply::Text(t),
            (None, Some(e)) => Reply::Failed(e),
            _ => {
                return Err(
                    "reply: give `text` (a string, with `cut`: true when the output limit cut it) \
                     or `error` (a string)"
                        .into(),
                );
            }
        };
        self.generator.answer(reply, &host_context(&self.base));
        Ok(())
    }
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
    let plan = Plan::parse(text, &host_context(base))
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

    /// A host that keeps no journal (the Node and Python packages) keeps a scenario agent's
    /// result with its progress: a restored plan hands it to the dependents.
    #[test]
    fn a_scenario_agents_result_survives_a_restore_without_a_journal() {
        let plan = r#"{ "name": "p", "agents": [
            { "id": "a", "scenario": { "task": "t", "model": { "turns": [ { "text": "forty-two" } ] } } },
            { "id": "b", "depends_on": ["a"], "task": "Use {a}",
              "scenario": { "task": "t", "model": { "turns": [ { "text": "used" } ] } } } ] }"#;
        let mut run = local(plan, Path::new("."), Some("x"), None).expect("a valid plan");
        let mut started = Vec::new();
        while let Some(act) = run.next(0, 0) {
            if act["act"] == "start" {
                started.push(act["index"].as_u64().expect("an index") as usize);
            }
        }
        assert_eq!(started, [0]);
        let launch = run.scenario_launch(0).expect("a scenario attempt");
        let report = run_launch(launch).expect("a report");
        let outcome = json!({ "report": report });
        run.finished(0, &outcome).expect("in turn");
        while run.next(1, 0).is_some() {}
        // The process dies here: `b` was started, never finished.
        let progress = run.progress().to_string();
        let mut again = local(plan, Path::new("."), Some("x"), Some(&progress)).expect("restored");
        let mut tasks = Vec::new();
        while let Some(act) = again.next(2, 0) {
            if act["act"] == "start" {
                tasks.push(act["task"].as_str().unwrap_or_default().to_owned());
            }
        }
        assert_eq!(tasks, ["Use forty-two"], "{progress}");
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
