//! One contract, three stores: what the runtime relies on holds for the in-memory store, SQLite
//! and PostgreSQL alike (see `common/mod.rs`).

mod common;

use terminus_runtime::MemoryStore;
use terminus_store::{Durability, PostgresStore, SqliteStore};

#[tokio::test]
async fn the_memory_store_keeps_the_contract() {
    common::contract(&MemoryStore::new(), "memory", true).await;
}

#[tokio::test]
async fn the_sqlite_store_keeps_the_contract() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path().join("j.db"), Durability::Process).expect("open");
    common::contract(&store, "sqlite", true).await;
}

#[tokio::test]
async fn the_postgres_store_keeps_the_contract() {
    let Some(url) = common::pg_url() else { return };
    let store = PostgresStore::connect(&url)
        .await
        .expect("PostgreSQL reachable at TERMINUS_PG_URL");
    common::contract(&store, "postgres", false).await;
}
