//! An execution a worker cannot run is marked failed with its reason, on every store: only the
//! claim's holder can mark it, the reason reads back, and no worker claims it again.

use std::sync::Arc;
use std::time::Duration;
use terminus_runtime::{Failure, MemoryStore, RunSpec, Store, StoreError};
use terminus_store::{Durability, SqliteStore};

fn spec() -> RunSpec {
    RunSpec {
        task: "t".into(),
        name: None,
        system: None,
        policy: terminus_kernel::Policy::default(),
        host: None,
        started_unix_ms: None,
    }
}

fn failure() -> Failure {
    Failure {
        exit_code: 2,
        reason: "the stored config: [model].provider: unknown provider".into(),
        worker: "w1".into(),
    }
}

/// The contract on `store`; `private` stores may use `claim_next` (a shared PostgreSQL database
/// holds other tests' executions, which a `claim_next` here could take).
async fn fails_once_and_for_good(store: Arc<dyn Store>, id: &str, private: bool) {
    let lease_ms = Duration::from_secs(30);
    assert!(store.create(id, &spec()).await.expect("create"));
    let lease = if private {
        store
            .claim_next("w1", lease_ms)
            .await
            .expect("claim_next")
            .expect("the submitted execution is runnable")
    } else {
        store.claim(id, "w1", lease_ms).await.expect("claim")
    };
    assert_eq!(lease.execution, id);
    assert_eq!(store.failure(id).await.expect("read"), None);

    let mut other = lease.clone();
    other.worker = "w2".into();
    assert!(matches!(
        store.fail(&other, &failure()).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert_eq!(
        store.failure(id).await.expect("read"),
        None,
        "nothing written"
    );

    store
        .fail(&lease, &failure())
        .await
        .expect("the holder fails it");
    assert_eq!(store.failure(id).await.expect("read"), Some(failure()));
    assert_eq!(store.report(id).await.expect("read"), None);
    if private {
        assert_eq!(
            store.claim_next("w2", lease_ms).await.expect("claim_next"),
            None,
            "a failed execution is never claimed again"
        );
    }
    assert!(
        matches!(
            store.fail(&lease, &failure()).await,
            Err(StoreError::LeaseLost { .. })
        ),
        "the claim was given up with the failure"
    );

    // An execution that ended keeps its report: it cannot be marked failed, even by its holder.
    let ended = format!("{id}-ended");
    assert!(store.create(&ended, &spec()).await.expect("create"));
    let lease = store.claim(&ended, "w1", lease_ms).await.expect("claim");
    let stop = terminus_kernel::Stop {
        outcome: terminus_kernel::Outcome::Complete(terminus_kernel::CompleteReason::Answered),
        rule: terminus_kernel::Rule::ClaimAnswered,
        result: Some("done".into()),
        stats: terminus_kernel::Stats::default(),
        excluded_tools: Vec::new(),
    };
    let report = terminus_runtime::Report::new(ended.clone(), stop, Vec::new(), Vec::new(), 0, 0);
    store.finish(&ended, &report).await.expect("finish");
    assert!(matches!(
        store.fail(&lease, &failure()).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert_eq!(store.failure(&ended).await.expect("read"), None);
    assert_eq!(store.report(&ended).await.expect("read"), Some(report));
}

#[tokio::test]
async fn the_memory_store() {
    fails_once_and_for_good(Arc::new(MemoryStore::new()), "m", true).await;
}

#[tokio::test]
async fn the_sqlite_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path().join("j.db"), Durability::Process).expect("open");
    fails_once_and_for_good(Arc::new(store), "s", true).await;
}

#[tokio::test]
async fn a_version_1_sqlite_journal_is_migrated_and_keeps_its_executions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    {
        let store = SqliteStore::open(&path, Durability::Process).expect("open");
        store.create("old", None).expect("create");
        // Back to what schema version 1 wrote.
        store
            .execute_unchecked(
                "ALTER TABLE executions DROP COLUMN failure; PRAGMA user_version = 1",
            )
            .expect("downgrade");
        assert_eq!(store.schema_version().expect("version"), 1);
    }
    let store = SqliteStore::open(&path, Durability::Process).expect("reopen");
    assert_eq!(store.schema_version().expect("version"), 2);
    assert!(store.execution("old").expect("read").is_some());
    fails_once_and_for_good(Arc::new(store), "new", true).await;
}

#[tokio::test]
async fn the_postgres_store() {
    let Ok(url) = std::env::var("TERMINUS_PG_URL") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but TERMINUS_PG_URL is unset"
        );
        eprintln!("skipping: TERMINUS_PG_URL is unset");
        return;
    };
    let store = terminus_store::open(&url, Durability::Process)
        .await
        .expect("PostgreSQL reachable at TERMINUS_PG_URL");
    let id = format!("failed-{}-{}", std::process::id(), terminus_store::now_ms());
    fails_once_and_for_good(store, &id, false).await;
}
