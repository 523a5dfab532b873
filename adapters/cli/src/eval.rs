//! `terminus eval SUITE.toml [--trials N] [--record DIR] [--replay DIR] [--json] [--svg FILE]`:
//! what the kernel changes on real runs, measured.
//!
//! A suite names tasks (a live agent config, a task text, a checker run after the agent in the
//! trial's folder) and conditions (overrides of the config's policy: `kernel` with the config's
//! own, `bare` with the gates off, a plain tool loop). Each task runs `--trials` times per
//! condition, each trial in a fresh copy of the task's folder, and is recorded (the run as a
//! scenario file, with the checker's verdict and the wall time). The table gives per task and
//! condition the success rate by the checker, pass^k (all k trials succeed), the outcomes, the
//! medians of model calls, tokens and wall time, and how many trials completed with a tool call
//! written as text as their result. `--replay DIR` replays every recording offline through the
//! kernel (no model, no tools), checks that each gives the report it recorded, and prints the
//! same table, byte for byte.
//!
//! Exit 0 when the suite ran (whatever the rates), 2 for a bad suite or option (naming the
//! field), 3 when a recording does not replay to its report or cannot be written.

use crate::agent::{LiveAgent, StoredAgent};
use crate::error::CliError;
use crate::record::Recorder;
use clap::Args;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use terminus_kernel::textcall;
use terminus_runtime::{Report, Run, RuntimeConfig};
use terminus_scenario::{Scenario, ScenarioFile};

#[derive(Debug, Args)]
pub(crate) struct EvalArgs {
    /// The suite (TOML): `[[task]]` and `[[condition]]` tables.
    suite: PathBuf,
    /// Trials per task and condition.
    #[arg(long, default_value_t = 3, value_name = "N")]
    trials: u32,
    /// Keep each trial's recording in DIR (`TASK/CONDITION/N.json`); default: a temporary folder.
    #[arg(long, value_name = "DIR", conflicts_with = "replay")]
    record: Option<PathBuf>,
    /// Recompute the table from the recordings in DIR, offline.
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
    #[serde(default)]
    task: Vec<TaskSpec>,
    #[serde(default)]
    condition: Vec<ConditionSpec>,
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
    check: CheckSpec,
}

/// `check = { files = [...] }` or `check = { command = [...] }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckSpec {
    #[serde(default)]
    files: Vec<FileCheck>,
    #[serde(default)]
    command: Option<Vec<String>>,
}

/// A file that must exist in the trial's folder and match every pattern (regular expressions).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileCheck {
    path: String,
    #[serde(default)]
    matches: Vec<String>,
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
    /// Whether the checker passed, and what it said.
    passed: bool,
    check: String,
    wall_ms: u64,
    /// The run's outcome and figures (`None`: the run could not start; `error` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    report: Option<Figures>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
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
            tokens: report.stats.tokens(),
            result: report.result.clone(),
        }
    }

    /// A run that completed with a tool call written as text as its result.
    fn call_as_result(&self) -> bool {
        self.outcome == "complete"
            && self
                .result
                .as_deref()
                .is_some_and(|r| textcall::find(r).is_some())
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
    if args.trials == 0 {
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
    let trials = match &args.replay {
        Some(dir) => replay(&suite, &tasks, dir).await?,
        None => live(&args, &suite, &tasks, &root).await?,
    };
    let rows = rows(&suite, &tasks, &trials);
    print!("{}", table(&rows));
    if let Some(path) = &args.svg {
        std::fs::write(path, svg(&rows))
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

/// Runs every trial against the real model and tools, recording each.
async fn live(
    args: &EvalArgs,
    suite: &Suite,
    tasks: &[&TaskSpec],
    root: &Path,
) -> Result<Vec<Trial>, CliError> {
    let scratch = tempfile::tempdir()
        .map_err(|e| CliError::Internal(format!("cannot make a temporary folder: {e}")))?;
    let record = args
        .record
        .clone()
        .unwrap_or_else(|| scratch.path().join("recordings"));
    // Every config is read and checked before the first trial runs.
    let mut configs = BTreeMap::new();
    for (i, task) in tasks.iter().enumerate() {
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
            let merged = overlay(&text, &condition.policy, args.base_url.as_deref())
                .map_err(|e| CliError::Invalid(format!("{}: {e}", path.display())))?;
            crate::config::AgentConfig::parse(&merged)
                .map_err(|e| CliError::Invalid(format!("{}: {e}", path.display())))?;
            configs.insert(
                (task.name.clone(), condition.name.clone()),
                (path.clone(), merged),
            );
        }
    }
    let total = tasks.len() * suite.condition.len() * args.trials as usize;
    let mut out = Vec::with_capacity(total);
    let mut done = 0;
    for task in tasks {
        for condition in &suite.condition {
            let Some((path, merged)) = configs.get(&(task.name.clone(), condition.name.clone()))
            else {
                continue;
            };
            // A recording folder holds one run's trials: those of an earlier run go first.
            let kept = record.join(&task.name).join(&condition.name);
            if kept.is_dir() {
                std::fs::remove_dir_all(&kept).map_err(|e| {
                    CliError::Internal(format!("cannot clear {}: {e}", kept.display()))
                })?;
            }
            for n in 1..=args.trials {
                done += 1;
                let folder = scratch
                    .path()
                    .join(format!("{}-{}-{n}", task.name, condition.name));
                let trial = run_trial(task, condition, n, path, merged, root, &folder).await?;
                let file = record
                    .join(&task.name)
                    .join(&condition.name)
                    .join(format!("{n}.json"));
                write_trial(&file, &trial)?;
                progress(done, total, &trial);
                out.push(trial);
            }
        }
    }
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

/// One trial: a fresh copy of the task's folder, the agent run in it (recorded), the checker.
async fn run_trial(
    task: &TaskSpec,
    condition: &ConditionSpec,
    n: u32,
    config_path: &Path,
    config: &str,
    root: &Path,
    folder: &Path,
) -> Result<Trial, CliError> {
    let internal =
        |e: std::io::Error| CliError::Internal(format!("cannot prepare {}: {e}", folder.display()));
    std::fs::create_dir_all(folder).map_err(internal)?;
    if let Some(from) = &task.folder {
        copy_dir(&root.join(from), folder).map_err(internal)?;
    }
    let folder = folder.canonicalize().map_err(internal)?;
    let dir = match config_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = dir
        .canonicalize()
        .map_err(|e| CliError::Internal(format!("cannot find {}: {e}", dir.display())))?;
    let stored = StoredAgent {
        file: config_path.display().to_string(),
        config: config.to_owned(),
        dir,
        cwd: folder.clone(),
    };
    let started = Instant::now();
    let (report, scenario, error) = match agent_run(&stored, &task.task).await {
        Ok((report, scenario)) => (Some(report), Some(scenario), None),
        Err(e) => (None, None, Some(e.to_string())),
    };
    let wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let (passed, check) = if error.is_some() {
        (false, "not checked: the run did not start".to_owned())
    } else {
        check(&task.check, &folder).await
    };
    Ok(Trial {
        task: task.name.clone(),
        condition: condition.name.clone(),
        trial: n,
        passed,
        check,
        wall_ms,
        report: report.as_ref().map(Figures::of),
        error,
        scenario: scenario.and_then(|s| serde_json::to_value(s).ok()),
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
async fn check(spec: &CheckSpec, folder: &Path) -> (bool, String) {
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
            "{} ({}), {} model calls, {} tool calls ({} written as text), {} tokens",
            r.outcome, r.reason, r.model_calls, r.tool_calls, r.text_tool_calls, r.tokens
        ),
        (None, Some(e)) => format!("error: {e}"),
        (None, None) => "no run".to_owned(),
    };
    let line = format!(
        "terminus: eval [{done}/{total}] {}/{} trial {}: {what}; check {}: {}; {:.1} s\n",
        t.task,
        t.condition,
        t.trial,
        if t.passed { "passed" } else { "failed" },
        t.check,
        t.wall_ms as f64 / 1000.0
    );
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Reads the recorded trials of `tasks` and replays each recording offline: its report must be
/// the one recorded.
async fn replay(suite: &Suite, tasks: &[&TaskSpec], dir: &Path) -> Result<Vec<Trial>, CliError> {
    let mut out = Vec::new();
    let mut total = 0;
    for task in tasks {
        for condition in &suite.condition {
            let folder = dir.join(&task.name).join(&condition.name);
            let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(&folder)
                .map_err(|e| {
                    CliError::Invalid(format!(
                        "--replay: no recordings of {}/{} in {}: {e}",
                        task.name,
                        condition.name,
                        folder.display()
                    ))
                })?
                .filter_map(Result::ok)
                .filter_map(|e| {
                    let path = e.path();
                    let n = path.file_stem()?.to_str()?.parse().ok()?;
                    (path.extension()? == "json").then_some((n, path))
                })
                .collect();
            files.sort();
            total += files.len();
            for (_, file) in files {
                out.push(replay_trial(&file, task, condition).await?);
            }
        }
    }
    eprintln!("terminus: eval: {total} recorded trials replayed offline, each to its report");
    Ok(out)
}

async fn replay_trial(
    file: &Path,
    task: &TaskSpec,
    condition: &ConditionSpec,
) -> Result<Trial, CliError> {
    let name = file.display().to_string();
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::Invalid(format!("{name}: cannot read: {e}")))?;
    let de = &mut serde_json::Deserializer::from_str(&text);
    let trial: Trial = serde_path_to_error::deserialize(de)
        .map_err(|e| CliError::Invalid(format!("{name}: {}: {}", e.path(), e.inner())))?;
    if trial.task != task.name || trial.condition != condition.name {
        return Err(CliError::Invalid(format!(
            "{name}: a trial of {}/{}, found under {}/{}",
            trial.task, trial.condition, task.name, condition.name
        )));
    }
    let (Some(recorded), Some(scenario)) = (&trial.report, &trial.scenario) else {
        return Ok(trial);
    };
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
            "{name}: the recording replays to {} ({}) after {} model calls, not to the recorded {} ({}) after {}",
            replayed.outcome,
            replayed.reason,
            replayed.model_calls,
            recorded.outcome,
            recorded.reason,
            recorded.model_calls
        )));
    }
    Ok(Trial {
        report: Some(replayed),
        ..trial
    })
}

/// One line of the table: a task under a condition.
struct Row {
    task: String,
    condition: String,
    trials: usize,
    successes: usize,
    /// pass^k for k = trials: the chance that k trials all succeed, C(c, k) / C(n, k).
    pass_all: f64,
    outcomes: BTreeMap<String, usize>,
    model_calls: Option<f64>,
    tokens: Option<f64>,
    wall_s: Option<f64>,
    text_tool_calls: u64,
    call_as_result: usize,
    errors: usize,
}

impl Row {
    fn json(&self) -> Value {
        json!({
            "task": self.task,
            "condition": self.condition,
            "trials": self.trials,
            "successes": self.successes,
            "success_rate": if self.trials == 0 { 0.0 } else { self.successes as f64 / self.trials as f64 },
            "pass_k": self.pass_all,
            "outcomes": self.outcomes,
            "median_model_calls": self.model_calls,
            "median_tokens": self.tokens,
            "median_wall_s": self.wall_s,
            "text_tool_calls": self.text_tool_calls,
            "complete_with_a_call_as_result": self.call_as_result,
            "errors": self.errors,
        })
    }
}

fn rows(suite: &Suite, tasks: &[&TaskSpec], trials: &[Trial]) -> Vec<Row> {
    let mut rows = Vec::new();
    for task in tasks {
        for condition in &suite.condition {
            let these: Vec<&Trial> = trials
                .iter()
                .filter(|t| t.task == task.name && t.condition == condition.name)
                .collect();
            let n = these.len();
            let successes = these.iter().filter(|t| t.passed).count();
            let mut outcomes = BTreeMap::new();
            for t in &these {
                let key = match &t.report {
                    Some(r) => format!("{} ({})", r.outcome, r.reason),
                    None => "error".to_owned(),
                };
                *outcomes.entry(key).or_insert(0) += 1;
            }
            let reports: Vec<&Figures> = these.iter().filter_map(|t| t.report.as_ref()).collect();
            rows.push(Row {
                task: task.name.clone(),
                condition: condition.name.clone(),
                trials: n,
                successes,
                pass_all: pass_k(n, successes, n),
                outcomes,
                model_calls: median(reports.iter().map(|r| f64::from(r.model_calls)).collect()),
                tokens: median(reports.iter().map(|r| r.tokens as f64).collect()),
                wall_s: median(these.iter().map(|t| t.wall_ms as f64 / 1000.0).collect()),
                text_tool_calls: reports.iter().map(|r| u64::from(r.text_tool_calls)).sum(),
                call_as_result: reports.iter().filter(|r| r.call_as_result()).count(),
                errors: these.iter().filter(|t| t.error.is_some()).count(),
            });
        }
    }
    rows
}

/// pass^k: the chance that `k` trials drawn from `n` with `c` successes all succeed.
fn pass_k(n: usize, c: usize, k: usize) -> f64 {
    if k == 0 || k > n {
        return 0.0;
    }
    (0..k)
        .map(|i| (c.saturating_sub(i)) as f64 / (n - i) as f64)
        .product()
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

/// The table, as Markdown.
fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| task | condition | success | pass^k | outcomes | model calls | tokens | wall s | calls written as text (run) | complete with a call as result |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    let num = |v: Option<f64>, digits: usize| v.map_or("-".to_owned(), |v| format!("{v:.digits$}"));
    for r in rows {
        let outcomes: Vec<String> = r
            .outcomes
            .iter()
            .map(|(k, v)| format!("{k} x{v}"))
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {}/{} | {:.2} (k={}) | {} | {} | {} | {} | {} | {} |",
            r.task,
            r.condition,
            r.successes,
            r.trials,
            r.pass_all,
            r.trials,
            outcomes.join(", "),
            num(r.model_calls, 1),
            num(r.tokens, 0),
            num(r.wall_s, 1),
            r.text_tool_calls,
            r.call_as_result,
        );
    }
    out
}

/// A bar chart of the success rates: one group per task, one bar per condition.
fn svg(rows: &[Row]) -> String {
    let conditions: Vec<&str> = {
        let mut c: Vec<&str> = Vec::new();
        for r in rows {
            if !c.contains(&r.condition.as_str()) {
                c.push(&r.condition);
            }
        }
        c
    };
    let tasks: Vec<&str> = {
        let mut t: Vec<&str> = Vec::new();
        for r in rows {
            if !t.contains(&r.task.as_str()) {
                t.push(&r.task);
            }
        }
        t
    };
    const COLORS: [&str; 4] = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1"];
    let (bar, gap, height, top, left) = (28.0, 24.0, 200.0, 30.0, 40.0);
    let group = bar * conditions.len() as f64 + gap;
    let width = left + group * tasks.len() as f64 + 20.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{:.0}\" font-family=\"sans-serif\" font-size=\"11\">\n",
        top + height + 60.0
    );
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"16\">success rate by the checker, per task and condition</text>"
    );
    for pct in [0.0, 0.5, 1.0] {
        let y = top + height * (1.0 - pct);
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/><text x=\"4\" y=\"{:.1}\">{:.0}%</text>",
            width - 10.0,
            y + 4.0,
            pct * 100.0
        );
    }
    for (i, task) in tasks.iter().enumerate() {
        let x0 = left + gap / 2.0 + group * i as f64;
        for (j, condition) in conditions.iter().enumerate() {
            let Some(r) = rows
                .iter()
                .find(|r| r.task == *task && r.condition == *condition)
            else {
                continue;
            };
            let rate = if r.trials == 0 {
                0.0
            } else {
                r.successes as f64 / r.trials as f64
            };
            let h = height * rate;
            let x = x0 + bar * j as f64;
            let _ = writeln!(
                s,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{}\"><title>{task} / {condition}: {}/{}</title></rect>",
                top + height - h,
                bar - 4.0,
                COLORS[j % COLORS.len()],
                r.successes,
                r.trials
            );
        }
        let _ = writeln!(
            s,
            "<text x=\"{x0:.1}\" y=\"{:.1}\">{}</text>",
            top + height + 16.0,
            xml(task)
        );
    }
    for (j, condition) in conditions.iter().enumerate() {
        let x = left + 120.0 * j as f64;
        let y = top + height + 40.0;
        let _ = writeln!(
            s,
            "<rect x=\"{x}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{y:.1}\">{}</text>",
            y - 9.0,
            COLORS[j % COLORS.len()],
            x + 14.0,
            xml(condition)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_k_is_the_chance_that_all_k_trials_succeed() {
        assert_eq!(pass_k(3, 3, 3), 1.0);
        assert_eq!(pass_k(3, 2, 3), 0.0);
        assert!((pass_k(4, 3, 2) - 0.5).abs() < 1e-12); // 3/4 * 2/3
        assert_eq!(pass_k(0, 0, 0), 0.0);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }

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
