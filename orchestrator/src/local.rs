//! [`LocalPlan`]: a [`Conductor`] whose breakers and progress live in memory, spoken in JSON:
//! the plan run of the Node and Python packages (`runPlan` / `run_plan`), whose agents are the
//! host's own async functions. The host's event loop carries the acts out; the decisions are
//! the conductor's, the same as `terminus orchestrate`'s.
//!
//! Its progress is the cells `terminus orchestrate --journal` writes (`plan/{execution}`,
//! `plan/{execution}/{agent}`, `breaker/{agent}`), as one JSON object the host keeps where it
//! likes (a file, a bucket) after every `save` act, and gives back to [`LocalPlan::restore`]
//! after a crash: what completed does not run again, the breakers are as they were. When the
//! plan ends, its report is kept too (`plan/{execution}:report`): a plan restored after its end
//! runs nothing and gives that report. [`PlanJournal`] keeps the same cells in a journal store
//! (SQLite or PostgreSQL), each written compare-and-set and read back before the plan goes on.
//!
//! The acts ([`LocalPlan::next`]), one JSON object each:
//!
//! - `{"act": "start", "agent", "index", "attempt", "execution", "task", "grant", "resume",
//!   "program", "limit_ms", "overdue"}`: run the agent (`program` is `host`, the host's
//!   function, or `scenario`, run with [`LocalPlan::scenario_launch`]); tell
//!   [`LocalPlan::finished`] how it ended; if it has not ended `limit_ms` after it started,
//!   abandon it (abort the function) and tell `finished` `{"error": overdue}`;
//! - `{"act": "cancel"}`: cancel every running attempt (each still ends through `finished`);
//! - `{"act": "save"}`: the progress changed; keep [`LocalPlan::progress`] (or the cells
//!   [`LocalPlan::take_changes`] gives) before going on;
//! - `{"act": "event", "kind", "agent", "line"}`: a progress line (the command line's);
//! - `{"act": "done", "report"}`: the plan's report, as `terminus orchestrate --json` prints it.
//!
//! Its telemetry is `terminus orchestrate`'s, through the same `tracing` and `metrics` facades:
//! the plan span (`plan NAME`, made at the first act, ended with the report), the plan's events
//! on it (retries, breaker openings, skips, degradations) and its metrics, `plan_ended`
//! included. A plan restored after its end runs nothing and counts nothing again.

use crate::breaker::Breaker;
use crate::conduct::{Act, AgentCell, Attempted, Begin, Conductor, PlanCell, agent_key, plan_key};
use crate::error::OrchestrateError;
use crate::plan::{Plan, Program};
use crate::report::PlanEvent;
use crate::run::{Cells, Launch, breaker_key, report_key};
use crate::schedule::Usage;
use crate::{meters, spans};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use terminus_runtime::{KillSwitch, MemoryStore, Report, RuntimeConfig, Store};
use tracing::Span;

/// A plan run whose breakers and progress are in memory (see the module docs).
#[derive(Debug)]
pub struct LocalPlan {
    conductor: Conductor,
    cells: BTreeMap<String, Value>,
    /// The cells changed since [`LocalPlan::take_changes`] last took them.
    changed: BTreeSet<String>,
    /// The report to give as the `done` act: the plan's, once kept, or that of a plan restored
    /// after its end.
    ended: Option<Value>,
    breakers: HashMap<String, Breaker>,
    running: HashMap<usize, Begin>,
    /// The kill switches of the scenario attempts handed out ([`LocalPlan::scenario_launch`]).
    kills: HashMap<usize, KillSwitch>,
    /// The plan span, from the first act to the report (`None` before and after).
    span: Option<Span>,
    /// The plan had started before this process went on ([`LocalPlan::restore`]).
    resumed: bool,
}

impl LocalPlan {
    /// A run of `plan` as `execution`, from the start.
    pub fn new(plan: Plan, execution: &str) -> LocalPlan {
        let mut conductor = Conductor::new(Arc::new(plan), execution);
        conductor.keep_results();
        LocalPlan {
            conductor,
            cells: BTreeMap::new(),
            changed: BTreeSet::new(),
            ended: None,
            breakers: HashMap::new(),
            running: HashMap::new(),
            kills: HashMap::new(),
            span: None,
            resumed: false,
        }
    }

    /// Goes on from `progress` (what [`LocalPlan::progress`] gave): a cell that cannot be read
    /// is named by its JSON path.
    pub fn restore(plan: Plan, execution: &str, progress: &Value) -> Result<LocalPlan, String> {
        let Some(object) = progress.as_object() else {
            return Err("$: progress must be an object (what `progress()` gave)".into());
        };
        match object.get("execution") {
            Some(Value::String(e)) if e == execution => {}
            Some(Value::String(e)) => {
                return Err(format!(
                    "$.execution: the progress is of execution `{e}`, not `{execution}`"
                ));
            }
            _ => return Err("$.execution: missing (a string)".into()),
        }
        let cells: BTreeMap<String, Value> = match object.get("cells") {
            Some(Value::Object(map)) => map.clone().into_iter().collect(),
            _ => return Err("$.cells: missing (an object of cells)".into()),
        };
        fn read<T: serde::de::DeserializeOwned>(
            cells: &BTreeMap<String, Value>,
            key: &str,
        ) -> Result<Option<T>, String> {
            cells
                .get(key)
                .map(|v| serde_json::from_value(v.clone()))
                .transpose()
                .map_err(|e| format!("$.cells[\"{key}\"]: {e}"))
        }
        let plan_cell: Option<PlanCell> = read(&cells, &plan_key(execution))?;
        let mut saved: Vec<Option<AgentCell>> = Vec::with_capacity(plan.agents.len());
        let mut breakers = HashMap::new();
        for a in &plan.agents {
            saved.push(read(&cells, &agent_key(execution, &a.id))?);
            if let Some(b) = read::<Breaker>(&cells, &breaker_key(&a.id))? {
                breakers.insert(a.id.clone(), b);
            }
        }
        let ended = cells.get(&report_key(execution)).cloned();
        let resumed = plan_cell.is_some();
        let mut conductor = Conductor::restore(Arc::new(plan), execution, plan_cell, saved);
        conductor.keep_results();
        Ok(LocalPlan {
            conductor,
            cells,
            changed: BTreeSet::new(),
            ended,
            breakers,
            running: HashMap::new(),
            kills: HashMap::new(),
            span: None,
            resumed,
        })
    }

    /// The cells changed since this was last called (each key with its value), to write where
    /// the progress is kept.
    pub fn take_changes(&mut self) -> Vec<(String, Value)> {
        std::mem::take(&mut self.changed)
            .into_iter()
            .filter_map(|key| self.cells.get(&key).map(|v| (key, v.clone())))
            .collect()
    }

    /// Keeps `value` under `key`: whether it changed.
    fn keep(&mut self, key: String, value: Value) -> bool {
        if self.cells.get(&key) == Some(&value) {
            return false;
        }
        self.changed.insert(key.clone());
        self.cells.insert(key, value);
        true
    }

    /// The progress to keep: `{"execution", "cells"}`.
    pub fn progress(&self) -> Value {
        let cells: Map<String, Value> = self
            .cells
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        json!({ "execution": self.conductor.execution(), "cells": cells })
    }

    /// Plan time spent before this process went on: the host's clock is this plus the time
    /// since it started.
    pub fn elapsed_before(&self) -> u64 {
        self.conductor.elapsed_before()
    }

    /// When (plan time) there is something to do if no attempt ends first.
    pub fn next_wake(&self) -> Option<u64> {
        self.conductor.next_wake()
    }

    /// The host cancels the plan.
    pub fn cancel(&mut self, now_ms: u64) {
        self.conductor.cancel(now_ms);
    }

    /// The next act at plan time `now_ms` (breakers read `unix_ms`), or `None` until an
    /// attempt ends, the next wake passes or the host cancels.
    pub fn next(&mut self, now_ms: u64, unix_ms: u64) -> Option<Value> {
        if let Some(report) = self.ended.take() {
            // Kept (and saved) before it is given; or it ended before this process went on, and
            // nothing runs again.
            return Some(json!({ "act": "done", "report": report }));
        }
        if self.span.is_none() && !self.conductor.is_done() {
            let plan = self.conductor.plan();
            let span = spans::plan(
                &plan.name,
                self.conductor.execution(),
                plan.agents.len(),
                self.resumed,
            );
            self.conductor.set_span(span.clone());
            self.span = Some(span);
        }
        loop {
            match self.conductor.next(now_ms)? {
                Act::Breaker { id, input, .. } => {
                    let before = self.breakers.get(&id).copied().unwrap_or_default();
                    let step = before.step(input, unix_ms, self.conductor.breaker_config());
                    // The conductor asked for this step: it takes it.
                    let _ = self.conductor.breaker_stepped(before, step, now_ms);
                    if step.next != before {
                        self.breakers.insert(id.clone(), step.next);
                        let value = serde_json::to_value(step.next).unwrap_or(Value::Null);
                        self.keep(breaker_key(&id), value);
                        return Some(json!({ "act": "save" }));
                    }
                }
                Act::Start(begin) => {
                    let (limit_ms, overdue) = begin.overdue();
                    let act = json!({
                        "act": "start",
                        "agent": begin.spec.id,
                        "index": begin.agent,
                        "attempt": begin.attempt,
                        "execution": begin.execution,
                        "task": begin.task,
                        "grant": begin.grant,
                        "resume": begin.resume,
                        "program": match begin.spec.program {
                            Program::Scenario(_) => "scenario",
                            Program::Live { .. } => "live",
                            Program::Host => "host",
                        },
                        "limit_ms": limit_ms,
                        "overdue": overdue,
                    });
                    self.running.insert(begin.agent, *begin);
                    return Some(act);
                }
                Act::Cancel => {
                    for kill in self.kills.values() {
                        kill.kill();
                    }
                    return Some(json!({ "act": "cancel" }));
                }
                Act::Save { key, value } => {
                    if self.keep(key, value) {
                        return Some(json!({ "act": "save" }));
                    }
                }
                Act::Event(event) => {
                    let (kind, agent) = match &event {
                        PlanEvent::Start { agent, .. } => ("start", Some(agent)),
                        PlanEvent::Retry { agent, .. } => ("retry", Some(agent)),
                        PlanEvent::Breaker { agent, .. } => ("breaker", Some(agent)),
                        PlanEvent::Ended { agent, .. } => ("ended", Some(agent)),
                        PlanEvent::Warn(_) => ("warning", None),
                        PlanEvent::Cancelling(_) => ("cancelling", None),
                        PlanEvent::Done(_) => ("done", None),
                    };
                    return Some(json!({
                        "act": "event",
                        "kind": kind,
                        "agent": agent,
                        "line": event.to_string(),
                    }));
                }
                Act::Done(report) => {
                    let value = serde_json::to_value(&*report).unwrap_or(Value::Null);
                    let ended = Ok(*report);
                    if let Some(span) = self.span.take() {
                        spans::end_plan(&span, &ended);
                        // The span is exported when its last handle drops: now, not when the
                        // host's garbage collector gets to this plan.
                        self.conductor.set_span(Span::none());
                    }
                    meters::plan_ended(&ended);
                    let report = value;
                    // Kept before it is given: a plan restored after its end gives it again.
                    let key = report_key(self.conductor.execution());
                    if self.keep(key, report.clone()) {
                        self.ended = Some(report);
                        return Some(json!({ "act": "save" }));
                    }
                    return Some(json!({ "act": "done", "report": report }));
                }
            }
        }
    }

    /// How the attempt of agent `index` ended: `{"result": ANY, "used"?: {"model_calls",
    /// "tokens"}}` (it completed), `{"error": TEXT}` (it failed) or `{"report": REPORT}` (a
    /// kernel run's report). Call it once the acts are taken (`next` gave `None`).
    pub fn finished(&mut self, index: usize, outcome: &Value) -> Result<(), String> {
        if !self.running.contains_key(&index) {
            return Err(format!("agent {index} has no attempt running"));
        }
        let attempted = read_outcome(outcome)?;
        self.conductor
            .finished(index, attempted)
            .map_err(|e| e.to_string())?;
        self.running.remove(&index);
        self.kills.remove(&index);
        Ok(())
    }

    /// The attempt of scenario agent `index` as a [`Launch`] in its own memory store (the
    /// binding runs it with `terminus-scenario`'s launcher, on a thread of its own: a `cancel`
    /// act kills it): `None` if agent `index` has no scenario attempt running. A resumed
    /// attempt starts again: its journal was in memory.
    pub fn scenario_launch(&mut self, index: usize) -> Option<Launch> {
        let begin = self.running.get(&index)?;
        if !matches!(begin.spec.program, Program::Scenario(_)) {
            return None;
        }
        let kill = KillSwitch::new();
        if self.conductor.stopping() {
            kill.kill();
        }
        self.kills.insert(index, kill.clone());
        Some(Launch {
            agent: Arc::clone(&begin.spec),
            execution: begin.execution.clone(),
            task: begin.task.clone(),
            grant: begin.grant.clone(),
            resume: false,
            store: Arc::new(MemoryStore::new()),
            kill,
            keep_program: false,
            config: RuntimeConfig::default(),
        })
    }
}

/// A [`LocalPlan`]'s progress kept in a journal store (SQLite or PostgreSQL): the cells
/// `terminus orchestrate --journal` keeps, under the same keys. Each plan cell is written
/// compare-and-set on the version this process read or wrote last, so a second process running
/// the same execution fails rather than interleaves; a breaker's cell, shared by every plan on
/// the store, takes the last step written. Every cell is read back before the plan goes on: an
/// agent counts as completed only once its result is seen stored.
pub struct PlanJournal {
    cells: Cells,
    breakers: BTreeSet<String>,
}

impl PlanJournal {
    /// The journal of `execution` of `plan` in `store`, and the progress kept there (for
    /// [`LocalPlan::restore`]; `None` when nothing is).
    pub async fn open(
        store: Arc<dyn Store>,
        plan: &Plan,
        execution: &str,
    ) -> Result<(PlanJournal, Option<Value>), OrchestrateError> {
        let mut cells = Cells::new(store, execution);
        let breakers: BTreeSet<String> = plan.agents.iter().map(|a| breaker_key(&a.id)).collect();
        let keys = [plan_key(execution), report_key(execution)]
            .into_iter()
            .chain(plan.agents.iter().map(|a| agent_key(execution, &a.id)))
            .chain(breakers.iter().cloned());
        let mut found = Map::new();
        for key in keys {
            if let Some(value) = cells.read::<Value>(key.clone()).await? {
                found.insert(key, value);
            }
        }
        let progress =
            (!found.is_empty()).then(|| json!({ "execution": execution, "cells": found }));
        Ok((PlanJournal { cells, breakers }, progress))
    }

    /// Writes the cells [`LocalPlan::take_changes`] gave, each read back.
    pub async fn save(&mut self, changes: Vec<(String, Value)>) -> Result<(), OrchestrateError> {
        for (key, value) in changes {
            if self.breakers.contains(&key) {
                self.cells.overwrite(key, value).await?;
            } else {
                self.cells.write(key, value).await?;
            }
        }
        Ok(())
    }
}

/// An attempt's end as the host gives it (see [`LocalPlan::finished`]).
fn read_outcome(outcome: &Value) -> Result<Attempted, String> {
    let Some(object) = outcome.as_object() else {
        return Err("outcome: must be an object with `result`, `error` or `report`".into());
    };
    let keys: Vec<&str> = ["result", "error", "report"]
        .into_iter()
        .filter(|k| object.contains_key(*k))
        .collect();
    if keys.len() != 1 {
        return Err(format!(
            "outcome: give exactly one of `result`, `error` or `report` (got {})",
            if keys.is_empty() {
                "none".to_owned()
            } else {
                keys.join(", ")
            }
        ));
    }
    if let Some(unknown) = object
        .keys()
        .find(|k| !["result", "error", "report", "used"].contains(&k.as_str()))
    {
        return Err(format!("outcome.{unknown}: unknown field"));
    }
    match keys[0] {
        "result" => {
            let used = match object.get("used") {
                None | Some(Value::Null) => Usage::default(),
                Some(v) => serde_json::from_value(v.clone())
                    .map_err(|e| format!("outcome.used: {e} (`model_calls` and `tokens`)"))?,
            };
            let result = object.get("result").cloned().unwrap_or(Value::Null);
            if let Some(refused) = not_an_answer(&result) {
                return Ok(Attempted::Failed(refused));
            }
            Ok(Attempted::Value { result, used })
        }
        "error" => match object.get("error") {
            Some(Value::String(e)) => Ok(Attempted::Failed(e.clone())),
            _ => Err("outcome.error: must be a string".into()),
        },
        _ => {
            let report: Report = serde_json::from_value(object["report"].clone())
                .map_err(|e| format!("outcome.report: not a run's report: {e}"))?;
            Ok(Attempted::Report(Box::new(report)))
        }
    }
}

/// Why a host agent's `result` is no answer, when it is text: an empty text, or one that only
/// hands the task back (the kernel's rule for a run nobody answers: a plan's agents are such runs,
/// [`terminus_kernel::answer::hands_back`]). A result that is not text (an object, a list, a
/// number, null) is the host's data and is taken as it is.
fn not_an_answer(result: &Value) -> Option<String> {
    let Value::String(text) = result else {
        return None;
    };
    if text.trim().is_empty() {
        return Some("the result is empty text: an empty reply is never an answer".into());
    }
    let said = terminus_kernel::answer::Said::default();
    terminus_kernel::answer::hands_back(text, &said).then(|| {
        const SHOWN: usize = 120;
        let shown: String = text.chars().take(SHOWN).collect();
        let cut = if text.chars().count() > SHOWN {
            "..."
        } else {
            ""
        };
        format!("the result is not an answer (it hands the task back): {shown:?}{cut}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Context, Own, Script, ScriptError};
    use std::path::Path;

    fn plan(json: &str) -> Plan {
        let refuse = |_: &str| -> Result<Arc<dyn Script>, ScriptError> {
            Err(ScriptError {
                path: "$".into(),
                problem: "no scenarios here".into(),
                message: "no scenarios here".into(),
            })
        };
        let live = |_: &Path, _: Option<u64>| -> Result<Own, String> { Err("no".into()) };
        let cx = Context {
            base: Path::new("."),
            env: &|_| None,
            live: &live,
            scenario: &refuse,
            host_agents: true,
        };
        Plan::parse(json, &cx).expect("a valid plan")
    }

    /// Drives `run` with agents that complete with their id upper-cased, except those in
    /// `fail`, which fail; returns the acts' kinds and the report.
    fn drive(
        run: &mut LocalPlan,
        fail: &[&str],
        stop_after_starts: Option<usize>,
    ) -> Option<Value> {
        let mut starts = 0;
        loop {
            let mut started = Vec::new();
            while let Some(act) = run.next(0, 1_000) {
                match act["act"].as_str() {
                    Some("start") => started.push(act),
                    Some("done") => return Some(act["report"].clone()),
                    _ => {}
                }
            }
            if started.is_empty() {
                return None;
            }
            for act in started {
                starts += 1;
                if stop_after_starts.is_some_and(|n| starts > n) {
                    return None;
                }
                let id = act["agent"].as_str().unwrap_or_default();
                let index = act["index"].as_u64().unwrap_or_default() as usize;
                let outcome = if fail.contains(&id) {
                    json!({ "error": format!("{id} broke") })
                } else {
                    json!({ "result": format!("{} from [{}]", id.to_uppercase(), act["task"].as_str().unwrap_or_default()) })
                };
                run.finished(index, &outcome).expect("in turn");
            }
        }
    }

    const CHAIN: &str = r#"{ "name": "chain", "agents": [
        { "id": "a", "task": "first" },
        { "id": "b", "depends_on": ["a"], "task": "then {a}" },
        { "id": "c", "depends_on": ["b"], "task": "last {b}" } ] }"#;

    #[test]
    fn host_agents_run_in_order_and_results_flow_through_tasks() {
        let mut run = LocalPlan::new(plan(CHAIN), "x");
        let report = drive(&mut run, &[], None).expect("done");
        assert_eq!(report["reason"], "all_complete");
        assert_eq!(
            report["agents"][2]["result"],
            "C from [last B from [then A from [first]]]"
        );
    }

    #[test]
    fn progress_restores_what_completed_and_nothing_runs_twice() {
        let mut run = LocalPlan::new(plan(CHAIN), "x");
        // `a` completes; `b` is started and the process dies.
        assert!(drive(&mut run, &[], Some(1)).is_none());
        let progress = run.progress();
        let mut again = LocalPlan::restore(plan(CHAIN), "x", &progress).expect("restores");
        let mut ran = Vec::new();
        let report = loop {
            let mut started = Vec::new();
            let mut done = None;
            while let Some(act) = again.next(0, 1_000) {
                match act["act"].as_str() {
                    Some("start") => started.push(act),
                    Some("done") => done = Some(act["report"].clone()),
                    _ => {}
                }
            }
            if let Some(r) = done {
                break r;
            }
            for act in started {
                ran.push(act["agent"].as_str().unwrap_or_default().to_owned());
                let index = act["index"].as_u64().unwrap_or_default() as usize;
                again
                    .finished(index, &json!({ "result": format!("{}!", act["task"].as_str().unwrap_or_default()) }))
                    .expect("in turn");
            }
        };
        assert_eq!(
            ran,
            ["b", "c"],
            "a completed before the crash: it does not run again"
        );
        assert_eq!(report["agents"][0]["result"], "A from [first]");
        assert_eq!(report["agents"][1]["result"], "then A from [first]!");
        assert_eq!(report["agents"][0]["attempts"], 1);
    }

    #[test]
    fn a_breakers_failures_before_a_crash_count_after_it() {
        let json = r#"{ "name": "b", "limits": { "agent_max_retries": 5, "agent_retry_base_delay_ms": 1,
            "circuit_breaker_failure_threshold": 2, "circuit_breaker_timeout_ms": 60000 },
            "agents": [ { "id": "flaky", "retryable": true, "task": "t" } ] }"#;
        let fail_all = |run: &mut LocalPlan, now: u64| -> (u32, Vec<String>, Option<Value>) {
            let (mut starts, mut lines, mut report) = (0, Vec::new(), None);
            let mut started = Vec::new();
            while let Some(act) = run.next(now, 1_000) {
                match act["act"].as_str() {
                    Some("start") => started.push(act),
                    Some("event") => {
                        lines.push(act["line"].as_str().unwrap_or_default().to_owned())
                    }
                    Some("done") => report = Some(act["report"].clone()),
                    _ => {}
                }
            }
            for act in started {
                starts += 1;
                let index = act["index"].as_u64().unwrap_or_default() as usize;
                run.finished(index, &json!({ "error": "down" }))
                    .expect("in turn");
            }
            (starts, lines, report)
        };
        let mut run = LocalPlan::new(plan(json), "x");
        assert_eq!(fail_all(&mut run, 0).0, 1);
        // The failure is taken (its retry waits for its backoff), then the process dies.
        assert!(fail_all(&mut run, 0).2.is_none());
        let progress = run.progress();
        assert_eq!(
            progress["cells"]["breaker/flaky"],
            json!({ "state": "closed", "failures": 1 })
        );
        let mut again = LocalPlan::restore(plan(json), "x", &progress).expect("restores");
        let mut lines = Vec::new();
        let mut report = None;
        for now in [100, 100, 100] {
            let (_, l, r) = fail_all(&mut again, now);
            lines.extend(l);
            report = report.or(r);
        }
        let report = report.expect("the plan ended");
        // The second failure in a row opens the breaker: no third attempt, though 5 retries
        // were allowed (a breaker forgotten in the crash would have allowed one more).
        assert_eq!(report["agents"][0]["attempts"], 2, "{lines:?}");
        assert_eq!(report["agents"][0]["status"], "failed");
        assert!(
            lines.iter().any(|l| l == "breaker flaky: closed -> open"),
            "{lines:?}"
        );
        assert_eq!(again.progress()["cells"]["breaker/flaky"]["state"], "open");
    }

    /// Runs `json`'s agents, each attempt answering the next of `replies` (any agent), the
    /// clock a second further at each pass (past the retries' backoff); gives the report and
    /// the replies used.
    fn answered(json: &str, replies: &[Value]) -> (Value, usize) {
        let mut run = LocalPlan::new(plan(json), "x");
        let mut used = 0;
        for now in (0..20).map(|pass| pass * 1_000) {
            let mut started = Vec::new();
            while let Some(act) = run.next(now, 1_000) {
                match act["act"].as_str() {
                    Some("start") => started.push(act),
                    Some("done") => return (act["report"].clone(), used),
                    _ => {}
                }
            }
            for act in started {
                let index = act["index"].as_u64().unwrap_or_default() as usize;
                let reply = replies.get(used).cloned().unwrap_or(Value::Null);
                used += 1;
                run.finished(index, &json!({ "result": reply }))
                    .expect("in turn");
            }
        }
        panic!("the plan did not end after {used} replies")
    }

    #[test]
    fn a_text_result_that_hands_the_task_back_or_is_empty_is_a_failed_attempt() {
        let retried = r#"{ "name": "r", "limits": { "agent_max_retries": 3, "agent_retry_base_delay_ms": 1 },
            "agents": [ { "id": "a", "retryable": true, "task": "sum 2 and 3" } ] }"#;
        let sorry = "I'm sorry, I don't understand. Could you please provide more details?";
        let (report, used) = answered(
            retried,
            &[json!(sorry), json!("  \n"), json!("The sum is 5.")],
        );
        assert_eq!(used, 3);
        assert_eq!(report["reason"], "all_complete", "{report}");
        assert_eq!(report["agents"][0]["attempts"], 3);
        assert_eq!(report["agents"][0]["result"], "The sum is 5.");

        let once = r#"{ "name": "o", "agents": [ { "id": "a", "task": "sum 2 and 3" } ] }"#;
        let (report, _) = answered(once, &[json!(sorry)]);
        assert_eq!(report["agents"][0]["status"], "failed", "{report}");
        let error = report["agents"][0]["error"].as_str().unwrap_or_default();
        assert!(
            error.starts_with("the result is not an answer (it hands the task back): \"I'm sorry"),
            "{error}"
        );
        let (report, _) = answered(once, &[json!("")]);
        assert_eq!(
            report["agents"][0]["error"],
            "the result is empty text: an empty reply is never an answer"
        );
        // Data that is not text is the host's: taken as it is, null and empty objects included.
        for data in [
            json!({}),
            json!(null),
            json!([]),
            json!(0),
            json!({ "text": "" }),
        ] {
            let (report, _) = answered(once, std::slice::from_ref(&data));
            assert_eq!(
                report["agents"][0]["status"], "complete",
                "{data}: {report}"
            );
            assert_eq!(report["agents"][0]["result"], data);
        }
    }

    #[test]
    fn bad_outcomes_and_bad_progress_are_named() {
        let mut run = LocalPlan::new(plan(CHAIN), "x");
        while run.next(0, 0).is_some() {}
        let e = run
            .finished(0, &json!({ "result": 1, "error": "x" }))
            .expect_err("two");
        assert!(e.contains("exactly one of"), "{e}");
        let e = run
            .finished(0, &json!({ "result": 1, "use": {} }))
            .expect_err("typo");
        assert_eq!(e, "outcome.use: unknown field");
        let e = run
            .finished(2, &json!({ "result": 1 }))
            .expect_err("not running");
        assert!(e.contains("no attempt running"), "{e}");
        let e = run
            .finished(0, &json!({ "result": 1, "used": { "model_calls": "two" } }))
            .expect_err("bad used");
        assert!(e.starts_with("outcome.used:"), "{e}");
        run.finished(0, &json!({ "result": "ok" }))
            .expect("in turn");
        let e = LocalPlan::restore(plan(CHAIN), "y", &run.progress()).expect_err("other id");
        assert!(e.starts_with("$.execution:"), "{e}");
        let bad = json!({ "execution": "x", "cells": { "plan/x/a": { "saved": 3 } } });
        let e = LocalPlan::restore(plan(CHAIN), "x", &bad).expect_err("bad cell");
        assert!(e.starts_with("$.cells[\"plan/x/a\"]:"), "{e}");
    }

    /// Every act until the plan waits or ends: the agents started and the report, if it ended.
    fn acts(run: &mut LocalPlan) -> (Vec<Value>, Option<Value>) {
        let (mut started, mut done) = (Vec::new(), None);
        while let Some(act) = run.next(0, 1_000) {
            match act["act"].as_str() {
                Some("start") => started.push(act),
                Some("done") => done = Some(act["report"].clone()),
                _ => {}
            }
        }
        (started, done)
    }

    #[tokio::test]
    async fn a_journal_keeps_the_progress_and_the_report() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let (mut journal, kept) = PlanJournal::open(Arc::clone(&store), &plan(CHAIN), "x")
            .await
            .expect("opens");
        assert!(kept.is_none(), "nothing kept yet");
        let mut run = LocalPlan::new(plan(CHAIN), "x");
        // `a` completes, `b` starts, and the process dies.
        assert!(drive(&mut run, &[], Some(1)).is_none());
        journal.save(run.take_changes()).await.expect("saved");
        assert!(run.take_changes().is_empty(), "taken once");

        let (mut journal, kept) = PlanJournal::open(Arc::clone(&store), &plan(CHAIN), "x")
            .await
            .expect("opens");
        let kept = kept.expect("the progress");
        let mut again = LocalPlan::restore(plan(CHAIN), "x", &kept).expect("restores");
        let mut ran = Vec::new();
        let report = loop {
            let (started, done) = acts(&mut again);
            journal.save(again.take_changes()).await.expect("saved");
            if let Some(report) = done {
                break report;
            }
            for act in started {
                ran.push(act["agent"].as_str().unwrap_or_default().to_owned());
                let index = act["index"].as_u64().unwrap_or_default() as usize;
                again
                    .finished(index, &json!({ "result": "the result" }))
                    .expect("in turn");
            }
        };
        assert_eq!(ran, ["b", "c"], "a completed before the crash");
        assert_eq!(report["agents"][0]["result"], "A from [first]");

        // Ended: a third process runs nothing and gives the same report.
        let (_, kept) = PlanJournal::open(Arc::clone(&store), &plan(CHAIN), "x")
            .await
            .expect("opens");
        let mut third =
            LocalPlan::restore(plan(CHAIN), "x", &kept.expect("kept")).expect("restores");
        let (started, done) = acts(&mut third);
        assert!(started.is_empty());
        assert_eq!(done, Some(report));
    }

    #[tokio::test]
    async fn two_processes_on_one_execution_do_not_interleave() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let (mut first, _) = PlanJournal::open(Arc::clone(&store), &plan(CHAIN), "x")
            .await
            .expect("opens");
        let (mut second, _) = PlanJournal::open(Arc::clone(&store), &plan(CHAIN), "x")
            .await
            .expect("opens");
        let mut one = LocalPlan::new(plan(CHAIN), "x");
        let mut two = LocalPlan::new(plan(CHAIN), "x");
        assert!(drive(&mut one, &[], Some(1)).is_none());
        assert!(drive(&mut two, &[], Some(1)).is_none());
        first.save(one.take_changes()).await.expect("first");
        let lost = second
            .save(two.take_changes())
            .await
            .expect_err("the first process wrote first");
        assert!(
            matches!(
                lost,
                OrchestrateError::Store(terminus_runtime::StoreError::LeaseLost { .. })
            ),
            "{lost}"
        );
    }
}
