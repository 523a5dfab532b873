//! `terminus serve-restate [--bind ADDR] [--agent NAME=CONFIG.toml]... [--allow-inline-agents]
//! [--identity-key KEY]...`: serves the `TerminusAgent` Restate virtual object, whose runs are
//! scenario files or live agents, as `terminus run` and `terminus agent` run them, with Restate's
//! journal in place of Terminus's own (see `terminus-restate`).
//!
//! The trust boundary (`docs/security.md`): a scenario scripts everything and starts nothing, so
//! any caller may send one. A live agent starts commands, talks to servers and reads key
//! variables, so a caller only names one of the configs the endpoint was started with; an
//! inline config is refused unless the operator passed `--allow-inline-agents`. With
//! `--identity-key`, only requests Restate signed reach a handler.

use crate::agent::{LiveAgent, StoredAgent};
use crate::common::with_model_log;
use crate::error::CliError;
use async_trait::async_trait;
use clap::Args;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
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
    /// A live agent the endpoint serves under NAME (repeatable): a request names it,
    /// `{"agent": "NAME", "task": "..."}`. The config is read and checked at start.
    #[arg(long = "agent", value_name = "NAME=CONFIG.toml", value_parser = parse_named_agent)]
    agents: Vec<(String, PathBuf)>,
    /// Also run agent configs sent inline in requests (`{"agent": {...}}`): whoever can call
    /// the endpoint then chooses the commands it starts (`[[mcp]].command`), the servers it
    /// talks to and the key variables it reads. Off by default.
    #[arg(long)]
    allow_inline_agents: bool,
    /// Restate's request-identity public key (`publickeyv1_...`, repeatable): with it, only
    /// requests signed by that Restate server are served; every other request is refused.
    #[arg(long = "identity-key", value_name = "KEY")]
    identity_keys: Vec<String>,
}

/// `NAME=CONFIG.toml`.
pub(crate) fn parse_named_agent(s: &str) -> Result<(String, PathBuf), String> {
    let Some((name, path)) = s.split_once('=') else {
        return Err(format!("`{s}` is not NAME=CONFIG.toml"));
    };
    if name.is_empty() || path.is_empty() {
        return Err(format!("`{s}` is not NAME=CONFIG.toml"));
    }
    Ok((name.to_owned(), PathBuf::from(path)))
}

/// Builds the runs of `run` requests: `{"scenario": {...}}`, `{"agent": "NAME", "task": "..."}`
/// naming a config the endpoint was started with, and, only when allowed,
/// `{"agent": {...}, "task": "..."}` with the config inline.
struct Programs {
    /// The configs the endpoint was started with, by name: read and checked once, at start.
    agents: BTreeMap<String, StoredAgent>,
    allow_inline: bool,
}

impl Programs {
    /// Reads and checks each named config; the message names the flag and the file.
    fn new(named: &[(String, PathBuf)], allow_inline: bool) -> Result<Programs, CliError> {
        let mut agents = BTreeMap::new();
        for (name, path) in named {
            let flag = || format!("--agent {name}");
            let stored = StoredAgent::read(path).map_err(|e| e.context(flag()))?;
            LiveAgent::new(&stored).map_err(|e| e.context(flag()))?;
            if agents.insert(name.clone(), stored).is_some() {
                return Err(CliError::Invalid(format!(
                    "--agent {name}: the name is given twice"
                )));
            }
        }
        Ok(Programs {
            agents,
            allow_inline,
        })
    }

    /// The config a request's `agent` field stands for.
    fn agent(&self, field: &Value) -> Result<StoredAgent, Unbuildable> {
        match field {
            Value::String(name) => self.agents.get(name).cloned().ok_or_else(|| {
                Unbuildable::Invalid(if self.agents.is_empty() {
                    format!(
                        "$.agent: no agent named `{name}`: this endpoint serves no live agents \
                         (start it with --agent NAME=CONFIG.toml)"
                    )
                } else {
                    let names: Vec<&str> = self.agents.keys().map(String::as_str).collect();
                    format!(
                        "$.agent: no agent named `{name}`; this endpoint serves {}",
                        names.join(", ")
                    )
                })
            }),
            Value::Object(_) if self.allow_inline => inline(field),
            Value::Object(_) => Err(Unbuildable::Invalid(
                "$.agent: an inline agent config is refused: this endpoint runs only the configs \
                 it was started with (--agent NAME=CONFIG.toml); name one, \
                 {\"agent\": \"NAME\", \"task\": \"...\"}"
                    .to_owned(),
            )),
            _ => Err(Unbuildable::Invalid(
                "$.agent: expected the name of a config this endpoint serves (a string)".to_owned(),
            )),
        }
    }
}

#[async_trait]
impl Blueprint for Programs {
    async fn build(&self, request: &Value) -> Result<Built, Unbuildable> {
        if let Some(json) = request.get("scenario") {
            let scenario = Scenario::parse(&json.to_string())
                .map_err(|e| Unbuildable::Invalid(format!("$.scenario: {e}")))?;
            let scenario = with_model_log(scenario);
            let (run, on_replay, pulled) = scenario.replayable_run();
            let mut built = Built::new(run);
            // Only a scenario with a cancelled turn or tool result pulls its own switch (a watch
            // on any other would wait forever).
            built.pulled = scenario.file().pulls_kill_switch().then_some(pulled);
            built.on_replay = Some(Box::new(on_replay));
            built.cancel_after = scenario.file().cancel_after_ms.map(Duration::from_millis);
            return Ok(built);
        }
        if let Some(json) = request.get("agent") {
            // Checked before the agent is: a request that cannot run starts nothing.
            let task = request.get("task").and_then(Value::as_str).ok_or_else(|| {
                Unbuildable::Invalid(
                    "$.task: a live agent's request needs its task, a string".into(),
                )
            })?;
            let stored = self.agent(json)?;
            return live(&stored, task).await;
        }
        Err(Unbuildable::Invalid(
            "the request needs `scenario` (a scenario file's JSON) or `agent` (the name of a \
             config this endpoint serves) with `task`"
                .to_owned(),
        ))
    }
}

/// An inline config (`--allow-inline-agents`), read as `terminus agent` reads its TOML file,
/// relative paths from the endpoint's folder.
fn inline(config: &Value) -> Result<StoredAgent, Unbuildable> {
    let text = toml::to_string(config)
        .map_err(|e| Unbuildable::Invalid(format!("$.agent: not a config: {e}")))?;
    let cwd = std::env::current_dir()
        .map_err(|e| Unbuildable::Unavailable(format!("cannot tell the current folder: {e}")))?;
    Ok(StoredAgent {
        file: "$.agent".to_owned(),
        config: text,
        dir: cwd.clone(),
        cwd,
    })
}

/// A live agent's run.
async fn live(stored: &StoredAgent, task: &str) -> Result<Built, Unbuildable> {
    let live = LiveAgent::new(stored).map_err(|e| Unbuildable::Invalid(e.to_string()))?;
    // Restate journals a tool call's answer as it came, so a replay would feed the model the
    // first run's answer to a question that was cancelled.
    if let Some(server) = live.asks_a_person() {
        return Err(Unbuildable::Invalid(format!(
            "{}: [[mcp]] `{server}`: elicitation = \"person\" is not served on Restate (a \
             replay would take the cancelled run's answer); use \"decline\" or \"defaults\"",
            stored.file
        )));
    }
    // A server that does not start now may start on Restate's next attempt.
    let mcp = live
        .connect()
        .await
        .map_err(|e| Unbuildable::Unavailable(e.to_string()))?;
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

/// `terminus serve-restate`: serves until Ctrl-C, then 0.
pub(crate) async fn serve_restate(args: ServeRestateArgs) -> Result<u8, CliError> {
    let programs = Programs::new(&args.agents, args.allow_inline_agents)
        .map_err(|e| e.context("serve-restate"))?;
    let endpoint = terminus_restate::endpoint(Arc::new(programs), &args.identity_keys)
        .map_err(|e| CliError::Invalid(format!("serve-restate: --identity-key: {e}")))?;
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .map_err(|e| CliError::Invalid(format!("--bind {}: cannot listen: {e}", args.bind)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::Internal(format!("--bind {}: {e}", args.bind)))?;
    eprintln!(
        "terminus: serving the Restate service TerminusAgent at http://{addr} (register it: \
         POST {{\"uri\": \"http://{addr}\"}} to the admin API's /deployments)"
    );
    let shutdown = async {
        // Ctrl-C (or the signal's failure) ends the endpoint; Restate retries what was running.
        let _ = tokio::signal::ctrl_c().await;
    };
    terminus_restate::serve(listener, endpoint, shutdown).await;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live agent whose tool questions wait for a person is refused before anything starts:
    /// Restate would replay the cancelled run's answer.
    #[tokio::test]
    async fn a_live_agent_whose_questions_wait_for_a_person_is_refused() {
        let stored = StoredAgent {
            file: "ask.toml".to_owned(),
            config: "[model]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
                     model = \"m\"\n[[mcp]]\nname = \"branches\"\ncommand = [\"true\"]\n\
                     elicitation = \"person\"\n"
                .to_owned(),
            dir: PathBuf::from("."),
            cwd: PathBuf::from("."),
        };
        let Err(Unbuildable::Invalid(message)) = live(&stored, "t").await else {
            panic!("refused as invalid");
        };
        assert!(
            message.starts_with("ask.toml: [[mcp]] `branches`: elicitation = \"person\""),
            "{message}"
        );
    }
}
