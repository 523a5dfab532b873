//! What only the PostgreSQL store has, against the real server named by `TERMINUS_PG_URL`:
//! racing connections, `SKIP LOCKED` polling, columns of the wrong type, and a connection that
//! drops under a store (the contract itself is in `contract.rs`). Without the URL the tests print
//! why they skip; with `CI=true` a missing URL is a failure, not a skip.

mod common;

use common::unique;
use std::sync::Arc;
use std::time::Duration;
use terminus_runtime::{Claims, Journal, Queue, StoreError};
use terminus_store::PostgresStore;

async fn store() -> Option<PostgresStore> {
    let url = common::pg_url()?;
    Some(
        PostgresStore::connect(&url)
            .await
            .expect("PostgreSQL reachable at TERMINUS_PG_URL"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_connections_get_exactly_one_claim_and_workers_skip_locked_rows() {
    let Some(admin) = store().await else { return };
    let url = std::env::var("TERMINUS_PG_URL").expect("checked above");
    let n = 6;
    let mut stores = Vec::new();
    for _ in 0..n {
        stores.push(Arc::new(
            PostgresStore::connect(&url).await.expect("connect"),
        ));
    }
    for round in 0..20 {
        let id = unique(&format!("race{round}"));
        admin.create(&id, &common::spec()).await.expect("create");
        let tasks: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(w, s)| {
                let (s, id) = (s.clone(), id.clone());
                tokio::spawn(async move {
                    s.claim(&id, &format!("w{w}"), Duration::from_secs(30))
                        .await
                })
            })
            .collect();
        let mut winners = 0;
        for t in tasks {
            match t.await.expect("task") {
                Ok(_) => winners += 1,
                Err(StoreError::Claimed { .. }) => {}
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert_eq!(winners, 1, "round {round}");
        admin.delete(&id).await.expect("cleanup");
    }
    // Polling workers: each pending execution is taken by exactly one of them.
    let ids: Vec<String> = (0..5).map(|i| unique(&format!("poll{i}"))).collect();
    for id in &ids {
        admin.create(id, &common::spec()).await.expect("create");
    }
    let tasks: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(w, s)| {
            let s = s.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(id) = s
                    .claim_next(&format!("poller{w}"), Duration::from_secs(30))
                    .await
                    .expect("poll")
                {
                    got.push(id.execution);
                }
                got
            })
        })
        .collect();
    let mut taken: Vec<String> = Vec::new();
    for t in tasks {
        taken.extend(t.await.expect("task"));
    }
    let mine: Vec<&String> = taken.iter().filter(|id| ids.contains(id)).collect();
    let unique_taken: std::collections::BTreeSet<&&String> = mine.iter().collect();
    assert_eq!(
        mine.len(),
        ids.len(),
        "every pending execution taken once: {taken:?}"
    );
    assert_eq!(unique_taken.len(), ids.len());
    for id in &ids {
        admin.delete(id).await.expect("cleanup");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_of_the_wrong_type_is_a_storage_error_not_a_panic() {
    let Some(_store) = store().await else { return };
    let url = std::env::var("TERMINUS_PG_URL").expect("checked above");
    // A journal this build did not write: the schema says version 2, but `spec` and
    // `checkpoint` are integers. It lives in a schema of its own, reached by search_path.
    let schema = unique("terminus_wrong").replace('-', "_");
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; SET search_path TO {schema};
             CREATE TABLE terminus_schema (version INTEGER NOT NULL);
             INSERT INTO terminus_schema VALUES (2);
             CREATE TABLE terminus_executions (id TEXT PRIMARY KEY,
                 status TEXT NOT NULL DEFAULT 'running', worker TEXT,
                 lease_until TIMESTAMPTZ NOT NULL DEFAULT 'epoch',
                 created TIMESTAMPTZ NOT NULL DEFAULT now(), spec INTEGER, report TEXT,
                 failure TEXT);
             INSERT INTO terminus_executions (id, spec) VALUES ('x', 7);
             CREATE TABLE terminus_entries (execution TEXT NOT NULL, checkpoint INTEGER NOT NULL,
                 idx INTEGER NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL);
             INSERT INTO terminus_entries VALUES ('x', 0, 0, 'user', '{{}}');"
        ))
        .await
        .expect("the wrong schema");
    let sep = if url.contains('?') { '&' } else { '?' };
    let scoped = format!("{url}{sep}options=-csearch_path%3D{schema}");
    let wrong = PostgresStore::connect(&scoped)
        .await
        .expect("version 2: migrated to 3");
    let err = wrong.execution("x").await.expect_err("spec is an integer");
    assert!(
        matches!(&err, StoreError::Corrupt { what, .. } if what.contains("column `spec`")),
        "{err:?}"
    );
    let err = wrong
        .page("x", None, 10)
        .await
        .expect_err("checkpoint is an integer");
    assert!(
        matches!(&err, StoreError::Corrupt { what, .. } if what.contains("column `checkpoint`")),
        "{err:?}"
    );
    // Through the runtime's port: a storage error, exit code 3.
    let port = terminus_store::open(&scoped, terminus_store::Durability::Process)
        .await
        .expect("opens");
    let err = port.spec("x").await.expect_err("a storage error");
    assert_eq!(terminus_runtime::RunError::Store(err).exit_code(), 3);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .expect("cleanup");
}

/// Ends every server connection whose `application_name` is `name`, as a server restart or a
/// network cut would, and returns how many there were.
async fn drop_connections(url: &str, name: &str) -> i64 {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
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
    row.get(0)
}

#[tokio::test]
async fn a_dropped_connection_is_opened_again_and_nothing_is_lost_or_doubled() {
    let Some(url) = common::pg_url() else { return };
    let name = unique("terminus_drop").replace('-', "_");
    let sep = if url.contains('?') { '&' } else { '?' };
    let named = format!("{url}{sep}application_name={name}");
    let store = PostgresStore::connect(&named).await.expect("connect");
    let id = unique("drop");
    assert!(store.create(&id, &common::spec()).await.expect("create"));
    let lease = store
        .claim(&id, "w1", Duration::from_secs(30))
        .await
        .expect("claim");
    for round in 0..3u32 {
        store
            .append_all(
                &id,
                vec![
                    common::record(round, 0, "event"),
                    common::record(round, 1, "decision"),
                ],
            )
            .await
            .expect("append on a live or reopened connection");
        assert_eq!(
            drop_connections(&url, &name).await,
            1,
            "the store's connection was ended"
        );
    }
    store.renew(&lease).await.expect("the claim is still ours");
    assert_eq!(store.count(&id).await.expect("count"), 6);
    let keys: Vec<String> = store
        .records(&id)
        .await
        .expect("records")
        .iter()
        .map(|r| r.key.to_string())
        .collect();
    assert_eq!(
        keys,
        ["cp0:e0", "cp0:e1", "cp1:e0", "cp1:e1", "cp2:e0", "cp2:e1"],
        "each append once"
    );
    store.delete(&id).await.expect("cleanup");
}

/// How many server connections have `application_name` `name`.
async fn connections(url: &str, name: &str) -> i64 {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await
        .expect("count");
    row.get(0)
}

/// A statement that waits (here on a row another session has locked) holds up its own
/// connection only: the store's other callers go on over another one, as a host running many
/// plans on one store needs; a caller alone keeps to one connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_statement_does_not_hold_up_the_stores_other_callers() {
    use terminus_runtime::Cells;
    let Some(url) = common::pg_url() else { return };
    let name = unique("terminus_pool").replace('-', "_");
    let sep = if url.contains('?') { '&' } else { '?' };
    let store = Arc::new(
        PostgresStore::connect(&format!("{url}{sep}application_name={name}"))
            .await
            .expect("connect"),
    );
    let key = unique("pool-locked");
    let one = serde_json::json!(1);
    assert_eq!(
        store.put_cell(&key, None, &one).await.expect("write"),
        Some(1)
    );
    for _ in 0..20 {
        store.cell(&key).await.expect("read");
    }
    assert_eq!(
        connections(&url, &name).await,
        1,
        "one caller, one connection"
    );

    let (mut locker, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let lock = locker.transaction().await.expect("begin");
    lock.execute(
        "SELECT 1 FROM terminus_cells WHERE key = $1 FOR UPDATE",
        &[&key],
    )
    .await
    .expect("lock the row");
    let waiting = tokio::spawn({
        let (store, key) = (Arc::clone(&store), key.clone());
        async move { store.put_cell(&key, Some(1), &serde_json::json!(2)).await }
    });
    let (watch, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let mut blocked = false;
    for _ in 0..500 {
        let row = watch
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE application_name = $1 AND wait_event_type = 'Lock'",
                &[&name],
            )
            .await
            .expect("watch");
        if row.get::<_, i64>(0) == 1 {
            blocked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        blocked,
        "the write to the locked row never waited on its lock"
    );

    let other = unique("pool-other");
    let went_on = tokio::time::timeout(Duration::from_secs(10), store.put_cell(&other, None, &one))
        .await
        .expect("another caller held up behind the waiting statement");
    assert_eq!(went_on.expect("write"), Some(1));
    assert!(!waiting.is_finished(), "the row is still locked");
    lock.rollback().await.expect("unlock");
    assert_eq!(
        waiting.await.expect("task").expect("write"),
        Some(2),
        "the waiting write goes through once the row is free"
    );
}
