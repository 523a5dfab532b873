//! The journal model: replaying any prefix of a run's journal rebuilds exactly the machine the run
//! had at that point, with the pending tool calls classified (not started, in doubt, done), and a
//! replay writes the same keys again.

use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeSet;
use terminus_kernel::{
    CallState, Command, Entry, Event, Handled, Key, Machine, ModelTurn, Policy, Record, ToolCall,
    ToolOutcome, ToolResult, Verdict, executed, recover, step_records,
};

/// Runs a machine with a model that calls `tools[i]` then answers, recording the journal, and
/// snapshots of the machine after each journaled event (by number of records).
fn journaled_run(policy: &Policy, turns: &[u8]) -> (Vec<Record>, Vec<(usize, Machine)>) {
    let mut m = Machine::new(policy.clone()).expect("valid");
    let mut journal = vec![Record {
        key: Key::event(0),
        entry: Entry::User { task: "t".into() },
    }];
    let mut snapshots = vec![(1usize, m.clone())];
    let mut pending: Vec<Command> = std::iter::from_fn(|| m.poll_command()).collect();
    let mut t = 0usize;
    for _ in 0..200 {
        let Some(cmd) = pending
            .iter()
            .find(|c| {
                !matches!(
                    c,
                    Command::Nudge(_) | Command::Notice(_) | Command::Checkpoint(_)
                )
            })
            .cloned()
        else {
            break;
        };
        let event = match cmd {
            Command::Stop(_) => break,
            Command::CallModel(_) => {
                let code = turns.get(t).copied().unwrap_or(0);
                t += 1;
                Event::ModelTurn(match code % 4 {
                    0 => ModelTurn {
                        text: "answer".into(),
                        ..Default::default()
                    },
                    1 => ModelTurn {
                        text: "more".into(),
                        needs_more_work: Some(true),
                        ..Default::default()
                    },
                    _ => ModelTurn {
                        tool_calls: (0..code % 4)
                            .map(|i| ToolCall {
                                id: format!("c{t}-{i}").into(),
                                name: format!("tool{i}").into(),
                                arguments: json!({"t": t}).into(),
                            })
                            .collect(),
                        ..Default::default()
                    },
                })
            }
            Command::RunTools(batch) => {
                let step = m.stats().steps;
                let k = executed(&batch).count() as u32;
                let mut results = Vec::new();
                for (j, c) in executed(&batch).enumerate() {
                    let r = ToolResult {
                        call_id: c.id.clone(),
                        name: c.name.clone(),
                        outcome: ToolOutcome::ok(json!(j)),
                    };
                    journal.push(Record {
                        key: Key::result(step, k, j as u32),
                        entry: Entry::ToolResult(r.clone()),
                    });
                    results.push(r);
                }
                Event::ToolResults(results)
            }
            Command::Verify(_) => Event::Verdict(Verdict {
                complete: true,
                missing: vec![],
            }),
            _ => unreachable!("guidance is filtered above"),
        };
        let Handled::Step(step) = m.handle(event.clone()) else {
            panic!("a responsive driver always steps")
        };
        pending = std::iter::from_fn(|| m.poll_command()).collect();
        journal.extend(step_records(&event, &step, &pending, |name| {
            name != "tool1"
        }));
        snapshots.push((journal.len(), m.clone()));
    }
    (journal, snapshots)
}

fn policy() -> Policy {
    Policy {
        max_repeats: 100,
        max_no_ops: 10,
        ..Policy::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn replaying_any_prefix_rebuilds_the_machine(turns in proptest::collection::vec(0u8..8, 1..25), cut in any::<prop::sample::Index>()) {
        let p = policy();
        let (journal, snapshots) = journaled_run(&p, &turns);
        // Keys are unique and sorted by the order the run wrote them per checkpoint.
        let keys: BTreeSet<Key> = journal.iter().map(|r| r.key).collect();
        prop_assert_eq!(keys.len(), journal.len(), "a key was written twice");
        // Durable stores keep records as JSON: every entry kind must survive the round trip.
        for record in &journal {
            let text = serde_json::to_string(record);
            prop_assert!(text.is_ok(), "{:?} does not serialize: {:?}", record.entry.kind(), text.err());
            let back: Result<Record, _> = serde_json::from_str(&text.expect("checked"));
            let back = back.ok();
            prop_assert_eq!(back.as_ref(), Some(record));
        }
        // Stores hand records back in key order; recovery must not depend on write order.
        let mut sorted = journal.clone();
        sorted.sort_by_key(|r| r.key);
        let n = cut.index(sorted.len()) + 1;
        let recovered = recover(p.clone(), sorted[..n].iter().cloned());
        prop_assert!(recovered.is_ok(), "recovery failed: {:?}", recovered.err());
        let r = recovered.expect("checked");
        // The latest snapshot whose records are all in the prefix is the machine we must get.
        let in_prefix: BTreeSet<Key> = sorted[..n].iter().map(|r| r.key).collect();
        // The event entry (`e0`) of a step is its commit point: the expected machine is the one
        // after the last step whose event is in the prefix.
        let expected = snapshots
            .iter()
            .rev()
            .find(|(_, m)| in_prefix.contains(&Key::event(m.stats().steps)))
            .map(|(_, m)| m)
            .expect("the task snapshot is always in the prefix");
        prop_assert_eq!(r.machine.stats(), expected.stats());
        prop_assert_eq!(r.machine.phase(), expected.phase());
        prop_assert_eq!(r.machine.save(), { let mut e = expected.clone(); while e.poll_command().is_some() {} e.save() });
        // Journaled results of the pending batch are known and never re-run.
        for state in &r.calls {
            if let CallState::Done(res) = state {
                prop_assert!(in_prefix.iter().any(|k| sorted[..n].iter().any(|rec| rec.key == *k && rec.entry == Entry::ToolResult(res.clone()))));
            }
        }
    }
}

#[test]
fn a_call_with_an_intent_and_no_result_is_in_doubt() {
    let p = policy();
    let (journal, _) = journaled_run(&p, &[3, 0]);
    // Cut right after the intents of the first tool turn (before any result).
    let cut = journal
        .iter()
        .position(|r| matches!(r.entry, Entry::ToolResult(_)))
        .expect("a result");
    let mut prefix: Vec<Record> = journal[..cut].to_vec();
    prefix.sort_by_key(|r| r.key);
    let r = recover(p.clone(), prefix.clone()).expect("recovers");
    assert_eq!(
        r.calls,
        vec![
            CallState::InDoubt { idempotent: true },
            CallState::InDoubt { idempotent: false },
            CallState::InDoubt { idempotent: true },
        ]
    );
    assert!(
        r.outstanding
            .iter()
            .any(|c| matches!(c, Command::RunTools(_)))
    );
    // Without the intents, nothing started.
    let no_intents: Vec<Record> = prefix
        .into_iter()
        .filter(|r| !matches!(r.entry, Entry::ToolCall { .. }))
        .collect();
    let r = recover(p, no_intents).expect("recovers");
    assert_eq!(r.calls, vec![CallState::NotStarted; 3]);
}

#[test]
fn a_tampered_journal_is_refused_not_replayed() {
    let p = policy();
    let (mut journal, _) = journaled_run(&p, &[2, 0]);
    journal.sort_by_key(|r| r.key);
    // Change the recorded transition of step 1.
    for r in &mut journal {
        if let Entry::Transition(step) = &mut r.entry {
            step.to = terminus_kernel::Phase::Complete;
            break;
        }
    }
    let err = recover(p.clone(), journal).expect_err("diverges");
    assert!(err.to_string().contains("cp1:e1"), "{err}");
    assert!(recover(p, Vec::<Record>::new()).is_err());
}
