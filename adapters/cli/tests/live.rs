//! Live agents on a durable journal, with real processes: `terminus agent` killed (SIGKILL) in
//! the middle and finished by `terminus resume` from another folder without asking the model
//! again for a journaled turn; `terminus submit` + `terminus worker` on PostgreSQL, three workers,
//! one killed mid-run; and workers that meet executions they cannot run.
//!
//! The fixture model server answers by the turn a request asks for (the number of assistant
//! messages in its conversation), not by arrival order, so a resumed run gets the answer of the
//! turn it asks for and every request is attributed to its turn.

mod common;

use common::{
    KEY, architect, fs_server, last_json, postgres_url, reply, terminus, text, write_config,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use terminus_fixture::{Fixture, Request, Response, peers};

/// Which turn a Chat Completions request asks for: the assistant turns its conversation holds.
fn turn_of(request: &Value) -> usize {
    request["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count())
}

/// The task a request works on: its first user message.
fn task_of(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

fn no_more() -> Response {
    Response::json(
        500,
        r#"{"error":{"message":"fixture: no such turn","type":"server_error"}}"#,
    )
}

fn terminus_in(dir: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_terminus"));
    cmd.current_dir(dir).env("TERMINUS_TEST_KEY", KEY);
    cmd
}

async fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_is_resumed_from_elsewhere_without_resending_a_journaled_turn() {
    let Some(peers) = peers::dir() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let home = dir.path().canonicalize().expect("a real path");
    let root = home.join("work");
    let (script, plan) = architect(&root);
    // The first request for turn 4 (after plan.md is written) hangs: the agent is killed there.
    let stalled = Arc::new(AtomicBool::new(false));
    let first = stalled.clone();
    let fixture = Fixture::with(move |_, request: &Request| {
        let turn = turn_of(&request.json());
        let answer = script.get(turn).cloned().unwrap_or_else(no_more);
        if turn == 4 && !first.swap(true, Ordering::SeqCst) {
            answer.wait(Duration::from_secs(120))
        } else {
            answer
        }
    })
    .await
    .expect("a port");
    // `./work` is taken from the folder the agent starts in; the resume runs from `/`.
    let mcp = fs_server(&peers, "./work");
    let config = write_config(&home, &format!("{}/v1", fixture.url()), &mcp);
    let journal = home.join("journal.db").to_string_lossy().into_owned();
    let mut agent = terminus_in(&home)
        .args([
            "agent",
            &config,
            "--task",
            "Write an implementation plan to plan.md",
        ])
        .args(["--journal", &journal, "--execution", "live-crash", "--json"])
        .args(["--lease-ms", "500"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starts");
    wait_until("the stalled request", Duration::from_secs(60), || {
        fixture.count() == 5
    })
    .await;
    assert!(plan.exists(), "plan.md is written before the crash");
    agent.start_kill().expect("SIGKILL");
    let killed = agent.wait_with_output().await.expect("reaped");
    assert_eq!(killed.status.code(), None, "killed by a signal");
    // Anyone may touch the file after the crash: a resume that wrote it again would undo this.
    let checked = "# Plan\n1. Fix parse.\n<!-- checked after the crash -->\n";
    std::fs::write(&plan, checked).expect("write");

    let recording = home.join("recording.json").to_string_lossy().into_owned();
    // The killed process's claim is waited out (exit 4 until its lease expires).
    let out = loop {
        let out = terminus_in(Path::new("/"))
            .args([
                "resume",
                "--journal",
                &journal,
                "--execution",
                "live-crash",
                "--json",
                "--record",
                &recording,
            ])
            .output()
            .await
            .expect("runs");
        if out.status.code() != Some(4) {
            break out;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = last_json(&out.stdout);
    assert_eq!(
        (report["outcome"].as_str(), report["reason"].as_str()),
        (Some("complete"), Some("verified"))
    );
    assert_eq!(report["result"], "Plan written to plan.md.");
    assert_eq!(report["nudges"], 1);
    assert_eq!(
        report["model_calls"], 6,
        "4 journaled answers and 2 new ones"
    );
    // Turns 0..3 were answered and journaled before the crash and never asked for again; turn 4
    // was asked for twice because its first request never got an answer.
    let turns: Vec<usize> = fixture
        .requests()
        .iter()
        .map(|r| turn_of(&r.json()))
        .collect();
    assert_eq!(turns, vec![0, 1, 2, 3, 4, 4, 5]);
    assert_eq!(
        std::fs::read_to_string(&plan).expect("on disk"),
        checked,
        "plan.md was written once"
    );
    assert!(!stderr.contains(KEY));
    let db = std::fs::read(&journal).expect("the journal");
    assert!(!db.windows(KEY.len()).any(|w| w == KEY.as_bytes()));

    // The recording holds each turn once, and replays offline to the same path and report.
    let recorded: Value =
        serde_json::from_str(&std::fs::read_to_string(&recording).expect("recorded"))
            .expect("JSON");
    assert_eq!(recorded["model"]["turns"].as_array().map(Vec::len), Some(6));
    assert_eq!(
        recorded["tools"]["write_file"]["results"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let replay_db = home.join("replay.db").to_string_lossy().into_owned();
    let replay = terminus(vec![
        "run".into(),
        recording.clone(),
        "--journal".into(),
        replay_db.clone(),
        "--execution".into(),
        "replayed".into(),
        "--json".into(),
    ])
    .await;
    assert_eq!(replay.status.code(), Some(0), "{}", text(&replay.stderr));
    // Every field but the id and the count of journal writes the resume found already done
    // (a fact of the crash, not of the run).
    let without_id = |mut v: Value| {
        if let Some(o) = v.as_object_mut() {
            o.remove("execution");
            o.remove("duplicates_prevented");
        }
        v
    };
    assert_eq!(
        without_id(last_json(&replay.stdout)),
        without_id(report.clone())
    );
    let explain = |db: &str, id: &str| {
        let args = ["inspect", "--journal", db, "--execution", id, "--json"];
        terminus(args.iter().map(|a| a.to_string()).collect())
    };
    let (live, replayed) = (
        last_json(&explain(&journal, "live-crash").await.stdout),
        last_json(&explain(&replay_db, "replayed").await.stdout),
    );
    for field in ["trace", "stats", "reason", "rule", "result"] {
        assert_eq!(live[field], replayed[field], "{field}");
    }
    assert_eq!(live["trace"].as_array().map(Vec::len), Some(11), "{live}");

    // Resuming what has ended runs nothing and prints the same report.
    let again = terminus(vec![
        "resume".into(),
        "--journal".into(),
        journal,
        "--execution".into(),
        "live-crash".into(),
        "--json".into(),
    ])
    .await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(last_json(&again.stdout), report);
    assert_eq!(fixture.count(), 7);
}

/// A live agent with only the built-in `write_todos`: three turns per task.
/// `terminus worker --journal J --until-idle` and `extra`, which must end (exit 0) within a
/// minute: the reports it printed, one a line, and its log.
async fn worker_until_idle(journal: &str, extra: &[&str]) -> (Vec<Value>, String) {
    let mut args: Vec<String> = vec!["worker".into(), "--journal".into(), journal.to_owned()];
    args.push("--until-idle".into());
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let worker = tokio::time::timeout(Duration::from_secs(60), terminus(args))
        .await
        .expect("the worker ends");
    let log = text(&worker.stderr);
    assert_eq!(worker.status.code(), Some(0), "{log}");
    let ran = text(&worker.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a report line"))
        .collect();
    (ran, log)
}

/// `inspect` says the execution `id` failed with exit code 2 and a reason that contains `says`.
async fn assert_failed(journal: &str, id: &str, says: &str) {
    let inspect = terminus(vec![
        "inspect".into(),
        "--journal".into(),
        journal.to_owned(),
        "--execution".into(),
        id.into(),
        "--json".into(),
    ])
    .await;
    assert_eq!(inspect.status.code(), Some(0), "{}", text(&inspect.stderr));
    let explained = last_json(&inspect.stdout);
    assert_eq!(explained["status"], "failed", "{id}: {explained}");
    assert_eq!(explained["failure"]["exit_code"], 2, "{id}");
    let reason = explained["failure"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(says), "{id}: {reason}");
}

fn short_agent(task: &str, turn: usize, n: usize) -> Response {
    let todo = |status: &str| json!({ "todos": [{ "content": task, "status": status }] });
    match turn {
        0 => reply("", &[("write_todos", todo("in_progress"))], n),
        1 => reply("", &[("write_todos", todo("completed"))], n),
        2 => reply(&format!("Done: {task}"), &[], n),
        _ => no_more(),
    }
}

struct Worker {
    child: tokio::process::Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_on_postgres_run_thirty_submitted_agents_once_each_one_killed() {
    let Some(url) = postgres_url() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let run = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let tasks: Vec<String> = (0..30).map(|i| format!("task {i} of {run}")).collect();
    let victim = tasks[7].clone();
    let stalled = Arc::new(AtomicBool::new(false));
    let first = stalled.clone();
    let stall = victim.clone();
    let fixture = Fixture::with(move |n, request: &Request| {
        let body = request.json();
        let (task, turn) = (task_of(&body), turn_of(&body));
        let answer = short_agent(&task, turn, n);
        if task == stall && turn == 1 && !first.swap(true, Ordering::SeqCst) {
            answer.wait(Duration::from_secs(120))
        } else {
            answer
        }
    })
    .await
    .expect("a port");
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[model]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"gpt-4o-mini\"\n\
             api_key_env = \"TERMINUS_TEST_KEY\"\nstream = false\ntimeout_ms = 150000\n\
             [policy]\nretry_base_ms = 1\nretry_max_ms = 5\n",
            fixture.url()
        ),
    )
    .expect("write the config");
    let config = config.to_string_lossy().into_owned();
    let mut ids = BTreeMap::new();
    for (i, task) in tasks.iter().enumerate() {
        let id = format!("live-{i}-{run}");
        let out = terminus(vec![
            "submit".into(),
            config.clone(),
            "--task".into(),
            task.clone(),
            "--journal".into(),
            url.clone(),
            "--execution".into(),
            id.clone(),
        ])
        .await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout).trim(),
            id,
            "submit prints the execution id"
        );
        ids.insert(task.clone(), id);
    }
    let victim_id = ids[&victim].clone();

    let mut workers: Vec<Worker> = (0..3)
        .map(|w| {
            let stdout = dir.path().join(format!("worker-{w}.out"));
            let stderr = dir.path().join(format!("worker-{w}.err"));
            let child = terminus_in(dir.path())
                .args(["worker", "--journal", &url, "--lease-ms", "1500"])
                .args(["--poll-ms", "50"])
                .stdout(std::fs::File::create(&stdout).expect("a file"))
                .stderr(std::fs::File::create(&stderr).expect("a file"))
                .kill_on_drop(true)
                .spawn()
                .expect("the binary starts");
            Worker {
                child,
                stdout,
                stderr,
            }
        })
        .collect();

    // Kill the worker that waits on the stalled turn.
    wait_until("the stalled request", Duration::from_secs(120), || {
        stalled.load(Ordering::SeqCst)
    })
    .await;
    let took = format!(" took {victim_id} (");
    let holder = workers
        .iter()
        .position(|w| std::fs::read_to_string(&w.stderr).is_ok_and(|log| log.contains(&took)))
        .expect("a worker says it took the victim");
    let mut killed = workers.remove(holder);
    killed.child.start_kill().expect("SIGKILL");
    let _ = killed.child.wait().await;

    // Everything ends, the victim once its lease has expired.
    let store = terminus_store::open(&url, terminus_store::Durability::Process)
        .await
        .expect("the journal opens");
    let started = Instant::now();
    let mut reports = BTreeMap::new();
    while reports.len() < ids.len() {
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "only {} of 30 ended",
            reports.len()
        );
        for id in ids.values() {
            if !reports.contains_key(id)
                && let Some(report) = store.report(id).await.expect("readable")
            {
                reports.insert(id.clone(), report);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut printed = Vec::new();
    for w in &mut workers {
        w.child.start_kill().expect("stop the worker");
        let _ = w.child.wait().await;
    }
    // The killed worker's reports of what it finished before count too.
    workers.push(killed);
    for w in &workers {
        let out = std::fs::read_to_string(&w.stdout).expect("its stdout");
        printed.push(
            out.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter_map(|r| r["execution"].as_str().map(str::to_owned))
                .collect::<Vec<_>>(),
        );
    }
    for (task, id) in &ids {
        let report = &reports[id];
        assert_eq!(
            (report.outcome.outcome_str(), report.model_calls),
            ("complete", 3),
            "{id}"
        );
        assert_eq!(
            report.result.as_deref(),
            Some(format!("Done: {task}").as_str())
        );
        let times = printed.iter().flatten().filter(|e| *e == id).count();
        assert_eq!(times, 1, "{id} is reported by exactly one live worker");
    }
    assert!(
        printed.iter().filter(|p| !p.is_empty()).count() >= 2,
        "the work was shared: {printed:?}"
    );
    assert!(
        !printed[2].contains(&victim_id),
        "the killed worker never finished the victim"
    );
    // Each turn of each task was asked for once, but the victim's stalled turn, asked for again
    // by the worker that took over; its journaled first turn was not.
    let mut asked: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for r in fixture.requests() {
        let body = r.json();
        asked
            .entry(task_of(&body))
            .or_default()
            .push(turn_of(&body));
    }
    for task in &tasks {
        let expected = if *task == victim {
            vec![0, 1, 1, 2]
        } else {
            vec![0, 1, 2]
        };
        assert_eq!(asked.get(task), Some(&expected), "{task}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_marks_what_it_cannot_run_failed_and_goes_on() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let journal = dir.path().join("journal.db").to_string_lossy().into_owned();
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/race.json");
    let submit = |file: String, task: Option<&str>, id: &str| {
        let mut args = vec!["submit".into(), file, "--journal".into(), journal.clone()];
        args.extend(["--execution".into(), id.to_owned()]);
        if let Some(task) = task {
            args.extend(["--task".into(), task.to_owned()]);
        }
        terminus(args)
    };
    let out = submit(scenario.into(), None, "scenario-1").await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // A config whose MCP server cannot start: submit checks the config, a worker finds out.
    let config = write_config(
        dir.path(),
        "http://127.0.0.1:9/v1",
        "[[mcp]]\nname = \"ghost\"\ncommand = [\"/nonexistent/mcp-server\"]\n",
    );
    let out = submit(config.clone(), Some("Plan."), "agent-1").await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Submissions that cannot be stored at all: exit 2, nothing stored.
    let out = submit(config.clone(), None, "agent-2").await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("needs --task"),
        "{}",
        text(&out.stderr)
    );
    let typo = dir.path().join("typo.toml");
    std::fs::write(
        &typo,
        std::fs::read_to_string(&config)
            .expect("read")
            .replace("\"openai\"", "\"openia\""),
    )
    .expect("write");
    let out = submit(typo.to_string_lossy().into_owned(), Some("x"), "agent-3").await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("[model].provider: unknown provider \"openia\""));
    let out = submit(scenario.into(), None, "scenario-1").await;
    assert_eq!(out.status.code(), Some(2), "an id that exists");
    assert!(text(&out.stderr).contains("already exists"));

    // Executions stored by another program: no config at all, and one that no longer parses.
    let store = terminus_store::open(&journal, terminus_store::Durability::Process)
        .await
        .expect("opens");
    let spec = |host: Option<Value>| terminus_runtime::RunSpec {
        task: "x".into(),
        name: None,
        system: None,
        policy: terminus_kernel::Policy::default(),
        host,
        started_unix_ms: None,
    };
    assert!(store.create("bare-1", &spec(None)).await.expect("created"));
    let bad = json!({ "agent": { "file": "old.toml", "config": "[model]\nprovider = \"openia\"\n",
                                  "dir": "/", "cwd": "/" } });
    assert!(
        store
            .create("stale-1", &spec(Some(bad)))
            .await
            .expect("created")
    );
    drop(store);

    // One worker, until idle: it must end (the old worker claimed the same execution forever).
    let (ran, log) = worker_until_idle(&journal, &[]).await;
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(
        (ran[0]["execution"].as_str(), ran[0]["outcome"].as_str()),
        (Some("scenario-1"), Some("complete"))
    );
    for (id, says) in [
        (
            "agent-1",
            "[[mcp]] `ghost`: cannot start `/nonexistent/mcp-server`",
        ),
        ("bare-1", "keeps no scenario or agent config"),
        (
            "stale-1",
            "the agent config stored with `stale-1`: old.toml: ",
        ),
    ] {
        assert!(log.contains(&format!("cannot run {id}: ")), "{log}");
        assert_failed(&journal, id, says).await;
        let resumed = terminus(vec![
            "resume".into(),
            "--journal".into(),
            journal.clone(),
            "--execution".into(),
            id.into(),
        ])
        .await;
        assert_eq!(resumed.status.code(), Some(2), "{id}");
        assert!(
            text(&resumed.stderr).contains(says),
            "{}",
            text(&resumed.stderr)
        );
    }
    // Failed executions are not claimed again.
    let again = terminus(vec![
        "worker".into(),
        "--journal".into(),
        journal.clone(),
        "--until-idle".into(),
    ])
    .await;
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(text(&again.stdout), "", "{}", text(&again.stderr));
}

/// `worker --agents-dir DIR` runs a stored live agent only from a config file under DIR that
/// still holds the stored text: a config submitted from elsewhere, and one forged in the journal
/// under an admitted file's name, are marked failed (the reason in `inspect`) and start nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_agents_dir_runs_only_the_configs_under_it() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = dir.path().canonicalize().expect("a real path");
    let journal = root.join("journal.db").to_string_lossy().into_owned();
    let agents = root.join("agents");
    let outside = root.join("outside");
    std::fs::create_dir_all(&agents).expect("mkdir");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let fixture = Fixture::start(vec![reply("The answer is 42.", &[], 0)])
        .await
        .expect("a port");
    let config = |mcp: &str| {
        format!(
            "[model]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"gpt-4o-mini\"\n\
             api_key_env = \"TERMINUS_TEST_KEY\"\nstream = false\ntimeout_ms = 5000\n\
             [policy]\nmax_steps = 10\n{mcp}",
            fixture.url()
        )
    };
    // What an attacker's config would do: start a command that leaves a mark.
    let mark = root.join("pwned");
    let evil = config(&format!(
        "[[mcp]]\nname = \"x\"\ncommand = [\"sh\", \"-c\", \"touch {}\"]\n",
        mark.display()
    ));
    let admitted = agents.join("answer.toml");
    std::fs::write(&admitted, config("")).expect("write");
    let stranger = outside.join("evil.toml");
    std::fs::write(&stranger, &evil).expect("write");

    let submit = |file: &Path, id: &str| {
        terminus(vec![
            "submit".into(),
            file.to_string_lossy().into_owned(),
            "--task".into(),
            "What is the answer?".into(),
            "--journal".into(),
            journal.clone(),
            "--execution".into(),
            id.into(),
        ])
    };
    for (file, id) in [(&admitted, "admitted"), (&stranger, "stranger")] {
        let out = submit(file, id).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    // Written straight into the journal: the admitted file's name, another text.
    let store = terminus_store::open(&journal, terminus_store::Durability::Process)
        .await
        .expect("opens");
    let forged = json!({ "agent": { "file": admitted.to_string_lossy(), "config": evil,
                                    "dir": agents.to_string_lossy(), "cwd": root.to_string_lossy() } });
    let spec = terminus_runtime::RunSpec {
        task: "x".into(),
        name: Some("agent".into()),
        system: None,
        policy: terminus_kernel::Policy::default(),
        host: Some(forged),
        started_unix_ms: None,
    };
    assert!(store.create("forged", &spec).await.expect("created"));
    drop(store);

    // A folder that is not there: exit 2, nothing claimed.
    let out = terminus(vec![
        "worker".into(),
        "--journal".into(),
        journal.clone(),
        "--until-idle".into(),
        "--agents-dir".into(),
        root.join("missing").to_string_lossy().into_owned(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--agents-dir"),
        "{}",
        text(&out.stderr)
    );

    let agents_dir = agents.to_string_lossy().into_owned();
    let (ran, log) = worker_until_idle(&journal, &["--agents-dir", &agents_dir]).await;
    assert_eq!(ran.len(), 1, "{ran:?}\n{log}");
    assert_eq!(ran[0]["execution"], "admitted");
    assert_eq!(ran[0]["outcome"], "complete", "{}", ran[0]);
    assert_eq!(
        fixture.count(),
        1,
        "only the admitted agent asked the model"
    );
    assert!(!mark.exists(), "a refused config started its command");
    for (id, says) in [
        ("stranger", "is not a file under --agents-dir"),
        ("forged", "has changed since the execution was stored"),
    ] {
        assert_failed(&journal, id, says).await;
    }
    // The same config on a worker without the flag: the journal is trusted, the command runs
    // (so the refusal above is what kept it from running).
    let out = submit(&stranger, "stranger-2").await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (_, log) = worker_until_idle(&journal, &[]).await;
    assert!(mark.exists(), "{log}");
}
