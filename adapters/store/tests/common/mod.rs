//! The store contract, written once and run on every store (memory, SQLite, PostgreSQL).

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;
use terminus_kernel::{Entry, Key, Record};
use terminus_runtime::{Failure, Report, RunSpec, Store, StoreError};

/// `TERMINUS_PG_URL`, or `None` after saying why the test skips (with `CI=true` a missing URL
/// fails instead).
pub fn pg_url() -> Option<String> {
    let Ok(url) = std::env::var("TERMINUS_PG_URL") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but TERMINUS_PG_URL is unset"
        );
        eprintln!(
            "skipping: TERMINUS_PG_URL is unset (e.g. postgres://postgres@127.0.0.1:5432/test)"
        );
        return None;
    };
    Some(url)
}

/// An execution id no other test run uses (PostgreSQL's database is shared).
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}-{}-{nanos}", std::process::id())
}

pub fn spec() -> RunSpec {
    RunSpec {
        task: "t".into(),
        name: None,
        system: None,
        policy: terminus_kernel::Policy::default(),
        host: None,
        started_unix_ms: Some(1),
    }
}

pub fn record(checkpoint: u32, index: u32, text: &str) -> Arc<Record> {
    Arc::new(Record {
        key: Key::new(checkpoint, index),
        entry: Entry::User { task: text.into() },
    })
}

fn failure() -> Failure {
    Failure {
        exit_code: 2,
        reason: "the stored config: [model].provider: unknown provider".into(),
        worker: "w1".into(),
    }
}

fn report(id: &str) -> Report {
    let stop = terminus_kernel::Stop {
        outcome: terminus_kernel::Outcome::Complete(terminus_kernel::CompleteReason::Answered),
        rule: terminus_kernel::Rule::ClaimAnswered,
        result: Some("done".into()),
        stats: terminus_kernel::Stats::default(),
        excluded_tools: Vec::new(),
    };
    Report::new(id.to_owned(), stop, Vec::new(), Vec::new(), 0, 0)
}

/// Appends are idempotent by key (the stored record comes back, never overwritten), a step's
/// records go in together, and pages come in key order.
pub async fn appends_and_pages(store: &dyn Store, id: &str) {
    assert!(store.create(id, &spec()).await.expect("create"));
    assert!(
        !store.create(id, &spec()).await.expect("create twice"),
        "create does not overwrite"
    );
    assert_eq!(store.spec(id).await.expect("spec"), Some(spec()));
    let first = store
        .append_all(
            id,
            vec![
                record(0, 0, "task"),
                record(2, 0, "b"),
                record(1, 1, "a2"),
                record(1, 0, "a"),
            ],
        )
        .await
        .expect("append");
    assert!(first.iter().all(|a| !a.already_existed));
    let again = store
        .append_all(id, vec![record(1, 0, "DIFFERENT"), record(3, 0, "c")])
        .await
        .expect("append");
    assert!(again[0].already_existed);
    assert_eq!(
        *again[0].record,
        *record(1, 0, "a"),
        "the stored entry is returned, not overwritten"
    );
    assert!(!again[1].already_existed);
    let one = store.append(id, record(3, 0, "c")).await.expect("append");
    assert!(one.already_existed);
    assert_eq!(store.count(id).await.expect("count"), 5);
    let mut keys = Vec::new();
    let mut after = None;
    loop {
        let page = store.page(id, after, 2).await.expect("page");
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 2);
        after = page.last().map(|r| r.key);
        keys.extend(page.iter().map(|r| r.key.to_string()));
    }
    assert_eq!(keys, ["cp0:e0", "cp1:e0", "cp1:e1", "cp2:e0", "cp3:e0"]);
    assert_eq!(store.count(&format!("{id}-none")).await.expect("count"), 0);
    assert_eq!(store.report(id).await.expect("report"), None);
    store.finish(id, &report(id)).await.expect("finish");
    assert_eq!(store.report(id).await.expect("report"), Some(report(id)));
}

/// Claims are exclusive, expire, are renewed only by their holder, and every refusal or lost
/// lease is counted.
pub async fn claims(store: &dyn Store, id: &str) {
    let long = Duration::from_secs(30);
    assert!(matches!(
        store.claim(&format!("{id}-none"), "w1", long).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(store.create(id, &spec()).await.expect("create"));
    assert_eq!(store.conflicts(id).await.expect("conflicts"), 0);
    let w1 = store.claim(id, "w1", long).await.expect("w1 claims");
    store
        .claim(id, "w1", long)
        .await
        .expect("w1 re-claims its own");
    match store.claim(id, "w2", long).await {
        Err(StoreError::Claimed { worker, .. }) => assert_eq!(worker, "w1"),
        other => panic!("w2 must be refused, got {other:?}"),
    }
    assert_eq!(store.conflicts(id).await.expect("conflicts"), 1);
    let mut w2 = w1.clone();
    w2.worker = "w2".into();
    assert!(matches!(
        store.renew(&w2).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert_eq!(store.conflicts(id).await.expect("conflicts"), 2);
    // An expired lease (a crashed worker) can be taken over.
    let mut expiring = w1.clone();
    expiring.duration = Duration::ZERO;
    store.renew(&expiring).await.expect("renew");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let w2 = store
        .claim(id, "w2", long)
        .await
        .expect("w2 takes over the expired claim");
    assert!(matches!(
        store.renew(&w1).await,
        Err(StoreError::LeaseLost { .. })
    ));
    store.release(&w2).await.expect("release");
    store
        .claim(id, "w3", long)
        .await
        .expect("a released claim is free");
    assert_eq!(store.conflicts(id).await.expect("conflicts"), 3);
}

/// A run's first and last writes: created already claimed (refused to other workers; creating
/// it again writes nothing), and its report stored with the claim given up in the same write
/// (free for any worker after; a claim another worker holds by then is left alone).
pub async fn created_claimed_and_released(store: &dyn Store, id: &str) {
    let long = Duration::from_secs(30);
    let refused = |claim: Result<_, StoreError>, holder: &str| match claim {
        Err(StoreError::Claimed { worker, .. }) => assert_eq!(worker, holder),
        other => panic!("the claim must be refused, {holder} holds it; got {other:?}"),
    };
    let lease = store
        .create_claimed(id, &spec(), "w1", long)
        .await
        .expect("create")
        .expect("a new execution");
    assert_eq!(
        (lease.execution.as_str(), lease.worker.as_str()),
        (id, "w1")
    );
    assert_eq!(store.spec(id).await.expect("spec"), Some(spec()));
    refused(store.claim(id, "w2", long).await, "w1");
    let mut other = spec();
    other.task = "another task".into();
    assert_eq!(
        store
            .create_claimed(id, &other, "w2", long)
            .await
            .expect("create"),
        None,
        "it exists"
    );
    assert_eq!(
        store.spec(id).await.expect("spec"),
        Some(spec()),
        "unchanged"
    );
    refused(store.claim(id, "w2", long).await, "w1");

    store
        .finish_released(&lease, &report(id))
        .await
        .expect("finish");
    assert_eq!(store.report(id).await.expect("report"), Some(report(id)));
    store
        .claim(id, "w2", long)
        .await
        .expect("the claim was given up with the report");
    store
        .finish_released(&lease, &report(id))
        .await
        .expect("finish again");
    refused(store.claim(id, "w3", long).await, "w2");
}

/// A run's last step, written with its report and the claim's release: all of it when none
/// of its keys is stored, else nothing (the claim is still held, the report absent). The keys
/// include one past SQLite's packing, which it stores apart.
pub async fn finishes_with_its_last_step(store: &dyn Store, id: &str) {
    let long = Duration::from_secs(30);
    let lease = store
        .create_claimed(id, &spec(), "w1", long)
        .await
        .expect("create")
        .expect("a new execution");
    let earlier = vec![record(0, 0, "task"), record(1, 0, "a step")];
    store.append_all(id, earlier.clone()).await.expect("append");
    let far = 1 << 27;
    let replayed = vec![record(1, 0, "a step"), record(2, 0, "the last step")];
    assert!(
        !store
            .finish_with_step(&lease, replayed, &report(id))
            .await
            .expect("finish"),
        "a key is stored: nothing is written"
    );
    assert_eq!(store.count(id).await.expect("count"), 2);
    assert_eq!(store.report(id).await.expect("report"), None);
    assert!(matches!(
        store.claim(id, "w2", long).await,
        Err(StoreError::Claimed { .. })
    ));

    let last = vec![record(2, 0, "the last step"), record(far, 3, "its stop")];
    assert!(
        store
            .finish_with_step(&lease, last.clone(), &report(id))
            .await
            .expect("finish"),
        "none of the keys is stored"
    );
    let all: Vec<Arc<Record>> = earlier.into_iter().chain(last).collect();
    assert_eq!(store.records(id).await.expect("records"), all);
    assert_eq!(store.count(id).await.expect("count"), 4);
    assert_eq!(store.report(id).await.expect("report"), Some(report(id)));
    store
        .claim(id, "w2", long)
        .await
        .expect("the claim was given up with the report");
}

/// An execution a worker cannot run is marked failed with its reason: only the claim's holder
/// can mark it, the reason reads back, and no worker claims it again. `private` stores may use
/// `claim_next` (a shared PostgreSQL database holds other tests' executions).
pub async fn fails_once_and_for_good(store: &dyn Store, id: &str, private: bool) {
    let long = Duration::from_secs(30);
    assert!(store.create(id, &spec()).await.expect("create"));
    let lease = if private {
        store
            .claim_next("w1", long)
            .await
            .expect("claim_next")
            .expect("the submitted execution is runnable")
    } else {
        store.claim(id, "w1", long).await.expect("claim")
    };
    assert_eq!(lease.execution, id);
    assert_eq!(store.failure(id).await.expect("read"), None);

    let mut other = lease.clone();
    other.worker = "w2".into();
    assert!(matches!(
        store.fail(&other, &failure()).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert_eq!(
        store.failure(id).await.expect("read"),
        None,
        "nothing written"
    );
    store
        .fail(&lease, &failure())
        .await
        .expect("the holder fails it");
    assert_eq!(store.failure(id).await.expect("read"), Some(failure()));
    assert_eq!(store.report(id).await.expect("read"), None);
    if private {
        assert_eq!(
            store.claim_next("w2", long).await.expect("claim_next"),
            None,
            "a failed execution is never claimed again"
        );
    }
    assert!(
        matches!(
            store.fail(&lease, &failure()).await,
            Err(StoreError::LeaseLost { .. })
        ),
        "the claim was given up with the failure"
    );

    // An execution that ended keeps its report: it cannot be marked failed, even by its holder.
    let ended = format!("{id}-ended");
    assert!(store.create(&ended, &spec()).await.expect("create"));
    let lease = store.claim(&ended, "w1", long).await.expect("claim");
    store.finish(&ended, &report(&ended)).await.expect("finish");
    assert!(matches!(
        store.fail(&lease, &failure()).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert_eq!(store.failure(&ended).await.expect("read"), None);
    assert_eq!(
        store.report(&ended).await.expect("read"),
        Some(report(&ended))
    );
}

/// The whole contract on `store`.
pub async fn contract(store: &dyn Store, prefix: &str, private: bool) {
    appends_and_pages(store, &unique(&format!("{prefix}-append"))).await;
    claims(store, &unique(&format!("{prefix}-claims"))).await;
    created_claimed_and_released(store, &unique(&format!("{prefix}-created"))).await;
    finishes_with_its_last_step(store, &unique(&format!("{prefix}-last"))).await;
    fails_once_and_for_good(store, &unique(&format!("{prefix}-failed")), private).await;
    cells(store, &unique(&format!("{prefix}-cell"))).await;
    listings(store, &unique(&format!("{prefix}-list"))).await;
    reports_keep_their_trace(store, &unique(&format!("{prefix}-trace"))).await;
    suspends(store, &unique(&format!("{prefix}-suspend")), private).await;
    reopens(store, &unique(&format!("{prefix}-reopen"))).await;
}

/// A raise (`terminus resume --raise`): an ended execution goes on, its raise's records and
/// the cleared report in one transaction under the raiser's claim; it lists as not ended while
/// a raise is its last word, and ended again when its next stop comes; a raise of what has not
/// ended, or whose keys are stored, writes nothing.
pub async fn reopens(store: &dyn Store, id: &str) {
    use terminus_kernel::{AbortReason, Outcome, Raise, Rule, Stop};
    use terminus_runtime::{ExecutionFilter, ExecutionStatus};
    let long = Duration::from_secs(30);
    let status = || async {
        store
            .executions(&ExecutionFilter::all())
            .await
            .expect("list")
            .into_iter()
            .find(|s| s.execution == id)
            .map(|s| (s.status, s.outcome))
            .expect("listed")
    };
    let stop = |steps| Stop {
        outcome: Outcome::Aborted(AbortReason::MaxSteps),
        rule: Rule::StepBudget,
        result: None,
        stats: stats(steps, 1, 0),
        excluded_tools: Vec::new(),
    };
    let raised = entry(
        3,
        0,
        Entry::Raised {
            raises: vec![Raise {
                field: "max_steps".into(),
                to: 9,
            }],
        },
    );
    let lease = store
        .create_claimed(id, &spec(), "w1", long)
        .await
        .expect("create")
        .expect("a new execution");
    store
        .append_all(
            id,
            vec![record(0, 0, "task"), entry(2, 15, Entry::Stop(stop(2)))],
        )
        .await
        .expect("append");
    assert!(
        !store
            .reopen(id, vec![raised.clone()])
            .await
            .expect("reopen"),
        "no report stored yet: nothing to go on from"
    );
    assert_eq!(store.count(id).await.expect("count"), 2);
    let mut first = report(id);
    first.outcome = Outcome::Aborted(AbortReason::MaxSteps);
    store.finish_released(&lease, &first).await.expect("finish");
    let stopped = Outcome::Aborted(AbortReason::MaxSteps);
    assert_eq!(status().await, (ExecutionStatus::Ended, Some(stopped)));

    let lease = store.claim(id, "w2", long).await.expect("claim to raise");
    assert!(
        !store
            .reopen(id, vec![record(0, 0, "task"), raised.clone()])
            .await
            .expect("reopen"),
        "a key is stored: nothing is written"
    );
    assert_eq!(store.count(id).await.expect("count"), 2);
    assert_eq!(store.report(id).await.expect("report"), Some(first.clone()));

    assert!(
        store
            .reopen(id, vec![raised.clone()])
            .await
            .expect("reopen")
    );
    assert_eq!(store.report(id).await.expect("report"), None);
    assert_eq!(store.count(id).await.expect("count"), 3);
    // The raiser holds the claim it took; the first stop stays in the journal.
    assert_eq!(status().await, (ExecutionStatus::Running, None));
    assert!(matches!(
        store.claim(id, "w3", long).await,
        Err(StoreError::Claimed { .. })
    ));
    assert!(
        !store
            .reopen(id, vec![entry(4, 0, Entry::Cancel)])
            .await
            .expect("reopen"),
        "a second raise finds no report: the first came first"
    );
    store.release(&lease).await.expect("release");
    assert_eq!(status().await, (ExecutionStatus::Interrupted, None));

    // It stops again: ended, with the last stop.
    let lease = store.claim(id, "w2", long).await.expect("claim");
    let again = vec![entry(5, 15, Entry::Stop(stop(5)))];
    let mut second = first.clone();
    second.result = Some("stopped again".into());
    assert!(
        store
            .finish_with_step(&lease, again, &second)
            .await
            .expect("finish")
    );
    assert_eq!(status().await, (ExecutionStatus::Ended, Some(stopped)));
    assert_eq!(store.report(id).await.expect("report"), Some(second));
}

/// A decision on a held call: `call`'s, under key `cp1:e{index}`.
fn decided(index: u32, call: &str) -> Arc<Record> {
    Arc::new(Record {
        key: Key::new(1, index),
        entry: Entry::Decided {
            call_id: call.into(),
            decision: terminus_kernel::Decision::Approve,
        },
    })
}

/// A suspension (`docs/approvals.md`): the claim released with it, no worker claiming the
/// execution while calls wait; decisions counted down one at a time, each written once, the
/// last ending the suspension and adding its length to the paused time; a decision on what is
/// not suspended refused, nothing written.
pub async fn suspends(store: &dyn Store, id: &str, private: bool) {
    use terminus_runtime::{ExecutionFilter, ExecutionStatus};
    let long = Duration::from_secs(30);
    let status = |list: Vec<terminus_runtime::ExecutionSummary>| {
        list.into_iter()
            .find(|s| s.execution == id)
            .map(|s| s.status)
    };
    assert!(store.create(id, &spec()).await.expect("create"));
    store
        .append(id, record(0, 0, "task"))
        .await
        .expect("append");
    assert!(matches!(
        store.decide(id, decided(40, "a"), 1_000).await,
        Err(StoreError::NotSuspended(_))
    ));
    assert_eq!(store.count(id).await.expect("count"), 1, "nothing written");
    let lease = store.claim(id, "w1", long).await.expect("claim");
    store.suspend(&lease, 2, 1_000).await.expect("suspend");
    let s = store.suspension(id).await.expect("read");
    assert_eq!(
        (s.pending, s.since_unix_ms, s.paused_ms),
        (2, Some(1_000), 0)
    );
    // A resume that finds the calls undecided suspends again: the suspension keeps its start.
    let again = store.claim(id, "w1", long).await.expect("a claim by id");
    store
        .suspend(&again, 2, 1_100)
        .await
        .expect("suspend again");
    assert_eq!(
        store.suspension(id).await.expect("read").since_unix_ms,
        Some(1_000)
    );
    let all = ExecutionFilter::all();
    assert_eq!(
        status(store.executions(&all).await.expect("list")),
        Some(ExecutionStatus::Suspended)
    );
    // The claim went with the suspension; a suspended execution is not runnable.
    assert!(matches!(
        store.renew(&lease).await,
        Err(StoreError::LeaseLost { .. })
    ));
    if private {
        // Every other runnable execution of the store is taken; this one never is.
        while let Some(next) = store.claim_next("w2", long).await.expect("poll") {
            assert_ne!(next.execution, id, "a suspended execution was claimed");
        }
    }
    let first = store
        .decide(id, decided(40, "a"), 1_200)
        .await
        .expect("decide a");
    assert!(!first.already_existed);
    let again = store
        .decide(id, decided(40, "a"), 1_300)
        .await
        .expect("decide a again");
    assert!(again.already_existed, "the same key is written once");
    assert_eq!(store.suspension(id).await.expect("read").pending, 1);
    store
        .decide(id, decided(41, "b"), 1_500)
        .await
        .expect("decide b");
    let s = store.suspension(id).await.expect("read");
    assert_eq!((s.pending, s.paused_ms), (0, 500), "{s:?}");
    assert!(s.is_decided());
    assert_eq!(
        status(store.executions(&all).await.expect("list")),
        Some(ExecutionStatus::Waiting)
    );
    // Decided: runnable again, and taking it up ends the suspension.
    if private {
        let next = store.claim_next("w2", long).await.expect("poll");
        assert_eq!(
            next.map(|l| l.execution),
            Some(id.to_owned()),
            "the only one left"
        );
    } else {
        store.claim(id, "w2", long).await.expect("claim");
    }
    let s = store.suspension(id).await.expect("read");
    assert_eq!((s.pending, s.since_unix_ms, s.paused_ms), (0, None, 500));
    assert!(matches!(
        store.decide(id, decided(42, "c"), 2_000).await,
        Err(StoreError::NotSuspended(_))
    ));
    assert_eq!(store.count(id).await.expect("count"), 3);
}

/// A short run of the kernel alone (a tool turn, its result, an answer): its records as the
/// runtime journals them, and its report.
pub fn kernel_run(id: &str) -> (Vec<Arc<Record>>, Report) {
    use terminus_kernel::{
        Command, Event, Handled, Machine, ModelTurn, ToolCall, ToolOutcome, ToolResult,
        step_records,
    };
    let mut machine = Machine::new(terminus_kernel::Policy::default()).expect("a valid policy");
    let _first: Vec<Command> = std::iter::from_fn(|| machine.poll_command()).collect();
    let call = ToolCall {
        id: "c1".into(),
        name: "read".into(),
        arguments: serde_json::json!({ "file": 1 }).into(),
    };
    let events = [
        Event::ModelTurn(ModelTurn {
            tool_calls: vec![call],
            ..ModelTurn::default()
        }),
        Event::ToolResults(vec![ToolResult {
            call_id: "c1".into(),
            name: "read".into(),
            outcome: ToolOutcome::Ok(serde_json::json!("contents").into()),
        }]),
        Event::ModelTurn(ModelTurn {
            text: "Done.".into(),
            needs_more_work: Some(false),
            ..ModelTurn::default()
        }),
    ];
    let mut records = vec![record(0, 0, "task")];
    let mut trace = Vec::new();
    let mut stop = None;
    for event in events {
        let Handled::Step(step) = machine.handle(event.clone()) else {
            panic!("the kernel took no step on {event:?}");
        };
        let commands: Vec<Command> = std::iter::from_fn(|| machine.poll_command()).collect();
        records.extend(
            step_records(&event, &step, &commands, |_| true)
                .into_iter()
                .map(Arc::new),
        );
        trace.push(step);
        stop = stop.or_else(|| {
            commands.into_iter().find_map(|c| match c {
                Command::Stop(s) => Some(s),
                _ => None,
            })
        });
    }
    let entries = records.len() as u64;
    let report = Report::new(
        id.to_owned(),
        *stop.expect("the run stops"),
        Vec::new(),
        trace,
        entries,
        0,
    );
    (records, report)
}

/// A report reads back whole, its trace included (durable stores keep the trace as the
/// journal's transition entries, not in the report).
pub async fn reports_keep_their_trace(store: &dyn Store, id: &str) {
    assert!(store.create(id, &spec()).await.expect("create"));
    let (records, report) = kernel_run(id);
    assert_eq!(report.trace.len(), 3);
    store.append_all(id, records).await.expect("append");
    store.finish(id, &report).await.expect("finish");
    assert_eq!(store.report(id).await.expect("report"), Some(report));
}

fn stats(steps: u32, model_calls: u32, tool_calls: u32) -> terminus_kernel::Stats {
    let mut s = terminus_kernel::Stats::default();
    s.steps = steps;
    s.model_calls = model_calls;
    s.tool_calls = tool_calls;
    s
}

fn entry(checkpoint: u32, index: u32, entry: Entry) -> Arc<Record> {
    Arc::new(Record {
        key: Key::new(checkpoint, index),
        entry,
    })
}

/// Listing executions: one of each status, in creation order, with the counts of its report, of
/// its stop entry, or of its journal; and the filters of `terminus runs`.
pub async fn listings(store: &dyn Store, base: &str) {
    use terminus_kernel::{
        AbortReason, CompleteReason, Input, ModelTurn, Outcome, Phase, Rule, StepRecord, Stop,
        ToolCall, TurnKind,
    };
    use terminus_runtime::{ExecutionFilter, ExecutionStatus};
    let id = |i: u32, what: &str| format!("{base}-{i}-{what}");
    let lease = Duration::from_secs(60);
    let task = || entry(0, 0, Entry::User { task: "t".into() });
    let turn = || {
        entry(
            1,
            0,
            Entry::Assistant(ModelTurn {
                text: "on it".into(),
                ..ModelTurn::default()
            }),
        )
    };
    let step = entry(
        1,
        1,
        Entry::Transition(StepRecord {
            step: 1,
            from: Phase::Exploring,
            to: Phase::Acting,
            input: Input::Turn {
                kind: TurnKind::Tools {
                    runnable: 1,
                    refused: 0,
                    blocked: 0,
                },
                input_tokens: 0,
                output_tokens: 0,
            },
            rule: Rule::ToolTurn,
        }),
    );
    let intent = entry(
        1,
        16,
        Entry::ToolCall {
            call: ToolCall {
                id: "c1".into(),
                name: "search".into(),
                arguments: serde_json::json!({}).into(),
            },
            idempotent: true,
        },
    );
    let mut named = spec();
    named.name = Some("listed".into());

    // 1: waiting (created, never run).
    assert!(
        store
            .create(&id(1, "waiting"), &named)
            .await
            .expect("create")
    );
    // 2: interrupted (a step journaled, nobody holds it).
    let interrupted = id(2, "interrupted");
    assert!(store.create(&interrupted, &spec()).await.expect("create"));
    store
        .append_all(
            &interrupted,
            vec![task(), turn(), step.clone(), intent.clone()],
        )
        .await
        .expect("append");
    // 3: ended by its stop entry, the report never stored.
    let stopped = id(3, "stopped");
    assert!(store.create(&stopped, &spec()).await.expect("create"));
    let stop = Stop {
        outcome: Outcome::Aborted(AbortReason::MaxSteps),
        rule: Rule::StepBudget,
        result: None,
        stats: stats(2, 3, 1),
        excluded_tools: Vec::new(),
    };
    store
        .append_all(
            &stopped,
            vec![task(), turn(), entry(2, 15, Entry::Stop(stop))],
        )
        .await
        .expect("append");
    // 4: ended with its report.
    let ended = id(4, "ended");
    assert!(store.create(&ended, &spec()).await.expect("create"));
    store.append(&ended, task()).await.expect("append");
    let mut done = report(&ended);
    done.steps = 12;
    done.model_calls = 6;
    done.tool_calls = 5;
    store.finish(&ended, &done).await.expect("finish");
    // 5: failed by a worker.
    let failed = id(5, "failed");
    assert!(store.create(&failed, &spec()).await.expect("create"));
    let l = store.claim(&failed, "w1", lease).await.expect("claim");
    store.fail(&l, &failure()).await.expect("fail");
    // 6: running (claimed, a step journaled).
    let running = id(6, "running");
    assert!(store.create(&running, &spec()).await.expect("create"));
    store
        .append_all(&running, vec![task(), turn(), step, intent])
        .await
        .expect("append");
    let _held = store.claim(&running, "w2", lease).await.expect("claim");

    let mine = |filter: ExecutionFilter| async move {
        store
            .executions(&filter)
            .await
            .expect("list")
            .into_iter()
            .filter(|s| s.execution.starts_with(base))
            .collect::<Vec<_>>()
    };
    let all = mine(ExecutionFilter::all()).await;
    type Seen<'a> = (
        &'a str,
        ExecutionStatus,
        Option<&'a str>,
        u32,
        u32,
        u32,
        u64,
    );
    let seen: Vec<Seen<'_>> = all
        .iter()
        .map(|s| {
            (
                &s.execution[base.len() + 1..],
                s.status,
                s.outcome.map(|o| o.reason_str()),
                s.steps,
                s.model_calls,
                s.tool_calls,
                s.entries,
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("1-waiting", ExecutionStatus::Waiting, None, 0, 0, 0, 0),
            (
                "2-interrupted",
                ExecutionStatus::Interrupted,
                None,
                1,
                1,
                1,
                4
            ),
            (
                "3-stopped",
                ExecutionStatus::Ended,
                Some("max_steps"),
                2,
                3,
                1,
                3
            ),
            (
                "4-ended",
                ExecutionStatus::Ended,
                Some("answered"),
                12,
                6,
                5,
                1
            ),
            ("5-failed", ExecutionStatus::Failed, None, 0, 0, 0, 0),
            ("6-running", ExecutionStatus::Running, None, 1, 1, 1, 4),
        ]
    );
    assert_eq!(all[0].name.as_deref(), Some("listed"));
    assert_eq!(all[1].name, None);
    assert_eq!(all[2].rule, Some(Rule::StepBudget));
    assert_eq!(all[3].rule, Some(Rule::ClaimAnswered));

    let ids = |list: Vec<terminus_runtime::ExecutionSummary>| {
        list.into_iter()
            .map(|s| s.execution[base.len() + 1..].to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(mine(ExecutionFilter::all().complete(false)).await),
        ["3-stopped"],
        "aborted"
    );
    assert_eq!(
        ids(mine(ExecutionFilter::all().complete(true)).await),
        ["4-ended"],
        "complete"
    );
    assert_eq!(
        ids(mine(ExecutionFilter::all().reason(Outcome::Aborted(AbortReason::MaxSteps))).await),
        ["3-stopped"],
        "reason"
    );
    assert!(
        ids(mine(ExecutionFilter::all().reason(Outcome::Complete(CompleteReason::Verified))).await)
            .is_empty(),
        "no execution of mine was verified"
    );
    assert_eq!(
        ids(mine(ExecutionFilter::all().min_steps(2)).await),
        ["3-stopped", "4-ended"],
        "min steps"
    );
    assert_eq!(
        ids(mine(
            ExecutionFilter::all()
                .complete(true)
                .reason(Outcome::Complete(CompleteReason::Answered))
                .min_steps(13)
        )
        .await),
        Vec::<String>::new(),
        "filters combine"
    );
    // Every listed summary passes its own filter as the stores' queries apply it.
    for s in &all {
        assert!(ExecutionFilter::all().matches(s));
    }
}

/// Cells: absent until written, then versioned; a write naming a stale version (or creating a
/// cell that exists) writes nothing; the value comes back as written.
pub async fn cells(store: &dyn Store, key: &str) {
    assert_eq!(store.cell(key).await.expect("read"), None);
    let first = serde_json::json!({ "state": "closed", "failures": 0 });
    assert_eq!(
        store.put_cell(key, None, &first).await.expect("create"),
        Some(1)
    );
    assert_eq!(
        store
            .put_cell(key, None, &first)
            .await
            .expect("create again"),
        None,
        "a second creation must lose"
    );
    let second = serde_json::json!({ "state": "open", "since_ms": 12, "note": "é \" ' ✓" });
    assert_eq!(
        store.put_cell(key, Some(2), &second).await.expect("stale"),
        None
    );
    assert_eq!(
        store.put_cell(key, Some(1), &second).await.expect("write"),
        Some(2)
    );
    assert_eq!(
        store
            .put_cell(key, Some(1), &first)
            .await
            .expect("stale write"),
        None,
        "the first writer's version is stale now"
    );
    let cell = store.cell(key).await.expect("read").expect("written");
    assert_eq!((cell.version, cell.value), (2, second));
}
