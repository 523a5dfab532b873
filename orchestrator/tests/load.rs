//! The load test: 50 plans of 10 agents each, run at once on tokio's real clock, journaled
//! durably on SQLite and on PostgreSQL (`TERMINUS_PG_URL`; without it that half is skipped with
//! a printed reason, and with `CI=true` it fails instead). A tenth of the agents hang: 40 on a
//! tool that never answers (their deadline must end them) and 10 deaf to their deadline and
//! kill switch (only the watchdog ends them); every fifth plan has a plan timeout shorter than
//! its work. Checked, for every plan and agent:
//!
//! - every timeout that fires (an agent's deadline, the watchdog, a plan's execution timeout)
//!   fires no earlier than its bound and at most [`TOLERANCE`] after it;
//! - every plan ends (the whole load is bounded by [`HANG_LIMIT`]), with the reason its agents
//!   call for: a timed plan `execution_timeout`, any other `all_complete` or `degraded`;
//! - no agent runs twice: the launcher counts each agent's launches, which must equal the
//!   report's attempts and be 1 for every agent that started, and the journal holds its first
//!   attempt's execution and no second.
//!
//! The lateness of each kind of timeout (min, median, p95, p99, max) is printed
//! (`cargo test -p terminus-orchestrator --test load -- --nocapture`); `docs/performance.md`
//! keeps the figures. The agents' behaviours come from a fixed seed, so every run loads the
//! same plans; only the machine's timing varies.

use async_trait::async_trait;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use terminus_orchestrator::{
    Context, Launch, Launcher, Orchestration, Plan, PlanEvent, PlanReason, PlanReport, Status,
    WATCHDOG_GRACE_MS, attempt_execution,
};
use terminus_runtime::{Report, RunError, Store};
use terminus_scenario::plan::ScenarioLauncher;
use terminus_store::Durability;

/// Plans run at once.
const PLANS: usize = 50;
/// Agents per plan.
const AGENTS: usize = 10;
/// Every fifth plan (10 of 50) has [`PLAN_TIMEOUT_MS`], shorter than its work.
const TIMED_EVERY: usize = 5;
/// Agents whose tool never answers: their deadline ends them.
const HANGING: usize = 40;
/// Agents whose launch never returns, deaf to their deadline and kill switch: the watchdog
/// ends them. Only in plans without a plan timeout, whose end they would otherwise hold up to
/// the watchdog's bound rather than the plan's.
const DEAF: usize = 10;
/// Every agent's own deadline (its scenario's policy). The timeout derived from
/// `estimated_duration_ms` is 30 s at least; the policy's deadline lowers it, so the load stays
/// short.
const AGENT_DEADLINE_MS: u64 = 1_000;
/// The plan timeout of the timed plans: each is a chain of agents taking 0.4 to 0.6 s, 10 in
/// a row, so the timeout always comes first.
const PLAN_TIMEOUT_MS: u64 = 1_500;
/// The other plans' timeout, which must not fire.
const UNTIMED_PLAN_TIMEOUT_MS: u64 = 120_000;
/// How late a timeout may fire. Generous on purpose: the test runs on a shared 2-core CI
/// machine with other builds, and a fired timeout is only seen once the run's last write, the
/// breaker's and the plan's progress writes went through a store that 500 runs share (a few
/// PostgreSQL connections). Lateness beyond this is a bug, not noise.
const TOLERANCE: Duration = Duration::from_secs(2);
/// The whole load must have ended by then (the slowest plan needs about 7 s: a deaf agent's
/// 6 s watchdog, then a hanging dependent's 1 s); past it, a plan hung.
const HANG_LIMIT: Duration = Duration::from_secs(90);
/// The seed of the agents' behaviours.
const SEED: u64 = 0x10AD_0050;

/// What one agent does when launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    /// Its tool answers after this many ms, then the model answers.
    Work(u64),
    /// Its tool never answers.
    Hang,
    /// Its launch never returns.
    Deaf,
}

/// A small deterministic generator (splitmix64), so that every run loads the same plans.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).expect("below n")
    }

    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

fn timed(plan: usize) -> bool {
    plan % TIMED_EVERY == TIMED_EVERY - 1
}

/// Per plan, per agent, what it does: [`HANGING`] and [`DEAF`] agents drawn at random, the rest
/// working 20 to 200 ms (0.4 to 0.6 s in timed plans).
fn acts() -> Vec<Vec<Act>> {
    let mut rng = Rng(SEED);
    let mut acts: Vec<Vec<Act>> = (0..PLANS)
        .map(|p| {
            (0..AGENTS)
                .map(|_| {
                    Act::Work(if timed(p) {
                        rng.between(400, 600)
                    } else {
                        rng.between(20, 200)
                    })
                })
                .collect()
        })
        .collect();
    let mut slots: Vec<(usize, usize)> = (0..PLANS)
        .flat_map(|p| (0..AGENTS).map(move |a| (p, a)))
        .collect();
    for i in (1..slots.len()).rev() {
        let j = rng.below(i + 1);
        slots.swap(i, j);
    }
    let (mut hanging, mut deaf) = (0, 0);
    for (p, a) in slots {
        if hanging < HANGING {
            acts[p][a] = Act::Hang;
            hanging += 1;
        } else if deaf < DEAF && !timed(p) {
            acts[p][a] = Act::Deaf;
            deaf += 1;
        }
    }
    acts
}

/// A scenario that calls its one tool, which answers after `tool_ms`, then answers.
fn scenario(tool_ms: u64) -> Value {
    json!({
        "task": "work",
        "policy": { "deadline_ms": AGENT_DEADLINE_MS },
        "model": { "turns": [
            { "text": "working", "tool_calls": [ { "name": "work", "arguments": {} } ] },
            { "text": "done" }
        ] },
        "tools": { "work": { "results": [ { "ok": "worked", "delay_ms": tool_ms } ] } }
    })
}

/// An agent id no other plan or test run uses: breakers are kept per agent id in the store,
/// and PostgreSQL's database outlives the test.
fn agent_id(tag: &str, plan: usize, agent: usize) -> String {
    format!("{tag}-p{plan:02}-a{agent}")
}

/// Plan `p`: untimed plans are five chains of two agents (all ten may run at once), timed
/// plans one chain of ten. Every agent is `skip` with a `degraded_result`, not retryable, so
/// a hanging agent neither stops its plan nor runs again, and its dependents go on.
fn plan(tag: &str, p: usize, acts: &[Act]) -> Plan {
    let agents: Vec<Value> = acts
        .iter()
        .enumerate()
        .map(|(a, act)| {
            let deps: Vec<String> = match (timed(p), a) {
                (true, 0) => vec![],
                (true, _) => vec![agent_id(tag, p, a - 1)],
                (false, a) if a < 5 => vec![],
                (false, _) => vec![agent_id(tag, p, a - 5)],
            };
            let tool_ms = match act {
                Act::Work(ms) => *ms,
                // An hour: only the deadline ends it (a deaf agent's scenario never runs).
                Act::Hang | Act::Deaf => 3_600_000,
            };
            json!({
                "id": agent_id(tag, p, a),
                "depends_on": deps,
                "on_error": "skip",
                "degraded_result": "none",
                "scenario": scenario(tool_ms)
            })
        })
        .collect();
    let timeout = if timed(p) {
        PLAN_TIMEOUT_MS
    } else {
        UNTIMED_PLAN_TIMEOUT_MS
    };
    let file = json!({
        "name": format!("load-{p:02}"),
        "limits": { "execution_timeout_ms": timeout, "max_concurrency": AGENTS },
        "agents": agents
    });
    let no_env = |_: &str| None;
    let no_live = |_: &Path, _: Option<u64>| Err("no live agents here".to_owned());
    let cx = Context {
        base: Path::new("."),
        env: &no_env,
        live: &no_live,
        scenario: &terminus_scenario::plan::script,
        host_agents: false,
    };
    Plan::parse(&file.to_string(), &cx).expect("a valid plan")
}

/// One launch as the launcher saw it.
#[derive(Debug, Clone)]
struct Launched {
    execution: String,
    deadline_ms: u64,
}

/// Runs scenarios as the command line does, counting every launch per agent; deaf agents'
/// launches never return.
struct Counting {
    deaf: HashSet<String>,
    launches: Mutex<HashMap<String, Vec<Launched>>>,
}

#[async_trait]
impl Launcher for Counting {
    async fn launch(&self, l: Launch) -> Result<Report, RunError> {
        self.launches
            .lock()
            .expect("lock")
            .entry(l.agent.id.clone())
            .or_default()
            .push(Launched {
                execution: l.execution.clone(),
                deadline_ms: l.grant.deadline_ms,
            });
        if self.deaf.contains(&l.agent.id) {
            // Neither its deadline nor its kill switch reaches it: the watchdog drops it.
            match std::future::pending::<Infallible>().await {}
        }
        ScenarioLauncher.launch(l).await
    }
}

/// What one plan's run came to, and when each of its events was seen.
struct PlanRun {
    started: Instant,
    report: PlanReport,
    events: Vec<(Instant, PlanEvent)>,
}

type Seen = Arc<Mutex<Vec<(Instant, PlanEvent)>>>;

/// One fired timeout: what, when it fired and its bound. As the host sees it: an agent's from
/// the plan's start event for it to its end event (so the run's own last write, the breaker's
/// and the plan's progress cell count), a plan's from the call to `execute` to its `Done` event
/// (its creation and claim in the store count).
struct Fired {
    what: String,
    fired: Duration,
    bound: Duration,
}

impl Fired {
    fn lateness(&self) -> Option<Duration> {
        self.fired.checked_sub(self.bound)
    }
}

/// The kinds of timeout, in the order they are printed.
const KINDS: [&str; 3] = ["agent deadline", "watchdog", "plan timeout"];

/// The load on `store`, checked; `label` names it in messages.
async fn load(store: Arc<dyn Store>, label: &'static str) {
    let tag = {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("load-{}-{nanos}", std::process::id())
    };
    let acts = acts();
    let deaf = acts
        .iter()
        .enumerate()
        .flat_map(|(p, plan)| {
            let tag = &tag;
            plan.iter()
                .enumerate()
                .filter(|(_, act)| **act == Act::Deaf)
                .map(move |(a, _)| agent_id(tag, p, a))
        })
        .collect();
    let launcher = Arc::new(Counting {
        deaf,
        launches: Mutex::default(),
    });
    let ended: Arc<Mutex<BTreeSet<usize>>> = Arc::default();
    let begin = Instant::now();
    let tasks: Vec<_> = acts
        .iter()
        .enumerate()
        .map(|(p, plan_acts)| {
            let plan = plan(&tag, p, plan_acts);
            let execution = format!("{tag}-p{p:02}");
            let store = Arc::clone(&store);
            let launcher = Arc::clone(&launcher);
            let ended = Arc::clone(&ended);
            tokio::spawn(async move {
                let seen: Seen = Arc::default();
                let events = Arc::clone(&seen);
                let started = Instant::now();
                let report = Orchestration::new(plan, execution)
                    .store(store, true)
                    .launcher(launcher)
                    .observer(move |e: &PlanEvent| {
                        if matches!(
                            e,
                            PlanEvent::Start { .. } | PlanEvent::Ended { .. } | PlanEvent::Done(_)
                        ) {
                            events
                                .lock()
                                .expect("lock")
                                .push((Instant::now(), e.clone()));
                        }
                    })
                    .execute()
                    .await
                    .expect("the plan runs");
                ended.lock().expect("lock").insert(p);
                let events = seen.lock().expect("lock").clone();
                PlanRun {
                    started,
                    report,
                    events,
                }
            })
        })
        .collect();
    let all = async {
        let mut runs = Vec::with_capacity(PLANS);
        for task in tasks {
            runs.push(task.await.expect("the plan's task"));
        }
        runs
    };
    let Ok(runs) = tokio::time::timeout(HANG_LIMIT, all).await else {
        let ended = ended.lock().expect("lock");
        let hung: Vec<usize> = (0..PLANS).filter(|p| !ended.contains(p)).collect();
        panic!(
            "{label}: plans {hung:?} did not end within {HANG_LIMIT:?}: they hang (the slowest \
             needs about 7 s)"
        );
    };
    let wall = begin.elapsed();

    let launches = launcher.launches.lock().expect("lock").clone();
    let mut fired: HashMap<&str, Vec<Fired>> = HashMap::new();
    let mut problems: Vec<String> = Vec::new();
    let mut ran = 0;
    let mut statuses: HashMap<Status, usize> = HashMap::new();
    for (p, run) in runs.iter().enumerate() {
        let execution = format!("{tag}-p{p:02}");
        let report = &run.report;
        let done: Vec<Instant> = run
            .events
            .iter()
            .filter(|(_, e)| matches!(e, PlanEvent::Done(_)))
            .map(|(at, _)| *at)
            .collect();
        let [done] = done[..] else {
            problems.push(format!("plan {p}: {} `Done` events", done.len()));
            continue;
        };
        if timed(p) {
            if report.reason != PlanReason::ExecutionTimeout || report.elapsed_ms < PLAN_TIMEOUT_MS
            {
                problems.push(format!(
                    "plan {p}: ended {} after {} ms, not by its {PLAN_TIMEOUT_MS} ms timeout",
                    report.reason, report.elapsed_ms
                ));
            }
            fired.entry("plan timeout").or_default().push(Fired {
                what: format!("plan {p}"),
                fired: done - run.started,
                bound: Duration::from_millis(PLAN_TIMEOUT_MS),
            });
        } else if !report.reason.is_complete() {
            problems.push(format!("plan {p}: ended {}", report.reason));
        }
        for (a, act) in acts[p].iter().enumerate() {
            let id = agent_id(&tag, p, a);
            let what = format!("plan {p} agent {a} ({act:?})");
            let Some(agent) = report.agents.get(a).filter(|r| r.id == id) else {
                problems.push(format!("{what}: not in the report"));
                continue;
            };
            *statuses.entry(agent.status).or_default() += 1;
            let launched = launches.get(&id).map_or(&[][..], Vec::as_slice);
            if launched.len() != agent.attempts as usize {
                problems.push(format!(
                    "{what}: launched {} times, the report says {} attempts",
                    launched.len(),
                    agent.attempts
                ));
            }
            let launch = match launched {
                [] => {
                    if !(timed(p) && agent.status == Status::NotRun) {
                        problems.push(format!("{what}: never ran, yet ended {}", agent.status));
                    }
                    continue;
                }
                [one] => one,
                more => {
                    problems.push(format!("{what}: ran {} times: {more:?}", more.len()));
                    continue;
                }
            };
            ran += 1;
            if launch.execution != attempt_execution(&execution, &id, 1) {
                problems.push(format!("{what}: launched as {}", launch.execution));
            }
            let at = |start: bool| {
                run.events
                    .iter()
                    .filter(|(_, e)| match e {
                        PlanEvent::Start { agent, .. } => start && *agent == id,
                        PlanEvent::Ended { agent, .. } => !start && *agent == id,
                        _ => false,
                    })
                    .map(|(at, _)| *at)
                    .collect::<Vec<_>>()
            };
            let (Ok([started]), Ok([ended])) = (
                <[Instant; 1]>::try_from(at(true)),
                <[Instant; 1]>::try_from(at(false)),
            ) else {
                problems.push(format!("{what}: not one start and one end event"));
                continue;
            };
            let took = ended - started;
            let outcome = agent
                .report
                .as_ref()
                .map(|r| r.outcome.reason_str().to_owned());
            let deadline = Duration::from_millis(launch.deadline_ms);
            match (act, agent.status, outcome.as_deref()) {
                (Act::Work(_), Status::Complete, Some(_)) => {}
                (Act::Deaf, Status::Degraded, None)
                    if agent
                        .error
                        .as_deref()
                        .is_some_and(|e| e.contains("watchdog")) =>
                {
                    fired.entry("watchdog").or_default().push(Fired {
                        what,
                        fired: took,
                        bound: deadline + Duration::from_millis(WATCHDOG_GRACE_MS),
                    });
                }
                // Its deadline: its own, or the time its plan had left.
                (Act::Hang | Act::Work(_), Status::Degraded, Some("deadline"))
                    if matches!(act, Act::Hang) || timed(p) =>
                {
                    fired.entry("agent deadline").or_default().push(Fired {
                        what,
                        fired: took,
                        bound: deadline,
                    });
                }
                // Its plan's timeout cancelled it (checked with the plan's).
                (Act::Hang | Act::Work(_), Status::Degraded, Some("cancelled")) if timed(p) => {}
                (_, status, outcome) => problems.push(format!(
                    "{what}: ended {status} ({outcome:?}, error {:?}) after {took:?}",
                    agent.error
                )),
            }
        }
        // The journal: every agent that ran has its first attempt's execution, none a second.
        for (a, act) in acts[p].iter().enumerate() {
            let id = agent_id(&tag, p, a);
            let first = attempt_execution(&execution, &id, 1);
            let second = attempt_execution(&execution, &id, 2);
            let ran = launches.contains_key(&id);
            let journaled = store.spec(&first).await.expect("readable").is_some();
            if ran && *act != Act::Deaf && !journaled {
                problems.push(format!(
                    "plan {p} agent {a}: no execution {first} journaled"
                ));
            }
            if store.spec(&second).await.expect("readable").is_some() {
                problems.push(format!("plan {p} agent {a}: a second attempt, {second}"));
            }
        }
    }

    let mut statuses: Vec<String> = statuses
        .into_iter()
        .map(|(s, n)| format!("{n} {}", s.name()))
        .collect();
    statuses.sort();
    let statuses = statuses.join(", ");
    eprintln!(
        "load on {label}: {PLANS} plans x {AGENTS} agents at once ({} with a {PLAN_TIMEOUT_MS} ms \
         plan timeout), {HANGING} hanging + {DEAF} deaf agents, {ran} agents ran, ended {statuses}, \
         wall {:.1} s",
        PLANS / TIMED_EVERY,
        wall.as_secs_f64()
    );
    for kind in KINDS {
        let samples = fired.get(kind).map_or(&[][..], Vec::as_slice);
        eprintln!("  {kind:<15} {}", distribution(samples));
        for f in samples {
            match f.lateness() {
                None => problems.push(format!(
                    "{}: the {kind} fired after {:?}, before its bound {:?}",
                    f.what, f.fired, f.bound
                )),
                Some(late) if late > TOLERANCE => problems.push(format!(
                    "{}: the {kind} fired {late:?} late (bound {:?}, tolerance {TOLERANCE:?})",
                    f.what, f.bound
                )),
                Some(_) => {}
            }
        }
    }
    // Agents of plans without a plan timeout all run: each hanging one's deadline fires, each
    // deaf one's watchdog (those of timed plans may not start before their plan's timeout).
    let count = |kind: &str| fired.get(kind).map_or(0, Vec::len);
    let hanging = (0..PLANS)
        .filter(|&p| !timed(p))
        .flat_map(|p| &acts[p])
        .filter(|act| **act == Act::Hang)
        .count();
    if count("agent deadline") < hanging || count("watchdog") != DEAF {
        problems.push(format!(
            "{} agent deadlines fired (at least the {hanging} of hanging agents in plans without \
             a plan timeout) and {} watchdogs (one per deaf agent, {DEAF})",
            count("agent deadline"),
            count("watchdog")
        ));
    }
    assert!(
        problems.is_empty(),
        "{label}: {} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// `n`, then min, median, p95, p99 and max lateness in ms (nearest rank).
fn distribution(samples: &[Fired]) -> String {
    let mut late: Vec<f64> = samples
        .iter()
        .map(|f| {
            let fired = f.fired.as_secs_f64();
            let bound = f.bound.as_secs_f64();
            (fired - bound) * 1_000.0
        })
        .collect();
    if late.is_empty() {
        return "n 0".into();
    }
    late.sort_by(f64::total_cmp);
    let rank = |q: f64| {
        let i = (q * late.len() as f64).ceil() as usize;
        late[i.clamp(1, late.len()) - 1]
    };
    format!(
        "n {:>3}  lateness ms: min {:.1}  median {:.1}  p95 {:.1}  p99 {:.1}  max {:.1}",
        late.len(),
        late[0],
        rank(0.5),
        rank(0.95),
        rank(0.99),
        late[late.len() - 1]
    )
}

/// One load at a time: the two stores' loads would otherwise share the machine's two cores and
/// each other's lateness.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A runtime like a host's: two worker threads, the real clock.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

#[test]
fn timeouts_fire_in_bounds_under_load_on_sqlite() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("load.db");
    let path = path.to_str().expect("a UTF-8 path");
    runtime().block_on(async {
        let store = terminus_store::open(path, Durability::Process)
            .await
            .expect("the SQLite journal opens");
        load(store, "sqlite").await;
    });
}

#[test]
fn timeouts_fire_in_bounds_under_load_on_postgres() {
    let Ok(url) = std::env::var("TERMINUS_PG_URL") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but TERMINUS_PG_URL is unset"
        );
        eprintln!(
            "skipping: TERMINUS_PG_URL is unset (e.g. postgres://postgres@127.0.0.1:5432/test)"
        );
        return;
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    runtime().block_on(async {
        let store = terminus_store::open(&url, Durability::Process)
            .await
            .expect("PostgreSQL reachable at TERMINUS_PG_URL");
        load(store, "postgres").await;
    });
}
