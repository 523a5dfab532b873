//! The plan file (`docs/plans.md`, "The plan file") and its validation: every problem is found
//! before anything runs and reported together, each with the JSON path at fault.

use crate::graph::{Graph, cycles, levels};
use crate::limits::{Limits, LimitsSpec};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A plan file as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// The plan's name.
    #[serde(default = "default_name")]
    pub name: String,
    /// Limits; each falls back to its environment variable, then the default.
    #[serde(default)]
    pub limits: LimitsSpec,
    /// The agents.
    pub agents: Vec<AgentSpec>,
    /// What a run of the plan must come to (conformance plans).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<PlanExpect>,
}

fn default_name() -> String {
    "plan".into()
}

/// What an agent's failure does to the plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// The plan fails (`aborted`, `agent_failed`).
    #[default]
    Fail,
    /// The agent yields its `degraded_result` and the plan goes on.
    Skip,
}

/// One agent as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// Unique in the plan: letters, digits, `_`, `-`, `.`.
    pub id: String,
    /// Agents whose results it needs.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// `fail` (default) or `skip`.
    #[serde(default)]
    pub on_error: OnError,
    /// Whether a failed run is tried again (only `fail` agents retry).
    #[serde(default)]
    pub retryable: bool,
    /// Its timeout is this times the timeout multiplier, clamped to 30 s..10 min.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_duration_ms: Option<u64>,
    /// The result a `skip` agent yields when it fails or its breaker is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded_result: Option<Value>,
    /// A scenario: inline (an object) or a file (a string, relative to the plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<Value>,
    /// A live-agent config file (TOML, relative to the plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The task; `{id}` is replaced by that dependency's result. Required with `agent`;
    /// replaces a scenario's own task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// The task's size for a live agent (`agent`): its policy's `budget_scale` scales its
    /// budgets for these units (`terminus plan split` gives each phase the number of its
    /// files). A scenario says its own in its `"scale"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<u64>,
}

/// The `expect` block of a conformance plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanExpect {
    /// `complete` or `aborted`.
    pub outcome: String,
    /// The plan's stop reason.
    pub reason: String,
    /// Per agent id: its status and, when given, its attempts.
    #[serde(default)]
    pub agents: BTreeMap<String, AgentExpect>,
}

/// What one agent must come to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentExpect {
    /// Its status.
    pub status: String,
    /// Runs made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Whether it ran on a degraded input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded_input: Option<bool>,
}

/// One problem of a plan: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The JSON path (`$.agents[2].depends_on[0]`), or `cycle` for a dependency cycle.
    pub at: String,
    /// What is wrong.
    pub message: String,
}

impl Problem {
    pub(crate) fn new(at: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            at: at.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

/// A scripted program (an agent's `scenario`) as the host read it with
/// [`Context::scenario`]: the orchestrator needs only its own task and its policy's limits;
/// the host's [`Launcher`](crate::Launcher) runs it, downcasting it (`as &dyn Any`) to its own
/// type. The scenario format itself is the host's (`terminus-scenario`'s `plan` feature is one).
pub trait Script: Any + fmt::Debug + Send + Sync {
    /// The task it runs when the plan gives none.
    fn task(&self) -> &str;
    /// Its policy's limits, which the plan's budget may lower.
    fn own(&self) -> Own;
}

/// Why a scenario's text is not a program: the JSON path in its own text (`$` for the whole),
/// the problem, and the whole message (with the position, when known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptError {
    /// The JSON path of the value at fault, in the scenario's own text.
    pub path: String,
    /// What is wrong with it.
    pub problem: String,
    /// The whole message: the path, the problem and the position.
    pub message: String,
}

/// Reads a scenario's JSON text into a [`Script`] ([`Context::scenario`]).
pub type ReadScript = dyn Fn(&str) -> Result<Arc<dyn Script>, ScriptError>;

/// Checks a live-agent config file and returns its policy's limits, scaled for the units given
/// ([`Context::live`]).
pub type CheckLive = dyn Fn(&Path, Option<u64>) -> Result<Own, String>;

/// What an agent runs.
#[derive(Debug, Clone)]
pub enum Program {
    /// A scenario, read and validated by the host ([`Context::scenario`]).
    Scenario(Arc<dyn Script>),
    /// A live agent: its config file (resolved against the plan's folder).
    Live {
        /// The config file.
        config: PathBuf,
        /// The units its policy is scaled for ([`AgentSpec::scale`]).
        scale: Option<u64>,
    },
    /// The host's own agent (neither `scenario` nor `agent`, in a host that runs its own:
    /// [`Context::host_agents`]): a function of the Node or Python package's `runPlan`.
    Host,
}

/// The limits an agent's own policy sets, which the plan's budget may lower.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Own {
    /// `max_model_calls`.
    pub model_calls: u32,
    /// `token_budget`.
    pub tokens: Option<u64>,
    /// `deadline_ms`.
    pub deadline_ms: Option<u64>,
}

/// One agent of a valid plan, as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    /// The agents it depends on (indices into the plan, no repeats).
    pub deps: Vec<usize>,
    /// `fail` or `skip`.
    pub on_error: OnError,
    /// Whether a failed run is retried.
    pub retryable: bool,
    /// Whether it has a `degraded_result`.
    pub degraded: bool,
    /// Its dependency level: 1 for an agent without dependencies.
    pub level: u32,
    /// Its timeout.
    pub timeout_ms: u64,
    /// Its own policy's limits.
    pub own: Own,
}

/// One agent of a valid plan.
#[derive(Debug, Clone)]
pub struct Agent {
    /// Its id.
    pub id: String,
    /// What it runs.
    pub program: Program,
    /// The task template (`None`: the scenario's own task).
    pub task: Option<String>,
    /// The result it yields when it fails as a `skip` agent.
    pub degraded_result: Option<Value>,
}

/// A valid plan: its agents, their graph and the limits it runs under.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The plan's name.
    pub name: String,
    /// The limits.
    pub limits: Limits,
    /// The agents, in file order.
    pub agents: Vec<Arc<Agent>>,
    /// The same agents as the scheduler sees them.
    pub nodes: Vec<Node>,
    /// The file as read (kept with a durable orchestration so that `resume` needs only the
    /// journal), with file scenarios inlined.
    pub file: PlanFile,
}

/// What validation needs from outside: the environment, the reader of scenarios, and a check
/// of live-agent configs (the command line's; a host without live agents refuses them).
pub struct Context<'a> {
    /// The folder relative file names are read from.
    pub base: &'a Path,
    /// Reads an environment variable.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Checks a live-agent config file and returns its policy's limits, scaled for the units
    /// given ([`AgentSpec::scale`]).
    pub live: &'a CheckLive,
    /// Reads a scenario's JSON text (an inline object's, or a file's) into the program the
    /// host's launcher runs.
    pub scenario: &'a ReadScript,
    /// Whether an agent with neither `scenario` nor `agent` is the host's own
    /// ([`Program::Host`]); else it is refused.
    pub host_agents: bool,
}

impl Plan {
    /// Reads and validates a plan. Every problem found is returned, in file order, cycles
    /// last.
    pub fn parse(json: &str, cx: &Context<'_>) -> Result<Plan, Vec<Problem>> {
        let file: PlanFile = read_json(json).map_err(|e| vec![e])?;
        Plan::from_file(file, cx)
    }

    /// Validates a plan file already read.
    pub fn from_file(mut file: PlanFile, cx: &Context<'_>) -> Result<Plan, Vec<Problem>> {
        let mut problems = Vec::new();
        let limits = match file.limits.resolve(cx.env) {
            Ok(limits) => limits,
            Err(errors) => {
                problems.extend(errors.iter().map(|e| {
                    let text = e.to_string();
                    match text.split_once(": ") {
                        Some((at, message)) => Problem::new(at, message),
                        None => Problem::new("$.limits", text),
                    }
                }));
                Limits::default()
            }
        };
        if file.agents.is_empty() {
            problems.push(Problem::new("$.agents", "a plan needs at least one agent"));
        }
        let mut index: HashMap<String, usize> = HashMap::new();
        for (i, a) in file.agents.iter().enumerate() {
            let at = format!("$.agents[{i}].id");
            if !valid_id(&a.id) {
                problems.push(Problem::new(
                    &at,
                    format!(
                        "`{}` is not an id: use 1 to 64 letters, digits, `_`, `-` or `.`",
                        a.id
                    ),
                ));
            }
            if let Some(first) = index.get(a.id.as_str()) {
                problems.push(Problem::new(
                    at,
                    format!("duplicate id `{}` (first at $.agents[{first}])", a.id),
                ));
            } else {
                index.insert(a.id.clone(), i);
            }
        }
        let mut graph: Graph = vec![Vec::new(); file.agents.len()];
        for (i, a) in file.agents.iter().enumerate() {
            for (j, dep) in a.depends_on.iter().enumerate() {
                let at = format!("$.agents[{i}].depends_on[{j}]");
                let Some(&d) = index.get(dep.as_str()) else {
                    problems.push(Problem::new(at, format!("no agent `{dep}` in the plan")));
                    continue;
                };
                if graph[i].contains(&d) {
                    problems.push(Problem::new(at, format!("`{dep}` is listed twice")));
                    continue;
                }
                graph[i].push(d);
                let dep_spec = &file.agents[d];
                if a.on_error == OnError::Fail
                    && dep_spec.on_error == OnError::Skip
                    && dep_spec.degraded_result.is_none()
                {
                    problems.push(Problem::new(
                        at,
                        format!(
                            "unsatisfiable: `{}` (on_error fail) depends on `{dep}`, which may be \
                             skipped (on_error skip) without a degraded_result; give `{dep}` a \
                             degraded_result or make `{}` on_error skip",
                            a.id, a.id
                        ),
                    ));
                }
            }
        }
        let mut programs = Vec::with_capacity(file.agents.len());
        let mut owns = Vec::with_capacity(file.agents.len());
        for (i, a) in file.agents.iter_mut().enumerate() {
            let at = format!("$.agents[{i}]");
            if a.estimated_duration_ms == Some(0) {
                problems.push(Problem::new(
                    format!("{at}.estimated_duration_ms"),
                    "must be at least 1",
                ));
            }
            if let Some(task) = &a.task {
                for name in placeholders(task) {
                    let known = index.get(name).copied();
                    if known == Some(i) {
                        problems.push(Problem::new(
                            format!("{at}.task"),
                            format!(
                                "`{{{name}}}` is `{name}`'s own result, which its task cannot \
                                 have: remove it from the task"
                            ),
                        ));
                    } else if known.is_some_and(|d| !graph[i].contains(&d)) {
                        problems.push(Problem::new(
                            format!("{at}.task"),
                            format!(
                                "`{{{name}}}` names agent `{name}`, which `{}` does not depend \
                                 on: add it to depends_on",
                                a.id
                            ),
                        ));
                    }
                }
            }
            match program(a, &at, cx) {
                Ok((program, own)) => {
                    programs.push(Some(program));
                    owns.push(own);
                }
                Err(p) => {
                    problems.extend(p);
                    programs.push(None);
                    owns.push(Own::default());
                }
            }
        }
        // Cycles only where every dependency resolved; a missing one is reported already.
        for cycle in cycles(&graph) {
            let path: Vec<&str> = cycle
                .iter()
                .chain(cycle.first())
                .map(|&i| file.agents[i].id.as_str())
                .collect();
            problems.push(Problem::new("cycle", path.join(" -> ")));
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let levels = levels(&graph);
        let nodes = file
            .agents
            .iter()
            .enumerate()
            .map(|(i, a)| Node {
                deps: graph[i].clone(),
                on_error: a.on_error,
                retryable: a.retryable,
                degraded: a.degraded_result.is_some(),
                level: levels[i],
                timeout_ms: limits.agent_timeout_ms(a.estimated_duration_ms),
                own: owns[i],
            })
            .collect();
        let agents = file
            .agents
            .iter()
            .zip(programs)
            .filter_map(|(a, p)| {
                Some(Arc::new(Agent {
                    id: a.id.clone(),
                    program: p?,
                    task: a.task.clone(),
                    degraded_result: a.degraded_result.clone(),
                }))
            })
            .collect();
        Ok(Plan {
            name: file.name.clone(),
            limits,
            agents,
            nodes,
            file,
        })
    }
}

/// Reads `json` as a `T`; the problem names the JSON path at fault (`$.agents[2].id`), then
/// what is wrong and the position (`(line L, column C)`) when the reader knows it.
fn read_json<T: serde::de::DeserializeOwned>(json: &str) -> Result<T, Problem> {
    terminus_runtime::json_path::read(json).map_err(|e| {
        let problem = match e.position {
            Some((line, column)) => format!("{} (line {line}, column {column})", e.problem),
            None => e.problem,
        };
        Problem::new(e.path, problem)
    })
}

fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The `{name}` placeholders of a task whose name could be an id.
pub fn placeholders(task: &str) -> impl Iterator<Item = &str> {
    task.split('{')
        .skip(1)
        .filter_map(|rest| rest.split_once('}').map(|(name, _)| name))
        .filter(|name| valid_id(name))
}

/// The task with each `{id}` of `results` replaced by that result (a string as it is, any
/// other JSON as its text).
pub fn fill(task: &str, results: &[(&str, Option<&Value>)]) -> String {
    let mut out = task.to_owned();
    for (id, result) in results {
        let text = match result {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        };
        out = out.replace(&format!("{{{id}}}"), &text);
    }
    out
}

/// The agent's program and its policy's limits; file scenarios are inlined into `a`.
fn program(a: &mut AgentSpec, at: &str, cx: &Context<'_>) -> Result<(Program, Own), Vec<Problem>> {
    if a.scale.is_some() && a.agent.is_none() {
        return Err(vec![Problem::new(
            format!("{at}.scale"),
            "scales a live agent's policy: a scenario says its own in its \"scale\"",
        )]);
    }
    match (&a.scenario, &a.agent) {
        (Some(_), Some(_)) => Err(vec![Problem::new(
            at,
            "give either `scenario` or `agent`, not both",
        )]),
        (None, None) if cx.host_agents => Ok((Program::Host, Own::default())),
        (None, None) => Err(vec![Problem::new(
            at,
            "give a `scenario` (inline or a file) or a live `agent` config",
        )]),
        (Some(Value::String(file)), None) => {
            let path = cx.base.join(file);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                vec![Problem::new(
                    format!("{at}.scenario"),
                    format!("cannot read {}: {e}", path.display()),
                )]
            })?;
            let script = (cx.scenario)(&text).map_err(|e| {
                vec![Problem::new(
                    format!("{at}.scenario"),
                    format!("{}: {}", path.display(), e.message),
                )]
            })?;
            // Inlined, so that the plan kept in a journal needs no other file.
            a.scenario = serde_json::from_str(&text).ok();
            Ok(scripted(script))
        }
        (Some(inline @ Value::Object(_)), None) => {
            let script = (cx.scenario)(&inline.to_string()).map_err(|e| {
                // The position is in the scenario's own text, not the plan's: the path says it.
                let inner = e.path.strip_prefix('$').unwrap_or(&e.path);
                vec![Problem::new(format!("{at}.scenario{inner}"), e.problem)]
            })?;
            Ok(scripted(script))
        }
        (Some(_), None) => Err(vec![Problem::new(
            format!("{at}.scenario"),
            "must be a scenario object or a file name",
        )]),
        (None, Some(config)) => {
            if a.task.is_none() {
                return Err(vec![Problem::new(
                    format!("{at}.task"),
                    "a live agent needs a task",
                )]);
            }
            let path = cx.base.join(config);
            let scale = a.scale;
            let own = (cx.live)(&path, scale)
                .map_err(|e| vec![Problem::new(format!("{at}.agent"), e)])?;
            // Resolved, so that the plan kept in a journal resumes from any folder.
            a.agent = Some(path.display().to_string());
            Ok((
                Program::Live {
                    config: path,
                    scale,
                },
                own,
            ))
        }
    }
}

fn scripted(script: Arc<dyn Script>) -> (Program, Own) {
    let own = script.own();
    (Program::Scenario(script), own)
}
