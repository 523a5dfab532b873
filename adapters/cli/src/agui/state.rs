//! The run's state: its snapshot, the RFC 6902 deltas between two, and the state of a run that
//! ended or suspended.

use serde_json::{Value, json};
use std::sync::{Mutex, MutexGuard, PoisonError};
use terminus_kernel::{Machine, Policy, Stats};
use terminus_runtime::{PendingCall, Report, StateParts, json_patch};

/// The run's state, as `STATE_SNAPSHOT` carries it and `STATE_DELTA` patches it.
#[derive(Debug, Clone)]
pub(crate) struct RunState {
    pub(super) execution: String,
    pub(super) agent: String,
    pub(super) policy: Policy,
    pub(super) value: Value,
}

impl RunState {
    /// The state of `execution` of `agent`, from `machine` (a new run's, or a resumed one's as
    /// its journal left it).
    pub(crate) fn new(execution: &str, agent: &str, machine: &Machine) -> RunState {
        let mut state = RunState {
            execution: execution.to_owned(),
            agent: agent.to_owned(),
            policy: machine.policy().clone(),
            value: Value::Null,
        };
        state.value = state.render(
            "running",
            machine.phase().as_str(),
            &machine.stats(),
            0,
            &StateParts::of(machine),
        );
        state
    }

    /// The state as JSON.
    pub(crate) fn value(&self) -> &Value {
        &self.value
    }

    pub(super) fn render(
        &self,
        status: &str,
        phase: &str,
        stats: &Stats,
        elapsed_ms: u64,
        parts: &StateParts,
    ) -> Value {
        let mut state = terminus_runtime::run_state(
            &self.policy,
            status,
            phase,
            stats,
            Some(elapsed_ms),
            parts,
        );
        state.insert("execution".into(), json!(self.execution));
        state.insert("agent".into(), json!(self.agent));
        state.insert("pending".into(), json!([]));
        Value::Object(state)
    }

    /// Moves to `next`; the RFC 6902 patch from the state before (empty when nothing changed).
    pub(super) fn update(&mut self, next: Value) -> Vec<Value> {
        let patch = json_patch(&self.value, &next);
        self.value = next;
        patch
    }
}

/// The last state of a run that ended with `report`: its status, reason and result.
pub(crate) fn ended_state(state: &Value, report: &Report) -> Value {
    terminus_runtime::ended_state(
        state,
        report.outcome.outcome_str(),
        report.outcome.reason_str(),
        report.rule.name(),
        report.result.as_deref(),
    )
}

/// The last state of a run suspended on `pending` held calls.
pub(crate) fn suspended_state(state: &Value, pending: &[PendingCall]) -> Value {
    let mut next = state.clone();
    next["status"] = json!("suspended");
    next["pending"] = json!(pending);
    next
}

/// `STATE_DELTA` from `old` to `new`, or `None` when nothing changed.
pub(crate) fn delta(old: &Value, new: &Value) -> Option<Value> {
    let patch = json_patch(old, new);
    (!patch.is_empty()).then(|| json!({ "type": "STATE_DELTA", "delta": patch }))
}

/// The state, whoever panicked while holding it (a state is always whole: it is replaced, not
/// edited in place).
pub(crate) fn lock(state: &Mutex<RunState>) -> MutexGuard<'_, RunState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}
