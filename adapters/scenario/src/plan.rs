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
    Context, GenerateFile, Generator, Launch, Launcher, LocalPlan, Own, Plan, PlanJournal,
    PlanReport, Program, Reply, Script, ScriptError, Step,
};
use terminus_runtime::{Report, RunError, RuntimeConfig};
use terminus_store::Durability;

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
    /// `execution`, by default the generator file's name).
    pub fn step(&mut self, execution: Option<&str>) -> serde_json::Value {
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
                let report =
                    PlanReport::no_plan(execution.unwrap_or(&name), &name, generation.clone());
                json!({ "no_plan": report, "generation": generation })
            }
        };
        self.ended = Some(end.clone());
        end
    }

    /// How the host's model call for the last `ask` ended: `{"output": OUTPUT}`, what the
    /// host's model function gave (the reply's text, or `{"text", "cut": true}` when the output
    /// limit cut it), or `{"error": TEXT}` (the call failed). An output of another shape is a
    /// failed call, named.
    pub fn answer(&mut self, ended: &serde_json::Value) -> Result<(), String> {
        use serde_json::Value;
        let reply = match (ended.get("output"), ended.get("error")) {
            (None, Some(Value::String(e))) => Reply::Failed(e),
            (output, None) => match output.unwrap_or(&Value::Null) {
                Value::String(t) => Reply::Text(t),
                Value::Object(o) => match (o.get("text"), o.get("cut")) {
                    (Some(Value::String(t)), Some(Value::Bool(true))) => Reply::Cut(t),
                    (Some(Value::String(t)), None | Some(Value::Bool(false))) => Reply::Text(t),
                    _ => Reply::Failed(NOT_A_REPLY),
                },
                _ => Reply::Failed(NOT_A_REPLY),
            },
            _ => {
                return Err(
                    "how the call ended: give `output` (what the model function gave) or \
                     `error` (a string)"
                        .into(),
                );
            }
        };
        self.generator.answer(reply, &host_context(&self.base));
        Ok(())
    }
}

/// A model function's output that is not a reply.
const NOT_A_REPLY: &str =
    "the model function gave neither the reply's text nor {text, cut} (cut a boolean)";

/// A plan run for a host that runs its own agents (the Node and Python packages): the plan's
/// JSON text (file scenarios relative to `base`), validated as `terminus orchestrate`
/// validates it, its scenario agents read here, an agent with neither `scenario` nor `agent`
/// the host's own, a live `agent` config refused. `functions` names the agents the host gave a
/// function: each must be an agent of the plan, and every agent of the host's own must have
/// one. `execution` defaults to the plan's name; `progress` (what [`LocalPlan::progress`]
/// gave) goes on from a crash.
pub fn local(
    text: &str,
    base: &Path,
    execution: Option<&str>,
    progress: Option<&str>,
    functions: &[String],
) -> Result<LocalPlan, Refused> {
    let plan = host_plan(text, base, functions)?;
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

/// A plan's progress in a journal store ([`PlanJournal`]) for a host without a tokio runtime
/// (the Node and Python packages): opened and written blocking, on a runtime of its own.
pub struct HostJournal {
    runtime: tokio::runtime::Runtime,
    journal: PlanJournal,
}

impl HostJournal {
    /// Writes the cells [`LocalPlan::take_changes`] gave, each read back, blocking.
    pub fn save(&mut self, changes: Vec<(String, serde_json::Value)>) -> Result<(), String> {
        self.runtime
            .block_on(self.journal.save(changes))
            .map_err(|e| format!("the journal: {e}"))
    }
}

/// [`local`] with its progress in the journal `target` (a SQLite file, created if missing, or a
/// `postgres://` URL), under the keys `terminus orchestrate --journal` uses: it goes on from
/// what the journal keeps of `execution` (nothing that completed runs again, the breakers are
/// as they were, a plan that ended gives its report). Blocking: it opens the journal.
pub fn journaled(
    text: &str,
    base: &Path,
    execution: Option<&str>,
    functions: &[String],
    target: &str,
) -> Result<(LocalPlan, HostJournal), Refused> {
    let plan = host_plan(text, base, functions)?;
    let execution = execution.map_or_else(|| plan.name.clone(), str::to_owned);
    let refused = |e: String| Refused(vec![format!("journal `{target}`: {e}")]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| refused(format!("cannot start a runtime: {e}")))?;
    let (journal, kept) = runtime
        .block_on(async {
            let store = terminus_store::open(target, Durability::default())
                .await
                .map_err(|e| e.to_string())?;
            PlanJournal::open(store, &plan, &execution)
                .await
                .map_err(|e| e.to_string())
        })
        .map_err(refused)?;
    let run = match kept {
        None => LocalPlan::new(plan, &execution),
        Some(kept) => LocalPlan::restore(plan, &execution, &kept).map_err(refused)?,
    };
    Ok((run, HostJournal { runtime, journal }))
}

/// A host's plan run ([`local`]), its progress kept in the journal `journal` when one is given
/// ([`journaled`]; then `progress` must not be: the journal keeps it).
pub fn host_run(
    text: &str,
    base: &Path,
    execution: Option<&str>,
    progress: Option<&str>,
    functions: &[String],
    journal: Option<&str>,
) -> Result<(LocalPlan, Option<HostJournal>), Refused> {
    match (progress, journal) {
        (Some(_), Some(_)) => Err(Refused(vec![
            "journal: give it or `progress`, not both: the journal keeps the progress".into(),
        ])),
        (progress, None) => Ok((local(text, base, execution, progress, functions)?, None)),
        (None, Some(target)) => journaled(text, base, execution, functions, target)
            .map(|(run, journal)| (run, Some(journal))),
    }
}

/// The plan `text` for a host whose functions are the agents `functions` (see [`local`]).
fn host_plan(text: &str, base: &Path, functions: &[String]) -> Result<Plan, Refused> {
    let plan = Plan::parse(text, &host_context(base))
        .map_err(|problems| Refused(problems.iter().map(ToString::to_string).collect()))?;
    let mut problems: Vec<String> = functions
        .iter()
        .filter(|f| !plan.agents.iter().any(|a| &a.id == *f))
        .map(|f| format!("a function for `{f}`: the plan has no agent `{f}`"))
        .collect();
    problems.extend(
        plan.agents
            .iter()
            .enumerate()
            .filter(|(_, a)| matches!(a.program, Program::Host) && !functions.contains(&a.id))
            .map(|(i, a)| {
                format!(
                    "$.agents[{i}]: agent `{}` has no scenario: give it a function in the agents \
                     option",
                    a.id
                )
            }),
    );
    if problems.is_empty() {
        Ok(plan)
    } else {
        Err(Refused(problems))
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

    /// The host hands over what its model function gave; reading it is the generator's: a cut
    /// reply and an output that is no reply are each a named rejection, the text in an object
    /// is a reply.
    #[test]
    fn a_model_functions_output_is_read_here() {
        let file = r#"{ "name": "g", "registry": [
            { "id": "a", "description": "Does a.", "task": "Do a." } ],
            "generator": { "max_attempts": 3 } }"#;
        let mut generator = HostGenerator::new(file, Path::new("."), "t").expect("a valid file");
        let valid = r#"{ "agents": [ { "id": "a" } ] }"#;
        for ended in [
            json!({ "output": 42 }),
            json!({ "output": { "text": valid, "cut": true } }),
        ] {
            assert!(generator.step(None).get("ask").is_some());
            generator.answer(&ended).expect("an outcome");
        }
        assert!(generator.step(None).get("ask").is_some());
        let both = json!({ "output": valid, "error": "x" });
        assert!(
            generator
                .answer(&both)
                .expect_err("both is no outcome")
                .contains("give `output`")
        );
        generator
            .answer(&json!({ "output": { "text": valid } }))
            .expect("an outcome");
        let end = generator.step(None);
        assert_eq!(end["run"]["agents"][0]["id"], "a", "{end}");
        assert_eq!(end["generation"]["attempts"], 3, "{end}");
        let rejections = end["generation"]["rejections"].to_string();
        assert!(rejections.contains(NOT_A_REPLY), "{rejections}");
        assert!(
            rejections.contains("cut at the model's output limit"),
            "{rejections}"
        );
    }

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
        let mut run = local(plan, Path::new("."), Some("x"), None, &[]).expect("a valid plan");
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
        let mut again =
            local(plan, Path::new("."), Some("x"), Some(&progress), &[]).expect("restored");
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
