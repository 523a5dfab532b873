//! The orchestrator's clocks under tokio's paused clock: each backoff delay, per-agent timeouts
//! with their clamp, the execution timeout, every breaker transition (half-open after five
//! minutes), an agent starting as soon as its own dependencies ended, the watchdog, and the
//! host's cancel. Agents are real kernel runs on a model that takes the time it is told.

use async_trait::async_trait;
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use terminus_kernel::{ModelErrorKind, ModelTurn, Policy};
use terminus_orchestrator::{
    Breaker, Context, Launch, Launcher, Orchestration, PLAN_STOP_MARGIN_MS, Plan, PlanEvent,
    PlanReason, PlanReport, Status, TokioClock, Why,
};
use terminus_runtime::{
    KillSwitch, MemoryStore, Model, ModelError, ModelFailure, ModelRequest, Report, Run, RunError,
    RuntimeConfig, Store,
};
use tokio::time::Instant;

/// What an attempt's model does.
#[derive(Debug, Clone, Copy)]
enum Act {
    /// Answers after this many ms.
    Answer(u64),
    /// Fails (auth, not retried by the kernel) after this many ms.
    Fail(u64),
    /// Never answers (the run ends at its deadline).
    Hang,
    /// The launcher itself never returns, deaf to the kill switch and the deadline.
    Deaf,
}

struct Timed(Act);

#[async_trait]
impl Model for Timed {
    async fn complete(&self, _: ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        match self.0 {
            Act::Answer(ms) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(ModelTurn {
                    text: "done".into(),
                    ..ModelTurn::default()
                })
            }
            Act::Fail(ms) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Err(ModelFailure::new(ModelErrorKind::Auth, "refused").into())
            }
            Act::Hang | Act::Deaf => {
                tokio::time::sleep(Duration::from_secs(86_400)).await;
                Err(ModelFailure::new(ModelErrorKind::Auth, "too late").into())
            }
        }
    }
}

/// Per agent id, what each attempt does (the last one repeats); the policies it was given.
#[derive(Default)]
struct Scripted {
    acts: HashMap<String, Vec<Act>>,
    policies: Mutex<Vec<(String, Policy)>>,
}

impl Scripted {
    fn with(mut self, id: &str, acts: &[Act]) -> Scripted {
        self.acts.insert(id.into(), acts.to_vec());
        self
    }
}

#[async_trait]
impl Launcher for Scripted {
    async fn launch(&self, l: Launch) -> Result<Report, RunError> {
        let attempt: usize = l
            .execution
            .rsplit('/')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("attempt number");
        let acts = self
            .acts
            .get(&l.agent.id)
            .map_or(&[Act::Answer(0)][..], |a| a);
        let act = acts[(attempt - 1).min(acts.len() - 1)];
        let mut policy = Policy::default();
        l.grant.apply(&mut policy);
        self.policies
            .lock()
            .expect("lock")
            .push((l.agent.id.clone(), policy.clone()));
        if let Act::Deaf = act {
            tokio::time::sleep(Duration::from_secs(86_400)).await;
        }
        // No per-call timeout: the run's deadline is what ends a hanging model.
        let config = RuntimeConfig {
            model_timeout: None,
            ..l.config
        };
        Run::new(l.task, policy, Arc::new(Timed(act)))
            .config(config)
            .execution(l.execution)
            .store(l.store)
            .kill_switch(l.kill)
            .execute()
            .await
    }
}

fn plan(json: serde_json::Value) -> Plan {
    let no_env = |_: &str| None;
    let no_live = |_: &Path, _: Option<u64>| Err("no live agents here".to_owned());
    let cx = Context {
        base: Path::new("."),
        env: &no_env,
        live: &no_live,
        scenario: &terminus_scenario::plan::script,
        host_agents: false,
    };
    Plan::parse(&json.to_string(), &cx).expect("a valid plan")
}

/// An agent with a placeholder scenario (the scripted launcher decides what it does).
fn agent(id: &str, deps: &[&str], extra: serde_json::Value) -> serde_json::Value {
    let mut a = json!({
        "id": id,
        "depends_on": deps,
        "scenario": { "task": id, "model": { "turns": [ { "text": "unused" } ] } }
    });
    if let (Some(a), Some(extra)) = (a.as_object_mut(), extra.as_object()) {
        a.extend(extra.clone());
    }
    a
}

type Events = Arc<Mutex<Vec<(u64, String)>>>;

async fn run(
    plan: Plan,
    execution: &str,
    launcher: Arc<Scripted>,
    store: Arc<dyn Store>,
    clock: TokioClock,
    kill: Option<KillSwitch>,
) -> (PlanReport, Vec<(u64, String)>) {
    let events: Events = Arc::default();
    let seen = Arc::clone(&events);
    let start = Instant::now();
    let mut o = Orchestration::new(plan, execution)
        .store(store, false)
        .launcher(launcher)
        .clock(Arc::new(clock))
        .observer(move |e: &PlanEvent| {
            let ms = u64::try_from(start.elapsed().as_millis()).expect("ms");
            seen.lock().expect("lock").push((ms, e.to_string()));
        });
    if let Some(kill) = kill {
        o = o.kill_switch(kill);
    }
    let report = o.execute().await.expect("the plan runs");
    let events = events.lock().expect("lock").clone();
    (report, events)
}

fn at(events: &[(u64, String)], prefix: &str) -> Vec<u64> {
    events
        .iter()
        .filter(|(_, e)| e.starts_with(prefix))
        .map(|(ms, _)| *ms)
        .collect()
}

fn store() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
}

#[tokio::test(start_paused = true)]
async fn retries_wait_two_four_then_eight_seconds_and_stop_at_the_cap() {
    let plan = plan(json!({
        "limits": { "circuit_breaker_failure_threshold": 10 },
        "agents": [ agent("flaky", &[], json!({ "retryable": true })) ]
    }));
    let launcher = Arc::new(Scripted::default().with("flaky", &[Act::Fail(100)]));
    let (report, events) = run(plan, "p", launcher, store(), TokioClock::new(0), None).await;
    assert_eq!(at(&events, "start  flaky"), [0, 2_100, 6_200, 14_300]);
    let retries: Vec<&str> = events
        .iter()
        .filter(|(_, e)| e.starts_with("retry"))
        .map(|(_, e)| e.as_str())
        .collect();
    assert_eq!(retries.len(), 3, "{events:?}");
    for (line, delay) in retries.iter().zip([2_000, 4_000, 8_000]) {
        assert!(line.contains(&format!("in {delay} ms")), "{line}");
    }
    assert_eq!(report.reason, PlanReason::AgentFailed);
    assert_eq!(report.agents[0].status, Status::Failed);
    assert_eq!(
        report.agents[0].attempts, 4,
        "AGENT_MAX_RETRIES 3 allows 4 runs"
    );
    // From its first start to its last attempt's end: four runs of 100 ms and the backoffs.
    assert_eq!(report.agents[0].duration_ms, Some(14_400));
}

#[tokio::test(start_paused = true)]
async fn an_agents_timeout_is_its_estimate_times_five_clamped_to_thirty_seconds() {
    let plan = plan(json!({
        "agents": [
            agent("quick", &[], json!({ "estimated_duration_ms": 1_000, "on_error": "skip", "degraded_result": "none" })),
            agent("slow", &[], json!({ "estimated_duration_ms": 200_000, "on_error": "skip", "degraded_result": "none" }))
        ]
    }));
    let launcher = Arc::new(
        Scripted::default()
            .with("quick", &[Act::Hang])
            .with("slow", &[Act::Hang]),
    );
    let (report, events) = run(
        plan,
        "p",
        Arc::clone(&launcher),
        store(),
        TokioClock::new(0),
        None,
    )
    .await;
    let policies = launcher.policies.lock().expect("lock").clone();
    let deadline = |id: &str| {
        policies
            .iter()
            .find(|(a, _)| a == id)
            .and_then(|(_, p)| p.deadline_ms)
    };
    assert_eq!(deadline("quick"), Some(30_000), "5 s clamped up to 30 s");
    assert_eq!(
        deadline("slow"),
        Some(600_000),
        "1000 s clamped down to 10 min"
    );
    assert_eq!(at(&events, "degrade quick"), [30_000]);
    assert_eq!(at(&events, "degrade slow"), [600_000]);
    assert_eq!(report.reason, PlanReason::Degraded);
    let quick = &report.agents[0];
    assert_eq!(
        quick.report.as_ref().map(|r| r.outcome.reason_str()),
        Some("deadline")
    );
    assert!(
        quick.clamped.is_empty(),
        "the agent's own timeout is not a clamp"
    );
}

#[tokio::test(start_paused = true)]
async fn the_execution_timeout_lowers_deadlines_warns_at_80_percent_and_stops_the_plan() {
    let plan = plan(json!({
        "limits": { "execution_timeout_ms": 40_000 },
        "agents": [
            agent("first", &[], json!({})),
            agent("second", &["first"], json!({})),
            agent("third", &["second"], json!({}))
        ]
    }));
    let launcher = Arc::new(
        Scripted::default()
            .with("first", &[Act::Answer(20_000)])
            .with("second", &[Act::Hang]),
    );
    let (report, events) = run(
        plan,
        "p",
        Arc::clone(&launcher),
        store(),
        TokioClock::new(0),
        None,
    )
    .await;
    let policies = launcher.policies.lock().expect("lock").clone();
    assert_eq!(
        policies[1].1.deadline_ms,
        Some(20_000 + PLAN_STOP_MARGIN_MS),
        "what the plan has left, and the margin by which the plan's stop comes first"
    );
    assert_eq!(report.agents[1].clamped, ["deadline_ms"]);
    assert_eq!(at(&events, "warning: 32000 ms"), [32_000]);
    assert_eq!(report.reason, PlanReason::ExecutionTimeout);
    assert_eq!(report.outcome, "aborted");
    assert_eq!(report.elapsed_ms, 40_000);
    assert_eq!(report.agents[0].status, Status::Complete);
    assert_eq!(report.agents[1].status, Status::Failed);
    assert_eq!(report.agents[2].status, Status::NotRun);
}

#[tokio::test(start_paused = true)]
async fn the_breaker_opens_refuses_then_probes_after_five_minutes_and_closes() {
    let shared = store();
    let clock = TokioClock::new(1_000_000);
    let limits = json!({ "agent_max_retries": 5, "agent_retry_base_delay_ms": 10 });
    let p = || {
        plan(json!({
            "limits": limits,
            "agents": [ agent("api", &[], json!({ "retryable": true })) ]
        }))
    };
    // Three failures in a row open it; the retries stop there (three runs, not six).
    let failing = Arc::new(Scripted::default().with("api", &[Act::Fail(0)]));
    let (report, events) = run(p(), "p1", failing, Arc::clone(&shared), clock, None).await;
    assert_eq!(report.agents[0].attempts, 3);
    assert!(
        events
            .iter()
            .any(|(_, e)| e == "breaker api: closed -> open"),
        "{events:?}"
    );
    // Another plan on the same journal is refused at once: no run.
    let healthy = Arc::new(Scripted::default().with("api", &[Act::Answer(0)]));
    let (report, _) = run(
        p(),
        "p2",
        Arc::clone(&healthy),
        Arc::clone(&shared),
        clock,
        None,
    )
    .await;
    assert_eq!(report.agents[0].attempts, 0);
    assert_eq!(report.agents[0].status, Status::Failed);
    assert!(matches!(
        report.agents[0].why,
        Some(Why::CircuitOpen { .. })
    ));
    // Five minutes later one probe runs, succeeds, and the breaker closes.
    tokio::time::advance(Duration::from_millis(300_000)).await;
    let (report, events) = run(p(), "p3", healthy, Arc::clone(&shared), clock, None).await;
    let lines: Vec<&str> = events.iter().map(|(_, e)| e.as_str()).collect();
    assert!(
        lines.contains(&"breaker api: open -> half_open"),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"start  api (attempt 1), half-open probe"),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"breaker api: half_open -> closed"),
        "{lines:?}"
    );
    assert_eq!(report.reason, PlanReason::AllComplete);
    let cell = shared
        .cell("breaker/api")
        .await
        .expect("read")
        .expect("written");
    assert_eq!(
        serde_json::from_value::<Breaker>(cell.value).expect("a breaker"),
        Breaker::Closed { failures: 0 }
    );
}

#[tokio::test(start_paused = true)]
async fn an_agent_starts_when_its_own_dependencies_end_not_its_whole_level() {
    let plan = plan(json!({
        "agents": [
            agent("slow", &[], json!({})),
            agent("fast", &[], json!({})),
            agent("after-fast", &["fast"], json!({})),
            agent("after-both", &["slow", "fast"], json!({}))
        ]
    }));
    let launcher = Arc::new(
        Scripted::default()
            .with("slow", &[Act::Answer(10_000)])
            .with("fast", &[Act::Answer(1_000)]),
    );
    let (report, events) = run(plan, "p", launcher, store(), TokioClock::new(0), None).await;
    assert_eq!(at(&events, "start  after-fast"), [1_000]);
    assert_eq!(at(&events, "start  after-both"), [10_000]);
    assert_eq!(report.reason, PlanReason::AllComplete);
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_abandons_a_run_deaf_to_its_deadline() {
    let plan = plan(json!({
        "agents": [ agent("deaf", &[], json!({ "on_error": "skip" })) ]
    }));
    let launcher = Arc::new(Scripted::default().with("deaf", &[Act::Deaf]));
    let (report, events) = run(plan, "p", launcher, store(), TokioClock::new(0), None).await;
    // Its timeout is 5 min (the default estimate of a minute, times 5), plus the grace.
    assert_eq!(at(&events, "skip   deaf"), [305_000]);
    let deaf = &report.agents[0];
    assert_eq!(deaf.status, Status::Skipped);
    assert!(
        deaf.error
            .as_deref()
            .is_some_and(|e| e.contains("watchdog")),
        "{deaf:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_host_cancels_the_plan_and_its_running_agents() {
    let plan = plan(json!({
        "agents": [
            agent("long", &[], json!({})),
            agent("next", &["long"], json!({}))
        ]
    }));
    let launcher = Arc::new(Scripted::default().with("long", &[Act::Hang]));
    let kill = KillSwitch::after(Duration::from_secs(7));
    let (report, events) = run(plan, "p", launcher, store(), TokioClock::new(0), Some(kill)).await;
    assert_eq!(report.reason, PlanReason::Cancelled);
    assert_eq!(report.outcome, "aborted");
    assert_eq!(at(&events, "cancel running agents"), [7_000]);
    let long = &report.agents[0];
    assert_eq!(
        long.report.as_ref().map(|r| r.outcome.reason_str()),
        Some("cancelled")
    );
    assert_eq!(report.agents[1].status, Status::NotRun);
}
