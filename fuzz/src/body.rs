//! The invariant-checking body of the fuzz targets, shared with the kernel's ordinary test suite
//! (`kernel/tests/fuzz_seeds.rs` includes this file and replays `fuzz/seeds/`), so a crash the
//! fuzzer finds becomes a regression test by copying its input into the seeds.
//!
//! Inputs are plain bytes decoded by a small reader (no `arbitrary` derive), so any byte string
//! is a valid input and the decoding is stable across versions of the fuzzing crates.

use serde_json::json;
use terminus_kernel::invariants::{check_machine, check_step};
use terminus_kernel::{
    Command, Event, Finish, Handled, Machine, ModelErrorKind, ModelTurn, OnUnrecoverable,
    OnVerificationLimit, Policy, ToolCall, ToolErrorKind, ToolOutcome, ToolResult, Usage, Verdict,
};

/// Reads bytes; past the end it reads zeros, so every input decodes.
pub(crate) struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { data, at: 0 }
    }

    pub(crate) fn done(&self) -> bool {
        self.at >= self.data.len()
    }

    pub(crate) fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    fn upto(&mut self, n: u8) -> u32 {
        u32::from(self.byte() % n)
    }

    fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }
}

/// A small policy (limits 0..=5) so that every limit is reachable in a short input.
pub(crate) fn policy(b: &mut Bytes<'_>) -> Policy {
    Policy {
        max_steps: b.upto(40),
        max_model_calls: b.upto(12),
        max_no_ops: b.upto(5),
        max_nudges: b.upto(5),
        max_verification_failures: b.upto(5),
        on_verification_limit: if b.flag() {
            OnVerificationLimit::Complete
        } else {
            OnVerificationLimit::Abort
        },
        verify_completion: b.flag(),
        completion_requires: if b.flag() {
            vec!["write".into()]
        } else {
            Vec::new()
        },
        max_tool_failures: b.upto(5),
        max_consecutive_tool_failures: b.upto(5),
        on_unrecoverable_tool_error: if b.flag() {
            OnUnrecoverable::Stop
        } else {
            OnUnrecoverable::Exclude
        },
        max_repeats: b.upto(5),
        max_empty_responses: b.upto(5),
        max_model_retries: b.upto(5),
        retry_base_ms: u64::from(b.byte()),
        retry_max_ms: u64::from(b.byte()) * 10,
        deadline_ms: b.flag().then(|| u64::from(b.byte()) * 20),
        token_budget: b.flag().then(|| u64::from(b.byte()) * 10),
        seed: u64::from(b.byte()),
        final_answer_on_budget: b.flag(),
        ..Policy::default()
    }
}

const TOOLS: [&str; 4] = ["read", "write", "write_todos", "search"];

fn call(b: &mut Bytes<'_>, n: u32, i: u32) -> ToolCall {
    let name = TOOLS[b.upto(4) as usize];
    let arguments = if name == "write_todos" {
        let status = ["pending", "in_progress", "completed", "bogus"][b.upto(4) as usize];
        json!({ "todos": [ { "content": "step", "status": status } ] })
    } else {
        json!({ "path": b.upto(3) })
    };
    ToolCall {
        id: format!("c{n}-{i}"),
        name: name.into(),
        arguments,
    }
}

fn turn(b: &mut Bytes<'_>, n: u32) -> ModelTurn {
    let usage = b.flag().then(|| Usage {
        input_tokens: u64::from(b.upto(50)),
        output_tokens: u64::from(b.upto(50)),
    });
    let finish = [
        Finish::Stop,
        Finish::Length,
        Finish::ContentFilter,
        Finish::ToolCalls,
    ][b.upto(4) as usize];
    match b.upto(5) {
        0 | 1 => ModelTurn {
            tool_calls: (0..1 + b.upto(3)).map(|i| call(b, n, i)).collect(),
            usage,
            ..ModelTurn::default()
        },
        2 => ModelTurn {
            text: "Done.".into(),
            needs_more_work: [None, Some(false), Some(true)][b.upto(3) as usize],
            usage,
            finish,
            ..ModelTurn::default()
        },
        3 => ModelTurn {
            usage,
            finish,
            reasoning: b.flag(),
            ..ModelTurn::default()
        },
        _ => ModelTurn {
            text: "Working on it.".into(),
            tool_calls: if b.flag() {
                vec![call(b, n, 0)]
            } else {
                Vec::new()
            },
            needs_more_work: Some(true),
            usage,
            ..ModelTurn::default()
        },
    }
}

fn outcome(b: &mut Bytes<'_>) -> ToolOutcome {
    if b.upto(3) == 0 {
        ToolOutcome::Error {
            kind: ToolErrorKind::ALL[b.upto(6) as usize],
            message: "failed".into(),
        }
    } else {
        ToolOutcome::Ok(json!(b.upto(2)))
    }
}

/// The next event: mostly what the machine asked for, sometimes anything at all.
fn event(b: &mut Bytes<'_>, waiting: Option<&Command>, n: u32, now: &mut u64) -> Event {
    if let (Some(Command::RunTools(batch)), true) = (waiting, b.upto(8) != 0) {
        let results = terminus_kernel::executed(batch)
            .map(|c| ToolResult {
                call_id: c.id.clone(),
                name: c.name.clone(),
                outcome: outcome(b),
            })
            .collect();
        return Event::ToolResults(results);
    }
    if let (Some(Command::Verify(_)), true) = (waiting, b.upto(8) != 0) {
        return Event::Verdict(Verdict {
            complete: b.flag(),
            missing: if b.flag() {
                vec![format!("item {}", b.upto(3))]
            } else {
                Vec::new()
            },
        });
    }
    match b.upto(10) {
        0..=4 => Event::ModelTurn(turn(b, n)),
        5 => Event::ModelError {
            kind: ModelErrorKind::ALL[b.upto(6) as usize],
            retry_after_ms: b.flag().then(|| u64::from(b.byte())),
        },
        6 => {
            *now += u64::from(b.byte()) * 5;
            Event::Tick { now_ms: *now }
        }
        7 => Event::Cancel,
        8 => Event::Verdict(Verdict {
            complete: b.flag(),
            missing: Vec::new(),
        }),
        _ => Event::ToolResults(vec![ToolResult {
            call_id: format!("stray-{}", b.upto(3)),
            name: "read".into(),
            outcome: outcome(b),
        }]),
    }
}

/// Feeds events from `b` to `m`, checking every invariant after every event. Panics on a
/// violation (that is what the fuzzer reports).
pub(crate) fn drive(m: &mut Machine, b: &mut Bytes<'_>) {
    let bound = m.policy().step_bound();
    let mut now = 0u64;
    let mut waiting: Option<Command> = None;
    let mut n = 0u32;
    // Enough events to reach any bound of the small policies and go past it.
    for _ in 0..(bound as usize + 48) {
        if b.done() {
            break;
        }
        while let Some(c) = m.poll_command() {
            if !matches!(c, Command::Nudge(_) | Command::Notice(_)) {
                waiting = Some(c);
            }
        }
        n += 1;
        let e = event(b, waiting.as_ref(), n, &mut now);
        let before = m.clone();
        let handled = m.handle(e);
        let stepped = matches!(handled, Handled::Step(_));
        if let Err(why) = check_step(&before, m, stepped).and_then(|()| check_machine(m)) {
            panic!("invariant broken after {handled:?}: {why}\n{m:?}");
        }
        assert!(
            u64::from(m.stats().steps) <= bound,
            "steps {} exceed the step bound {bound}",
            m.stats().steps
        );
        if before.phase().is_terminal() {
            assert!(
                matches!(handled, Handled::Ignored { .. }),
                "a terminal machine took {handled:?}"
            );
            assert_eq!(before.stats().steps, m.stats().steps);
        }
        if stepped {
            waiting = None;
        }
        if n.is_multiple_of(8) {
            round_trip(m);
        }
    }
    round_trip(m);
}

fn round_trip(m: &Machine) {
    match Machine::restore(&m.save()) {
        Ok(r) => assert!(r == *m, "save/restore changed the machine"),
        Err(e) => panic!("a saved machine does not restore: {e:?}"),
    }
}

/// The `transitions` target: an arbitrary small policy and event stream.
pub(crate) fn transitions(data: &[u8]) {
    let mut b = Bytes::new(data);
    let policy = policy(&mut b);
    let Ok(mut m) = Machine::new(policy) else {
        return; // a policy the kernel refuses is refused with an error, not a panic
    };
    drive(&mut m, &mut b);
}

/// The `restore` target: arbitrary bytes as a saved machine (the first byte picks whether they
/// are raw, or a real saved machine with bytes flipped), then events.
pub(crate) fn restore(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let saved: Vec<u8> = if mode % 2 == 0 {
        rest.to_vec()
    } else {
        // A real machine mid-run, saved, then damaged at a few positions.
        let mut b = Bytes::new(rest);
        let Ok(mut m) = Machine::new(policy(&mut b)) else {
            return;
        };
        drive(&mut m, &mut Bytes::new(&rest[..rest.len().min(24)]));
        let mut bytes = m.save();
        let len = bytes.len().max(1);
        for _ in 0..b.upto(4) {
            let at = usize::from(b.byte()) * 7 % len;
            if let Some(x) = bytes.get_mut(at) {
                *x ^= b.byte();
            }
        }
        bytes
    };
    let Ok(mut m) = Machine::restore(&saved) else {
        return; // refused with an error: fine
    };
    if let Err(why) = check_machine(&m) {
        panic!("restore accepted a machine that breaks an invariant: {why}");
    }
    drive(&mut m, &mut Bytes::new(data));
}
