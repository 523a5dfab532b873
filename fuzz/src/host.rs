//! The invariant-checking body of the `host_session` fuzz target, shared with the runtime's
//! ordinary test suite (`runtime/tests/fuzz_host_corpus.rs` includes this one file): a
//! framework's conversation, as any JSON a host could pass, through the host core
//! (`terminus_runtime::host::Session`), the boundary the Python and Node bindings expose.
//!
//! The input is the conversation's messages: a JSON array (anything else is not a conversation
//! and is skipped; the bindings only ever pass arrays of values). Each message is given to
//! `reply`, then the messages so far to `results` when a tool turn is out, verifications are
//! answered, each call the message names goes through `gate`, and a model error is fed for every
//! third message. Checked after every call: no panic (every bad input is an `Err`), a step that
//! ends has a report and leaves the session ended, an ended session stays ended, the session's
//! snapshot restores to a session with the same snapshot, and the kernel's step count never
//! exceeds its policy's bound.

use serde_json::Value;
use terminus_kernel::{ModelErrorKind, Policy};
use terminus_runtime::host::{Jump, Offered, Session, Step, VerdictIn};

/// Checks what a step says against the session it came from.
fn check(session: &Session, step: &Step, was_ended: bool) {
    if step.jump == Some(Jump::End) {
        assert!(step.report.is_some(), "an ending step has the report");
        assert!(session.ended(), "an ending step ends the session");
    }
    if was_ended {
        assert!(session.ended(), "an ended session stays ended");
    }
    let steps = u64::from(session.host().machine().stats().steps);
    let bound = session.host().machine().policy().step_bound();
    assert!(steps <= bound, "{steps} steps past the bound {bound}");
}

/// Answers the verifications a step asks (the rules' verdict), checking each step.
fn verified(session: &mut Session, mut step: Step) -> Step {
    while let Some(verify) = step.verify.take() {
        let was = session.ended();
        let verdict = VerdictIn {
            complete: verify.missing.is_empty(),
            feedback: None,
            missing: Some(verify.missing),
        };
        step = session
            .verdict(verdict)
            .expect("a pending verification takes its verdict");
        check(session, &step, was);
    }
    step
}

/// The snapshot round trip: a session's own snapshot restores, to the same snapshot.
fn round_trip(session: &Session) {
    let text = session.snapshot();
    let back = Session::restore(&text).expect("a session's own snapshot restores");
    assert_eq!(
        back.snapshot(),
        text,
        "the restored session saves the same snapshot"
    );
}

/// The tools every reply is offered: `read` with a schema that types a written call's text
/// values (a number, a flag, a list), `write` by name only.
fn offered() -> Vec<Offered> {
    let schema = serde_json::json!({"type": "object", "properties": {
        "path": {"type": "string"}, "lines": {"type": "integer"},
        "follow": {"type": "boolean"}, "skip": {"type": ["array", "null"]}}});
    vec![
        Offered {
            name: "read".to_owned(),
            parameters: Some(schema),
        },
        Offered::named("write"),
    ]
}

/// Runs the conversation `data` through a session, checking after every call.
pub(crate) fn host_session(data: &[u8]) {
    let Ok(messages) = serde_json::from_slice::<Vec<Value>>(data) else {
        return;
    };
    let policy = Policy {
        max_steps: 40,
        ..Policy::default()
    };
    let Ok((mut session, first)) = Session::start(policy, &messages, 0) else {
        return;
    };
    check(&session, &first, false);
    for (i, message) in messages.iter().enumerate() {
        let now = u64::try_from(i).unwrap_or(u64::MAX);
        let was = session.ended();
        if i % 3 == 2 && !was {
            let kind = [ModelErrorKind::RateLimited, ModelErrorKind::Server][i % 2];
            if let Ok(step) = session.model_error(kind, Some(now), now) {
                check(&session, &step, was);
                verified(&mut session, step);
            }
        }
        let was = session.ended();
        if let Ok(Some(step)) = session.reply(message, Some(offered()), now) {
            check(&session, &step, was);
            verified(&mut session, step);
        }
        let turn = session.turn().clone();
        for (id, name) in &turn.awaiting {
            let _ = Session::gate(&turn, id, name, i % 2 == 0);
        }
        let was = session.ended();
        if session.batch_out()
            && let Ok(Some(step)) = session.results(&messages[..=i], now)
        {
            check(&session, &step, was);
            verified(&mut session, step);
        }
        round_trip(&session);
    }
    let was = session.ended();
    if let Ok(Some(step)) = session.finish(&messages, 0) {
        check(&session, &step, was);
        assert!(session.ended(), "finish ends the run");
    }
    round_trip(&session);
}
