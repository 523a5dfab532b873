//! The SQLite store against real files: idempotent appends, paging in key order, versioned schema,
//! and the claim compare-and-set under threads racing on separate connections.

use std::sync::{Arc, Barrier};
use std::time::Duration;
use terminus_store::{Durability, RawEntry, SqliteStore, StoreError};

fn entry(cp: u64, i: u32, body: &str) -> RawEntry {
    RawEntry {
        checkpoint: cp,
        index: i,
        kind: "event".into(),
        body: body.into(),
    }
}

#[test]
fn appends_are_idempotent_by_key_and_pages_come_in_key_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path().join("j.db"), Durability::Process).expect("open");
    assert!(store.create("x", Some("{}")).expect("create"));
    assert!(
        !store.create("x", None).expect("create twice"),
        "create does not overwrite"
    );
    let first = store
        .append(
            "x",
            &[
                entry(0, 0, "task"),
                entry(2, 0, "b"),
                entry(1, 1, "a2"),
                entry(1, 0, "a"),
            ],
        )
        .expect("append");
    assert!(first.iter().all(|a| !a.already_existed));
    let again = store
        .append("x", &[entry(1, 0, "DIFFERENT"), entry(3, 0, "c")])
        .expect("append");
    assert!(again[0].already_existed);
    assert_eq!(
        again[0].body, "a",
        "the stored entry is returned, not overwritten"
    );
    assert!(!again[1].already_existed);
    assert_eq!(store.count("x").expect("count"), 5);
    let mut keys = Vec::new();
    let mut after = None;
    loop {
        let page = store.page("x", after, 2).expect("page");
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 2);
        after = page.last().map(|e| (e.checkpoint, e.index));
        keys.extend(page.iter().map(RawEntry::key));
    }
    assert_eq!(keys, ["cp0:e0", "cp1:e0", "cp1:e1", "cp2:e0", "cp3:e0"]);
    assert_eq!(store.count("other").expect("count"), 0);
}

#[test]
fn the_schema_is_created_versioned_and_kept_on_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    {
        let store = SqliteStore::open(&path, Durability::PowerLoss).expect("open");
        assert_eq!(store.schema_version().expect("version"), 2);
        store.create("x", None).expect("create");
        store.append("x", &[entry(0, 0, "task")]).expect("append");
    }
    let store = SqliteStore::open(&path, Durability::Process).expect("reopen");
    assert_eq!(store.schema_version().expect("version"), 2);
    assert_eq!(store.count("x").expect("count"), 1);
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    let conn = rusqlite_free_set_version(&path, 99);
    drop(conn);
    let err = SqliteStore::open(&path, Durability::Process).expect_err("refused");
    assert!(
        matches!(err, StoreError::Corrupt(ref m) if m.contains("99")),
        "{err}"
    );
}

/// Sets `user_version` through the store's own connection type without a second SQLite binding:
/// open a store (creating version 1), then overwrite the version with plain SQL.
fn rusqlite_free_set_version(path: &std::path::Path, v: u32) -> SqliteStore {
    let store = SqliteStore::open(path, Durability::Process).expect("open");
    store
        .execute_unchecked(&format!("PRAGMA user_version = {v}"))
        .expect("set version");
    store
}

#[test]
fn claims_are_exclusive_expire_and_can_be_renewed_only_by_their_holder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path().join("j.db"), Durability::Process).expect("open");
    assert!(matches!(
        store.claim("nope", "w1", Duration::from_secs(5)),
        Err(StoreError::NotFound(_))
    ));
    store.create("x", None).expect("create");
    store
        .claim("x", "w1", Duration::from_secs(30))
        .expect("w1 claims");
    store
        .claim("x", "w1", Duration::from_secs(30))
        .expect("w1 re-claims its own");
    match store.claim("x", "w2", Duration::from_secs(30)) {
        Err(StoreError::Claimed { worker, .. }) => assert_eq!(worker, "w1"),
        other => panic!("w2 must be refused, got {other:?}"),
    }
    assert!(matches!(
        store.renew("x", "w2", Duration::from_secs(1)),
        Err(StoreError::LeaseLost { .. })
    ));
    // An expired lease (a crashed worker) can be taken over.
    store
        .renew("x", "w1", Duration::from_millis(0))
        .expect("renew");
    std::thread::sleep(Duration::from_millis(5));
    store
        .claim("x", "w2", Duration::from_secs(30))
        .expect("w2 takes over the expired claim");
    assert!(matches!(
        store.renew("x", "w1", Duration::from_secs(1)),
        Err(StoreError::LeaseLost { .. })
    ));
    store.release("x", "w2").expect("release");
    store
        .claim("x", "w3", Duration::from_secs(30))
        .expect("a released claim is free");
}

#[test]
fn racing_workers_on_separate_connections_get_exactly_one_claim() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("j.db");
    SqliteStore::open(&path, Durability::Process).expect("open");
    for round in 0..20 {
        let id = format!("race-{round}");
        SqliteStore::open(&path, Durability::Process)
            .expect("open")
            .create(&id, None)
            .expect("create");
        let n = 8;
        let barrier = Arc::new(Barrier::new(n));
        let handles: Vec<_> = (0..n)
            .map(|w| {
                let (path, id, barrier) = (path.clone(), id.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let store = SqliteStore::open(&path, Durability::Process).expect("open");
                    barrier.wait();
                    store.claim(&id, &format!("w{w}"), Duration::from_secs(30))
                })
            })
            .collect();
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect();
        let winners = results.iter().filter(|r| r.is_ok()).count();
        let refused = results
            .iter()
            .filter(|r| matches!(r, Err(StoreError::Claimed { .. })))
            .count();
        assert_eq!((winners, refused), (1, n - 1), "round {round}: {results:?}");
    }
}
