//! The PostgreSQL store against the real server named by `TERMINUS_PG_URL`. Without it the tests
//! print why they skip; with `CI=true` a missing URL is a failure, not a skip.

use std::sync::Arc;
use std::time::Duration;
use terminus_store::{PostgresStore, RawEntry, StoreError};

async fn store() -> Option<PostgresStore> {
    let Ok(url) = std::env::var("TERMINUS_PG_URL") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but TERMINUS_PG_URL is unset"
        );
        eprintln!(
            "skipping: TERMINUS_PG_URL is unset (e.g. postgres://postgres@127.0.0.1:5432/test)"
        );
        return None;
    };
    Some(
        PostgresStore::connect(&url)
            .await
            .expect("PostgreSQL reachable at TERMINUS_PG_URL"),
    )
}

fn entry(cp: u64, i: u32, body: &str) -> RawEntry {
    RawEntry {
        checkpoint: cp,
        index: i,
        kind: "event".into(),
        body: body.into(),
    }
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        terminus_store::now_ms()
    )
}

#[tokio::test]
async fn appends_are_idempotent_and_pages_come_in_key_order() {
    let Some(store) = store().await else { return };
    let id = unique("append");
    assert!(store.create(&id, Some("{}"), false).await.expect("create"));
    assert!(!store.create(&id, None, false).await.expect("create twice"));
    store
        .append(
            &id,
            &[
                entry(0, 0, "task"),
                entry(2, 0, "b"),
                entry(1, 1, "a2"),
                entry(1, 0, "a"),
            ],
        )
        .await
        .expect("append");
    let again = store
        .append(&id, &[entry(1, 0, "DIFFERENT"), entry(3, 0, "c")])
        .await
        .expect("append");
    assert!(again[0].already_existed && again[0].body == "a");
    assert!(!again[1].already_existed);
    assert_eq!(store.count(&id).await.expect("count"), 5);
    let mut keys = Vec::new();
    let mut after = None;
    loop {
        let page = store.page(&id, after, 2).await.expect("page");
        if page.is_empty() {
            break;
        }
        after = page.last().map(|e| (e.checkpoint, e.index));
        keys.extend(page.iter().map(RawEntry::key));
    }
    assert_eq!(keys, ["cp0:e0", "cp1:e0", "cp1:e1", "cp2:e0", "cp3:e0"]);
    assert!(store.schema_version().await.expect("version") >= 1);
    store.delete(&id).await.expect("cleanup");
}

#[tokio::test]
async fn claims_are_exclusive_and_expire() {
    let Some(store) = store().await else { return };
    let id = unique("claim");
    assert!(matches!(
        store.claim(&id, "w1", Duration::from_secs(5)).await,
        Err(StoreError::NotFound(_))
    ));
    store.create(&id, None, false).await.expect("create");
    store
        .claim(&id, "w1", Duration::from_secs(30))
        .await
        .expect("w1");
    match store.claim(&id, "w2", Duration::from_secs(30)).await {
        Err(StoreError::Claimed { worker, .. }) => assert_eq!(worker, "w1"),
        other => panic!("w2 must be refused, got {other:?}"),
    }
    store
        .renew(&id, "w1", Duration::from_millis(1))
        .await
        .expect("renew");
    tokio::time::sleep(Duration::from_millis(20)).await;
    store
        .claim(&id, "w2", Duration::from_secs(30))
        .await
        .expect("takeover after expiry");
    assert!(matches!(
        store.renew(&id, "w1", Duration::from_secs(1)).await,
        Err(StoreError::LeaseLost { .. })
    ));
    store.delete(&id).await.expect("cleanup");
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
        admin.create(&id, None, false).await.expect("create");
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
                Ok(()) => winners += 1,
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
        admin.create(id, None, true).await.expect("create pending");
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
                    got.push(id);
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
    let schema = format!(
        "terminus_wrong_{}_{}",
        std::process::id(),
        terminus_store::now_ms()
    );
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
        .expect("version 2: nothing to migrate");
    let err = wrong.execution("x").await.expect_err("spec is an integer");
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.contains("column `spec`")),
        "{err:?}"
    );
    let err = wrong
        .page("x", None, 10)
        .await
        .expect_err("checkpoint is an integer");
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.contains("column `checkpoint`")),
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
