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
