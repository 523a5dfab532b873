//! Reading and validating a scenario, and turning it into a runtime [`Run`].

use crate::error::{LoadError, ScenarioError, push_key};
use crate::expect::Expect;
use crate::format::{ContextSpec, Repeat, ScenarioFile, ToolScript};
use crate::script::{ScriptedModel, ScriptedTool, ScriptedVerifier};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use terminus_kernel::{Policy, ScaleError, WRITE_TODOS};
use terminus_runtime::{KillSwitch, Replayed, Resume, Run, Setup, ToolSet};

/// A validated scenario: it parses, every script can be run, and the kernel accepts its policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    name: String,
    file: ScenarioFile,
    /// The policy its runs are created under: the file's, scaled for its `scale`.
    policy: Policy,
    model_log: Option<std::path::PathBuf>,
    tool_log: Option<std::path::PathBuf>,
    sent: Option<crate::sent::Sent>,
}

impl Scenario {
    /// Parses and validates a scenario. Its name is the file's `name`, else `"scenario"`.
    pub fn parse(json: &str) -> Result<Scenario, ScenarioError> {
        let file: ScenarioFile = read_json(json)?;
        validate(&file)?;
        let name = file.name.clone().unwrap_or_else(|| "scenario".into());
        let policy = scaled(&file)?;
        Ok(Scenario {
            name,
            file,
            policy,
            model_log: None,
            tool_log: None,
            sent: None,
        })
    }

    /// Reads, parses and validates a scenario file. Without a `name`, the scenario is named
    /// after the file (without `.json`).
    pub fn load(path: &Path) -> Result<Scenario, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|error| LoadError::Read {
            file: path.to_owned(),
            error,
        })?;
        let mut scenario = Scenario::parse(&text).map_err(|error| LoadError::Invalid {
            file: path.to_owned(),
            error,
        })?;
        if scenario.file.name.is_none()
            && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
        {
            scenario.name = stem.to_owned();
        }
        Ok(scenario)
    }

    /// The scenario's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The task.
    pub fn task(&self) -> &str {
        &self.file.task
    }

    /// The policy its runs are created under: the file's, scaled for its `scale` if it has
    /// one (so a host that lowers it, as an orchestrator does to an agent's share of the
    /// plan's budget, lowers the scaled budgets, and the run does not scale them again).
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The scenario for a task of `units` (`terminus run --scale N`): its runs are created
    /// under the policy scaled for it, as a `"scale"` in the file says. A policy without a
    /// `budget_scale`, or one it cannot be scaled for, is refused, naming the field.
    pub fn with_scale(mut self, units: u64) -> Result<Scenario, ScenarioError> {
        self.file.scale = Some(units);
        validate_scale(&self.file)?;
        self.policy = scaled(&self.file)?;
        Ok(self)
    }

    /// The expectations, if the file has an `expect` block.
    pub fn expect(&self) -> Option<&Expect> {
        self.file.expect.as_ref()
    }

    /// The file as parsed.
    pub fn file(&self) -> &ScenarioFile {
        &self.file
    }

    /// A run of this scenario with fresh scripted adapters: the scripted model, the built-in
    /// `write_todos` plus one scripted tool per entry of `tools` (any other tool answers
    /// `not_found`), and the scripted verifier if there is one (else the rule verifier). Set the
    /// execution id, store, kill switch, observer or config on the returned [`Run`], then
    /// [`Run::execute`] it. Running out of a `repeat: "none"` script stops the run with a
    /// [`terminus_runtime::Fault`] of kind `InvalidInput` that names the script.
    pub fn run(&self) -> Run {
        self.run_as(self.file.task.clone(), self.policy.clone())
    }

    /// A run as [`Scenario::run`] builds it, with another task and policy (an orchestrator
    /// gives an agent its dependencies' results and its share of the plan's budget).
    pub fn run_as(&self, task: String, policy: Policy) -> Run {
        let kill = self.kill_switch();
        self.run_with(task, policy, self.model(&kill), kill)
    }

    /// A run as [`Scenario::run`] builds it, for a durable engine that replays the run's steps
    /// itself (the Restate service): with it, what to call once such a replay is over, so that
    /// the scripted model moves past the answers the engine gave back (the scripted tools are
    /// called on replay too, and move by themselves).
    /// The third value is the kill switch the scripted model pulls for a `cancelled` turn: a
    /// host that gives the run a switch of its own cancels the run when this one fires.
    pub fn replayable_run(&self) -> (Run, impl FnOnce(&Replayed) + Send + 'static, KillSwitch) {
        let kill = self.kill_switch();
        let pulled = kill.clone();
        let model = self.model(&kill);
        let skip = Arc::clone(&model);
        let run = self.run_with(self.file.task.clone(), self.policy.clone(), model, kill);
        (
            run,
            move |replayed: &Replayed| skip.skip(replayed.model_answers),
            pulled,
        )
    }

    fn run_with(
        &self,
        task: String,
        policy: Policy,
        model: Arc<ScriptedModel>,
        kill: KillSwitch,
    ) -> Run {
        let mut run = Run::new(task, policy, model).name(self.name.clone());
        if let Some(units) = self.file.scale {
            run = run.scale(units);
        }
        if self.file.system_prompt.is_some() || self.file.policy.auto_checkpoints > 0 {
            run = run.config(terminus_runtime::RuntimeConfig {
                system_prompt: self.file.system_prompt.clone(),
                auto_checkpoint: self
                    .file
                    .context
                    .as_ref()
                    .map(ContextSpec::auto_checkpoint)
                    .unwrap_or_default(),
                ..terminus_runtime::RuntimeConfig::default()
            });
        }
        self.adapters(run, &self.tools(&kill), kill)
    }

    /// Resumes `execution` of this scenario from its journal (set the store on the returned
    /// [`Resume`]): the scripted model and tools move past the answers the journal holds.
    pub fn resume(&self, execution: impl Into<String>) -> Resume {
        let kill = self.kill_switch();
        let model = self.model(&kill);
        let tools = self.tools(&kill);
        let (skip_model, skip_tools) = (Arc::clone(&model), tools.clone());
        self.adapters(Run::resume(execution, model), &tools, kill)
            .on_replay(move |replayed| {
                skip_model.skip(replayed.model_answers);
                for (name, tool) in &skip_tools {
                    tool.skip(replayed.tool_answers.get(name).copied().unwrap_or(0));
                }
            })
    }

    /// One scripted tool per entry of `tools`, with the run's kill switch for a `cancelled`
    /// result.
    fn tools(&self, kill: &KillSwitch) -> Vec<(String, Arc<ScriptedTool>)> {
        self.file
            .tools
            .iter()
            .map(|(name, script)| {
                let tool = ScriptedTool::new(name, script).with_kill_switch(kill.clone());
                let tool = match &self.tool_log {
                    Some(path) => tool.with_log(path.clone()),
                    None => tool,
                };
                (name.clone(), Arc::new(tool))
            })
            .collect()
    }

    /// Logs every tool call carried out to `path` (see [`ScriptedTool::with_log`]); applies
    /// to the runs created after this call.
    #[must_use]
    pub fn with_tool_log(mut self, path: impl Into<std::path::PathBuf>) -> Scenario {
        self.tool_log = Some(path.into());
        self
    }

    /// Logs every model turn served to `path` (see [`ScriptedModel::with_log`]); applies to
    /// the runs created after this call.
    #[must_use]
    pub fn with_model_log(mut self, path: impl Into<std::path::PathBuf>) -> Scenario {
        self.model_log = Some(path.into());
        self
    }

    /// Records what the scripted model is sent into `sent` (see [`ScriptedModel::with_sent`]);
    /// applies to the runs created after this call.
    #[must_use]
    pub fn with_sent(mut self, sent: crate::sent::Sent) -> Scenario {
        self.sent = Some(sent);
        self
    }

    /// The run's kill switch: pulled `cancel_after_ms` after the start when the scenario says
    /// so, and by a `cancelled` model turn or tool result.
    fn kill_switch(&self) -> KillSwitch {
        match self.file.cancel_after_ms {
            Some(ms) => KillSwitch::after(Duration::from_millis(ms)),
            None => KillSwitch::new(),
        }
    }

    fn model(&self, kill: &KillSwitch) -> Arc<ScriptedModel> {
        let mut model = ScriptedModel::new(&self.file.model).with_kill_switch(kill.clone());
        if let Some(path) = &self.model_log {
            model = model.with_log(path.clone());
        }
        if let Some(sent) = &self.sent {
            model = model.with_sent(sent.clone());
        }
        Arc::new(model)
    }

    /// The scripted tools, verifier, kill switch and context window of the scenario, on a new
    /// run or a resumed one.
    fn adapters<R: Setup>(
        &self,
        mut run: R,
        scripted: &[(String, Arc<ScriptedTool>)],
        kill: KillSwitch,
    ) -> R {
        let mut tools = ToolSet::new();
        for (name, tool) in scripted {
            tools.insert(
                name.clone(),
                Arc::clone(tool) as Arc<dyn terminus_runtime::Tool>,
            );
            if let Some(hold) = self.file.tools.get(name).and_then(ToolScript::hold) {
                tools.hold(name.clone(), hold);
            }
        }
        for name in self.file.context.iter().flat_map(|c| &c.keep) {
            tools.keep(name.clone());
        }
        run = run.tools(tools);
        run = run.kill_switch(kill);
        if let Some(script) = &self.file.verifier {
            run = run.verifier(Arc::new(ScriptedVerifier::new(script)));
        }
        if let Some(context) = &self.file.context
            && let Some(tokenizer) = terminus_tokenizer::by_name(context.tokenizer_name())
        {
            // Validation checked the tokenizer's name.
            run = run.context(context.policy(), tokenizer);
        }
        run
    }
}

/// Reads `json` as a `T`; an error names the JSON path at fault (`$.agents[2].id`), the
/// problem and the position. Other files of the project (plans) read their JSON with it.
pub fn read_json<T: serde::de::DeserializeOwned>(json: &str) -> Result<T, ScenarioError> {
    terminus_runtime::json_path::read(json).map_err(|e| ScenarioError {
        path: e.path,
        problem: e.problem,
        position: e.position,
    })
}

/// The policy's error at its JSON path in the file (`$.policy.budget_scale.max.max_steps`).
fn policy_error(e: terminus_kernel::PolicyError) -> ScenarioError {
    let mut path = String::from("$.policy");
    for key in e.field.split('.') {
        push_key(&mut path, key);
    }
    ScenarioError::at(path, e.problem)
}

/// The file's policy scaled for its `scale` (none: as written).
fn scaled(file: &ScenarioFile) -> Result<Policy, ScenarioError> {
    match file.scale {
        Some(units) => file.policy.scaled(units).map_err(policy_error),
        None => Ok(file.policy.clone()),
    }
}

/// A `scale` needs a `budget_scale` to apply, and the policy must scale for it.
fn validate_scale(file: &ScenarioFile) -> Result<(), ScenarioError> {
    let Some(units) = file.scale else {
        return Ok(());
    };
    match file.policy.scaled_to(units) {
        Ok(_) => Ok(()),
        Err(ScaleError::Nothing) => Err(ScenarioError::at("$.scale", ScaleError::NOTHING)),
        Err(ScaleError::Policy(e)) => Err(policy_error(e)),
    }
}

fn validate(file: &ScenarioFile) -> Result<(), ScenarioError> {
    if file.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
        return Err(ScenarioError::at("$.name", "must not be empty"));
    }
    if file.task.trim().is_empty() {
        return Err(ScenarioError::at("$.task", "must not be empty"));
    }
    file.policy.validate().map_err(policy_error)?;
    validate_scale(file)?;

    let model = &file.model;
    check_script("$.model.turns", "turn", model.turns.len(), model.repeat)?;
    for (i, turn) in model.turns.iter().enumerate() {
        let at = format!("$.model.turns[{i}]");
        if turn.cancelled == Some(true) {
            let others = turn.reply_fields();
            let other = others
                .first()
                .copied()
                .or(turn.error.map(|_| "error"))
                .or(turn.retry_after_ms.map(|_| "retry_after_ms"))
                .or(turn.message.as_ref().map(|_| "message"));
            if let Some(field) = other {
                return Err(ScenarioError::at(
                    at,
                    format!(
                        "a cancelled turn has nothing else: \"cancelled\" cannot go with \"{field}\""
                    ),
                ));
            }
            continue;
        }
        if turn.error.is_some() {
            let reply = turn.reply_fields();
            if let Some(field) = reply.first() {
                return Err(ScenarioError::at(
                    at,
                    format!(
                        "a turn is either a reply or an error: \"error\" cannot go with \"{field}\""
                    ),
                ));
            }
        } else {
            let only_with_error = [
                ("retry_after_ms", turn.retry_after_ms.is_some()),
                ("message", turn.message.is_some()),
            ];
            if let Some((field, _)) = only_with_error.iter().find(|(_, present)| *present) {
                return Err(ScenarioError::at(
                    format!("{at}.{field}"),
                    "only allowed with \"error\"",
                ));
            }
        }
        for (j, call) in turn.tool_calls.iter().flatten().enumerate() {
            if call.name.trim().is_empty() {
                return Err(ScenarioError::at(
                    format!("{at}.tool_calls[{j}].name"),
                    "must not be empty",
                ));
            }
            if call.id.as_deref().is_some_and(str::is_empty) {
                return Err(ScenarioError::at(
                    format!("{at}.tool_calls[{j}].id"),
                    "must not be empty (leave it out for a generated id)",
                ));
            }
        }
    }

    for (name, tool) in &file.tools {
        let mut at = String::from("$.tools");
        push_key(&mut at, name);
        if name.trim().is_empty() {
            return Err(ScenarioError::at(at, "a tool name must not be empty"));
        }
        if name == WRITE_TODOS {
            return Err(ScenarioError::at(
                at,
                "write_todos is built in (it validates its arguments and the kernel applies them); it cannot be scripted",
            ));
        }
        check_script(
            &format!("{at}.results"),
            "result",
            tool.results.len(),
            tool.repeat,
        )?;
        if tool.approval && tool.deferred {
            return Err(ScenarioError::at(
                format!("{at}.deferred"),
                "a tool is held for approval or answered from outside (deferred), not both",
            ));
        }
        for (i, result) in tool.results.iter().enumerate() {
            let at = format!("{at}.results[{i}]");
            if result.cancelled == Some(true) {
                let others = [
                    ("ok", result.ok.is_some()),
                    ("error", result.error.is_some()),
                    ("message", result.message.is_some()),
                    ("delay_ms", result.delay_ms.is_some()),
                    ("filler_tokens", result.filler_tokens.is_some()),
                ];
                if let Some((field, _)) = others.iter().find(|(_, present)| *present) {
                    return Err(ScenarioError::at(
                        at,
                        format!(
                            "a cancelled result has nothing else: \"cancelled\" cannot go with \"{field}\""
                        ),
                    ));
                }
                continue;
            }
            match (&result.ok, &result.error) {
                (Some(_), Some(_)) => {
                    return Err(ScenarioError::at(
                        at,
                        "a result is either \"ok\" or \"error\", not both",
                    ));
                }
                (None, None) => {
                    return Err(ScenarioError::at(at, "a result needs \"ok\" or \"error\""));
                }
                (Some(_), None) if result.message.is_some() => {
                    return Err(ScenarioError::at(
                        format!("{at}.message"),
                        "only allowed with \"error\"",
                    ));
                }
                (None, Some(_)) if result.filler_tokens.is_some() => {
                    return Err(ScenarioError::at(
                        format!("{at}.filler_tokens"),
                        "only allowed with \"ok\"",
                    ));
                }
                _ => {}
            }
        }
    }

    if let Some(context) = &file.context {
        context
            .policy()
            .validate()
            .map_err(|e| ScenarioError::at(format!("$.context.{}", e.field), e.problem))?;
        if terminus_tokenizer::by_name(context.tokenizer_name()).is_none() {
            return Err(ScenarioError::at(
                "$.context.tokenizer",
                format!(
                    "unknown tokenizer `{}`: expected `heuristic`, `o200k_base`, `cl100k_base` or an OpenAI model name",
                    context.tokenizer_name()
                ),
            ));
        }
        let tools: Vec<&str> = file
            .tools
            .keys()
            .map(String::as_str)
            .chain([WRITE_TODOS])
            .collect();
        context
            .check_auto_checkpoint(&file.policy)
            .map_err(|(field, problem)| ScenarioError::at(format!("$.context.{field}"), problem))?;
        if let Some((i, name)) = context.unknown_kept(&tools) {
            return Err(ScenarioError::at(
                format!("$.context.keep[{i}]"),
                format!(
                    "unknown tool `{name}`: expected one of the scenario's tools ({})",
                    tools.join(", ")
                ),
            ));
        }
    }

    if let Some(verifier) = &file.verifier {
        if !file.policy.verify_completion {
            return Err(ScenarioError::at(
                "$.verifier",
                "a verifier script is never used unless \"policy.verify_completion\" is true",
            ));
        }
        check_script(
            "$.verifier.verdicts",
            "verdict",
            verifier.verdicts.len(),
            verifier.repeat,
        )?;
    }

    if let Some(problem) = file.expect.as_ref().and_then(Expect::contradiction) {
        return Err(ScenarioError::at("$.expect.reason", problem));
    }
    Ok(())
}

fn check_script(at: &str, what: &str, len: usize, repeat: Repeat) -> Result<(), ScenarioError> {
    if len == 0 && repeat != Repeat::None {
        return Err(ScenarioError::at(
            at,
            format!(
                "empty, but repeat is \"{}\": a repeating script needs at least one {what}",
                repeat.as_str()
            ),
        ));
    }
    Ok(())
}
