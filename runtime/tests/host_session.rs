//! The host core (`terminus_runtime::host::Session`) on its own: what each hook gets, the
//! snapshot round trip, the refusals of bad input. The whole conversations are the host suite's
//! (`cargo test -p terminus-cli --test hosts`).

use serde_json::{Value, json};
use terminus_kernel::{ModelErrorKind, Policy};
use terminus_runtime::host::messages::{Summary, checkpoint_message};
use terminus_runtime::host::{Gate, Jump, Offered, Session, Step, VerdictIn, policy_from_json};

fn policy(json: &str) -> Policy {
    policy_from_json(json).expect("a policy")
}

fn task() -> Vec<Value> {
    vec![json!({"role": "user", "content": "Read a.txt"})]
}

fn read_call(id: &str, reply: &str) -> Value {
    json!({"role": "assistant", "id": reply, "content": "",
           "tool_calls": [{"id": id, "type": "function",
                           "function": {"name": "read", "arguments": "{\"path\": \"a.txt\"}"}}]})
}

#[test]
fn a_tool_turn_then_an_answer() {
    let (mut s, step) = Session::start(policy("{}"), &task(), 0).expect("start");
    assert_eq!(step.jump, Some(Jump::Model));
    let mut history = task();
    history.push(read_call("c1", "r1"));
    let step = s
        .reply(&history[1], Some(vec![Offered::named("read")]), 0)
        .expect("reply")
        .expect("new");
    assert_eq!(step.jump, Some(Jump::Tools));
    assert!(s.batch_out());
    assert_eq!(
        s.turn().awaiting,
        vec![("c1".to_owned(), "read".to_owned())]
    );
    // The same reply again (a hook run twice) changes nothing.
    assert_eq!(s.reply(&history[1], None, 0).expect("reply"), None);
    history.push(json!({"role": "tool", "tool_call_id": "c1", "content": "hello"}));
    let step = s.results(&history, 0).expect("results").expect("a batch");
    assert_eq!(step.jump, Some(Jump::Model));
    assert!(!s.batch_out());
    assert_eq!(
        s.results(&history, 0).expect("results"),
        None,
        "no batch out"
    );
    let answer = json!({"role": "assistant", "id": "r2", "content": "It says hello."});
    let step = s.reply(&answer, None, 0).expect("reply").expect("new");
    assert_eq!(step.jump, Some(Jump::End));
    let report = step.report.expect("a report");
    assert_eq!(report["outcome"], "complete");
    assert_eq!(report["result"], "It says hello.");
    assert_eq!(report["tool_calls"], 1);
    assert!(s.ended());
}

/// Restoring the session from its snapshot before every hook (a new process each time) takes
/// the run the same way: the same steps and the same report.
#[test]
fn a_session_restored_before_every_hook_runs_the_same() {
    let run = |restore: bool| -> (Vec<Step>, Value) {
        let p = policy(r#"{"completion_requires": ["read"]}"#);
        let (mut s, first) = Session::start(p, &task(), 0).expect("start");
        let mut steps = vec![first];
        let mut history = task();
        let again = |s: Session| {
            if restore {
                Session::restore(&s.snapshot()).expect("restore")
            } else {
                s
            }
        };
        // A premature answer is nudged, then the tool turn, then the answer.
        s = again(s);
        let early = json!({"role": "assistant", "id": "r0", "content": "Done."});
        steps.push(s.reply(&early, None, 0).expect("reply").expect("new"));
        s = again(s);
        history.push(read_call("c1", "r1"));
        steps.push(s.reply(&history[1], None, 0).expect("reply").expect("new"));
        s = again(s);
        history.push(json!({"role": "tool", "tool_call_id": "c1", "content": "hello"}));
        steps.push(s.results(&history, 0).expect("results").expect("a batch"));
        s = again(s);
        let answer = json!({"role": "assistant", "id": "r2", "content": "It says hello."});
        steps.push(s.reply(&answer, None, 0).expect("reply").expect("new"));
        (steps, s.host().report_json())
    };
    let (live, report) = run(false);
    assert_eq!(live[1].nudges.len(), 1, "the premature answer is nudged");
    assert_eq!(live[1].jump, Some(Jump::Model));
    assert_eq!(report["outcome"], "complete");
    assert_eq!(run(true), (live, report));
}

#[test]
fn the_gate_refuses_what_the_kernel_refused_and_a_missing_tool() {
    let p = policy(r#"{"tool_budgets": {"read": {"warn_at": 1, "block_at": 2}}}"#);
    let (mut s, _) = Session::start(p, &task(), 0).expect("start");
    let two = json!({"role": "assistant", "id": "r1", "content": "",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "read", "arguments": "{\"p\": 1}"}},
            {"id": "b", "type": "function", "function": {"name": "read", "arguments": "{\"p\": 2}"}},
            {"id": "c", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]});
    let step = s.reply(&two, None, 0).expect("reply").expect("new");
    assert_eq!(step.jump, Some(Jump::Tools));
    let turn = s.turn().clone();
    match Session::gate(&turn, "a", "read", true) {
        Gate::Run { warning } => assert!(warning.is_some(), "call 1 of read is warned"),
        other => panic!("{other:?}"),
    }
    match Session::gate(&turn, "b", "read", true) {
        Gate::Refuse(answer) => {
            assert_eq!(answer.tool_call_id, "b");
            assert!(answer.content.contains("read"), "{}", answer.content);
        }
        other => panic!("{other:?}"),
    }
    match Session::gate(&turn, "c", "grep", false) {
        Gate::Refuse(answer) => assert_eq!(answer.error.as_deref(), Some("not_found")),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        Session::gate(&turn, "zz", "grep", false),
        Gate::Run { warning: None },
        "a call the kernel does not await is the framework's"
    );
}

#[test]
fn invalid_arguments_are_answered_and_an_empty_reply_dropped() {
    let (mut s, _) = Session::start(policy("{}"), &task(), 0).expect("start");
    let bad = json!({"role": "assistant", "id": "r1", "content": "",
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "read", "arguments": "{path: a.txt"}}]});
    let step = s.reply(&bad, None, 0).expect("reply").expect("new");
    // Nothing for the framework to run: back to the model with the answer.
    assert_eq!(step.jump, Some(Jump::Model));
    assert_eq!(step.answers.len(), 1);
    assert_eq!(step.answers[0].error.as_deref(), Some("invalid_arguments"));
    // What `terminus run` answers the same call (one function words it for both).
    assert_eq!(
        step.answers[0].content,
        "the arguments must be a JSON object (key must be a string at line 1 column 2); the \
         call was not run. Got: {path: a.txt"
    );
    let mut history = task();
    history.push(bad);
    history.push(
        json!({"role": "tool", "tool_call_id": "c1", "content": step.answers[0].content,
                        "terminus_error": "invalid_arguments"}),
    );
    let step = s.results(&history, 0).expect("results").expect("a batch");
    assert_eq!(step.jump, Some(Jump::Model));
    let empty = json!({"role": "assistant", "id": "r2", "content": "  "});
    let step = s.reply(&empty, None, 0).expect("reply").expect("new");
    assert!(step.drop_reply);
    assert_eq!(step.jump, Some(Jump::Model), "the model is asked again");
    // Without usage the reply is not known to be empty output (rule 6 needs zero usage): a
    // no-op, continued; either way it never enters the conversation.
    let stats = s.host().machine().stats();
    assert_eq!((stats.empty_responses, stats.no_ops), (0, 1), "{stats:?}");
}

#[test]
fn a_verification_pauses_the_step_until_the_verdict() {
    let p = policy(r#"{"verify_completion": true}"#);
    let (mut s, _) = Session::start(p, &task(), 0).expect("start");
    let claim = json!({"role": "assistant", "id": "r1", "content": "All done."});
    let step = s.reply(&claim, None, 0).expect("reply").expect("new");
    let verify = step.verify.expect("a verification");
    assert_eq!(verify.claim, "All done.");
    let other = json!({"role": "assistant", "id": "r9", "content": "x"});
    let err = s.reply(&other, None, 0);
    assert!(
        err.is_err(),
        "an event while the verdict is pending is refused"
    );
    // A session restored while the verdict is pending takes it (the snapshot keeps the machine).
    let mut restored = Session::restore(&s.snapshot()).expect("restore");
    let step = restored
        .verdict(VerdictIn {
            complete: true,
            feedback: None,
            missing: None,
        })
        .expect("the restored session takes the verdict");
    assert_eq!(step.jump, Some(Jump::End));
    let step = s
        .verdict(VerdictIn {
            complete: false,
            feedback: Some("the tests".into()),
            missing: None,
        })
        .expect("verdict");
    assert_eq!(step.jump, Some(Jump::Model));
    assert!(step.verify.is_none());
    assert_eq!(
        s.verdict(VerdictIn {
            complete: true,
            feedback: None,
            missing: None
        })
        .expect_err("none pending")
        .path,
        "verdict"
    );
    // The reply refused while the verdict was pending was not taken: it is fed now.
    let step = s
        .reply(&other, None, 0)
        .expect("reply")
        .expect("not fed before");
    assert!(step.verify.is_some(), "a claim again");
}

#[test]
fn model_errors_are_retried_then_end_the_run() {
    let p = policy(r#"{"max_model_retries": 1}"#);
    let (mut s, _) = Session::start(p, &task(), 0).expect("start");
    let step = s
        .model_error(ModelErrorKind::RateLimited, Some(1500), 0)
        .expect("model_error");
    assert_eq!(step.jump, Some(Jump::Model));
    assert!(
        step.delay_ms >= 1500,
        "the provider's delay: {}",
        step.delay_ms
    );
    let step = s
        .model_error(ModelErrorKind::Server, None, 0)
        .expect("model_error");
    assert_eq!(step.jump, Some(Jump::End));
    assert_eq!(step.report.expect("a report")["reason"], "model_error");
}

#[test]
fn finish_feeds_the_results_out_then_cancels() {
    let (mut s, _) = Session::start(policy("{}"), &task(), 0).expect("start");
    let mut history = task();
    history.push(read_call("c1", "r1"));
    s.reply(&history[1], None, 0).expect("reply");
    history.push(json!({"role": "tool", "tool_call_id": "c1", "content": "hello"}));
    let step = s.finish(&history, 0).expect("finish").expect("live");
    assert_eq!(step.jump, Some(Jump::End));
    let report = step.report.expect("a report");
    assert_eq!(report["reason"], "cancelled");
    assert_eq!(
        report["tool_calls"], 1,
        "the result came back before the cancel"
    );
    assert_eq!(
        s.finish(&history, 0).expect("finish"),
        None,
        "ended already"
    );
}

/// A host whose verifier threw ends the run with `finish`: the claim is not judged, the run is
/// cancelled (the host's error is what the user sees, not "a verification is pending"); the same
/// for a session restored mid-verification.
#[test]
fn finish_while_a_verification_is_pending_cancels_without_a_verdict() {
    let p = policy(r#"{"verify_completion": true}"#);
    let (mut s, _) = Session::start(p, &task(), 0).expect("start");
    let claim = json!({"role": "assistant", "id": "r1", "content": "All done."});
    s.reply(&claim, None, 0).expect("reply").expect("new");
    let mut restored = Session::restore(&s.snapshot()).expect("restore");
    for session in [&mut s, &mut restored] {
        let step = session.finish(&[], 0).expect("finish").expect("live");
        assert_eq!(step.jump, Some(Jump::End));
        let report = step.report.expect("a report");
        assert_eq!(
            (report["outcome"].as_str(), report["reason"].as_str()),
            (Some("aborted"), Some("cancelled"))
        );
        assert_eq!(report["stats"]["verifications"], 0, "no verdict was given");
        assert!(session.verdict_by_rules().is_err(), "nothing pending after");
    }
}

/// The gate answers, for every adapter, a call that must not run: one not of the turn out, and
/// any once the run stopped (with the report's reason); with no turn out a call runs.
#[test]
fn the_gate_refuses_unasked_calls_and_calls_after_the_stop() {
    let refused = |gate: Gate| match gate {
        Gate::Refuse(answer) => answer.content,
        Gate::Run { .. } => "run".to_owned(),
    };
    let (mut s, _) = Session::start(policy(r#"{"max_steps": 2}"#), &task(), 0).expect("start");
    assert_eq!(refused(Session::gate(s.turn(), "c9", "read", true)), "run");
    let mut history = task();
    history.push(read_call("c1", "r1"));
    s.reply(&history[1], None, 0).expect("reply");
    let turn = s.turn();
    assert_eq!(refused(Session::gate(turn, "c1", "read", true)), "run");
    assert_eq!(
        refused(Session::gate(turn, "c9", "read", true)),
        "Not run: the kernel did not ask for this call."
    );
    history.push(json!({"role": "tool", "tool_call_id": "c1", "content": "hello"}));
    s.results(&history, 0).expect("results");
    history.push(read_call("c2", "r2"));
    let step = s.reply(&history[3], None, 0).expect("reply").expect("new");
    assert_eq!(step.report.expect("a report")["reason"], "max_steps");
    assert_eq!(
        refused(Session::gate(s.turn(), "c2", "read", true)),
        "Not run: the run stopped (max_steps).",
        "the same words as the step's answers"
    );
    assert_eq!(
        step.answers.first().map(|a| a.content.as_str()),
        Some("Not run: the run stopped (max_steps).")
    );
}

/// `policy.auto_checkpoints`: the step after the second turn a budget refused asks the host for
/// a checkpoint before the next model call (once, as the policy allows), and the budget counts
/// again from it.
#[test]
fn a_checkpoint_is_asked_of_the_host_before_the_next_model_call() {
    let p = policy(
        r#"{"auto_checkpoints": 1,
            "tool_budgets": {"read": {"block_at": 2, "reset_on": ["post"]}}}"#,
    );
    let (mut s, _) = Session::start(p, &task(), 0).expect("start");
    let mut history = task();
    let mut asked = Vec::new();
    for turn in 1..=4 {
        let (call, reply) = (format!("c{turn}"), format!("r{turn}"));
        history.push(read_call(&call, &reply));
        let last = history.len() - 1;
        s.reply(&history[last], None, 0)
            .expect("reply")
            .expect("new");
        let ran = matches!(
            Session::gate(s.turn(), &call, "read", true),
            Gate::Run { .. }
        );
        let content = if ran { "hello" } else { "refused" };
        history.push(json!({"role": "tool", "tool_call_id": call, "content": content}));
        let step = s.results(&history, 0).expect("results").expect("a batch");
        assert_eq!(step.jump, Some(Jump::Model));
        asked.push((ran, step.checkpoint.is_some()));
        if let Some(checkpoint) = step.checkpoint {
            assert!(!checkpoint.prompt.is_empty() && !checkpoint.note.is_empty());
            let text = checkpoint_message(&checkpoint.note, Summary::Reply("read a.txt once"));
            assert!(text.ends_with("\n\nread a.txt once"), "{text}");
            history.push(json!({"role": "user", "content": text}));
        }
    }
    assert_eq!(
        asked,
        [(true, false), (false, false), (false, true), (true, false)],
        "(ran, checkpoint) per turn: asked after the second refused turn, the read runs again"
    );
    let answer = json!({"role": "assistant", "id": "r5", "content": "It says hello."});
    let report = s
        .reply(&answer, None, 0)
        .expect("reply")
        .expect("new")
        .report;
    let report = report.expect("a report");
    assert_eq!(report["stats"]["auto_checkpoints"], 1, "{report}");
}

#[test]
fn bad_input_is_refused_naming_the_place() {
    let (mut s, _) = Session::start(policy("{}"), &task(), 0).expect("start");
    let nameless = json!({"type": "ai", "id": "r1", "content": "",
                          "tool_calls": [{"id": null, "name": "ls", "args": {}}]});
    let e = s.reply(&nameless, None, 0).expect_err("no id");
    assert_eq!(e.path, "message.tool_calls[0]");
    assert!(e.message.contains("`ls` has no id"), "{e}");
    let e = s.reply(&json!("text"), None, 0).expect_err("not a message");
    assert_eq!(e.path, "message");
    let e = Session::restore("{\"turn\": 3}").expect_err("not a snapshot");
    assert!(e.path.starts_with("session"), "{e}");
    let e = Session::restore("{}").expect_err("not a snapshot");
    assert!(e.to_string().contains("missing field"), "{e}");
}

/// A host without a verifier answers with the rules (the core's, not a copy in each binding),
/// the same after a restore mid-verification.
#[test]
fn the_rules_verdict_is_the_cores() {
    let p = policy(r#"{"verify_completion": true}"#);
    let (mut s, _) = Session::start(p, &task(), 0).expect("start");
    let claim = json!({"role": "assistant", "id": "r1", "content": "All done."});
    let step = s.reply(&claim, None, 0).expect("reply").expect("new");
    assert!(step.verify.expect("a verification").missing.is_empty());
    let mut restored = Session::restore(&s.snapshot()).expect("restore");
    let step = s.verdict_by_rules().expect("the rules' verdict");
    assert_eq!(step.jump, Some(Jump::End), "nothing missing: complete");
    let report = step.report.expect("a report");
    assert_eq!(
        (report["outcome"].as_str(), report["reason"].as_str()),
        (Some("complete"), Some("verified"))
    );
    let again = restored
        .verdict_by_rules()
        .expect("the rules' verdict, restored");
    assert_eq!(again.report, Some(report));
    assert!(s.verdict_by_rules().is_err(), "none pending");
}

/// `pack` keeps a small snapshot as its text and compresses a large one; `unpack` reads both
/// forms back to the same session, and refuses bytes that are neither, naming where they were.
#[test]
fn a_packed_session_unpacks_to_the_same_session() {
    let (mut small, _) = Session::start(policy("{}"), &task(), 0).expect("start");
    // The text form (what `pack` keeps of a snapshot under `PACK_AT` bytes) reads back too.
    let text = small.snapshot().into_bytes();
    let same = Session::unpack(&text, "state.key").expect("unpack text");
    assert_eq!(same.snapshot(), small.snapshot());

    let mut history = task();
    for i in 0..12 {
        let reply = read_call(&format!("c{i}"), &format!("r{i}"));
        small.reply(&reply, None, 0).expect("reply");
        history.push(reply);
        history.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": format!("line {i}")}));
        small
            .results(&history[history.len() - 2..], 0)
            .expect("results");
    }
    let snapshot = small.snapshot();
    let packed = small.pack();
    assert!(snapshot.len() >= terminus_runtime::host::PACK_AT);
    assert!(
        packed.len() * 3 < snapshot.len(),
        "{} of {}",
        packed.len(),
        snapshot.len()
    );
    assert!(packed.first() != Some(&b'{'), "a zlib stream");
    let restored = Session::unpack(&packed, "state.key").expect("unpack");
    assert_eq!(restored.snapshot(), snapshot);

    for bad in [&b"not a snapshot"[..], b"{\"turn\": 1}", b"\xff\xfe", b""] {
        let e = Session::unpack(bad, "state.key").expect_err("not a snapshot");
        assert!(e.to_string().starts_with("state.key"), "{e}");
    }
}

/// A structured answer: a call of one of the framework's output tools is the completion claim
/// (its arguments' JSON the reply's text), not a call to run; other calls stay calls.
#[test]
fn a_call_of_an_output_tool_is_the_replys_text() {
    let (mut s, _) = Session::start(policy("{}"), &task(), 0).expect("start");
    let answer = json!({"type": "ai", "id": "r1", "content": "Here.",
        "tool_calls": [{"id": "o1", "name": "Plan", "args": {"title": "x"}}]});
    let output = ["Plan".to_owned()];
    let step = s
        .answer_reply(&answer, None, &output, 0)
        .expect("reply")
        .expect("new");
    assert_eq!(step.jump, Some(Jump::End), "{step:?}");
    let report = step.report.clone().expect("a report");
    assert_eq!(report["outcome"], "complete");
    assert_eq!(report["result"], "Here.\n{\"title\":\"x\"}");
    assert!(
        step.claims.is_empty(),
        "the accepted answer is the run's: {step:?}"
    );

    // Refused (a required tool not called yet): the claim's answer before the nudge.
    let strict = policy(r#"{"completion_requires": ["write"]}"#);
    let (mut s, _) = Session::start(strict, &task(), 0).expect("start");
    let step = s
        .answer_reply(&answer, None, &output, 0)
        .expect("reply")
        .expect("new");
    assert_eq!(step.jump, Some(Jump::Model), "{step:?}");
    assert_eq!(step.nudges.len(), 1, "{step:?}");
    let claims: Vec<(&str, &str)> = step
        .claims
        .iter()
        .map(|a| (a.tool_call_id.as_str(), a.content.as_str()))
        .collect();
    assert_eq!(claims, [("o1", "Not accepted yet.")]);
    assert!(step.answers.is_empty(), "{step:?}");

    // Refused on the last step the run had: the claim is not run, as the run stopped.
    let last = policy(r#"{"completion_requires": ["write"], "max_steps": 1}"#);
    let (mut s, _) = Session::start(last, &task(), 0).expect("start");
    let step = s
        .answer_reply(&answer, None, &output, 0)
        .expect("reply")
        .expect("new");
    assert_eq!(step.jump, Some(Jump::End), "{step:?}");
    let claims: Vec<&str> = step.claims.iter().map(|a| a.content.as_str()).collect();
    assert_eq!(
        claims,
        ["Not run: the run stopped (max_steps)."],
        "{step:?}"
    );

    let (mut s, _) = Session::start(policy("{}"), &task(), 0).expect("start");
    let both = json!({"type": "ai", "id": "r1", "content": "",
        "tool_calls": [{"id": "o1", "name": "Plan", "args": {"title": "x"}},
                       {"id": "c1", "name": "read", "args": {"path": "a.txt"}}]});
    let step = s
        .answer_reply(&both, None, &output, 0)
        .expect("reply")
        .expect("new");
    assert_eq!(
        step.jump,
        Some(Jump::Tools),
        "the other call runs: {step:?}"
    );
    let awaiting: Vec<&str> = s
        .turn()
        .awaiting
        .iter()
        .map(|(id, _)| id.as_str())
        .collect();
    assert_eq!(awaiting, ["c1"]);
}

/// A verifier's answer as an adapter passes it on: a boolean, a `[complete, feedback]` pair or
/// the verdict object; anything else is refused naming where.
#[test]
fn a_verifiers_answer_is_read_in_each_form() {
    use terminus_runtime::host::verdict_of;
    let read = |v: Value| verdict_of(v, "verdict");
    let pair = read(json!([false, "Write the plan first."])).expect("a pair");
    assert_eq!(
        (pair.complete, pair.feedback.as_deref()),
        (false, Some("Write the plan first."))
    );
    assert!(read(json!(true)).expect("a boolean").complete);
    let full = read(json!({"complete": false, "missing": ["tests"]})).expect("an object");
    assert_eq!(full.missing, Some(vec!["tests".to_owned()]));
    for bad in [json!([true]), json!("yes"), json!([true, 3]), json!(null)] {
        let e = read(bad).expect_err("not an answer");
        assert!(
            e.to_string().starts_with("verdict: expected a boolean"),
            "{e}"
        );
    }
    let e = read(json!({"complete": "yes"})).expect_err("ill-typed");
    assert!(
        e.to_string().starts_with("verdict.complete: invalid type"),
        "{e}"
    );
}

/// A reply whose call is written in Qwen3-Coder's XML, every value as text.
fn xml_call(reply: &str) -> Value {
    let text = "Counting.\n<tool_call>\n<function=count>\n<parameter=n>\n3\n</parameter>\n\
                <parameter=exact>\ntrue\n</parameter>\n<parameter=label>\n7\n</parameter>\n\
                </function>\n</tool_call>";
    json!({"role": "assistant", "id": reply, "content": text})
}

/// The calls a step has the host run for a reply written as text.
fn written_arguments(step: &Step) -> Vec<Value> {
    let written = step.written.as_ref().expect("the written call runs");
    written
        .tool_calls
        .iter()
        .map(|c| c.arguments.clone())
        .collect()
}

#[test]
fn a_written_calls_text_values_are_typed_by_the_offered_tools_schema() {
    let schema = json!({"type": "object", "properties": {
        "n": {"type": "integer"}, "exact": {"type": "boolean"}, "label": {"type": "string"}}});
    let offered = vec![
        Offered {
            name: "count".to_owned(),
            parameters: Some(schema),
        },
        Offered::named("read"),
    ];
    let (mut s, _) = Session::start(policy("{}"), &task(), 0).expect("start");
    let step = s
        .reply(&xml_call("r1"), Some(offered), 0)
        .expect("reply")
        .expect("new");
    assert_eq!(step.jump, Some(Jump::Tools));
    // As a correct engine gives them: the number a number, the flag a boolean, the string a
    // string though it reads as a number.
    assert_eq!(
        written_arguments(&step),
        vec![json!({"n": 3, "exact": true, "label": "7"})]
    );
    assert_eq!(
        step.written.as_ref().map(|w| w.text.as_str()),
        Some("Counting.")
    );

    // Known by name only: the values stay as the format wrote them.
    let (mut s, _) = Session::start(policy("{}"), &task(), 0).expect("start");
    let step = s
        .reply(&xml_call("r1"), Some(vec![Offered::named("count")]), 0)
        .expect("reply")
        .expect("new");
    assert_eq!(
        written_arguments(&step),
        vec![json!({"n": "3", "exact": "true", "label": "7"})]
    );
}

/// A notice with no tool result to ride on (the token warning of a reply with no tool call) is
/// a message of the step, where the kernel gave it, as `terminus run` sends it: never dropped
/// (it was a notice with no `notice_to`, which the LangChain middlewares and Pydantic AI let
/// fall). A notice after tool results rides on the last of them.
#[test]
fn a_notice_with_no_tool_result_is_a_message_and_one_after_results_rides_on_the_last() {
    let (mut s, _) =
        Session::start(policy(r#"{"token_budget": 1000}"#), &task(), 0).expect("start");
    // No tool call and no answer (its reasoning only): called again; its 850 tokens pass 80 %
    // of the budget.
    let idle = json!({"role": "assistant", "id": "r1", "content": "",
                      "reasoning_content": "Let me think about a.txt first.",
                      "usage": {"prompt_tokens": 850, "completion_tokens": 0}});
    let step = s.reply(&idle, None, 0).expect("reply").expect("new");
    assert_eq!(step.jump, Some(Jump::Model));
    assert_eq!(step.notices, Vec::<String>::new());
    assert_eq!(step.notice_to, None);
    let last = step.nudges.last().map(String::as_str).unwrap_or_default();
    assert!(
        last.starts_with("You have used 80 % of this run's token budget (850 of 1000 tokens)"),
        "{:?}",
        step.nudges
    );

    // After a tool turn's results, the 90 % notice rides on the last result, as before.
    let mut history = task();
    history.push(json!({"role": "assistant", "id": "r2", "content": "",
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "read", "arguments": "{\"path\": \"a.txt\"}"}}],
        "usage": {"prompt_tokens": 60, "completion_tokens": 0}}));
    let step = s
        .reply(&history[1], Some(vec![Offered::named("read")]), 0)
        .expect("reply")
        .expect("new");
    assert_eq!(step.jump, Some(Jump::Tools));
    history.push(json!({"role": "tool", "tool_call_id": "c1", "content": "hello"}));
    let step = s.results(&history, 0).expect("results").expect("a batch");
    assert_eq!(step.notice_to.as_deref(), Some("c1"));
    assert!(
        step.notices
            .iter()
            .any(|n| n.starts_with("You have used 90 %")),
        "{step:?}"
    );
    assert!(
        step.nudges.iter().all(|n| !n.contains("token budget")),
        "{step:?}"
    );
}

/// An adapter checks and scales its policy once (`host::checked`), and refuses there what
/// `Session::start` would refuse.
#[test]
fn a_policy_is_checked_and_scaled_once_for_every_run() {
    let scaling = policy(
        r#"{"max_steps": 2, "budget_scale": {"per_unit": {"max_steps": 3}, "max": {"max_steps": 50}}}"#,
    );
    let checked = terminus_runtime::host::checked(scaling.clone(), Some(4)).expect("valid");
    assert_eq!(checked.max_steps, 14);
    let (s, _) = Session::start(checked.clone(), &task(), 0).expect("start");
    assert_eq!(s.host().machine().policy(), &checked, "not scaled again");
    let refused = |p: Policy, scale| {
        terminus_runtime::host::checked(p, scale)
            .map(drop)
            .map_err(|e| e.to_string())
    };
    assert!(refused(policy(r#"{"auto_checkpoints": 1}"#), None).is_ok());
    let nothing = refused(policy("{}"), Some(3));
    assert!(
        nothing
            .as_ref()
            .is_err_and(|e| e.contains("scale: scales nothing")),
        "{nothing:?}"
    );
    assert!(refused(scaling, Some(0)).is_ok());
}
