//! The native core of the `terminus-kernel` npm package: the Terminus kernel for Node.js.
//!
//! A thin layer over [`terminus_runtime::host::Host`] (the kernel with the embedding contract's
//! JSON vocabulary, its journal, report and explanation) and over the runtime for
//! [`run_scenario`]. Values cross the boundary two ways:
//!
//! - The common events (a model turn, tool results, a clock reading) in plain fields: the
//!   package's JavaScript layer (`index.js`) takes them apart when every field is one it can
//!   prove valid ([`turn`], [`turn_call`], [`results`], [`result`], [`tick`]: functions of the
//!   module taking the machine's id, see `HOSTS`), and the addon builds the same [`EventIn`]
//!   serde would read. A turn of one call with an id and a single result, the common events,
//!   cross without an array and with their strings in one (`turnCall`, `result`); others with
//!   an array of strings. An event either cannot take as given (a field `index.js` is not sure
//!   of, arguments serde refuses) ends in [`AGAIN`] before anything changed, and goes the JSON
//!   way.
//! - Any event as JSON text (`NativeMachine::handle`): `index.js` checks a JavaScript value is
//!   JSON (naming the path of what is not) and serializes it, so the event is read by the same
//!   `serde` code as in Rust and Python and every error names its JSON path.
//!
//! Each event answers in one crossing: what the kernel did, how many commands wait, and the
//! first of them (`call_model` in the answer's bits; `run_tools` of the turn just given as a bit,
//! `index.js` building it from the calls it gave; any other as JSON text), see `answer`.
//! `index.js` hands that command out without a call and tells the addon at its next call how
//! many it took (`taken`). Nothing here panics on any input (every
//! input error is a `Result`); `catch_unwind` on every export is only a backstop that would turn
//! a bug into a JavaScript `Error` instead of aborting the process.

use napi::bindgen_prelude::Either;
use napi::{Error, Result, Status};
use napi_derive::napi;
use serde_json::Value;
use std::cell::RefCell;
use terminus_kernel::{Finish, ToolErrorKind, Usage};
use terminus_runtime::host::{
    CallIn, EventIn, Handle, Host, InputError, Offered, ResultIn, TurnIn, policy_from_json,
};

/// The addon's allocator. An event's cost in the `Host` is mostly small allocations (names,
/// records, commands), which mimalloc serves in about half the time of the system's `malloc`
/// (`bench/events.js`). Memory the addon hands to Node is copied by napi, so no allocation
/// crosses allocators.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The answer of a fast-path call that cannot take the event as given (its low two bits, 3, are
/// no [`Handle`]): nothing changed, and `index.js` sends the event as JSON text instead.
pub const AGAIN: u32 = u32::MAX;

/// [`AGAIN`], but the `taken` commands were dropped: `index.js` sends the event as JSON text
/// with none to drop.
pub const AGAIN_TAKEN: u32 = u32::MAX - 1;

/// The most pending commands an answer counts (its top 27 bits).
const MAX_PENDING: u32 = u32::MAX >> 5;

/// The largest integer a JavaScript number holds exactly (`Number.MAX_SAFE_INTEGER`).
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// A JavaScript number as a `u64`, if it is a whole number from 0 to `MAX_SAFE`.
fn whole(n: f64) -> Option<u64> {
    // Exact: a whole number in range converts without rounding.
    ((0.0..=MAX_SAFE).contains(&n) && n.fract() == 0.0).then_some(n as u64)
}

/// A tri-state field of the fast path's `flags`: 0 absent, 1 false, 2 true (3 is no value).
fn tri(bits: u32) -> Option<Option<bool>> {
    match bits & 3 {
        0 => Some(None),
        1 => Some(Some(false)),
        2 => Some(Some(true)),
        _ => None,
    }
}

fn invalid(e: impl std::fmt::Display) -> Error {
    Error::new(Status::InvalidArg, e.to_string())
}

/// An error in an event or a policy, worded as the Python binding words it: serde_json reading
/// text adds where in the text (` at line 1 column 23`), which says nothing to a host that gave
/// an object (the path already says where).
fn input(e: InputError) -> Error {
    let message = match e.message.rsplit_once(" at line ") {
        Some((head, tail))
            if tail.split_once(" column ").is_some_and(|(line, column)| {
                !line.is_empty()
                    && !column.is_empty()
                    && line
                        .bytes()
                        .chain(column.bytes())
                        .all(|b| b.is_ascii_digit())
            }) =>
        {
            head
        }
        _ => e.message.as_str(),
    };
    invalid(format!("{}: {message}", e.path))
}

fn failed(e: impl std::fmt::Display) -> Error {
    Error::new(Status::GenericFailure, e.to_string())
}

/// A model turn from the fast path's fields (see [`turn`]), or `None` where
/// they are not what serde would read.
fn turn_in(
    flags: u32,
    text: Option<String>,
    input_tokens: f64,
    output_tokens: f64,
    tool_calls: Option<Vec<CallIn>>,
) -> Option<TurnIn> {
    let (Some(needs_more_work), Some(reasoning)) = (tri(flags), tri(flags >> 2)) else {
        return None;
    };
    let finish = match (flags >> 4) & 7 {
        0 => None,
        1 => Some(Finish::Stop),
        2 => Some(Finish::Length),
        3 => Some(Finish::ContentFilter),
        4 => Some(Finish::ToolCalls),
        _ => return None,
    };
    let usage = if flags & 0x80 == 0 {
        None
    } else {
        Some(Usage {
            input_tokens: whole(input_tokens)?,
            output_tokens: whole(output_tokens)?,
        })
    };
    Some(TurnIn {
        text,
        tool_calls,
        needs_more_work,
        usage,
        finish,
        reasoning,
        // A turn with offered tool names goes the JSON way.
        tools: None,
    })
}

/// A tool call from the fast path's fields (`arguments` as JSON text, or absent), or `None`
/// where serde refuses the arguments.
fn call_in(id: Option<String>, name: String, arguments: Option<String>) -> Option<CallIn> {
    let arguments = match arguments {
        None => None,
        Some(json) => Some(serde_json::from_str::<Value>(&json).ok()?),
    };
    Some(CallIn {
        id,
        name,
        arguments,
    })
}

/// A result's tag: `ok` with the payload as a string.
const OK_STRING: u32 = 0;
/// A result's tag: `ok` with the payload as JSON text (then 2 + k: the error `ToolErrorKind::ALL[k]`).
const OK_JSON: u32 = 1;

/// A tool result from the fast path's fields (see [`result`]), or `None` where
/// they are not what serde would read.
fn result_in(call_id: String, name: String, tag: u32, payload: Option<String>) -> Option<ResultIn> {
    let (ok, error, message) = match (tag, payload) {
        (OK_STRING, Some(text)) => (Some(Value::String(text)), None, None),
        (OK_JSON, Some(json)) => (Some(serde_json::from_str::<Value>(&json).ok()?), None, None),
        (OK_STRING | OK_JSON, None) => return None,
        (kind, message) => {
            let kind = *ToolErrorKind::ALL.get(usize::try_from(kind - OK_JSON - 1).ok()?)?;
            (None, Some(kind), message)
        }
    };
    Some(ResultIn {
        call_id,
        name,
        ok,
        error,
        message,
    })
}

/// This thread's hosts, each in the slot its [`NativeMachine`] names by `id`: the fast path's
/// functions (`turn`, `turnCall`, `results`, `result`, `tick`) are plain functions of the
/// module taking that id, not methods, because a method of a napi class unwraps its `this` and
/// registers a borrow of it in a process-wide table (and removes it after) at each call, which
/// cost an event nearly as much as the host's own work. A slot is filled when its machine is made and
/// emptied when JavaScript collects the machine; its id is given to a later machine then.
/// Each JavaScript thread (the main one, a worker) has its own slots, as it has its own
/// machines.
struct Hosts {
    /// Boxed: an empty slot, kept for a later machine, is a pointer's size, not a host's.
    slots: Vec<Option<Box<Host>>>,
    /// The empty slots.
    free: Vec<u32>,
}

thread_local! {
    static HOSTS: RefCell<Hosts> = const { RefCell::new(Hosts { slots: Vec::new(), free: Vec::new() }) };
}

/// Puts `host` in a slot of this thread; its id.
fn keep(host: Host) -> Result<u32> {
    HOSTS.with(|hosts| {
        let mut hosts = hosts.borrow_mut();
        if let Some(id) = hosts.free.pop()
            && let Some(slot) = hosts.slots.get_mut(id as usize)
        {
            *slot = Some(Box::new(host));
            return Ok(id);
        }
        let id = u32::try_from(hosts.slots.len()).map_err(|_| failed("too many machines"))?;
        hosts.slots.push(Some(Box::new(host)));
        Ok(id)
    })
}

/// `f` of the host in slot `id` (`None` if it is empty: never, for an id a live machine gave).
/// The slots are borrowed only while `f` runs, which makes no call into JavaScript.
fn with_host<R>(id: u32, f: impl FnOnce(&mut Host) -> R) -> Option<R> {
    HOSTS.with(|hosts| {
        let mut hosts = hosts.borrow_mut();
        hosts.slots.get_mut(id as usize)?.as_deref_mut().map(f)
    })
}

/// What [`answer`] counts, `handled` in the low bits; `turn_calls` is the number of calls of
/// the turn just given when they all had ids.
fn code(host: &Host, handled: u32, turn_calls: Option<usize>) -> u32 {
    let head = match host.peek_call_model() {
        Some((0, true)) => 1,
        Some((0, false)) => 2,
        _ if host.pending() == 0 => 0,
        _ if turn_calls.is_some() && host.peek_whole_batch() == turn_calls => 4,
        _ => 3,
    };
    let pending = u32::try_from(host.pending())
        .unwrap_or(MAX_PENDING)
        .min(MAX_PENDING);
    handled | (head << 2) | (pending << 5)
}

/// The answer to an event: after a step whose first command is neither a plain `call_model`
/// nor the turn's `run_tools`, with that command's JSON text.
fn answer(host: &Host, handled: Handle, turn_calls: Option<usize>) -> Either<u32, String> {
    let step = handled == Handle::Step;
    let code = code(
        host,
        match handled {
            Handle::Step => 0,
            Handle::Observed => 1,
            Handle::Ignored => 2,
        },
        turn_calls.filter(|_| step),
    );
    if step
        && (code >> 2) & 7 == 3
        && let Some(command) = host.peek_command()
    {
        // Plain data with string keys: serializing cannot fail.
        let text = serde_json::to_string(&command).unwrap_or_default();
        return Either::B(format!("{code}{text}"));
    }
    Either::A(code)
}

/// Drops the `taken` commands `index.js` handed out from answers.
fn take(host: &mut Host, taken: u32) {
    for _ in 0..taken {
        host.skip_command();
    }
}

/// Feeds an event the fast path built to the host of machine `id`: `taken` first, then the
/// event. The fast path builds no event the host refuses (results have `ok` or `error`,
/// `message` only with `error`); if it did, the answer is [`AGAIN_TAKEN`] and the host
/// unchanged but for the drop. An `id` no machine has answers [`AGAIN`].
fn feed(id: u32, taken: u32, event: EventIn) -> Either<u32, String> {
    let turn_calls = match &event {
        EventIn::ModelTurn(turn) => {
            let calls = turn.tool_calls.as_deref().unwrap_or_default();
            calls.iter().all(|c| c.id.is_some()).then_some(calls.len())
        }
        _ => None,
    };
    with_host(id, |host| {
        take(host, taken);
        match host.handle(event) {
            Ok(handled) => answer(host, handled, turn_calls),
            Err(_) => Either::A(AGAIN_TAKEN),
        }
    })
    .unwrap_or(Either::A(AGAIN))
}

/// Feeds `{"model_turn": ...}` from its fields to machine `id`, or answers [`AGAIN`] having
/// changed nothing. `flags`: bits 0-1 `needs_more_work` and 2-3 `reasoning` (0 absent, 1
/// false, 2 true), 4-6 `finish` (0 absent, then `stop`, `length`, `content_filter`,
/// `tool_calls`), 7 whether `usage` is given (`input_tokens`, `output_tokens`). `calls`: per
/// tool call its `id` (or null), `name` and `arguments` as JSON text (or null).
#[napi(catch_unwind)]
pub fn turn(
    machine: u32,
    taken: u32,
    flags: u32,
    text: Option<String>,
    input_tokens: f64,
    output_tokens: f64,
    calls: Option<Vec<Option<String>>>,
) -> Either<u32, String> {
    let tool_calls = match calls {
        None => None,
        Some(flat) => {
            if !flat.len().is_multiple_of(3) {
                return Either::A(AGAIN);
            }
            let mut out = Vec::with_capacity(flat.len() / 3);
            let mut fields = flat.into_iter();
            while let (Some(id), Some(name), Some(arguments)) =
                (fields.next(), fields.next(), fields.next())
            {
                match name.and_then(|name| call_in(id, name, arguments)) {
                    Some(call) => out.push(call),
                    None => return Either::A(AGAIN),
                }
            }
            Some(out)
        }
    };
    match turn_in(flags, text, input_tokens, output_tokens, tool_calls) {
        Some(turn) => feed(machine, taken, EventIn::ModelTurn(turn)),
        None => Either::A(AGAIN),
    }
}

/// [`turn`] for a turn of one tool call with an id (the common turn), without an array
/// (each element of an array is a crossing of its own, and so is each string): the call's
/// `arguments` as JSON text (empty if absent), its `id` and its `name` in one string,
/// `fields`, their lengths `id_length` and `name_length` (in UTF-16 code units, as JavaScript
/// counts) saying where `id` and `name` begin.
#[napi(catch_unwind)]
#[allow(clippy::too_many_arguments)]
pub fn turn_call(
    machine: u32,
    taken: u32,
    flags: u32,
    text: Option<String>,
    input_tokens: f64,
    output_tokens: f64,
    fields: String,
    id_length: u32,
    name_length: u32,
) -> Either<u32, String> {
    let turn = split(fields, id_length, name_length)
        .and_then(|(arguments, id, name)| {
            call_in(Some(id), name, Some(arguments).filter(|a| !a.is_empty()))
        })
        .and_then(|call| turn_in(flags, text, input_tokens, output_tokens, Some(vec![call])));
    match turn {
        Some(turn) => feed(machine, taken, EventIn::ModelTurn(turn)),
        None => Either::A(AGAIN),
    }
}

/// Feeds `{"tool_results": [...]}` from its fields to machine `id`, or answers [`AGAIN`]
/// having changed nothing. `fields`: per result its `call_id`, `name`, a tag and a payload:
/// tag `s` for `ok` with the payload as a string, `j` for `ok` with the payload as JSON text,
/// else the `error` class with the payload as its `message` (or null).
#[napi(catch_unwind)]
pub fn results(machine: u32, taken: u32, fields: Vec<Option<String>>) -> Either<u32, String> {
    let again = Either::A(AGAIN);
    if !fields.len().is_multiple_of(4) {
        return again;
    }
    let mut out = Vec::with_capacity(fields.len() / 4);
    let mut fields = fields.into_iter();
    while let (Some(call_id), Some(name), Some(tag), Some(payload)) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    {
        let (Some(call_id), Some(name), Some(tag)) = (call_id, name, tag) else {
            return again;
        };
        let tag = match tag.as_str() {
            "s" => OK_STRING,
            "j" => OK_JSON,
            kind => {
                match serde_json::from_value::<ToolErrorKind>(Value::String(kind.to_owned())) {
                    // The kind's place in `ToolErrorKind::ALL`, as `result` takes it.
                    Ok(kind) => match ToolErrorKind::ALL.iter().position(|k| *k == kind) {
                        Some(at) => OK_JSON + 1 + u32::try_from(at).unwrap_or(u32::MAX - OK_JSON),
                        None => return again,
                    },
                    Err(_) => return again,
                }
            }
        };
        match result_in(call_id, name, tag, payload) {
            Some(result) => out.push(result),
            None => return again,
        }
    }
    feed(machine, taken, EventIn::ToolResults(out))
}

/// [`results`] for one result (the common case), without an array: a tag, and the payload,
/// the `call_id` and the `name` in one string, `fields`, their lengths `call_id_length` and
/// `name_length` (in UTF-16 code units) saying where `call_id` and `name` begin. Tag 0: `ok`
/// with the payload as a string; 1: `ok` with the payload as JSON text; 2 + k: the `error`
/// class `ToolErrorKind::ALL[k]` (`permission_denied`, `not_found`, `auth_failed`, `timeout`,
/// `invalid_arguments`, `failed`) with the payload as its `message`; 8 + k: that class with no
/// `message` (the payload empty).
#[napi(catch_unwind)]
pub fn result(
    machine: u32,
    taken: u32,
    tag: u32,
    fields: String,
    call_id_length: u32,
    name_length: u32,
) -> Either<u32, String> {
    let result = split(fields, call_id_length, name_length).and_then(|(payload, call_id, name)| {
        match tag.checked_sub(NO_MESSAGE) {
            Some(kind) => result_in(call_id, name, OK_JSON + 1 + kind, None),
            None => result_in(call_id, name, tag, Some(payload)),
        }
    });
    match result {
        Some(result) => feed(machine, taken, EventIn::ToolResults(vec![result])),
        None => Either::A(AGAIN),
    }
}

/// [`result`]'s tag for an error with no message: 8 + k, k its class's place.
const NO_MESSAGE: u32 = 8;

/// `fields` split into a head and two strings of `first` and `second` UTF-16 code units at its
/// end (`index.js` gives `head + first + second` and the two lengths, counted as JavaScript
/// counts them), or `None` if they do not fall on characters (then `index.js` gave something
/// else). Only the two tail strings are walked and copied, never the head, which may be long.
fn split(mut fields: String, first: u32, second: u32) -> Option<(String, String, String)> {
    let first_units = usize::try_from(first).ok()?;
    let tail = first_units.checked_add(usize::try_from(second).ok()?)?;
    let (first_at, second_at) = match fields.len().checked_sub(tail) {
        // ASCII (ids and names mostly are): a code unit a byte, and the first byte a character's.
        Some(at) if fields.as_bytes()[at..].is_ascii() => (at, at + first_units),
        _ => {
            let second_at = utf16_before(&fields, fields.len(), second)?;
            (utf16_before(&fields, second_at, first)?, second_at)
        }
    };
    let second = fields.split_off(second_at);
    let first = fields.split_off(first_at);
    Some((fields, first, second))
}

/// Where the `units` UTF-16 code units before byte `end` of `s` begin, or `None` if `s` has
/// fewer or they end within a character.
fn utf16_before(s: &str, end: usize, units: u32) -> Option<usize> {
    let mut left = usize::try_from(units).ok()?;
    let mut at = end;
    let mut chars = s.get(..end)?.char_indices().rev();
    while left > 0 {
        let (i, c) = chars.next()?;
        left = left.checked_sub(c.len_utf16())?;
        at = i;
    }
    Some(at)
}

/// Feeds `{"tick": now_ms}` to machine `id`, or answers [`AGAIN`] having changed nothing
/// (`now_ms` not a whole number from 0 to 2^53 - 1).
#[napi(catch_unwind)]
pub fn tick(machine: u32, taken: u32, now_ms: f64) -> Either<u32, String> {
    match whole(now_ms) {
        Some(now_ms) => feed(machine, taken, EventIn::Tick(now_ms)),
        None => Either::A(AGAIN),
    }
}

/// The kernel: feed it events with the fast path's functions (`turn`, `turnCall`, `results`,
/// `result`, `tick`, given the machine's `id`) or `handle`, take its commands from their
/// answers and with `nextCommand` (`index.js` wraps it as the package's `Machine`).
///
/// An answer is a number, or a string of that number followed by the first waiting command's
/// JSON text. The number's low two bits say what the kernel did (0: a step, 1: observed, 2:
/// ignored), the next three what the first waiting command is (0: none, 1: `call_model` with
/// tools and no delay, 2: the same without tools, 3: another, in the string after a step, else
/// for `nextCommand`; 4, only from `turn` and `turnCall`: `run_tools` of every call of the turn
/// just given, in order, none refused, no warning, every id given), and the rest how many
/// commands wait. Every function that takes `taken` first drops that many commands, those
/// `index.js` handed out from answers without a call.
#[napi]
pub struct NativeMachine {
    /// The slot of its host in `HOSTS`.
    id: u32,
}

impl NativeMachine {
    /// `f` of this machine's host.
    fn with<R>(&self, f: impl FnOnce(&mut Host) -> R) -> Result<R> {
        with_host(self.id, f).ok_or_else(|| failed("terminus-kernel: the machine is gone"))
    }
}

impl Drop for NativeMachine {
    /// Empties the host's slot (JavaScript collected the machine).
    fn drop(&mut self) {
        // Never while the slots are borrowed (nothing there calls into JavaScript); at the
        // thread's end the slots may be gone already.
        let _ = HOSTS.try_with(|hosts| {
            if let Ok(mut hosts) = hosts.try_borrow_mut()
                && let Some(slot) = hosts.slots.get_mut(self.id as usize)
                && slot.take().is_some()
            {
                hosts.free.push(self.id);
            }
        });
    }
}

/// A policy from JSON text (absent: the defaults), scaled for `scale` units when given (the
/// policy's `budget_scale`; `at` names the argument in an error).
fn policy_of(
    policy: Option<String>,
    scale: Option<i64>,
    at: &str,
) -> Result<terminus_kernel::Policy> {
    let policy = match policy {
        Some(json) => policy_from_json(&json).map_err(input)?,
        None => terminus_kernel::Policy::default(),
    };
    let Some(units) = units_of(scale, at)? else {
        return Ok(policy);
    };
    policy.scaled(units).map_err(|e| input(InputError::from(e)))
}

/// A scale's units (`at` names the argument in an error).
fn units_of(scale: Option<i64>, at: &str) -> Result<Option<u64>> {
    scale
        .map(|units| {
            u64::try_from(units).map_err(|_| {
                input(InputError {
                    path: at.into(),
                    message: format!("must be a whole number of at least 0, got {units}"),
                })
            })
        })
        .transpose()
}

#[napi]
impl NativeMachine {
    /// A run under `policy` (JSON text of the scenario `policy` fields, or absent for the
    /// defaults), scaled for `scale` units when given (the policy's `budget_scale`); `task` and
    /// `name` only label the run in `explain()`. `journal_steps`: how many of the run's last
    /// steps the machine keeps of its journal; absent for the default, 0 for all.
    #[napi(constructor, catch_unwind)]
    pub fn new(
        policy: Option<String>,
        task: Option<String>,
        name: Option<String>,
        scale: Option<i64>,
        journal_steps: Option<u32>,
    ) -> Result<Self> {
        let policy = policy_of(policy, scale, "options.scale")?;
        let host = Host::new(policy, task.unwrap_or_default(), name).map_err(input)?;
        let journal = match journal_steps {
            None => Some(terminus_runtime::host::JOURNAL_STEPS),
            Some(0) => None,
            Some(steps) => Some(steps),
        };
        let host = host.keep_journal(journal);
        Ok(NativeMachine { id: keep(host)? })
    }

    /// The id the fast path's functions take for this machine.
    #[napi(getter, catch_unwind)]
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Feeds one event (JSON text) after dropping `taken` commands; answers as the type says. A
    /// malformed event is an error naming its JSON path and changes nothing (but the drop).
    #[napi(catch_unwind)]
    pub fn handle(&mut self, taken: u32, event: String) -> Result<Either<u32, String>> {
        self.with(|host| {
            take(host, taken);
            // The common case without the path bookkeeping; an error is read again for its path.
            let event = match serde_json::from_str::<EventIn>(&event) {
                Ok(event) => event,
                Err(_) => EventIn::from_json(&event).map_err(input)?,
            };
            let handled = host.handle(event).map_err(input)?;
            Ok(answer(host, handled, None))
        })?
    }

    /// Raises the budgets of a run a budget stopped (`budgets`: JSON text of an object from
    /// budget field to new value) after dropping `taken` commands; answers as `handle`. A raise
    /// the kernel refuses is an error saying why and changes nothing (but the drop).
    #[napi(catch_unwind)]
    pub fn raise_budgets(&mut self, taken: u32, budgets: String) -> Result<Either<u32, String>> {
        self.with(|host| {
            take(host, taken);
            let budgets: std::collections::BTreeMap<String, u64> = serde_json::from_str(&budgets)
                .map_err(|e| {
                napi::Error::new(
                    napi::Status::InvalidArg,
                    format!("budgets: not an object of whole numbers: {e}"),
                )
            })?;
            let handled = host
                .raise(&budgets)
                .map_err(|e| napi::Error::new(napi::Status::InvalidArg, e.to_string()))?;
            Ok(answer(host, handled, None))
        })?
    }

    /// Drops `taken` commands (before `snapshot`).
    #[napi(catch_unwind)]
    pub fn skip(&mut self, taken: u32) -> Result<()> {
        self.with(|host| take(host, taken))
    }

    /// The answer's number for the waiting commands (what the kernel did: 0), for a new or
    /// restored machine.
    #[napi(getter, catch_unwind)]
    pub fn state(&self) -> Result<u32> {
        self.with(|host| code(host, 0, None))
    }

    /// Drops `taken` commands, then takes the next as JSON text, or nothing while the kernel
    /// waits for an event.
    #[napi(catch_unwind)]
    pub fn next_command(&mut self, taken: u32) -> Result<Option<String>> {
        self.with(|host| {
            take(host, taken);
            if let Some((delay_ms, tools)) = host.next_call_model() {
                return Some(format!(
                    r#"{{"command":"call_model","delay_ms":{delay_ms},"tools":{tools}}}"#
                ));
            }
            let command = host.next_command()?;
            // Plain data with string keys: serializing cannot fail.
            Some(serde_json::to_string(&command).unwrap_or_default())
        })
    }

    /// The current state: `Exploring`, `Acting`, `Verifying`, `Nudged`, `Complete`, `Aborted`.
    #[napi(getter, catch_unwind)]
    pub fn phase(&self) -> Result<&'static str> {
        self.with(|host| host.phase().as_str())
    }

    /// Every counter of the kernel, as JSON text.
    #[napi(catch_unwind)]
    pub fn stats(&self) -> Result<String> {
        self.with(|host| serde_json::to_string(&host.machine().stats()).unwrap_or_default())
    }

    /// The report as JSON text: the fields of `terminus run --json` without the execution id
    /// (while the run goes on, `outcome`, `reason` and `rule` are null).
    #[napi(catch_unwind)]
    pub fn report(&self) -> Result<String> {
        self.with(|host| host.report_json().to_string())
    }

    /// Why the run stopped and what to change: the text of `terminus inspect`.
    #[napi(catch_unwind)]
    pub fn explain(&self) -> Result<String> {
        self.with(|host| host.explain().text())
    }

    /// The whole machine as JSON text.
    #[napi(catch_unwind)]
    pub fn snapshot(&self) -> Result<String> {
        self.with(|host| host.snapshot())
    }

    /// A machine saved by `snapshot`; text that is not one is an error naming what is wrong.
    #[napi(factory, catch_unwind)]
    pub fn restore(snapshot: String) -> Result<Self> {
        let host = Host::restore(&snapshot).map_err(input)?;
        Ok(NativeMachine { id: keep(host)? })
    }
}

/// The kernel's class of a provider failure: HTTP `status` and the error's text or body (the
/// table every host shares, `terminus_runtime::host::provider`). A status outside 100-599 is an
/// `InvalidArg` error.
#[napi(catch_unwind)]
pub fn provider_error_kind(status: i64, text: String) -> Result<String> {
    match u16::try_from(status) {
        Ok(status) if (100..600).contains(&status) => Ok(
            terminus_runtime::host::provider::classify_error(status, &text)
                .as_str()
                .to_owned(),
        ),
        _ => Err(invalid(format!(
            "status: {status} is not an HTTP status (100-599)"
        ))),
    }
}

/// A tool's failure as the model reads it in `terminus run`: `error (KIND): MESSAGE`, `kind` a
/// class of the kernel's (any other is `failed`, as the core counts it)
/// (`terminus_runtime::host::messages::failure_text`).
#[napi(catch_unwind)]
pub fn failure_text(kind: String, message: String) -> String {
    terminus_runtime::host::messages::failure_text(&kind, &message)
}

/// The user message a checkpoint written for the agent adds before the next model call (a
/// step's `checkpoint`): its `note`, a blank line, then the model's `summary` (trimmed), or why
/// there is none: the failed call's class `kind` and `message`, or neither (no answer in time)
/// (`terminus_runtime::host::messages::checkpoint_message`, the words `terminus run` writes).
#[napi(catch_unwind)]
pub fn checkpoint_message(
    note: String,
    summary: Option<String>,
    kind: Option<String>,
    message: Option<String>,
) -> String {
    use terminus_runtime::host::messages::Summary;
    let summary = match (&summary, &kind) {
        (Some(text), _) => Summary::Reply(text),
        (None, Some(kind)) => Summary::Failed {
            kind,
            message: message.as_deref().unwrap_or_default(),
        },
        (None, None) => Summary::NoAnswer,
    };
    terminus_runtime::host::messages::checkpoint_message(&note, summary)
}

/// `content` with a step's `notices` after it, where the step's `notice_to` says: the notices
/// joined by blank lines, after a blank line, or alone when `content` is empty
/// (`terminus_runtime::host::messages::with_notices`, the rule `terminus run` follows).
#[napi(catch_unwind)]
pub fn with_notices(content: String, notices: Vec<String>) -> String {
    terminus_runtime::host::messages::with_notices(&content, &notices)
}

/// The delay a provider asked for, in milliseconds, from its `retry-after-ms` and `retry-after`
/// headers (seconds or an HTTP date), capped at 60 s; `null` when neither says one. The parser
/// the command line's HTTP client uses (`terminus_runtime::host::provider::retry_after_ms`).
#[napi(catch_unwind)]
pub fn retry_after_ms(retry_after_ms: Option<String>, retry_after: Option<String>) -> Option<i64> {
    terminus_runtime::host::provider::retry_after_ms(
        retry_after_ms.as_deref(),
        retry_after.as_deref(),
        std::time::SystemTime::now(),
        terminus_runtime::host::provider::RETRY_AFTER_CAP,
    )
    .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX))
}

/// Runs a scenario in process and returns its report as JSON text (that of `terminus run
/// --json` without the execution id). `scenario` is a path, or with `inline` the scenario's JSON
/// text. An invalid scenario is an `InvalidArg` error with the command line's message. With
/// `transcript`, `{"report", "transcript"}`: the report and what the scripted model was sent,
/// call by call (`terminus_scenario::sent`), the host suite's reference.
#[napi(catch_unwind)]
pub fn run_scenario(scenario: String, inline: bool, transcript: Option<bool>) -> Result<String> {
    use terminus_scenario::Scenario;
    use terminus_scenario::in_process::{RunError, run_in_process};
    let (loaded, what) = if inline {
        let parsed = Scenario::parse(&scenario).map_err(invalid)?;
        (parsed, "scenario".to_owned())
    } else {
        let path = std::path::PathBuf::from(&scenario);
        (Scenario::load(&path).map_err(invalid)?, scenario)
    };
    let ran = match run_in_process(loaded, &what, transcript.unwrap_or(false)) {
        Ok(ran) => ran,
        Err(RunError::Invalid(message)) => return Err(invalid(message)),
        Err(RunError::Failed(message)) => return Err(failed(message)),
    };
    Ok(match ran.transcript {
        Some(calls) => serde_json::json!({ "report": ran.report, "transcript": calls }),
        None => ran.report,
    }
    .to_string())
}

/// `text` read as `T` (JSON text of the value under `root`); an error names its JSON path.
fn read<T: serde::de::DeserializeOwned>(root: &str, text: &str) -> Result<T> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| input(InputError::from_serde(root, &e)))
}

/// A clock reading or a delay from JavaScript (`what` names it): a whole number of
/// milliseconds from 0 to 2^53 - 1.
fn millis(what: &str, n: f64) -> Result<u64> {
    whole(n).ok_or_else(|| {
        invalid(format!(
            "{what}: must be a whole number of milliseconds from 0 to 2^53 - 1, got {n}"
        ))
    })
}

/// `value` as JSON text (plain data with string keys: serializing cannot fail).
fn text_of<T: serde::Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(failed)
}

/// A step as JSON text, or `None` (the event was fed already, or no tool turn is out).
fn step_text(step: Option<terminus_runtime::host::Step>) -> Result<Option<String>> {
    step.as_ref().map(text_of).transpose()
}

/// The host core for a framework adapter ([`terminus_runtime::host::Session`]): one run, fed
/// the framework's messages as they are (JSON text of an array of messages in any shape
/// `terminus_runtime::host::messages` reads), answering each hook with a step as JSON text:
/// `jump` (`"model"`, `"tools"`, `"end"` or null), `delay_ms`, `tools`, `nudges`, `notices` (for
/// the tool message `notice_to`), `answers` (tool messages instead of running those calls),
/// `written` (the reply's calls written in its text), `drop_reply`, `verify` (answer with
/// `verdict`), `report`. `index.js` wraps it as the package's `Session`.
#[napi]
pub struct NativeSession {
    core: terminus_runtime::host::Session,
    /// The first step, of a session `start` made (JSON text), until taken.
    first: Option<String>,
}

/// What [`NativeSession::results`] and [`NativeSession::finish`] call: the core's own.
type MessagesHook = fn(
    &mut terminus_runtime::host::Session,
    &[Value],
    u64,
) -> std::result::Result<Option<terminus_runtime::host::Step>, InputError>;

impl NativeSession {
    /// `hook` of the session with `messages` (JSON text) at `now_ms`: its step as JSON text.
    fn on_messages(
        &mut self,
        messages: &str,
        now_ms: f64,
        hook: MessagesHook,
    ) -> Result<Option<String>> {
        let messages: Vec<Value> = read("messages", messages)?;
        let now_ms = millis("nowMs", now_ms)?;
        step_text(hook(&mut self.core, &messages, now_ms).map_err(input)?)
    }
}

#[napi]
impl NativeSession {
    /// A run of the task of `messages` (the first user message) under `policy` (JSON text of
    /// the scenario `policy` fields, or absent for the defaults; scaled for `scale` units when
    /// given, which it must have a `budget_scale` for), started at `now_ms` (the host's clock, for the deadline). Its first step:
    /// `takeFirst()`.
    #[napi(factory, catch_unwind)]
    pub fn start(
        policy: Option<String>,
        messages: String,
        now_ms: f64,
        scale: Option<i64>,
    ) -> Result<Self> {
        let policy = policy_of(policy, None, "scale")?;
        let policy =
            terminus_runtime::host::scaled(policy, units_of(scale, "scale")?).map_err(input)?;
        let messages: Vec<Value> = read("messages", &messages)?;
        let now_ms = millis("nowMs", now_ms)?;
        let (core, step) =
            terminus_runtime::host::Session::start(policy, &messages, now_ms).map_err(input)?;
        Ok(NativeSession {
            core,
            first: Some(text_of(&step)?),
        })
    }

    /// `policy` (JSON text, or absent for the defaults) as every run of a framework adapter
    /// takes it, checked and scaled once for `scale` units: JSON text. What `start` refuses (a
    /// bad field, a bad scale) is an `InvalidArg` error naming it here.
    #[napi(catch_unwind)]
    pub fn check_policy(policy: Option<String>, scale: Option<i64>) -> Result<String> {
        let policy = policy_of(policy, None, "scale")?;
        let policy =
            terminus_runtime::host::checked(policy, units_of(scale, "scale")?).map_err(input)?;
        serde_json::to_string(&policy).map_err(|e| invalid(format!("policy: {e}")))
    }

    /// The first step of a session `start` made (JSON text), once; then null.
    #[napi(catch_unwind)]
    pub fn take_first(&mut self) -> Option<String> {
        self.first.take()
    }

    /// The model's reply (`message`: JSON text; `offered`: JSON text of the tools the call
    /// offered, when known, each a name or `{"name", "parameters"}`; `output_tools`: the names
    /// of the framework's output tools, whose call is a structured answer, the reply's text): a
    /// step, or null when that reply was fed already.
    #[napi(catch_unwind)]
    pub fn reply(
        &mut self,
        message: String,
        offered: Option<String>,
        now_ms: f64,
        output_tools: Option<Vec<String>>,
    ) -> Result<Option<String>> {
        let message: Value = read("message", &message)?;
        let offered: Option<Vec<Offered>> = match offered {
            Some(text) => Some(read("offered", &text)?),
            None => None,
        };
        let now_ms = millis("nowMs", now_ms)?;
        let outputs = output_tools.unwrap_or_default();
        let step = self.core.answer_reply(&message, offered, &outputs, now_ms);
        step_text(step.map_err(input)?)
    }

    /// The results of the tool turn out, read from `messages` (JSON text) after the last reply:
    /// a step, or null when no tool turn is out.
    #[napi(catch_unwind)]
    pub fn results(&mut self, messages: String, now_ms: f64) -> Result<Option<String>> {
        self.on_messages(&messages, now_ms, terminus_runtime::host::Session::results)
    }

    /// A failed model call of the kernel's class (`rate_limited`, `server`, `timeout`, `auth`,
    /// `bad_request`, `context_overflow`), with the delay the provider asked for: a step.
    #[napi(catch_unwind)]
    pub fn model_error(
        &mut self,
        kind: String,
        retry_after_ms: Option<f64>,
        now_ms: f64,
    ) -> Result<String> {
        let kind = serde_json::from_value(Value::String(kind))
            .map_err(|e| invalid(format!("kind: {e}")))?;
        let retry = retry_after_ms
            .map(|ms| millis("retryAfterMs", ms))
            .transpose()?;
        let now_ms = millis("nowMs", now_ms)?;
        text_of(&self.core.model_error(kind, retry, now_ms).map_err(input)?)
    }

    /// The verifier's verdict (JSON text of `true`/`false`, a `[complete, feedback]` pair, or
    /// `{complete, feedback, missing}`) on the step's `verify`: the step goes on.
    #[napi(catch_unwind)]
    pub fn verdict(&mut self, verdict: String) -> Result<String> {
        let answer: Value = read("verdict", &verdict)?;
        let verdict = terminus_runtime::host::verdict_of(answer, "verdict").map_err(input)?;
        text_of(&self.core.verdict(verdict).map_err(input)?)
    }

    /// The rules' verdict on the step's `verify`, for a host without a verifier: the step goes on.
    #[napi(catch_unwind)]
    pub fn verdict_by_rules(&mut self) -> Result<String> {
        text_of(&self.core.verdict_by_rules().map_err(input)?)
    }

    /// Ends a run something else ended (the results of the turn out from `messages`, then a
    /// cancel): the last step, or null when the run had ended.
    #[napi(catch_unwind)]
    pub fn finish(&mut self, messages: String, now_ms: f64) -> Result<Option<String>> {
        self.on_messages(&messages, now_ms, terminus_runtime::host::Session::finish)
    }

    /// What the run awaits (JSON text), for the tool hooks (`gate`).
    #[napi(catch_unwind)]
    pub fn turn(&self) -> Result<String> {
        text_of(self.core.turn())
    }

    /// What a call about to run gets, from a `turn()` (JSON text): `{"refuse": {tool_call_id,
    /// name, content, error}}` or `{"run": {"warning"}}`, as JSON text.
    #[napi(catch_unwind)]
    pub fn gate(turn: String, call_id: String, name: String, has_tool: bool) -> Result<String> {
        let turn: terminus_runtime::host::Turn = read("turn", &turn)?;
        text_of(&terminus_runtime::host::Session::gate(
            &turn, &call_id, &name, has_tool,
        ))
    }

    /// Whether the run ended.
    #[napi(getter, catch_unwind)]
    pub fn ended(&self) -> bool {
        self.core.ended()
    }

    /// Whether a tool turn waits for its results.
    #[napi(getter, catch_unwind)]
    pub fn batch_out(&self) -> bool {
        self.core.batch_out()
    }

    /// The report as JSON text (as `NativeMachine::report`).
    #[napi(catch_unwind)]
    pub fn report(&self) -> String {
        self.core.host().report_json().to_string()
    }

    /// The text of `terminus inspect` for the run.
    #[napi(catch_unwind)]
    pub fn explain(&self) -> String {
        self.core.host().explain().text()
    }

    /// The session as JSON text.
    #[napi(catch_unwind)]
    pub fn snapshot(&self) -> String {
        self.core.snapshot()
    }

    /// A session saved by `snapshot`; text that is not one is an error naming what is wrong.
    #[napi(factory, catch_unwind)]
    pub fn restore(snapshot: String) -> Result<Self> {
        let core = terminus_runtime::host::Session::restore(&snapshot).map_err(input)?;
        Ok(NativeSession { core, first: None })
    }
}

/// A multi-agent plan run whose agents are the host's own
/// ([`terminus_orchestrator::LocalPlan`]): the plan's decisions are the orchestrator's (the
/// scheduler, limits, breakers, degradation and report of `terminus orchestrate`), the acts are
/// JSON text, and `index.js` wraps it as `runPlan`.
#[napi]
pub struct NativePlan {
    core: terminus_orchestrator::LocalPlan,
    /// Where the progress is kept, when a journal was given.
    journal: Option<std::sync::Arc<std::sync::Mutex<terminus_scenario::plan::HostJournal>>>,
}

#[napi]
impl NativePlan {
    /// The run of the plan `text` (JSON text; file scenarios relative to `base`), as
    /// `execution` (default: the plan's name), going on from `progress` when given (JSON text
    /// of `progress()`); `functions` names the agents the host gave a function. With `journal`
    /// (a SQLite file or a `postgres://` URL) the progress is kept there and goes on from what
    /// it keeps (opening it blocks). An invalid plan is an `InvalidArg` error with one `PATH:
    /// PROBLEM` line per problem.
    #[napi(factory, catch_unwind)]
    pub fn start(
        text: String,
        base: String,
        execution: Option<String>,
        progress: Option<String>,
        functions: Vec<String>,
        journal: Option<String>,
    ) -> Result<NativePlan> {
        terminus_scenario::plan::host_run(
            &text,
            std::path::Path::new(&base),
            execution.as_deref(),
            progress.as_deref(),
            &functions,
            journal.as_deref(),
        )
        .map(|(core, journal)| NativePlan {
            core,
            journal: journal.map(|j| std::sync::Arc::new(std::sync::Mutex::new(j))),
        })
        .map_err(invalid)
    }

    /// Keeps what changed since the last `save` act in the journal, each cell read back (a
    /// promise; nothing to do without a journal).
    #[napi(catch_unwind)]
    pub fn save(&mut self) -> napi::bindgen_prelude::AsyncTask<SaveCells> {
        napi::bindgen_prelude::AsyncTask::new(SaveCells {
            journal: self.journal.clone(),
            changes: self.core.take_changes(),
        })
    }

    /// The next act at plan time `now_ms` (JSON text), or `null` until an attempt ends, the
    /// next wake passes or the host cancels.
    #[napi(catch_unwind)]
    pub fn next(&mut self, now_ms: f64) -> Result<Option<String>> {
        let now_ms = millis("nowMs", now_ms)?;
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Ok(self.core.next(now_ms, unix_ms).map(|act| act.to_string()))
    }

    /// How the attempt of agent `index` ended (JSON text: `{"result"}`, `{"error"}` or
    /// `{"report"}`).
    #[napi(catch_unwind)]
    pub fn finished(&mut self, index: u32, outcome: String) -> Result<()> {
        let outcome: Value = read("outcome", &outcome)?;
        let index = usize::try_from(index).map_err(invalid)?;
        self.core.finished(index, &outcome).map_err(invalid)
    }

    /// The scenario attempt of agent `index`, to run with `NativeAttempt.run` (a `cancel` act
    /// kills it).
    #[napi(catch_unwind)]
    pub fn scenario_attempt(&mut self, index: u32) -> Result<NativeAttempt> {
        let index = usize::try_from(index).map_err(invalid)?;
        let launch = self
            .core
            .scenario_launch(index)
            .ok_or_else(|| invalid(format!("agent {index} has no scenario attempt running")))?;
        Ok(NativeAttempt {
            launch: Some(launch),
        })
    }

    /// The host cancels the plan at plan time `now_ms`.
    #[napi(catch_unwind)]
    pub fn cancel(&mut self, now_ms: f64) -> Result<()> {
        self.core.cancel(millis("nowMs", now_ms)?);
        Ok(())
    }

    /// When (plan time) there is something to do if no attempt ends first.
    #[napi(catch_unwind)]
    pub fn next_wake(&self) -> Option<f64> {
        self.core
            .next_wake()
            .map(|ms| ms.min(MAX_SAFE as u64) as f64)
    }

    /// Plan time spent before this process went on.
    #[napi(catch_unwind)]
    pub fn elapsed_before(&self) -> f64 {
        self.core.elapsed_before().min(MAX_SAFE as u64) as f64
    }

    /// The progress to keep (JSON text), for `start` after a crash.
    #[napi(catch_unwind)]
    pub fn progress(&self) -> String {
        self.core.progress().to_string()
    }
}

/// A plan's changed cells on their way to its journal ([`NativePlan::save`]).
pub struct SaveCells {
    journal: Option<std::sync::Arc<std::sync::Mutex<terminus_scenario::plan::HostJournal>>>,
    changes: Vec<(String, Value)>,
}

impl napi::Task for SaveCells {
    type Output = ();
    type JsValue = ();

    fn compute(&mut self) -> Result<()> {
        let Some(journal) = &self.journal else {
            return Ok(());
        };
        let changes = std::mem::take(&mut self.changes);
        journal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .save(changes)
            .map_err(failed)
    }

    fn resolve(&mut self, _env: napi::Env, _output: ()) -> Result<()> {
        Ok(())
    }
}

/// A plan's scenario attempt ([`NativePlan::scenario_attempt`]).
#[napi]
pub struct NativeAttempt {
    launch: Option<terminus_orchestrator::Launch>,
}

#[napi]
impl NativeAttempt {
    /// Runs the attempt in process, on a worker thread: a promise of its report as JSON text.
    #[napi(catch_unwind)]
    pub fn run(&mut self) -> Result<napi::bindgen_prelude::AsyncTask<ScenarioAttempt>> {
        let launch = self
            .launch
            .take()
            .ok_or_else(|| invalid("the attempt ran already"))?;
        Ok(napi::bindgen_prelude::AsyncTask::new(ScenarioAttempt {
            launch: Some(launch),
        }))
    }
}

/// A plan's scenario attempt as it runs on a worker thread ([`NativeAttempt::run`]).
pub struct ScenarioAttempt {
    launch: Option<terminus_orchestrator::Launch>,
}

impl napi::Task for ScenarioAttempt {
    type Output = String;
    type JsValue = String;

    fn compute(&mut self) -> Result<String> {
        let launch = self
            .launch
            .take()
            .ok_or_else(|| failed("the attempt ran already"))?;
        let report = terminus_scenario::plan::run_launch(launch).map_err(failed)?;
        text_of(&report)
    }

    fn resolve(&mut self, _env: napi::Env, output: String) -> Result<String> {
        Ok(output)
    }
}

/// A plan written by a model the host calls ([`terminus_scenario::plan::HostGenerator`]):
/// `index.js` wraps it as `generatePlan`.
#[napi]
pub struct NativeGenerator {
    core: terminus_scenario::plan::HostGenerator,
}

#[napi]
impl NativeGenerator {
    /// The generation of a plan for `task` from the generator file `text` (JSON; file
    /// scenarios relative to `base`). A bad file is an `InvalidArg` error with one `PATH:
    /// PROBLEM` line per problem.
    #[napi(factory, catch_unwind)]
    pub fn start(text: String, base: String, task: String) -> Result<NativeGenerator> {
        terminus_scenario::plan::HostGenerator::new(&text, std::path::Path::new(&base), &task)
            .map(|core| NativeGenerator { core })
            .map_err(invalid)
    }

    /// What to do next (JSON text): `{"ask"}`, `{"run", "generation"}` or `{"no_plan",
    /// "generation"}` (the report of the plan that never ran, as `execution`; default: the
    /// file's name).
    #[napi(catch_unwind)]
    pub fn step(&mut self, execution: Option<String>) -> String {
        self.core.step(execution.as_deref()).to_string()
    }

    /// How the model call for the last `ask` ended (JSON text: `{"output"}`, what the model
    /// function gave, or `{"error"}`).
    #[napi(catch_unwind)]
    pub fn answer(&mut self, ended: String) -> Result<()> {
        let ended: Value = read("ended", &ended)?;
        self.core.answer(&ended).map_err(invalid)
    }
}

/// Whether `text`, taken for an agent's answer in a run nobody answers, only hands the task back
/// (asks for more, apologises, tells the reader to act, disclaims itself, closes courteously):
/// the kernel's own rule (`terminus_kernel::answer::hands_back`, `docs/design.md`, "What a final
/// answer is"), for a host agent whose reply does not go through a `Session`.
#[napi(catch_unwind)]
pub fn is_non_answer(text: String) -> bool {
    terminus_kernel::answer::hands_back(&text, &terminus_kernel::answer::Said::default())
}

/// Starts the process's telemetry (`terminus_telemetry::process::start`; `telemetry.js` wraps
/// it): `[exporting spans, started already]`. A bad `OTEL_*` setting is an `InvalidArg` error; a
/// process whose telemetry was shut down, a `GenericFailure`.
#[napi(catch_unwind)]
pub fn start_telemetry() -> Result<Vec<bool>> {
    use terminus_telemetry::TelemetryError;
    match terminus_telemetry::process::start() {
        Ok(s) => Ok(vec![s.exporting_spans, s.already]),
        Err(e @ TelemetryError::Exporter(_)) => Err(Error::new(Status::InvalidArg, e.to_string())),
        Err(e) => Err(failed(e)),
    }
}

/// The metrics recorded since the telemetry started, as Prometheus text; `null` before.
#[napi(catch_unwind)]
pub fn metrics_text() -> Option<String> {
    terminus_telemetry::process::metrics_text()
}

/// Sends the spans batched so far, off the event loop.
#[napi(catch_unwind)]
pub fn flush_telemetry() -> napi::bindgen_prelude::AsyncTask<Telemetry> {
    napi::bindgen_prelude::AsyncTask::new(Telemetry { shutdown: false })
}

/// Flushes and stops the span exporter, for good, off the event loop.
#[napi(catch_unwind)]
pub fn shutdown_telemetry() -> napi::bindgen_prelude::AsyncTask<Telemetry> {
    napi::bindgen_prelude::AsyncTask::new(Telemetry { shutdown: true })
}

/// [`shutdown_telemetry`] on the event loop, for an `exit` handler, where nothing asynchronous
/// runs.
#[napi(catch_unwind)]
pub fn shutdown_telemetry_sync() -> Result<()> {
    terminus_telemetry::process::shutdown().map_err(failed)
}

/// A flush or a shutdown of the process's telemetry ([`flush_telemetry`],
/// [`shutdown_telemetry`]).
pub struct Telemetry {
    shutdown: bool,
}

impl napi::Task for Telemetry {
    type Output = ();
    type JsValue = ();

    fn compute(&mut self) -> Result<()> {
        if self.shutdown {
            terminus_telemetry::process::shutdown().map_err(failed)
        } else {
            terminus_telemetry::process::flush().map_err(failed)
        }
    }

    fn resolve(&mut self, _env: napi::Env, _output: ()) -> Result<()> {
        Ok(())
    }
}
