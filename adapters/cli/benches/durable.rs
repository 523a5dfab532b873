//! Durable journal bench: the cost of an agent step on the SQLite journal (both durability
//! modes) and PostgreSQL (when `TERMINUS_PG_URL` is set) at 10, 100 and 1,000 turns, each
//! round alternating with the in-memory store in the same process; the cost of one bare commit
//! on the same database (the floor a step that is one commit cannot go under); the SQLite
//! journal's size after 1,000 turns; and resuming an execution of 100,000 and of 1,000,000
//! entries, SIGKILLed mid-run, with the `terminus` binary (wall time and peak RSS from
//! `/usr/bin/time -v`; the scenario stored with it is the same size for both).
//!
//! An agent step is one model turn calling one tool, plus the tool's result. Figures are medians
//! of repeated runs.
//!
//! Run: `cargo bench -p terminus-cli --bench durable` (set `TERMINUS_PG_URL` for PostgreSQL).
//! Sections can be named after `--`: `steps`, `size`, `resume`, `resume-1m` (all by default);
//! `steps` can be narrowed to some stores by naming them too: `sqlite`, `power-loss`,
//! `postgres` (memory always runs, as the baseline).

mod common;

use common::{median, parse, run_once, tool_turns};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use terminus_runtime::{Journal, MemoryStore, Store};
use terminus_store::{Durability, PostgresStore, SqliteStore};

/// Bare commits timed for a floor.
const FLOOR_COMMITS: usize = 301;

/// Whether section `name` was asked for (every section when none was named).
fn wanted(name: &str) -> bool {
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    named.is_empty() || named.iter().any(|n| n == name)
}

/// Whether store `name` is to be timed (every store when none was named).
fn store_wanted(name: &str) -> bool {
    let stores = ["sqlite", "power-loss", "postgres"];
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| stores.contains(&a.as_str()))
        .collect();
    named.is_empty() || named.iter().any(|n| n == name)
}

/// The stores a step is timed on, beside memory.
struct Durables {
    sqlite: Arc<dyn Store>,
    sqlite_raw: Arc<SqliteStore>,
    power_loss: Arc<dyn Store>,
    postgres: Option<(Arc<dyn Store>, tokio_postgres::Client)>,
}

/// Microseconds of one bare commit (a one-row insert) on the SQLite journal's own connection.
fn sqlite_floor(store: &SqliteStore) -> f64 {
    store
        .execute_unchecked("CREATE TABLE IF NOT EXISTS bench_floor (n INTEGER)")
        .unwrap_or_else(|e| panic!("floor table: {e}"));
    let xs = (0..FLOOR_COMMITS)
        .map(|i| {
            let start = Instant::now();
            store
                .execute_unchecked(&format!("INSERT INTO bench_floor VALUES ({i})"))
                .unwrap_or_else(|e| panic!("floor insert: {e}"));
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    median(xs)
}

/// Microseconds of one bare commit (a one-row insert, autocommit) on PostgreSQL, into a table
/// that is written to the WAL as the journal's are (not a temporary one, which is not).
async fn postgres_floor(client: &tokio_postgres::Client) -> f64 {
    client
        .batch_execute("CREATE TABLE IF NOT EXISTS terminus_bench_floor (n INTEGER)")
        .await
        .unwrap_or_else(|e| panic!("floor table: {e}"));
    let insert = client
        .prepare("INSERT INTO terminus_bench_floor VALUES ($1)")
        .await
        .unwrap_or_else(|e| panic!("floor statement: {e}"));
    let mut xs = Vec::with_capacity(FLOOR_COMMITS);
    for i in 0..FLOOR_COMMITS {
        let n = i32::try_from(i).unwrap_or(0);
        let start = Instant::now();
        client
            .execute(&insert, &[&n])
            .await
            .unwrap_or_else(|e| panic!("floor insert: {e}"));
        xs.push(start.elapsed().as_secs_f64() * 1e6);
    }
    client
        .batch_execute("DROP TABLE terminus_bench_floor")
        .await
        .unwrap_or_else(|e| panic!("floor table: {e}"));
    median(xs)
}

/// Steps at 10, 100 and 1,000 turns on every store, each repeat one run per store in turn (so
/// the ratios to memory are paired), and each store's commit floor measured between the turn
/// counts.
async fn steps(durables: &Durables) {
    let tag = std::process::id();
    let labels = [
        "memory",
        "sqlite (process)",
        "sqlite (power-loss)",
        "postgres",
    ];
    let mut table: Vec<[f64; 4]> = Vec::new();
    let (mut lite_floor, mut pg_floor) = (Vec::new(), Vec::new());
    for turns in [10usize, 100, 1000] {
        let scenario = parse(&tool_turns(turns));
        let repeats = if turns == 1000 { 5 } else { 15 };
        let mut xs: [Vec<f64>; 4] = Default::default();
        for r in 0..repeats {
            let id = format!("steps-{turns}-{r}-{tag}");
            xs[0].push(run_once(Arc::new(MemoryStore::new()), &scenario, &id, turns).await);
            if store_wanted("sqlite") {
                xs[1].push(run_once(Arc::clone(&durables.sqlite), &scenario, &id, turns).await);
            }
            if store_wanted("power-loss") {
                let store = Arc::clone(&durables.power_loss);
                xs[2].push(run_once(store, &scenario, &id, turns).await);
            }
            if let Some((pg, _)) = &durables.postgres {
                xs[3].push(run_once(Arc::clone(pg), &scenario, &id, turns).await);
            }
        }
        lite_floor.push(sqlite_floor(&durables.sqlite_raw));
        if let Some((_, client)) = &durables.postgres {
            pg_floor.push(postgres_floor(client).await);
        }
        table.push(xs.map(|x| if x.is_empty() { f64::NAN } else { median(x) }));
    }
    println!("us per agent step, medians (10 turns / 100 turns / 1,000 turns):");
    for (k, label) in labels.iter().enumerate() {
        if k == 3 && durables.postgres.is_none() {
            println!("  postgres: skipped (TERMINUS_PG_URL not set, or not asked for)");
            continue;
        }
        if table[0][k].is_nan() {
            continue;
        }
        let cells: Vec<String> = table
            .iter()
            .map(|row| {
                if k == 0 {
                    format!("{:>8.1}", row[k])
                } else {
                    format!("{:>8.1} ({:>5.1}x memory)", row[k], row[k] / row[0])
                }
            })
            .collect();
        println!(
            "  {label:<20} {} | 1,000/10: {:.2}",
            cells.join(" |"),
            table[2][k] / table[0][k]
        );
    }
    println!(
        "  one bare commit, median of the three floors: SQLite (process) {:.1} us{}",
        median(lite_floor),
        if pg_floor.is_empty() {
            String::new()
        } else {
            format!(", PostgreSQL {:.1} us", median(pg_floor))
        }
    );
}

fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

/// The journal's size after one execution of 1,000 turns in a fresh file.
async fn size(dir: &Path) {
    let path = dir.join("size.db");
    {
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(&path, Durability::Process).expect("sqlite"));
        run_once(Arc::clone(&store), &parse(&tool_turns(1000)), "size", 1000).await;
        let entries = store.count("size").await.expect("count");
        let wal = path.with_extension("db-wal");
        println!(
            "journal after 1,000 turns: {entries} entries, {:.2} MB on disk while open (db {} B + wal {} B)",
            (file_size(&path) + file_size(&wal)) as f64 / 1e6,
            file_size(&path),
            file_size(&wal)
        );
    }
    println!(
        "journal after 1,000 turns, file closed (WAL checkpointed): {:.2} MB",
        file_size(&path) as f64 / 1e6
    );
}

/// Distinct tool turns the long runs cycle through: more than any loop period the kernel
/// watches, so the cycle is not a loop, and the scenario (stored with the execution) stays
/// small however long the journal grows.
const CYCLE: usize = 64;

/// A scenario that reads files in a cycle until `max_steps`.
fn cycling(max_steps: u64) -> serde_json::Value {
    let turns: Vec<serde_json::Value> = (0..CYCLE)
        .map(|i| serde_json::json!({ "tool_calls": [ { "name": "read", "arguments": { "file": i } } ] }))
        .collect();
    serde_json::json!({
        "name": "bench-long",
        "task": "Read every file.",
        "policy": { "max_model_calls": max_steps, "max_steps": max_steps, "max_tool_failures": 5 },
        "model": { "turns": turns, "repeat": "cycle" },
        "tools": { "read": { "results": [ { "ok": "contents" } ], "repeat": "last" } }
    })
}

/// The WAL beside a SQLite journal.
fn wal(db: &Path) -> std::path::PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}

/// Copies the SQLite journal `from` (its file and its WAL, if any) to `to`.
fn copy_journal(from: &Path, to: &Path) {
    for (from, to) in [(from.to_owned(), to.to_owned()), (wal(from), wal(to))] {
        let _ = std::fs::remove_file(&to);
        if from.exists() {
            std::fs::copy(&from, &to).expect("copied");
        }
    }
}

/// The lease of the run that is killed.
const LEASE: Duration = Duration::from_millis(300);

/// Entries a tool turn journals (two steps: the model's turn and the tool's results).
const ENTRIES_PER_TURN: u64 = 6;

/// Builds an execution of at least `entries` entries interrupted by SIGKILL, with the `terminus`
/// binary, and times three resumes of copies of it (each replays the journal and runs the
/// last turns live, to `max_steps`).
fn resume(dir: &Path, entries: u64, rt: &tokio::runtime::Runtime) {
    // 5 % more steps than the kill leaves journaled, for the resume to run live.
    let max_steps = (entries / 100 * 105).div_ceil(ENTRIES_PER_TURN) * 2;
    let file = dir.join(format!("long-{entries}.json"));
    std::fs::write(&file, cycling(max_steps).to_string()).expect("written");
    let db = dir.join(format!("long-{entries}.db"));
    let terminus = env!("CARGO_BIN_EXE_terminus");
    let started = Instant::now();
    let mut first = Command::new(terminus)
        .args(["run", &file.to_string_lossy()])
        .args(["--journal", &db.to_string_lossy(), "--execution", "long"])
        // A short lease, so the killed run's claim has expired when the resumes begin.
        .args(["--lease-ms", &LEASE.as_millis().to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("terminus runs");
    // Killed once about `entries` are journaled (two steps a turn), as its progress lines
    // (`[  12 ms] step N: ...`) say.
    let kill_at = entries.div_ceil(ENTRIES_PER_TURN) * 2;
    let progress = std::io::BufReader::new(first.stderr.take().expect("piped"));
    let reached = std::io::BufRead::lines(progress)
        .map_while(Result::ok)
        .filter_map(|line| {
            let (_, rest) = line.split_once("] step ")?;
            rest.split(':').next()?.trim().parse::<u64>().ok()
        })
        .find(|step| *step >= kill_at);
    assert!(reached.is_some(), "the long run ended before it was killed");
    first.kill().expect("SIGKILL");
    let _ = first.wait();
    // The journal as the killed process left it, its file and its WAL, before anything opens it.
    let kept = dir.join("long-kept.db");
    copy_journal(&db, &kept);
    std::thread::sleep(LEASE * 2);
    let count = |db: &Path| {
        rt.block_on(async {
            let store = SqliteStore::open(db, Durability::Process).ok()?;
            store.count("long").await.ok()
        })
    };
    let built = count(&db).expect("the journal reads");
    println!(
        "built an execution of {built} entries in {:.1} s ({:.1} MB), SIGKILLed mid-run",
        started.elapsed().as_secs_f64(),
        file_size(&db) as f64 / 1e6
    );
    let mut times = Vec::new();
    let mut rss = Vec::new();
    for _ in 0..3 {
        let copy = dir.join("long-copy.db");
        copy_journal(&kept, &copy);
        let start = Instant::now();
        let out = Command::new("/usr/bin/time")
            .args([
                "-v",
                terminus,
                "resume",
                "--journal",
                &copy.to_string_lossy(),
            ])
            .args(["--execution", "long", "--json"])
            .output()
            .expect("time runs");
        times.push(start.elapsed());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "resume printed no report ({e}): {}",
                &stderr[stderr.len().saturating_sub(2000)..]
            )
        });
        assert_eq!(
            report["reason"], "max_steps",
            "resume: {}",
            report["reason"]
        );
        assert_eq!(report["steps"], max_steps);
        let kb: f64 = stderr
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("Maximum resident set size (kbytes): ")
            })
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(f64::NAN);
        rss.push(kb / 1024.0);
    }
    for file in [dir.join("long-copy.db"), kept, db] {
        let _ = std::fs::remove_file(wal(&file));
        let _ = std::fs::remove_file(&file);
    }
    println!(
        "resume of {built} entries (replay, then {} turns live to max_steps, report): median {:.3} s, peak RSS median {:.1} MiB",
        (max_steps / 2).saturating_sub(built / ENTRIES_PER_TURN),
        median(times.iter().map(Duration::as_secs_f64).collect()),
        median(rss)
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path().to_owned();
    if wanted("steps") {
        rt.block_on(async {
            let sqlite_raw = Arc::new(
                SqliteStore::open(d.join("process.db"), Durability::Process).expect("sqlite"),
            );
            let power_loss: Arc<dyn Store> = Arc::new(
                SqliteStore::open(d.join("power-loss.db"), Durability::PowerLoss).expect("sqlite"),
            );
            let postgres = match std::env::var("TERMINUS_PG_URL") {
                Ok(url) if store_wanted("postgres") => {
                    let store: Arc<dyn Store> =
                        Arc::new(PostgresStore::connect(&url).await.expect("postgres"));
                    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                        .await
                        .expect("postgres");
                    tokio::spawn(connection);
                    Some((store, client))
                }
                _ => None,
            };
            let durables = Durables {
                sqlite: Arc::clone(&sqlite_raw) as Arc<dyn Store>,
                sqlite_raw,
                power_loss,
                postgres,
            };
            steps(&durables).await;
        });
    }
    if wanted("size") {
        rt.block_on(size(&d));
    }
    if wanted("resume") {
        resume(&d, 100_000, &rt);
    }
    if wanted("resume-1m") {
        resume(&d, 1_000_000, &rt);
    }
}
