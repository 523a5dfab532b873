//! The plan's telemetry: its span, exported through the same layer as OTLP into memory
//! (`terminus_telemetry::capture`), is the parent of every agent's run span and carries the
//! plan's events (a retry, a breaker opening, a skip, a degradation); its metrics, as the
//! Prometheus recorder renders them; and each agent's `duration_ms`. Agents are real kernel runs
//! on a model that takes the time it is told, under tokio's paused clock.

use async_trait::async_trait;
use opentelemetry_sdk::trace::SpanData;
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use terminus_kernel::{ModelErrorKind, ModelTurn, Policy};
use terminus_orchestrator::{
    Context, Launch, Launcher, LocalPlan, Orchestration, Plan, PlanReason, PlanReport, Status,
    TokioClock,
};
use terminus_runtime::{
    MemoryStore, Model, ModelError, ModelFailure, ModelRequest, Report, Run, RunError,
    RuntimeConfig, Store, semconv,
};
use terminus_telemetry::{capture, render};

/// What an attempt's model does.
#[derive(Debug, Clone, Copy)]
enum Act {
    /// Answers after this many ms.
    Answer(u64),
    /// Fails (auth, not retried by the kernel) after this many ms.
    Fail(u64),
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
        }
    }
}

/// Per agent id, what each attempt does (the last one repeats; `Answer(0)` if unlisted).
#[derive(Default)]
struct Scripted(HashMap<String, Vec<Act>>);

impl Scripted {
    fn with(mut self, id: &str, acts: &[Act]) -> Scripted {
        self.0.insert(id.into(), acts.to_vec());
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
        let acts = self.0.get(&l.agent.id).map_or(&[Act::Answer(0)][..], |a| a);
        let act = acts[(attempt - 1).min(acts.len() - 1)];
        let mut policy = Policy::default();
        l.grant.apply(&mut policy);
        let config = RuntimeConfig {
            model_timeout: None,
            ..l.config
        };
        Run::new(l.task, policy, Arc::new(Timed(act)))
            .name(l.agent.id.clone())
            .config(config)
            .execution(l.execution)
            .store(l.store)
            .kill_switch(l.kill)
            .execute()
            .await
    }
}

fn plan(json: serde_json::Value) -> Plan {
    parse(json, false)
}

/// `json` as a plan; with `host_agents`, an agent with only a task is the host's function (the
/// packages' `runPlan` / `run_plan`).
fn parse(json: serde_json::Value, host_agents: bool) -> Plan {
    let no_env = |_: &str| None;
    let no_live = |_: &Path, _: Option<u64>| Err("no live agents here".to_owned());
    let cx = Context {
        base: Path::new("."),
        env: &no_env,
        live: &no_live,
        scenario: &terminus_scenario::plan::script,
        host_agents,
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

/// Runs `plan` on a current-thread runtime with tokio's clock paused (the spans and metrics of
/// this thread are those of this plan). Every test here runs its plans under `capture`, even
/// those that look at no span: `tracing` caches a callsite's interest when it is first hit, and
/// a thread with no subscriber hitting one while another test installs its own could leave it
/// disabled for that test.
fn run_plan(plan: Plan, execution: &str, launcher: Scripted) -> PlanReport {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(async {
        Orchestration::new(plan, execution)
            .launcher(Arc::new(launcher))
            .clock(Arc::new(TokioClock::new(1_000_000)))
            .execute()
            .await
            .expect("the plan runs")
    })
}

/// A plan with every event: `fetch` (a retryable `fail` agent) fails, is retried after 2 s,
/// fails again and its breaker opens (threshold 2), which fails the plan; meanwhile `extra`
/// fails and is skipped, `report` is skipped with it (its dependency has no result), and `side`
/// fails and degrades.
fn eventful() -> (Plan, Scripted) {
    let plan = plan(json!({
        "name": "eventful",
        "limits": { "circuit_breaker_failure_threshold": 2 },
        "agents": [
            agent("fetch", &[], json!({ "retryable": true })),
            agent("extra", &[], json!({ "on_error": "skip" })),
            agent("report", &["extra"], json!({ "on_error": "skip" })),
            agent("side", &[], json!({ "on_error": "skip", "degraded_result": "stale" })),
        ]
    }));
    let launcher = Scripted::default()
        .with("fetch", &[Act::Fail(100)])
        .with("extra", &[Act::Fail(10)])
        .with("side", &[Act::Fail(20)]);
    (plan, launcher)
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

/// The events named `name` on `span`, each as its fields.
fn events(span: &SpanData, name: &str) -> Vec<HashMap<String, String>> {
    span.events
        .iter()
        .filter(|e| e.name == name)
        .map(|e| {
            e.attributes
                .iter()
                .map(|kv| (kv.key.as_str().to_owned(), kv.value.to_string()))
                .collect()
        })
        .collect()
}

fn field<'a>(event: &'a HashMap<String, String>, key: &str) -> &'a str {
    event.get(key).map_or("", String::as_str)
}

#[test]
fn the_plan_span_is_the_parent_of_every_run_span() {
    let plan = plan(json!({
        "name": "pipeline",
        "agents": [
            agent("collect", &[], json!({})),
            agent("analyse", &["collect"], json!({})),
            agent("write", &["analyse"], json!({})),
        ]
    }));
    let (report, spans) = capture(|| run_plan(plan, "p1", Scripted::default()));
    assert_eq!(report.reason, PlanReason::AllComplete);

    let plans: Vec<&SpanData> = spans.iter().filter(|s| s.name == "plan pipeline").collect();
    assert_eq!(plans.len(), 1, "{}", render(&spans));
    let plan_span = plans[0];
    let plan_id = plan_span.span_context.span_id();
    // The plan span is the root of the trace: every span is of its tree.
    let ids: Vec<_> = spans.iter().map(|s| s.span_context.span_id()).collect();
    let roots: Vec<&str> = spans
        .iter()
        .filter(|s| !ids.contains(&s.parent_span_id))
        .map(|s| s.name.as_ref())
        .collect();
    assert_eq!(roots, ["plan pipeline"]);
    let runs: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name.starts_with("invoke_agent "))
        .collect();
    let mut names: Vec<&str> = runs.iter().map(|s| s.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "invoke_agent analyse",
            "invoke_agent collect",
            "invoke_agent write"
        ]
    );
    for run in &runs {
        assert_eq!(run.parent_span_id, plan_id, "{} is not a child", run.name);
        assert_eq!(
            run.span_context.trace_id(),
            plan_span.span_context.trace_id()
        );
    }
    // Every attempt's execution is the plan's, under the agent's id.
    let mut conversations: Vec<String> = runs
        .iter()
        .filter_map(|s| attribute(s, semconv::GEN_AI_CONVERSATION_ID))
        .collect();
    conversations.sort_unstable();
    assert_eq!(
        conversations,
        ["p1/analyse/1", "p1/collect/1", "p1/write/1"]
    );

    let attr = |key: &str| attribute(plan_span, key);
    assert_eq!(
        attr(semconv::TERMINUS_PLAN_NAME).as_deref(),
        Some("pipeline")
    );
    assert_eq!(
        attr(semconv::TERMINUS_PLAN_EXECUTION).as_deref(),
        Some("p1")
    );
    assert_eq!(attr(semconv::TERMINUS_PLAN_AGENTS).as_deref(), Some("3"));
    assert_eq!(attr(semconv::TERMINUS_OUTCOME).as_deref(), Some("complete"));
    assert_eq!(
        attr(semconv::TERMINUS_PLAN_REASON).as_deref(),
        Some("all_complete")
    );
    assert_eq!(attr(semconv::TERMINUS_RESUMED).as_deref(), Some("false"));
    assert_eq!(attr(semconv::ERROR_TYPE), None);
    assert_eq!(plan_span.status, opentelemetry::trace::Status::Unset);
    assert!(plan_span.events.is_empty(), "{:?}", plan_span.events);

    // Drawn as a tree: the plan at the root, each run one level in, its chat span below.
    let tree = render(&spans);
    assert!(tree.starts_with("plan pipeline [Internal]\n"), "{tree}");
    for name in ["collect", "analyse", "write"] {
        assert!(
            tree.contains(&format!("\n  invoke_agent {name} [Internal]\n")),
            "{tree}"
        );
    }
    assert!(tree.contains("\n    chat model [Client]\n"), "{tree}");
}

#[test]
fn retries_breaker_openings_skips_and_degradations_are_events_of_the_plan_span() {
    let (plan, launcher) = eventful();
    let (report, spans) = capture(|| run_plan(plan, "p2", launcher));
    assert_eq!(report.reason, PlanReason::AgentFailed);
    let plan_span = spans
        .iter()
        .find(|s| s.name == "plan eventful")
        .unwrap_or_else(|| panic!("no plan span in\n{}", render(&spans)));

    // fetch ran twice: two run spans under the plan, the first one aborted.
    let fetches: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == "invoke_agent fetch")
        .collect();
    assert_eq!(fetches.len(), 2, "{}", render(&spans));
    for run in &fetches {
        assert_eq!(run.parent_span_id, plan_span.span_context.span_id());
    }

    let retries = events(plan_span, semconv::EVENT_AGENT_RETRY);
    assert_eq!(retries.len(), 1, "{:?}", plan_span.events);
    let retry = &retries[0];
    assert_eq!(field(retry, semconv::GEN_AI_AGENT_NAME), "fetch");
    assert_eq!(field(retry, semconv::TERMINUS_ATTEMPT), "2");
    assert_eq!(field(retry, semconv::TERMINUS_DELAY_MS), "2000");
    assert!(
        field(retry, semconv::TERMINUS_AFTER).contains("model_error"),
        "{retry:?}"
    );

    let opened = events(plan_span, semconv::EVENT_BREAKER_OPEN);
    assert_eq!(opened.len(), 1, "{:?}", plan_span.events);
    assert_eq!(field(&opened[0], semconv::GEN_AI_AGENT_NAME), "fetch");
    assert_eq!(field(&opened[0], semconv::TERMINUS_BREAKER_FROM), "closed");
    // Opened when the second attempt failed (2.2 s in), for the default five minutes.
    assert_eq!(
        field(&opened[0], semconv::TERMINUS_BREAKER_UNTIL_MS),
        (1_000_000u64 + 2_200 + 300_000).to_string()
    );

    let skipped = events(plan_span, semconv::EVENT_AGENT_SKIPPED);
    let skips: Vec<(&str, &str)> = skipped
        .iter()
        .map(|e| {
            (
                field(e, semconv::GEN_AI_AGENT_NAME),
                field(e, semconv::TERMINUS_WHY),
            )
        })
        .collect();
    assert_eq!(
        skips,
        [("extra", "run_failed"), ("report", "dependency_skipped")]
    );
    assert!(
        field(&skipped[1], semconv::TERMINUS_DETAIL).contains("`extra` was skipped"),
        "{skipped:?}"
    );

    let degraded = events(plan_span, semconv::EVENT_AGENT_DEGRADED);
    assert_eq!(degraded.len(), 1, "{:?}", plan_span.events);
    assert_eq!(field(&degraded[0], semconv::GEN_AI_AGENT_NAME), "side");
    assert_eq!(field(&degraded[0], semconv::TERMINUS_WHY), "run_failed");

    // An aborted plan is an error span, its reason the error's type.
    assert_eq!(
        attribute(plan_span, semconv::TERMINUS_OUTCOME).as_deref(),
        Some("aborted")
    );
    assert_eq!(
        attribute(plan_span, semconv::ERROR_TYPE).as_deref(),
        Some("agent_failed")
    );
    assert!(
        matches!(plan_span.status, opentelemetry::trace::Status::Error { .. }),
        "{:?}",
        plan_span.status
    );
    // The report agrees.
    let status: Vec<Status> = report.agents.iter().map(|a| a.status).collect();
    assert_eq!(
        status,
        [
            Status::Failed,
            Status::Skipped,
            Status::Skipped,
            Status::Degraded
        ]
    );
}

#[test]
fn the_plan_metrics_count_runs_retries_openings_skips_and_degradations() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    capture(|| {
        metrics::with_local_recorder(&recorder, || {
            let (eventful, launcher) = eventful();
            run_plan(eventful, "m1", launcher);
            let simple =
                plan(json!({ "name": "simple", "agents": [ agent("only", &[], json!({})) ] }));
            run_plan(simple, "m2", Scripted::default());
        });
    });
    let body = handle.render();
    let value = |series: &str| -> f64 {
        body.lines()
            .find_map(|l| {
                l.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no `{series}` in:\n{body}"))
    };
    assert_eq!(
        value(r#"terminus_plans_total{outcome="aborted",reason="agent_failed"}"#),
        1.0
    );
    assert_eq!(
        value(r#"terminus_plans_total{outcome="complete",reason="all_complete"}"#),
        1.0
    );
    assert_eq!(value("terminus_agent_retries_total"), 1.0);
    assert_eq!(value("terminus_breaker_openings_total"), 1.0);
    assert_eq!(
        value(r#"terminus_agent_skips_total{why="run_failed"}"#),
        1.0
    );
    assert_eq!(
        value(r#"terminus_agent_skips_total{why="dependency_skipped"}"#),
        1.0
    );
    assert_eq!(
        value(r#"terminus_agent_degradations_total{why="run_failed"}"#),
        1.0
    );
    // Timed: the agents that ran (fetch, extra, side, only), not `report`, which never started.
    let timed: f64 = ["failed", "skipped", "degraded", "complete"]
        .iter()
        .map(|s| {
            value(&format!(
                r#"terminus_agent_duration_seconds_count{{status="{s}"}}"#
            ))
        })
        .sum();
    assert_eq!(timed, 4.0, "{body}");
    // fetch: 100 ms, 2 s of backoff, 100 ms.
    assert_eq!(
        value(r#"terminus_agent_duration_seconds_sum{status="failed"}"#),
        2.2
    );
    // The runtime's own metrics count the five runs beside them: fetch twice, extra and side
    // failed, only answered.
    assert_eq!(
        value(r#"terminus_runs_total{outcome="aborted",reason="model_error"}"#),
        4.0
    );
    assert_eq!(
        value(r#"terminus_runs_total{outcome="complete",reason="answered"}"#),
        1.0
    );
}

#[test]
fn each_agent_reports_its_wall_time_over_its_attempts() {
    let (plan, launcher) = eventful();
    let (report, _) = capture(|| run_plan(plan, "d1", launcher));
    let duration = |id: &str| {
        report
            .agents
            .iter()
            .find(|a| a.id == id)
            .unwrap_or_else(|| panic!("no agent {id}"))
            .duration_ms
    };
    // Two attempts of 100 ms with the 2 s backoff between them.
    assert_eq!(duration("fetch"), Some(2_200));
    assert_eq!(duration("extra"), Some(10));
    assert_eq!(duration("side"), Some(20));
    // Skipped on its dependency: it never started.
    assert_eq!(duration("report"), None);
    // In the JSON report as `duration_ms`, absent where it never started.
    let json: serde_json::Value =
        serde_json::from_str(&report.to_json_line()).expect("the report is JSON");
    assert_eq!(json["agents"][0]["duration_ms"], 2_200);
    assert!(json["agents"][2].get("duration_ms").is_none(), "{json}");
    // A report without the field (written before it existed) still reads.
    let mut old = json.clone();
    for agent in old["agents"].as_array_mut().expect("agents") {
        agent
            .as_object_mut()
            .expect("an agent")
            .remove("duration_ms");
    }
    let read: PlanReport = serde_json::from_value(old).expect("an older report reads");
    assert!(read.agents.iter().all(|a| a.duration_ms.is_none()));
}

#[test]
fn a_slow_agent_takes_at_least_its_model_time() {
    let plan = plan(json!({
        "name": "slow",
        "agents": [ agent("slow", &[], json!({})), agent("next", &["slow"], json!({})) ]
    }));
    let launcher = Scripted::default()
        .with("slow", &[Act::Answer(1_500)])
        .with("next", &[Act::Answer(250)]);
    let (report, _) = capture(|| run_plan(plan, "d2", launcher));
    assert_eq!(report.reason, PlanReason::AllComplete);
    let slow = report.agents[0].duration_ms.expect("slow ran");
    let next = report.agents[1].duration_ms.expect("next ran");
    assert!((1_500..1_600).contains(&slow), "{slow}");
    assert!((250..350).contains(&next), "{next}");
    assert!(slow + next <= report.elapsed_ms, "{report:?}");
}

#[test]
fn a_resumed_plan_times_each_agent_from_its_first_start() {
    let file = json!({
        "name": "resumed",
        "agents": [ agent("fetch", &[], json!({ "retryable": true })) ]
    });
    let launcher =
        || Arc::new(Scripted::default().with("fetch", &[Act::Fail(100), Act::Answer(100)]));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let orchestration = |store: &Arc<dyn Store>| {
        Orchestration::new(plan(file.clone()), "r1")
            .store(Arc::clone(store), true)
            .launcher(launcher())
            .clock(Arc::new(TokioClock::new(1_000_000)))
            .worker("w", Duration::from_secs(30))
    };
    let (report, spans) = capture(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime");
        runtime.block_on(async {
            // The first attempt fails at 100 ms; the process dies during the 2 s backoff.
            let first = orchestration(&store).execute();
            let cut = tokio::time::timeout(Duration::from_millis(1_000), first).await;
            assert!(cut.is_err(), "the plan ended before the crash: {cut:?}");
            orchestration(&store)
                .resume()
                .await
                .expect("the plan resumes")
        })
    });
    assert_eq!(report.reason, PlanReason::AllComplete);
    assert_eq!(report.agents[0].attempts, 2);
    // Plan time goes on from the 100 ms saved before the crash: the retry runs at once, 100 ms
    // more. The agent is timed from its first start, in the first process.
    assert_eq!(report.elapsed_ms, 200);
    assert_eq!(report.agents[0].duration_ms, Some(200));

    // Each process's plan span is the parent of the run it made; the second says it resumed.
    let plans: Vec<&SpanData> = spans.iter().filter(|s| s.name == "plan resumed").collect();
    assert_eq!(plans.len(), 2, "{}", render(&spans));
    let resumed: Vec<Option<String>> = plans
        .iter()
        .map(|s| attribute(s, semconv::TERMINUS_RESUMED))
        .collect();
    assert!(resumed.contains(&Some("false".into())), "{resumed:?}");
    assert!(resumed.contains(&Some("true".into())), "{resumed:?}");
    let runs: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == "invoke_agent fetch")
        .collect();
    // One run of `fetch` a process: the first, killed, and the retry after the resume.
    assert_eq!(runs.len(), 2, "{}", render(&spans));
    let mut executions = Vec::new();
    for run in runs {
        let parent = plans
            .iter()
            .find(|p| p.span_context.span_id() == run.parent_span_id)
            .unwrap_or_else(|| panic!("a run outside the plan spans:\n{}", render(&spans)));
        let execution = attribute(run, semconv::GEN_AI_CONVERSATION_ID);
        let expected = if attribute(parent, semconv::TERMINUS_RESUMED).as_deref() == Some("true") {
            "r1/fetch/2"
        } else {
            "r1/fetch/1"
        };
        assert_eq!(execution.as_deref(), Some(expected));
        executions.push(execution);
    }
    executions.sort();
    assert_eq!(
        executions,
        [Some("r1/fetch/1".to_owned()), Some("r1/fetch/2".to_owned())]
    );
    let second = plans
        .iter()
        .find(|s| attribute(s, semconv::TERMINUS_RESUMED).as_deref() == Some("true"))
        .expect("the resumed plan span");
    assert_eq!(
        attribute(second, semconv::TERMINUS_OUTCOME).as_deref(),
        Some("complete")
    );
    assert_eq!(
        attribute(second, semconv::TERMINUS_PLAN_ELAPSED_MS).as_deref(),
        Some("200")
    );
}

/// Drives `run` as a package's host loop does, each started agent ending at once: with its id
/// as its result, or failing when it is in `fail`. Returns the report.
fn drive_local(run: &mut LocalPlan, fail: &[&str]) -> serde_json::Value {
    let mut started = std::collections::VecDeque::new();
    loop {
        // The acts asked for are carried out before an attempt's end is told.
        while let Some(act) = run.next(0, 1_000) {
            match act["act"].as_str() {
                Some("start") => started.push_back(act),
                Some("done") => return act["report"].clone(),
                _ => {}
            }
        }
        let act = started.pop_front().expect("the plan stalled");
        let id = act["agent"].as_str().expect("an agent id");
        let index = usize::try_from(act["index"].as_u64().expect("an index")).expect("small");
        let outcome = if fail.contains(&id) {
            json!({ "error": format!("{id} broke") })
        } else {
            json!({ "result": format!("{id} done") })
        };
        run.finished(index, &outcome).expect("in turn");
    }
}

#[test]
fn the_packages_plan_run_has_the_command_lines_plan_span_events_and_metrics() {
    // What `runPlan` / `run_plan` drive: `LocalPlan`, whose agents are the host's functions.
    let plan = || {
        parse(
            json!({
            "name": "hosted",
            "agents": [
                { "id": "fetch", "task": "fetch" },
                { "id": "side", "task": "side", "on_error": "skip", "degraded_result": "none" },
                { "id": "write", "depends_on": ["fetch"], "task": "write {fetch}" },
            ]
            }),
            true,
        )
    };
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let (report, spans) = capture(|| {
        metrics::with_local_recorder(&recorder, || {
            // Never dropped, as a plan object the host's garbage collector has not freed yet
            // (Node's): its span is exported all the same, when the plan ends.
            let kept = Box::leak(Box::new(LocalPlan::new(plan(), "h1")));
            let report = drive_local(kept, &["side"]);
            // A plan given back after its end runs nothing, and counts nothing again.
            let progress = {
                let mut run = LocalPlan::new(plan(), "h2");
                let report = drive_local(&mut run, &[]);
                (run.progress(), report)
            };
            let mut again = LocalPlan::restore(plan(), "h2", &progress.0).expect("restored");
            assert_eq!(drive_local(&mut again, &[]), progress.1);
            report
        })
    });
    assert_eq!(
        (&report["outcome"], &report["reason"]),
        (&json!("complete"), &json!("degraded")),
        "{report}"
    );

    let plans: Vec<&SpanData> = spans.iter().filter(|s| s.name == "plan hosted").collect();
    assert_eq!(
        plans.len(),
        2,
        "one span a plan run, none for the one given back:\n{}",
        render(&spans)
    );
    let first = plans
        .iter()
        .find(|s| attribute(s, semconv::TERMINUS_PLAN_EXECUTION).as_deref() == Some("h1"))
        .expect("the plan span of h1");
    for (key, value) in [
        (semconv::TERMINUS_OUTCOME, "complete"),
        (semconv::TERMINUS_PLAN_REASON, "degraded"),
        (semconv::TERMINUS_RESUMED, "false"),
    ] {
        assert_eq!(attribute(first, key).as_deref(), Some(value), "{key}");
    }
    let degraded = events(first, "agent_degraded");
    assert_eq!(degraded.len(), 1, "{}", render(&spans));
    assert_eq!(field(&degraded[0], "gen_ai.agent.name"), "side");

    let body = handle.render();
    for line in [
        r#"terminus_plans_total{outcome="complete",reason="degraded"} 1"#,
        r#"terminus_plans_total{outcome="complete",reason="all_complete"} 1"#,
    ] {
        assert!(body.lines().any(|l| l == line), "no `{line}` in:\n{body}");
    }
    assert!(
        body.lines()
            .any(|l| l == r#"terminus_agent_degradations_total{why="run_failed"} 1"#),
        "{body}"
    );
}
