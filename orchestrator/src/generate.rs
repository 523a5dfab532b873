//! A plan written by a model (`docs/plans.md`, "A plan written by a model"), sans IO.
//!
//! The host gives a [`GenerateFile`]: a registry of the agents a plan may use (each with what it
//! runs and how it fails, as a plan file says it), how many times the model may try, and an
//! optional static fallback plan. The [`Generator`] says what to ask the model
//! ([`Step::Ask`]); the host asks it and hands the reply back ([`Generator::answer`]). A reply
//! is read as a short plan (`{"agents": [{"id", "depends_on", "task"}]}`, ids from the
//! registry), expanded with the registry's fields and validated as `terminus orchestrate`
//! validates a plan file; a rejected plan goes back to the model with every problem named by
//! its JSON path, at most `max_attempts` model calls in all. Then the fallback runs, or there is
//! no plan ([`Step::NoPlan`], the plan's reason `no_valid_plan`). What happened is kept in a
//! [`Generation`] for the report.
//!
//! The fallback is validated before the model is asked, so a broken fallback is found at once
//! and not after minutes of model calls.

use crate::limits::LimitsSpec;
use crate::plan::{AgentSpec, Context, OnError, Plan, PlanFile, Problem, placeholders};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use terminus_runtime::Message;

/// Model calls for a plan when the file says none.
pub const DEFAULT_PLAN_ATTEMPTS: u32 = 3;
/// The most model calls a file may allow for a plan.
pub const MAX_PLAN_ATTEMPTS: u32 = 10;

/// A generator file: the registry, how the plan is asked for, the fallback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateFile {
    /// The plan's name.
    #[serde(default = "default_name")]
    pub name: String,
    /// The plan's limits, as in a plan file.
    #[serde(default)]
    pub limits: LimitsSpec,
    /// The agents a plan may use.
    pub registry: Vec<Member>,
    /// How the plan is asked for.
    #[serde(default)]
    pub generator: GeneratorSpec,
    /// The plan run when no written plan is accepted (a short plan, as the model writes one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Vec<Written>>,
}

fn default_name() -> String {
    "plan".into()
}

/// How the plan is asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorSpec {
    /// A live-agent config (relative to the file) whose model writes the plan; the host's to
    /// read (the command line requires it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Model calls for a plan, rejected ones included (1 to [`MAX_PLAN_ATTEMPTS`]).
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// Said to the model after the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

impl Default for GeneratorSpec {
    fn default() -> Self {
        GeneratorSpec {
            agent: None,
            max_attempts: DEFAULT_PLAN_ATTEMPTS,
            instructions: None,
        }
    }
}

fn default_attempts() -> u32 {
    DEFAULT_PLAN_ATTEMPTS
}

/// One agent of the registry: what it does (for the model) and what a plan file says of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    /// Its id, which a written plan names.
    pub id: String,
    /// What it does, told to the model.
    pub description: String,
    /// As in a plan file.
    #[serde(default)]
    pub on_error: OnError,
    /// As in a plan file.
    #[serde(default)]
    pub retryable: bool,
    /// As in a plan file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_duration_ms: Option<u64>,
    /// As in a plan file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded_result: Option<Value>,
    /// As in a plan file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<Value>,
    /// As in a plan file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Its task when the written plan gives none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// As in a plan file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<u64>,
}

impl Member {
    /// Whether it may end without a result (`skip` with no `degraded_result`): an agent that
    /// must not be skipped cannot depend on it.
    fn optional(&self) -> bool {
        self.on_error == OnError::Skip && self.degraded_result.is_none()
    }

    /// Its plan-file agent with the written dependencies and task (the registry's when none):
    /// a dependency the task does not quote is appended to it, so its result reaches the agent.
    fn spec(&self, depends_on: Vec<String>, task: Option<String>) -> AgentSpec {
        let task = task
            .or_else(|| self.task.clone())
            .map(|task| quoting(task, &depends_on));
        AgentSpec {
            id: self.id.clone(),
            depends_on,
            on_error: self.on_error,
            retryable: self.retryable,
            estimated_duration_ms: self.estimated_duration_ms,
            degraded_result: self.degraded_result.clone(),
            scenario: self.scenario.clone(),
            agent: self.agent.clone(),
            task,
            scale: self.scale,
        }
    }
}

/// The task with a line for each dependency it does not quote as `{id}`: a written plan
/// orders its agents by `depends_on`, and a dependency's result reaches an agent only through
/// its task.
fn quoting(mut task: String, depends_on: &[String]) -> String {
    let unquoted: Vec<&String> = depends_on
        .iter()
        .filter(|d| !placeholders(&task).any(|p| p == d.as_str()))
        .collect();
    if !unquoted.is_empty() {
        task.push_str("\n\nThe results it builds on:");
        for d in unquoted {
            task.push_str(&format!("\n- {d}: {{{d}}}"));
        }
    }
    task
}

/// Whether a written task says something: a word of three letters or more besides its
/// placeholders (`... {research} ...` says nothing).
fn says_something(task: &str) -> bool {
    let mut words = String::new();
    let mut rest = task;
    while let Some(open) = rest.find('{') {
        words.push_str(&rest[..open]);
        words.push(' ');
        rest = rest[open..]
            .find('}')
            .map_or("", |close| &rest[open + close + 1..]);
    }
    words.push_str(rest);
    words
        .split(|c: char| !c.is_alphabetic())
        .any(|w| w.chars().count() >= 3)
}

/// One agent of a written plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Written {
    /// A registry id.
    pub id: String,
    /// The agents whose results it needs.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// Its task (`{id}` names a dependency's result); the registry's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
}

/// How the plan that runs was come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanSource {
    /// The model's first plan was valid.
    FirstTry,
    /// A plan the model wrote after its earlier ones were rejected.
    AfterFeedback,
    /// The fallback: no written plan was valid.
    Fallback,
    /// No written plan was valid and there is no fallback: nothing runs.
    NoPlan,
}

impl PlanSource {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            PlanSource::FirstTry => "first_try",
            PlanSource::AfterFeedback => "after_feedback",
            PlanSource::Fallback => "fallback",
            PlanSource::NoPlan => "no_plan",
        }
    }
}

impl fmt::Display for PlanSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A written plan that was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    /// The model call (1-based).
    pub attempt: u32,
    /// Each problem, `PATH: PROBLEM`, as sent back to the model.
    pub problems: Vec<String>,
    /// What the model wrote (absent when the call failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// Whether the model's output limit cut the reply.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

/// What came of a model call for the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply<'a> {
    /// The reply's text.
    Text(&'a str),
    /// A reply the model's output limit (or its content filter) cut before it ended: not
    /// read, whatever it holds.
    Cut(&'a str),
    /// The call failed: why.
    Failed(&'a str),
}

impl<'a> Reply<'a> {
    /// What the model wrote, if it wrote anything.
    pub fn text(self) -> Option<&'a str> {
        match self {
            Reply::Text(text) | Reply::Cut(text) => Some(text),
            Reply::Failed(_) => None,
        }
    }
}

/// What the generation came to (the plan report's `generation`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Generation {
    /// Where the plan that runs came from.
    pub source: PlanSource,
    /// Model calls made for the plan.
    pub attempts: u32,
    /// Model calls allowed.
    pub max_attempts: u32,
    /// Every rejected plan, in order.
    pub rejections: Vec<Rejection>,
    /// The plan that runs, as written (the model's or the fallback); empty when none runs.
    pub plan: Vec<Written>,
    /// The accepted reply, as the model wrote it (absent for the fallback and no plan): with
    /// the rejections' replies, every reply in order, so a recorded generation replays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
}

/// What the host does next.
#[derive(Debug, Clone)]
pub enum Step<'a> {
    /// Ask the model, sending these messages (no tools), and give its reply to
    /// [`Generator::answer`].
    Ask(&'a [Message]),
    /// Run this plan.
    Run(Box<Plan>),
    /// No plan: the run ends `aborted` with `no_valid_plan`.
    NoPlan,
}

/// The plan generator's state: the conversation with the model and what it came to.
#[derive(Debug)]
pub struct Generator {
    file: GenerateFile,
    fallback: Option<Plan>,
    messages: Vec<Message>,
    rejections: Vec<Rejection>,
    attempts: u32,
    accepted: Option<Plan>,
    ended: Option<PlanSource>,
    plan: Vec<Written>,
    reply: Option<String>,
}

impl Generator {
    /// Checks the file (the registry as agents of a plan, `max_attempts`, the fallback as a
    /// plan) and starts the conversation for `task`. Every problem is returned together, each
    /// with its JSON path in the generator file.
    pub fn new(
        file: GenerateFile,
        task: &str,
        cx: &Context<'_>,
    ) -> Result<Generator, Vec<Problem>> {
        let mut problems = Vec::new();
        if file.registry.is_empty() {
            problems.push(Problem::new(
                "$.registry",
                "a registry needs at least one agent",
            ));
        }
        for (i, m) in file.registry.iter().enumerate() {
            if m.description.trim().is_empty() {
                problems.push(Problem::new(
                    format!("$.registry[{i}].description"),
                    "empty: the model chooses agents by their description",
                ));
            }
        }
        let attempts = file.generator.max_attempts;
        if !(1..=MAX_PLAN_ATTEMPTS).contains(&attempts) {
            problems.push(Problem::new(
                "$.generator.max_attempts",
                format!("{attempts} is out of range 1..={MAX_PLAN_ATTEMPTS}"),
            ));
        }
        if !file.registry.is_empty() {
            let every = PlanFile {
                name: file.name.clone(),
                limits: file.limits.clone(),
                agents: file
                    .registry
                    .iter()
                    .map(|m| m.spec(Vec::new(), None))
                    .collect(),
                expect: None,
            };
            if let Err(found) = Plan::from_file(every, cx) {
                problems.extend(found.into_iter().map(|p| moved(p, "$.registry")));
            }
        }
        let mut fallback = None;
        if let Some(written) = &file.fallback {
            match expand(&file, written).and_then(|plan| Plan::from_file(plan, cx)) {
                Ok(plan) => fallback = Some(plan),
                Err(found) => problems.extend(found.into_iter().map(|p| moved(p, "$.fallback"))),
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let messages = vec![
            Message::system(instructions(&file)),
            Message::user(match &file.generator.instructions {
                Some(more) => format!("The task: {task}\n\n{more}"),
                None => format!("The task: {task}"),
            }),
        ];
        Ok(Generator {
            file,
            fallback,
            messages,
            rejections: Vec::new(),
            attempts: 0,
            accepted: None,
            ended: None,
            plan: Vec::new(),
            reply: None,
        })
    }

    /// What to do next. After [`Step::Run`] or [`Step::NoPlan`] the generation is over and
    /// every later call answers [`Step::NoPlan`].
    pub fn step(&mut self) -> Step<'_> {
        if self.ended.is_some() {
            return match self.accepted.take() {
                Some(plan) => Step::Run(Box::new(plan)),
                None => Step::NoPlan,
            };
        }
        if self.attempts < self.file.generator.max_attempts {
            return Step::Ask(&self.messages);
        }
        match self.fallback.take() {
            Some(plan) => {
                self.ended = Some(PlanSource::Fallback);
                self.plan = self.file.fallback.clone().unwrap_or_default();
                Step::Run(Box::new(plan))
            }
            None => {
                self.ended = Some(PlanSource::NoPlan);
                Step::NoPlan
            }
        }
    }

    /// The model's answer to the last [`Step::Ask`]: a failed call and a reply cut short
    /// count as attempts and are rejections the next call is told of.
    pub fn answer(&mut self, reply: Reply<'_>, cx: &Context<'_>) {
        if self.ended.is_some() || self.attempts >= self.file.generator.max_attempts {
            return;
        }
        self.attempts += 1;
        let judged = match reply {
            Reply::Text(text) => read_reply(text).and_then(|written| {
                let plan = expand(&self.file, &written).and_then(|plan| {
                    Plan::from_file(plan, cx).map_err(|p| reworded(p, &written))
                })?;
                Ok((plan, written))
            }),
            Reply::Cut(_) => Err(vec![Problem::new(
                "$",
                "the reply was cut at the model's output limit before the plan ended: write a \
                 shorter plan (a short task each), as one JSON object",
            )]),
            Reply::Failed(error) => Err(vec![Problem::new(
                "model",
                format!("the model call failed: {error}"),
            )]),
        };
        match judged {
            Ok((plan, written)) => {
                self.plan = written;
                self.reply = reply.text().map(str::to_owned);
                self.ended = Some(if self.attempts == 1 {
                    PlanSource::FirstTry
                } else {
                    PlanSource::AfterFeedback
                });
                self.accepted = Some(plan);
            }
            Err(problems) => {
                let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
                if let Some(text) = reply.text() {
                    self.messages.push(Message::assistant(text, Vec::new()));
                }
                self.messages.push(Message::user(feedback(
                    &problems,
                    self.attempts,
                    &self.file,
                )));
                self.rejections.push(Rejection {
                    attempt: self.attempts,
                    problems,
                    reply: reply.text().map(str::to_owned),
                    cut: matches!(reply, Reply::Cut(_)),
                });
            }
        }
    }

    /// What the generation came to so far (`source` is `no_plan` until a plan is chosen).
    pub fn generation(&self) -> Generation {
        Generation {
            source: self.ended.unwrap_or(PlanSource::NoPlan),
            attempts: self.attempts,
            max_attempts: self.file.generator.max_attempts,
            rejections: self.rejections.clone(),
            plan: self.plan.clone(),
            reply: self.reply.clone(),
        }
    }

    /// The generator file.
    pub fn file(&self) -> &GenerateFile {
        &self.file
    }
}

/// A plan's problems as the plan's writer can act on them: an unsatisfiable dependency (a
/// required agent depending on an optional one) is the registry's doing in a plan file's words
/// ("give it a degraded_result"); in a written plan the fix is to drop the dependency.
fn reworded(problems: Vec<Problem>, written: &[Written]) -> Vec<Problem> {
    problems
        .into_iter()
        .map(|p| {
            if !p.message.starts_with("unsatisfiable:") {
                return p;
            }
            let at = |s: &str| s.parse::<usize>().ok();
            let indices =
                p.at.strip_prefix("$.agents[")
                    .and_then(|rest| rest.split_once("].depends_on["))
                    .and_then(|(i, rest)| Some((at(i)?, at(rest.strip_suffix(']')?)?)));
            match indices.and_then(|(i, j)| {
                let agent = written.get(i)?;
                Some((&agent.id, agent.depends_on.get(j)?))
            }) {
                Some((agent, dep)) => Problem::new(
                    p.at,
                    format!(
                        "`{agent}` must not be skipped, but depends on `{dep}`, which is optional \
                         and may give no result: remove `{dep}` from `{agent}`'s depends_on"
                    ),
                ),
                None => p,
            }
        })
        .collect()
}

/// A problem of a plan built from the file, moved under the part of the file it came from
/// (`$.agents[2]` of the registry's plan is `$.registry[2]`).
fn moved(p: Problem, under: &str) -> Problem {
    match p.at.strip_prefix("$.agents") {
        Some(rest) => Problem::new(format!("{under}{rest}"), p.message),
        None => p,
    }
}

/// The written plan as a plan file: each agent's fields from the registry.
fn expand(file: &GenerateFile, written: &[Written]) -> Result<PlanFile, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut agents = Vec::new();
    for (i, w) in written.iter().enumerate() {
        match file.registry.iter().find(|m| m.id == w.id) {
            Some(m) => agents.push(m.spec(w.depends_on.clone(), w.task.clone())),
            None => problems.push(Problem::new(
                format!("$.agents[{i}].id"),
                format!("`{}` is not in the registry ({})", w.id, ids(file)),
            )),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(PlanFile {
        name: file.name.clone(),
        limits: file.limits.clone(),
        agents,
        expect: None,
    })
}

fn ids(file: &GenerateFile) -> String {
    let ids: Vec<&str> = file.registry.iter().map(|m| m.id.as_str()).collect();
    format!("its agents: {}", ids.join(", "))
}

/// Reads a reply as a written plan: the JSON object in it (alone, or in a fenced block, or
/// between the first `{` and the last `}`), every problem of its shape with its JSON path
/// (whether its ids are in the registry is said when it is expanded).
pub fn read_reply(text: &str) -> Result<Vec<Written>, Vec<Problem>> {
    let Some(json) = json_object(text) else {
        return Err(vec![Problem::new(
            "$",
            "the reply holds no JSON object: write the plan as one JSON object",
        )]);
    };
    let value: Value = serde_json::from_str(json).map_err(|e| {
        vec![Problem::new(
            "$",
            format!("the plan is not valid JSON: {e}"),
        )]
    })?;
    let Some(obj) = value.as_object() else {
        return Err(vec![Problem::new(
            "$",
            "a plan is a JSON object with `agents`",
        )]);
    };
    let mut problems = Vec::new();
    for key in obj.keys().filter(|k| k.as_str() != "agents") {
        problems.push(Problem::new(
            format!("$.{key}"),
            "unknown field: a plan has only `agents`",
        ));
    }
    let agents = match obj.get("agents") {
        Some(Value::Array(agents)) if !agents.is_empty() => agents.as_slice(),
        Some(Value::Array(_)) => {
            problems.push(Problem::new("$.agents", "a plan needs at least one agent"));
            &[]
        }
        Some(_) => {
            problems.push(Problem::new("$.agents", "must be an array of agents"));
            &[]
        }
        None => {
            problems.push(Problem::new("$.agents", "missing: the plan's agents"));
            &[]
        }
    };
    let mut written = Vec::new();
    for (i, agent) in agents.iter().enumerate() {
        let at = format!("$.agents[{i}]");
        let Some(fields) = agent.as_object() else {
            problems.push(Problem::new(
                at,
                "an agent is an object with `id`, `depends_on` and `task`",
            ));
            continue;
        };
        for key in fields.keys() {
            if !matches!(key.as_str(), "id" | "depends_on" | "task") {
                problems.push(Problem::new(
                    format!("{at}.{key}"),
                    "unknown field: an agent has `id`, `depends_on` and `task` (the rest is the registry's)",
                ));
            }
        }
        let id = match fields.get("id") {
            Some(Value::String(id)) => id.clone(),
            Some(_) => {
                problems.push(Problem::new(format!("{at}.id"), "must be a string"));
                continue;
            }
            None => {
                problems.push(Problem::new(format!("{at}.id"), "missing: a registry id"));
                continue;
            }
        };
        let mut depends_on = Vec::new();
        match fields.get("depends_on") {
            None | Some(Value::Null) => {}
            Some(Value::Array(deps)) => {
                for (j, dep) in deps.iter().enumerate() {
                    match dep.as_str() {
                        Some(dep) => depends_on.push(dep.to_owned()),
                        None => problems.push(Problem::new(
                            format!("{at}.depends_on[{j}]"),
                            "must be an agent id (a string)",
                        )),
                    }
                }
            }
            Some(_) => problems.push(Problem::new(
                format!("{at}.depends_on"),
                "must be an array of agent ids",
            )),
        }
        let task = match fields.get("task") {
            None | Some(Value::Null) => None,
            Some(Value::String(task)) if says_something(task) => Some(task.clone()),
            Some(Value::String(task)) => {
                problems.push(Problem::new(
                    format!("{at}.task"),
                    format!(
                        "`{task}` says nothing the agent can do: write its task in words \
                         (quote a dependency's result as {{id}})"
                    ),
                ));
                None
            }
            Some(_) => {
                problems.push(Problem::new(format!("{at}.task"), "must be a string"));
                None
            }
        };
        written.push(Written {
            id,
            depends_on,
            task,
        });
    }
    if problems.is_empty() {
        Ok(written)
    } else {
        Err(problems)
    }
}

/// The JSON object a reply holds: a fenced block's, else from the first `{` to the last `}`.
fn json_object(text: &str) -> Option<&str> {
    let inner = match text.find("```") {
        Some(open) => {
            let after = &text[open + 3..];
            let body = after.find('\n').map_or(after, |nl| &after[nl + 1..]);
            body.find("```").map_or(body, |close| &body[..close])
        }
        None => text,
    };
    let start = inner.find('{')?;
    let end = inner.rfind('}')?;
    (end > start).then(|| &inner[start..=end])
}

/// The system prompt: the registry, the shape of a plan, the rules validation applies.
fn instructions(file: &GenerateFile) -> String {
    let mut out = String::from(
        "You write the plan of a multi-agent system: which agents run, and which results each \
         needs. The agents you may use:\n",
    );
    for m in &file.registry {
        out.push_str(&format!("- {}: {}", m.id, m.description.trim()));
        if m.optional() {
            out.push_str(
                " (optional: it may give no result, so only optional agents may depend on it)",
            );
        }
        out.push('\n');
    }
    let first = file.registry.first().map_or("a", |m| m.id.as_str());
    let second = file.registry.get(1).map_or("b", |m| m.id.as_str());
    out.push_str(&format!(
        "\nReply with one JSON object and nothing else, in this shape:\n\
         {{\"agents\": [{{\"id\": \"{first}\", \"depends_on\": [], \"task\": \"...\"}}, \
         {{\"id\": \"{second}\", \"depends_on\": [\"{first}\"], \"task\": \"... {{{first}}} ...\"}}]}}\n\
         Rules: use only the ids above, each at most once; an agent runs after every agent in \
         its `depends_on`, and those must be in the plan; no agent may depend on itself, \
         directly or through others; each task says in words what that agent must do for the \
         task, and may quote a dependency's result as {{id}}."
    ));
    out
}

/// What a rejected plan's author is told.
fn feedback(problems: &[String], attempt: u32, file: &GenerateFile) -> String {
    let mut out = format!(
        "The plan was refused (attempt {attempt} of {}):\n",
        file.generator.max_attempts
    );
    for p in problems {
        out.push_str("- ");
        out.push_str(p);
        out.push('\n');
    }
    out.push_str(&format!(
        "Write the whole plan again as one JSON object, using only these agents ({}).",
        ids(file)
    ));
    out
}
