//! The invariant-checking body of the fuzz targets, shared with the kernel's ordinary test suite:
//! `fuzz/fuzz_targets/*.rs` and `kernel/tests/fuzz_corpus.rs` include this one file, so a seed
//! or a minimized crash replays through exactly the checks the fuzzer ran.
//!
//! Inputs are plain bytes decoded by a small reader ([`Bytes`]; no `arbitrary` derive): every
//! byte string is a valid input, past its end the reader yields zeros, and the decoding does not
//! change with the versions of the fuzzing crates, so committed seeds keep their meaning.
//!
//! Only `terminus-kernel` and `serde_json` are used here (the kernel test cannot depend on
//! `libfuzzer-sys`). A broken invariant is a panic, which is what libFuzzer reports.

use serde_json::{Value, json};
use terminus_kernel::testing::{check_machine, check_step};
use terminus_kernel::{
    CallReason, Command, Event, Finish, Handled, Ignored, Machine, ModelErrorKind, ModelTurn,
    OnUnrecoverable, OnVerificationLimit, Phase, Policy, Stats, Tier, ToolBatch, ToolBudget,
    ToolCall, ToolErrorKind, ToolOutcome, ToolResult, Usage, Verdict, WRITE_TODOS, executed,
};

/// Reads bytes; past the end it reads zeros, so every input decodes.
pub(crate) struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    /// A reader at the start of `data`.
    pub(crate) fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { data, at: 0 }
    }

    /// Whether every byte was read.
    pub(crate) fn done(&self) -> bool {
        self.at >= self.data.len()
    }

    /// The next byte (0 past the end).
    pub(crate) fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at = self.at.saturating_add(1);
        b
    }

    /// A number in `0..n` (`n > 0`).
    fn upto(&mut self, n: u32) -> u32 {
        u32::from(self.byte()) % n.max(1)
    }

    /// An index into a slice of `len` items.
    fn index(&mut self, len: usize) -> usize {
        usize::from(self.byte()) % len.max(1)
    }

    fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }
}

/// A limit in `1..=max`, but 0 (which `Policy::validate` refuses for most limits) one time in
/// 16, and `u32::MAX` half of the time in `huge` policies.
fn limit(b: &mut Bytes<'_>, huge: bool, max: u32) -> u32 {
    let x = b.byte();
    if huge && x & 1 == 1 {
        u32::MAX
    } else if x >= 0xF0 {
        0
    } else {
        1 + u32::from(x >> 1) % max
    }
}

/// A small policy, so that every limit is reachable in a short input; one policy in 16 puts
/// some limits, delays and budgets at the top of their types (overflow hunting).
// Every field is named today; `..Policy::default()` is for the limits added later.
#[allow(clippy::needless_update)]
pub(crate) fn policy(b: &mut Bytes<'_>) -> Policy {
    let huge = b.upto(16) == 0;
    let mut tool_budgets = std::collections::BTreeMap::new();
    for tool in ["read", "search"] {
        if b.upto(4) == 0 {
            let warn_at = b.flag().then(|| b.upto(5));
            let block_at = b.flag().then(|| b.upto(5));
            // `search`'s budget is one tier counted over the run that a `read` lifts (the
            // same bytes as before, read as a tier): both forms get fuzzed.
            let budget = if tool == "search" && (warn_at.is_some() || block_at.is_some()) {
                ToolBudget {
                    tiers: vec![Tier {
                        warn_at,
                        block_at,
                        reset_on: vec!["read".into()],
                        ..Tier::default()
                    }],
                    ..ToolBudget::default()
                }
            } else {
                ToolBudget {
                    warn_at,
                    block_at,
                    ..ToolBudget::default()
                }
            };
            tool_budgets.insert(tool.to_owned(), budget);
        }
    }
    Policy {
        max_steps: limit(b, huge, 40),
        max_model_calls: limit(b, huge, 16),
        max_no_ops: limit(b, huge, 5),
        max_nudges: limit(b, huge, 6).saturating_sub(1),
        max_verification_failures: limit(b, huge, 5),
        on_verification_limit: if b.flag() {
            OnVerificationLimit::Complete
        } else {
            OnVerificationLimit::Abort
        },
        verify_completion: b.flag(),
        completion_requires: match b.upto(4) {
            0 | 1 => Vec::new(),
            2 => vec!["write".into()],
            _ => vec!["write".into(), "search".into()],
        },
        max_tool_failures: limit(b, huge, 5),
        max_consecutive_tool_failures: limit(b, huge, 5),
        on_unrecoverable_tool_error: if b.flag() {
            OnUnrecoverable::Stop
        } else {
            OnUnrecoverable::Exclude
        },
        max_repeats: limit(b, huge, 5).saturating_add(1),
        max_empty_responses: limit(b, huge, 5),
        max_model_retries: limit(b, huge, 6).saturating_sub(1),
        retry_base_ms: if huge {
            u64::MAX / 2
        } else {
            u64::from(b.byte())
        },
        retry_max_ms: if huge {
            u64::MAX
        } else {
            u64::from(b.byte()) * 10
        },
        deadline_ms: b.flag().then(|| {
            if huge {
                u64::MAX
            } else {
                u64::from(b.byte()) * 20
            }
        }),
        token_budget: b.flag().then(|| {
            if huge {
                u64::MAX
            } else {
                u64::from(b.byte()) * 10
            }
        }),
        tool_budgets,
        seed: u64::from(b.byte()).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        final_answer_on_budget: b.flag(),
        // Read last, so that older corpus entries keep their meaning for the fields above.
        max_loop_period: 1 + b.upto(4),
        // A limit added later reads no byte (that would shift every corpus entry's events): it
        // keeps its default here, and the model check and the property tests reach it.
        // `deploy` is a declared poller (no byte read): its identical results are polls.
        pollers: vec!["deploy".into()],
        ..Policy::default()
    }
}

const TOOLS: [&str; 5] = ["read", "write", WRITE_TODOS, "search", "deploy"];
const STATUSES: [&str; 5] = ["pending", "in_progress", "completed", "cancelled", "bogus"];

fn todos(b: &mut Bytes<'_>) -> Value {
    match b.upto(8) {
        0 => Value::Null,
        1 => json!({ "todos": "not a list" }),
        _ => {
            let items: Vec<Value> = (0..b.upto(4))
                .map(|i| json!({ "content": format!("step {i}"), "status": STATUSES[b.index(5)] }))
                .collect();
            json!({ "todos": items })
        }
    }
}

fn call(b: &mut Bytes<'_>, n: u32, i: u32) -> ToolCall {
    let name = TOOLS[b.index(TOOLS.len())];
    let arguments = if name == WRITE_TODOS {
        todos(b)
    } else {
        json!({ "path": b.upto(3) })
    };
    // Now and then an id that repeats (within a turn and across turns).
    let id = if b.upto(16) == 0 {
        "dup".to_owned()
    } else {
        format!("c{n}-{i}")
    };
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

fn turn(b: &mut Bytes<'_>, n: u32) -> ModelTurn {
    let calls = match b.upto(4) {
        0 | 1 => 0,
        2 => 1,
        _ => 1 + b.upto(3),
    };
    let tool_calls = (0..calls).map(|i| call(b, n, i)).collect();
    let text = ["", "  ", "Done.", "Working on it."][b.index(4)];
    let needs_more_work = [None, Some(false), Some(true)][b.index(3)];
    let usage = match b.upto(3) {
        0 => None,
        1 => Some(Usage::default()),
        _ => Some(Usage {
            input_tokens: u64::from(b.upto(40)),
            output_tokens: u64::from(b.upto(40)),
        }),
    };
    let finish = [
        Finish::Stop,
        Finish::ToolCalls,
        Finish::Length,
        Finish::ContentFilter,
    ][b.index(4)];
    ModelTurn {
        text: text.into(),
        tool_calls,
        needs_more_work,
        usage,
        finish,
        reasoning: b.upto(4) == 3,
        text_calls: None,
    }
}

fn model_error(b: &mut Bytes<'_>) -> Event {
    Event::ModelError {
        kind: ModelErrorKind::ALL[b.index(ModelErrorKind::ALL.len())],
        retry_after_ms: b.flag().then(|| u64::from(b.byte())),
    }
}

fn outcome(b: &mut Bytes<'_>) -> ToolOutcome {
    match b.upto(4) {
        3 => ToolOutcome::Error {
            kind: ToolErrorKind::ALL[b.index(ToolErrorKind::ALL.len())],
            message: "failed".into(),
        },
        2 => ToolOutcome::ok(json!(b.upto(3))),
        _ => ToolOutcome::ok(json!("ok")),
    }
}

fn result(b: &mut Bytes<'_>, call: &ToolCall) -> ToolResult {
    ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        outcome: outcome(b),
    }
}

/// Results for exactly the executed calls of `batch`, in order or reversed.
fn results(b: &mut Bytes<'_>, batch: &ToolBatch) -> Vec<ToolResult> {
    let mut out: Vec<ToolResult> = executed(batch).map(|c| result(b, c)).collect();
    if b.upto(4) == 3 {
        out.reverse();
    }
    out
}

fn verdict(b: &mut Bytes<'_>) -> Event {
    Event::Verdict(Verdict {
        complete: b.flag(),
        missing: (0..b.upto(3)).map(|i| format!(" item {i} ")).collect(),
    })
}

/// Checks one `handle` call: `before` and `after` are the machine around it, `emitted` the
/// commands it queued. Panics on any broken invariant.
pub(crate) fn check_transition(
    before: &Machine,
    after: &Machine,
    handled: &Handled,
    emitted: &[Command],
) {
    let stepped = matches!(handled, Handled::Step(_));
    if let Err(why) = check_step(before, after, stepped).and_then(|()| check_machine(after)) {
        panic!("invariant broken by {handled:?}: {why}\nbefore {before:?}\nafter {after:?}");
    }
    let bound = after.policy().step_bound();
    let steps = u64::from(after.stats().steps);
    assert!(
        steps <= bound,
        "steps {steps} exceed the step bound {bound}"
    );
    let expect_timeout = if after.phase().is_terminal() {
        None
    } else {
        after.policy().deadline_ms
    };
    assert_eq!(after.poll_timeout(), expect_timeout, "poll_timeout");
    if before.phase().is_terminal() {
        assert!(
            matches!(
                handled,
                Handled::Ignored {
                    why: Ignored::Terminal,
                    ..
                }
            ),
            "a terminal machine took {handled:?}"
        );
    }
    match handled {
        Handled::Step(rec) => {
            assert_eq!(rec.step, after.stats().steps, "step record number");
            assert_eq!(rec.from, before.phase(), "step record origin");
            assert_eq!(rec.to, after.phase(), "step record target");
            if after.phase().is_terminal() {
                let [Command::Stop(stop)] = emitted else {
                    panic!("a terminal step must emit exactly one Stop, got {emitted:?}");
                };
                assert_eq!(stop.rule, rec.rule, "the Stop names another rule");
                check_stop(stop, after);
                assert_eq!(stop.stats, after.stats(), "the Stop's stats");
            } else {
                check_request(after, emitted);
            }
            if let Some(Command::RunTools(batch)) = emitted.last() {
                // The core's counts (from `classify`) agree with the batch (from `plan`).
                let (a, b) = (before.stats(), after.stats());
                let ran = executed(batch).count().min(usize::from(u16::MAX));
                let refused = batch.refused.len().min(usize::from(u16::MAX));
                assert_eq!(
                    u64::from(b.tool_calls - a.tool_calls),
                    ran as u64,
                    "tool_calls counts another batch than {batch:?}"
                );
                assert_eq!(
                    u64::from(b.refused_calls - a.refused_calls),
                    refused as u64,
                    "refused_calls counts another batch than {batch:?}"
                );
            }
        }
        Handled::Observed => {
            assert!(!before.phase().is_terminal(), "a terminal machine observed");
            assert_eq!(
                before.phase(),
                after.phase(),
                "an observation changed phase"
            );
            assert_eq!(
                before.stats(),
                after.stats(),
                "an observation changed stats"
            );
            assert!(emitted.is_empty(), "an observation emitted {emitted:?}");
        }
        Handled::Ignored { why, phase } => {
            assert_eq!(*phase, before.phase(), "Ignored reports the wrong phase");
            assert_eq!(
                *why == Ignored::Terminal,
                before.phase().is_terminal(),
                "Ignored::{why:?} in {phase:?}"
            );
            assert!(emitted.is_empty(), "an ignored event emitted {emitted:?}");
            same_but_ignored(before, after);
        }
    }
}

/// A live step queues guidance (nudges, notices) then exactly one request, the one its phase
/// waits for.
fn check_request(m: &Machine, emitted: &[Command]) {
    let Some((last, guidance)) = emitted.split_last() else {
        panic!("a live step emitted nothing in {:?}", m.phase());
    };
    assert!(
        guidance.iter().all(|c| matches!(
            c,
            Command::Nudge(_) | Command::Notice(_) | Command::Checkpoint(_)
        )),
        "a live step emitted more than one request: {emitted:?}"
    );
    match (m.phase(), last) {
        (Phase::Exploring | Phase::Nudged, Command::CallModel(call)) => {
            let final_answer = matches!(call.reason, CallReason::FinalAnswer { .. });
            assert_eq!(call.tools, !final_answer, "tools offered on {call:?}");
            let nudged = matches!(
                call.reason,
                CallReason::Continue | CallReason::Nudge | CallReason::VerifierRejected
            );
            let nudges = guidance
                .iter()
                .filter(|c| matches!(c, Command::Nudge(_)))
                .count();
            assert_eq!(nudges, usize::from(nudged), "nudges before {call:?}");
        }
        (Phase::Acting, Command::RunTools(batch)) => {
            // Nothing to run only when every call is refused and a budget blocks some: the
            // run goes on with an empty batch (`docs/design.md`, "Budget blocks").
            assert!(
                executed(batch).next().is_some()
                    || batch
                        .refused
                        .iter()
                        .any(|(_, e)| matches!(e, terminus_kernel::Exclusion::Budget(_))),
                "a tool batch with nothing to run and no budget block"
            );
        }
        (Phase::Verifying, Command::Verify(_)) => {}
        (phase, c) => panic!("{phase:?} waits for {c:?}"),
    }
}

/// A Stop agrees with the machine it came from.
fn check_stop(stop: &terminus_kernel::Stop, m: &Machine) {
    assert_eq!(Some(stop.outcome), m.outcome(), "the Stop's outcome");
    assert_eq!(stop.result.as_deref(), m.result(), "the Stop's result");
    let now = m.stats();
    assert!(
        stop.stats.ignored_events <= now.ignored_events,
        "the Stop counted ignored events that did not happen"
    );
    assert_eq!(
        with_ignored(stop.stats, now.ignored_events),
        now,
        "the Stop's stats"
    );
    let excluded: Vec<&str> = m.ledger().excluded().map(|(name, _)| name).collect();
    assert_eq!(stop.excluded_tools, excluded, "the Stop's excluded tools");
}

/// `stats` with another `ignored_events` count (`Stats` is non-exhaustive).
fn with_ignored(mut stats: Stats, ignored_events: u32) -> Stats {
    stats.ignored_events = ignored_events;
    stats
}

/// Nothing changed but the `ignored_events` counter.
fn same_but_ignored(before: &Machine, after: &Machine) {
    let (a, b) = (before.stats(), after.stats());
    assert_eq!(
        b.ignored_events,
        a.ignored_events.saturating_add(1),
        "ignored_events"
    );
    assert_eq!(
        with_ignored(b, a.ignored_events),
        a,
        "an ignored event changed stats"
    );
    assert_eq!(
        before.phase(),
        after.phase(),
        "an ignored event changed phase"
    );
    assert_eq!(before.outcome(), after.outcome(), "outcome");
    assert_eq!(before.streaks(), after.streaks(), "streaks");
    assert_eq!(before.ledger(), after.ledger(), "ledger");
    assert_eq!(before.todos(), after.todos(), "todos");
    assert_eq!(before.result(), after.result(), "result");
}

/// Saves and restores `m`: the copy must be equal (and, when `stable`, save to the same bytes).
fn round_trip(m: &Machine, stable: bool) -> Machine {
    let saved = m.save();
    match Machine::restore(&saved) {
        Ok(r) => {
            assert!(r == *m, "save/restore changed the machine");
            assert!(
                !stable || r.save() == saved,
                "save is not stable across restore"
            );
            r
        }
        Err(e) => panic!("a machine the kernel reached does not restore: {e}\n{m:?}"),
    }
}

/// How many steps [`Run::finish`] follows a run to its end.
const FINISH_CAP: u64 = 256;

/// One run: the machine under test, a twin that is never saved (so a restored machine must
/// behave exactly like the one it was saved from), and what the machine last asked for.
pub(crate) struct Run {
    m: Machine,
    twin: Machine,
    /// The request the machine is waiting on (`CallModel`, `RunTools`, `Verify`).
    waiting: Option<Command>,
    /// Whether `waiting` was emitted by this run (not read from restored bytes).
    own_request: bool,
    now: u64,
    n: u32,
    events: u32,
    stops: u32,
}

impl Run {
    /// Starts a run on `m`, draining and checking what is already queued (a fresh machine's first
    /// `CallModel`, or a restored machine's saved queue).
    pub(crate) fn new(m: Machine, own: bool) -> Run {
        if let Err(why) = check_machine(&m) {
            panic!("a machine to run breaks an invariant: {why}\n{m:?}");
        }
        let mut m = round_trip(&m, true);
        let twin = m.clone();
        let queued: Vec<Command> = std::iter::from_fn(|| m.poll_command()).collect();
        let mut run = Run {
            twin,
            waiting: None,
            own_request: own,
            now: 0,
            n: 0,
            events: 0,
            stops: 0,
            m,
        };
        while run.twin.poll_command().is_some() {}
        for (i, c) in queued.iter().enumerate() {
            if let Command::Stop(stop) = c {
                assert!(i + 1 == queued.len(), "a Stop is followed by {queued:?}");
                check_stop(stop, &run.m);
                run.stops += 1;
            }
        }
        run.note(&queued, own);
        run
    }

    /// The machine under test.
    pub(crate) fn machine(&self) -> &Machine {
        &self.m
    }

    fn note(&mut self, emitted: &[Command], own: bool) {
        if let Some(c) = emitted.iter().rev().find(|c| {
            matches!(
                c,
                Command::CallModel(_) | Command::RunTools(_) | Command::Verify(_)
            )
        }) {
            self.waiting = Some(c.clone());
            self.own_request = own;
        }
    }

    /// The event the machine asked for, if it asked for one.
    fn expected(&self, b: &mut Bytes<'_>) -> Option<Event> {
        Some(match self.waiting.as_ref()? {
            Command::CallModel(_) if b.upto(8) == 7 => model_error(b),
            Command::CallModel(_) => Event::ModelTurn(turn(b, self.n)),
            Command::RunTools(batch) => Event::ToolResults(results(b, batch)),
            Command::Verify(_) => verdict(b),
            _ => return None,
        })
    }

    /// Any event, mostly unexpected ones.
    fn anything(&mut self, b: &mut Bytes<'_>) -> Event {
        let pending: Vec<ToolCall> = match &self.waiting {
            Some(Command::RunTools(batch)) => executed(batch).cloned().collect(),
            _ => Vec::new(),
        };
        match b.upto(16) {
            0..=4 => Event::ModelTurn(turn(b, self.n)),
            5 | 6 => model_error(b),
            7..=9 => {
                let step = u64::from(b.byte()) * 5;
                // The clock may also go backwards; the machine keeps the latest reading.
                let now_ms = if b.upto(8) == 0 {
                    step
                } else {
                    self.now += step;
                    self.now
                };
                Event::Tick { now_ms }
            }
            10 => Event::Cancel,
            11 => verdict(b),
            12 => Event::ToolResults(Vec::new()),
            13 => {
                // All but one of the pending results.
                let mut r: Vec<ToolResult> = pending.iter().map(|c| result(b, c)).collect();
                r.pop();
                Event::ToolResults(r)
            }
            14 => {
                // The pending results and one more.
                let mut r: Vec<ToolResult> = pending.iter().map(|c| result(b, c)).collect();
                r.push(ToolResult {
                    call_id: format!("stray-{}", b.upto(3)).into(),
                    name: TOOLS[b.index(TOOLS.len())].into(),
                    outcome: outcome(b),
                });
                Event::ToolResults(r)
            }
            _ => {
                // The pending results with one id changed.
                let mut r: Vec<ToolResult> = pending.iter().map(|c| result(b, c)).collect();
                if let Some(first) = r.first_mut() {
                    first.call_id = format!("{}x", first.call_id).into();
                } else {
                    r.push(ToolResult {
                        call_id: "c0-0".into(),
                        name: "read".into(),
                        outcome: outcome(b),
                    });
                }
                Event::ToolResults(r)
            }
        }
    }

    /// Feeds one event to the machine and its twin and checks everything.
    pub(crate) fn step(&mut self, e: Event) -> Handled {
        self.n = self.n.wrapping_add(1);
        self.events += 1;
        let before = self.m.clone();
        let handled = self.m.handle(e.clone());
        let twin_handled = self.twin.handle(e);
        let emitted: Vec<Command> = std::iter::from_fn(|| self.m.poll_command()).collect();
        let twin_emitted: Vec<Command> = std::iter::from_fn(|| self.twin.poll_command()).collect();
        assert_eq!(
            handled, twin_handled,
            "a restored machine handled differently"
        );
        assert!(
            emitted == twin_emitted,
            "a restored machine emitted differently"
        );
        assert!(self.m == self.twin, "a restored machine diverged");
        check_transition(&before, &self.m, &handled, &emitted);
        self.stops += u32::try_from(
            emitted
                .iter()
                .filter(|c| matches!(c, Command::Stop(_)))
                .count(),
        )
        .unwrap_or(u32::MAX);
        assert!(self.stops <= 1, "more than one Stop in a run");
        if let Handled::Step(_) = handled {
            self.note(&emitted, true);
        }
        // Saving is the slow part of a run: round-trip after events 1, 2, 4, 8, ... and when the
        // run ends (then the copy carries on, and must keep behaving like its twin).
        let ended = self.m.phase().is_terminal() && !before.phase().is_terminal();
        if self.events.is_power_of_two() || ended {
            self.m = round_trip(&self.m, ended);
        }
        handled
    }

    /// Feeds events decoded from `b` (at most `max` of them, and never past the end of `b`):
    /// fifteen times in sixteen what the machine asked for, otherwise anything.
    pub(crate) fn drive(&mut self, b: &mut Bytes<'_>, max: usize) {
        for _ in 0..max {
            if b.done() {
                break;
            }
            let e = match b.byte() {
                0..=239 => self.expected(b),
                _ => None,
            };
            let e = match e {
                Some(e) => e,
                None => self.anything(b),
            };
            self.step(e);
        }
    }

    /// Liveness and termination: answering exactly what the machine asks for is always a step,
    /// and the run reaches a terminal state within its step bound. (Only when the request came
    /// from this run: a restored queue is outside data.)
    /// Policies with huge limits are only followed for `FINISH_CAP` more steps.
    pub(crate) fn finish(&mut self) {
        let bound = self.m.policy().step_bound();
        let mut zeros = Bytes::new(&[]);
        let mut left = FINISH_CAP;
        while !self.m.phase().is_terminal() && self.own_request && left > 0 {
            left -= 1;
            assert!(
                u64::from(self.m.stats().steps) < bound,
                "a live machine at its step bound"
            );
            let Some(e) = self.expected(&mut zeros) else {
                panic!("a live machine waits for nothing: {:?}", self.waiting);
            };
            let handled = self.step(e);
            assert!(
                matches!(handled, Handled::Step(_)),
                "the answer to the machine's own request was not a step: {handled:?}"
            );
        }
        if self.own_request && bound <= FINISH_CAP {
            assert!(
                self.m.phase().is_terminal(),
                "the run did not end within its step bound"
            );
        }
        if self.m.phase().is_terminal() && self.own_request {
            assert_eq!(self.stops, 1, "a run that ended must have emitted one Stop");
        }
        assert!(self.m.poll_command().is_none(), "commands left over");
    }
}

/// The `transitions` target: an arbitrary small policy and event stream.
pub(crate) fn transitions(data: &[u8]) {
    let mut b = Bytes::new(data);
    let policy = policy(&mut b);
    let Ok(m) = Machine::new(policy) else {
        return; // a policy the kernel refuses is refused with an error, not a panic
    };
    let mut run = Run::new(m, true);
    let max = usize::try_from(run.machine().policy().step_bound())
        .unwrap_or(usize::MAX)
        .min(200)
        + 64;
    run.drive(&mut b, max);
    run.finish();
}

/// The `restore` target. An input starting with `{` is a saved machine up to its first NUL byte,
/// then event bytes. Any other input builds a real machine from a policy and events, saves it,
/// damages the save (digits changed, numbers made huge, bytes flipped), and restores that.
/// Whatever `restore` accepts must satisfy the invariants and keep them through more events.
pub(crate) fn restore(data: &[u8]) {
    if data.first() == Some(&b'{') {
        let (saved, events) = match data.iter().position(|&x| x == 0) {
            Some(i) => (&data[..i], &data[i + 1..]),
            None => (data, &[][..]),
        };
        let Ok(m) = Machine::restore(saved) else {
            return; // refused with an error: fine
        };
        let mut run = Run::new(m, false);
        run.drive(&mut Bytes::new(events), 200);
        run.finish();
        return;
    }
    let mut b = Bytes::new(data);
    let Ok(m) = Machine::new(policy(&mut b)) else {
        return;
    };
    let mut original = Run::new(m, true);
    let events = usize::from(b.byte() % 32);
    original.drive(&mut b, events);
    let mut saved = original.machine().save();
    for _ in 0..b.upto(4) {
        damage(&mut b, &mut saved);
    }
    let Ok(m) = Machine::restore(&saved) else {
        return;
    };
    let mut run = Run::new(m, false);
    run.waiting = original.waiting.clone(); // to aim the events; liveness is not asserted on it
    run.drive(&mut b, 200);
    run.finish();
}

/// One damage to a saved machine, mostly ones that keep it valid JSON.
fn damage(b: &mut Bytes<'_>, saved: &mut Vec<u8>) {
    if saved.is_empty() {
        return;
    }
    let at = (usize::from(b.byte()) << 8 | usize::from(b.byte())) % saved.len();
    let kind = b.upto(4);
    // The next digit from `at` (wrapping), for the numeric damages.
    let digit = (0..saved.len())
        .map(|k| (at + k) % saved.len())
        .find(|&i| saved[i].is_ascii_digit());
    match (kind, digit) {
        (0 | 1, Some(i)) => saved[i] = b'0' + b.byte() % 10,
        (2, Some(i)) => {
            let end = (i..saved.len())
                .find(|&j| !saved[j].is_ascii_digit())
                .unwrap_or(saved.len());
            let start = (0..i)
                .rev()
                .find(|&j| !saved[j].is_ascii_digit())
                .map_or(0, |j| j + 1);
            let big: &[u8] = [
                &b"4294967295"[..],
                b"4294967294",
                b"2147483648",
                b"18446744073709551615",
                b"65535",
                b"65536",
            ][b.index(6)];
            saved.splice(start..end, big.iter().copied());
        }
        _ => saved[at] ^= b.byte(),
    }
}

/// Target `textcall`: a model reply's text (the bytes, UTF-8 lossy) through
/// [`terminus_kernel::textcall`]: what `find` says is inside the text and on a character
/// boundary; `recover` under each mode leaves the prose as the text's prefix, gives each
/// recovered call its id, and a machine fed the turn never completes on a written call that did
/// not run (under `run` or `nudge`).
pub(crate) fn textcall(data: &[u8]) {
    use terminus_kernel::textcall::{self, Recovery, TextToolCalls};
    let text = String::from_utf8_lossy(data).into_owned();
    let written = textcall::find(&text);
    if let Some(w) = &written {
        assert!(w.start <= text.len() && text.is_char_boundary(w.start));
        assert!(
            w.broken || !w.calls.is_empty(),
            "a found call list is empty only for a broken call"
        );
        assert!(!w.broken || w.calls.iter().all(|c| c.arguments.is_null()));
        assert!(w.calls.iter().all(|c| !c.name.trim().is_empty()));
    }
    let offered = ["read_file", "write_file", "t"];
    for mode in [TextToolCalls::Run, TextToolCalls::Nudge, TextToolCalls::Off] {
        let mut turn = ModelTurn {
            text: text.clone(),
            ..ModelTurn::default()
        };
        // `t`'s schema types values a family wrote as text.
        let schema = serde_json::json!({"type": "object", "properties": {
            "n": {"type": "integer"}, "b": {"type": "boolean"}, "o": {"type": ["object", "null"]}
        }});
        let recovery = textcall::recover_typed(
            &mut turn,
            Some(&offered),
            &[("t", &schema)],
            mode,
            "text-1-",
        );
        match (&recovery, &written) {
            (None, _) => assert_eq!(turn.text, text, "nothing recovered, nothing changed"),
            (Some(Recovery::Ran { calls, .. }), Some(w)) => {
                assert_eq!(mode, TextToolCalls::Run);
                assert!(
                    text.starts_with(&turn.text),
                    "the prose is the text's prefix"
                );
                assert_eq!(turn.tool_calls.len(), w.calls.len());
                assert_eq!(turn.recovered_calls() as usize, turn.tool_calls.len());
                assert_eq!(*calls as usize, turn.tool_calls.len());
                for (i, call) in turn.tool_calls.iter().enumerate() {
                    assert_eq!(call.id.as_str(), format!("text-1-{i}"));
                    assert!(offered.contains(&call.name.as_str()));
                    assert!(call.arguments.is_object());
                }
            }
            (Some(Recovery::Nudged { .. }), Some(_)) => {
                assert_ne!(mode, TextToolCalls::Off);
                assert_eq!(turn.text, text);
                assert!(turn.tool_calls.is_empty());
            }
            (Some(_), None) => panic!("a recovery from a text with no written call"),
        }
        let policy = Policy {
            text_tool_calls: mode,
            ..Policy::default()
        };
        let Ok(mut m) = Machine::new(policy) else {
            panic!("the default policy is valid")
        };
        while m.poll_command().is_some() {}
        let unrun = turn.tool_calls.is_empty() && written.is_some();
        m.handle(Event::ModelTurn(turn));
        if unrun && mode != TextToolCalls::Off {
            assert!(
                m.outcome().is_none(),
                "a written call that did not run ended the run"
            );
            assert_eq!(m.result(), None, "a written call is never the result");
        }
        if let Err(why) = check_machine(&m) {
            panic!("after a turn of written calls: {why}");
        }
    }
}
