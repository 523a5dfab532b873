//! `terminus serve-restate [--bind ADDR]`: serves the `TerminusAgent` Restate virtual object,
//! whose runs are scenario files or live agents, as `terminus run` and `terminus agent` run
//! them, with Restate's journal in place of Terminus's own (see `terminus-restate`).

use crate::agent::{LiveAgent, StoredAgent};
use crate::{INTERNAL, INVALID, with_model_log};
use async_trait::async_trait;
use clap::Args;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use terminus_restate::{Blueprint, Built, Unbuildable};
use terminus_runtime::Run;
use terminus_scenario::Scenario;

#[derive(Debug, Args)]
pub(crate) struct ServeRestateArgs {
    /// Where the endpoint listens (Restate's server calls it there over HTTP/2).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9080")]
    bind: SocketAddr,
}

/// Builds the runs of `run` requests: `{"scenario": {...}}` or `{"agent": {...}, "task": "..."}`.
struct Programs;

#[async_trait]
impl Blueprint for Programs {
    async fn build(&self, request: &Value) -> Result<Built, Unbuildable> {
        if let Some(json) = request.get("scenario") {
            let scenario = Scenario::parse(&json.to_string())
                .map_err(|e| Unbuildable::Invalid(format!("$.scenario: {e}")))?;
            let scenario = with_model_log(scenario);
            let (run, on_replay) = scenario.replayable_run();
            let mut built = Built::new(run);
            built.on_replay = Some(Box::new(on_replay));
            built.cancel_after = scenario.file().cancel_after_ms.map(Duration::from_millis);
            return Ok(built);
        }
        if let Some(json) = request.get("agent") {
            return live(json, request.get("task")).await;
        }
        Err(Unbuildable::Invalid(
            "the request needs `scenario` (a scenario file's JSON) or `agent` (a live agent's \
             config as JSON) with `task`"
                .to_owned(),
        ))
    }
}

/// A live agent's run: the config given as JSON is read as `terminus agent` reads its TOML
/// file, relative paths from the endpoint's folder.
async fn live(config: &Value, task: Option<&Value>) -> Result<Built, Unbuildable> {
    let task = task.and_then(Value::as_str).ok_or_else(|| {
        Unbuildable::Invalid("$.task: a live agent's request needs its task, a string".into())
    })?;
    let text = toml::to_string(config)
        .map_err(|e| Unbuildable::Invalid(format!("$.agent: not a config: {e}")))?;
    let cwd = std::env::current_dir()
        .map_err(|e| Unbuildable::Unavailable(format!("cannot tell the current folder: {e}")))?;
    let stored = StoredAgent {
        file: "$.agent".to_owned(),
        config: text,
        dir: cwd.clone(),
        cwd,
    };
    let live = LiveAgent::new(&stored).map_err(Unbuildable::Invalid)?;
    // A server that does not start now may start on Restate's next attempt.
    let mcp = live.connect().await.map_err(Unbuildable::Unavailable)?;
    let policy = live.policy().clone();
    let run = live
        .run(
            |model| Run::new(task, policy, model).name("agent"),
            &mcp,
            None,
        )
        .config(live.runtime(Duration::from_secs(30)));
    let mut built = Built::new(run);
    built.finish = Some(Box::pin(async move { mcp.shutdown().await }));
    Ok(built)
}

pub(crate) async fn serve_restate(args: ServeRestateArgs) -> u8 {
    let listener = match tokio::net::TcpListener::bind(args.bind).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("terminus: --bind {}: cannot listen: {e}", args.bind);
            return INVALID;
        }
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("terminus: --bind {}: {e}", args.bind);
            return INTERNAL;
        }
    };
    eprintln!(
        "terminus: serving the Restate service TerminusAgent at http://{addr} (register it: \
         POST {{\"uri\": \"http://{addr}\"}} to the admin API's /deployments)"
    );
    let shutdown = async {
        // Ctrl-C (or the signal's failure) ends the endpoint; Restate retries what was running.
        let _ = tokio::signal::ctrl_c().await;
    };
    terminus_restate::serve(listener, Arc::new(Programs), shutdown).await;
    0
}
