//! `terminus eval SUITE.toml [--trials N] [--record DIR] [--replay DIR] [--json] [--svg FILE]`:
//! what the kernel changes on real runs, measured, with a table that is evidence.
//!
//! A suite names tasks (a live agent config, a task text, a check run after the agent in the
//! trial's folder), conditions (overrides of the config's policy) and the sampling. Each task runs
//! `--trials` times per condition, each trial in a fresh copy of the task's folder with its own
//! sampling seed and a time limit. A trial **succeeds** only when its run ended `complete` and its
//! check passed; the table ([`table`]) gives the four counts of outcome against check, pass@1 and
//! pass^k, and the run's figures.
//!
//! A recording is evidence ([`Evidence`]): the project's commit, the model file (name, size,
//! SHA-256) and the server's build as the server reports them, the sampling, the resolved task,
//! check and condition, the agent config's digest, and the checked files as the run left them.
//! `--replay DIR` replays every run offline through the kernel, re-runs every check on the
//! recorded files and recomputes the table; it refuses (exit 2, naming it) a task, check,
//! condition, config or sampling that is not the recorded one, a missing trial and a trial count
//! that differs. A new run writes into `DIR.partial` and replaces what `DIR` held for its tasks
//! only once it is whole.
//!
//! Exit 0 when the suite ran (whatever the rates), 2 for a bad suite, option or recording that is
//! not this suite's (naming the field or the difference), 3 when a recording does not replay to
//! its report or cannot be written.

mod evidence;
mod table;

use crate::agent::{LiveAgent, StoredAgent};
use crate::error::CliError;
use crate::record::Recorder;
use clap::Args;
use evidence::{Evidence, Manifest, Server, TrialSampling};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use table::Row;
use terminus_runtime::{Report, Run, RuntimeConfig};
use terminus_scenario::{Scenario, ScenarioFile};

/// Trials per task and condition when `--trials` is not given.
const DEFAULT_TRIALS: u32 = 5;
/// A trial's time limit when neither the task nor the suite sets `timeout_s`.
const DEFAULT_TIMEOUT_S: u64 = 600;

#[derive(Debug, Args)]
pub(crate) struct EvalArgs {
    /// The suite (TOML): `[[task]]`, `[[condition]]` and `[sampling]` tables.
    suite: PathBuf,
    /// Trials per task and condition (default 5). With `--replay`: the count the recording must
    /// hold.
    #[arg(long, value_name = "N")]
    trials: Option<u32>,
    /// Keep the recordings in DIR (`TASK/CONDITION/N.json` and `manifest.json`); default: a
    /// temporary folder.
    #[arg(long, value_name = "DIR", conflicts_with = "replay")]
    record: Option<PathBuf>,
    /// Recompute the table from the recordings in DIR, offline, re-running every check.
    #[arg(long, value_name = "DIR")]
    replay: Option<PathBuf>,
    /// Only these tasks (repeatable).
    #[arg(long = "only", value_name = "TASK")]
    only: Vec<String>,
    /// Send every task's model calls to this API root instead of its config's `base_url`.
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// Print every trial and row as JSON (the last stdout line).
    #[arg(long)]
    json: bool,
    /// Draw the success rates as an SVG chart.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

/// A suite file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Suite {
    /// What the suite measures.
    #[serde(default)]
    description: Option<String>,
    /// A trial's time limit in seconds (a task may set its own); default 600.
    #[serde(default)]
    timeout_s: Option<u64>,
    /// How the model samples; default: the server's own settings, no seed.
    #[serde(default)]
    sampling: Option<Sampling>,
    #[serde(default)]
    task: Vec<TaskSpec>,
    #[serde(default)]
    condition: Vec<ConditionSpec>,
}

impl Suite {
    /// A trial's time limit for `task`: its own, else the suite's, else the default.
    fn timeout_of(&self, task: &TaskSpec) -> u64 {
        task.timeout_s
            .or(self.timeout_s)
            .unwrap_or(DEFAULT_TIMEOUT_S)
    }
}

/// `[sampling]`: each trial's seed is `seed + N - 1` for trial N (the same seed for trial N under
/// every condition, so conditions meet the same draws as far as their conversations agree).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sampling {
    temperature: f64,
    seed: u64,
}

impl Sampling {
    fn trial(self, n: u32) -> TrialSampling {
        TrialSampling {
            temperature: self.temperature,
            seed: self.seed.wrapping_add(u64::from(n.saturating_sub(1))),
        }
    }
}

/// `[[task]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskSpec {
    name: String,
    /// The live agent config, relative to the suite's folder.
    config: String,
    /// The task text.
    task: String,
    /// The folder each trial starts from (copied fresh), relative to the suite's folder;
    /// default: an empty folder.
    #[serde(default)]
    folder: Option<String>,
    /// This task's time limit in seconds.
    #[serde(default)]
    timeout_s: Option<u64>,
    check: CheckSpec,
}

/// `check = { files = [...] }` or `check = { command = [...] }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    files: Vec<FileCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    command: Option<Vec<String>>,
}

/// A file that must exist in the trial's folder and match every pattern (regular expressions),
/// and none of `rejects`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileCheck {
    path: String,
    #[serde(default)]
    matches: Vec<String>,
    /// Patterns the file must not match (a copy of the input, the tool's status text).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    rejects: Vec<String>,
}

/// `[[condition]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConditionSpec {
    name: String,
    /// Overrides of the config's `[policy]`.
    #[serde(default)]
    policy: toml::Table,
}

/// One trial, as recorded (`TASK/CONDITION/N.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Trial {
    task: String,
    condition: String,
    trial: u32,
    /// Whether the check passed, and what it found.
    passed: bool,
    check: String,
    wall_ms: u64,
    /// The run's outcome and figures (`None`: the run failed; `error` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    report: Option<Figures>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// What the trial ran on and what it left.
    evidence: Evidence,
    /// The run as a scenario file (`terminus run` replays it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scenario: Option<Value>,
}

/// What the table reads of a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Figures {
    outcome: String,
    reason: String,
    steps: u32,
    model_calls: u32,
    tool_calls: u32,
    text_tool_calls: u32,
    nudges: u32,
    no_ops: u32,
    non_answers: u32,
    /// Verdicts of the verifier, and of them rejections.
    verifications: u32,
    verification_failures: u32,
    tokens: u64,
    result: Option<String>,
}

impl Figures {
    fn of(report: &Report) -> Figures {
        Figures {
            outcome: report.outcome.outcome_str().to_owned(),
            reason: report.outcome.reason_str().to_owned(),
            steps: report.steps,
            model_calls: report.model_calls,
            tool_calls: report.tool_calls,
            text_tool_calls: report.stats.text_tool_calls,
            nudges: report.nudges,
            no_ops: report.no_ops,
            non_answers: report.stats.non_answers,
            verifications: report.stats.verifications,
            verification_failures: report.stats.verification_failures,
            tokens: report.stats.tokens(),
            result: report.result.clone(),
        }
    }
}

pub(crate) async fn eval(args: EvalArgs) -> Result<u8, CliError> {
    let suite_file = args.suite.display().to_string();
    let invalid = |e: String| CliError::Invalid(format!("{suite_file}: {e}"));
    let text =
        std::fs::read_to_string(&args.suite).map_err(|e| invalid(format!("cannot read: {e}")))?;
    let suite = parse_suite(&text).map_err(invalid)?;
    let root = match args.suite.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if args.trials == Some(0) {
        return Err(CliError::Invalid("--trials: must be at least 1".into()));
    }
    if let Some(unknown) = args
        .only
        .iter()
        .find(|n| !suite.task.iter().any(|t| &t.name == *n))
    {
        return Err(invalid(format!("--only: no task is named `{unknown}`")));
    }
    let tasks: Vec<&TaskSpec> = suite
        .task
        .iter()
        .filter(|t| args.only.is_empty() || args.only.contains(&t.name))
        .collect();
    let configs = resolve(&args, &suite, &tasks, &root)?;
    let trials = match &args.replay {
        Some(dir) => replay(&args, &suite, &tasks, &configs, dir).await?,
        None => live(&args, &suite, &tasks, &configs, &root).await?,
    };
    let rows = table::rows(&tasks, &suite.condition, &trials);
    print!("{}", table::table(&rows));
    if let Some(path) = &args.svg {
        std::fs::write(path, table::svg(&rows))
            .map_err(|e| CliError::Internal(format!("cannot write {}: {e}", path.display())))?;
        eprintln!("terminus: eval: chart written to {}", path.display());
    }
    if args.json {
        let trials: Vec<Value> = trials
            .iter()
            .map(|t| {
                let mut v = serde_json::to_value(t).unwrap_or(Value::Null);
                if let Some(o) = v.as_object_mut() {
                    o.remove("scenario");
                    o.insert("succeeded".into(), Value::Bool(table::succeeded(t)));
                }
                v
            })
            .collect();
        let line = json!({
            "suite": suite_file,
            "description": suite.description,
            "trials": trials,
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        });
        let _ = writeln!(std::io::stdout().lock(), "{line}");
    }
    Ok(0)
}

/// A task's config under a condition: where it is, the config the trials run (the condition's
/// policy merged in, `--base-url` applied), and its digest (without the `base_url`, which
/// differs between machines).
struct Resolved {
    path: PathBuf,
    merged: String,
    digest: String,
}

/// Reads and checks every config under every condition before the first trial runs.
fn resolve(
    args: &EvalArgs,
    suite: &Suite,
    tasks: &[&TaskSpec],
    root: &Path,
) -> Result<BTreeMap<(String, String), Resolved>, CliError> {
    let mut configs = BTreeMap::new();
    for task in tasks {
        let i = suite
            .task
            .iter()
            .position(|t| t.name == task.name)
            .unwrap_or(0);
        let path = root.join(&task.config);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            CliError::Invalid(format!(
                "{}: task[{i}].config: cannot read {}: {e}",
                args.suite.display(),
                path.display()
            ))
        })?;
        if let Some(folder) = &task.folder
            && !root.join(folder).is_dir()
        {
            return Err(CliError::Invalid(format!(
                "{}: task[{i}].folder: {} is not a folder",
                args.suite.display(),
                root.join(folder).display()
            )));
        }
        for condition in &suite.condition {
            let bad = |e: String| CliError::Invalid(format!("{}: {e}", path.display()));
            let merged =
                overlay(&text, &condition.policy, args.base_url.as_deref()).map_err(bad)?;
            crate::config::AgentConfig::parse(&merged).map_err(bad)?;
            let digest =
                evidence::config_digest(&overlay(&text, &condition.policy, None).map_err(bad)?)
                    .map_err(bad)?;
            configs.insert(
                (task.name.clone(), condition.name.clone()),
                Resolved {
                    path: path.clone(),
                    merged,
                    digest,
                },
            );
        }
    }
    Ok(configs)
}
/// Reads a suite and checks what it names (every problem names its field).
fn parse_suite(text: &str) -> Result<Suite, String> {
    let de = toml::Deserializer::parse(text).map_err(|e| e.to_string())?;
    let suite: Suite = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().message().to_owned();
        if path == "." {
            message
        } else {
            format!("{path}: {message}")
        }
    })?;
    if suite.task.is_empty() {
        return Err("no [[task]]: a suite needs at least one".into());
    }
    if let Some(s) = &suite.sampling
        && !(0.0..=2.0).contains(&s.temperature)
    {
        return Err(format!(
            "sampling.temperature: must be in 0..=2, got {}",
            s.temperature
        ));
    }
    if suite.timeout_s == Some(0) || suite.task.iter().any(|t| t.timeout_s == Some(0)) {
        return Err("timeout_s: must be at least 1".into());
    }
    if suite.condition.is_empty() {
        return Err("no [[condition]]: a suite needs at least one".into());
    }
    let mut seen = Vec::new();
    for (i, t) in suite.task.iter().enumerate() {
        let at = format!("task[{i}]");
        check_name(&at, &t.name, &mut seen)?;
        if t.task.trim().is_empty() {
            return Err(format!("{at}.task: is empty"));
        }
        match (&t.check.files.is_empty(), &t.check.command) {
            (true, None) => {
                return Err(format!("{at}.check: give files = [...] or command = [...]"));
            }
            (false, Some(_)) => {
                return Err(format!("{at}.check: give files or command, not both"));
            }
            (_, Some(c)) if c.is_empty() => return Err(format!("{at}.check.command: is empty")),
            _ => {}
        }
        for (j, f) in t.check.files.iter().enumerate() {
            if f.path.trim().is_empty() || Path::new(&f.path).is_absolute() || f.path.contains("..")
            {
                return Err(format!(
                    "{at}.check.files[{j}].path: {:?} must be a relative path inside the trial's folder",
                    f.path
                ));
            }
            for (k, pattern) in f.matches.iter().enumerate() {
                regex::Regex::new(pattern)
                    .map_err(|e| format!("{at}.check.files[{j}].matches[{k}]: {e}"))?;
            }
            for (k, pattern) in f.rejects.iter().enumerate() {
                regex::Regex::new(pattern)
                    .map_err(|e| format!("{at}.check.files[{j}].rejects[{k}]: {e}"))?;
            }
        }
    }
    let mut seen = Vec::new();
    for (i, c) in suite.condition.iter().enumerate() {
        let at = format!("condition[{i}]");
        check_name(&at, &c.name, &mut seen)?;
        // The overrides must be policy fields: checked against the kernel's policy now.
        let mut probe = toml::Table::new();
        probe.insert("policy".into(), toml::Value::Table(c.policy.clone()));
        let text = toml::to_string(&probe).map_err(|e| format!("{at}.policy: {e}"))?;
        crate::config::AgentConfig::parse(&text).map_err(|e| format!("{at}.{e}"))?;
    }
    Ok(suite)
}

/// A task's or condition's name (it names folders): letters, digits, `-` and `_`, each once.
fn check_name<'a>(at: &str, name: &'a str, seen: &mut Vec<&'a str>) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if name.is_empty() || !name.chars().all(allowed) {
        return Err(format!(
            "{at}.name: {name:?} must be letters, digits, `-` or `_`"
        ));
    }
    if seen.contains(&name) {
        return Err(format!("{at}.name: `{name}` is named twice"));
    }
    seen.push(name);
    Ok(())
}

/// The folder a run writes into before it is whole: `DIR.partial` beside `DIR`.
fn partial_of(record: &Path) -> PathBuf {
    let mut name = record
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "recordings".into());
    name.push(".partial");
    record.with_file_name(name)
}

/// Runs every trial against the real model and tools, recording each into `DIR.partial`; once
/// every trial ran, the tasks' recordings replace those in `DIR`.
async fn live(
    args: &EvalArgs,
    suite: &Suite,
    tasks: &[&TaskSpec],
    configs: &BTreeMap<(String, String), Resolved>,
    root: &Path,
) -> Result<Vec<Trial>, CliError> {
    let trials = args.trials.unwrap_or(DEFAULT_TRIALS);
    let scratch = tempfile::tempdir()
        .map_err(|e| CliError::Internal(format!("cannot make a temporary folder: {e}")))?;
    let record = args
        .record
        .clone()
        .unwrap_or_else(|| scratch.path().join("recordings"));
    let partial = partial_of(&record);
    if partial.exists() {
        std::fs::remove_dir_all(&partial)
            .map_err(|e| CliError::Internal(format!("cannot clear {}: {e}", partial.display())))?;
    }
    let commit = evidence::commit(root);
    let mut servers: BTreeMap<String, Server> = BTreeMap::new();
    let total = tasks.len() * suite.condition.len() * trials as usize;
    let mut out = Vec::with_capacity(total);
    let mut done = 0;
    for task in tasks {
        for condition in &suite.condition {
            let Some(resolved) = configs.get(&(task.name.clone(), condition.name.clone())) else {
                continue;
            };
            let base_url = evidence::base_url(&resolved.merged);
            if !servers.contains_key(&base_url) {
                servers.insert(base_url.clone(), Server::probe(&base_url).await);
            }
            let server = servers.get(&base_url).cloned().unwrap_or_default();
            for n in 1..=trials {
                done += 1;
                let folder = scratch
                    .path()
                    .join(format!("{}-{}-{n}", task.name, condition.name));
                let sampling = suite.sampling.map(|s| s.trial(n));
                let timeout_s = suite.timeout_of(task);
                let seed = sampling.map_or(String::new(), |s| format!(", seed {}", s.seed));
                eprintln!(
                    "terminus: eval [{done}/{total}] {}/{} trial {n}: started (limit {timeout_s} s{seed})",
                    task.name, condition.name
                );
                let spec = TrialSpec {
                    task,
                    condition,
                    n,
                    resolved,
                    sampling,
                    timeout_s,
                };
                let mut trial = run_trial(&spec, root, &folder).await;
                trial.evidence.commit = commit.clone();
                trial.evidence.model = server.model.clone();
                trial.evidence.server = server.build.clone();
                let file = partial
                    .join(&task.name)
                    .join(&condition.name)
                    .join(format!("{n}.json"));
                if let Err(e) = write_trial(&file, &trial) {
                    eprintln!(
                        "terminus: eval: the run failed at {}/{} trial {n}; the trials so far are kept in {}",
                        task.name,
                        condition.name,
                        partial.display()
                    );
                    return Err(e);
                }
                progress(done, total, &trial);
                out.push(trial);
            }
        }
    }
    let manifest = Manifest {
        trials,
        conditions: suite.condition.iter().map(|c| c.name.clone()).collect(),
        sampling: suite.sampling.map(|s| (s.temperature, s.seed)),
        tasks: tasks.iter().map(|t| t.name.clone()).collect(),
    };
    evidence::commit_recording(&partial, &record, &manifest).map_err(CliError::Internal)?;
    Ok(out)
}

/// The config text with `policy` merged into its `[policy]` (and `base_url` into `[model]`).
fn overlay(text: &str, policy: &toml::Table, base_url: Option<&str>) -> Result<String, String> {
    let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let entry = table
        .entry("policy")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let Some(own) = entry.as_table_mut() else {
        return Err("[policy]: must be a table".into());
    };
    for (key, value) in policy {
        own.insert(key.clone(), value.clone());
    }
    if let Some(url) = base_url {
        match table.get_mut("model").and_then(toml::Value::as_table_mut) {
            Some(model) => {
                model.insert("base_url".into(), toml::Value::String(url.to_owned()));
            }
            None => return Err("--base-url: the config has no [model]".into()),
        }
    }
    toml::to_string(&table).map_err(|e| e.to_string())
}

/// A trial's own config: the sampling in `[model]`, and the time limit as the run's deadline
/// (unless the config sets a shorter one), so that a trial past it ends `aborted (deadline)`
/// with its report.
fn trial_config(
    merged: &str,
    sampling: Option<TrialSampling>,
    timeout_s: u64,
) -> Result<String, String> {
    let mut table: toml::Table = merged.parse().map_err(|e: toml::de::Error| e.to_string())?;
    if let (Some(s), Some(model)) = (
        sampling,
        table.get_mut("model").and_then(toml::Value::as_table_mut),
    ) {
        model.insert("temperature".into(), toml::Value::Float(s.temperature));
        let seed = i64::try_from(s.seed).map_err(|_| "[sampling].seed: too large".to_owned())?;
        model.insert("seed".into(), toml::Value::Integer(seed));
    }
    let limit = i64::try_from(timeout_s.saturating_mul(1000)).unwrap_or(i64::MAX);
    if let Some(policy) = table.get_mut("policy").and_then(toml::Value::as_table_mut) {
        let shorter = policy
            .get("deadline_ms")
            .and_then(toml::Value::as_integer)
            .is_some_and(|d| d <= limit);
        if !shorter {
            policy.insert("deadline_ms".into(), toml::Value::Integer(limit));
        }
    }
    toml::to_string(&table).map_err(|e| e.to_string())
}

/// What one trial runs.
struct TrialSpec<'a> {
    task: &'a TaskSpec,
    condition: &'a ConditionSpec,
    n: u32,
    resolved: &'a Resolved,
    sampling: Option<TrialSampling>,
    timeout_s: u64,
}

impl TrialSpec<'_> {
    /// The evidence of what this trial is, before it runs (the run's outcome and files are
    /// added after).
    fn evidence(&self) -> Evidence {
        Evidence {
            commit: String::new(),
            model: None,
            server: None,
            sampling: self.sampling,
            timeout_s: self.timeout_s,
            task: self.task.task.clone(),
            check: self.task.check.clone(),
            condition: evidence::policy_json(&self.condition.policy),
            config_sha256: self.resolved.digest.clone(),
            files: BTreeMap::new(),
        }
    }
}

/// One trial: a fresh copy of the task's folder, the agent run in it (recorded) within the
/// trial's time limit, the check, and the checked files kept.
async fn run_trial(spec: &TrialSpec<'_>, root: &Path, folder: &Path) -> Trial {
    let mut trial = Trial {
        task: spec.task.name.clone(),
        condition: spec.condition.name.clone(),
        trial: spec.n,
        passed: false,
        check: String::new(),
        wall_ms: 0,
        report: None,
        error: None,
        evidence: spec.evidence(),
        scenario: None,
    };
    let folder = match prepare(spec.task, root, folder) {
        Ok(folder) => folder,
        Err(e) => {
            trial.check = "not checked: the trial's folder could not be made".into();
            trial.error = Some(e);
            return trial;
        }
    };
    let started = Instant::now();
    let outcome = match trial_config(&spec.resolved.merged, spec.sampling, spec.timeout_s) {
        Err(e) => Err(format!("{}: {e}", spec.resolved.path.display())),
        Ok(config) => {
            let stored = stored_agent(&spec.resolved.path, config, &folder);
            // The deadline ends the run with its report; this bounds a run that cannot see it
            // (a tool call that never returns).
            let limit = Duration::from_secs(spec.timeout_s.saturating_add(60));
            match stored {
                Err(e) => Err(e),
                Ok(stored) => {
                    match tokio::time::timeout(limit, agent_run(&stored, &spec.task.task)).await {
                        Err(_) => Err(format!(
                            "the run went past its time limit ({} s) and was stopped",
                            spec.timeout_s
                        )),
                        Ok(Err(e)) => Err(format!("the run failed: {e}")),
                        Ok(Ok(done)) => Ok(done),
                    }
                }
            }
        }
    };
    trial.wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match outcome {
        Ok((report, scenario)) => {
            trial.report = Some(Figures::of(&report));
            trial.scenario = serde_json::to_value(scenario).ok();
        }
        Err(e) => trial.error = Some(e),
    }
    trial.evidence.files = evidence::checked_files(&spec.task.check, &folder);
    let (passed, check) = check_files(&spec.task.check, &folder).await;
    (trial.passed, trial.check) = answered(trial.report.as_ref(), passed, check);
    trial
}

/// The check's verdict, with what the run ended on: a run that ended `complete` must have ended
/// on an answer (`docs/eval.md`, "What a trial is worth"). A result that is not one by the
/// kernel's own definition (`terminus_kernel::answer::hands_back`, applied to the result with no
/// kernel text to compare: a hand-back, an acknowledgement, "None", a courteous closing alone)
/// or that is a tool call written as text fails the check, whatever the files say: the run
/// claimed the task done and gave no answer. Computed from the report, so a replay computes it
/// again.
fn answered(report: Option<&Figures>, passed: bool, check: String) -> (bool, String) {
    use terminus_kernel::answer::{Said, hands_back};
    let Some(result) = report
        .filter(|r| r.outcome == "complete")
        .map(|r| r.result.as_deref().unwrap_or_default())
    else {
        return (passed, check);
    };
    let not_an_answer = if result.trim().is_empty() {
        Some("an empty reply")
    } else if terminus_kernel::textcall::find(result).is_some() {
        Some("a tool call written as text")
    } else if hands_back(result, &Said::default()) {
        Some("a reply that is not an answer")
    } else {
        None
    };
    match not_an_answer {
        Some(what) => (false, format!("{check}; but the run ended on {what}")),
        None => (passed, check),
    }
}

/// A fresh copy of the task's folder at `folder`, canonical.
fn prepare(task: &TaskSpec, root: &Path, folder: &Path) -> Result<PathBuf, String> {
    let io = |e: std::io::Error| format!("cannot prepare {}: {e}", folder.display());
    std::fs::create_dir_all(folder).map_err(io)?;
    if let Some(from) = &task.folder {
        copy_dir(&root.join(from), folder).map_err(io)?;
    }
    folder.canonicalize().map_err(io)
}

fn stored_agent(config_path: &Path, config: String, folder: &Path) -> Result<StoredAgent, String> {
    let dir = match config_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("cannot find {}: {e}", dir.display()))?;
    Ok(StoredAgent {
        file: config_path.display().to_string(),
        config,
        dir,
        cwd: folder.to_path_buf(),
    })
}

/// The agent of `stored` on `task`, in memory, recorded; no progress lines.
async fn agent_run(stored: &StoredAgent, task: &str) -> Result<(Report, ScenarioFile), CliError> {
    let live = LiveAgent::new(stored)?;
    let mcp = live.connect().await?;
    let recorder = Arc::new(Recorder::default());
    let policy = live.policy().clone();
    let run = live.run(
        |model| Run::new(task.to_owned(), policy.clone(), model).name("eval"),
        &mcp,
        Some(&recorder),
    );
    let runtime: RuntimeConfig = live.runtime(Duration::from_secs(30));
    let result = run.config(runtime).execute().await;
    mcp.shutdown().await;
    let report = result.map_err(|e| CliError::Internal(format!("{}: {e}", live.file())))?;
    recorder.ended(
        report.outcome
            == terminus_kernel::Outcome::Aborted(terminus_kernel::AbortReason::Cancelled),
    );
    let scenario = recorder.scenario(
        task,
        &policy,
        live.context(),
        live.system_prompt().map(str::to_owned),
        format!("Recorded by `terminus eval` from {}.", live.file()),
    );
    Ok((report, scenario))
}
/// Runs the checker in the trial's folder: whether it passed, and what it found.
async fn check_files(spec: &CheckSpec, folder: &Path) -> (bool, String) {
    if let Some(command) = &spec.command {
        let mut child = tokio::process::Command::new(&command[0]);
        child
            .args(&command[1..])
            .current_dir(folder)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(120), child.output()).await;
        return match out {
            Err(_) => (false, format!("`{}` ran past 120 s", command.join(" "))),
            Ok(Err(e)) => (false, format!("cannot run `{}`: {e}", command[0])),
            Ok(Ok(out)) if out.status.success() => {
                (true, format!("`{}` exit 0", command.join(" ")))
            }
            Ok(Ok(out)) => (
                false,
                format!(
                    "`{}` {}: {}",
                    command.join(" "),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            ),
        };
    }
    for f in &spec.files {
        let path = folder.join(&f.path);
        let Ok(text) = std::fs::read_to_string(&path) else {
            return (false, format!("{} is missing", f.path));
        };
        for pattern in &f.matches {
            // Checked when the suite was read.
            let Ok(re) = regex::Regex::new(pattern) else {
                return (false, format!("bad pattern {pattern:?}"));
            };
            if !re.is_match(&text) {
                return (false, format!("{} does not match {pattern:?}", f.path));
            }
        }
        for pattern in &f.rejects {
            let Ok(re) = regex::Regex::new(pattern) else {
                return (false, format!("bad pattern {pattern:?}"));
            };
            if re.is_match(&text) {
                return (
                    false,
                    format!("{} matches the rejected {pattern:?}", f.path),
                );
            }
        }
    }
    let names: Vec<&str> = spec.files.iter().map(|f| f.path.as_str()).collect();
    (true, format!("{} as required", names.join(", ")))
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

fn write_trial(file: &Path, trial: &Trial) -> Result<(), CliError> {
    let internal = |e: String| CliError::Internal(format!("cannot write {}: {e}", file.display()));
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| internal(e.to_string()))?;
    }
    let mut text = serde_json::to_string_pretty(trial).map_err(|e| internal(e.to_string()))?;
    text.push('\n');
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text).map_err(|e| internal(e.to_string()))?;
    std::fs::rename(&tmp, file).map_err(|e| internal(e.to_string()))
}

fn progress(done: usize, total: usize, t: &Trial) {
    let what = match (&t.report, &t.error) {
        (Some(r), _) => format!(
            "{} ({}), {} model calls, {} tool calls ({} written as text), {} non-answers refused, {} tokens",
            r.outcome,
            r.reason,
            r.model_calls,
            r.tool_calls,
            r.text_tool_calls,
            r.non_answers,
            r.tokens
        ),
        (None, Some(e)) => format!("error: {e}"),
        (None, None) => "no run".to_owned(),
    };
    let verdict = if table::succeeded(t) {
        "success"
    } else if t.report.as_ref().is_some_and(|r| r.outcome == "complete") {
        "FALSE COMPLETION"
    } else {
        "no success"
    };
    let line = format!(
        "terminus: eval [{done}/{total}] {}/{} trial {}: {what}; check {}: {}; {verdict}; {:.1} s\n",
        t.task,
        t.condition,
        t.trial,
        if t.passed { "passed" } else { "failed" },
        t.check,
        t.wall_ms as f64 / 1000.0
    );
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Reads the recorded trials of `tasks`, refuses a recording that is not of this suite, replays
/// each run offline (its report must be the recorded one) and re-runs each check on the files the
/// run left.
async fn replay(
    args: &EvalArgs,
    suite: &Suite,
    tasks: &[&TaskSpec],
    configs: &BTreeMap<(String, String), Resolved>,
    dir: &Path,
) -> Result<Vec<Trial>, CliError> {
    let refuse = |e: String| CliError::Invalid(format!("--replay {}: {e}", dir.display()));
    let manifest = Manifest::read(dir).map_err(refuse)?;
    let n = manifest.trials;
    if let Some(want) = args.trials
        && want != n
    {
        return Err(refuse(format!(
            "the recording holds {n} trials per task and condition, not --trials {want}"
        )));
    }
    let sampling = suite.sampling.map(|s| (s.temperature, s.seed));
    if manifest.sampling != sampling {
        return Err(refuse(format!(
            "recorded with sampling {:?} (temperature, seed), the suite says {sampling:?}",
            manifest.sampling
        )));
    }
    let mut out = Vec::new();
    for task in tasks {
        if !manifest.tasks.contains(&task.name) {
            return Err(refuse(format!("task `{}` was not recorded", task.name)));
        }
        for condition in &suite.condition {
            if !manifest.conditions.contains(&condition.name) {
                return Err(refuse(format!(
                    "condition `{}` was not recorded",
                    condition.name
                )));
            }
            let folder = dir.join(&task.name).join(&condition.name);
            let found = std::fs::read_dir(&folder)
                .map(|d| {
                    d.filter_map(Result::ok)
                        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                        .count()
                })
                .unwrap_or(0);
            if found != n as usize {
                return Err(refuse(format!(
                    "{}/{}: {found} recorded trials, the recording says {n}",
                    task.name, condition.name
                )));
            }
            let Some(resolved) = configs.get(&(task.name.clone(), condition.name.clone())) else {
                continue;
            };
            for i in 1..=n {
                let file = folder.join(format!("{i}.json"));
                let spec = TrialSpec {
                    task,
                    condition,
                    n: i,
                    resolved,
                    sampling: suite.sampling.map(|s| s.trial(i)),
                    timeout_s: suite.timeout_of(task),
                };
                out.push(replay_trial(&file, &spec).await?);
            }
        }
    }
    eprintln!(
        "terminus: eval: {} recorded trials replayed offline, each to its report, each check run again on the files its run left",
        out.len()
    );
    Ok(out)
}

async fn replay_trial(file: &Path, spec: &TrialSpec<'_>) -> Result<Trial, CliError> {
    let name = file.display().to_string();
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::Invalid(format!("{name}: a missing trial: {e}")))?;
    let de = &mut serde_json::Deserializer::from_str(&text);
    let trial: Trial = serde_path_to_error::deserialize(de)
        .map_err(|e| CliError::Invalid(format!("{name}: {}: {}", e.path(), e.inner())))?;
    if trial.task != spec.task.name
        || trial.condition != spec.condition.name
        || trial.trial != spec.n
    {
        return Err(CliError::Invalid(format!(
            "{name}: trial {} of {}/{}, found as trial {} of {}/{}",
            trial.trial, trial.task, trial.condition, spec.n, spec.task.name, spec.condition.name
        )));
    }
    if let Some(difference) = trial.evidence.differs_from(&spec.evidence()) {
        return Err(CliError::Invalid(format!(
            "{name}: not this suite's trial: {difference}"
        )));
    }
    let report = match (&trial.report, &trial.scenario) {
        (Some(recorded), Some(scenario)) => {
            let scenario = Scenario::parse(&scenario.to_string())
                .map_err(|e| CliError::Invalid(format!("{name}: scenario: {e}")))?;
            let config = RuntimeConfig {
                system_prompt: scenario.file().system_prompt.clone(),
                ..RuntimeConfig::default()
            };
            let report = scenario
                .run()
                .config(config)
                .execute()
                .await
                .map_err(|e| CliError::Internal(format!("{name}: the replay failed: {e}")))?;
            let replayed = Figures::of(&report);
            if &replayed != recorded {
                return Err(CliError::Internal(format!(
                    "{name}: the recording replays to {} ({}) after {} model calls with result {:?}, not to the recorded {} ({}) after {} with result {:?}",
                    replayed.outcome,
                    replayed.reason,
                    replayed.model_calls,
                    replayed.result,
                    recorded.outcome,
                    recorded.reason,
                    recorded.model_calls,
                    recorded.result,
                )));
            }
            Some(replayed)
        }
        (None, _) => None,
        (Some(_), None) => {
            return Err(CliError::Invalid(format!(
                "{name}: a report without the run's scenario cannot be replayed"
            )));
        }
    };
    // The check again, on the files as the run left them.
    let scratch = tempfile::tempdir()
        .map_err(|e| CliError::Internal(format!("cannot make a temporary folder: {e}")))?;
    evidence::write_files(scratch.path(), &trial.evidence.files)
        .map_err(|e| CliError::Invalid(format!("{name}: evidence.files: {e}")))?;
    let (passed, check) = check_files(&spec.task.check, scratch.path()).await;
    let (passed, check) = answered(report.as_ref(), passed, check);
    Ok(Trial {
        report,
        passed,
        check,
        ..trial
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_suite_names_the_field() {
        let cases = [
            ("", "no [[task]]"),
            (
                "[[task]]\nname = \"a\"\nconfig = \"c.toml\"\ntask = \"t\"\ncheck = { files = [{ path = \"p\" }] }\n",
                "no [[condition]]",
            ),
            (
                "[[task]]\nname = \"a\"\nconfig = \"c.toml\"\ntask = \"t\"\ncheck = {}\n[[condition]]\nname = \"k\"\n",
                "task[0].check: give files",
            ),
            (
                "[[task]]\nname = \"a\"\nconfig = \"c.toml\"\ntask = \"t\"\ncheck = { files = [{ path = \"p\", matches = [\"(\"] }] }\n[[condition]]\nname = \"k\"\n",
                "task[0].check.files[0].matches[0]",
            ),
            (
                "[[task]]\nname = \"a\"\nconfig = \"c.toml\"\ntask = \"t\"\ncheck = { command = [\"true\"] }\n[[condition]]\nname = \"k\"\npolicy = { max_stpes = 3 }\n",
                "condition[0].[policy].max_stpes",
            ),
            (
                "[[task]]\nname = \"a\"\nconfig = \"c.toml\"\ntask = \"t\"\ncheck = { command = [\"true\"] }\ntrials = 3\n[[condition]]\nname = \"k\"\n",
                "task[0].trials",
            ),
            (
                "[[task]]\nname = \"a b\"\nconfig = \"c.toml\"\ntask = \"t\"\ncheck = { command = [\"true\"] }\n[[condition]]\nname = \"k\"\n",
                "task[0].name",
            ),
        ];
        for (text, want) in cases {
            let err = parse_suite(text).expect_err(text);
            assert!(err.contains(want), "{err:?} should name {want:?}");
        }
    }

    #[test]
    fn a_policy_overlay_replaces_only_its_fields() {
        let text = "[model]\nprovider = \"openai\"\nbase_url = \"http://a/v1\"\nmodel = \"m\"\n[policy]\nmax_steps = 40\ncompletion_requires = [\"write_file\"]\n";
        let mut policy = toml::Table::new();
        policy.insert("completion_requires".into(), toml::Value::Array(vec![]));
        let merged = overlay(text, &policy, Some("http://b/v1")).expect("merged");
        let config = crate::config::AgentConfig::parse(&merged).expect("a config");
        assert_eq!(config.policy.max_steps, 40);
        assert!(config.policy.completion_requires.is_empty());
        assert!(merged.contains("http://b/v1"));
    }
}
