//! Crash, race and worker tests of the durable journal, with real `terminus` processes on SQLite
//! and on PostgreSQL (`TERMINUS_PG_URL`; without it the PostgreSQL half is skipped with a printed
//! reason, and fails when `CI=true`).
//!
//! - Crash: a slow run is SIGKILLed at a seeded random moment, then resumed until it completes;
//!   every entry written before the kill is still there unchanged, no key is written twice, and
//!   the model calls served across both processes are the run's own (at most the one call in
//!   flight at the kill is made again).
//! - Race: N processes resume the same waiting execution at once: exactly one runs it, the others
//!   exit 4, every round.
//! - Worker: workers polling the journal run each waiting execution exactly once.

mod common;

use common::journal::{Journal, block_on, postgres, unique};
use common::turns_served_again;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use terminus_kernel::{Key, Record};
use terminus_runtime::RunSpec;
use terminus_scenario::Scenario;

const SEEDS: u64 = 50;
const ROUNDS: u64 = 100;
const RACERS: usize = 4;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn terminus() -> Command {
    Command::new(env!("CARGO_BIN_EXE_terminus"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn last_json(out: &Output) -> serde_json::Value {
    let stdout = text(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("no report ({e}): {stdout}\n{}", text(&out.stderr)))
}

/// A small deterministic generator (xorshift64*), so every seed's kill time is reproducible.
fn kill_after_ms(seed: u64, max: u64) -> u64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    5 + x.wrapping_mul(0x2545_F491_4F6C_DD1D) % max
}

/// Resumes until the run ends; a claim still held by the killed process (exit 4) is waited out.
fn resume_until_done(journal: &Journal, execution: &str, log: &Path) -> Output {
    let start = Instant::now();
    loop {
        let out = terminus()
            .args([
                "resume",
                "--journal",
                &journal.arg(),
                "--execution",
                execution,
            ])
            .args(["--lease-ms", "400", "--json"])
            .env("TERMINUS_MODEL_LOG", log)
            .output()
            .expect("the binary runs");
        if out.status.code() == Some(2) && text(&out.stderr).contains("no execution") {
            // Killed before the execution was created: nothing was journaled, so it is run
            // again from the start, as an operator would.
            let again = terminus()
                .args(["run", &fixture("slow-chain.json").to_string_lossy()])
                .args(["--journal", &journal.arg(), "--execution", execution])
                .args(["--lease-ms", "400", "--json"])
                .env("TERMINUS_MODEL_LOG", log)
                .output()
                .expect("the binary runs");
            // On PostgreSQL the killed client's last statement can still commit after the
            // client is gone (the server finds out only when it answers): the execution then
            // appears between the resume and this run, and the run is refused. Resume it.
            if text(&again.stderr).contains("already has journal entries") {
                continue;
            }
            return again;
        }
        if out.status.code() != Some(4) {
            return out;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the killed worker's lease never expired: {}",
            text(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[derive(Debug, Default)]
struct CrashStats {
    killed_mid_run: u64,
    finished_before_kill: u64,
    replayed_model_calls: u64,
    duplicates_prevented: u64,
}

fn crash_one(journal: &Journal, seed: u64, dir: &Path) -> CrashStats {
    let execution = unique(&format!("crash-{seed}"));
    let log = dir.join(format!("{}-{seed}.log", journal.label()));
    let mut child = terminus()
        .args(["run", &fixture("slow-chain.json").to_string_lossy()])
        .args(["--journal", &journal.arg(), "--execution", &execution])
        .args(["--lease-ms", "400", "--json"])
        .env("TERMINUS_MODEL_LOG", &log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts");
    std::thread::sleep(Duration::from_millis(kill_after_ms(seed, 330)));
    let mut stats = CrashStats::default();
    match child.try_wait().expect("waitable") {
        Some(_) => stats.finished_before_kill += 1,
        None => {
            child.kill().expect("SIGKILL");
            stats.killed_mid_run += 1;
        }
    }
    let _ = child.wait();
    let before = journal.records(&execution);

    let out = resume_until_done(journal, &execution, &log);
    assert_eq!(
        out.status.code(),
        Some(0),
        "seed {seed}: the resumed run did not complete: {}",
        text(&out.stderr)
    );
    let report = last_json(&out);
    let after = journal.records(&execution);

    // Every entry written before the kill is present, unchanged.
    let after_by_key: BTreeMap<Key, &Record> = after.iter().map(|r| (r.key, r.as_ref())).collect();
    for record in &before {
        assert_eq!(
            after_by_key.get(&record.key).copied(),
            Some(record.as_ref()),
            "seed {seed}: entry {} was lost or changed",
            record.key
        );
    }
    // No idempotency key twice; the report counts what is stored.
    assert_eq!(
        after_by_key.len(),
        after.len(),
        "seed {seed}: a key appears twice"
    );
    assert_eq!(report["entries"], after.len() as u64, "seed {seed}");
    assert_eq!(report["model_calls"], 13, "seed {seed}");
    assert_eq!(report["tool_calls"], 14, "seed {seed}");

    // Model turns served across both processes are the run's own turns, each once, except at
    // most the one call in flight when the process died (its answer was never journaled).
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    let again = turns_served_again(log.lines(), 13, seed);
    assert!(again <= 1, "seed {seed}: {again} journaled turns re-called");
    stats.replayed_model_calls += again;
    stats.duplicates_prevented += report["duplicates_prevented"].as_u64().unwrap_or(0);
    stats
}

fn crash_campaign(journal: &Journal) {
    let dir = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let seeds: Vec<u64> = (1..=SEEDS).collect();
    let totals = std::thread::scope(|s| {
        let handles: Vec<_> = seeds
            .chunks(SEEDS.div_ceil(3) as usize)
            .map(|chunk| {
                let journal = journal.clone();
                let dir = dir.path();
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|&seed| crash_one(&journal, seed, dir))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a crash thread panicked"))
            .collect::<Vec<_>>()
    });
    let killed: u64 = totals.iter().map(|t| t.killed_mid_run).sum();
    let finished: u64 = totals.iter().map(|t| t.finished_before_kill).sum();
    let recalled: u64 = totals.iter().map(|t| t.replayed_model_calls).sum();
    let dups: u64 = totals.iter().map(|t| t.duplicates_prevented).sum();
    eprintln!(
        "crash[{}]: {} seeds, {killed} killed mid-run and resumed to completion, {finished} had \
         finished before the kill; {recalled} in-flight model calls re-made; {dups} duplicate \
         appends prevented; {:.1} s",
        journal.label(),
        totals.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(totals.len() as u64, SEEDS);
    assert!(
        killed >= SEEDS * 3 / 4,
        "too few kills landed mid-run ({killed}): the fixture is too fast"
    );
}

/// Creates an execution of `scenario` that waits for a worker: journaled spec, no entries.
fn waiting(journal: &Journal, execution: &str, scenario: &Path) {
    let text = std::fs::read_to_string(scenario).expect("fixture");
    let parsed = Scenario::parse(&text).expect("a valid fixture");
    let spec = RunSpec {
        task: parsed.task().to_owned(),
        name: Some(parsed.name().to_owned()),
        system: None,
        policy: parsed.policy().clone(),
        host: Some(serde_json::json!({
            "scenario": serde_json::from_str::<serde_json::Value>(&text).expect("json")
        })),
        started_unix_ms: None,
    };
    block_on(async {
        assert!(
            journal
                .open()
                .await
                .create(execution, &spec)
                .await
                .expect("created")
        );
    });
}

fn race_campaign(journal: &Journal) {
    let started = Instant::now();
    let mut losers = 0;
    for round in 0..ROUNDS {
        let execution = unique(&format!("race-{round}"));
        waiting(journal, &execution, &fixture("race.json"));
        let racers: Vec<_> = (0..RACERS)
            .map(|_| {
                terminus()
                    .args([
                        "resume",
                        "--journal",
                        &journal.arg(),
                        "--execution",
                        &execution,
                    ])
                    .args(["--json"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("the binary starts")
            })
            .collect();
        let outs: Vec<Output> = racers
            .into_iter()
            .map(|c| c.wait_with_output().expect("waitable"))
            .collect();
        let codes: Vec<Option<i32>> = outs.iter().map(|o| o.status.code()).collect();
        let winners = codes.iter().filter(|c| **c == Some(0)).count();
        let refused = codes.iter().filter(|c| **c == Some(4)).count();
        assert_eq!(
            (winners, refused),
            (1, RACERS - 1),
            "round {round}: exit codes {codes:?}; stderr: {:?}",
            outs.iter().map(|o| text(&o.stderr)).collect::<Vec<_>>()
        );
        for out in outs.iter().filter(|o| o.status.code() == Some(4)) {
            assert!(
                text(&out.stderr).contains("claimed by another worker"),
                "{}",
                text(&out.stderr)
            );
        }
        losers += refused;
        let records = journal.records(&execution);
        let keys: BTreeSet<Key> = records.iter().map(|r| r.key).collect();
        assert_eq!(keys.len(), records.len(), "round {round}: a key twice");
        assert_eq!(
            records
                .iter()
                .filter(|r| r.entry.kind() == "assistant")
                .count(),
            4,
            "round {round}: the run was not run exactly once"
        );
    }
    eprintln!(
        "race[{}]: {ROUNDS} rounds of {RACERS} processes: one winner each, {losers} refused with \
         exit 4; {:.1} s",
        journal.label(),
        started.elapsed().as_secs_f64()
    );
}

fn worker_campaign(journal: &Journal) {
    let ids: Vec<String> = (0..4).map(|i| unique(&format!("work-{i}"))).collect();
    for id in &ids {
        waiting(journal, id, &fixture("race.json"));
    }
    let workers: Vec<_> = (0..2)
        .map(|_| {
            terminus()
                .args(["worker", "--journal", &journal.arg(), "--until-idle"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the binary starts")
        })
        .collect();
    let mut ran = Vec::new();
    for w in workers {
        let out = w.wait_with_output().expect("waitable");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        for line in text(&out.stdout).lines() {
            let report: serde_json::Value = serde_json::from_str(line).expect("a report line");
            ran.push(report["execution"].as_str().unwrap_or_default().to_owned());
        }
    }
    // Every waiting execution of this test ran exactly once (other executions in a shared
    // database may be picked up too; they are not ours to count).
    for id in &ids {
        assert_eq!(ran.iter().filter(|r| *r == id).count(), 1, "{id}: {ran:?}");
        let records = journal.records(id);
        assert_eq!(
            records
                .iter()
                .filter(|r| r.entry.kind() == "assistant")
                .count(),
            4
        );
    }
}

#[test]
fn sqlite_crash_race_and_workers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let journal = Journal::Sqlite(dir.path().join("journal.db"));
    crash_campaign(&journal);
    race_campaign(&journal);
    worker_campaign(&journal);
}

#[test]
fn postgres_crash_race_and_workers() {
    let Some(journal) = postgres() else { return };
    crash_campaign(&journal);
    race_campaign(&journal);
    worker_campaign(&journal);
}
