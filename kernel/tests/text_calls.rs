//! Tool calls a model writes in its text (`terminus_kernel::textcall`): whatever prose comes
//! before it and whichever format it is written in, such a reply never completes the run under
//! `text_tool_calls` `run` or `nudge`; it is a no-op whose nudge names what was written and what
//! is offered, and a recovered call counts in `text_tool_calls`.

use proptest::prelude::*;
use serde_json::json;
use terminus_kernel::textcall::{self, Format, TextToolCalls};
use terminus_kernel::{
    AbortReason, Command, Event, Machine, ModelTurn, NoOpKind, NudgeKind, Outcome, Phase, Policy,
    ToolOutcome, ToolResult,
};

/// A call of `name` with `args` (string values), written in `format`.
fn write(format: Format, name: &str, args: &serde_json::Value) -> String {
    let call = json!({ "name": name, "arguments": args }).to_string();
    let pairs = || {
        args.as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
    };
    match format {
        Format::Json => call,
        Format::Fenced => format!("```json\n{call}\n```"),
        Format::Hermes => format!("<tool_call>\n{call}\n</tool_call>"),
        Format::Mistral => format!("[TOOL_CALLS][{call}]"),
        Format::PythonTag => format!(
            "<|python_tag|>{}",
            json!({ "name": name, "parameters": args })
        ),
        Format::Xml => {
            let params: String = pairs()
                .map(|(k, v)| format!("<parameter={k}>\n{v}\n</parameter>\n"))
                .collect();
            format!("<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>")
        }
        Format::Glm => {
            let params: String = pairs()
                .map(|(k, v)| format!("<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n"))
                .collect();
            format!("<tool_call>{name}\n{params}</tool_call>")
        }
        Format::Kimi => format!(
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.{name}:0\
             <|tool_call_argument_begin|>{args}<|tool_call_end|><|tool_calls_section_end|>"
        ),
        Format::Harmony => format!(
            "<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{args}<|call|>"
        ),
        Format::DeepSeek => format!(
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}\
             <｜tool▁call▁end｜><｜tool▁calls▁end｜>"
        ),
        Format::Gemma => {
            let params: Vec<String> = pairs()
                .map(|(k, v)| format!("{k}:<|\"|>{v}<|\"|>"))
                .collect();
            format!(
                "<|tool_call>call:{name}{{{}}}<tool_call|>",
                params.join(",")
            )
        }
    }
}

fn format() -> impl Strategy<Value = Format> {
    prop_oneof![
        Just(Format::Json),
        Just(Format::Fenced),
        Just(Format::Hermes),
        Just(Format::Mistral),
        Just(Format::PythonTag),
        Just(Format::Xml),
        Just(Format::Glm),
        Just(Format::Kimi),
        Just(Format::Harmony),
        Just(Format::DeepSeek),
        Just(Format::Gemma),
    ]
}

fn drain(m: &mut Machine) -> Vec<Command> {
    std::iter::from_fn(|| m.poll_command()).collect()
}

/// The text of the nudge among the waiting commands.
fn nudge_text(m: &mut Machine) -> String {
    drain(m)
        .into_iter()
        .find_map(|c| match c {
            Command::Nudge(n) => Some(n.text),
            _ => None,
        })
        .expect("a nudge")
}

proptest! {
    /// Prose (anything without the markers) then a written call: found, in its format, with the
    /// prose before it, and never a completion under `run` or `nudge`.
    #[test]
    fn a_reply_that_ends_with_a_written_call_never_completes(
        prose in "[a-zA-Z .,:!?\n]{0,80}",
        format in format(),
        name in "[a-z_]{1,12}",
        path in "[a-z./]{0,12}",
        needs_more_work in prop_oneof![Just(None), Just(Some(false)), Just(Some(true))],
        nudge in any::<bool>(),
    ) {
        let args = json!({ "path": path });
        let text = format!("{prose}\n{}", write(format, &name, &args));
        let written = textcall::find(&text).expect("a written call");
        prop_assert_eq!(written.format, format);
        prop_assert_eq!(written.calls[0].name.as_str(), name.as_str());
        prop_assert_eq!(&written.calls[0].arguments, &args);
        prop_assert_eq!(text[..written.start].trim(), prose.trim());

        let mode = if nudge { TextToolCalls::Nudge } else { TextToolCalls::Run };
        let policy = Policy { text_tool_calls: mode, ..Policy::default() };
        let mut m = Machine::new(policy).expect("valid");
        drain(&mut m);
        let turn = ModelTurn { text, needs_more_work, ..ModelTurn::default() };
        m.handle(Event::ModelTurn(turn));
        prop_assert_eq!(m.phase(), Phase::Nudged);
        prop_assert_eq!(m.outcome(), None);
        prop_assert_eq!(m.result(), None, "an unexecuted call is never the result");
        let nudged = drain(&mut m).into_iter().any(|c| matches!(
            c,
            Command::Nudge(n) if n.kind == NudgeKind::Continue(NoOpKind::TextCall)
                && n.text.contains(&format!("`{name}`"))
        ));
        prop_assert!(nudged);
    }

    /// Text that holds no written call is read as it always was.
    #[test]
    fn prose_and_code_are_not_calls(text in "[a-zA-Z0-9 .,:!?\n(){};=]{0,120}") {
        prop_assert_eq!(textcall::find(&text), None);
    }
}

#[test]
fn off_reads_a_written_call_as_an_answer() {
    let policy = Policy {
        text_tool_calls: TextToolCalls::Off,
        ..Policy::default()
    };
    let mut m = Machine::new(policy).expect("valid");
    drain(&mut m);
    let text = write(Format::Fenced, "read_file", &json!({}));
    m.handle(Event::ModelTurn(ModelTurn {
        text,
        ..ModelTurn::default()
    }));
    assert_eq!(m.phase(), Phase::Complete);
}

#[test]
fn a_recovered_call_runs_and_counts_and_the_nudge_names_the_closest_tools() {
    let mut m = Machine::new(Policy::default()).expect("valid");
    drain(&mut m);
    // The host recovers a call of an offered tool: a tool turn, counted.
    let mut turn = ModelTurn {
        text: write(Format::Hermes, "read_file", &json!({"path": "a"})),
        ..ModelTurn::default()
    };
    let offered = ["read_file", "write_file", "list_directory"];
    textcall::recover(&mut turn, Some(&offered), TextToolCalls::Run, "text-1-");
    m.handle(Event::ModelTurn(turn));
    assert_eq!(m.phase(), Phase::Acting);
    let Some(Command::RunTools(batch)) = m.poll_command() else {
        panic!("run_tools")
    };
    assert_eq!(batch.calls[0].id.as_str(), "text-1-0");
    m.handle(Event::ToolResults(vec![ToolResult {
        call_id: "text-1-0".into(),
        name: "read_file".into(),
        outcome: ToolOutcome::ok(json!("x")),
    }]));
    assert_eq!(m.stats().text_tool_calls, 1);
    assert_eq!(m.stats().tool_calls, 1);
    drain(&mut m);
    // A call of a tool that is not offered: a no-op, and the nudge names the closest tools.
    let mut turn = ModelTurn {
        text: write(Format::Fenced, "read_directory", &json!({"path": "p"})),
        ..ModelTurn::default()
    };
    textcall::recover(&mut turn, Some(&offered), TextToolCalls::Run, "text-2-");
    m.handle(Event::ModelTurn(turn));
    let nudge = nudge_text(&mut m);
    assert!(nudge.contains("`read_directory`"), "{nudge}");
    assert!(
        nudge.contains("closest offered tools: `list_directory`"),
        "{nudge}"
    );
    // A model that only ever writes calls is bounded as no-ops are.
    for _ in 0..2 {
        let turn = ModelTurn {
            text: write(Format::Fenced, "read_directory", &json!({})),
            ..ModelTurn::default()
        };
        m.handle(Event::ModelTurn(turn));
        drain(&mut m);
    }
    assert_eq!(m.outcome(), Some(Outcome::Aborted(AbortReason::NoProgress)));
}

#[test]
fn the_nudge_after_a_refused_claim_names_the_required_call() {
    let policy = Policy {
        completion_requires: vec!["write_file".into()],
        ..Policy::default()
    };
    let mut m = Machine::new(policy).expect("valid");
    drain(&mut m);
    m.handle(Event::ModelTurn(ModelTurn {
        text: "Here is the plan.".into(),
        ..ModelTurn::default()
    }));
    let nudge = nudge_text(&mut m);
    assert!(
        nudge.contains("Still required before the task can finish: call `write_file`"),
        "{nudge}"
    );
    assert!(nudge.contains("Continue: call that tool now"), "{nudge}");
}

#[test]
fn the_loop_notice_names_the_call_still_required() {
    let policy = Policy {
        completion_requires: vec!["write_file".into()],
        ..Policy::default()
    };
    let mut m = Machine::new(policy).expect("valid");
    drain(&mut m);
    let mut notice = None;
    for n in 0..2 {
        let id = format!("c{n}");
        let call = terminus_kernel::ToolCall::new(id.as_str(), "read_file", json!({"path": "a"}));
        m.handle(Event::ModelTurn(ModelTurn {
            tool_calls: vec![call],
            ..ModelTurn::default()
        }));
        drain(&mut m);
        m.handle(Event::ToolResults(vec![ToolResult {
            call_id: id.as_str().into(),
            name: "read_file".into(),
            outcome: ToolOutcome::ok(json!("same")),
        }]));
        for command in drain(&mut m) {
            if let Command::Notice(n) = command {
                notice = Some(n.text().to_owned());
            }
        }
    }
    let notice = notice.expect("the second identical turn is noticed");
    assert!(notice.contains("repeated the one before it"), "{notice}");
    assert!(
        notice.contains("Still required before the task can finish: call `write_file`."),
        "{notice}"
    );
}

/// Every reply of the real model recorded by the eval suite (`spec/eval/recordings`): none is a
/// degenerate repetition (they are short, and some repeat a call: a loop, not a repetition in
/// the text), and every reply that was run as a written call is one `find` reads.
#[test]
fn the_real_models_recorded_replies_read_as_they_should() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/eval/recordings");
    let mut replies = 0;
    let mut written = 0;
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a recording");
            let trial: serde_json::Value = serde_json::from_str(&text).expect("JSON");
            let turns = trial["scenario"]["model"]["turns"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for turn in turns {
                let Some(reply) = turn["text"].as_str() else {
                    continue;
                };
                replies += 1;
                assert_eq!(
                    terminus_kernel::repetition::find(reply),
                    None,
                    "{}: {reply}",
                    path.display()
                );
                written += usize::from(textcall::find(reply).is_some());
            }
        }
    }
    assert!(replies >= 60, "{replies} recorded replies");
    assert!(
        written >= 54,
        "{written} of {replies} replies are written calls"
    );
}
