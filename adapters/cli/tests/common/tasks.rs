//! The task server of the MCP task tests (`adapters/tools/tests/servers/tasks.js`, the official
//! TypeScript SDK: jobs that outlive the client's session, a request count by method), the
//! agent's models that call its tools, and an agent config that names it.

use super::{reply, write_config};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use terminus_fixture::{Fixture, Request, peers};
use tokio::io::AsyncBufReadExt as _;

/// The task server, started on a free port of 127.0.0.1; killed when dropped.
pub(crate) struct TaskServer {
    _child: tokio::process::Child,
    port: u16,
}

impl TaskServer {
    pub(crate) async fn start(peers: &Path) -> TaskServer {
        TaskServer::start_on(peers, 0).await
    }

    /// The server on `port` of 127.0.0.1 (0: any free port). A new server on the port of one
    /// that stopped knows none of its tasks.
    pub(crate) async fn start_on(peers: &Path, port: u16) -> TaskServer {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/tests/servers/tasks.js");
        let mut child = tokio::process::Command::new(peers::node(peers))
            .arg(script)
            .arg(peers.join("node_modules"))
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts");
        let stdout = child.stdout.take().expect("piped");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the server says its port")
            .expect("reads")
            .expect("a line");
        let port: Value = serde_json::from_str(&first).expect("JSON");
        let port = u16::try_from(port["port"].as_u64().expect("a port")).expect("a port");
        TaskServer {
            _child: child,
            port,
        }
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// The requests the server received, by method.
    pub(crate) async fn counts(&self) -> Value {
        let body = reqwest::get(format!("http://127.0.0.1:{}/counts", self.port))
            .await
            .expect("the server answers")
            .text()
            .await
            .expect("a body");
        serde_json::from_str(&body).expect("JSON")
    }

    /// Waits until the server has seen `n` polls of a task (`tasks/get`): the job runs, and
    /// the agent waits for it.
    pub(crate) async fn polled(&self, n: u64) {
        let started = Instant::now();
        while self.counts().await["tasks/get"].as_u64().unwrap_or(0) < n {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the task was never polled"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Asserts the server's counts named in `expected` (`why` says what they show).
    pub(crate) async fn counted(&self, expected: &[(&str, u64)], why: &str) {
        let counts = self.counts().await;
        let seen: Vec<(&str, u64)> = expected
            .iter()
            .map(|(name, _)| (*name, counts[*name].as_u64().unwrap_or(u64::MAX)))
            .collect();
        assert_eq!(seen, expected, "{why}: {counts}");
    }
}

/// The agent's model when it builds: turn 0 starts the build (a 4-second job), turn 1 answers
/// with what the build said.
pub(crate) async fn building() -> Fixture {
    turns(
        ("build", json!({ "target": "app", "seconds": 4 })),
        "The build finished: built app (job 1).",
    )
    .await
}

/// The agent's model when it deploys: turn 0 starts the deploy (which asks where to), turn 1
/// answers.
pub(crate) async fn deploying() -> Fixture {
    turns(
        ("deploy", json!({ "target": "app" })),
        "The app is deployed to staging.",
    )
    .await
}

/// A model that makes `call` on its first turn and answers `answer` after it.
async fn turns(call: (&'static str, Value), answer: &'static str) -> Fixture {
    Fixture::with(move |_, request: &Request| {
        let turns = request.json()["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        match turns {
            0 => reply("", &[(call.0, call.1.clone())], 1),
            _ => reply(answer, &[], 2),
        }
    })
    .await
    .expect("a port")
}

/// An agent config in `home` whose model is `model` and whose MCP server `builds` is `server`,
/// with `table` as the rest of its table (`tasks = ["build"]`, say); the job is the task's one
/// action, so nothing is required to verify. Its path.
pub(crate) fn task_config(
    home: &Path,
    model: &Fixture,
    server: &TaskServer,
    table: &str,
) -> String {
    let config = write_config(
        home,
        &format!("{}/v1", model.url()),
        &format!(
            "[[mcp]]\nname = \"builds\"\nurl = {:?}\n{table}\ntool_timeout_ms = 30000\n",
            server.url()
        ),
    );
    let body = std::fs::read_to_string(&config)
        .expect("read")
        .replace("completion_requires = [\"write_file\"]\n", "");
    std::fs::write(&config, body).expect("write");
    config
}

/// The tool result `model` was last sent.
pub(crate) fn tool_result(model: &Fixture) -> Value {
    let last = model.requests().last().expect("asked").json();
    last["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "tool"))
        .map(|m| m["content"].clone())
        .expect("a tool result")
}
