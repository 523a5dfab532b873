//! Durable journal bench (issue 5): agent steps per second with the SQLite journal (both
//! durability modes) and PostgreSQL (when `TERMINUS_PG_URL` is set) at 10, 100 and 1,000 turns,
//! against the in-memory store in the same process; the SQLite journal's size after 1,000 turns;
//! and resuming a 100,000-entry execution with the `terminus` binary (wall time and peak RSS
//! from `/usr/bin/time -v`).
//!
//! An agent step is one model turn calling one tool, plus the tool's result. Figures are medians
//! of repeated runs.
//!
//! Run: `cargo bench -p terminus-cli --bench durable` (set `TERMINUS_PG_URL` for PostgreSQL).

use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use terminus_runtime::{MemoryStore, Store};
use terminus_scenario::Scenario;
use terminus_store::{Durability, SqliteStore};

/// A scenario of `turns` tool turns (each reading another file) and a final answer. With
/// `tool_results` set, the tool's script holds only that many results and is not idempotent.
fn scenario(turns: usize, tool_results: Option<usize>) -> serde_json::Value {
    let mut script: Vec<serde_json::Value> = (0..turns)
        .map(|i| json!({ "tool_calls": [ { "name": "read", "arguments": { "file": i } } ] }))
        .collect();
    script.push(json!({ "text": "All files read.", "needs_more_work": false }));
    let read = match tool_results {
        None => json!({ "results": [ { "ok": "contents" } ], "repeat": "last" }),
        Some(n) => json!({
            "idempotent": false,
            "results": (0..n).map(|_| json!({ "ok": "contents" })).collect::<Vec<_>>()
        }),
    };
    json!({
        "name": format!("bench-{turns}"),
        "task": "Read every file.",
        "policy": {
            "max_model_calls": turns + 10,
            "max_steps": 2 * turns + 20,
            "max_tool_failures": 5
        },
        "model": { "turns": script },
        "tools": { "read": read }
    })
}

fn parse(json: &serde_json::Value) -> Scenario {
    Scenario::parse(&json.to_string()).unwrap_or_else(|e| panic!("bench scenario: {e}"))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Microseconds per agent step of one run of `turns` turns on `store`.
async fn run_once(store: Arc<dyn Store>, scenario: &Scenario, id: &str, turns: usize) -> f64 {
    let start = Instant::now();
    let report = scenario
        .run()
        .store(store)
        .execution(id)
        .execute()
        .await
        .unwrap_or_else(|e| panic!("bench run: {e}"));
    let elapsed = start.elapsed();
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.tool_calls as usize, turns);
    elapsed.as_secs_f64() * 1e6 / turns as f64
}

async fn steps(
    label: &str,
    make: &dyn Fn() -> Arc<dyn Store>,
    baseline: Option<&[f64; 3]>,
) -> [f64; 3] {
    let mut out = [0.0; 3];
    for (k, turns) in [10usize, 100, 1000].into_iter().enumerate() {
        let s = parse(&scenario(turns, None));
        let repeats = if turns == 1000 { 5 } else { 15 };
        let mut xs = Vec::new();
        for r in 0..repeats {
            let id = format!("{label}-{turns}-{r}-{}", std::process::id());
            xs.push(run_once(make(), &s, &id, turns).await);
        }
        out[k] = median(xs);
    }
    let ratio = |k: usize| {
        baseline.map_or(String::new(), |b| {
            format!(" ({:.1}x memory)", out[k] / b[k])
        })
    };
    println!(
        "{label:<20} us/step: 10 turns {:>7.1}{} | 100 turns {:>7.1}{} | 1000 turns {:>7.1}{} | steps/s at 1000: {:>7.0} | 1000/10 ratio {:.2}",
        out[0],
        ratio(0),
        out[1],
        ratio(1),
        out[2],
        ratio(2),
        1e6 / out[2],
        out[2] / out[0]
    );
    out
}

fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path().to_owned();
    rt.block_on(async {
        let memory = steps("memory", &|| Arc::new(MemoryStore::new()), None).await;
        for (label, durability) in [
            ("sqlite (process)", Durability::Process),
            ("sqlite (power-loss)", Durability::PowerLoss),
        ] {
            let path = d.join(format!("{}.db", label.replace([' ', '(', ')'], "")));
            let store: Arc<dyn Store> =
                Arc::new(SqliteStore::open(&path, durability).expect("sqlite"));
            steps(label, &|| Arc::clone(&store), Some(&memory)).await;
        }
        if let Ok(url) = std::env::var("TERMINUS_PG_URL") {
            let store: Arc<dyn Store> = Arc::new(
                terminus_store::PostgresStore::connect(&url)
                    .await
                    .expect("postgres"),
            );
            steps("postgres", &|| Arc::clone(&store), Some(&memory)).await;
        } else {
            println!("postgres: skipped (TERMINUS_PG_URL not set)");
        }

        // Journal size: one execution of 1,000 turns in a fresh file.
        let path = d.join("size.db");
        {
            let store: Arc<dyn Store> =
                Arc::new(SqliteStore::open(&path, Durability::Process).expect("sqlite"));
            run_once(
                Arc::clone(&store),
                &parse(&scenario(1000, None)),
                "size",
                1000,
            )
            .await;
            let entries = store.count("size").await.expect("count");
            let wal = path.with_extension("db-wal");
            println!(
                "journal after 1000 turns: {entries} entries, {:.2} MB on disk while open (db {} B + wal {} B)",
                (file_size(&path) + file_size(&wal)) as f64 / 1e6,
                file_size(&path),
                file_size(&wal)
            );
        }
        println!(
            "journal after 1000 turns, file closed (WAL checkpointed): {:.2} MB",
            file_size(&path) as f64 / 1e6
        );
    });

    // Resume of a 100,000-entry execution, in a child process (its own peak RSS).
    let turns = 16_700;
    let file = d.join("long.json");
    std::fs::write(&file, scenario(turns, Some(turns - 1)).to_string()).expect("written");
    let db = d.join("long.db");
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
        terminus_runtime::Journal::count(&store, "long")
            .await
            .expect("count")
    });
    println!(
        "built an interrupted execution of {entries} entries in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let mut times = Vec::new();
    let mut rss = Vec::new();
    for _ in 0..3 {
        let copy = d.join("long-copy.db");
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
    println!(
        "resume of {entries} entries (replay, in-doubt answer, final turn, report): median {:.3} s, peak RSS median {:.1} MiB",
        median(times.iter().map(Duration::as_secs_f64).collect()),
        median(rss)
    );
}
