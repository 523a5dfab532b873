//! Kill-and-resume of a durable multi-agent orchestration, with real `terminus` processes on
//! SQLite and on PostgreSQL (`TERMINUS_PG_URL`; without it the PostgreSQL half is skipped with a
//! printed reason, and fails when `CI=true`).
//!
//! The plan (`tests/fixtures/six-agents.json`): six scenario agents, `a` and `b` roots, `c` on
//! `a`, `d` on `a` and `b`, `e` on `c` and `d`, `f` on `e`, at most two at a time, each two to
//! six 25 ms tool turns then an answer, each task naming its dependencies' results with `{id}`.
//! The whole plan takes about half a second. `a` is short and `b` long, so for a while `a` is
//! done and its dependent `d` waits for `b`: a kill then has `d` start after the resume, on a
//! result from before the kill.
//!
//! For each seed, `terminus orchestrate` is SIGKILLed at a seeded moment spread over the plan's
//! duration (measured from an uninterrupted run first), the store is read (for every agent:
//! which attempt executions exist, their records, spec and report), then `terminus resume` is
//! run until the plan ends. Then:
//!
//! - the resumed run exits 0 with the plan's report: `complete` / `all_complete`, every agent
//!   `complete` after 1 attempt, with its own result;
//! - no agent that had a report before the kill ran again: its attempt's records and report are
//!   unchanged, and no agent has a second attempt;
//! - every record written before the kill is still there unchanged, and no key appears twice in
//!   any agent's execution;
//! - each dependent's task (its attempt's stored spec) is its template with its dependencies'
//!   results filled in;
//! - resuming the completed orchestration again prints the same report and exits 0 without
//!   running anything (the store is unchanged, no agent starts).
//!
//! The campaign must have killed at least one run with some agents done and some not, so that it
//! cannot pass without testing the resume of a half-done plan.

mod common;

use common::journal::{Journal, block_on, postgres, unique};

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use terminus_kernel::{Key, Record};
use terminus_runtime::{Report, RunSpec};

/// Seeds spread over the plan's run (plus seed 0, an early kill).
const SQLITE_SEEDS: u64 = 8;
const POSTGRES_SEEDS: u64 = 4;
const LEASE_MS: &str = "400";
/// Attempt executions looked for per agent (the plan allows no retries; any beyond the first is
/// a re-run).
const ATTEMPTS_PROBED: u32 = 3;
/// How long one `terminus` process may take before the test calls it hung (the plan takes about
/// half a second; a resume may wait out a 400 ms lease first).
const PROCESS_TIMEOUT: Duration = Duration::from_secs(15);

fn plan_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/six-agents.json")
}

fn terminus() -> Command {
    common::journal::terminus_without_limit_variables()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `command` to its end, its output kept in files (no pipe to fill); a process still
/// running after [`PROCESS_TIMEOUT`] is killed and the test fails, naming it, rather than hang.
fn run(mut command: Command, what: &str) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    let stdout = dir.path().join("stdout");
    let stderr = dir.path().join("stderr");
    let mut child = command
        .stdout(File::create(&stdout).expect("a stdout file"))
        .stderr(File::create(&stderr).expect("a stderr file"))
        .spawn()
        .expect("the binary starts");
    let deadline = Instant::now() + PROCESS_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waitable") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} was still running after {} s (hung): killed. Its stderr:\n{}",
                PROCESS_TIMEOUT.as_secs(),
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output {
        status,
        stdout: std::fs::read(&stdout).expect("the stdout file"),
        stderr: std::fs::read(&stderr).expect("the stderr file"),
    }
}

fn last_json(out: &Output) -> Value {
    let stdout = text(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("no report ({e}): {stdout}\n{}", text(&out.stderr)))
}

/// A small deterministic generator (xorshift64*), so every seed's kill time is reproducible.
fn jitter(seed: u64, max: u64) -> u64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    x.wrapping_mul(0x2545_F491_4F6C_DD1D) % max.max(1)
}

/// Seed `seed` of `1..=seeds` kills in the `seed`-th slice of the plan's `duration_ms`, at a
/// seeded point within it: the kills cover the whole run. Seed 0 kills after 2 ms, usually before
/// the orchestration exists (then it is run again with the same id).
fn kill_after_ms(seed: u64, seeds: u64, duration_ms: u64) -> u64 {
    if seed == 0 {
        return 2;
    }
    let slice = duration_ms / seeds;
    5 + slice * (seed - 1) + jitter(seed, slice)
}

/// What the test needs of the plan file: per agent, in file order, its dependencies, its task
/// template and the answer its scenario ends with.
struct PlanAgent {
    id: String,
    deps: Vec<String>,
    task: String,
    answer: String,
}

fn plan_agents() -> Vec<PlanAgent> {
    let text = std::fs::read_to_string(plan_path()).expect("the plan fixture is readable");
    let plan: Value = serde_json::from_str(&text).expect("the plan fixture is JSON");
    let agents: Vec<PlanAgent> = plan["agents"]
        .as_array()
        .expect("the plan has an agents array")
        .iter()
        .map(|a| {
            let turns = a["scenario"]["model"]["turns"]
                .as_array()
                .expect("each agent is an inline scenario with model turns");
            PlanAgent {
                id: a["id"].as_str().expect("an agent id").to_owned(),
                deps: a["depends_on"]
                    .as_array()
                    .map(|d| {
                        d.iter()
                            .map(|x| x.as_str().expect("a dependency id").to_owned())
                            .collect()
                    })
                    .unwrap_or_default(),
                task: a["task"]
                    .as_str()
                    .expect("each agent has a task")
                    .to_owned(),
                answer: turns
                    .last()
                    .and_then(|t| t["text"].as_str())
                    .expect("each scenario ends with an answer")
                    .to_owned(),
            }
        })
        .collect();
    assert_eq!(agents.len(), 6, "the plan has six agents");
    assert_eq!(plan["limits"]["max_concurrency"], 2);
    agents
}

/// One attempt execution as stored.
#[derive(Debug, Clone, PartialEq)]
struct StoredAttempt {
    spec: RunSpec,
    records: Vec<Arc<Record>>,
    report: Option<Report>,
}

/// What the store holds of one orchestration.
#[derive(Debug, Clone, PartialEq, Default)]
struct Snapshot {
    /// The orchestration's execution exists.
    created: bool,
    /// The orchestration's own records (it is run by cells; there should be none).
    records: Vec<Arc<Record>>,
    /// The plan's report cell.
    plan_report: Option<Value>,
    /// Per agent id, per attempt number: the attempt executions that exist.
    agents: BTreeMap<String, BTreeMap<u32, StoredAttempt>>,
}

impl Snapshot {
    fn take(journal: &Journal, execution: &str, agents: &[PlanAgent]) -> Snapshot {
        block_on(async {
            let store = journal.open().await;
            let created = store.spec(execution).await.expect("readable").is_some();
            let records = store.records(execution).await.expect("readable");
            let plan_report = store
                .cell(&terminus_orchestrator::report_key(execution))
                .await
                .expect("readable")
                .map(|c| c.value);
            let mut by_agent = BTreeMap::new();
            for agent in agents {
                let mut attempts = BTreeMap::new();
                for n in 1..=ATTEMPTS_PROBED {
                    let id = format!("{execution}/{}/{n}", agent.id);
                    let Some(spec) = store.spec(&id).await.expect("readable") else {
                        continue;
                    };
                    attempts.insert(
                        n,
                        StoredAttempt {
                            spec,
                            records: store.records(&id).await.expect("readable"),
                            report: store.report(&id).await.expect("readable"),
                        },
                    );
                }
                by_agent.insert(agent.id.clone(), attempts);
            }
            Snapshot {
                created,
                records,
                plan_report,
                agents: by_agent,
            }
        })
    }

    /// The agents whose first attempt has a report.
    fn done(&self) -> BTreeSet<&str> {
        self.agents
            .iter()
            .filter(|(_, a)| a.get(&1).is_some_and(|s| s.report.is_some()))
            .map(|(id, _)| id.as_str())
            .collect()
    }

    /// The agents with an attempt execution but no report: running at the kill.
    fn in_flight(&self) -> BTreeSet<&str> {
        self.agents
            .iter()
            .filter(|(_, a)| !a.is_empty() && a.values().all(|s| s.report.is_none()))
            .map(|(id, _)| id.as_str())
            .collect()
    }
}

fn orchestrate(journal: &Journal, execution: &str) -> Command {
    let mut command = terminus();
    command
        .arg("orchestrate")
        .arg(plan_path())
        .args(["--journal", &journal.arg(), "--execution", execution])
        .args(["--lease-ms", LEASE_MS, "--json"]);
    command
}

fn resume(journal: &Journal, execution: &str) -> Output {
    let mut command = terminus();
    command
        .args(["resume", "--journal", &journal.arg()])
        .args(["--execution", execution])
        .args(["--lease-ms", LEASE_MS, "--json"]);
    run(command, &format!("`terminus resume` of {execution}"))
}

/// Resumes until the plan ends; a claim still held by the killed process (exit 4) is waited out.
/// The output, and how many resumes were refused with exit 4 first.
fn resume_until_done(journal: &Journal, execution: &str) -> (Output, u64) {
    let start = Instant::now();
    let mut refused = 0;
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the killed orchestrator's lease never expired ({refused} resumes refused)"
        );
        let out = resume(journal, execution);
        if out.status.code() == Some(2) && text(&out.stderr).contains("no execution") {
            // Killed before the orchestration was created: nothing was journaled, so it is run
            // again from the start with the same id, as an operator would.
            let again = run(
                orchestrate(journal, execution),
                &format!("`terminus orchestrate` of {execution}, again"),
            );
            // On PostgreSQL the killed client's last statement can still commit after the
            // client is gone: the orchestration then appears between the resume and this run,
            // and the run is refused. Resume it.
            if again.status.code() != Some(0) && text(&again.stderr).contains("already exists") {
                continue;
            }
            return (again, refused);
        }
        if out.status.code() != Some(4) {
            return (out, refused);
        }
        refused += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How the kill landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Landed {
    /// The process had exited before the kill.
    Finished,
    /// Killed before the orchestration was created.
    BeforeCreate,
    /// Killed with no agent done.
    NoneDone,
    /// Killed with some agents done and some not.
    MidRun,
    /// Killed with every agent done, before the plan's report was stored.
    AllDoneNoReport,
    /// Killed after the plan's report was stored.
    AfterReport,
}

/// Checks the resumed run and the store after it against the snapshot taken after the kill.
fn check_resumed(
    case: &str,
    execution: &str,
    agents: &[PlanAgent],
    before: &Snapshot,
    out: &Output,
    after: &Snapshot,
) {
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{case}: the resumed plan did not complete: {stderr}"
    );
    let report = last_json(out);
    assert_eq!(report["execution"], execution, "{case}");
    assert_eq!(report["outcome"], "complete", "{case}: {stderr}");
    assert_eq!(report["reason"], "all_complete", "{case}: {stderr}");
    let reported = report["agents"].as_array().expect("the report's agents");
    assert_eq!(reported.len(), agents.len(), "{case}");
    let mut results: BTreeMap<&str, &str> = BTreeMap::new();
    for (agent, got) in agents.iter().zip(reported) {
        let id = agent.id.as_str();
        let attempt = format!("{execution}/{id}/1");
        assert_eq!(got["id"], id, "{case}");
        assert_eq!(got["status"], "complete", "{case}: agent {id}: {got}");
        assert_eq!(got["attempts"], 1, "{case}: agent {id} ran again");
        assert_eq!(got["result"], agent.answer.as_str(), "{case}: {id}");
        assert_eq!(got["last_execution"], attempt.as_str(), "{case}: {id}");
        assert_eq!(got["report"]["execution"], attempt.as_str(), "{case}");
        assert_eq!(got["report"]["outcome"], "complete", "{case}: {id}");
        results.insert(id, agent.answer.as_str());
    }

    for agent in agents {
        let id = agent.id.as_str();
        let now = &after.agents[id];
        let was = before.agents.get(id);
        // One attempt each, ended with a report; nothing ran twice.
        assert_eq!(
            now.keys().copied().collect::<Vec<_>>(),
            vec![1],
            "{case}: agent {id} has attempt executions {:?}",
            now.keys().collect::<Vec<_>>()
        );
        let first = &now[&1];
        assert!(
            first.report.as_ref().is_some_and(Report::is_complete),
            "{case}: agent {id}'s attempt has no complete report"
        );
        // No idempotency key twice.
        let keys: BTreeSet<Key> = first.records.iter().map(|r| r.key).collect();
        assert_eq!(
            keys.len(),
            first.records.len(),
            "{case}: agent {id}: a key appears twice"
        );
        // The attempt's report counts what is stored.
        let stored = first.report.as_ref().map(|r| r.entries);
        assert_eq!(
            stored,
            Some(first.records.len() as u64),
            "{case}: agent {id}: the report's entries are not the records stored"
        );
        if let Some(old) = was.and_then(|w| w.get(&1)) {
            // Every record written before the kill is there, unchanged.
            let now_by_key: BTreeMap<Key, &Record> =
                first.records.iter().map(|r| (r.key, r.as_ref())).collect();
            for record in &old.records {
                assert_eq!(
                    now_by_key.get(&record.key).copied(),
                    Some(record.as_ref()),
                    "{case}: agent {id}: entry {} was lost or changed",
                    record.key
                );
            }
            assert_eq!(old.spec, first.spec, "{case}: agent {id}'s spec changed");
            if old.report.is_some() {
                // It had ended: it did not run again.
                assert_eq!(
                    old, first,
                    "{case}: agent {id} had ended before the kill, yet its attempt changed"
                );
            }
        }
        // Its task is its template with its dependencies' results.
        let mut task = agent.task.clone();
        for dep in &agent.deps {
            let result = results[dep.as_str()];
            assert!(
                first.spec.task.contains(result),
                "{case}: agent {id}'s task lacks the result of `{dep}` ({result:?}): {:?}",
                first.spec.task
            );
            task = task.replace(&format!("{{{dep}}}"), result);
        }
        assert_eq!(first.spec.task, task, "{case}: agent {id}'s task");
    }

    // The orchestration's own records (if it has any) are all kept.
    let now_by_key: BTreeMap<Key, &Record> =
        after.records.iter().map(|r| (r.key, r.as_ref())).collect();
    assert_eq!(now_by_key.len(), after.records.len(), "{case}");
    for record in &before.records {
        assert_eq!(
            now_by_key.get(&record.key).copied(),
            Some(record.as_ref()),
            "{case}: the orchestration's entry {} was lost or changed",
            record.key
        );
    }
    // The stored plan report is the one printed.
    assert_eq!(
        after.plan_report.as_ref(),
        Some(&report),
        "{case}: the stored plan report is not the one printed"
    );
    if let Some(old) = &before.plan_report {
        assert_eq!(old, &report, "{case}: the plan's report changed");
    }
}

#[derive(Debug, Default)]
struct Campaign {
    landed: BTreeMap<Landed, u64>,
    /// Agents done before the kill (and so not run again).
    kept: u64,
    /// Attempts running at the kill, resumed from their journal.
    resumed_attempts: u64,
    /// Agents not started at the kill with a dependency done before it: started by the resume,
    /// on a result from before the kill.
    started_on_kept: u64,
    /// Duplicate appends the resumed attempts' kernels prevented.
    duplicates_prevented: u64,
    /// Runs of `orchestrate` again, the kill having come before the orchestration existed.
    rerun: u64,
    /// Resumes refused (exit 4) while the killed process's lease ran out.
    refused: u64,
}

fn crash_one(
    journal: &Journal,
    agents: &[PlanAgent],
    seed: u64,
    kill_at_ms: u64,
    logs: &Path,
    campaign: &mut Campaign,
) {
    let execution = unique(&format!("plan-crash-{seed}"));
    let log = logs.join(format!("{}-{seed}.stderr", journal.label()));
    let mut child = orchestrate(journal, &execution)
        .stdout(Stdio::null())
        .stderr(File::create(&log).expect("a log file"))
        .spawn()
        .expect("the binary starts");
    std::thread::sleep(Duration::from_millis(kill_at_ms));
    let killed = match child.try_wait().expect("waitable") {
        Some(_) => false,
        None => {
            child.kill().expect("SIGKILL");
            true
        }
    };
    let _ = child.wait();
    let before = Snapshot::take(journal, &execution, agents);
    let done = before.done();
    let in_flight = before.in_flight();
    let started_on_kept: Vec<&str> = agents
        .iter()
        .filter(|a| {
            before.agents[&a.id].is_empty() && a.deps.iter().any(|d| done.contains(d.as_str()))
        })
        .map(|a| a.id.as_str())
        .collect();
    let landed = match () {
        () if !killed => Landed::Finished,
        () if !before.created => Landed::BeforeCreate,
        () if before.plan_report.is_some() => Landed::AfterReport,
        () if done.is_empty() => Landed::NoneDone,
        () if done.len() == agents.len() => Landed::AllDoneNoReport,
        () => Landed::MidRun,
    };
    eprintln!(
        "orchestrate-resume[{}] seed {seed}: killed at {kill_at_ms} ms: {landed:?}, done {done:?}, \
         running {in_flight:?}, to start on kept results {started_on_kept:?}",
        journal.label()
    );
    if landed == Landed::MidRun {
        // `inspect` shows the plan cut short as its journal keeps it: not ended, each agent
        // running at the kill running, each one done complete (or still running, when its run
        // ended and the kill came before the plan took its end).
        let mut command = terminus();
        command.args([
            "inspect",
            "--journal",
            &journal.arg(),
            "--execution",
            &execution,
        ]);
        let inspected = run(command, "terminus inspect");
        let shown = text(&inspected.stdout);
        assert_eq!(
            inspected.status.code(),
            Some(0),
            "seed {seed}: {}",
            text(&inspected.stderr)
        );
        assert!(
            shown.contains("): not ended (`terminus resume` goes on with it)\n"),
            "{shown}"
        );
        let state = |id: &str| {
            shown
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{id} ")))
                .and_then(|l| l.split_whitespace().nth(1))
                .unwrap_or_default()
                .to_owned()
        };
        for id in &done {
            assert!(
                ["complete", "running"].contains(&state(id).as_str()),
                "seed {seed}: {id} done: {shown}"
            );
        }
        for id in &in_flight {
            assert_eq!(state(id), "running", "seed {seed}: {id} running: {shown}");
        }
    }
    *campaign.landed.entry(landed).or_default() += 1;
    campaign.kept += done.len() as u64;
    campaign.resumed_attempts += in_flight.len() as u64;
    campaign.started_on_kept += started_on_kept.len() as u64;
    // Ended agents never have a second attempt, even before the resume.
    for (id, attempts) in &before.agents {
        assert!(
            attempts.keys().all(|&n| n == 1),
            "seed {seed}: agent {id} has attempts {:?} before the resume",
            attempts.keys().collect::<Vec<_>>()
        );
    }

    let (out, refused) = resume_until_done(journal, &execution);
    if !before.created {
        campaign.rerun += 1;
    }
    let after = Snapshot::take(journal, &execution, agents);
    if out.status.code() != Some(0) {
        eprintln!(
            "seed {seed}: the killed process's stderr:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    check_resumed(
        &format!("seed {seed}"),
        &execution,
        agents,
        &before,
        &out,
        &after,
    );
    for id in &in_flight {
        let report = after.agents[*id][&1]
            .report
            .as_ref()
            .expect("checked: every attempt has a report");
        campaign.duplicates_prevented += report.duplicates_prevented;
    }
    campaign.refused += refused;

    // Resuming the completed orchestration again: the same report, exit 0, nothing runs.
    let again = resume(journal, &execution);
    let stderr = text(&again.stderr);
    assert_eq!(again.status.code(), Some(0), "seed {seed}: {stderr}");
    assert_eq!(
        last_json(&again),
        last_json(&out),
        "seed {seed}: resuming the completed plan printed another report"
    );
    assert!(
        !stderr.contains("] start") && !stderr.contains("] resume"),
        "seed {seed}: resuming the completed plan ran agents: {stderr}"
    );
    assert_eq!(
        Snapshot::take(journal, &execution, agents),
        after,
        "seed {seed}: resuming the completed plan changed the store"
    );
}

/// An uninterrupted run: its wall-clock time, from spawn to exit, in milliseconds.
fn baseline(journal: &Journal, agents: &[PlanAgent]) -> u64 {
    let execution = unique("plan-baseline");
    let started = Instant::now();
    let out = run(
        orchestrate(journal, &execution),
        &format!("an uninterrupted `terminus orchestrate` ({execution})"),
    );
    let took = u64::try_from(started.elapsed().as_millis()).expect("milliseconds fit");
    let after = Snapshot::take(journal, &execution, agents);
    check_resumed(
        "the uninterrupted run",
        &execution,
        agents,
        &Snapshot::default(),
        &out,
        &after,
    );
    took
}

fn crash_campaign(journal: &Journal, seeds: u64) {
    let agents = plan_agents();
    let logs = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let duration_ms = baseline(journal, &agents);
    let mut campaign = Campaign::default();
    for seed in 0..=seeds {
        let kill_at = kill_after_ms(seed, seeds, duration_ms);
        crash_one(journal, &agents, seed, kill_at, logs.path(), &mut campaign);
    }
    let total: u64 = campaign.landed.values().sum();
    let mid_run = campaign.landed.get(&Landed::MidRun).copied().unwrap_or(0);
    eprintln!(
        "orchestrate-resume[{}]: an uninterrupted run takes {duration_ms} ms; {total} seeds \
         killed: {:?}; {} agents done before a kill were kept (not run again), {} attempts \
         running at a kill were resumed from their journal ({} duplicate appends prevented), {} \
         agents started by a resume on results from before the kill; \
         {} orchestrations run again (killed before they existed); {} resumes refused (exit 4) \
         while the killed lease ran out; {:.1} s",
        journal.label(),
        campaign.landed,
        campaign.kept,
        campaign.resumed_attempts,
        campaign.duplicates_prevented,
        campaign.started_on_kept,
        campaign.rerun,
        campaign.refused,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(total, seeds + 1);
    assert!(
        mid_run >= 1,
        "no kill landed with some agents done and some not: the campaign tested nothing half \
         done ({:?})",
        campaign.landed
    );
}

#[test]
fn sqlite_orchestration_killed_and_resumed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let journal = Journal::Sqlite(dir.path().join("journal.db"));
    crash_campaign(&journal, SQLITE_SEEDS);
}

#[test]
fn postgres_orchestration_killed_and_resumed() {
    let Some(journal) = postgres() else { return };
    crash_campaign(&journal, POSTGRES_SEEDS);
}
