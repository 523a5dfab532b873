//! The host suite (`spec/hosts/conversations.json`) through the host core: each conversation
//! played as a framework plays it, its messages in every shape the core reads (OpenAI chat,
//! LangChain, the AI SDK, Pydantic AI, OpenAI Agents), gives `terminus run`'s report.
//!
//! The Python and Node adapters run the same suite through their frameworks
//! (`bindings/python/tests/test_hosts.py`, `bindings/node/test/hosts.test.js`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use terminus_runtime::host::VerdictIn;
use terminus_runtime::host::messages::{Summary, checkpoint_message};
use terminus_runtime::host::{Gate, JOURNAL_STEPS, Jump, Offered, Session, Step};
use terminus_scenario::Scenario;

fn spec() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec")
}

fn suite() -> (Vec<String>, BTreeMap<String, String>) {
    let path = spec().join("hosts/conversations.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let names = value["scenarios"]
        .as_array()
        .expect("scenarios")
        .iter()
        .map(|v| v.as_str().expect("a name").to_owned())
        .collect();
    let left: BTreeMap<String, String> =
        serde_json::from_value(value["left_out"].clone()).expect("left_out");
    (names, left)
}

/// Why a scenario is not in the host suite: the first feature a conversation cannot carry.
fn left_out(file: &Value) -> Option<&'static str> {
    let policy = &file["policy"];
    let turns = file["model"]["turns"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if turns
        .iter()
        .any(|t| t.get("needs_more_work").is_some_and(|v| !v.is_null()))
    {
        return Some("needs_more_work");
    }
    if !policy["deadline_ms"].is_null() {
        return Some("deadline_ms");
    }
    let tools = file["tools"].as_object().cloned().unwrap_or_default();
    let cancelled_tool = tools.values().any(|t| {
        t["results"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r.get("cancelled").is_some()))
    });
    if !file["cancel_after_ms"].is_null()
        || cancelled_tool
        || turns.iter().any(|t| t.get("cancelled").is_some())
    {
        return Some("cancel_after_ms");
    }
    if !file["context"].is_null() {
        return Some("context");
    }
    if tools
        .values()
        .any(|t| t["approval"] == true || t["deferred"] == true)
    {
        return Some("approval");
    }
    let job = tools.values().any(|t| {
        t["results"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r.get("job").is_some()))
    });
    if job {
        return Some("job");
    }
    None
}

#[test]
fn the_suite_lists_every_scenario_a_conversation_can_carry() {
    let (names, left) = suite();
    let dir = spec().join("scenarios");
    let mut eligible = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("spec/scenarios") {
        let path = entry.expect("an entry").path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let file: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a name")
            .to_owned();
        match left_out(&file) {
            Some(why) => {
                assert!(
                    left.contains_key(why),
                    "{name}: left out for `{why}`, not in left_out"
                );
                assert!(!names.contains(&name), "{name}: listed, but it has `{why}`");
            }
            None => eligible.push(name),
        }
    }
    eligible.sort();
    let mut listed = names.clone();
    listed.sort();
    assert_eq!(
        listed, eligible,
        "spec/hosts/conversations.json: the scenarios"
    );
    assert!(names.len() >= 25, "{} conversations", names.len());
}

/// The message shapes of the frameworks (`terminus_runtime::host::messages`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    OpenAi,
    LangChain,
    AiSdk,
    Pydantic,
    Agents,
}

const SHAPES: [Shape; 5] = [
    Shape::OpenAi,
    Shape::LangChain,
    Shape::AiSdk,
    Shape::Pydantic,
    Shape::Agents,
];

fn user(shape: Shape, text: &str) -> Value {
    match shape {
        Shape::OpenAi | Shape::AiSdk => json!({"role": "user", "content": text}),
        Shape::LangChain => json!({"type": "human", "content": text}),
        Shape::Pydantic => {
            json!({"kind": "request", "parts": [{"part_kind": "user-prompt", "content": text}]})
        }
        Shape::Agents => json!({"type": "message", "role": "user", "content": text}),
    }
}

fn args_text(args: &Value) -> String {
    match args {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A scripted reply as `shape`'s message, with id `id`.
fn reply(shape: Shape, id: &str, turn: &Value, calls: &[(String, String, Value)]) -> Value {
    let text = turn["text"].as_str().unwrap_or_default();
    let usage = &turn["usage"];
    let finish = turn["finish"].as_str();
    let reasoning = turn["reasoning"] == true;
    match shape {
        Shape::OpenAi => {
            let mut m = json!({"role": "assistant", "id": id, "content": text});
            if !calls.is_empty() {
                m["tool_calls"] = calls
                    .iter()
                    .map(|(cid, name, args)| {
                        json!({"id": cid, "type": "function",
                               "function": {"name": name, "arguments": args_text(args)}})
                    })
                    .collect();
            }
            if let Some(f) = finish {
                m["finish_reason"] = json!(f);
            }
            if usage.is_object() {
                m["usage"] = json!({"prompt_tokens": usage["input_tokens"],
                                    "completion_tokens": usage["output_tokens"]});
            }
            if reasoning {
                m["reasoning_content"] = json!("thinking");
            }
            m
        }
        Shape::LangChain => {
            let valid: Vec<Value> = calls
                .iter()
                .filter(|(_, _, a)| !a.is_string())
                .map(|(cid, name, args)| json!({"id": cid, "name": name, "args": args, "type": "tool_call"}))
                .collect();
            let invalid: Vec<Value> = calls
                .iter()
                .filter(|(_, _, a)| a.is_string())
                .map(|(cid, name, args)| json!({"id": cid, "name": name, "args": args, "error": null}))
                .collect();
            let mut m = json!({"type": "ai", "id": id, "content": text, "tool_calls": valid,
                               "invalid_tool_calls": invalid, "additional_kwargs": {},
                               "response_metadata": {}});
            if let Some(f) = finish {
                m["response_metadata"]["finish_reason"] = json!(f);
            }
            if usage.is_object() {
                m["usage_metadata"] = json!({"input_tokens": usage["input_tokens"],
                                             "output_tokens": usage["output_tokens"],
                                             "total_tokens": 0});
            }
            if reasoning {
                m["additional_kwargs"]["reasoning_content"] = json!("thinking");
            }
            m
        }
        Shape::AiSdk => {
            let mut content = Vec::new();
            if reasoning {
                content.push(json!({"type": "reasoning", "text": "thinking"}));
            }
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            for (cid, name, args) in calls {
                content.push(json!({"type": "tool-call", "toolCallId": cid, "toolName": name, "input": args}));
            }
            let mut m = json!({"role": "assistant", "id": id, "content": content});
            if let Some(f) = finish {
                m["finishReason"] = json!(f.replace('_', "-"));
            }
            if usage.is_object() {
                m["usage"] = json!({"inputTokens": usage["input_tokens"], "outputTokens": usage["output_tokens"]});
            }
            m
        }
        Shape::Pydantic => {
            let mut parts = Vec::new();
            if reasoning {
                parts.push(json!({"part_kind": "thinking", "content": "thinking"}));
            }
            if !text.is_empty() {
                parts.push(json!({"part_kind": "text", "content": text}));
            }
            for (cid, name, args) in calls {
                parts.push(json!({"part_kind": "tool-call", "tool_name": name, "args": args, "tool_call_id": cid}));
            }
            let mut m = json!({"kind": "response", "parts": parts, "id": id});
            if let Some(f) = finish {
                m["finish_reason"] = json!(if f == "tool_calls" { "tool_call" } else { f });
            }
            if usage.is_object() {
                m["usage"] = json!({"input_tokens": usage["input_tokens"], "output_tokens": usage["output_tokens"]});
            }
            m
        }
        Shape::Agents => {
            let mut output = Vec::new();
            let mut content = Vec::new();
            if reasoning {
                content.push(json!({"type": "reasoning", "text": "thinking"}));
            }
            content.push(json!({"type": "output_text", "text": text}));
            output.push(json!({"type": "message", "role": "assistant", "content": content}));
            for (cid, name, args) in calls {
                output.push(
                    json!({"type": "function_call", "call_id": cid, "name": name,
                                   "arguments": args_text(args)}),
                );
            }
            let mut m = json!({"output": output, "response_id": id});
            if usage.is_object() {
                m["usage"] = json!({"input_tokens": usage["input_tokens"], "output_tokens": usage["output_tokens"]});
            }
            if let Some(f) = finish {
                m["output"][0]["finish_reason"] = json!(f);
            }
            m
        }
    }
}

/// A tool's answer (`Ok(text)` or `Err((kind, text))`) as `shape`'s message.
fn tool_message(
    shape: Shape,
    call_id: &str,
    name: &str,
    answer: &Result<String, (String, String)>,
) -> Value {
    let (text, kind) = match answer {
        Ok(text) => (text.as_str(), None),
        Err((kind, text)) => (text.as_str(), Some(kind.as_str())),
    };
    let mut m = match shape {
        Shape::OpenAi => json!({"role": "tool", "tool_call_id": call_id, "content": text}),
        Shape::LangChain => {
            let mut m = json!({"type": "tool", "tool_call_id": call_id, "name": name,
                               "content": text, "status": "success", "response_metadata": {}});
            if let Some(kind) = kind {
                m["status"] = json!("error");
                m["response_metadata"]["terminus_error"] = json!(kind);
            }
            return m;
        }
        Shape::AiSdk => {
            let output = if kind.is_some() {
                json!({"type": "error-text", "value": text})
            } else {
                json!({"type": "text", "value": text})
            };
            let mut part = json!({"type": "tool-result", "toolCallId": call_id, "toolName": name, "output": output});
            if let Some(kind) = kind {
                part["terminus_error"] = json!(kind);
            }
            return json!({"role": "tool", "content": [part]});
        }
        Shape::Pydantic => {
            let mut part = json!({"part_kind": "tool-return", "tool_call_id": call_id, "tool_name": name, "content": text});
            if let Some(kind) = kind {
                part["part_kind"] = json!("retry-prompt");
                part["terminus_error"] = json!(kind);
            }
            return json!({"kind": "request", "parts": [part]});
        }
        Shape::Agents => {
            json!({"type": "function_call_output", "call_id": call_id, "output": text})
        }
    };
    if let Some(kind) = kind {
        m["terminus_error"] = json!(kind);
    }
    m
}

/// A script and how far it has been read (`repeat`: none, last, cycle).
struct Cursor {
    entries: Vec<Value>,
    repeat: String,
    used: usize,
}

impl Cursor {
    fn new(script: &Value, key: &str) -> Cursor {
        Cursor {
            entries: script[key].as_array().cloned().unwrap_or_default(),
            repeat: script["repeat"].as_str().unwrap_or("none").to_owned(),
            used: 0,
        }
    }

    fn next(&mut self, what: &str) -> Value {
        let n = self.entries.len();
        let index = if self.used < n {
            self.used
        } else if self.repeat == "last" && n > 0 {
            n - 1
        } else if self.repeat == "cycle" && n > 0 {
            self.used % n
        } else {
            panic!("{what} script exhausted after {n}");
        };
        self.used += 1;
        self.entries[index].clone()
    }
}

fn json_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The runtime's built-in `write_todos`.
fn write_todos(arguments: &Value) -> Result<String, (String, String)> {
    let todos = arguments.get("todos").and_then(Value::as_array);
    let valid = todos.is_some_and(|todos| {
        todos.iter().all(|t| {
            t["content"].is_string()
                && matches!(
                    t["status"].as_str(),
                    Some("pending" | "in_progress" | "completed" | "cancelled")
                )
        })
    });
    let Some(todos) = todos.filter(|_| valid) else {
        return Err(("invalid_arguments".to_owned(), "bad todos".to_owned()));
    };
    let open = todos
        .iter()
        .filter(|t| matches!(t["status"].as_str(), Some("pending" | "in_progress")))
        .count();
    Ok(format!(
        "Todo list updated: {open} of {} open.",
        todos.len()
    ))
}

/// Plays `file` as a framework host in `shape`: the report the core gives.
fn play(file: &Value, shape: Shape) -> Value {
    let policy = terminus_runtime::host::policy_from_json(&match &file["policy"] {
        Value::Null => "{}".to_owned(),
        policy => policy.to_string(),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    // A framework host gives the policy scaled for the task, as `terminus run --scale` does.
    let policy = match file["scale"].as_u64() {
        Some(units) => policy.scaled(units).unwrap_or_else(|e| panic!("{e}")),
        None => policy,
    };
    let task = file["task"].as_str().expect("a task");
    let mut history = vec![user(shape, task)];
    let (mut session, mut step) = Session::start(policy, &history, 0).expect("start");
    let mut model = Cursor::new(&file["model"], "turns");
    let mut tools: BTreeMap<String, Cursor> = file["tools"]
        .as_object()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|(name, script)| (name, Cursor::new(&script, "results")))
        .collect();
    // The scenario's tools with their schemas, as `terminus run` offers them: a value a format
    // writes as text is typed the same way here.
    let mut offered: Vec<Offered> = file["tools"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, script)| Offered {
            name: name.clone(),
            parameters: script.get("parameters").filter(|p| p.is_object()).cloned(),
        })
        .collect();
    offered.push(Offered::named("write_todos"));
    offered.sort_by(|a, b| a.name.cmp(&b.name));
    let mut verifier = file
        .get("verifier")
        .filter(|v| v.is_object())
        .map(|v| Cursor::new(v, "verdicts"));
    let mut calls_made = 0usize;
    for _ in 0..10_000 {
        history.extend(step.nudges.iter().map(|n| user(shape, n)));
        if let Some(checkpoint) = step.checkpoint.take() {
            // Asked of the model with no tools, not fed to the kernel: the script's next turn.
            let turn = model.next("model");
            let summary = match turn["error"].as_str() {
                Some(kind) => Summary::Failed {
                    kind,
                    message: "scripted",
                },
                None => Summary::Reply(turn["text"].as_str().unwrap_or_default()),
            };
            history.push(user(shape, &checkpoint_message(&checkpoint.note, summary)));
        }
        match step.jump {
            Some(Jump::End) => return step.report.expect("a report at the end"),
            Some(Jump::Model) if session.batch_out() => {
                // Calls answered by the host (invalid arguments): their results go first.
                let s = session
                    .results(&history, 0)
                    .expect("results")
                    .expect("a batch is out");
                step = answer_verifications(&mut session, s, verifier.as_mut());
                continue;
            }
            Some(Jump::Model) => {}
            Some(Jump::Tools) | None => panic!("{shape:?}: a step with nowhere to go: {step:?}"),
        }
        calls_made += 1;
        let turn = model.next("model");
        if let Some(kind) = turn["error"].as_str() {
            let kind = serde_json::from_value(json!(kind)).expect("an error kind");
            let retry = turn["retry_after_ms"].as_u64();
            let s = session.model_error(kind, retry, 0).expect("model_error");
            step = answer_verifications(&mut session, s, verifier.as_mut());
            continue;
        }
        let mut calls: Vec<(String, String, Value)> = turn["tool_calls"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let id = c["id"]
                    .as_str()
                    .map_or_else(|| format!("call-{calls_made}-{i}"), str::to_owned);
                let args = if c["arguments"].is_null() {
                    json!({})
                } else {
                    c["arguments"].clone()
                };
                (id, c["name"].as_str().unwrap_or_default().to_owned(), args)
            })
            .collect();
        let message = reply(shape, &format!("reply-{calls_made}"), &turn, &calls);
        history.push(message.clone());
        let offer = if step.tools {
            offered.clone()
        } else {
            Vec::new()
        };
        let s = session
            .reply(&message, Some(offer), 0)
            .unwrap_or_else(|e| panic!("{shape:?}: {e}"))
            .expect("a new reply is fed");
        let next = answer_verifications(&mut session, s, verifier.as_mut());
        if let Some(written) = &next.written {
            calls = written
                .tool_calls
                .iter()
                .map(|c| (c.id.clone(), c.name.clone(), c.arguments.clone()))
                .collect();
        }
        if next.drop_reply {
            history.pop();
        }
        for a in &next.answers {
            let kind = a.error.clone().unwrap_or_else(|| "failed".to_owned());
            history.push(tool_message(
                shape,
                &a.tool_call_id,
                &a.name,
                &Err((kind, a.content.clone())),
            ));
        }
        if next.jump != Some(Jump::Tools) {
            step = next;
            continue;
        }
        let turn = session.turn().clone();
        for (id, name, args) in &calls {
            if next.answers.iter().any(|a| &a.tool_call_id == id) {
                continue;
            }
            let has = name == "write_todos" || tools.contains_key(name);
            let answer = match Session::gate(&turn, id, name, has) {
                Gate::Refuse(a) => Err((a.error.unwrap_or_else(|| "failed".to_owned()), a.content)),
                Gate::Run { warning } => {
                    let out = if !args.is_object() {
                        Err(("invalid_arguments".to_owned(), "not an object".to_owned()))
                    } else if name == "write_todos" {
                        write_todos(args)
                    } else {
                        let spec = tools.get_mut(name).expect("has").next(name);
                        if let Some(kind) = spec["error"].as_str() {
                            let text = spec["message"]
                                .as_str()
                                .map_or_else(|| format!("scripted {kind} error"), str::to_owned);
                            Err((kind.to_owned(), text))
                        } else {
                            let mut text = json_text(&spec["ok"]);
                            if let Some(n) = spec["filler_tokens"].as_u64() {
                                text.push_str(&" log".repeat(usize::try_from(n).expect("small")));
                            }
                            Ok(text)
                        }
                    };
                    match (out, warning) {
                        (Ok(text), Some(w)) => Ok(format!("{text}\n\n{w}")),
                        (out, _) => out,
                    }
                }
            };
            history.push(tool_message(shape, id, name, &answer));
        }
        let s = session
            .results(&history, 0)
            .expect("results")
            .expect("a batch is out");
        step = answer_verifications(&mut session, s, verifier.as_mut());
    }
    panic!("{shape:?}: no end after 10,000 steps");
}

fn answer_verifications(
    session: &mut Session,
    mut step: Step,
    mut verifier: Option<&mut Cursor>,
) -> Step {
    while let Some(verify) = step.verify.take() {
        let verdict = match verifier.as_deref_mut() {
            Some(v) => {
                let v = v.next("verifier");
                VerdictIn {
                    complete: v["complete"] == true,
                    feedback: None,
                    missing: Some(serde_json::from_value(v["missing"].clone()).unwrap_or_default()),
                }
            }
            None => VerdictIn {
                complete: verify.missing.is_empty(),
                feedback: None,
                missing: Some(verify.missing),
            },
        };
        step = session.verdict(verdict).expect("verdict");
    }
    step
}

/// The report's lists of the journal's last [`JOURNAL_STEPS`] steps only (its counts are the
/// whole run's).
const WINDOWED: [&str; 2] = ["trace", "tool_budget_events"];

/// The report's fields a run decides (not the execution id, nor the runtime's window).
const COMPARED: [&str; 17] = [
    "outcome",
    "reason",
    "rule",
    "steps",
    "model_calls",
    "tool_calls",
    "nudges",
    "verification_failures",
    "no_ops",
    "empty_responses",
    "excluded_tools",
    "entries",
    "result",
    "todos",
    "stats",
    "trace",
    "tool_budget_events",
];

/// Plays `file` (scenario `name`, parsed as `scenario`) in every shape against the report the
/// library's run of it gives.
async fn check_every_shape(name: &str, scenario: &Scenario, file: &Value) {
    let expected = scenario
        .run()
        .execution(name.to_owned())
        .execute()
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let expected = serde_json::to_value(&expected).expect("a report");
    for shape in SHAPES {
        let got = play(file, shape);
        // The host keeps the journal's last steps (a snapshot that does not grow with the run):
        // the windowed lists are the whole run's entries from the first step it kept on, every
        // one of them.
        let step = |r: &Value| r["step"].as_u64().unwrap_or(0);
        let from = got["trace"].get(0).map_or(0, step);
        for key in COMPARED {
            let (got, whole) = (&got[key], &expected[key]);
            if let (Some(got), Some(whole), true) =
                (got.as_array(), whole.as_array(), WINDOWED.contains(&key))
            {
                let kept: Vec<&Value> = whole.iter().filter(|e| step(e) >= from).collect();
                let got: Vec<&Value> = got.iter().collect();
                assert_eq!(got, kept, "{name} {shape:?}: `{key}`");
            } else {
                assert_eq!(got, whole, "{name} in the {shape:?} shape: `{key}`");
            }
        }
        let steps = usize::try_from(JOURNAL_STEPS).expect("small");
        let trace = |r: &Value| r["trace"].as_array().map_or(0, Vec::len);
        assert_eq!(
            trace(&got),
            trace(&expected).min(steps),
            "{name} {shape:?}: the window"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn every_conversation_through_the_core_in_every_shape_gives_terminus_runs_report() {
    let (names, _) = suite();
    for name in names {
        let path = spec().join("scenarios").join(format!("{name}.json"));
        let scenario = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let file: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        check_every_shape(&name, &scenario, &file).await;
    }
}

/// The real model's replies: the runs `terminus eval` recorded of Qwen2.5-Coder-1.5B
/// (`spec/eval/recordings/TASK/CONDITION/N.json`, its written tool calls, its no-op replies and
/// wrong answers as they came), each a scenario, read by the core in every shape as the runtime
/// read them.
#[tokio::test(start_paused = true)]
async fn the_real_models_recorded_replies_through_the_core_give_terminus_runs_report() {
    let root = spec().join("eval/recordings");
    let mut played = 0;
    let mut written = 0;
    for task in std::fs::read_dir(&root).expect("spec/eval/recordings") {
        let task = task.expect("an entry").path();
        if !task.is_dir() {
            continue; // manifest.json
        }
        for condition in std::fs::read_dir(&task).expect("a task's recordings") {
            let condition = condition.expect("an entry").path();
            for run in std::fs::read_dir(&condition).expect("a condition's runs") {
                let path = run.expect("an entry").path();
                let text = std::fs::read_to_string(&path).expect("read");
                let mut recording: Value = serde_json::from_str(&text).expect("json");
                if recording["scenario"].is_null() {
                    continue; // a trial whose run failed: no scenario to play
                }
                // The eval's time limit is the run's deadline; a run it did not stop takes the
                // same path without it (clock readings before a deadline are not steps).
                if recording["report"]["reason"] != "deadline"
                    && let Some(policy) = recording["scenario"]["policy"].as_object_mut()
                {
                    policy.remove("deadline_ms");
                }
                let file = &recording["scenario"];
                let name = path.display().to_string();
                let scenario =
                    Scenario::parse(&file.to_string()).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(left_out(file).is_none(), "{name}: {:?}", left_out(file));
                check_every_shape(&name, &scenario, file).await;
                written += recording["report"]["text_tool_calls"].as_u64().unwrap_or(0);
                played += 1;
            }
        }
    }
    assert!(played >= 30, "{played} recordings");
    assert!(
        written > 0,
        "the recordings hold calls the model wrote in its text"
    );
}

/// The thirty replies the real model's `complete` runs ended on (`spec/eval/non-answers`: the
/// scenarios of `terminus eval`'s kernel trials, recorded with Qwen2.5-Coder-1.5B): the nine of
/// the first recordings, before the kernel knew what a final answer is (apologies asking for more
/// information, paraphrases of the continuation guidance), and the seven the second recordings
/// still ended on ("Understood. No tool call.", "None", "No progress", a kernel sentence with a
/// request for a task, a bare apology with one, "Please select the tool...", a closing), and the
/// four the `wait` task's recordings ended on while it was built ("no_tool_call", "You should not
/// response with the tool response...", "Okay, I'm ready to continue...", "You can continue as
/// you wish."), and the three the `wait` and `poll` tasks' recordings ended on under the reworded
/// guidance ("Thank you for letting me know. I'll do my best...", a plan of the steps with "the
/// final answer will be provided", "As a language model, ... I cannot fetch the quarterly
/// report"), and the three the next recordings ended on ("You're welcome. I'll do my best...",
/// "The task is currently in a loop... The run should be stopped...", "I apologize, but I don't
/// have the context to understand what part of the task you are referring to..."), and the one
/// after them ("The task is incomplete and requires further steps or inputs to proceed."), and
/// "Thank you for informing me. I will now proceed to fetch the quarterly report...", and "To
/// proceed, you can use the following tools:" with a list of them, and
/// `<tool_response>not ready, try again</tool_response>` (a tool's result the model wrote
/// itself), each taken for the result. Under `autonomous` (a run nobody answers), with the model giving the same reply again
/// and again, none is accepted: the run ends `no_progress` with the replies counted as
/// non-answers and none of them as its result, through `terminus run` and through the host core
/// in every shape.
#[tokio::test(start_paused = true)]
async fn the_recorded_non_answers_are_refused_in_every_host() {
    let root = spec().join("eval/non-answers");
    let mut refused = 0;
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("spec/eval/non-answers")
        .map(|e| e.expect("an entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.display().to_string();
        let mut file: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        let last = file["model"]["turns"]
            .as_array()
            .and_then(|t| t.last())
            .and_then(|t| t["text"].as_str())
            .expect("the run's last reply")
            .to_owned();
        file["policy"]["autonomous"] = json!(true);
        file["model"]["repeat"] = json!("last");
        let scenario = Scenario::parse(&file.to_string()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let report = scenario.run().execute().await.expect("a report");
        assert!(
            !report.outcome.is_complete(),
            "{name}: ended {:?} on {last:?}",
            report.outcome
        );
        assert_eq!(report.outcome.reason_str(), "no_progress", "{name}");
        assert!(report.stats.non_answers >= 1, "{name}: {report:?}");
        assert_ne!(report.result.as_deref(), Some(last.as_str()), "{name}");
        check_every_shape(&name, &scenario, &file).await;
        refused += 1;
    }
    assert_eq!(refused, 30, "the thirty recorded non-answers");
}
