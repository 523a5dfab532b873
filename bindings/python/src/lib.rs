//! `terminus_kernel._native`: the Terminus kernel for Python.
//!
//! A thin layer over [`terminus_runtime::host::Host`] (the kernel with the embedding contract's
//! JSON vocabulary, its journal, report and explanation) and over the runtime for
//! `run_scenario`. Python values cross as JSON-shaped data (`pythonize`); every bad input is a
//! `ValueError` naming the field or JSON path, and nothing here panics on any input.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use pythonize::pythonize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use terminus_kernel::Policy;
use terminus_runtime::host::{CommandOut, EventIn, Handle, Host, InputError};

/// The extension's allocator, as the Node addon's: an event's cost in the `Host` is mostly small
/// allocations, which mimalloc serves in about half the time of the system's `malloc`
/// (`bench/events.py`). Python's own objects keep Python's allocator; what crosses is copied.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// How deep a Python value may nest (serde_json's own limit): deeper is refused, not recursed
/// into, so no input can exhaust the stack.
const MAX_DEPTH: usize = 128;

/// `obj` as JSON, strictly: `None`, `bool`, `int` (64-bit), finite `float`, `str`, `list` or
/// `tuple`, and `dict` with `str` keys. Anything else is an error naming its path under `at`.
fn to_json(obj: &Bound<'_, PyAny>, at: &mut String, depth: usize) -> Result<Value, InputError> {
    let fail = |at: &str, message: String| InputError {
        path: at.to_owned(),
        message,
    };
    if depth > MAX_DEPTH {
        return Err(fail(at, format!("nested deeper than {MAX_DEPTH} levels")));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::from(u));
        }
        return Err(fail(at, "integer out of the 64-bit range".to_owned()));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return serde_json::Number::from_f64(f.value())
            .map(Value::Number)
            .ok_or_else(|| fail(at, format!("{} is not a JSON number", f.value())));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return s
            .to_str()
            .map(|s| Value::String(s.to_owned()))
            .map_err(|e| fail(at, e.to_string()));
    }
    if let Ok(dict) = obj.cast::<PyDict>() {
        let mut map = serde_json::Map::with_capacity(dict.len());
        for (key, value) in dict.iter() {
            let Ok(key) = key.cast::<PyString>() else {
                return Err(fail(at, format!("a key is not a string: {key}")));
            };
            let key = key
                .to_str()
                .map_err(|e| fail(at, e.to_string()))?
                .to_owned();
            let len = at.len();
            at.push('.');
            at.push_str(&key);
            let value = to_json(&value, at, depth + 1)?;
            at.truncate(len);
            map.insert(key, value);
        }
        return Ok(Value::Object(map));
    }
    let items: Option<Vec<Bound<'_, PyAny>>> = if let Ok(list) = obj.cast::<PyList>() {
        Some(list.iter().collect())
    } else if let Ok(tuple) = obj.cast::<PyTuple>() {
        Some(tuple.iter().collect())
    } else {
        None
    };
    match items {
        Some(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let len = at.len();
                at.push_str(&format!("[{i}]"));
                out.push(to_json(item, at, depth + 1)?);
                at.truncate(len);
            }
            Ok(Value::Array(out))
        }
        None => {
            let kind = obj
                .get_type()
                .name()
                .map_or_else(|_| "object".to_owned(), |n| n.to_string());
            Err(fail(at, format!("a {kind} is not JSON")))
        }
    }
}

/// Reads `obj` as `T`: strictly as JSON first, then with serde; every error names its path
/// under `root` (`event.model_turn.text: invalid type: ...`).
fn read<T: DeserializeOwned>(root: &str, obj: &Bound<'_, PyAny>) -> PyResult<T> {
    let mut at = root.to_owned();
    let value = to_json(obj, &mut at, 0).map_err(value_error)?;
    serde_path_to_error::deserialize(value)
        .map_err(|e| value_error(InputError::from_serde(root, &e)))
}

/// The common events read straight from Python objects, without the JSON detour; `None` for
/// anything this path does not take as it is (an unknown key, a type it does not expect, a rare
/// event kind), which [`read`] then reads or refuses with the error naming its path. It accepts
/// exactly what [`read`] accepts for the shapes it handles, with the same value.
mod fast {
    use super::to_json;
    use pyo3::prelude::*;
    use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyString};
    use terminus_kernel::{Finish, ToolErrorKind};
    use terminus_runtime::host::{CallIn, EventIn, ResultIn, TurnIn};

    pub(super) fn event(obj: &Bound<'_, PyAny>) -> Option<EventIn> {
        let dict = obj.cast_exact::<PyDict>().ok()?;
        if dict.len() != 1 {
            return None;
        }
        let (key, value) = dict.iter().next()?;
        match key.cast::<PyString>().ok()?.to_str().ok()? {
            "model_turn" => turn(&value).map(EventIn::ModelTurn),
            "tool_results" => results(&value).map(EventIn::ToolResults),
            "tick" => tick(&value),
            "cancel" => value
                .cast_exact::<PyBool>()
                .ok()
                .filter(|b| b.is_true())
                .map(|_| EventIn::Cancel(true)),
            _ => None,
        }
    }

    fn tick(value: &Bound<'_, PyAny>) -> Option<EventIn> {
        let int = value.cast_exact::<PyInt>().ok()?;
        int.extract::<u64>().ok().map(EventIn::Tick)
    }

    fn string(value: &Bound<'_, PyAny>) -> Option<String> {
        value
            .cast_exact::<PyString>()
            .ok()?
            .to_str()
            .ok()
            .map(str::to_owned)
    }

    /// `None` or a string: `Some(None)` for `None`.
    fn opt_string(value: &Bound<'_, PyAny>) -> Option<Option<String>> {
        if value.is_none() {
            return Some(None);
        }
        string(value).map(Some)
    }

    fn opt_bool(value: &Bound<'_, PyAny>) -> Option<Option<bool>> {
        if value.is_none() {
            return Some(None);
        }
        value.cast_exact::<PyBool>().ok().map(|b| Some(b.is_true()))
    }

    /// JSON at `depth` below the event (the depth [`to_json`] would count from the root).
    fn json(value: &Bound<'_, PyAny>, depth: usize) -> Option<serde_json::Value> {
        let mut at = String::new();
        to_json(value, &mut at, depth).ok()
    }

    fn turn(value: &Bound<'_, PyAny>) -> Option<TurnIn> {
        let dict = value.cast_exact::<PyDict>().ok()?;
        let mut turn = TurnIn::default();
        for (key, value) in dict.iter() {
            match key.cast::<PyString>().ok()?.to_str().ok()? {
                "text" => turn.text = opt_string(&value)?,
                "needs_more_work" => turn.needs_more_work = opt_bool(&value)?,
                "reasoning" => turn.reasoning = opt_bool(&value)?,
                "finish" => {
                    turn.finish = if value.is_none() {
                        None
                    } else {
                        Some(match string(&value)?.as_str() {
                            "stop" => Finish::Stop,
                            "length" => Finish::Length,
                            "content_filter" => Finish::ContentFilter,
                            "tool_calls" => Finish::ToolCalls,
                            _ => return None,
                        })
                    }
                }
                "tool_calls" => {
                    turn.tool_calls = if value.is_none() {
                        None
                    } else {
                        let list = value.cast_exact::<PyList>().ok()?;
                        let mut calls = Vec::with_capacity(list.len());
                        for item in list.iter() {
                            calls.push(call(&item)?);
                        }
                        Some(calls)
                    }
                }
                // `usage` and anything else: the full reader.
                _ => return None,
            }
        }
        Some(turn)
    }

    fn call(value: &Bound<'_, PyAny>) -> Option<CallIn> {
        let dict = value.cast_exact::<PyDict>().ok()?;
        let (mut id, mut name, mut arguments) = (None, None, None);
        for (key, value) in dict.iter() {
            match key.cast::<PyString>().ok()?.to_str().ok()? {
                "id" => id = opt_string(&value)?,
                "name" => name = Some(string(&value)?),
                "arguments" => {
                    arguments = if value.is_none() {
                        None
                    } else {
                        // event > model_turn > tool_calls > [i] > arguments
                        Some(json(&value, 4)?)
                    }
                }
                _ => return None,
            }
        }
        Some(CallIn {
            id,
            name: name?,
            arguments,
        })
    }

    fn results(value: &Bound<'_, PyAny>) -> Option<Vec<ResultIn>> {
        let list = value.cast_exact::<PyList>().ok()?;
        let mut out = Vec::with_capacity(list.len());
        for item in list.iter() {
            let dict = item.cast_exact::<PyDict>().ok()?;
            let (mut call_id, mut name, mut ok, mut error, mut message) =
                (None, None, None, None, None);
            for (key, value) in dict.iter() {
                match key.cast::<PyString>().ok()?.to_str().ok()? {
                    "call_id" => call_id = Some(string(&value)?),
                    "name" => name = Some(string(&value)?),
                    // Present, even as `None` (a null output).
                    // event > tool_results > [i] > ok
                    "ok" => ok = Some(json(&value, 3)?),
                    "error" => {
                        error = if value.is_none() {
                            None
                        } else {
                            Some(match string(&value)?.as_str() {
                                "permission_denied" => ToolErrorKind::PermissionDenied,
                                "not_found" => ToolErrorKind::NotFound,
                                "auth_failed" => ToolErrorKind::AuthFailed,
                                "timeout" => ToolErrorKind::Timeout,
                                "invalid_arguments" => ToolErrorKind::InvalidArguments,
                                "failed" => ToolErrorKind::Failed,
                                _ => return None,
                            })
                        }
                    }
                    "message" => message = opt_string(&value)?,
                    _ => return None,
                }
            }
            out.push(ResultIn {
                call_id: call_id?,
                name: name?,
                ok,
                error,
                message,
            });
        }
        Some(out)
    }
}

fn policy_of(policy: Option<&Bound<'_, PyAny>>) -> PyResult<Policy> {
    let policy: Policy = match policy {
        None => Policy::default(),
        Some(obj) if obj.is_none() => Policy::default(),
        Some(obj) => read("policy", obj)?,
    };
    policy
        .validate()
        .map_err(|e| value_error(InputError::from(e)))?;
    Ok(policy)
}

fn to_py<T: serde::Serialize>(py: Python<'_>, value: &T) -> PyResult<Py<PyAny>> {
    pythonize(py, value)
        .map(Bound::unbind)
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// The kernel: feed it events with `handle`, take its commands with `next_command`.
#[pyclass(module = "terminus_kernel._native", name = "Machine")]
struct Machine {
    host: Host,
}

#[pymethods]
impl Machine {
    #[new]
    #[pyo3(signature = (
        policy = None, *, task = String::new(), name = None, scale = None,
        journal_steps = Some(terminus_runtime::host::JOURNAL_STEPS)
    ))]
    fn new(
        policy: Option<&Bound<'_, PyAny>>,
        task: String,
        name: Option<String>,
        scale: Option<u64>,
        journal_steps: Option<u32>,
    ) -> PyResult<Self> {
        let policy = policy_of(policy)?;
        // The task's size in units scales the policy's `budget_scale`.
        let policy = match scale {
            Some(units) => policy
                .scaled(units)
                .map_err(|e| value_error(InputError::from(e)))?,
            None => policy,
        };
        let host = Host::new(policy, task, name)
            .map_err(value_error)?
            .keep_journal(journal_steps);
        Ok(Machine { host })
    }

    /// Feeds one event; returns `"step"`, `"observed"` or `"ignored"`.
    fn handle(&mut self, py: Python<'_>, event: &Bound<'_, PyAny>) -> PyResult<Py<PyString>> {
        let event: EventIn = match fast::event(event) {
            Some(event) => event,
            None => read("event", event)?,
        };
        let handled = self.host.handle(event).map_err(value_error)?;
        let name = match handled {
            Handle::Step => pyo3::intern!(py, "step"),
            Handle::Observed => pyo3::intern!(py, "observed"),
            Handle::Ignored => pyo3::intern!(py, "ignored"),
        };
        Ok(name.clone().unbind())
    }

    /// The next command as a dict, or `None` while the kernel waits for an event.
    fn next_command(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if let Some((delay_ms, tools)) = self.host.next_call_model() {
            let dict = PyDict::new(py);
            dict.set_item(
                pyo3::intern!(py, "command"),
                pyo3::intern!(py, "call_model"),
            )?;
            dict.set_item(pyo3::intern!(py, "delay_ms"), delay_ms)?;
            dict.set_item(pyo3::intern!(py, "tools"), tools)?;
            return Ok(Some(dict.into_any().unbind()));
        }
        match self.host.next_command() {
            None => Ok(None),
            Some(CommandOut::RunTools {
                calls,
                refused,
                warnings,
                written,
            }) => {
                let dict = PyDict::new(py);
                dict.set_item(pyo3::intern!(py, "command"), pyo3::intern!(py, "run_tools"))?;
                let list = PyList::empty(py);
                for call in calls {
                    let item = PyDict::new(py);
                    item.set_item(pyo3::intern!(py, "id"), call.id)?;
                    item.set_item(pyo3::intern!(py, "name"), call.name)?;
                    item.set_item(pyo3::intern!(py, "arguments"), to_py(py, &call.arguments)?)?;
                    list.append(item)?;
                }
                dict.set_item(pyo3::intern!(py, "calls"), list)?;
                if !refused.is_empty() {
                    dict.set_item(pyo3::intern!(py, "refused"), to_py(py, &refused)?)?;
                }
                if !warnings.is_empty() {
                    dict.set_item(pyo3::intern!(py, "warnings"), to_py(py, &warnings)?)?;
                }
                if let Some(written) = written {
                    dict.set_item(pyo3::intern!(py, "written"), written)?;
                }
                Ok(Some(dict.into_any().unbind()))
            }
            Some(command) => to_py(py, &command).map(Some),
        }
    }

    /// Goes on with a run a budget stopped, with that budget raised (`{"max_steps": 40}`: a
    /// budget field to its new value): the step the stop pre-empted is taken; returns `"step"`.
    /// A raise that does not lift the budget that stopped the run raises `ValueError` saying
    /// why, and changes nothing.
    fn raise_budgets(&mut self, budgets: &Bound<'_, PyAny>) -> PyResult<&'static str> {
        let budgets: std::collections::BTreeMap<String, u64> = read("budgets", budgets)?;
        self.host.raise(&budgets).map_err(value_error)?;
        Ok("step")
    }

    /// The current state: `Exploring`, `Acting`, `Verifying`, `Nudged`, `Complete`, `Aborted`.
    #[getter]
    fn phase(&self, py: Python<'_>) -> Py<PyString> {
        PyString::intern(py, self.host.phase().as_str()).unbind()
    }

    /// Every counter of the kernel, as a dict.
    #[getter]
    fn stats(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, &self.host.machine().stats())
    }

    /// The policy the machine runs under (scaled and raised as it is now), as a dict with the
    /// fields of the scenario `policy`.
    #[getter]
    fn policy(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, self.host.machine().policy())
    }

    /// Where each budget the policy sets stands, by name: `{limit_field, spent, limit, left}`
    /// (`terminus_runtime::budgets_state`, the `budgets` of `terminus serve`'s AG-UI state); the
    /// deadline only with `elapsed_ms`, the time since the run started.
    #[pyo3(signature = (elapsed_ms = None))]
    fn budgets(&self, py: Python<'_>, elapsed_ms: Option<u64>) -> PyResult<Py<PyAny>> {
        let machine = self.host.machine();
        let state = terminus_runtime::budgets_state(machine.policy(), &machine.stats(), elapsed_ms);
        to_py(py, &state)
    }

    /// The run's state as a user interface follows it (`terminus_runtime::machine_state`, the
    /// kernel's part of `terminus serve`'s AG-UI state): `status` (`running`), `phase`, `step`,
    /// `counters`, `budgets` (the deadline only with `elapsed_ms`), `todos`, `excluded_tools`,
    /// `tool_budgets`, and `elapsed_ms` when given.
    #[pyo3(signature = (elapsed_ms = None))]
    fn state(&self, py: Python<'_>, elapsed_ms: Option<u64>) -> PyResult<Py<PyAny>> {
        to_py(
            py,
            &terminus_runtime::machine_state(self.host.machine(), elapsed_ms),
        )
    }

    /// The report: the fields of `terminus run --json` without the execution id (while the run
    /// goes on, `outcome`, `reason` and `rule` are `None` and the counters are those so far).
    fn report(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, &self.host.report_json())
    }

    /// Why the run stopped and what to change: the text of `terminus inspect`.
    fn explain(&self) -> String {
        self.host.explain().text()
    }

    /// The whole machine as JSON text.
    fn snapshot(&self) -> String {
        self.host.snapshot()
    }

    /// A machine saved by `snapshot`; text that is not one raises `ValueError`.
    #[staticmethod]
    fn restore(snapshot: &str) -> PyResult<Self> {
        let host = Host::restore(snapshot).map_err(value_error)?;
        Ok(Machine { host })
    }

    fn __repr__(&self) -> String {
        let s = self.host.machine().stats();
        format!(
            "<terminus_kernel.Machine {} steps={} model_calls={} tool_calls={}>",
            self.host.phase().as_str(),
            s.steps,
            s.model_calls,
            s.tool_calls
        )
    }
}

mod host;

/// A scale's units: `None`, or a whole number of at least 0 (a `bool` is not one); anything else
/// is a `ValueError` naming `scale`.
fn units(scale: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    match scale.filter(|s| !s.is_none()) {
        None => Ok(None),
        Some(s) if s.is_instance_of::<PyBool>() || !s.is_instance_of::<PyInt>() => {
            Err(value_error(format!(
                "scale: expected a whole number of at least 0, got {s}"
            )))
        }
        Some(s) => s.extract::<u64>().map(Some).map_err(|_| {
            value_error(format!(
                "scale: expected a whole number of at least 0, got {s}"
            ))
        }),
    }
}

/// Messages as the core reads them: a list of dicts (each read strictly) or LangChain message
/// objects (`host::message`), a path named under `root`.
fn messages_of(root: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<Value>> {
    host::messages(obj, root).map_err(value_error)
}

/// The host core for a framework adapter (`terminus_runtime::host::Session`): one run, fed the
/// framework's messages as they are (OpenAI chat, LangChain's `model_dump()`, Pydantic AI's,
/// OpenAI Agents' shapes), answering each hook with a step dict: `jump` (`"model"`, `"tools"`,
/// `"end"` or `None`), `delay_ms`, `tools`, `nudges`, `notices` (for the tool message
/// `notice_to`), `answers` (tool messages instead of running those calls), `written` (the
/// reply's calls written in its text), `drop_reply`, `verify` (answer with `verdict`), `report`.
#[pyclass(module = "terminus_kernel._native", name = "Session")]
struct Session {
    core: terminus_runtime::host::Session,
}

fn step_of(py: Python<'_>, step: Option<terminus_runtime::host::Step>) -> PyResult<Py<PyAny>> {
    match step {
        Some(step) => to_py(py, &step),
        None => Ok(py.None()),
    }
}

#[pymethods]
impl Session {
    /// A run of the task of `messages` (the first user message) under `policy`, scaled for
    /// `scale` units when given (the policy's `budget_scale`, which it must have), started at
    /// `now_ms` (the host's clock, for the deadline): `(session, first step)`. A bad policy
    /// field or a bad scale raise `ValueError` naming it.
    #[staticmethod]
    #[pyo3(signature = (policy, messages, now_ms = 0, scale = None))]
    fn start(
        py: Python<'_>,
        policy: Option<&Bound<'_, PyAny>>,
        messages: &Bound<'_, PyAny>,
        now_ms: u64,
        scale: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(Session, Py<PyAny>)> {
        let policy = policy_of(policy)?;
        let policy = terminus_runtime::host::scaled(policy, units(scale)?).map_err(value_error)?;
        let messages = messages_of("messages", messages)?;
        let (core, step) = terminus_runtime::host::Session::start(policy, &messages, now_ms)
            .map_err(value_error)?;
        Ok((Session { core }, to_py(py, &step)?))
    }

    /// `policy` as every run of a framework adapter takes it, checked and scaled once for
    /// `scale` units (a dict): what `start` refuses (a bad field, a bad scale) raises `ValueError` naming it here, when the adapter is built.
    #[staticmethod]
    #[pyo3(signature = (policy, scale = None))]
    fn check_policy(
        py: Python<'_>,
        policy: Option<&Bound<'_, PyAny>>,
        scale: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let policy = policy_of(policy)?;
        let policy = terminus_runtime::host::checked(policy, units(scale)?).map_err(value_error)?;
        to_py(py, &policy)
    }

    /// The model's reply (a dict, a list of items, or a LangChain message; `offered`: the tools
    /// the call offered, as names, tool dicts or tool objects, each with its arguments' schema
    /// where its framework keeps it, which types a call written as text; `output_tools`: the names of the
    /// framework's output tools, whose calls are a structured answer, the reply's text): a step,
    /// or `None` only when that reply was fed already (after the run ended, its calls are
    /// answered "not run").
    #[pyo3(signature = (message, offered = None, now_ms = 0, output_tools = Vec::new()))]
    fn reply(
        &mut self,
        py: Python<'_>,
        message: &Bound<'_, PyAny>,
        offered: Option<&Bound<'_, PyAny>>,
        now_ms: u64,
        output_tools: Vec<String>,
    ) -> PyResult<Py<PyAny>> {
        let message = host::message(message, "message").map_err(value_error)?;
        let offered = host::offered(offered)?;
        let step = self
            .core
            .answer_reply(&message, offered, &output_tools, now_ms)
            .map_err(value_error)?;
        step_of(py, step)
    }

    /// The results of the tool turn out, read from the messages after the last reply: a step,
    /// or `None` when no tool turn is out.
    #[pyo3(signature = (messages, now_ms = 0))]
    fn results(
        &mut self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        now_ms: u64,
    ) -> PyResult<Py<PyAny>> {
        let messages = messages_of("messages", messages)?;
        let step = self.core.results(&messages, now_ms).map_err(value_error)?;
        step_of(py, step)
    }

    /// A failed model call of the kernel's class (`rate_limited`, `server`, ...).
    #[pyo3(signature = (kind, retry_after_ms = None, now_ms = 0))]
    fn model_error(
        &mut self,
        py: Python<'_>,
        kind: &Bound<'_, PyAny>,
        retry_after_ms: Option<u64>,
        now_ms: u64,
    ) -> PyResult<Py<PyAny>> {
        let kind = read("kind", kind)?;
        let step = self
            .core
            .model_error(kind, retry_after_ms, now_ms)
            .map_err(value_error)?;
        to_py(py, &step)
    }

    /// The verifier's verdict on the step's `verify`: `True`/`False`, a `(complete, feedback)`
    /// pair, or `{"complete", "feedback", "missing"}`.
    fn verdict(&mut self, py: Python<'_>, verdict: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let answer: Value = read("verdict", verdict)?;
        let verdict = terminus_runtime::host::verdict_of(answer, "verdict").map_err(value_error)?;
        let step = self.core.verdict(verdict).map_err(value_error)?;
        to_py(py, &step)
    }

    /// The rules' verdict on the step's `verify`, for a host without a verifier (complete when
    /// nothing is missing; the missing items as `terminus run` journals them).
    fn verdict_by_rules(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let step = self.core.verdict_by_rules().map_err(value_error)?;
        to_py(py, &step)
    }

    /// Ends a run something else ended (results of the turn out from `messages`, then a
    /// cancel): the last step, or `None` when the run had ended.
    #[pyo3(signature = (messages, now_ms = 0))]
    fn finish(
        &mut self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        now_ms: u64,
    ) -> PyResult<Py<PyAny>> {
        let messages = messages_of("messages", messages)?;
        let step = self.core.finish(&messages, now_ms).map_err(value_error)?;
        step_of(py, step)
    }

    /// What the run awaits, as a dict for the tool hooks (`gate`).
    fn turn(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, self.core.turn())
    }

    /// What a call about to run gets, from a `turn()` dict: `{"refuse": {tool_call_id, name,
    /// content, error}}` or `{"run": {"warning"}}`. A call without an id (`None` or empty) runs
    /// only while the run awaits no call: else it raises `ValueError`, its result could not be
    /// matched to a call.
    #[staticmethod]
    fn gate(
        py: Python<'_>,
        turn: &Bound<'_, PyAny>,
        call_id: Option<&str>,
        name: &str,
        has_tool: bool,
    ) -> PyResult<Py<PyAny>> {
        let turn: terminus_runtime::host::Turn = read("turn", turn)?;
        let call_id = call_id.unwrap_or_default();
        if call_id.is_empty() && !turn.awaiting.is_empty() {
            return Err(PyValueError::new_err(format!(
                "call_id: the call of `{name}` has no id while the run awaits calls (its result \
                 could not be matched to one)"
            )));
        }
        to_py(
            py,
            &terminus_runtime::host::Session::gate(&turn, call_id, name, has_tool),
        )
    }

    /// Whether the run ended.
    #[getter]
    fn ended(&self) -> bool {
        self.core.ended()
    }

    /// Whether a tool turn waits for its results.
    #[getter]
    fn batch_out(&self) -> bool {
        self.core.batch_out()
    }

    /// The report (as `Machine.report()`).
    fn report(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, &self.core.host().report_json())
    }

    /// The text of `terminus inspect` for the run.
    fn explain(&self) -> String {
        self.core.host().explain().text()
    }

    /// The session as JSON text.
    fn snapshot(&self) -> String {
        self.core.snapshot()
    }

    /// The session as bytes for a host's state: the snapshot's text, zlib-compressed from 1 KiB
    /// on (`SessionCache` keeps sessions by these bytes).
    fn pack<'py>(&self, py: Python<'py>) -> Bound<'py, pyo3::types::PyBytes> {
        pyo3::types::PyBytes::new(py, &self.core.pack())
    }

    /// The run's machine (a copy): phase, stats, policy, report.
    fn machine(&self) -> Machine {
        Machine {
            host: self.core.host().clone(),
        }
    }

    /// A session from `pack`'s bytes; bytes that are not one raise `ValueError` naming `name`
    /// (the state's key).
    #[staticmethod]
    #[pyo3(signature = (snapshot, name = "snapshot"))]
    fn unpack(snapshot: &[u8], name: &str) -> PyResult<Self> {
        let core = terminus_runtime::host::Session::unpack(snapshot, name).map_err(value_error)?;
        Ok(Session { core })
    }

    /// A session saved by `snapshot`; text that is not one raises `ValueError`.
    #[staticmethod]
    fn restore(snapshot: &str) -> PyResult<Self> {
        let core = terminus_runtime::host::Session::restore(snapshot).map_err(value_error)?;
        Ok(Session { core })
    }
}

/// Runs a scenario (a path or a dict) in process and returns its report.
#[pyfunction]
fn run_scenario(py: Python<'_>, scenario: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let ran = run_loaded(py, scenario, false)?;
    to_py(py, &ran.report)
}

/// Runs a scenario as [`run_scenario`] does and returns `(report, transcript)`: the transcript
/// is what the scripted model was sent, call by call (`terminus_scenario::sent`), the reference
/// the host suite compares each framework adapter's with.
#[pyfunction]
fn scenario_transcript(
    py: Python<'_>,
    scenario: &Bound<'_, PyAny>,
) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    let ran = run_loaded(py, scenario, true)?;
    let transcript = Value::Array(ran.transcript.unwrap_or_default());
    Ok((to_py(py, &ran.report)?, to_py(py, &transcript)?))
}

/// A scenario from a path or a dict, and how an error names it.
fn load_scenario(scenario: &Bound<'_, PyAny>) -> PyResult<(terminus_scenario::Scenario, String)> {
    use terminus_scenario::Scenario;
    if scenario.is_instance_of::<PyDict>() {
        let value: Value = read("scenario", scenario)?;
        let parsed = Scenario::parse(&value.to_string()).map_err(value_error)?;
        Ok((parsed, "scenario".to_owned()))
    } else {
        let path: std::path::PathBuf = scenario.extract()?;
        let loaded = Scenario::load(&path).map_err(value_error)?;
        Ok((loaded, path.display().to_string()))
    }
}

/// A run of `scenario` in process (`terminus_scenario::in_process`, which Node's `runScenario`
/// runs too), outside the GIL: a scenario that cannot run is a `ValueError`, any other failure
/// a `RuntimeError`, each naming the scenario.
fn run_loaded(
    py: Python<'_>,
    scenario: &Bound<'_, PyAny>,
    transcript: bool,
) -> PyResult<terminus_scenario::in_process::Ran> {
    use terminus_scenario::in_process::{RunError, run_in_process};
    let (loaded, what) = load_scenario(scenario)?;
    match py.detach(move || run_in_process(loaded, &what, transcript)) {
        Ok(ran) => Ok(ran),
        Err(RunError::Invalid(message)) => Err(PyValueError::new_err(message)),
        Err(RunError::Failed(message)) => Err(PyRuntimeError::new_err(message)),
    }
}

/// The kernel's class of a provider failure: HTTP `status` and the error's text or body (the
/// table every host shares, `terminus_runtime::host::provider`). A status outside 100-599 is a
/// `ValueError`.
#[pyfunction]
fn provider_error_kind(status: i64, text: &str) -> PyResult<&'static str> {
    match u16::try_from(status) {
        Ok(status) if (100..600).contains(&status) => {
            Ok(terminus_runtime::host::provider::classify_error(status, text).as_str())
        }
        _ => Err(PyValueError::new_err(format!(
            "status: {status} is not an HTTP status (100-599)"
        ))),
    }
}

/// `content` with a step's `notices` after it, where the step's `notice_to` says: the notices
/// joined by blank lines, after a blank line, or alone when `content` is empty
/// (`terminus_runtime::host::messages::with_notices`, the rule `terminus run` follows).
#[pyfunction]
fn with_notices(content: &str, notices: Vec<String>) -> String {
    terminus_runtime::host::messages::with_notices(content, &notices)
}

/// The user message a checkpoint written for the agent adds before the next model call (a
/// step's `checkpoint`): its `note`, a blank line, then the model's `summary` (trimmed; "(The
/// model wrote no summary.)" when empty), or why there is none: `failed`, the kernel's class of
/// the failed call and its message, or neither (it did not answer in time)
/// (`terminus_runtime::host::messages::checkpoint_message`, the words `terminus run` writes).
#[pyfunction]
#[pyo3(signature = (note, summary=None, failed=None))]
fn checkpoint_message(
    note: &str,
    summary: Option<&str>,
    failed: Option<(String, String)>,
) -> String {
    use terminus_runtime::host::messages::Summary;
    let summary = match (summary, &failed) {
        (Some(text), _) => Summary::Reply(text),
        (None, Some((kind, message))) => Summary::Failed { kind, message },
        (None, None) => Summary::NoAnswer,
    };
    terminus_runtime::host::messages::checkpoint_message(note, summary)
}

/// The RFC 6902 operations that turn `old` into `new` (JSON values): objects key by key (in
/// key order), anything else replaced whole; `[]` when they are equal
/// (`terminus_runtime::json_patch`, the diff of `terminus serve`'s `STATE_DELTA`). A value that
/// is not JSON raises `ValueError` naming where.
#[pyfunction]
fn json_patch(
    py: Python<'_>,
    old: &Bound<'_, PyAny>,
    new: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    let old: Value = read("old", old)?;
    let new: Value = read("new", new)?;
    to_py(py, &terminus_runtime::json_patch(&old, &new))
}

/// The delay a provider asked for, in milliseconds, from its `retry-after-ms` and `retry-after`
/// headers (seconds or an HTTP date), capped at 60 s; `None` when neither says one. The parser
/// the command line's HTTP client uses (`terminus_runtime::host::provider::retry_after_ms`).
#[pyfunction]
#[pyo3(signature = (retry_after_ms=None, retry_after=None))]
fn retry_after_ms(retry_after_ms: Option<&str>, retry_after: Option<&str>) -> Option<u64> {
    terminus_runtime::host::provider::retry_after_ms(
        retry_after_ms,
        retry_after,
        std::time::SystemTime::now(),
        terminus_runtime::host::provider::RETRY_AFTER_CAP,
    )
}

/// A multi-agent plan run whose agents are the host's own
/// ([`terminus_orchestrator::LocalPlan`]): the decisions of `terminus orchestrate`, the acts as
/// JSON text. `terminus_kernel.plan.run_plan` carries them out on asyncio.
#[pyclass(module = "terminus_kernel._native", name = "NativePlan")]
struct NativePlan {
    core: terminus_orchestrator::LocalPlan,
    /// Where the progress is kept, when a journal was given.
    journal: Option<terminus_scenario::plan::HostJournal>,
}

#[pymethods]
impl NativePlan {
    /// The run of the plan `text` (JSON; file scenarios relative to `base`) as `execution`
    /// (default: the plan's name), going on from `progress` (JSON text) when given; `functions`
    /// names the agents the host gave a function. With `journal` (a SQLite file or a
    /// `postgres://` URL) the progress is kept there and goes on from what it keeps (opening it
    /// blocks, without the GIL). An invalid plan is a `ValueError` with one `PATH: PROBLEM` line
    /// per problem.
    #[staticmethod]
    #[pyo3(signature = (text, base, execution=None, progress=None, functions=Vec::new(), journal=None))]
    fn start(
        py: Python<'_>,
        text: &str,
        base: &str,
        execution: Option<&str>,
        progress: Option<&str>,
        functions: Vec<String>,
        journal: Option<&str>,
    ) -> PyResult<NativePlan> {
        py.detach(|| {
            terminus_scenario::plan::host_run(
                text,
                std::path::Path::new(base),
                execution,
                progress,
                &functions,
                journal,
            )
        })
        .map(|(core, journal)| NativePlan { core, journal })
        .map_err(value_error)
    }

    /// Keeps what changed since the last `save` act in the journal, each cell read back:
    /// blocking without the GIL (call it from a thread); nothing to do without a journal.
    fn save(&mut self, py: Python<'_>) -> PyResult<()> {
        let changes = self.core.take_changes();
        let Some(journal) = &mut self.journal else {
            return Ok(());
        };
        py.detach(|| journal.save(changes))
            .map_err(PyRuntimeError::new_err)
    }

    /// The next act at plan time `now_ms` (JSON text), or `None` until an attempt ends, the
    /// next wake passes or the host cancels.
    fn next(&mut self, now_ms: u64) -> Option<String> {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.core.next(now_ms, unix_ms).map(|act| act.to_string())
    }

    /// How the attempt of agent `index` ended (JSON text: `{"result"}`, `{"error"}` or
    /// `{"report"}`); a `ValueError` names what is wrong.
    fn finished(&mut self, index: usize, outcome: &str) -> PyResult<()> {
        let outcome: Value = serde_json::from_str(outcome).map_err(value_error)?;
        self.core.finished(index, &outcome).map_err(value_error)
    }

    /// The scenario attempt of agent `index`, to run with `NativeAttempt.run` (a `cancel` act
    /// kills it).
    fn scenario_attempt(&mut self, index: usize) -> PyResult<NativeAttempt> {
        let launch = self.core.scenario_launch(index).ok_or_else(|| {
            PyValueError::new_err(format!("agent {index} has no scenario attempt running"))
        })?;
        Ok(NativeAttempt {
            launch: Some(launch),
        })
    }

    /// The host cancels the plan at plan time `now_ms`.
    fn cancel(&mut self, now_ms: u64) {
        self.core.cancel(now_ms);
    }

    /// When (plan time) there is something to do if no attempt ends first.
    fn next_wake(&self) -> Option<u64> {
        self.core.next_wake()
    }

    /// Plan time spent before this process went on.
    fn elapsed_before(&self) -> u64 {
        self.core.elapsed_before()
    }

    /// The progress to keep (JSON text), for `start` after a crash.
    fn progress(&self) -> String {
        self.core.progress().to_string()
    }
}

/// A plan's scenario attempt ([`NativePlan::scenario_attempt`]).
#[pyclass(module = "terminus_kernel._native", name = "NativeAttempt")]
struct NativeAttempt {
    launch: Option<terminus_orchestrator::Launch>,
}

#[pymethods]
impl NativeAttempt {
    /// Runs the attempt in process, blocking without the GIL (call it from a thread): its
    /// report as JSON text.
    fn run(&mut self, py: Python<'_>) -> PyResult<String> {
        let launch = self
            .launch
            .take()
            .ok_or_else(|| PyValueError::new_err("the attempt ran already"))?;
        let report = py
            .detach(move || terminus_scenario::plan::run_launch(launch))
            .map_err(PyRuntimeError::new_err)?;
        serde_json::to_string(&report).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }
}

/// A plan written by a model the host calls: `terminus_kernel.plan.generate_plan` wraps it.
#[pyclass(module = "terminus_kernel._native", name = "NativeGenerator")]
struct NativeGenerator {
    core: terminus_scenario::plan::HostGenerator,
}

#[pymethods]
impl NativeGenerator {
    /// The generation of a plan for `task` from the generator file `text`; a bad file raises
    /// `ValueError` with one `PATH: PROBLEM` line per problem.
    #[staticmethod]
    fn start(text: &str, base: &str, task: &str) -> PyResult<NativeGenerator> {
        terminus_scenario::plan::HostGenerator::new(text, std::path::Path::new(base), task)
            .map(|core| NativeGenerator { core })
            .map_err(value_error)
    }

    /// What to do next (JSON text): `{"ask"}`, `{"run", "generation"}` or `{"no_plan",
    /// "generation"}` (`execution` names the plan that never ran; default: the file's name).
    #[pyo3(signature = (execution=None))]
    fn step(&mut self, execution: Option<&str>) -> String {
        self.core.step(execution).to_string()
    }

    /// How the model call for the last `ask` ended (JSON text: `{"output"}`, what the model
    /// function gave, or `{"error"}`).
    fn answer(&mut self, ended: &str) -> PyResult<()> {
        let ended: Value = serde_json::from_str(ended).map_err(value_error)?;
        self.core.answer(&ended).map_err(value_error)
    }
}

/// Whether `text`, taken for an agent's answer in a run nobody answers, only hands the task back
/// (asks for more, apologises, tells the reader to act, disclaims itself, closes courteously):
/// the kernel's own rule, for a host agent whose reply does not go through a `Session`.
#[pyfunction]
fn is_non_answer(text: &str) -> bool {
    terminus_kernel::answer::hands_back(text, &terminus_kernel::answer::Said::default())
}

/// Starts the process's telemetry (`terminus_kernel.telemetry.start` wraps it): `(exporting
/// spans, started already)`. A bad `OTEL_*` setting raises `ValueError`; a process whose telemetry
/// was shut down, `RuntimeError`.
#[pyfunction]
fn start_telemetry(py: Python<'_>) -> PyResult<(bool, bool)> {
    use terminus_telemetry::TelemetryError;
    match py.detach(terminus_telemetry::process::start) {
        Ok(s) => Ok((s.exporting_spans, s.already)),
        Err(e @ TelemetryError::Exporter(_)) => Err(PyValueError::new_err(e.to_string())),
        Err(e) => Err(PyRuntimeError::new_err(e.to_string())),
    }
}

/// The metrics recorded since the telemetry started, as Prometheus text; `None` before.
#[pyfunction]
fn metrics_text() -> Option<String> {
    terminus_telemetry::process::metrics_text()
}

/// Sends the spans batched so far (blocks until the collector answers).
#[pyfunction]
fn flush_telemetry(py: Python<'_>) -> PyResult<()> {
    py.detach(terminus_telemetry::process::flush)
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// Flushes and stops the span exporter, for good.
#[pyfunction]
fn shutdown_telemetry(py: Python<'_>) -> PyResult<()> {
    py.detach(terminus_telemetry::process::shutdown)
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// The compiled core of `terminus_kernel`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Machine>()?;
    m.add_class::<Session>()?;
    m.add_class::<host::SessionCache>()?;
    m.add_class::<NativePlan>()?;
    m.add_class::<NativeAttempt>()?;
    m.add_class::<NativeGenerator>()?;
    m.add_function(wrap_pyfunction!(run_scenario, m)?)?;
    m.add_function(wrap_pyfunction!(scenario_transcript, m)?)?;
    m.add_function(wrap_pyfunction!(is_non_answer, m)?)?;
    m.add_function(wrap_pyfunction!(provider_error_kind, m)?)?;
    m.add_function(wrap_pyfunction!(retry_after_ms, m)?)?;
    m.add_function(wrap_pyfunction!(with_notices, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint_message, m)?)?;
    m.add_function(wrap_pyfunction!(json_patch, m)?)?;
    m.add_function(wrap_pyfunction!(start_telemetry, m)?)?;
    m.add_function(wrap_pyfunction!(metrics_text, m)?)?;
    m.add_function(wrap_pyfunction!(flush_telemetry, m)?)?;
    m.add_function(wrap_pyfunction!(shutdown_telemetry, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
