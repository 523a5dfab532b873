//! Tool results lent with `Machine::handle_results` take exactly the path of the same results
//! handed over in `Event::ToolResults`, and the host still has them afterwards.

use serde_json::json;
use terminus_kernel::{
    AbortReason, Command, Event, Handled, Ignored, Machine, ModelTurn, Outcome, Phase, Policy,
    ToolCall, ToolOutcome, ToolResult,
};

fn turn(n: u32) -> Event {
    Event::ModelTurn(ModelTurn {
        tool_calls: vec![ToolCall::new(
            format!("c{n}"),
            "read_file",
            json!({ "path": "src/lib.rs" }),
        )],
        ..ModelTurn::default()
    })
}

fn results(n: u32) -> Vec<ToolResult> {
    vec![ToolResult {
        call_id: format!("c{n}").into(),
        name: "read_file".into(),
        outcome: ToolOutcome::ok(json!("fn main() {}")),
    }]
}

fn drain(machine: &mut Machine) -> Vec<Command> {
    std::iter::from_fn(|| machine.poll_command()).collect()
}

#[test]
fn lent_results_take_the_path_of_handed_over_ones() {
    let policy = Policy::default();
    let (Ok(mut lent), Ok(mut given)) = (Machine::new(policy.clone()), Machine::new(policy)) else {
        panic!("a valid policy");
    };
    assert_eq!(drain(&mut lent), drain(&mut given));
    // The same call with the same result every turn: the repeat detector, fed from the
    // fingerprints the payloads carry, tells the model at the second turn and stops the third.
    for n in 0..3 {
        assert_eq!(lent.handle(turn(n)), given.handle(turn(n)), "turn {n}");
        assert_eq!(drain(&mut lent), drain(&mut given), "turn {n}");
        let kept = results(n);
        let step = lent.handle_results(&kept);
        assert_eq!(
            step,
            given.handle(Event::ToolResults(results(n))),
            "turn {n}"
        );
        assert!(matches!(step, Handled::Step(_)), "turn {n}: {step:?}");
        assert_eq!(drain(&mut lent), drain(&mut given), "turn {n}");
        // The host still has what it lent.
        assert_eq!(kept, results(n));
    }
    assert_eq!(lent, given);
    assert_eq!(
        lent.outcome(),
        Some(Outcome::Aborted(AbortReason::NoProgress))
    );
    assert_eq!(lent.ledger().get("read_file").map(|r| r.successes), Some(3));
}

#[test]
fn lent_results_that_answer_no_call_are_ignored() {
    let Ok(mut machine) = Machine::new(Policy::default()) else {
        panic!("a valid policy");
    };
    drain(&mut machine);
    assert_eq!(
        machine.handle_results(&results(0)),
        Handled::Ignored {
            why: Ignored::Unexpected,
            phase: Phase::Exploring
        }
    );
    assert_eq!(machine.stats().ignored_events, 1);
    // Results for other calls than the ones in flight are ignored too.
    machine.handle(turn(1));
    drain(&mut machine);
    assert!(matches!(
        machine.handle_results(&results(2)),
        Handled::Ignored { .. }
    ));
    assert_eq!(machine.phase(), Phase::Acting);
}
