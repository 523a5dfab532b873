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
        assert_eq!(store.schema_version().expect("version"), 4);
        store.create("x", &common::spec()).await.expect("create");
        store
            .append("x", common::record(0, 0, "task"))
            .await
            .expect("append");
    }
    let store = SqliteStore::open(&path, Durability::Process).expect("reopen");
    assert_eq!(store.schema_version().expect("version"), 4);
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

#[tokio::test]
async fn version_1_2_and_3_journals_are_migrated_and_keep_their_executions() {
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
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("j.db");
        {
            let store = SqliteStore::open(&path, Durability::Process).expect("open");
            store.create("old", &common::spec()).await.expect("create");
            store.execute_unchecked(downgrade).expect("downgrade");
            assert_eq!(store.schema_version().expect("version"), version);
        }
        let store = SqliteStore::open(&path, Durability::Process).expect("reopen");
        assert_eq!(store.schema_version().expect("version"), 4);
        assert_eq!(store.spec("old").await.expect("read"), Some(common::spec()));
        assert_eq!(store.conflicts("old").await.expect("read"), 0);
        // Not private: the old execution is waiting for a worker too.
        common::contract(&store, &format!("v{version}"), false).await;
    }
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
             DELETE FROM entries WHERE execution = 'x' AND kind = 'transition'"
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
