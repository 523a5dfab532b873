//! Durable journal bench: the cost of an agent step on the SQLite journal (both durability
//! modes) and PostgreSQL (when `TERMINUS_PG_URL` is set) at 10, 100 and 1,000 turns, each
//! round alternating with the in-memory store in the same process; the cost of one bare commit
//! on the same database (the floor a step that is one commit cannot go under); the SQLite
//! journal's size after 1,000 turns; and resuming an execution of 100,000 and of 1,000,000
//! entries with the `terminus` binary (wall time and peak RSS from `/usr/bin/time -v`).
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
        let scenario = parse(&tool_turns(turns, None));
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
        run_once(
            Arc::clone(&store),
            &parse(&tool_turns(1000, None)),
            "size",
            1000,
        )
        .await;
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

/// Builds an interrupted execution of `turns` tool turns with the `terminus` binary and times
/// three resumes of copies of it.
fn resume(dir: &Path, turns: usize, rt: &tokio::runtime::Runtime) {
    let file = dir.join(format!("long-{turns}.json"));
    std::fs::write(&file, tool_turns(turns, Some(turns - 1)).to_string()).expect("written");
    let db = dir.join(format!("long-{turns}.db"));
    let terminus = env!("CARGO_BIN_EXE_terminus");
    let started = Instant::now();
    let first = Command::new(terminus)
        .args(["run", &file.to_string_lossy()])
        .args(["--journal", &db.to_string_lossy(), "--execution", "long"])
        .output()
        .expect("terminus runs");
    // The tool's script runs out on the last call: the run stops with a fault, unfinished.
    assert_ne!(
        first.status.code(),
        Some(0),
        "the long run was meant to be interrupted"
    );
    let entries = rt.block_on(async {
        let store = SqliteStore::open(&db, Durability::Process).expect("sqlite");
        store.count("long").await.expect("count")
    });
    println!(
        "built an interrupted execution of {entries} entries in {:.1} s ({:.1} MB)",
        started.elapsed().as_secs_f64(),
        file_size(&db) as f64 / 1e6
    );
    let mut times = Vec::new();
    let mut rss = Vec::new();
    for _ in 0..3 {
        let copy = dir.join("long-copy.db");
        let _ = std::fs::remove_file(&copy);
        std::fs::copy(&db, &copy).expect("copied");
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
        assert_eq!(
            out.status.code(),
            Some(0),
            "resume failed: {}",
            &stderr[stderr.len().saturating_sub(2000)..]
        );
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
    let _ = std::fs::remove_file(dir.join("long-copy.db"));
    let _ = std::fs::remove_file(&db);
    println!(
        "resume of {entries} entries (replay, in-doubt answer, final turn, report): median {:.3} s, peak RSS median {:.1} MiB",
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
        resume(&d, 16_700, &rt);
    }
    if wanted("resume-1m") {
        resume(&d, 166_700, &rt);
    }
}
