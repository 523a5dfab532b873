//! Storage faults under a running agent: a full disk, a read-only journal, a journal deleted
//! under the process, a PostgreSQL connection dropped mid-run. Each ends in a clear error that
//! names the journal (exit code 3) or is ridden out (a reconnect), never in a lost or doubled
//! entry: a resume on a healthy journal finishes the run with exactly the records of a run that
//! never failed.

use serde_json::json;
use std::sync::Arc;
use terminus_kernel::Record;
use terminus_runtime::{
    Journal, MemoryStore, RunError, RuntimeConfig, Store, StoreError, Transition,
};
use terminus_scenario::Scenario;
use terminus_store::{Durability, SqliteStore};

const TURNS: usize = 12;

/// `TURNS` tool turns and a final answer.
fn scenario_json() -> serde_json::Value {
    let script: Vec<serde_json::Value> = (0..TURNS)
        .map(|i| json!({ "tool_calls": [ { "name": "read", "arguments": { "file": i } } ] }))
        .chain([json!({ "text": "All files read.", "needs_more_work": false })])
        .collect();
    json!({
        "name": "storage-faults",
        "task": "Read every file.",
        "policy": { "max_model_calls": 40, "max_steps": 80 },
        "model": { "turns": script },
        "tools": { "read": { "results": [ { "ok": "contents" } ], "repeat": "last" } }
    })
}

fn scenario() -> Scenario {
    Scenario::parse(&scenario_json().to_string()).expect("the scenario parses")
}

fn config() -> RuntimeConfig {
    RuntimeConfig {
        worker: "faults-test".into(),
        ..RuntimeConfig::default()
    }
}

/// The records of the same run on a store that never fails.
async fn reference() -> Vec<Arc<Record>> {
    let store = Arc::new(MemoryStore::new());
    let report = scenario()
        .run()
        .store(store.clone())
        .execution("x")
        .config(config())
        .execute()
        .await
        .expect("the reference run");
    assert!(report.is_complete());
    store.records("x").await.expect("records")
}

/// Resumes `execution` on `store` to its end and checks its journal is the reference's, record
/// for record: nothing lost, nothing doubled.
async fn resume_finishes(store: Arc<dyn Store>, execution: &str) {
    let report = scenario()
        .resume(execution)
        .store(store.clone())
        .config(config())
        .execute()
        .await
        .expect("the resume finishes the run");
    assert!(report.is_complete(), "{report:?}");
    let records = store.records(execution).await.expect("records");
    let expected = reference().await;
    assert_eq!(
        records.len(),
        expected.len(),
        "as many records as a clean run"
    );
    for (got, want) in records.iter().zip(&expected) {
        assert_eq!(got, want);
    }
}

/// The journal's name and the exit code 3 of a storage failure, from `err`.
fn storage_failure(err: &RunError) -> &str {
    assert_eq!(err.exit_code(), 3, "{err}");
    match err {
        RunError::Store(StoreError::Backend { journal, .. }) => journal,
        other => panic!("expected a storage failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_full_disk_stops_the_run_naming_the_journal_and_a_resume_finishes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    let store = Arc::new(SqliteStore::open(&path, Durability::Process).expect("open"));
    // A disk that fills up a few steps into the run, without root or a real full disk: at step
    // 4, SQLite's own limit on the file's size (on this connection) is set to its current size.
    let limited = Arc::clone(&store);
    let err = scenario()
        .run()
        .observer(move |t: &Transition<'_>| {
            if t.record.step == 4 {
                limited
                    .execute_unchecked("PRAGMA max_page_count = 1")
                    .expect("limit");
            }
        })
        .store(store.clone())
        .execution("x")
        .config(config())
        .execute()
        .await
        .expect_err("the disk fills up");
    assert_eq!(storage_failure(&err), path.display().to_string());
    assert!(err.to_string().contains("full"), "{err}");
    let written = store.count("x").await.expect("count");
    assert!(
        written > 1,
        "some steps were journaled before it filled: {written}"
    );
    drop(store);
    // Room again (a new connection has no limit): the resume finishes from the last whole step.
    let store = Arc::new(SqliteStore::open(&path, Durability::Process).expect("reopen"));
    resume_finishes(store, "x").await;
}

#[tokio::test]
async fn a_journal_deleted_under_the_run_stops_it_naming_the_journal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    let store = Arc::new(SqliteStore::open(&path, Durability::Process).expect("open"));
    let doomed = path.clone();
    let result = scenario()
        .run()
        .observer(move |t: &Transition<'_>| {
            if t.record.step == 4 {
                for suffix in ["", "-wal", "-shm"] {
                    let mut file = doomed.clone().into_os_string();
                    file.push(suffix);
                    let _ = std::fs::remove_file(&file);
                }
            }
        })
        .store(store.clone())
        .execution("x")
        .config(config())
        .execute()
        .await;
    let err = result.expect_err("the journal is gone");
    assert_eq!(storage_failure(&err), path.display().to_string());
    assert!(err.to_string().contains("deleted or replaced"), "{err}");
    // What was journaled went with the file: a resume finds no execution (exit 2) rather than
    // running the task again from nothing.
    drop(store);
    let store = Arc::new(SqliteStore::open(&path, Durability::Process).expect("a new file"));
    let err = scenario()
        .resume("x")
        .store(store)
        .config(config())
        .execute()
        .await
        .expect_err("nothing to resume");
    assert!(
        matches!(&err, RunError::Store(StoreError::NotFound(_))),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), 2);
}

/// Ends every server connection whose `application_name` is `name` (as a server restart or a
/// network cut would), from a thread of its own: observers are called synchronously.
fn drop_connections(url: &str, name: &str) -> i64 {
    let (url, name) = (url.to_owned(), name.to_owned());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("connect");
            tokio::spawn(connection);
            let row = client
                .query_one(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                     WHERE application_name = $1",
                    &[&name],
                )
                .await
                .expect("terminate");
            row.get::<_, i64>(0)
        })
    })
    .join()
    .expect("the thread")
}

#[tokio::test]
async fn a_postgres_connection_dropped_mid_run_is_opened_again_and_the_run_finishes() {
    let Ok(url) = std::env::var("TERMINUS_PG_URL") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but TERMINUS_PG_URL is unset"
        );
        eprintln!("skipping: TERMINUS_PG_URL is unset");
        return;
    };
    let unique = format!(
        "faults_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let sep = if url.contains('?') { '&' } else { '?' };
    let named = format!("{url}{sep}application_name={unique}");
    let store = Arc::new(
        terminus_store::PostgresStore::connect(&named)
            .await
            .expect("PostgreSQL reachable at TERMINUS_PG_URL"),
    );
    let dropped = Arc::new(std::sync::Mutex::new(0));
    let (count, name) = (Arc::clone(&dropped), unique.clone());
    let report = scenario()
        .run()
        .observer(move |t: &Transition<'_>| {
            if t.record.step.is_multiple_of(4) {
                *count.lock().expect("count") += drop_connections(&url, &name);
            }
        })
        .store(store.clone())
        .execution(unique.clone())
        .config(config())
        .execute()
        .await
        .expect("the run rides out the dropped connections");
    assert!(report.is_complete(), "{report:?}");
    assert!(
        *dropped.lock().expect("count") >= 5,
        "connections were dropped"
    );
    let records = store.records(&unique).await.expect("records");
    let expected = reference().await;
    assert_eq!(records, expected, "nothing lost, nothing doubled");
    assert_eq!(report.duplicates_prevented, 0);
    store.delete(&unique).await.expect("cleanup");
}

/// Runs `terminus` with `args`; as root (who writes any file), as the unprivileged `nobody`, so
/// that a file's mode binds.
fn terminus_unprivileged(args: &[&str]) -> std::process::Output {
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let terminus = env!("CARGO_BIN_EXE_terminus");
    let mut command = if root {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", terminus]);
        c
    } else {
        std::process::Command::new(terminus)
    };
    command.args(args).output().expect("terminus runs")
}

#[tokio::test]
async fn a_read_only_journal_is_refused_naming_it_and_nothing_is_written() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let set_mode = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    set_mode(dir.path(), 0o755);
    let path = dir.path().join("j.db");
    {
        let store = SqliteStore::open(&path, Durability::Process).expect("open");
        let report = scenario()
            .run()
            .store(Arc::new(store))
            .execution("earlier")
            .config(config())
            .execute()
            .await
            .expect("a run before the file became read-only");
        assert!(report.is_complete());
    }
    let file = dir.path().join("s.json");
    std::fs::write(&file, scenario_json().to_string()).expect("written");
    set_mode(&file, 0o644);
    set_mode(&path, 0o444);
    let journal = path.display().to_string();
    let out = terminus_unprivileged(&[
        "run",
        &file.display().to_string(),
        "--journal",
        &journal,
        "--execution",
        "later",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&journal),
        "the message names the journal: {stderr}"
    );
    set_mode(&path, 0o644);
    let store = SqliteStore::open(&path, Durability::Process).expect("open");
    assert_eq!(
        store.spec("later").await.expect("read"),
        None,
        "nothing written"
    );
    assert_eq!(
        store.count("earlier").await.expect("read"),
        u64::try_from(reference().await.len()).expect("small"),
        "the earlier run is intact"
    );
}
