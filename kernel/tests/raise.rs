//! Raising a budget (`terminus resume --raise FIELD=N`): a run a run-wide budget stopped goes on
//! with the step the stop pre-empted, under the raised policy; counters carry over; the first stop
//! and the raise stay in the journal and replay to the same machine; a raise that does not name
//! the budget that stopped the run, or does not raise it, changes nothing.

use serde_json::json;
use terminus_kernel::{
    AbortReason, CallReason, Command, Entry, Event, Handled, Input, Key, Machine, ModelTurn,
    Outcome, Phase, Policy, Raise, RaiseError, Record, Rule, StepRecord, ToolCall, ToolOutcome,
    ToolResult, Usage, held_decision_records, recover,
};

fn raise(field: &str, to: u64) -> Raise {
    Raise {
        field: field.into(),
        to,
    }
}

fn tool_turn(n: u32) -> ModelTurn {
    ModelTurn {
        tool_calls: vec![ToolCall::new(
            format!("c{n}"),
            "read",
            json!({ "path": format!("f{n}") }),
        )],
        usage: Some(Usage {
            input_tokens: 10,
            output_tokens: 0,
        }),
        ..ModelTurn::default()
    }
}

fn claim() -> ModelTurn {
    ModelTurn {
        text: "done".into(),
        needs_more_work: Some(false),
        ..ModelTurn::default()
    }
}

/// A host that journals every step as `terminus` does, so a replay can be checked.
struct Host {
    start: Policy,
    machine: Machine,
    records: Vec<Record>,
    commands: Vec<Command>,
}

impl Host {
    fn new(policy: Policy) -> Host {
        let mut machine = Machine::new(policy.clone()).expect("a valid policy");
        let commands = std::iter::from_fn(|| machine.poll_command()).collect();
        Host {
            start: policy,
            machine,
            records: vec![Record {
                key: Key::event(0),
                entry: Entry::User { task: "t".into() },
            }],
            commands,
        }
    }

    fn journal(&mut self, entry: Entry, handled: Handled) -> StepRecord {
        let Handled::Step(step) = handled else {
            panic!("not a step: {handled:?}");
        };
        self.commands = std::iter::from_fn(|| self.machine.poll_command()).collect();
        self.records.push(Record {
            key: Key::event(step.step),
            entry,
        });
        self.records
            .extend(held_decision_records(&step, &self.commands, |_| {
                (true, None)
            }));
        step
    }

    fn event(&mut self, event: Event) -> StepRecord {
        let entry = Entry::from_event(&event);
        let handled = self.machine.handle(event);
        self.journal(entry, handled)
    }

    fn raise(&mut self, raises: &[Raise]) -> Result<StepRecord, RaiseError> {
        let handled = self.machine.raise(raises)?;
        Ok(self.journal(
            Entry::Raised {
                raises: raises.to_vec(),
            },
            handled,
        ))
    }

    /// Two tool turns, each answered.
    fn two_tool_turns(&mut self) {
        for n in 1..=2 {
            self.event(Event::ModelTurn(tool_turn(n)));
            self.results();
        }
    }

    /// Answers the outstanding tool batch, every call ok.
    fn results(&mut self) -> StepRecord {
        let results = self
            .commands
            .iter()
            .find_map(|c| match c {
                Command::RunTools(b) => Some(b.clone()),
                _ => None,
            })
            .expect("a tool batch is outstanding")
            .calls
            .iter()
            .map(|c| ToolResult {
                call_id: c.id.clone(),
                name: c.name.clone(),
                outcome: ToolOutcome::ok(json!("ok")),
            })
            .collect();
        self.event(Event::ToolResults(results))
    }

    fn replayed(&self) -> Machine {
        // A replay starts from the run's first policy and applies the journaled raises.
        recover(self.start.clone(), self.records.clone())
            .expect("the journal replays")
            .machine
    }
}

/// The limits the runs below start with.
fn policy() -> Policy {
    Policy {
        max_steps: 5,
        max_model_calls: 4,
        max_nudges: 1,
        ..Policy::default()
    }
}

#[test]
fn a_step_budget_stop_before_a_tool_turn_runs_its_calls_once_raised() {
    let mut host = Host::new(policy());
    host.two_tool_turns();
    // Step 5 would run the third turn's call: the step budget stops the run instead.
    let stop = host.event(Event::ModelTurn(tool_turn(3)));
    assert_eq!((stop.step, stop.rule), (5, Rule::StepBudget));
    assert_eq!(
        host.machine.outcome(),
        Some(Outcome::Aborted(AbortReason::MaxSteps))
    );
    assert!(
        !host
            .commands
            .iter()
            .any(|c| matches!(c, Command::RunTools(_)))
    );
    let before = host.machine.stats();

    let step = host.raise(&[raise("max_steps", 10)]).expect("raised");
    assert_eq!(
        step,
        StepRecord {
            step: 6,
            from: Phase::Aborted,
            to: Phase::Acting,
            input: Input::Raise,
            rule: Rule::ToolTurn,
        }
    );
    assert_eq!(host.machine.policy().max_steps, 10);
    // The pre-empted turn's call runs, once; the counters went on from the stop.
    let batch = host
        .commands
        .iter()
        .find_map(|c| match c {
            Command::RunTools(b) => Some(b.clone()),
            _ => None,
        })
        .expect("the pre-empted call runs");
    assert_eq!(batch.calls.len(), 1);
    assert_eq!(batch.calls[0].id.as_str(), "c3");
    let after = host.machine.stats();
    assert_eq!(after.steps, before.steps + 1);
    assert_eq!(after.tool_calls, before.tool_calls + 1);
    assert_eq!(after.model_calls, before.model_calls);
    assert_eq!(
        after.input_tokens, before.input_tokens,
        "the turn's tokens count once"
    );

    host.results();
    let end = host.event(Event::ModelTurn(claim()));
    assert_eq!(end.to, Phase::Complete);
    assert_eq!(host.machine.stats().steps, 8);
    // The stop, the raise and what followed replay to the same machine.
    assert_eq!(host.replayed(), host.machine);
}

#[test]
fn a_model_call_budget_stop_after_results_sends_them_back_once_raised() {
    let mut host = Host::new(Policy {
        max_model_calls: 2,
        max_steps: 10,
        ..policy()
    });
    host.event(Event::ModelTurn(tool_turn(1)));
    host.results();
    host.event(Event::ModelTurn(tool_turn(2)));
    let stop = host.results();
    assert_eq!(stop.rule, Rule::ModelCallBudget);
    let step = host.raise(&[raise("max_model_calls", 3)]).expect("raised");
    assert_eq!((step.from, step.to), (Phase::Aborted, Phase::Exploring));
    assert_eq!(step.rule, Rule::ToolResultsBack);
    assert!(host.commands.iter().any(|c| matches!(
        c,
        Command::CallModel(call) if call.reason == CallReason::AfterTools
    )));
    assert_eq!(host.machine.stats().model_calls, 3);
    assert_eq!(host.replayed(), host.machine);
}

#[test]
fn a_nudge_limit_stop_nudges_once_raised() {
    let mut host = Host::new(Policy {
        completion_requires: vec!["read".into()],
        ..policy()
    });
    let refused = host.event(Event::ModelTurn(claim()));
    assert_eq!(refused.rule, Rule::ClaimRefused);
    let stop = host.event(Event::ModelTurn(claim()));
    assert_eq!(stop.rule, Rule::ClaimRefusedLimit);
    assert_eq!(
        host.machine.outcome(),
        Some(Outcome::Aborted(AbortReason::Incomplete))
    );
    let step = host.raise(&[raise("max_nudges", 2)]).expect("raised");
    assert_eq!(step.rule, Rule::ClaimRefused);
    assert_eq!(step.to, Phase::Nudged);
    assert!(host.commands.iter().any(|c| matches!(c, Command::Nudge(_))));
    assert_eq!(host.machine.stats().nudges, 2);
    assert_eq!(host.replayed(), host.machine);
}

#[test]
fn a_token_budget_stop_goes_on_and_tells_the_new_budget_again() {
    let mut host = Host::new(Policy {
        token_budget: Some(25),
        ..Policy::default()
    });
    host.two_tool_turns();
    let stop = host.event(Event::ModelTurn(tool_turn(3)));
    assert_eq!(stop.rule, Rule::TokenBudget);
    let step = host.raise(&[raise("token_budget", 1_000)]).expect("raised");
    assert_eq!(step.rule, Rule::ToolTurn);
    host.results();
    assert_eq!(host.machine.phase(), Phase::Exploring);
    assert_eq!(host.replayed(), host.machine);
}

#[test]
fn a_raise_too_small_for_the_pre_empted_step_stops_again_with_the_same_name() {
    let mut host = Host::new(policy());
    host.two_tool_turns();
    host.event(Event::ModelTurn(tool_turn(3)));
    // The stop was step 5 of 5: a raise to 6 has no room for the pre-empted step (step 6 is
    // the budget's last, the stop's), 7 has.
    assert_eq!(
        host.machine.raise(&[raise("max_steps", 5)]),
        Err(RaiseError::NotHigher {
            field: "max_steps".into(),
            from: 5,
            to: 5
        })
    );
    let step = host.raise(&[raise("max_steps", 6)]).expect("raised");
    assert_eq!((step.rule, step.to), (Rule::StepBudget, Phase::Aborted));
    // Stopped again before the same step: it can be raised again.
    let step = host.raise(&[raise("max_steps", 9)]).expect("raised again");
    assert_eq!(step.rule, Rule::ToolTurn);
    assert_eq!(host.replayed(), host.machine);
}

#[test]
fn a_stopped_machine_keeps_its_pre_empted_step_across_a_snapshot() {
    let mut host = Host::new(policy());
    host.two_tool_turns();
    host.event(Event::ModelTurn(tool_turn(3)));
    let mut restored = Machine::restore(&host.machine.save()).expect("restores");
    assert_eq!(restored, host.machine);
    let live = host.machine.raise(&[raise("max_steps", 10)]);
    let from_snapshot = restored.raise(&[raise("max_steps", 10)]);
    assert_eq!(live, from_snapshot);
    assert_eq!(restored, host.machine);
    // A snapshot taken after the raise restores too (its counters are past the first bound).
    assert_eq!(
        Machine::restore(&host.machine.save()).expect("restores"),
        host.machine
    );
}

#[test]
fn a_refused_raise_says_why_and_changes_nothing() {
    let mut live = Machine::new(policy()).expect("valid");
    assert_eq!(live.raise(&[raise("max_steps", 9)]), Err(RaiseError::Live));

    let mut host = Host::new(policy());
    host.two_tool_turns();
    host.event(Event::ModelTurn(tool_turn(3)));
    let stopped = host.machine.clone();
    let m = &mut host.machine;
    let stop = Outcome::Aborted(AbortReason::MaxSteps);
    let cases = [
        (vec![], RaiseError::Empty),
        (
            vec![raise("max_model_calls", 9)],
            RaiseError::DidNotStop {
                field: "max_model_calls".into(),
                outcome: stop,
            },
        ),
        (
            vec![raise("max_steps", 2)],
            RaiseError::NotHigher {
                field: "max_steps".into(),
                from: 5,
                to: 2,
            },
        ),
        (
            vec![raise("max_no_ops", 9)],
            RaiseError::NotRaisable("max_no_ops".into()),
        ),
        (
            vec![raise("max_steps", 9), raise("max_steps", 10)],
            RaiseError::Repeated("max_steps".into()),
        ),
    ];
    for (raises, error) in cases {
        assert_eq!(m.raise(&raises), Err(error), "{raises:?}");
        assert_eq!(*m, stopped, "{raises:?} changed the machine");
    }
    assert!(
        RaiseError::NotRaisable("max_no_ops".into())
            .to_string()
            .contains(
                "max_steps, token_budget, max_output_tokens, max_model_calls, max_tool_calls, max_nudges"
            )
    );

    // A run that ended another way keeps nothing to go on with.
    let mut done = Host::new(Policy::default());
    done.event(Event::ModelTurn(claim()));
    assert!(matches!(
        done.machine.raise(&[raise("max_steps", 9)]),
        Err(RaiseError::NotABudgetStop(_))
    ));
    // Nor does one that gave its final answer under `final_answer_on_budget`.
    let mut finalized = Host::new(Policy {
        final_answer_on_budget: true,
        ..policy()
    });
    finalized.two_tool_turns();
    let call = finalized.event(Event::ModelTurn(tool_turn(3)));
    assert_eq!(call.rule, Rule::FinalAnswerCall);
    finalized.event(Event::ModelTurn(claim()));
    assert!(matches!(
        finalized.machine.raise(&[raise("max_steps", 9)]),
        Err(RaiseError::NotABudgetStop(_))
    ));
}

#[test]
fn the_raise_is_no_input_an_event_or_a_host_can_feed() {
    let mut host = Host::new(policy());
    host.two_tool_turns();
    host.event(Event::ModelTurn(tool_turn(3)));
    let stopped = host.machine.clone();
    // The abstract input alone (no raised policy with it) is absorbed like any other.
    let handled = host.machine.handle_input(Input::Raise);
    assert!(matches!(handled, Handled::Ignored { .. }), "{handled:?}");
    assert_eq!(host.machine.phase(), Phase::Aborted);
    assert_eq!(host.machine.outcome(), stopped.outcome());
}

#[test]
fn parse_reads_field_equals_number() {
    assert_eq!(Raise::parse("max_steps=40"), Ok(raise("max_steps", 40)));
    assert_eq!(
        Raise::parse(" token_budget = 9 "),
        Ok(raise("token_budget", 9))
    );
    for bad in ["max_steps", "max_steps=", "max_steps=-1", "max_steps=x"] {
        assert_eq!(
            Raise::parse(bad),
            Err(RaiseError::Syntax(bad.into())),
            "{bad}"
        );
    }
}
