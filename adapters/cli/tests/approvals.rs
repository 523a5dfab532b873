//! Approvals and outside answers (`docs/approvals.md`), with real `terminus` processes on
//! SQLite and on PostgreSQL (`TERMINUS_PG_URL`; without it the PostgreSQL half is skipped with a
//! printed reason). Each failure the frameworks' trackers report is a test by name: an approved
//! call runs exactly once across a suspension and a resume, whatever is killed when; a denied
//! call never runs and the model is told why; a model that keeps asking for a denied tool is
//! bounded; an outside answer is the call's result; a suspended run is never run by a worker
//! until it is decided; time suspended does not count against the deadline.

mod common;

use common::journal::{Journal, postgres, unique};
use common::{last_json, text};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use terminus_kernel::{Entry, ToolErrorKind, ToolOutcome};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/approvals")
        .join(name)
}

/// A journal, a tool log and a scratch folder for one test.
struct Case {
    journal: Journal,
    tool_log: PathBuf,
    dir: tempfile::TempDir,
}

impl Case {
    fn sqlite() -> Case {
        let dir = tempfile::tempdir().expect("temp dir");
        Case {
            journal: Journal::Sqlite(dir.path().join("journal.db")),
            tool_log: dir.path().join("tools.log"),
            dir,
        }
    }

    fn on(journal: Journal) -> Case {
        let dir = tempfile::tempdir().expect("temp dir");
        Case {
            journal,
            tool_log: dir.path().join("tools.log"),
            dir,
        }
    }

    fn terminus(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_terminus"));
        command.args(args).env("TERMINUS_TOOL_LOG", &self.tool_log);
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.terminus(args).output().expect("the binary runs")
    }

    /// `terminus SUBCOMMAND --journal J --execution ID ARGS...`
    fn on_execution(&self, subcommand: &str, execution: &str, args: &[&str]) -> Output {
        let journal = self.journal.arg();
        let mut all = vec![subcommand, "--journal", &journal, "--execution", execution];
        all.extend_from_slice(args);
        self.run(&all)
    }

    /// Runs scenario `file` as `execution`: it must suspend (exit 5); the suspension's JSON.
    fn suspend(&self, file: &Path, execution: &str) -> Value {
        let journal = self.journal.arg();
        let scenario = file.to_string_lossy();
        let out = self.run(&[
            "run",
            &scenario,
            "--journal",
            &journal,
            "--execution",
            execution,
            "--json",
        ]);
        assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
        last_json(&out.stdout)
    }

    /// `terminus resume` of `execution` started, not waited for, with a short lease (so a
    /// resume after killing it need not wait long).
    fn spawn_resume(&self, execution: &str) -> std::process::Child {
        let journal = self.journal.arg();
        self.terminus(&[
            "resume",
            "--journal",
            &journal,
            "--execution",
            execution,
            "--lease-ms",
            "300",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawned")
    }

    /// The tool calls carried out, one `name number` a line.
    fn tool_calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.tool_log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// A scenario file written to the scratch folder.
    fn write(&self, name: &str, scenario: &Value) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, scenario.to_string()).expect("written");
        path
    }

    /// The results the journal fed the machine, each call's outcome by call id.
    fn outcomes(&self, execution: &str) -> Vec<(String, ToolOutcome)> {
        self.journal
            .records(execution)
            .iter()
            .filter_map(|r| match &r.entry {
                Entry::ToolResults { results } => Some(results.clone()),
                _ => None,
            })
            .flatten()
            .map(|r| (r.call_id.to_string(), r.outcome))
            .collect()
    }
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

fn stderr(out: &Output) -> String {
    text(&out.stderr)
}

/// Held by the tests that run on PostgreSQL: its database is shared, and a worker of one test
/// would take another's decided execution.
static PG: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn pg_lock() -> std::sync::MutexGuard<'static, ()> {
    PG.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Both journals: SQLite always, PostgreSQL when configured.
fn journals() -> Vec<Case> {
    let mut cases = vec![Case::sqlite()];
    match postgres() {
        Some(pg) => cases.push(Case::on(pg)),
        None => eprintln!("skipping the PostgreSQL half: TERMINUS_PG_URL is not set"),
    }
    cases
}

#[test]
fn an_approved_call_runs_exactly_once_across_suspension_and_resume() {
    let _pg = pg_lock();
    for case in journals() {
        let id = unique("approve");
        let suspended = case.suspend(&fixture("deploy.json"), &id);
        assert_eq!(suspended["status"], "suspended");
        assert_eq!(
            suspended["pending"],
            json!([{ "call_id": "deploy-1", "name": "deploy",
                     "arguments": { "env": "prod", "release": "v2" }, "kind": "approval" }])
        );
        // The other call of the turn ran; the held one did not.
        assert_eq!(
            case.tool_calls(),
            ["read_config 1"],
            "{}",
            case.journal.label()
        );

        // `runs` and `inspect` say so.
        let journal = case.journal.arg();
        let runs = case.run(&["runs", "--journal", &journal]);
        let listed = text(&runs.stdout);
        let row = listed.lines().find(|l| l.starts_with(&id)).unwrap_or("");
        assert!(row.contains("suspended"), "{listed}");
        let inspect = case.on_execution("inspect", &id, &[]);
        let explained = text(&inspect.stdout);
        assert!(explained.contains("suspended"), "{explained}");
        assert!(explained.contains("deploy-1"), "{explained}");

        let approve = case.on_execution("approve", &id, &["--call", "deploy-1"]);
        assert_eq!(code(&approve), Some(0), "{}", stderr(&approve));
        assert!(stderr(&approve).contains("every held call is decided"));
        // The same decision again changes nothing; a conflicting one is refused.
        let again = case.on_execution("approve", &id, &["--all"]);
        assert_eq!(code(&again), Some(0), "{}", stderr(&again));
        let conflict = case.on_execution("deny", &id, &["--call", "deploy-1"]);
        assert_eq!(code(&conflict), Some(2), "{}", stderr(&conflict));
        assert!(stderr(&conflict).contains("already decided"));

        let resumed = case.on_execution("resume", &id, &["--json"]);
        assert_eq!(code(&resumed), Some(0), "{}", stderr(&resumed));
        let report = last_json(&resumed.stdout);
        assert_eq!(report["outcome"], "complete");
        assert_eq!(case.tool_calls(), ["read_config 1", "deploy 1"]);

        // Serialize once more (a finished run's resume): nothing runs, the stored report.
        let finished = case.on_execution("resume", &id, &["--json"]);
        assert_eq!(code(&finished), Some(0), "{}", stderr(&finished));
        assert_eq!(last_json(&finished.stdout)["steps"], report["steps"]);
        assert_eq!(case.tool_calls(), ["read_config 1", "deploy 1"]);
        let late = case.on_execution("approve", &id, &["--call", "deploy-1"]);
        assert_eq!(code(&late), Some(2), "{}", stderr(&late));
        assert!(stderr(&late).contains("not suspended"), "{}", stderr(&late));
    }
}

/// An approval with edited arguments (`--arguments`): the call runs once, with the person's
/// arguments; the journal keeps the model's in the `held` entry and the person's in the
/// `decided` entry and the intent; the model's next request says what the call ran with (the
/// scripted turn's `sees`). What cannot be edited is refused, naming it.
#[test]
fn an_approval_with_edited_arguments_runs_the_call_once_with_them() {
    let _pg = pg_lock();
    let edited = json!({ "env": "staging", "release": "v2" });
    // Its second turn `sees` what the model is told: "... it ran with {edited}."
    let file = fixture("deploy-edited.json");
    for case in journals() {
        let id = unique("edit");
        case.suspend(&file, &id);

        let approve = |args: &[&str]| {
            let mut all = vec!["--call", "deploy-1"];
            all.extend_from_slice(args);
            case.on_execution("approve", &id, &all)
        };
        let refused = [
            (
                vec!["--arguments", "[1]"],
                "--arguments must be a JSON object",
            ),
            (vec!["--arguments", "{env"], "--arguments is not JSON"),
        ];
        for (args, why) in refused {
            let out = approve(&args);
            assert_eq!(code(&out), Some(2), "{}", stderr(&out));
            assert!(stderr(&out).contains(why), "{}", stderr(&out));
        }
        let all = case.on_execution("approve", &id, &["--all", "--arguments", "{}"]);
        assert_eq!(code(&all), Some(2), "{}", stderr(&all));

        let edited_text = edited.to_string();
        let edit = approve(&["--arguments", &edited_text]);
        assert_eq!(code(&edit), Some(0), "{}", stderr(&edit));
        assert!(
            stderr(&edit).contains(&format!(
                "approved call `deploy-1` of `deploy` with edited arguments {edited}"
            )),
            "{}",
            stderr(&edit)
        );
        let again = approve(&["--arguments", &edited_text]);
        assert_eq!(code(&again), Some(0), "{}", stderr(&again));
        let plain = approve(&[]);
        assert_eq!(code(&plain), Some(2), "{}", stderr(&plain));
        assert!(
            stderr(&plain).contains("already decided (edit)"),
            "{}",
            stderr(&plain)
        );
        let inspect = case.on_execution("inspect", &id, &[]);
        assert!(
            text(&inspect.stdout).contains(&format!("approved with edited arguments {edited}")),
            "{}",
            text(&inspect.stdout)
        );

        let resumed = case.on_execution("resume", &id, &["--json"]);
        assert_eq!(code(&resumed), Some(0), "{}", stderr(&resumed));
        assert_eq!(last_json(&resumed.stdout)["outcome"], "complete");
        assert_eq!(case.tool_calls(), ["read_config 1", "deploy 1"]);

        let records = case.journal.records(&id);
        let entries: Vec<&Entry> = records.iter().map(|r| &r.entry).collect();
        let held = entries.iter().find_map(|e| match e {
            Entry::Held { call, .. } => Some(call.arguments.value().clone()),
            _ => None,
        });
        assert_eq!(held, Some(json!({ "env": "prod", "release": "v2" })));
        let decided = entries.iter().find_map(|e| match e {
            Entry::Decided { decision, .. } => Some(decision.clone()),
            _ => None,
        });
        assert_eq!(
            decided,
            Some(terminus_kernel::Decision::Edit {
                arguments: edited.clone()
            })
        );
        let intents: Vec<Value> = entries
            .iter()
            .filter_map(|e| match e {
                Entry::ToolCall { call, .. } if call.id.as_str() == "deploy-1" => {
                    Some(call.arguments.value().clone())
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            intents,
            std::slice::from_ref(&edited),
            "{}",
            case.journal.label()
        );
    }
}

#[test]
fn a_resume_with_a_call_undecided_suspends_again_running_nothing() {
    let case = Case::sqlite();
    let id = unique("undecided");
    case.suspend(&fixture("deploy.json"), &id);
    let calls = case.tool_calls();
    let entries = case.journal.records(&id).len();
    for _ in 0..2 {
        let again = case.on_execution("resume", &id, &["--json"]);
        assert_eq!(code(&again), Some(5), "{}", stderr(&again));
        assert_eq!(
            last_json(&again.stdout)["pending"][0]["call_id"],
            "deploy-1"
        );
    }
    assert_eq!(case.tool_calls(), calls);
    assert_eq!(case.journal.records(&id).len(), entries);
}

#[test]
fn a_denied_call_never_runs_and_the_model_is_told_why() {
    let case = Case::sqlite();
    let id = unique("deny");
    case.suspend(&fixture("deploy.json"), &id);
    let deny = case.on_execution(
        "deny",
        &id,
        &[
            "--call",
            "deploy-1",
            "--reason",
            "change freeze until Monday",
        ],
    );
    assert_eq!(code(&deny), Some(0), "{}", stderr(&deny));
    let resumed = case.on_execution("resume", &id, &["--json"]);
    let report = last_json(&resumed.stdout);
    assert_eq!(report["stats"]["tool_failures"], 1, "{report}");
    assert_eq!(case.tool_calls(), ["read_config 1"], "deploy never ran");
    let outcomes = case.outcomes(&id);
    let denied = outcomes
        .iter()
        .find(|(id, _)| id == "deploy-1")
        .map(|(_, o)| o.clone());
    let Some(ToolOutcome::Error { kind, message }) = denied else {
        panic!("deploy-1 was answered {denied:?}");
    };
    assert_eq!(kind, ToolErrorKind::PermissionDenied);
    assert!(message.contains("change freeze until Monday"), "{message}");
}

#[test]
fn a_model_that_keeps_asking_for_a_denied_tool_ends_tool_failures() {
    let case = Case::sqlite();
    let id = unique("deny-loop");
    case.suspend(&fixture("deny-loop.json"), &id);
    let deny = case.on_execution("deny", &id, &["--all", "--reason", "never in production"]);
    assert_eq!(code(&deny), Some(0), "{}", stderr(&deny));
    // The denial excluded the tool: its next call is refused, nobody is asked again.
    let resumed = case.on_execution("resume", &id, &["--json"]);
    assert_eq!(code(&resumed), Some(1), "{}", stderr(&resumed));
    let report = last_json(&resumed.stdout);
    assert_eq!(report["outcome"], "aborted");
    assert_eq!(report["reason"], "tool_failures");
    assert_eq!(report["stats"]["refused_calls"], 1, "{report}");
    assert!(case.tool_calls().is_empty(), "{:?}", case.tool_calls());
}

#[test]
fn an_outside_answer_reaches_the_model_as_the_call_result() {
    let case = Case::sqlite();
    let id = unique("answer");
    let suspended = case.suspend(&fixture("lookup.json"), &id);
    assert_eq!(suspended["pending"][0]["kind"], "deferred");
    // A deferred call is answered, not approved.
    let approve = case.on_execution("approve", &id, &["--call", "ask-1"]);
    assert_eq!(code(&approve), Some(2), "{}", stderr(&approve));
    assert!(stderr(&approve).contains("terminus answer"));
    let bad = case.on_execution("answer", &id, &["--call", "ask-1", "--result", "{plan"]);
    assert_eq!(code(&bad), Some(2), "{}", stderr(&bad));
    let kind = case.on_execution(
        "answer",
        &id,
        &["--call", "ask-1", "--error", "exploded", "--message", "x"],
    );
    assert_eq!(code(&kind), Some(2), "{}", stderr(&kind));
    assert!(
        stderr(&kind).contains("permission_denied"),
        "{}",
        stderr(&kind)
    );
    let unknown = case.on_execution("answer", &id, &["--call", "ask-9", "--result", "1"]);
    assert_eq!(code(&unknown), Some(2), "{}", stderr(&unknown));
    assert!(
        stderr(&unknown).contains("held: ask-1"),
        "{}",
        stderr(&unknown)
    );

    let answer = case.on_execution(
        "answer",
        &id,
        &["--call", "ask-1", "--result", r#"{"plan": "enterprise"}"#],
    );
    assert_eq!(code(&answer), Some(0), "{}", stderr(&answer));
    let resumed = case.on_execution("resume", &id, &["--json"]);
    assert_eq!(code(&resumed), Some(0), "{}", stderr(&resumed));
    assert_eq!(
        case.outcomes(&id),
        [(
            "ask-1".to_owned(),
            ToolOutcome::ok(json!({ "plan": "enterprise" }))
        )]
    );
    assert!(case.tool_calls().is_empty(), "a deferred tool never runs");
}

#[test]
fn decisions_on_what_is_not_suspended_are_refused() {
    let case = Case::sqlite();
    // A journal that is not there is not created.
    let absent = case.dir.path().join("typo.db");
    let out = case.run(&[
        "approve",
        "--journal",
        &absent.to_string_lossy(),
        "--execution",
        "x",
        "--all",
    ]);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(!absent.exists(), "approve created {}", absent.display());
    // A run with no held call.
    let id = unique("plain");
    let journal = case.journal.arg();
    let plain = common::scenario("plain-answer");
    let out = case.run(&["run", &plain, "--journal", &journal, "--execution", &id]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let missing = case.on_execution("approve", "no-such-run", &["--all"]);
    assert_eq!(code(&missing), Some(2), "{}", stderr(&missing));
    assert!(stderr(&missing).contains("no-such-run"));
    let ended = case.on_execution("deny", &id, &["--all"]);
    assert_eq!(code(&ended), Some(2), "{}", stderr(&ended));
    assert!(
        stderr(&ended).contains("not suspended"),
        "{}",
        stderr(&ended)
    );
}

/// `deploy.json` with a slow deploy: 3 s between its start (logged) and its result.
fn slow_deploy(case: &Case) -> PathBuf {
    let mut scenario: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("deploy.json")).expect("fixture"))
            .expect("JSON");
    scenario["tools"]["deploy"]["results"][0]["delay_ms"] = json!(3000);
    case.write("slow-deploy.json", &scenario)
}

/// Waits until the tool log has `n` lines (a call started), or panics.
fn wait_for_calls(case: &Case, n: usize) {
    let until = Instant::now() + Duration::from_secs(20);
    while case.tool_calls().len() < n {
        assert!(
            Instant::now() < until,
            "no call started: {:?}",
            case.tool_calls()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_kill_while_the_approved_call_runs_leaves_it_in_doubt_never_run_again() {
    let case = Case::sqlite();
    let id = unique("kill-running");
    case.suspend(&slow_deploy(&case), &id);
    let approve = case.on_execution("approve", &id, &["--all"]);
    assert_eq!(code(&approve), Some(0), "{}", stderr(&approve));
    let mut child = case.spawn_resume(&id);
    wait_for_calls(&case, 2);
    child.kill().expect("killed");
    let _ = child.wait();
    // The lease runs out; the resume finds the approved call started and unfinished.
    std::thread::sleep(Duration::from_millis(400));
    let resumed = case.on_execution("resume", &id, &["--json"]);
    assert_eq!(code(&resumed), Some(0), "{}", stderr(&resumed));
    assert_eq!(case.tool_calls(), ["read_config 1", "deploy 1"], "ran once");
    let outcome = case
        .outcomes(&id)
        .into_iter()
        .find(|(id, _)| id == "deploy-1")
        .map(|(_, o)| o);
    let Some(ToolOutcome::Error { message, .. }) = outcome else {
        panic!("the model was not told the deploy is in doubt: {outcome:?}");
    };
    assert!(message.contains("in doubt"), "{message}");
}

#[test]
fn a_kill_after_the_approval_before_the_call_runs_runs_it_once() {
    let case = Case::sqlite();
    let id = unique("kill-approved");
    case.suspend(&fixture("deploy.json"), &id);
    let approve = case.on_execution("approve", &id, &["--all"]);
    assert_eq!(code(&approve), Some(0), "{}", stderr(&approve));
    // Killed at once: at most the claim was taken, the deploy's intent not written.
    let mut child = case.spawn_resume(&id);
    let _ = child.kill();
    let _ = child.wait();
    std::thread::sleep(Duration::from_millis(400));
    let resumed = case.on_execution("resume", &id, &["--json"]);
    assert_eq!(code(&resumed), Some(0), "{}", stderr(&resumed));
    assert_eq!(last_json(&resumed.stdout)["outcome"], "complete");
    let deploys = case
        .tool_calls()
        .iter()
        .filter(|c| c.starts_with("deploy"))
        .count();
    assert_eq!(deploys, 1, "{:?}", case.tool_calls());
}

#[test]
fn time_suspended_does_not_count_against_the_deadline() {
    let case = Case::sqlite();
    let id = unique("deadline");
    let mut scenario: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("deploy.json")).expect("fixture"))
            .expect("JSON");
    scenario["policy"]["deadline_ms"] = json!(1500);
    let file = case.write("deploy-deadline.json", &scenario);
    case.suspend(&file, &id);
    // Longer than the whole deadline, waiting for a person.
    std::thread::sleep(Duration::from_millis(2000));
    let approve = case.on_execution("approve", &id, &["--all"]);
    assert_eq!(code(&approve), Some(0), "{}", stderr(&approve));
    let resumed = case.on_execution("resume", &id, &["--json"]);
    let report = last_json(&resumed.stdout);
    assert_eq!(report["outcome"], "complete", "{report}");
}

#[test]
fn workers_never_run_a_suspended_execution_until_it_is_decided() {
    let _pg = pg_lock();
    for case in journals() {
        let journal = case.journal.arg();
        let id = unique("worker");
        let submit = case.run(&[
            "submit",
            &fixture("deploy.json").to_string_lossy(),
            "--journal",
            &journal,
            "--execution",
            &id,
        ]);
        assert_eq!(code(&submit), Some(0), "{}", stderr(&submit));
        let worker = || {
            case.run(&[
                "worker",
                "--journal",
                &journal,
                "--until-idle",
                "--poll-ms",
                "10",
            ])
        };
        let first = worker();
        assert_eq!(code(&first), Some(0), "{}", stderr(&first));
        assert!(stderr(&first).contains("suspended"), "{}", stderr(&first));
        // A suspended execution is not runnable: the next worker finds nothing of it to do.
        let second = worker();
        assert!(!stderr(&second).contains(&id), "{}", stderr(&second));
        assert_eq!(case.tool_calls(), ["read_config 1"]);
        let approve = case.on_execution("approve", &id, &["--all"]);
        assert_eq!(code(&approve), Some(0), "{}", stderr(&approve));
        let runs = case.run(&["runs", "--journal", &journal]);
        let listed = text(&runs.stdout);
        let row = listed.lines().find(|l| l.starts_with(&id)).unwrap_or("");
        assert!(row.contains("waiting"), "{listed}");
        let third = worker();
        assert_eq!(code(&third), Some(0), "{}", stderr(&third));
        assert!(stderr(&third).contains(&id), "{}", stderr(&third));
        assert_eq!(case.tool_calls(), ["read_config 1", "deploy 1"]);
    }
}

/// Workers on PostgreSQL and executions that each suspend twice, decided from other processes
/// while the workers poll: every approved call runs exactly once (one intent and one result in
/// its journal), no execution runs while suspended (a held call has no intent before its
/// decision), and every execution ends.
#[test]
fn a_worker_fleet_runs_each_approved_call_exactly_once() {
    const EXECUTIONS: usize = 20;
    const WORKERS: usize = 2;
    let _pg = pg_lock();
    let Some(journal) = postgres() else {
        eprintln!("skipping: TERMINUS_PG_URL is not set");
        return;
    };
    let case = Case::on(journal);
    let url = case.journal.arg();
    let prefix = unique("fleet");
    let ids: Vec<String> = (0..EXECUTIONS).map(|i| format!("{prefix}-{i}")).collect();
    for id in &ids {
        let submit = case.run(&[
            "submit",
            &fixture("twice.json").to_string_lossy(),
            "--journal",
            &url,
            "--execution",
            id,
        ]);
        assert_eq!(code(&submit), Some(0), "{}", stderr(&submit));
    }
    let mut workers: Vec<std::process::Child> = (0..WORKERS)
        .map(|_| {
            case.terminus(&["worker", "--journal", &url, "--poll-ms", "20"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("a worker")
        })
        .collect();
    let store = common::journal::block_on(case.journal.open());
    let until = Instant::now() + Duration::from_secs(240);
    let mut decisions = 0;
    let ended = loop {
        let mut ended = 0;
        for id in &ids {
            let (suspended, report) = common::journal::block_on(async {
                let s = store.suspension(id).await.expect("suspension");
                let report = store.report(id).await.expect("report");
                (s.is_suspended(), report)
            });
            if report.is_some() {
                ended += 1;
            } else if suspended {
                // Another process decides, as a person would, while the workers poll.
                let approve = case.on_execution("approve", id, &["--all"]);
                assert_eq!(code(&approve), Some(0), "{}", stderr(&approve));
                decisions += 1;
            }
        }
        if ended == EXECUTIONS || Instant::now() > until {
            break ended;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    for worker in &mut workers {
        let _ = worker.kill();
        let _ = worker.wait();
    }
    assert_eq!(ended, EXECUTIONS, "every execution ends");
    assert_eq!(
        decisions,
        2 * EXECUTIONS,
        "each suspended twice, decided once each time"
    );
    for id in &ids {
        let records = case.journal.records(id);
        for tool in ["charge", "refund"] {
            let intents: Vec<_> = records
                .iter()
                .filter(|r| matches!(&r.entry, Entry::ToolCall { call, .. } if call.name.as_str() == tool))
                .collect();
            let results = records
                .iter()
                .filter(|r| matches!(&r.entry, Entry::ToolResult(res) if res.name.as_str() == tool))
                .count();
            let decided = records
                .iter()
                .filter(|r| matches!(&r.entry, Entry::Decided { .. }))
                .map(|r| r.key)
                .collect::<Vec<_>>();
            assert_eq!(intents.len(), 1, "{id}: `{tool}` ran once");
            assert_eq!(results, 1, "{id}: `{tool}` has one result");
            // Its intent was written after its decision (the approval came first).
            assert!(
                decided
                    .iter()
                    .any(|k| k.checkpoint == intents[0].key.checkpoint),
                "{id}: `{tool}` ran without a decision"
            );
        }
        let report = common::journal::block_on(store.report(id))
            .expect("report")
            .expect("ended");
        assert!(report.outcome.is_complete(), "{id}: {:?}", report.outcome);
    }
}
