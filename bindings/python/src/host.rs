//! What the host core reads of Python objects, and the live sessions of a host's state.
//!
//! A framework adapter gives the core its messages as they are. A dict (or a list of them: an
//! OpenAI Agents turn) is read as JSON, strictly; a LangChain message object (`BaseMessage`) is
//! read by the fields the core uses of its `model_dump()` (`terminus_runtime::host::messages`),
//! without dumping the rest: an artifact or provider metadata need not be JSON. The names of the
//! tools a model call offers are read from the framework's tool list as it is.
//!
//! [`SessionCache`] keeps a host's sessions by the bytes it stores in its state
//! ([`terminus_runtime::host::Session::pack`]): the session a hook left, live, so the next hook
//! of the same process does not restore it, and what each snapshot's run awaits (its `turn()`),
//! which a tool hook reads.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use serde_json::{Map, Value};
use terminus_runtime::host::{InputError, Offered};

use super::{Session, to_json, to_py, value_error};

/// A message the core reads: a dict or list as JSON, or a LangChain message object by its
/// fields; anything else is an error naming its path `at`.
pub(crate) fn message(obj: &Bound<'_, PyAny>, at: &str) -> Result<Value, InputError> {
    let mut at = at.to_owned();
    if obj.is_instance_of::<PyDict>() || obj.is_instance_of::<PyList>() {
        return to_json(obj, &mut at, 0);
    }
    // A LangChain message (`BaseMessage`): a string `type`, `content`, and the metadata dicts
    // every message has; any other object is refused, naming what it is.
    let has = |name: &str| obj.hasattr(name).unwrap_or(false);
    let kind = obj.getattr("type").ok();
    let kind = kind.as_ref().and_then(|k| k.cast::<PyString>().ok());
    match kind {
        Some(kind) if has("content") && has("response_metadata") && has("additional_kwargs") => {
            langchain(obj, &kind.to_string(), &mut at)
        }
        _ => to_json(obj, &mut at, 0),
    }
}

/// A list of messages (each as [`message`] reads it, its path `root[i]`).
pub(crate) fn messages(obj: &Bound<'_, PyAny>, root: &str) -> Result<Vec<Value>, InputError> {
    let items: Vec<Bound<'_, PyAny>> = if let Ok(list) = obj.cast::<PyList>() {
        list.iter().collect()
    } else if let Ok(tuple) = obj.cast::<PyTuple>() {
        tuple.iter().collect()
    } else {
        return Err(InputError::at(
            root,
            "expected a list of messages".to_owned(),
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, m)| message(m, &format!("{root}[{i}]")))
        .collect()
}

/// The attribute `name` of `obj`, `None` when it is missing or `None`.
fn attr<'py>(obj: &Bound<'py, PyAny>, name: &str) -> Option<Bound<'py, PyAny>> {
    obj.getattr(name).ok().filter(|v| !v.is_none())
}

/// `dict[key]` when `dict` is a dict and the value a string.
fn str_in(dict: Option<&Bound<'_, PyAny>>, key: &str) -> Option<String> {
    let value = dict?.cast::<PyDict>().ok()?.get_item(key).ok()??;
    value.cast::<PyString>().ok().map(|s| s.to_string())
}

/// A LangChain message: the fields of its `model_dump()` that the core reads.
fn langchain(obj: &Bound<'_, PyAny>, kind: &str, at: &mut String) -> Result<Value, InputError> {
    let mut out = Map::new();
    out.insert("type".into(), Value::String(kind.to_owned()));
    let id = attr(obj, "id").and_then(|id| id.cast::<PyString>().ok().map(|s| s.to_string()));
    out.insert("id".into(), id.map_or(Value::Null, Value::String));
    let mut field = |out: &mut Map<String, Value>, name: &str, value: Option<Bound<'_, PyAny>>| {
        let len = at.len();
        at.push('.');
        at.push_str(name);
        let read = value.map_or(Ok(Value::Null), |v| to_json(&v, at, 1));
        at.truncate(len);
        out.insert(name.to_owned(), read?);
        Ok::<(), InputError>(())
    };
    field(&mut out, "content", attr(obj, "content"))?;
    let meta = attr(obj, "response_metadata");
    let mut picked = Map::new();
    if kind == "tool" {
        field(&mut out, "tool_call_id", attr(obj, "tool_call_id"))?;
        field(&mut out, "status", attr(obj, "status"))?;
        if let Some(error) = str_in(meta.as_ref(), "terminus_error") {
            picked.insert("terminus_error".into(), Value::String(error));
        }
    } else if matches!(kind, "ai" | "AIMessageChunk") {
        field(&mut out, "tool_calls", attr(obj, "tool_calls"))?;
        field(
            &mut out,
            "invalid_tool_calls",
            attr(obj, "invalid_tool_calls"),
        )?;
        if let Some(usage) = attr(obj, "usage_metadata") {
            let count = |key: &str| int_in(&usage, key).map_or(Value::from(0), Value::from);
            let usage: Map<String, Value> = ["input_tokens", "output_tokens"]
                .into_iter()
                .map(|k| (k.to_owned(), count(k)))
                .collect();
            out.insert("usage_metadata".into(), Value::Object(usage));
        }
        for key in ["finish_reason", "stop_reason"] {
            if let Some(reason) = str_in(meta.as_ref(), key) {
                picked.insert(key.into(), Value::String(reason));
            }
        }
        // Reasoning output: whether the provider put any beside the reply.
        let extra = attr(obj, "additional_kwargs");
        let filled = |key: &str| {
            let dict = extra.as_ref().and_then(|e| e.cast::<PyDict>().ok());
            let value = dict.and_then(|d| d.get_item(key).ok().flatten());
            value.is_some_and(|v| v.is_truthy().unwrap_or(false))
        };
        let reasoning = filled("reasoning_content") || filled("reasoning");
        let mut kwargs = Map::new();
        kwargs.insert("reasoning".into(), Value::Bool(reasoning));
        out.insert("additional_kwargs".into(), Value::Object(kwargs));
    } else {
        return Ok(Value::Object(out));
    }
    out.insert("response_metadata".into(), Value::Object(picked));
    Ok(Value::Object(out))
}

/// `usage[key]` as an integer, when it is one (a float is truncated, as `int()` does).
fn int_in(usage: &Bound<'_, PyAny>, key: &str) -> Option<i64> {
    let value = usage.cast::<PyDict>().ok()?.get_item(key).ok()??;
    value
        .extract::<i64>()
        .ok()
        .or_else(|| value.extract::<f64>().ok().map(|f| f as i64))
}

/// The tools a model call offers, from the framework's list as it is: names, tool dicts
/// (`name`, or an OpenAI `function.name`) or tool objects (`name`), each with its arguments'
/// JSON Schema when it has one ([`schema_of`]). Entries without a name are skipped; `None` is
/// `None` (the host does not know).
pub(crate) fn offered(tools: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<Offered>>> {
    let Some(tools) = tools.filter(|t| !t.is_none()) else {
        return Ok(None);
    };
    if tools.is_instance_of::<PyString>() || tools.is_instance_of::<PyDict>() {
        return Err(PyValueError::new_err(
            "offered: expected a list of tools or names",
        ));
    }
    let mut out = Vec::new();
    for (i, tool) in tools
        .try_iter()
        .map_err(|_| PyValueError::new_err("offered: expected a list of tools or names"))?
        .enumerate()
    {
        let tool = tool?;
        let (name, parameters) = if tool.is_instance_of::<PyString>() {
            (named(Some(tool)), None)
        } else if let Ok(dict) = tool.cast::<PyDict>() {
            let function = dict
                .get_item("function")
                .ok()
                .flatten()
                .and_then(|f| f.cast_into::<PyDict>().ok());
            let name = named(dict.get_item("name").ok().flatten())
                .or_else(|| named(function.as_ref()?.get_item("name").ok()?));
            let parameters = schema_of(&tool, function.as_ref(), i)?;
            (name, parameters)
        } else {
            read_tool(&tool, i)?
        };
        if let Some(name) = name {
            out.push(Offered { name, parameters });
        }
    }
    Ok(Some(out))
}

/// A name: a non-empty string.
fn named(value: Option<Bound<'_, PyAny>>) -> Option<String> {
    value
        .and_then(|n| n.cast::<PyString>().ok().map(|s| s.to_string()))
        .filter(|n| !n.is_empty())
}

/// A tool object's name and schema, read once per object: a framework offers the same tool
/// objects at every model call, and reading one's schema (a property that builds it, attributes a
/// model class looks up and misses) cost more than the rest of the reply (LangChain's `args`, and
/// pydantic's `__getattr__` for each attribute another framework keeps its schema in: about 130 us
/// a model call for DeepAgents' nine tools). The entry holds the object, so its id is not reused
/// while cached; the cache is emptied when it holds [`TOOLS_CACHED`] objects.
fn read_tool(tool: &Bound<'_, PyAny>, i: usize) -> PyResult<(Option<String>, Option<Value>)> {
    let key = tool.as_ptr() as usize;
    let tools = || {
        TOOLS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    if let Some((_, name, schema)) = tools().get(&key) {
        return Ok((name.clone(), schema.clone()));
    }
    // Read without the lock: Python code runs here, and another thread may take the GIL and
    // come to the cache meanwhile.
    let name = named(attr(tool, "name"));
    let schema = schema_of(tool, None, i)?;
    let entry = (tool.clone().unbind(), name.clone(), schema.clone());
    // What leaves the cache is dropped after the lock (a drop may run Python code too).
    let (evicted, replaced) = {
        let mut cache = tools();
        let evicted = if cache.len() >= TOOLS_CACHED {
            std::mem::take(&mut *cache)
        } else {
            HashMap::new()
        };
        (evicted, cache.insert(key, entry))
    };
    drop((evicted, replaced));
    Ok((name, schema))
}

/// The most tool objects [`read_tool`] keeps.
const TOOLS_CACHED: usize = 512;

type ToolEntry = (Py<PyAny>, Option<String>, Option<Value>);

static TOOLS: std::sync::LazyLock<Mutex<HashMap<usize, ToolEntry>>> =
    std::sync::LazyLock::new(|| Mutex::new(HashMap::new()));

/// The JSON Schema of a tool's arguments, where the frameworks keep it: a dict's `parameters`
/// (OpenAI), `function.parameters`, `input_schema` / `inputSchema` (Anthropic, MCP); an
/// object's `parameters_json_schema` (Pydantic AI), `params_json_schema` (OpenAI Agents),
/// `inputSchema` (MCP), or LangChain's `args` (the properties). A dict's schema that is not a
/// JSON object is an error naming the tool (`offered[i]`); none found is `None`.
fn schema_of(
    tool: &Bound<'_, PyAny>,
    function: Option<&Bound<'_, PyDict>>,
    i: usize,
) -> PyResult<Option<Value>> {
    const KEYS: [&str; 3] = ["parameters", "input_schema", "inputSchema"];
    const ATTRS: [&str; 3] = [
        "parameters_json_schema",
        "params_json_schema",
        "inputSchema",
    ];
    let found = if let Ok(dict) = tool.cast::<PyDict>() {
        KEYS.iter()
            .find_map(|k| dict.get_item(k).ok().flatten().filter(|v| !v.is_none()))
            .or_else(|| function?.get_item("parameters").ok().flatten())
            .map(|v| (v, false))
    } else {
        ATTRS
            .iter()
            .find_map(|a| attr(tool, a))
            .map(|v| (v, false))
            .or_else(|| attr(tool, "args").map(|v| (v, true)))
    };
    let Some((value, properties)) = found else {
        return Ok(None);
    };
    // A dict says where its schema is; an object's attribute of another framework's meaning
    // (not a dict, not JSON) is no schema of ours.
    let given = tool.is_instance_of::<PyDict>();
    let mut at = format!("offered[{i}]");
    let json = match to_json(&value, &mut at, 0) {
        Ok(json) => json,
        Err(e) if given => return Err(value_error(&e)),
        Err(_) => return Ok(None),
    };
    match json {
        Value::Object(map) if properties => {
            let mut schema = Map::new();
            schema.insert("type".to_owned(), Value::String("object".to_owned()));
            schema.insert("properties".to_owned(), Value::Object(map));
            Ok(Some(Value::Object(schema)))
        }
        json @ Value::Object(_) => Ok(Some(json)),
        _ if given => Err(PyValueError::new_err(format!(
            "offered[{i}]: the tool's schema is not a JSON object"
        ))),
        _ => Ok(None),
    }
}

/// One snapshot's entry: the live session a hook left (until a hook takes it), and its turn.
struct Entry {
    session: Option<Py<Session>>,
    turn: Py<PyAny>,
}

/// The entries, oldest first.
#[derive(Default)]
struct Entries {
    order: VecDeque<Vec<u8>>,
    by_snapshot: HashMap<Vec<u8>, Entry>,
}

/// A host's sessions by the bytes it keeps in its state (`Session.pack()`): `save` packs a
/// session and keeps it live; `take` gives the session of a state's bytes (the live one, else
/// restored from them); `turn` what that run awaits. Holds the last `capacity` snapshots. A copy
/// (`copy.deepcopy`, pickling) is an empty cache: the sessions belong to this process.
#[pyclass(module = "terminus_kernel._native", name = "SessionCache")]
pub(crate) struct SessionCache {
    /// The state's key, naming the bytes in errors.
    name: String,
    capacity: usize,
    entries: Mutex<Entries>,
}

impl SessionCache {
    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic cannot happen while the lock is held; a poisoned lock still holds a cache.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `entry` under `snapshot` (a live session saved replaces what was there; a turn
    /// restored keeps a live session another thread saved meanwhile). What it replaces or evicts
    /// is dropped after the lock is released: dropping a Python object can run Python code.
    fn insert(&self, snapshot: Vec<u8>, entry: Entry) {
        let mut dropped = Vec::new();
        {
            let mut entries = self.entries();
            let Entries { order, by_snapshot } = &mut *entries;
            match by_snapshot.entry(snapshot) {
                std::collections::hash_map::Entry::Occupied(mut held) => {
                    if entry.session.is_some() {
                        dropped.push(std::mem::replace(held.get_mut(), entry));
                    } else {
                        dropped.push(entry);
                    }
                }
                std::collections::hash_map::Entry::Vacant(free) => {
                    order.push_back(free.key().clone());
                    free.insert(entry);
                }
            }
            while by_snapshot.len() > self.capacity {
                let Some(oldest) = order.pop_front() else {
                    break;
                };
                dropped.extend(by_snapshot.remove(&oldest));
            }
        }
        drop(dropped);
    }

    fn bytes<'a>(&self, snapshot: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
        let bytes = snapshot.cast::<PyBytes>().map(|b| b.as_bytes());
        bytes.ok().filter(|b| !b.is_empty()).ok_or_else(|| {
            let kind = snapshot
                .get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string());
            PyValueError::new_err(format!(
                "{}: the state holds no machine (a {kind}, not a snapshot's bytes); was the \
                 agent built with this middleware?",
                self.name
            ))
        })
    }

    fn restore(&self, snapshot: &[u8]) -> PyResult<Session> {
        let core =
            terminus_runtime::host::Session::unpack(snapshot, &self.name).map_err(value_error)?;
        Ok(Session { core })
    }
}

#[pymethods]
impl SessionCache {
    #[new]
    #[pyo3(signature = (name = "snapshot".to_owned(), capacity = 256))]
    fn new(name: String, capacity: usize) -> Self {
        SessionCache {
            name,
            capacity: capacity.max(1),
            entries: Mutex::default(),
        }
    }

    /// The session packed (`Session.pack()`), kept live under those bytes: the bytes.
    fn save(&self, py: Python<'_>, session: Bound<'_, Session>) -> PyResult<Py<PyBytes>> {
        let (packed, turn) = {
            let s = session.try_borrow()?;
            (s.core.pack(), to_py(py, s.core.turn())?)
        };
        let out = PyBytes::new(py, &packed).unbind();
        let session = Some(session.unbind());
        self.insert(packed, Entry { session, turn });
        Ok(out)
    }

    /// The session of `snapshot`: the live one saved under it (taken: a second `take` restores
    /// it again), else restored from the bytes. Bytes that are no snapshot raise `ValueError`.
    fn take(&self, py: Python<'_>, snapshot: &Bound<'_, PyAny>) -> PyResult<Py<Session>> {
        let bytes = self.bytes(snapshot)?;
        let live = self
            .entries()
            .by_snapshot
            .get_mut(bytes)
            .and_then(|e| e.session.take());
        match live {
            Some(session) => Ok(session),
            None => Py::new(py, self.restore(bytes)?),
        }
    }

    /// What the run of `snapshot` awaits (`Session.turn()`).
    fn turn(&self, py: Python<'_>, snapshot: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let bytes = self.bytes(snapshot)?;
        if let Some(entry) = self.entries().by_snapshot.get(bytes) {
            return Ok(entry.turn.clone_ref(py));
        }
        let turn = to_py(py, self.restore(bytes)?.core.turn())?;
        let entry = Entry {
            session: None,
            turn: turn.clone_ref(py),
        };
        self.insert(bytes.to_vec(), entry);
        Ok(turn)
    }

    /// Forgets every session (each is restored from its bytes next time).
    fn clear(&self) {
        let forgotten = std::mem::take(&mut *self.entries());
        drop(forgotten); // after the lock is released
    }

    fn __len__(&self) -> usize {
        self.entries().by_snapshot.len()
    }

    fn __deepcopy__(&self, _memo: &Bound<'_, PyAny>) -> Self {
        SessionCache::new(self.name.clone(), self.capacity)
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, pyo3::types::PyType>, (String, usize))> {
        let this = slf.borrow();
        Ok((slf.get_type(), (this.name.clone(), this.capacity)))
    }
}
