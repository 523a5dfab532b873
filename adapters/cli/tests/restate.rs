//! Terminus on a real Restate server (npm's `@restatedev/restate-server`, pinned in
//! `.ci/peers.sh`): the server, `terminus serve-restate` and this test's client run together in
//! a network namespace of their own with only loopback (the server calls a public update API
//! when it starts; nothing may leave the machine). Each test below runs its `inside_*` half
//! again in such a namespace; without one (not root) they skip with a printed reason, and fail
//! on CI.
//!
//! - Conformance: every scenario of `spec/scenarios/` run through Restate gives the report
//!   `terminus run` gives (outcome, reason, rule, result, every counter, the trace, the todos).
//! - Crash: the service is SIGKILLed at a seeded random moment of a 13-turn run, 20 times, and
//!   restarted; Restate resumes the run; the model and tool logs show that nothing journaled is
//!   carried out again (at most the call in flight at the kill, and never a non-idempotent one),
//!   and the report equals the uninterrupted run's.
//! - Concurrency: 4 invocations of one execution at once give one run and four equal reports;
//!   `cancel` stops a run under way; a bad request is refused with a message naming the field.
//! - The deadline spans a restart: the run's clock is journaled, not restarted.
//! - A live agent named by the request (`{"agent": "NAME", "task": ...}`, the endpoint started
//!   with `--agent NAME=CONFIG.toml`): the fixture model server and the real filesystem MCP
//!   server, each model call made once. An inline config (a command to start, a model server of
//!   the caller's) is refused with 400: nothing starts, nothing reaches that server.
//! - Approvals: a held call waits, durably, for `approve | deny | answer` through the ingress;
//!   an approved call runs once, a denial and an answer are the call's result, and each report
//!   equals the one `terminus run`, the same decision and `terminus resume` give. The endpoint
//!   killed while a run waits loses nothing: approved after its restart, the call runs once.
//! - Request identity: with `--identity-key`, the endpoint serves requests Restate signed and
//!   refuses unsigned ones sent straight to it.
//! - A long-running tool (an MCP task): the endpoint killed while the run waits for the task,
//!   the retried invocation waits for the same task; the server saw one `tools/call`.

mod common;

use common::{KEY, architect, fs_server, reply, text, turns_served_again, write_config};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use terminus_fixture::restate::{is_isolated, run_isolated};
use terminus_fixture::{RestateServer, peers};

const ENDPOINT: &str = "127.0.0.1:19080";
const KILLS: u64 = 20;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// Runs `inside` in a network namespace of its own and checks that it passed.
fn isolated(inside: &str) {
    // Installed outside the namespace: npm needs the registry.
    if peers::dir().is_none() {
        return;
    }
    let Some(out) = run_isolated(inside) else {
        return;
    };
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    eprintln!("{stderr}");
    assert!(out.status.success(), "{inside} failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "{inside} did not run:\n{stdout}"
    );
}

#[test]
fn conformance_through_restate() {
    isolated("inside_conformance");
}

#[test]
fn crash_through_restate() {
    isolated("inside_crash");
}

#[test]
fn concurrency_and_cancel_through_restate() {
    isolated("inside_concurrency_and_cancel");
}

#[test]
fn deadline_spans_restarts_on_restate() {
    isolated("inside_deadline_spans_restarts");
}

#[test]
fn live_agent_through_restate() {
    isolated("inside_live_agent");
}

#[test]
fn identity_key_through_restate() {
    isolated("inside_identity_key");
}

#[test]
fn approvals_through_restate() {
    isolated("inside_approvals");
}

#[test]
fn a_live_agents_denial_through_restate() {
    isolated("inside_live_denial");
}

#[test]
fn a_task_through_restate() {
    isolated("inside_task");
}

/// The server, the endpoint and a client, in this namespace.
struct Stack {
    _server: RestateServer,
    endpoint: Option<Child>,
    /// What `terminus serve-restate` is started with besides `--bind`.
    args: Vec<String>,
    dir: tempfile::TempDir,
    logs: Vec<(&'static str, PathBuf)>,
}

impl Stack {
    /// The server and an endpoint that serves scenarios, registered.
    fn start(logs: &[&'static str]) -> Stack {
        let mut stack = Stack::server(logs, None);
        stack.serve(&[]);
        stack
    }

    /// The server alone (signing its requests with the PEM key `signing`, if given); no
    /// endpoint yet.
    fn server(logs: &[&'static str], signing: Option<&Path>) -> Stack {
        assert!(is_isolated());
        let peers = peers::dir().expect("installed by the outer test");
        let dir = tempfile::tempdir().expect("a temp dir");
        let server = RestateServer::start_signing(&peers, dir.path(), signing);
        let logs = logs
            .iter()
            .map(|name| (*name, dir.path().join(format!("{name}.log"))))
            .collect();
        Stack {
            _server: server,
            endpoint: None,
            args: Vec::new(),
            dir,
            logs,
        }
    }

    /// Starts the endpoint with `args` and registers it with the server.
    fn serve(&mut self, args: &[&str]) {
        self.args = args.iter().map(|a| (*a).to_owned()).collect();
        self.start_endpoint();
        let registered = block_on(async {
            client()
                .post(format!("{}/deployments", RestateServer::ADMIN))
                .header("content-type", "application/json")
                .body(json!({ "uri": format!("http://{ENDPOINT}") }).to_string())
                .send()
                .await
        })
        .expect("the admin API answers");
        let status = registered.status();
        let body = block_on(registered.text()).unwrap_or_default();
        assert!(
            status.is_success(),
            "registering the endpoint: {status}: {body}"
        );
    }

    fn start_endpoint(&mut self) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_terminus"));
        command
            .args(["serve-restate", "--bind", ENDPOINT])
            .args(&self.args)
            .current_dir(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .env("TERMINUS_TEST_KEY", KEY);
        for (name, path) in &self.logs {
            command.env(*name, path);
        }
        self.endpoint = Some(command.spawn().expect("terminus serve-restate starts"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(ENDPOINT).is_err() {
            assert!(Instant::now() < deadline, "the endpoint did not listen");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn kill_endpoint(&mut self) {
        if let Some(mut child) = self.endpoint.take() {
            child.kill().expect("SIGKILL");
            let _ = child.wait();
        }
    }

    fn log(&self, name: &str) -> Vec<String> {
        let path = self
            .logs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, p)| p.clone())
            .expect("a log of the stack");
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn clear_logs(&self) {
        for (_, path) in &self.logs {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.kill_endpoint();
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(f)
}

/// Calls `handler` of execution `key` through the ingress; the status and the JSON answer.
async fn call(key: &str, handler: &str, body: Option<&Value>) -> (u16, Value) {
    let mut request = client().post(format!(
        "{}/TerminusAgent/{key}/{handler}",
        RestateServer::INGRESS
    ));
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await.expect("the ingress answers");
    let status = response.status().as_u16();
    let text = response.text().await.expect("a body");
    let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, json)
}

fn scenario_request(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("the scenario");
    let scenario: Value = serde_json::from_str(&text).expect("scenario JSON");
    json!({ "scenario": scenario })
}

/// `terminus run --json FILE`'s report.
fn run_locally(path: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(["run", "--json"])
        .arg(path)
        .output()
        .expect("terminus runs");
    let stdout = text(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| {
        panic!(
            "{}: no report ({e}):\n{stdout}\n{}",
            path.display(),
            text(&out.stderr)
        )
    })
}

/// `terminus inspect --scenario FILE`'s explanation, without its first line (the execution id,
/// which is the object key through Restate).
fn inspect_locally(path: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(["inspect", "--scenario"])
        .arg(path)
        .output()
        .expect("terminus runs");
    without_execution(&text(&out.stdout))
}

/// An explanation without its first line, `execution ID`.
fn without_execution(explanation: &str) -> String {
    match explanation.split_once('\n') {
        Some((first, rest)) if first.starts_with("execution ") => rest.to_owned(),
        _ => panic!("an explanation starts with its execution:\n{explanation}"),
    }
}

/// A report without what names the execution.
fn comparable(mut report: Value) -> Value {
    if let Some(o) = report.as_object_mut() {
        o.remove("execution");
    }
    report
}

#[test]
#[ignore = "run by conformance_through_restate in a network namespace of its own"]
fn inside_conformance() {
    let _stack = Stack::start(&[]);
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo("spec/scenarios"))
        .expect("the scenarios")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 40, "{} scenarios", files.len());
    block_on(async {
        for file in &files {
            let name = file.file_stem().and_then(|s| s.to_str()).unwrap_or("?");
            let local = comparable(run_locally(file));
            let (status, report) = call(
                &format!("conformance-{name}"),
                "run",
                Some(&scenario_request(file)),
            )
            .await;
            assert_eq!(status, 200, "{name}: {report}");
            assert_eq!(
                comparable(report),
                local,
                "{name}: Restate and terminus run differ"
            );
            let (status, explanation) = call(&format!("conformance-{name}"), "explain", None).await;
            assert_eq!(status, 200, "{name}: {explanation}");
            let Value::String(explanation) = explanation else {
                panic!("{name}: the explanation is text, not {explanation}");
            };
            assert_eq!(
                without_execution(&explanation),
                inspect_locally(file),
                "{name}: Restate's explanation and terminus inspect's differ"
            );
        }
    });
    eprintln!(
        "restate conformance: {} scenarios, every report equal to terminus run's, every \
         explanation to terminus inspect's",
        files.len()
    );
}

/// A small deterministic generator (xorshift64*), so every seed's kill time is reproducible.
fn kill_after_ms(seed: u64, max: u64) -> u64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    x.wrapping_mul(0x2545_F491_4F6C_DD1D) % max
}

#[test]
#[ignore = "run by crash_through_restate in a network namespace of its own"]
fn inside_crash() {
    let mut stack = Stack::start(&["TERMINUS_MODEL_LOG", "TERMINUS_TOOL_LOG"]);
    let chain = repo("adapters/cli/tests/fixtures/slow-chain.json");
    let request = scenario_request(&chain);
    let uninterrupted = comparable(run_locally(&chain));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let (mut killed, mut in_doubt, mut again_total) = (0, 0, 0);
    for seed in 0..KILLS {
        stack.clear_logs();
        let key = format!("crash-{seed}");
        let body = request.clone();
        let running = runtime.spawn(async move { call(&key, "run", Some(&body)).await });
        std::thread::sleep(Duration::from_millis(
            100 + kill_after_ms(seed.wrapping_add(1), 400),
        ));
        if !running.is_finished() {
            killed += 1;
        }
        stack.kill_endpoint();
        stack.start_endpoint();
        let (status, report) = runtime.block_on(running).expect("the call's task");
        assert_eq!(status, 200, "seed {seed}: {report}");

        // Model turns served across the processes: each once, except at most the one in flight
        // at the kill (never journaled).
        let again = turns_served_again(stack.log("TERMINUS_MODEL_LOG"), 13, seed);
        // Tool calls carried out: each once, except idempotent ones in flight at the kill; the
        // non-idempotent `write` never twice.
        let mut runs: BTreeMap<String, usize> = BTreeMap::new();
        for line in stack.log("TERMINUS_TOOL_LOG") {
            *runs.entry(line).or_default() += 1;
        }
        let tools_again = runs.values().map(|n| n - 1).sum::<usize>() as u64;
        assert!(
            runs.iter()
                .filter(|(call, _)| call.starts_with("write "))
                .all(|(_, n)| *n == 1),
            "seed {seed}: a non-idempotent call ran twice: {runs:?}"
        );
        assert!(
            again + tools_again <= 1,
            "seed {seed}: journaled calls carried out again: model {again}, tools {runs:?}"
        );
        again_total += again + tools_again;
        let report = comparable(report);
        if report["stats"]["tool_failures"] == 0 {
            assert_eq!(report, uninterrupted, "seed {seed}");
        } else {
            // The kill landed while `write` ran: the model was told it is in doubt, and the
            // run went on without running it again.
            in_doubt += 1;
            eprintln!("seed {seed}: in doubt; tools {runs:?}");
            assert_eq!(report["outcome"], "complete", "seed {seed}: {report}");
            assert_eq!(report["model_calls"], 13, "seed {seed}");
            assert_eq!(report["tool_calls"], 14, "seed {seed}");
            assert_eq!(report["stats"]["tool_failures"], 1, "seed {seed}: {report}");
        }
    }
    // A kill while a non-idempotent call runs: the call is in doubt, and the model is told so
    // instead of the call being run again.
    stack.clear_logs();
    let deploy = json!({ "scenario": {
        "name": "deploy-in-doubt", "task": "Deploy the release.",
        "model": { "turns": [
            { "tool_calls": [ { "name": "deploy", "arguments": { "release": "1.2" } } ] },
            { "text": "Checked the deployment; done.", "needs_more_work": false } ] },
        "tools": { "deploy": { "idempotent": false,
                               "results": [ { "ok": "deployed", "delay_ms": 3000 } ] } } } });
    let running = runtime.spawn(async move { call("in-doubt", "run", Some(&deploy)).await });
    let deadline = Instant::now() + Duration::from_secs(20);
    while stack.log("TERMINUS_TOOL_LOG").is_empty() {
        assert!(Instant::now() < deadline, "deploy never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    stack.kill_endpoint();
    stack.start_endpoint();
    let (status, report) = runtime.block_on(running).expect("the call's task");
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        stack.log("TERMINUS_TOOL_LOG"),
        ["deploy 1"],
        "deploy ran again"
    );
    assert_eq!(report["outcome"], "complete", "{report}");
    assert_eq!(report["stats"]["tool_failures"], 1, "{report}");
    assert_eq!(report["model_calls"], 2, "{report}");
    in_doubt += 1;
    eprintln!(
        "restate crash: {KILLS} kills ({killed} mid-run), each run resumed by Restate to the \
         uninterrupted report; {again_total} in-flight calls made again; {in_doubt} in-doubt \
         writes answered, not re-run"
    );
    assert!(
        killed >= KILLS * 3 / 4,
        "too few kills landed mid-run ({killed})"
    );
}

#[test]
#[ignore = "run by concurrency_and_cancel_through_restate in a network namespace of its own"]
fn inside_concurrency_and_cancel() {
    let stack = Stack::start(&["TERMINUS_MODEL_LOG"]);
    let chain = repo("adapters/cli/tests/fixtures/slow-chain.json");
    let request = scenario_request(&chain);
    block_on(async {
        // Four invocations of one execution at once: one run, four equal reports.
        let calls: Vec<_> = (0..4)
            .map(|_| {
                let body = request.clone();
                tokio::spawn(async move { call("together", "run", Some(&body)).await })
            })
            .collect();
        let mut reports = Vec::new();
        for c in calls {
            let (status, report) = c.await.expect("the call's task");
            assert_eq!(status, 200, "{report}");
            reports.push(report);
        }
        assert!(reports.iter().all(|r| *r == reports[0]), "{reports:?}");
        assert_eq!(reports[0]["model_calls"], 13);
        let served = stack.log("TERMINUS_MODEL_LOG");
        assert_eq!(
            served.len(),
            13,
            "one run, each turn served once: {served:?}"
        );
        let (status, stored) = call("together", "report", None).await;
        assert_eq!(status, 200);
        assert_eq!(stored, reports[0]);

        // `cancel` pulls the kill switch of a run under way.
        let body = request.clone();
        let running = tokio::spawn(async move { call("cancelled", "run", Some(&body)).await });
        tokio::time::sleep(Duration::from_millis(120)).await;
        let (status, was) = call("cancelled", "cancel", None).await;
        assert_eq!((status, was), (200, json!(true)));
        let (status, report) = running.await.expect("the call's task");
        assert_eq!(status, 200, "{report}");
        assert_eq!(report["reason"], "cancelled", "{report}");
        assert!(
            report["model_calls"].as_u64().is_some_and(|n| n < 13),
            "{report}"
        );

        // No report yet, and a request that names no program.
        let (status, answer) = call("never-ran", "report", None).await;
        assert_eq!(status, 404, "{answer}");
        let (status, answer) = call("bad", "run", Some(&json!({ "scenarios": {} }))).await;
        assert_eq!(status, 400, "{answer}");
        assert!(answer.to_string().contains("scenario"), "{answer}");
        let (status, answer) = call(
            "bad-scenario",
            "run",
            Some(&json!({ "scenario": { "task": "x" } })),
        )
        .await;
        assert_eq!(status, 400, "{answer}");
        assert!(answer.to_string().contains("$.scenario"), "{answer}");
    });
}

#[test]
#[ignore = "run by deadline_spans_restarts_on_restate in a network namespace of its own"]
fn inside_deadline_spans_restarts() {
    let mut stack = Stack::start(&[]);
    let turns: Vec<Value> = (1..=30)
        .map(|i| json!({ "tool_calls": [ { "name": "read", "arguments": { "file": i } } ] }))
        .collect();
    let request = json!({ "scenario": {
        "name": "slow-reads", "task": "Read thirty files.",
        "policy": { "deadline_ms": 3000, "max_steps": 200, "max_model_calls": 100 },
        "model": { "turns": turns },
        "tools": { "read": { "results": [ { "ok": "contents", "delay_ms": 300 } ],
                             "repeat": "last" } } } });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let started = Instant::now();
    let running = runtime.spawn(async move { call("deadline", "run", Some(&request)).await });
    std::thread::sleep(Duration::from_millis(1200));
    stack.kill_endpoint();
    stack.start_endpoint();
    let (status, report) = runtime.block_on(running).expect("the call's task");
    let elapsed = started.elapsed();
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["reason"], "deadline", "{report}");
    // A clock started afresh would end no sooner than 1.2 s + Restate's retry delay + 3 s.
    assert!(
        elapsed >= Duration::from_millis(3000) && elapsed < Duration::from_millis(4300),
        "the run ended {elapsed:?} after it started: {report}"
    );
    eprintln!("restate deadline: 3 s deadline, killed at 1.2 s, ended deadline at {elapsed:?}");
}

/// The server alone, the peers, a runtime, and the folder a live agent works in.
fn live_stack() -> (Stack, PathBuf, tokio::runtime::Runtime, PathBuf) {
    let stack = Stack::server(&[], None);
    let peers = peers::dir().expect("installed by the outer test");
    let root = stack
        .dir
        .path()
        .canonicalize()
        .expect("a real path")
        .join("work");
    (stack, peers, runtime(), root)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

#[test]
#[ignore = "run by live_agent_through_restate in a network namespace of its own"]
fn inside_live_agent() {
    let (mut stack, peers, runtime, root) = live_stack();
    let (script, plan) = architect(&root);
    let fixture = runtime
        .block_on(terminus_fixture::Fixture::start(script.to_vec()))
        .expect("a port");
    // The server an attacker's inline config would point the model at, to collect the key.
    let theirs = runtime
        .block_on(terminus_fixture::Fixture::start(Vec::new()))
        .expect("a port");
    let mcp = fs_server(&peers, &root.to_string_lossy());
    let config = write_config(stack.dir.path(), &format!("{}/v1", fixture.url()), &mcp);
    stack.serve(&["--agent", &format!("architect={config}")]);
    runtime.block_on(async {
        let task = "Write an implementation plan to plan.md";
        let request = json!({ "agent": "architect", "task": task });
        let (status, report) = call("live-1", "run", Some(&request)).await;
        assert_eq!(status, 200, "{report}");
        assert_eq!(report["outcome"], "complete", "{report}");
        assert_eq!(report["reason"], "verified", "{report}");
        assert_eq!(report["execution"], "live-1");
        assert_eq!(
            (report["nudges"].as_u64(), report["model_calls"].as_u64()),
            (Some(1), Some(6))
        );
        assert_eq!(
            std::fs::read_to_string(&plan).expect("on disk"),
            "# Plan\n1. Fix parse.\n"
        );
        assert_eq!(fixture.count(), 6, "each model call made once");
        // Called again, the execution answers its stored report and asks nothing.
        let (status, again) = call("live-1", "run", Some(&request)).await;
        assert_eq!((status, &again), (200, &report));
        assert_eq!(fixture.count(), 6);
        // An agent request without its task names the field.
        let (status, answer) = call("live-2", "run", Some(&json!({ "agent": "architect" }))).await;
        assert_eq!(status, 400, "{answer}");
        assert!(answer.to_string().contains("$.task"), "{answer}");
        // A name the endpoint was not started with.
        let (status, answer) = call(
            "live-3",
            "run",
            Some(&json!({ "agent": "root", "task": task })),
        )
        .await;
        assert_eq!(status, 400, "{answer}");
        assert!(
            answer
                .to_string()
                .contains("$.agent: no agent named `root`"),
            "{answer}"
        );

        // An inline config: a command to start and a model server of the caller's choosing,
        // with the endpoint's own key variable. Refused before anything starts.
        let mark = stack.dir.path().join("pwned");
        let inline = json!({
            "model": { "provider": "openai", "base_url": format!("{}/v1", theirs.url()),
                       "model": "gpt-4o-mini", "api_key_env": "TERMINUS_TEST_KEY",
                       "stream": false },
            "mcp": [ { "name": "x",
                       "command": ["sh", "-c", format!("touch {}", mark.display())] } ] });
        let (status, answer) = call(
            "inline-1",
            "run",
            Some(&json!({ "agent": inline, "task": "hi" })),
        )
        .await;
        assert_eq!(status, 400, "{answer}");
        assert!(
            answer
                .to_string()
                .contains("$.agent: an inline agent config is refused"),
            "{answer}"
        );
        assert!(!mark.exists(), "the inline config's command ran");
        assert_eq!(theirs.count(), 0, "a request reached the caller's server");
    });
}

/// Restate's request identity: the server signs each request with its private key, and an
/// endpoint started with the public key (`--identity-key`) serves only signed requests.
#[test]
#[ignore = "run by identity_key_through_restate in a network namespace of its own"]
fn inside_identity_key() {
    let keys = tempfile::tempdir().expect("a temp dir");
    let (pem, public) = identity_key(keys.path());
    let mut stack = Stack::server(&[], Some(&pem));
    // Registration is Restate's discovery request, signed: it must pass the check.
    stack.serve(&["--identity-key", &public]);
    let scenario = scenario_request(&repo("spec/scenarios/architect-stops-early.json"));
    let local = comparable(run_locally(&repo(
        "spec/scenarios/architect-stops-early.json",
    )));
    block_on(async {
        let (status, report) = call("signed-1", "run", Some(&scenario)).await;
        assert_eq!(status, 200, "{report}");
        assert_eq!(comparable(report), local);
        // Straight to the endpoint, unsigned: refused, both discovery and an invocation.
        assert_eq!(direct("GET", "/discover").await, 401);
        assert_eq!(direct("POST", "/invoke/TerminusAgent/run").await, 401);
    });
    // The same requests to an endpoint without the key are served: the key is what refused.
    stack.kill_endpoint();
    stack.args.clear();
    stack.start_endpoint();
    block_on(async {
        assert_eq!(direct("GET", "/discover").await, 200);
    });
}

/// An Ed25519 key pair made with `openssl` in `dir`: the private key's PEM file, and the public
/// key as Restate writes it (`publickeyv1_` and the 32 raw bytes in base58).
fn identity_key(dir: &Path) -> (PathBuf, String) {
    let pem = dir.join("restate-identity.pem");
    let made = Command::new("openssl")
        .args(["genpkey", "-algorithm", "ed25519", "-out"])
        .arg(&pem)
        .output()
        .expect("openssl runs");
    assert!(made.status.success(), "{}", text(&made.stderr));
    let der = Command::new("openssl")
        .args(["pkey", "-pubout", "-outform", "DER", "-in"])
        .arg(&pem)
        .output()
        .expect("openssl runs");
    assert!(der.status.success(), "{}", text(&der.stderr));
    // A DER SubjectPublicKeyInfo of Ed25519: a 12-byte header, then the key's 32 bytes.
    assert_eq!(der.stdout.len(), 44, "an Ed25519 public key");
    let raw = &der.stdout[12..];
    (
        pem,
        format!("publickeyv1_{}", bs58::encode(raw).into_string()),
    )
}

/// The status of an unsigned HTTP/2 request straight to the endpoint.
async fn direct(method: &str, path: &str) -> u16 {
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("a client");
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
    client
        .request(method, format!("http://{ENDPOINT}{path}"))
        .header("accept", "application/vnd.restate.endpointmanifest.v4+json")
        .header("content-type", "application/vnd.restate.invocation.v1")
        .send()
        .await
        .expect("the endpoint answers")
        .status()
        .as_u16()
}

#[test]
fn serve_restate_refuses_an_address_it_cannot_bind_with_exit_2() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = taken.local_addr().expect("its address").to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(["serve-restate", "--bind", &addr])
        .output()
        .expect("terminus runs");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("--bind {addr}: cannot listen")),
        "{}",
        text(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(["serve-restate", "--bind", "not-an-address"])
        .output()
        .expect("terminus runs");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// What the endpoint is started with is checked before it listens: exit 2 naming the flag.
#[test]
fn serve_restate_refuses_bad_agents_and_identity_keys_with_exit_2() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let typo = dir.path().join("typo.toml");
    std::fs::write(
        &typo,
        "[model]\nprovider = \"openia\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
    )
    .expect("write");
    let typo = format!("architect={}", typo.display());
    let missing = format!("architect={}", dir.path().join("missing.toml").display());
    for (args, says) in [
        (vec!["--agent", "architect"], "is not NAME=CONFIG.toml"),
        (vec!["--agent", &missing], "--agent architect: "),
        (vec!["--agent", &typo], "unknown provider \"openia\""),
        (
            vec!["--identity-key", "not-a-key"],
            "--identity-key: `not-a-key` is not a Restate identity key",
        ),
        (
            vec!["--identity-key", "publickeyv1_0OIl"],
            "--identity-key: `publickeyv1_0OIl` is not a Restate identity key",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_terminus"))
            .args(["serve-restate", "--bind", "127.0.0.1:0"])
            .args(&args)
            .output()
            .expect("terminus runs");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

fn approval(name: &str) -> PathBuf {
    repo("adapters/cli/tests/fixtures/approvals").join(name)
}

/// Starts `run` of `key` without waiting for it (Restate's `/send`).
async fn send_run(key: &str, body: &Value) {
    let response = client()
        .post(format!(
            "{}/TerminusAgent/{key}/run/send",
            RestateServer::INGRESS
        ))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the ingress answers");
    assert!(
        response.status().is_success(),
        "{key}: /send answered {}",
        response.status()
    );
}

/// Waits until `key`'s run waits for a decision on `call_id` (an unknown call's 400 lists the
/// held calls).
async fn wait_held(key: &str, call_id: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, answer) = call(key, "deny", Some(&json!({ "call_id": "no-such-call" }))).await;
        assert_eq!(status, 400, "{key}: {answer}");
        let message = answer.to_string();
        assert!(message.contains("$.call_id"), "{message}");
        if message.contains(&format!("held: {call_id}")) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{key}: {call_id} never held: {message}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The report of `key`, once its run has stopped.
async fn report_of(key: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, report) = call(key, "report", None).await;
        if status == 200 {
            return report;
        }
        assert_eq!(status, 404, "{key}: {report}");
        assert!(Instant::now() < deadline, "{key}: no report");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The report `terminus run` gives `file` suspended, decided with `decide` (`terminus
/// approve | deny | answer` arguments after the journal and execution) and resumed.
fn decided_locally(file: &Path, decide: &[&str]) -> Value {
    let dir = tempfile::tempdir().expect("a temp dir");
    let journal = dir.path().join("journal.db");
    let journal = journal.to_string_lossy();
    let terminus = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_terminus"))
            .args(args)
            .output()
            .expect("terminus runs")
    };
    let scenario = file.to_string_lossy();
    let on = ["--journal", &journal, "--execution", "local"];
    let run = terminus(&[&["run", &scenario][..], &on].concat());
    assert_eq!(run.status.code(), Some(5), "{}", text(&run.stderr));
    let decided = terminus(&[&decide[..1], &on, &decide[1..]].concat());
    assert_eq!(decided.status.code(), Some(0), "{}", text(&decided.stderr));
    let resumed = terminus(&[&["resume"][..], &on, &["--json"]].concat());
    let stdout = text(&resumed.stdout);
    comparable(
        serde_json::from_str(stdout.lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("no report ({e}):\n{stdout}\n{}", text(&resumed.stderr))),
    )
}

#[test]
#[ignore = "run by approvals_through_restate in a network namespace of its own"]
fn inside_approvals() {
    let mut stack = Stack::start(&["TERMINUS_TOOL_LOG"]);
    let runtime = runtime();
    let deploy = scenario_request(&approval("deploy.json"));
    runtime.block_on(async {
        // Approved: the read ran before the wait, the deploy runs once after it.
        send_run("approve-1", &deploy).await;
        wait_held("approve-1", "deploy-1").await;
        assert_eq!(stack.log("TERMINUS_TOOL_LOG"), ["read_config 1"]);
        // Bad decisions name what is wrong; nothing is decided.
        let bad = [
            ("approve", json!({}), "$.call_id"),
            (
                "approve",
                json!({ "call_id": "deploy-1", "reason": "x" }),
                "$.reason",
            ),
            (
                "answer",
                json!({ "call_id": "deploy-1", "error": "exploded" }),
                "$.error",
            ),
        ];
        for (handler, body, path) in bad {
            let (status, answer) = call("approve-1", handler, Some(&body)).await;
            assert_eq!(status, 400, "{body}: {answer}");
            assert!(answer.to_string().contains(path), "{body}: {answer}");
        }
        let approve = json!({ "call_id": "deploy-1" });
        let (status, answer) = call("approve-1", "approve", Some(&approve)).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["decision"], "approve", "{answer}");
        let report = report_of("approve-1").await;
        assert_eq!(report["outcome"], "complete", "{report}");
        assert_eq!(report["result"], "Released v2 to production.", "{report}");
        assert_eq!(
            stack.log("TERMINUS_TOOL_LOG"),
            ["read_config 1", "deploy 1"],
            "each call ran once"
        );
        assert_eq!(
            comparable(report),
            decided_locally(&approval("deploy.json"), &["approve", "--call", "deploy-1"])
        );
        // A decision is final: the same again changes nothing, another is refused.
        let (status, answer) = call("approve-1", "approve", Some(&approve)).await;
        assert_eq!(
            (status, &answer["changed"]),
            (200, &json!(false)),
            "{answer}"
        );
        let (status, answer) = call(
            "approve-1",
            "deny",
            Some(&json!({ "call_id": "deploy-1", "reason": "too late" })),
        )
        .await;
        assert_eq!(status, 409, "{answer}");
        assert!(
            answer.to_string().contains("a decision is final"),
            "{answer}"
        );

        // Denied with a reason: the deploy never runs; the model got `permission_denied`
        // (a tool failure) as on the command line, whose tests read the reason in its journal.
        stack.clear_logs();
        send_run("deny-1", &deploy).await;
        wait_held("deny-1", "deploy-1").await;
        let reason = "change freeze until Monday";
        let deny = json!({ "call_id": "deploy-1", "reason": reason });
        let (status, answer) = call("deny-1", "deny", Some(&deny)).await;
        assert_eq!(status, 200, "{answer}");
        let report = report_of("deny-1").await;
        assert_eq!(report["stats"]["tool_failures"], 1, "{report}");
        assert_eq!(report["excluded_tools"], json!(["deploy"]), "{report}");
        assert_eq!(
            stack.log("TERMINUS_TOOL_LOG"),
            ["read_config 1"],
            "deploy ran"
        );
        assert_eq!(
            comparable(report),
            decided_locally(
                &approval("deploy.json"),
                &["deny", "--call", "deploy-1", "--reason", reason]
            )
        );

        // Approved with edited arguments: the deploy runs once, with them, and the model is told
        // (the scenario's second turn `sees` it), as on the command line.
        stack.clear_logs();
        let edited = scenario_request(&approval("deploy-edited.json"));
        send_run("edit-1", &edited).await;
        wait_held("edit-1", "deploy-1").await;
        let bad = json!({ "call_id": "deploy-1", "arguments": "env=staging" });
        let (status, answer) = call("edit-1", "approve", Some(&bad)).await;
        assert_eq!(status, 400, "{answer}");
        assert!(answer.to_string().contains("$.arguments"), "{answer}");
        let staging = json!({ "env": "staging", "release": "v2" });
        let edit = json!({ "call_id": "deploy-1", "arguments": staging });
        let (status, answer) = call("edit-1", "approve", Some(&edit)).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["decision"], "edit", "{answer}");
        let report = report_of("edit-1").await;
        assert_eq!(report["result"], "Released v2 to staging.", "{report}");
        assert_eq!(
            stack.log("TERMINUS_TOOL_LOG"),
            ["read_config 1", "deploy 1"],
            "each call ran once"
        );
        assert_eq!(
            comparable(report),
            decided_locally(
                &approval("deploy-edited.json"),
                &[
                    "approve",
                    "--call",
                    "deploy-1",
                    "--arguments",
                    &staging.to_string()
                ]
            )
        );

        // Answered from outside: the answer is the call's result; the tool never runs, and it
        // cannot be approved instead.
        let lookup = scenario_request(&approval("lookup.json"));
        send_run("answer-1", &lookup).await;
        wait_held("answer-1", "ask-1").await;
        let (status, answer) =
            call("answer-1", "approve", Some(&json!({ "call_id": "ask-1" }))).await;
        assert_eq!(status, 400, "{answer}");
        assert!(
            answer.to_string().contains("answered from outside"),
            "{answer}"
        );
        let plan = json!({ "call_id": "ask-1", "result": { "plan": "enterprise" } });
        let (status, answer) = call("answer-1", "answer", Some(&plan)).await;
        assert_eq!(status, 200, "{answer}");
        let report = report_of("answer-1").await;
        assert_eq!(report["outcome"], "complete", "{report}");
        assert_eq!(report["stats"]["tool_failures"], 0, "{report}");
        assert_eq!(
            comparable(report),
            decided_locally(
                &approval("lookup.json"),
                &[
                    "answer",
                    "--call",
                    "ask-1",
                    "--result",
                    r#"{"plan": "enterprise"}"#
                ]
            )
        );
    });

    // Two suspensions in one run: each approved call runs once.
    stack.clear_logs();
    runtime.block_on(async {
        send_run("twice-1", &scenario_request(&approval("twice.json"))).await;
        for call_id in ["charge-1", "refund-1"] {
            wait_held("twice-1", call_id).await;
            let (status, answer) =
                call("twice-1", "approve", Some(&json!({ "call_id": call_id }))).await;
            assert_eq!(status, 200, "{answer}");
        }
        let report = report_of("twice-1").await;
        assert_eq!(report["outcome"], "complete", "{report}");
        assert_eq!(stack.log("TERMINUS_TOOL_LOG"), ["charge 1", "refund 1"]);
    });

    // The endpoint killed while the run waits: restarted, then approved, the deploy runs
    // once and the run completes.
    stack.clear_logs();
    runtime.block_on(async {
        send_run("kill-1", &deploy).await;
        wait_held("kill-1", "deploy-1").await;
    });
    stack.kill_endpoint();
    std::thread::sleep(Duration::from_millis(500));
    stack.start_endpoint();
    runtime.block_on(async {
        wait_held("kill-1", "deploy-1").await;
        let (status, answer) =
            call("kill-1", "approve", Some(&json!({ "call_id": "deploy-1" }))).await;
        assert_eq!(status, 200, "{answer}");
        let report = report_of("kill-1").await;
        assert_eq!(report["outcome"], "complete", "{report}");
        assert_eq!(
            stack.log("TERMINUS_TOOL_LOG"),
            ["read_config 1", "deploy 1"],
            "each call ran once across the restart"
        );
        assert_eq!(
            comparable(report),
            decided_locally(&approval("deploy.json"), &["approve", "--call", "deploy-1"])
        );
    });
    eprintln!(
        "restate approvals: approve, deny, answer through the ingress, each report equal to \
         terminus run's with the same decision; two suspensions in one run; the endpoint killed while a run waited, the \
         approved call ran once"
    );
}

/// A live agent whose `write_file` (the real filesystem MCP server's) needs approval, denied
/// through the ingress with a reason: the file is never written, and the model's next request
/// carries the `permission_denied` result with the reason.
#[test]
#[ignore = "run by a_live_agents_denial_through_restate in a network namespace of its own"]
fn inside_live_denial() {
    let (mut stack, peers, runtime, root) = live_stack();
    std::fs::create_dir_all(&root).expect("mkdir");
    let plan = root.join("plan.md");
    let write = json!({ "path": plan, "content": "# Plan\n" });
    let mut script = vec![reply("", &[("write_file", write)], 1)];
    script.extend((2..8).map(|n| reply("I was not allowed to write the plan.", &[], n)));
    let fixture = runtime
        .block_on(terminus_fixture::Fixture::start(script))
        .expect("a port");
    let mcp = format!(
        "{}approval = [\"write_file\"]\n",
        fs_server(&peers, &root.to_string_lossy())
    );
    let config = write_config(stack.dir.path(), &format!("{}/v1", fixture.url()), &mcp);
    stack.serve(&["--agent", &format!("architect={config}")]);
    runtime.block_on(async {
        let request = json!({ "agent": "architect", "task": "Write a plan to plan.md" });
        send_run("live-deny", &request).await;
        wait_held("live-deny", "call_1_0").await;
        let reason = "no plans on Fridays";
        let deny = json!({ "call_id": "call_1_0", "reason": reason });
        let (status, answer) = call("live-deny", "deny", Some(&deny)).await;
        assert_eq!(status, 200, "{answer}");
        let report = report_of("live-deny").await;
        assert_eq!(report["stats"]["tool_failures"], 1, "{report}");
    });
    assert!(!plan.exists(), "the denied write ran");
    let requests = fixture.requests();
    assert!(requests.len() >= 2, "{} model calls", requests.len());
    let messages = requests[1].json()["messages"].clone();
    let told = messages.as_array().into_iter().flatten().any(|m| {
        m["role"] == "tool"
            && m["content"].as_str().is_some_and(|c| {
                c.contains("permission_denied")
                    && c.contains(
                        "denied: this call of `write_file` was not run: no plans on Fridays",
                    )
            })
    });
    assert!(told, "the model was not told of the denial: {messages}");
}

/// A long-running MCP tool through Restate: `build`, an MCP task on a server whose jobs outlive
/// the client's session (`tools/tests/servers/tasks.js`). The endpoint is killed (SIGKILL) while
/// the run waits for the task, and started again; Restate retries the invocation, which finds
/// the task's id journaled (the call's `:job` step) and waits for that task instead of calling
/// the tool again or answering it as in doubt: the server saw one `tools/call`, and the model
/// was given the task's result.
#[test]
#[ignore = "run by a_task_through_restate in a network namespace of its own"]
fn inside_task() {
    let (mut stack, peers, runtime, _) = live_stack();
    let (server, model) = runtime.block_on(async {
        (
            common::tasks::TaskServer::start(&peers).await,
            common::tasks::building().await,
        )
    });
    let config =
        common::tasks::task_config(stack.dir.path(), &model, &server, "tasks = [\"build\"]");
    stack.serve(&["--agent", &format!("builder={config}")]);
    runtime.block_on(async {
        let request = json!({ "agent": "builder", "task": "Build the app" });
        send_run("task-1", &request).await;
        server.polled(2).await;
    });
    stack.kill_endpoint();
    runtime.block_on(async {
        server
            .counted(
                &[("tools/call", 1), ("builds_finished", 0)],
                "killed mid-build",
            )
            .await;
    });
    stack.start_endpoint();
    let report = runtime.block_on(async {
        let report = report_of("task-1").await;
        server
            .counted(
                &[
                    ("tools/call", 1),
                    ("builds_finished", 1),
                    ("tasks/cancel", 0),
                ],
                "the job was started once and waited for after the restart",
            )
            .await;
        report
    });
    assert_eq!(report["outcome"], "complete", "{report}");
    assert_eq!(report["stats"]["tool_failures"], 0, "{report}");
    assert_eq!(common::tasks::tool_result(&model), "built app (job 1)");
    assert_eq!(model.requests().len(), 2, "each model call made once");
    eprintln!("restate task: killed mid-build, restarted: one tools/call, {report}");

    // The same kill, and the task's server started again meanwhile: the retried invocation
    // finds the journaled task unknown, and the call is answered in doubt, never made again.
    drop(server);
    let (server, model) = runtime.block_on(async {
        let server = common::tasks::TaskServer::start(&peers).await;
        (server, common::tasks::building().await)
    });
    // The same config file, with the new servers' addresses: read when the endpoint starts.
    let again =
        common::tasks::task_config(stack.dir.path(), &model, &server, "tasks = [\"build\"]");
    assert_eq!(again, config);
    stack.kill_endpoint();
    stack.start_endpoint();
    runtime.block_on(async {
        let request = json!({ "agent": "builder", "task": "Build the app" });
        send_run("task-2", &request).await;
        server.polled(2).await;
    });
    stack.kill_endpoint();
    let again = runtime.block_on(async {
        let port = server.port();
        drop(server);
        common::tasks::TaskServer::start_on(&peers, port).await
    });
    stack.start_endpoint();
    let report = runtime.block_on(async {
        let report = report_of("task-2").await;
        again
            .counted(
                &[("tools/call", 0), ("tasks/get", 1)],
                "asked about the task, never called",
            )
            .await;
        report
    });
    assert_eq!(report["outcome"], "complete", "{report}");
    assert_eq!(report["stats"]["tool_failures"], 1, "{report}");
    let told = common::tasks::tool_result(&model);
    assert!(
        told.as_str()
            .is_some_and(|t| t.contains("in doubt") && t.contains("not started again")),
        "{told}"
    );
}
