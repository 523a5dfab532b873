//! Helpers of the crash tests (`durable.rs`, `orchestrate_resume.rs`): the journal a test runs
//! on, ids no other run uses, and a binary whose plan limits come from the plan alone.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use terminus_kernel::Record;
use terminus_runtime::Store;
use terminus_store::Durability;

pub(crate) fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(f)
}

/// Where the journal lives.
#[derive(Clone)]
pub(crate) enum Journal {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Journal {
    pub(crate) fn arg(&self) -> String {
        match self {
            Journal::Sqlite(p) => p.to_string_lossy().into_owned(),
            Journal::Postgres(url) => url.clone(),
        }
    }

    pub(crate) fn label(&self) -> &'static str {
        match self {
            Journal::Sqlite(_) => "sqlite",
            Journal::Postgres(_) => "postgres",
        }
    }

    pub(crate) async fn open(&self) -> Arc<dyn Store> {
        terminus_store::open(&self.arg(), Durability::Process)
            .await
            .expect("the journal opens")
    }

    pub(crate) fn records(&self, execution: &str) -> Vec<Arc<Record>> {
        block_on(async {
            self.open()
                .await
                .records(execution)
                .await
                .expect("readable")
        })
    }
}

/// The PostgreSQL journal, when `TERMINUS_PG_URL` is set (see [`super::postgres_url`]).
pub(crate) fn postgres() -> Option<Journal> {
    super::postgres_url().map(Journal::Postgres)
}

/// An execution id no other test run uses (PostgreSQL's database is shared).
pub(crate) fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// The binary with the environment variables plan limits fall back to removed (the plans set
/// the limits they depend on; a variable set where the tests run must not change them). The
/// list is the orchestrator's own table.
pub(crate) fn terminus_without_limit_variables() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_terminus"));
    for row in terminus_orchestrator::limit_rows() {
        if let Some(var) = row.env {
            command.env_remove(var);
        }
    }
    command
}
