//! Examples of embedding Terminus, each a `cargo run -p terminus-examples --example NAME`:
//!
//! | example | what it shows | network |
//! |---|---|---|
//! | `kernel_by_hand` | the sans-IO kernel driven by a host loop: events in, commands out; a premature stop refused with a nudge | none |
//! | `custom_model` | the runtime with a model and a native tool of your own, journaled in SQLite, resumed | none |
//! | `live_agent` | a real OpenAI-compatible model server (`TERMINUS_EXAMPLE_BASE_URL`) with a native tool | the model server |
//! | `layer` | a `Layer` (middleware around every model, tool and verifier call): a guard that refuses a tool without calling it, a log outside it | none |
//! | `mcp_tools` | an MCP server's tools over stdio, one declared a poller: the client calls it again while it says "not ready", the model makes one call | none (`python3`) |
//! | `plan` | a multi-agent plan of scripted agents, run in process | none |
//! | `store` | a run that dies half-way, resumed from its SQLite journal (no model answer asked again, no tool run twice), and the journal read through the `Store` port: executions, records page by page, the report | none |
//!
//! CI builds all of them and runs the six offline ones (`.ci/run`).

use async_trait::async_trait;
use std::sync::{Arc, Mutex};
use terminus_kernel::ModelTurn;
use terminus_runtime::{Model, ModelError, ModelRequest, Store};

/// A SQLite journal in a new temporary directory, which lives as long as the returned handle.
pub async fn temp_journal() -> (tempfile::TempDir, Arc<dyn Store>) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let journal = dir.path().join("journal.db");
    let store = terminus_store::open(
        &journal.to_string_lossy(),
        terminus_store::Durability::Process,
    )
    .await
    .expect("the journal opens");
    (dir, store)
}

/// The examples' model: it answers from a script, one turn a call (an empty turn once the script
/// is spent), and shows each request to `watch` (the examples print from it). In a host, this is
/// your provider client.
pub struct Scripted {
    turns: Mutex<Vec<ModelTurn>>,
    watch: fn(&ModelRequest<'_>),
}

impl Scripted {
    /// A model that gives `turns` in order.
    pub fn new(turns: Vec<ModelTurn>) -> Scripted {
        Scripted::watching(turns, |_| {})
    }

    /// A model that gives `turns` in order and shows each request to `watch` first.
    pub fn watching(turns: Vec<ModelTurn>, watch: fn(&ModelRequest<'_>)) -> Scripted {
        Scripted {
            turns: Mutex::new(turns),
            watch,
        }
    }
}

#[async_trait]
impl Model for Scripted {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        (self.watch)(&request);
        let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
        Ok(if turns.is_empty() {
            ModelTurn::default()
        } else {
            turns.remove(0)
        })
    }
}
