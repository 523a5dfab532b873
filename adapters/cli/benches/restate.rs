//! Cost per agent step on Restate against the SQLite and PostgreSQL journals, in one bench run
//! (issue 16). An agent step is one model turn calling one tool, plus the tool's result, as in
//! the `durable` bench; a run is 100 of them and a final answer. Each round runs the same
//! scenario once on every path, alternating, and the figures are medians over the rounds:
//!
//! - memory: the runtime with the in-memory journal (the baseline, no durability);
//! - SQLite: the runtime with the SQLite journal (`--durability process`);
//! - PostgreSQL: the runtime with the PostgreSQL journal, over the server's Unix socket;
//! - Restate: `POST /TerminusAgent/{id}/run` through the ingress of a real Restate server to
//!   `terminus serve-restate`, every model and tool call a journaled step (the whole request,
//!   divided by the steps).
//!
//! The Restate server must not reach the network, so the bench runs itself again inside a
//! network namespace of its own with only loopback (`unshare --net`, as root), where PostgreSQL
//! is reached through its Unix socket (`TERMINUS_PG_SOCKET_URL`, default
//! `postgres://postgres@%2Fvar%2Frun%2Fpostgresql/test`).
//!
//! Run: `cargo bench -p terminus-cli --bench restate`.

use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use terminus_fixture::restate::{is_isolated, isolated};
use terminus_fixture::{RestateServer, peers};
use terminus_runtime::{MemoryStore, Store};
use terminus_store::{Durability, SqliteStore};

mod common;
use common::{median, parse, run_once, tool_turns};

const TURNS: usize = 100;
const ROUNDS: usize = 9;
const ENDPOINT: &str = "127.0.0.1:19080";

/// Microseconds per agent step of one run through Restate.
async fn restate(client: &reqwest::Client, body: &str, id: &str) -> f64 {
    let start = Instant::now();
    let response = client
        .post(format!("{}/TerminusAgent/{id}/run", RestateServer::INGRESS))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap_or_else(|e| panic!("the ingress: {e}"));
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let elapsed = start.elapsed();
    assert!(status.is_success(), "{status}: {text}");
    let report: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(report["outcome"], "complete", "{report}");
    assert_eq!(report["tool_calls"], TURNS);
    elapsed.as_secs_f64() * 1e6 / TURNS as f64
}

fn endpoint() -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(["serve-restate", "--bind", ENDPOINT])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("terminus serve-restate: {e}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(ENDPOINT).is_err() {
        assert!(Instant::now() < deadline, "the endpoint did not listen");
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

async fn inside() {
    let peers = peers::dir().unwrap_or_else(|| panic!("the peers are not installed"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temp dir: {e}"));
    let _server = RestateServer::start(&peers, dir.path());
    let mut endpoint = endpoint();
    let client = reqwest::Client::new();
    let registered = client
        .post(format!("{}/deployments", RestateServer::ADMIN))
        .header("content-type", "application/json")
        .body(json!({ "uri": format!("http://{ENDPOINT}") }).to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("the admin API: {e}"));
    assert!(registered.status().is_success(), "{}", registered.status());

    let json = tool_turns(TURNS);
    let parsed = parse(&json);
    let body = json!({ "scenario": json }).to_string();
    let sqlite = dir.path().join("bench.db");
    let sqlite: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&sqlite, Durability::Process).unwrap_or_else(|e| panic!("sqlite: {e}")),
    );
    let pg_url = std::env::var("TERMINUS_PG_SOCKET_URL")
        .unwrap_or_else(|_| "postgres://postgres@%2Fvar%2Frun%2Fpostgresql/test".to_owned());
    let postgres = match terminus_store::open(&pg_url, Durability::Process).await {
        Ok(store) => Some(store),
        Err(e) => {
            eprintln!("PostgreSQL skipped: {pg_url}: {e}");
            None
        }
    };
    let tag = std::process::id();
    // One warm-up run each.
    restate(&client, &body, &format!("warm-{tag}")).await;
    run_once(Arc::clone(&sqlite), &parsed, &format!("warm-{tag}"), TURNS).await;
    if let Some(pg) = &postgres {
        run_once(Arc::clone(pg), &parsed, &format!("warm-{tag}"), TURNS).await;
    }
    let (mut mem, mut lite, mut pg, mut rs) = (vec![], vec![], vec![], vec![]);
    for round in 0..ROUNDS {
        let id = format!("bench-{tag}-{round}");
        mem.push(run_once(Arc::new(MemoryStore::new()), &parsed, &id, TURNS).await);
        lite.push(run_once(Arc::clone(&sqlite), &parsed, &id, TURNS).await);
        if let Some(store) = &postgres {
            pg.push(run_once(Arc::clone(store), &parsed, &id, TURNS).await);
        }
        rs.push(restate(&client, &body, &id).await);
    }
    let _ = endpoint.kill();
    let _ = endpoint.wait();
    let (mem, lite, rs) = (median(mem), median(lite), median(rs));
    println!("cost per agent step, {TURNS} turns a run, medians of {ROUNDS} alternating rounds:");
    println!("  memory      {mem:>9.1} us");
    println!("  SQLite      {lite:>9.1} us  ({:.1}x memory)", lite / mem);
    if !pg.is_empty() {
        let pg = median(pg);
        println!("  PostgreSQL  {pg:>9.1} us  ({:.1}x memory)", pg / mem);
        println!(
            "  Restate     {rs:>9.1} us  ({:.1}x memory, {:.1}x SQLite, {:.1}x PostgreSQL)",
            rs / mem,
            rs / lite,
            rs / pg
        );
    } else {
        println!(
            "  Restate     {rs:>9.1} us  ({:.1}x memory, {:.1}x SQLite)",
            rs / mem,
            rs / lite
        );
    }
}

fn main() {
    if is_isolated() {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("a runtime: {e}"))
            .block_on(inside());
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // The peers are installed outside the namespace (npm needs the registry).
    if peers::dir().is_none() {
        eprintln!("skipped: the Restate server is not installed");
        return;
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("the bench's path: {e}"));
    let status = isolated(&exe)
        .status()
        .unwrap_or_else(|e| panic!("unshare: {e}"));
    assert!(status.success(), "the bench failed inside its namespace");
}
