//! A white-box harness: drives a `Machine` with a scripted model, tools and verifier, checks the
//! invariants after every event, and fails any run that does not end within the policy's step
//! bound (like quinn's `drive_bounded`).

#![allow(dead_code, unreachable_pub)]

use serde_json::{Value, json};
use terminus_kernel::testing::{check_machine, check_step};
use terminus_kernel::{
    Command, Event, Finish, Handled, Machine, ModelErrorKind, ModelTurn, Notice, Nudge, Policy,
    StepRecord, Stop, ToolCall, ToolErrorKind, ToolOutcome, ToolResult, Usage, Verdict,
};

/// One scripted model reply.
#[derive(Debug, Clone)]
pub enum Reply {
    Turn(ModelTurn),
    Error(ModelErrorKind),
}

pub fn text(s: &str) -> Reply {
    Reply::Turn(ModelTurn {
        text: s.into(),
        usage: Some(Usage {
            input_tokens: 10,
            output_tokens: 5,
        }),
        ..Default::default()
    })
}

pub fn done(s: &str) -> Reply {
    Reply::Turn(ModelTurn {
        text: s.into(),
        needs_more_work: Some(false),
        ..Default::default()
    })
}

pub fn needs_more(s: &str) -> Reply {
    Reply::Turn(ModelTurn {
        text: s.into(),
        needs_more_work: Some(true),
        ..Default::default()
    })
}

pub fn empty() -> Reply {
    Reply::Turn(ModelTurn {
        usage: Some(Usage::default()),
        ..Default::default()
    })
}

pub fn finish(text: &str, finish: Finish) -> Reply {
    Reply::Turn(ModelTurn {
        text: text.into(),
        finish,
        ..Default::default()
    })
}

pub fn call(name: &str, args: Value) -> Reply {
    calls(&[(name, args)])
}

pub fn calls(list: &[(&str, Value)]) -> Reply {
    Reply::Turn(ModelTurn {
        tool_calls: list
            .iter()
            .map(|(n, a)| ToolCall {
                id: "".into(),
                name: (*n).into(),
                arguments: a.clone().into(),
            })
            .collect(),
        finish: Finish::ToolCalls,
        ..Default::default()
    })
}

pub fn todos(items: &[(&str, &str)]) -> Reply {
    let list: Vec<Value> = items
        .iter()
        .map(|(c, s)| json!({"content": c, "status": s}))
        .collect();
    call("write_todos", json!({ "todos": list }))
}

pub type ToolFn = Box<dyn FnMut(&ToolCall, u32) -> ToolOutcome>;

/// The scripted world. Replies and verdicts repeat their last entry when they run out.
pub struct Script {
    pub replies: Vec<Reply>,
    pub tool: ToolFn,
    pub verdicts: Vec<Verdict>,
    /// Inject an event before answering the n-th command (0-based).
    pub inject: Vec<(usize, Event)>,
}

impl Script {
    pub fn new(replies: Vec<Reply>) -> Self {
        Script {
            replies,
            tool: Box::new(|_, _| ToolOutcome::ok(json!("ok"))),
            verdicts: vec![Verdict {
                complete: true,
                missing: vec![],
            }],
            inject: vec![],
        }
    }

    pub fn tool(mut self, f: impl FnMut(&ToolCall, u32) -> ToolOutcome + 'static) -> Self {
        self.tool = Box::new(f);
        self
    }

    pub fn verdicts(mut self, v: Vec<Verdict>) -> Self {
        self.verdicts = v;
        self
    }

    pub fn inject(mut self, at: usize, e: Event) -> Self {
        self.inject.push((at, e));
        self
    }
}

pub fn fail(kind: ToolErrorKind) -> ToolOutcome {
    ToolOutcome::Error {
        kind,
        message: format!("{} (scripted)", kind.as_str()),
    }
}

pub fn reject(missing: &str) -> Verdict {
    Verdict {
        complete: false,
        missing: vec![missing.into()],
    }
}

/// What a run did.
#[derive(Debug)]
pub struct Run {
    pub stop: Stop,
    pub trace: Vec<StepRecord>,
    pub commands: Vec<Command>,
    pub nudges: Vec<Nudge>,
    pub notices: Vec<Notice>,
    pub machine: Machine,
}

impl Run {
    pub fn rules(&self) -> Vec<&'static str> {
        self.trace.iter().map(|r| r.rule.name()).collect()
    }
}

/// Feeds one event and checks every invariant.
pub fn feed(m: &mut Machine, e: Event) -> Handled {
    let before = m.clone();
    let handled = m.handle(e);
    let stepped = matches!(handled, Handled::Step(_));
    if let Err(why) = check_step(&before, m, stepped) {
        panic!("invariant broken by {handled:?}: {why}");
    }
    if let Err(why) = check_machine(m) {
        panic!("invariant broken after {handled:?}: {why}");
    }
    handled
}

pub fn drive(policy: Policy, mut script: Script) -> Run {
    let bound = policy.step_bound();
    let mut m = Machine::new(policy).expect("valid policy");
    let mut trace = Vec::new();
    let mut commands = Vec::new();
    let mut nudges = Vec::new();
    let mut notices = Vec::new();
    let (mut turn_no, mut verdict_no, mut n) = (0usize, 0usize, 0usize);
    let mut calls_per_tool: std::collections::HashMap<String, u32> = Default::default();
    loop {
        let Some(cmd) = m.poll_command() else {
            panic!("a live machine went idle without a command: {m:?}")
        };
        commands.push(cmd.clone());
        let mut injected = None;
        if let Some(pos) = script.inject.iter().position(|(at, _)| *at == n) {
            injected = Some(script.inject.remove(pos).1);
        }
        n += 1;
        let event = match cmd {
            Command::Stop(stop) => {
                assert!(m.poll_command().is_none(), "Stop must be the last command");
                assert!(
                    u64::from(stop.stats.steps) <= bound,
                    "run took {} steps, bound {bound}",
                    stop.stats.steps
                );
                assert_eq!(Some(stop.outcome), m.outcome());
                return Run {
                    stop: *stop,
                    trace,
                    commands,
                    nudges,
                    notices,
                    machine: m,
                };
            }
            Command::Nudge(nudge) => {
                nudges.push(*nudge);
                None
            }
            Command::Notice(notice) => {
                notices.push(notice);
                None
            }
            Command::CallModel(_) => {
                let reply = script
                    .replies
                    .get(turn_no)
                    .or(script.replies.last())
                    .cloned()
                    .expect("a script");
                let t = turn_no;
                turn_no += 1;
                Some(match reply {
                    Reply::Turn(mut turn) => {
                        for (i, c) in turn.tool_calls.iter_mut().enumerate() {
                            c.id = format!("call-{t}-{i}").into();
                        }
                        Event::ModelTurn(turn)
                    }
                    Reply::Error(kind) => Event::ModelError {
                        kind,
                        retry_after_ms: None,
                    },
                })
            }
            Command::RunTools(batch) => {
                let mut results = Vec::new();
                for (i, c) in batch.calls.iter().enumerate() {
                    if batch.refusal(i).is_some() {
                        continue;
                    }
                    let k = calls_per_tool.entry(c.name.to_string()).or_default();
                    *k += 1;
                    let outcome = if c.name == "write_todos" {
                        ToolOutcome::ok(json!("todos updated"))
                    } else {
                        (script.tool)(c, *k)
                    };
                    results.push(ToolResult {
                        call_id: c.id.clone(),
                        name: c.name.clone(),
                        outcome,
                    });
                }
                Some(Event::ToolResults(results))
            }
            Command::Verify(_) => {
                let v = script
                    .verdicts
                    .get(verdict_no)
                    .or(script.verdicts.last())
                    .cloned()
                    .expect("a verdict");
                verdict_no += 1;
                Some(Event::Verdict(v))
            }
            // A checkpoint written for the agent: nothing answers it (kept in `commands`).
            Command::Checkpoint(_) => None,
            other => panic!("a command this harness does not know: {other:?}"),
        };
        for e in injected.into_iter().chain(event) {
            if let Handled::Step(r) = feed(&mut m, e) {
                trace.push(r);
            }
        }
        assert!(
            trace.len() as u64 <= bound,
            "more steps than step_bound {bound}"
        );
        assert!(n < 100_000, "the run never ended");
    }
}
