//! What only the SQLite store has: a versioned schema in the file, and claims racing on
//! separate connections (the contract itself is in `contract.rs`).

mod common;

use std::sync::Arc;
use std::time::Duration;
use terminus_runtime::{Claims, Journal, StoreError};
use terminus_store::{Durability, SqliteStore};

#[tokio::test]
async fn the_schema_is_created_versioned_and_kept_on_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    {
        let store = SqliteStore::open(&path, Durability::PowerLoss).expect("open");
        assert_eq!(store.schema_version().expect("version"), 6);
        store.create("x", &common::spec()).await.expect("create");
        store
            .append("x", common::record(0, 0, "task"))
            .await
            .expect("append");
    }
    let store = SqliteStore::open(&path, Durability::Process).expect("reopen");
    assert_eq!(store.schema_version().expect("version"), 6);
    assert_eq!(store.count("x").await.expect("count"), 1);
}

#[test]
fn a_newer_schema_is_refused_naming_the_journal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    SqliteStore::open(&path, Durability::Process)
        .expect("open")
        .execute_unchecked("PRAGMA user_version = 99")
        .expect("set version");
    let err = SqliteStore::open(&path, Durability::Process).expect_err("refused");
    match &err {
        StoreError::Corrupt { journal, what } => {
            assert!(what.contains("99"), "{err}");
            assert_eq!(journal, &path.display().to_string());
        }
        other => panic!("expected corrupt, got {other:?}"),
    }
}

/// What migration 6 added, undone (a version 5 journal).
const BEFORE_6: &str = "ALTER TABLE executions DROP COLUMN held;
     ALTER TABLE executions DROP COLUMN suspended_ms; ALTER TABLE executions DROP COLUMN paused_ms;";

/// What migration 5 added, undone (a version 4 journal).
const BEFORE_5: &str = "DROP VIEW journal; DROP TABLE packed_entries; DROP INDEX executions_num;
     ALTER TABLE executions DROP COLUMN num;";

#[tokio::test]
async fn version_1_to_5_journals_are_migrated_and_keep_their_executions() {
    for (version, downgrade) in [
        (
            1,
            "DROP TABLE cells; ALTER TABLE executions DROP COLUMN conflicts;
             ALTER TABLE executions DROP COLUMN failure; PRAGMA user_version = 1",
        ),
        (
            2,
            "DROP TABLE cells; ALTER TABLE executions DROP COLUMN conflicts;
             PRAGMA user_version = 2",
        ),
        (3, "DROP TABLE cells; PRAGMA user_version = 3"),
        (4, "PRAGMA user_version = 4"),
        (5, "PRAGMA user_version = 5"),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("j.db");
        {
            let store = SqliteStore::open(&path, Durability::Process).expect("open");
            store.execute_unchecked(BEFORE_6).expect("downgrade to 5");
            // Before migration 5, entries were stored by their execution's id.
            if version < 5 {
                store.execute_unchecked(BEFORE_5).expect("downgrade to 4");
            }
            store
                .execute_unchecked(
                    "INSERT INTO executions (id, created_ms) VALUES ('old', 1);
                 INSERT INTO entries (execution, checkpoint, idx, kind, body)
                 VALUES ('old', 0, 0, 'user', '{\"entry\":\"user\",\"task\":\"task\"}');",
                )
                .expect("an old execution");
            store.execute_unchecked(downgrade).expect("downgrade");
            assert_eq!(store.schema_version().expect("version"), version);
        }
        let store = SqliteStore::open(&path, Durability::Process).expect("reopen");
        assert_eq!(store.schema_version().expect("version"), 6);
        assert_eq!(store.conflicts("old").await.expect("read"), 0);
        // The old execution's entries stay where they are, and new ones join them.
        let again = store
            .append("old", common::record(0, 0, "other"))
            .await
            .expect("append");
        assert!(again.already_existed);
        assert_eq!(*again.record, *common::record(0, 0, "task"));
        store
            .append("old", common::record(1, 0, "more"))
            .await
            .expect("append");
        let records = store.records("old").await.expect("records");
        assert_eq!(records.len(), 2);
        assert_eq!(*records[1], *common::record(1, 0, "more"));
        common::contract(&store, &format!("v{version}"), false).await;
    }
}

/// Entries are packed under their execution's number when their key fits, and kept by the
/// execution's id when it does not (a checkpoint or an index past the packing, or an execution
/// that had entries before it was created): either way appends are idempotent by key, pages
/// come in key order across both tables, and counts and the executions' list see both.
#[tokio::test]
async fn packed_and_unpacked_entries_read_as_one_journal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    let store = SqliteStore::open(&path, Durability::Process).expect("open");
    store.create("p", &common::spec()).await.expect("create");
    let keys: [(u32, u32); 9] = [
        (0, 0),
        (1, 0),
        (1, 16_383),
        (1, 16_384),
        (2, 0),
        (67_108_863, 16_383),
        (67_108_864, 0),
        (67_108_864, 5),
        (u32::MAX, u32::MAX),
    ];
    // Appended out of order, in one commit and then one by one again.
    let mut scrambled: Vec<_> = keys
        .iter()
        .rev()
        .map(|&(c, i)| common::record(c, i, &format!("{c}/{i}")))
        .collect();
    scrambled.swap(1, 5);
    let first = store.append_all("p", scrambled).await.expect("append");
    assert!(first.iter().all(|a| !a.already_existed));
    for &(c, i) in &keys {
        let again = store
            .append("p", common::record(c, i, "DIFFERENT"))
            .await
            .expect("append");
        assert!(again.already_existed, "cp{c}:e{i}");
        assert_eq!(*again.record, *common::record(c, i, &format!("{c}/{i}")));
    }
    assert_eq!(store.count("p").await.expect("count"), 9);
    for limit in [1, 2, 4, 100] {
        let mut read = Vec::new();
        loop {
            let page = store
                .page("p", read.last().copied(), limit)
                .await
                .expect("page");
            if page.is_empty() {
                break;
            }
            assert!(page.len() <= limit);
            read.extend(page.iter().map(|r| r.key));
        }
        let expected: Vec<_> = keys
            .iter()
            .map(|&(c, i)| terminus_kernel::Key::new(c, i))
            .collect();
        assert_eq!(read, expected, "pages of {limit}");
    }

    // An execution whose entries came before its row keeps all of them by its id.
    store
        .append("early", common::record(0, 0, "task"))
        .await
        .expect("append");
    store
        .create("early", &common::spec())
        .await
        .expect("create");
    store
        .append("early", common::record(1, 0, "more"))
        .await
        .expect("append");
    assert!(
        store
            .append("early", common::record(0, 0, "x"))
            .await
            .expect("append")
            .already_existed
    );
    assert_eq!(store.count("early").await.expect("count"), 2);

    // Where each entry is.
    let db = rusqlite::Connection::open(&path).expect("open the file");
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).expect(sql) };
    assert_eq!(count("SELECT count(*) FROM packed_entries"), 5);
    assert_eq!(
        count("SELECT count(*) FROM entries WHERE execution = 'p'"),
        4
    );
    assert_eq!(
        count("SELECT count(*) FROM entries WHERE execution = 'early'"),
        2
    );
    assert_eq!(
        count("SELECT count(*) FROM executions WHERE id = 'early' AND num IS NULL"),
        1
    );
    // The `journal` view shows every entry with its key.
    assert_eq!(count("SELECT count(*) FROM journal"), 11);
    assert_eq!(
        count(
            "SELECT count(*) FROM journal WHERE execution = 'p' AND checkpoint = 67108863 AND idx = 16383"
        ),
        1
    );
    let listed = store
        .executions(&terminus_runtime::ExecutionFilter::all())
        .await
        .expect("list");
    let entries: Vec<(String, u64)> = listed
        .iter()
        .map(|e| (e.execution.clone(), e.entries))
        .collect();
    assert_eq!(entries, [("p".to_owned(), 9), ("early".to_owned(), 2)]);
}

/// The row keeps the report without its trace, which is read back from the journal; a report
/// stored whole (before the trace was left out) reads back as it was; a trace the journal
/// cannot give whole is corrupt data.
#[tokio::test]
async fn a_report_is_kept_without_its_trace_and_read_back_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path().join("j.db"), Durability::Process).expect("open");
    store.create("x", &common::spec()).await.expect("create");
    let (records, report) = common::kernel_run("x");
    store.append_all("x", records).await.expect("append");
    store.finish("x", &report).await.expect("finish");
    let row = store
        .execution("x")
        .await
        .expect("read")
        .and_then(|r| r.report)
        .expect("a stored report");
    let stored: serde_json::Value = serde_json::from_str(&row).expect("JSON");
    assert_eq!(stored["trace"], serde_json::json!([]));
    assert_eq!(stored["steps"], 3);
    assert_eq!(store.report("x").await.expect("read"), Some(report.clone()));

    // A report stored whole, as earlier versions did.
    let whole = report.to_json_line().replace('\'', "''");
    store
        .execute_unchecked(&format!(
            "UPDATE executions SET report = '{whole}' WHERE id = 'x'; \
             DELETE FROM packed_entries WHERE kind = 'transition'"
        ))
        .expect("stored whole");
    assert_eq!(store.report("x").await.expect("read"), Some(report.clone()));

    // The trace left out, and the journal's transitions gone.
    let light = report.without_trace().to_json_line().replace('\'', "''");
    store
        .execute_unchecked(&format!(
            "UPDATE executions SET report = '{light}' WHERE id = 'x'"
        ))
        .expect("stored without the trace");
    match store.report("x").await {
        Err(StoreError::Corrupt { what, .. }) => {
            assert!(what.contains("counts 3 steps"), "{what}");
        }
        other => panic!("expected corrupt data, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_workers_on_separate_connections_get_exactly_one_claim() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    let n = 8;
    let stores: Vec<Arc<SqliteStore>> = (0..n)
        .map(|_| Arc::new(SqliteStore::open(&path, Durability::Process).expect("open")))
        .collect();
    for round in 0..20 {
        let id = format!("race-{round}");
        stores[0]
            .create(&id, &common::spec())
            .await
            .expect("create");
        let barrier = Arc::new(tokio::sync::Barrier::new(n));
        let tasks: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(w, store)| {
                let (store, id, barrier) = (Arc::clone(store), id.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store
                        .claim(&id, &format!("w{w}"), Duration::from_secs(30))
                        .await
                })
            })
            .collect();
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.expect("task"));
        }
        let winners = results.iter().filter(|r| r.is_ok()).count();
        let refused = results
            .iter()
            .filter(|r| matches!(r, Err(StoreError::Claimed { .. })))
            .count();
        assert_eq!((winners, refused), (1, n - 1), "round {round}: {results:?}");
        assert_eq!(
            stores[0].conflicts(&id).await.expect("conflicts"),
            u64::try_from(n - 1).expect("small")
        );
    }
}
