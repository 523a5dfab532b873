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

/// The notice of the first repeat of `tool`'s identical turn, under a policy requiring
/// `write_file`.
fn loop_notice(tool: &str) -> String {
    let policy = Policy {
        completion_requires: vec!["write_file".into()],
        ..Policy::default()
    };
    let mut m = Machine::new(policy).expect("valid");
    drain(&mut m);
    let mut notice = None;
    for n in 0..2 {
        let id = format!("c{n}");
        let call = terminus_kernel::ToolCall::new(id.as_str(), tool, json!({"path": "a"}));
        m.handle(Event::ModelTurn(ModelTurn {
            tool_calls: vec![call],
            ..ModelTurn::default()
        }));
        drain(&mut m);
        m.handle(Event::ToolResults(vec![ToolResult {
            call_id: id.as_str().into(),
            name: tool.into(),
            outcome: ToolOutcome::ok(json!("same")),
        }]));
        for command in drain(&mut m) {
            if let Command::Notice(n) = command {
                notice = Some(n.text().to_owned());
            }
        }
    }
    notice.expect("the second identical turn is noticed")
}

#[test]
fn the_loop_notice_names_the_call_still_required() {
    let notice = loop_notice("read_file");
    assert!(notice.contains("repeated the one before it"), "{notice}");
    assert!(
        notice.contains("Still required before the task can finish: call `write_file`."),
        "{notice}"
    );
    assert!(!notice.contains("Every call the task requires"), "{notice}");
}

/// The eval's `wait` task: the report's number written, then written again and again. With
/// nothing left to call, the way out the notice names is the answer.
#[test]
fn the_loop_notice_says_when_nothing_required_is_left() {
    let notice = loop_notice("write_file");
    assert!(!notice.contains("Still required"), "{notice}");
    assert!(
        notice.ends_with(
            "Every call the task requires has been made: if nothing is left to do, write your \
             final answer now: its result, in your own words."
        ),
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

/// What a family's written reply must read as.
enum Reads {
    /// These calls, with exactly these arguments once typed by the tools' schemas.
    Calls(Vec<(&'static str, serde_json::Value)>),
    /// A call begun and cut off or unreadable: a no-op, nothing runs.
    Broken,
    /// Prose (an explanation of the format): an answer.
    Answer,
}

/// The cases of every family (`docs/design.md`, "Written tool calls, family by family"): a
/// single call, parallel calls, text before, reasoning before, empty arguments, a marker inside
/// an argument, truncated, malformed, and prose about the format.
fn family_cases() -> Vec<(Format, &'static str, String, Reads)> {
    use Reads::*;
    let paris = || json!({"city": "Paris", "days": 3});
    let rome = || json!({"city": "Rome", "days": 1});
    let marker_content =
        |m: &str| json!({"path": "notes.md", "content": format!("write {m} here")});
    let think = "<think>Maybe <tool_call> or [TOOL_CALLS]? I will call get_weather.</think>\n";
    let mut cases = Vec::new();
    let mut add = |f: Format, case: &'static str, text: String, reads: Reads| {
        cases.push((f, case, text, reads));
    };
    // Hermes / Qwen2.5 / Qwen3: JSON in <tool_call> tags.
    let h = |name: &str, args: &serde_json::Value| {
        format!(
            "<tool_call>\n{}\n</tool_call>",
            json!({"name": name, "arguments": args})
        )
    };
    add(
        Format::Hermes,
        "single",
        h("get_weather", &paris()),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Hermes,
        "parallel",
        format!(
            "{}\n{}",
            h("get_weather", &paris()),
            h("get_weather", &rome())
        ),
        Calls(vec![("get_weather", paris()), ("get_weather", rome())]),
    );
    add(
        Format::Hermes,
        "text before",
        format!("Let me check.\n{}", h("get_weather", &paris())),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Hermes,
        "reasoning before",
        format!("{think}{}", h("get_weather", &paris())),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Hermes,
        "empty arguments",
        h("list_files", &json!({})),
        Calls(vec![("list_files", json!({}))]),
    );
    add(
        Format::Hermes,
        "marker inside an argument",
        h(
            "write_file",
            &marker_content("</tool_call> and <tool_call>"),
        ),
        Calls(vec![(
            "write_file",
            marker_content("</tool_call> and <tool_call>"),
        )]),
    );
    add(
        Format::Hermes,
        "truncated",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa".into(),
        Broken,
    );
    add(
        Format::Hermes,
        "malformed",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {city: Paris}}\n</tool_call>"
            .into(),
        Broken,
    );
    add(
        Format::Hermes,
        "prose about the format",
        "Qwen writes a call as <tool_call>{...}</tool_call> and the server reads it.".into(),
        Answer,
    );
    // Qwen3-Coder: XML parameters, typed by the schema.
    let x = |name: &str, params: &[(&str, &str)]| {
        let p: String = params
            .iter()
            .map(|(k, v)| format!("<parameter={k}>\n{v}\n</parameter>\n"))
            .collect();
        format!("<tool_call>\n<function={name}>\n{p}</function>\n</tool_call>")
    };
    let xp = x("get_weather", &[("city", "Paris"), ("days", "3")]);
    add(
        Format::Xml,
        "single",
        xp.clone(),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Xml,
        "parallel",
        format!(
            "{xp}\n{}",
            x("get_weather", &[("city", "Rome"), ("days", "1")])
        ),
        Calls(vec![("get_weather", paris()), ("get_weather", rome())]),
    );
    add(
        Format::Xml,
        "text before",
        format!("I'll look it up.\n\n{xp}"),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Xml,
        "reasoning before",
        format!("{think}{xp}"),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Xml,
        "empty arguments",
        x("list_files", &[]),
        Calls(vec![("list_files", json!({}))]),
    );
    add(
        Format::Xml,
        "marker inside an argument",
        x(
            "write_file",
            &[
                ("path", "notes.md"),
                ("content", "write <tool_call><function=x> here"),
            ],
        ),
        Calls(vec![(
            "write_file",
            marker_content("<tool_call><function=x>"),
        )]),
    );
    add(
        Format::Xml,
        "truncated",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar".into(),
        Broken,
    );
    add(
        Format::Xml,
        "malformed",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>"
            .into(),
        Broken,
    );
    add(
        Format::Xml,
        "prose about the format",
        "Qwen3-Coder writes <function=NAME> with its parameters, then </function>. Nothing else."
            .into(),
        Answer,
    );
    // GLM 4.5+: arg_key / arg_value pairs.
    let g = |name: &str, params: &[(&str, &str)]| {
        let p: String = params
            .iter()
            .map(|(k, v)| format!("<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n"))
            .collect();
        format!("<tool_call>{name}\n{p}</tool_call>")
    };
    let gp = g("get_weather", &[("city", "Paris"), ("days", "3")]);
    add(
        Format::Glm,
        "single",
        gp.clone(),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Glm,
        "parallel",
        format!(
            "{gp}{}",
            g("get_weather", &[("city", "Rome"), ("days", "1")])
        ),
        Calls(vec![("get_weather", paris()), ("get_weather", rome())]),
    );
    add(
        Format::Glm,
        "text before",
        format!("Checking.\n{gp}"),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Glm,
        "reasoning before",
        format!("{think}{gp}"),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Glm,
        "empty arguments",
        "<tool_call>list_files\n</tool_call>".into(),
        Calls(vec![("list_files", json!({}))]),
    );
    add(
        Format::Glm,
        "marker inside an argument",
        g(
            "write_file",
            &[("path", "notes.md"), ("content", "write <tool_call> here")],
        ),
        Calls(vec![("write_file", marker_content("<tool_call>"))]),
    );
    add(
        Format::Glm,
        "truncated",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_val".into(),
        Broken,
    );
    add(
        Format::Glm,
        "malformed",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n</tool_call>".into(),
        Broken,
    );
    add(Format::Glm, "prose about the format", "GLM wraps a call in <tool_call>NAME<arg_key>K</arg_key>...</tool_call> tags, as its template says.".into(), Answer);
    // Mistral v11+: [TOOL_CALLS]name[ARGS]{...}.
    let m = |name: &str, args: &serde_json::Value| format!("[TOOL_CALLS]{name}[ARGS]{args}");
    add(
        Format::Mistral,
        "single",
        m("get_weather", &paris()),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Mistral,
        "parallel",
        format!(
            "{}{}",
            m("get_weather", &paris()),
            m("get_weather", &rome())
        ),
        Calls(vec![("get_weather", paris()), ("get_weather", rome())]),
    );
    add(
        Format::Mistral,
        "with a call id",
        format!("[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{}", paris()),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Mistral,
        "text before",
        format!("Sure.{}", m("get_weather", &paris())),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Mistral,
        "reasoning before",
        format!(
            "[THINK]I could write [TOOL_CALLS] now.[/THINK]{}",
            m("get_weather", &paris())
        ),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Mistral,
        "empty arguments",
        m("list_files", &json!({})),
        Calls(vec![("list_files", json!({}))]),
    );
    add(
        Format::Mistral,
        "marker inside an argument",
        m("write_file", &marker_content("[TOOL_CALLS]x[ARGS]{}")),
        Calls(vec![(
            "write_file",
            marker_content("[TOOL_CALLS]x[ARGS]{}"),
        )]),
    );
    add(
        Format::Mistral,
        "truncated",
        "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Par".into(),
        Broken,
    );
    add(
        Format::Mistral,
        "malformed",
        "[TOOL_CALLS]get_weather[ARGS]{city: Paris}".into(),
        Broken,
    );
    add(
        Format::Mistral,
        "prose about the format",
        "Mistral models write [TOOL_CALLS]name[ARGS]{...} when they call a tool.".into(),
        Answer,
    );
    // Kimi K2.
    let k = |calls: &[(&str, serde_json::Value)]| {
        let c: String = calls.iter().enumerate().map(|(i, (n, a))| format!("<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{a}<|tool_call_end|>")).collect();
        format!("<|tool_calls_section_begin|>{c}<|tool_calls_section_end|>")
    };
    add(
        Format::Kimi,
        "single",
        k(&[("get_weather", paris())]),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Kimi,
        "parallel",
        k(&[("get_weather", paris()), ("get_weather", rome())]),
        Calls(vec![("get_weather", paris()), ("get_weather", rome())]),
    );
    add(
        Format::Kimi,
        "text before",
        format!("Looking it up.{}", k(&[("get_weather", paris())])),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Kimi,
        "reasoning before",
        format!("{think}{}", k(&[("get_weather", paris())])),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Kimi,
        "empty arguments",
        k(&[("list_files", json!({}))]),
        Calls(vec![("list_files", json!({}))]),
    );
    add(
        Format::Kimi,
        "marker inside an argument",
        k(&[("write_file", marker_content("<|tool_call_end|>"))]),
        Calls(vec![("write_file", marker_content("<|tool_call_end|>"))]),
    );
    add(Format::Kimi, "truncated", "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Pa".into(), Broken);
    add(Format::Kimi, "malformed", "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{city}<|tool_call_end|><|tool_calls_section_end|>".into(), Broken);
    add(Format::Kimi, "prose about the format", "Kimi opens its calls with <|tool_calls_section_begin|> and closes them with another token.".into(), Answer);
    // gpt-oss Harmony.
    let o = |name: &str, args: &serde_json::Value| {
        format!(
            "<|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{args}<|call|>"
        )
    };
    add(
        Format::Harmony,
        "single",
        format!(
            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}<|call|>",
            paris()
        ),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Harmony,
        "recipient in the role header",
        format!(
            "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{}<|call|>",
            paris()
        ),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Harmony,
        "parallel",
        format!(
            "{}{}",
            o("get_weather", &paris()),
            o("get_weather", &rome())
        ),
        Calls(vec![("get_weather", paris()), ("get_weather", rome())]),
    );
    add(
        Format::Harmony,
        "text before",
        format!("Checking the weather.\n{}", o("get_weather", &paris())),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Harmony,
        "reasoning before",
        format!(
            "<|channel|>analysis<|message|>Need the weather; to=functions is how.<|end|>{}",
            o("get_weather", &paris())
        ),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Harmony,
        "empty arguments",
        o("list_files", &json!({})),
        Calls(vec![("list_files", json!({}))]),
    );
    add(
        Format::Harmony,
        "marker inside an argument",
        o("write_file", &marker_content("<|call|>")),
        Calls(vec![("write_file", marker_content("<|call|>"))]),
    );
    add(Format::Harmony, "truncated", "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Pa".into(), Broken);
    add(Format::Harmony, "malformed", "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{city: Paris}<|call|>".into(), Broken);
    add(Format::Harmony, "prose about the format", "gpt-oss addresses a tool in a header like <|channel|>commentary to=functions.NAME<|message|>{...}<|call|>.".into(), Answer);
    add(Format::Harmony, "a final answer", "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>It is sunny in Paris.".into(), Answer);
    // DeepSeek V3/R1 (fenced arguments) and V3.1.
    let d3 = |name: &str, args: &serde_json::Value| {
        format!(
            "<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{args}\n```<｜tool▁call▁end｜>"
        )
    };
    let d31 = |name: &str, args: &serde_json::Value| {
        format!("<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>")
    };
    let ds = |calls: String| format!("<｜tool▁calls▁begin｜>{calls}<｜tool▁calls▁end｜>");
    add(
        Format::DeepSeek,
        "single (V3)",
        ds(d3("get_weather", &paris())),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::DeepSeek,
        "single (V3.1)",
        ds(d31("get_weather", &paris())),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::DeepSeek,
        "parallel",
        ds(format!(
            "{}{}",
            d3("get_weather", &paris()),
            d3("get_weather", &rome())
        )),
        Calls(vec![("get_weather", paris()), ("get_weather", rome())]),
    );
    add(
        Format::DeepSeek,
        "text before",
        format!("Let me see.{}", ds(d31("get_weather", &paris()))),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::DeepSeek,
        "reasoning before (R1)",
        format!("{think}\n{}", ds(d3("get_weather", &paris()))),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::DeepSeek,
        "empty arguments",
        ds(d31("list_files", &json!({}))),
        Calls(vec![("list_files", json!({}))]),
    );
    add(
        Format::DeepSeek,
        "marker inside an argument",
        ds(d31("write_file", &marker_content("<｜tool▁call▁end｜>"))),
        Calls(vec![("write_file", marker_content("<｜tool▁call▁end｜>"))]),
    );
    add(
        Format::DeepSeek,
        "truncated",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Pa"
            .into(),
        Broken,
    );
    add(Format::DeepSeek, "malformed", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{city}<｜tool▁call▁end｜><｜tool▁calls▁end｜>".into(), Broken);
    add(
        Format::DeepSeek,
        "prose about the format",
        "DeepSeek begins its calls with <｜tool▁calls▁begin｜> and ends them with another token."
            .into(),
        Answer,
    );
    // Gemma 4: its own quoting.
    let q = "<|\"|>";
    let gm = |name: &str, body: &str| format!("<|tool_call>call:{name}{{{body}}}<tool_call|>");
    let gparis = gm("get_weather", &format!("city:{q}Paris{q},days:3"));
    add(
        Format::Gemma,
        "single",
        gparis.clone(),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Gemma,
        "parallel",
        format!(
            "{gparis}{}",
            gm("get_weather", &format!("city:{q}Rome{q},days:1"))
        ),
        Calls(vec![("get_weather", paris()), ("get_weather", rome())]),
    );
    add(
        Format::Gemma,
        "text before",
        format!("One moment.\n{gparis}"),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Gemma,
        "reasoning before",
        format!("{think}{gparis}"),
        Calls(vec![("get_weather", paris())]),
    );
    add(
        Format::Gemma,
        "empty arguments",
        gm("list_files", ""),
        Calls(vec![("list_files", json!({}))]),
    );
    add(
        Format::Gemma,
        "nested values",
        gm(
            "search",
            &format!("filter:{{tags:[{q}a{q},{q}b{q}],exact:true}},limit:5"),
        ),
        Calls(vec![(
            "search",
            json!({"filter": {"tags": ["a", "b"], "exact": true}, "limit": 5}),
        )]),
    );
    add(
        Format::Gemma,
        "marker inside an argument",
        gm(
            "write_file",
            &format!("path:{q}notes.md{q},content:{q}write <tool_call|> here{q}"),
        ),
        Calls(vec![("write_file", marker_content("<tool_call|>"))]),
    );
    add(
        Format::Gemma,
        "truncated",
        format!("<|tool_call>call:get_weather{{city:{q}Par"),
        Broken,
    );
    add(
        Format::Gemma,
        "malformed",
        "<|tool_call>call:get_weather{city Paris}<tool_call|>".into(),
        Broken,
    );
    add(
        Format::Gemma,
        "prose about the format",
        "Gemma writes <|tool_call>call:NAME{...}<tool_call|> for its calls.".into(),
        Answer,
    );
    cases
}

/// The tools the family cases are offered, with their schemas.
fn family_tools() -> Vec<(&'static str, serde_json::Value)> {
    let object = |props: serde_json::Value| json!({"type": "object", "properties": props});
    vec![
        (
            "get_weather",
            object(json!({"city": {"type": "string"}, "days": {"type": "integer"}})),
        ),
        ("list_files", object(json!({}))),
        (
            "write_file",
            object(json!({"path": {"type": "string"}, "content": {"type": "string"}})),
        ),
        (
            "search",
            object(json!({"filter": {"type": "object"}, "limit": {"type": "integer"}})),
        ),
    ]
}

#[test]
fn every_familys_calls_are_recognised_run_exactly_and_never_an_answer() {
    let tools = family_tools();
    let names: Vec<&str> = tools.iter().map(|(n, _)| *n).collect();
    let schemas: Vec<(&str, &serde_json::Value)> = tools.iter().map(|(n, s)| (*n, s)).collect();
    let cases = family_cases();
    assert!(
        cases.len() >= 72,
        "{} cases: nine or more for each of eight families",
        cases.len()
    );
    for (format, case, text, reads) in cases {
        let label = format!("{} / {case}: {text:?}", format.as_str());
        let found = textcall::find(&text);
        // Under `run`: what the host makes of the turn.
        let mut turn = ModelTurn {
            text: text.clone(),
            ..ModelTurn::default()
        };
        let recovery =
            textcall::recover_typed(&mut turn, Some(&names), &schemas, TextToolCalls::Run, "t-");
        match &reads {
            Reads::Calls(calls) => {
                let found = found.unwrap_or_else(|| panic!("{label}: not found"));
                assert!(!found.broken, "{label}");
                assert_eq!(found.format, format, "{label}");
                assert!(
                    matches!(recovery, Some(textcall::Recovery::Ran { format: f, .. }) if f == format),
                    "{label}: {recovery:?}"
                );
                let ran: Vec<(String, serde_json::Value)> = turn
                    .tool_calls
                    .iter()
                    .map(|c| (c.name.to_string(), c.arguments.value().clone()))
                    .collect();
                let want: Vec<(String, serde_json::Value)> = calls
                    .iter()
                    .map(|(n, a)| ((*n).to_owned(), a.clone()))
                    .collect();
                assert_eq!(ran, want, "{label}");
                // The turn keeps only the text before the calls.
                assert_eq!(turn.text, text[..found.start].trim_end(), "{label}");
                assert!(
                    !case.starts_with("text before") || found.start > 0,
                    "{label}"
                );
            }
            Reads::Broken => {
                let found = found.unwrap_or_else(|| panic!("{label}: not found"));
                assert!(found.broken, "{label}");
                assert!(
                    matches!(recovery, Some(textcall::Recovery::Nudged { .. })),
                    "{label}"
                );
                assert!(turn.tool_calls.is_empty(), "{label}: nothing runs");
            }
            Reads::Answer => {
                assert_eq!(found, None, "{label}");
                assert_eq!(recovery, None, "{label}");
            }
        }
        // Never an answer under `run` (as the host recovered it) or `nudge`, unless it is prose.
        for mode in [TextToolCalls::Run, TextToolCalls::Nudge] {
            let mut m = Machine::new(Policy {
                text_tool_calls: mode,
                ..Policy::default()
            })
            .expect("valid");
            drain(&mut m);
            let mut turn = ModelTurn {
                text: text.clone(),
                ..ModelTurn::default()
            };
            textcall::recover_typed(&mut turn, Some(&names), &schemas, mode, "t-");
            m.handle(Event::ModelTurn(turn));
            let completed = m
                .outcome()
                .is_some_and(|o| matches!(o, Outcome::Complete { .. }));
            match reads {
                Reads::Answer => assert!(completed, "{label} under {mode:?}: prose is an answer"),
                _ => {
                    assert!(!completed, "{label} under {mode:?}");
                    assert_ne!(m.result(), Some(text.as_str()), "{label} under {mode:?}");
                }
            }
        }
    }
}

#[test]
fn a_broken_call_is_nudged_with_its_note() {
    let mut m = Machine::new(Policy::default()).expect("valid");
    drain(&mut m);
    m.handle(Event::ModelTurn(ModelTurn {
        text: "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Par".into(),
        ..ModelTurn::default()
    }));
    let text = nudge_text(&mut m);
    assert!(text.contains("`get_weather`"), "{text}");
    assert!(text.contains("cut off or malformed"), "{text}");
}

#[test]
fn a_call_followed_only_by_a_courteous_closing_is_the_call() {
    // Qwen2.5-Coder-1.5B's replies on the eval's verifier task (whose task asks every reply to
    // end with the closing), as received.
    for text in [
        "```json\n{\n  \"name\": \"write_file\",\n  \"arguments\": {\n    \"path\": \"answer.txt\",\n    \"content\": \"51\"\n  }\n}\n```\n\nLet me know if you need anything else!",
        "{{\"name\": \"write_file\", \"arguments\": {\"content\": \"17 * 3 = 51\", \"path\": \"answer.txt\"}}}}\nLet me know if you need anything else!",
    ] {
        let found = textcall::find(text).unwrap_or_else(|| panic!("{text}"));
        assert_eq!(found.names(), ["write_file"], "{text}");
        let mut turn = ModelTurn {
            text: text.into(),
            ..ModelTurn::default()
        };
        textcall::recover(&mut turn, Some(&["write_file"]), TextToolCalls::Run, "t-");
        assert_eq!(turn.tool_calls.len(), 1);
        assert_eq!(turn.text, text[..found.start].trim_end());
    }
    // Anything more than courtesy after the call leaves the reply an answer.
    let text = "{\"name\": \"write_file\", \"arguments\": {\"path\": \"a\"}}\nThe result is 51.";
    assert_eq!(textcall::find(text), None);
    let text = "{\"name\": \"write_file\", \"arguments\": {\"path\": \"a\"}}\nPlease provide more details.";
    assert_eq!(textcall::find(text), None);
}
