//! Layers: one `Layer` sees every model, tool and verifier call of a run, in order, and can
//! change an answer; layers stack; a layer's wrong answer is a fault, not a panic.

mod common;

use common::{Echo, Recorder, Script, calls, done};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use terminus_kernel::{CompleteReason, ModelTurn, Outcome, Policy, ToolOutcome};
use terminus_runtime::layer::{self, BoxFuture};
use terminus_runtime::{
    Answer, Call, Layer, Model, ModelInfo, ModelRequest, Next, Purpose, Role, Run, RunError, Site,
    Tool, ToolSet, Verification, Verifier,
};

/// Logs every call when it is made and every answer when it arrives, as lines.
#[derive(Default)]
struct Log {
    lines: Mutex<Vec<String>>,
}

impl Log {
    fn push(&self, line: String) {
        self.lines.lock().expect("not poisoned").push(line);
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("not poisoned").clone()
    }
}

impl Layer for Log {
    fn around<'a>(&'a self, call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Answer> {
        let what = match &call {
            Call::Model(request) => match request.purpose {
                Purpose::Turn { call, .. } => format!("model {call}"),
                Purpose::Verify => "model verify".to_owned(),
                Purpose::Checkpoint { .. } => "model checkpoint".to_owned(),
                Purpose::Plan { attempt } => format!("model plan {attempt}"),
            },
            Call::Tool {
                name, arguments, ..
            } => format!("tool {name} {arguments}"),
            Call::Verify(v) => format!("verify {:?}", v.claim),
        };
        self.push(format!("call {what}"));
        let answer = next.run(call);
        Box::pin(async move {
            let answer = answer.await;
            let said = match &answer {
                Answer::Model(Ok(turn)) => format!("{} tool calls", turn.tool_calls.len()),
                Answer::Tool(Ok(ToolOutcome::Ok(v))) => v.value().to_string(),
                Answer::Verdict(Ok(v)) => format!("complete {}", v.complete),
                other => format!("{other:?}"),
            };
            self.push(format!("answer {what}: {said}"));
            answer
        })
    }
}

/// Answers every call of `echo` whose arguments hold `"secret"` with `[redacted]`, without
/// calling the tool.
struct Redact;

impl Layer for Redact {
    fn around<'a>(&'a self, call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Answer> {
        if let Call::Tool {
            name: "echo",
            arguments,
            ..
        } = &call
            && arguments.to_string().contains("secret")
        {
            let answer = Answer::Tool(Ok(ToolOutcome::ok(Value::from("[redacted]"))));
            return Box::pin(async move { answer });
        }
        next.run(call)
    }
}

fn verifying() -> Policy {
    Policy {
        verify_completion: true,
        ..Policy::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_layer_sees_every_call_in_order_and_can_replace_an_answer() {
    let model = Script::new([
        calls(&[
            ("slow", json!({ "said": "first" })),
            ("echo", json!({ "said": "secret" })),
            ("echo", json!({ "said": "plain" })),
        ]),
        done("All done."),
    ]);
    let echo = Echo::new(Duration::ZERO);
    let verifier = Recorder::new([true]);
    let log = Arc::new(Log::default());
    let report = Run::new("Echo three things", verifying(), model.clone())
        .tools(
            ToolSet::new()
                .with("echo", echo.clone())
                .with("slow", Echo::new(Duration::from_millis(50))),
        )
        .verifier(verifier.clone())
        // The redaction is inside, the log outside: the log sees the redacted answer.
        .adapters(|mut adapters| {
            adapters.layer(Arc::new(Redact));
            adapters.layer(log.clone());
        })
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Verified));

    // Each call when the runtime made it (the batch in the model's order), each answer as it
    // came (the slow tool last).
    assert_eq!(
        log.lines(),
        [
            "call model 1",
            "answer model 1: 3 tool calls",
            r#"call tool slow {"said":"first"}"#,
            r#"call tool echo {"said":"secret"}"#,
            r#"call tool echo {"said":"plain"}"#,
            r#"answer tool echo {"said":"secret"}: "[redacted]""#,
            r#"answer tool echo {"said":"plain"}: {"said":"plain"}"#,
            r#"answer tool slow {"said":"first"}: {"said":"first"}"#,
            "call model 2",
            "answer model 2: 0 tool calls",
            r#"call verify "All done.""#,
            "answer verify \"All done.\": complete true",
        ]
    );

    // The redacted call never reached the tool; the model and the verifier saw the new answer.
    assert_eq!(echo.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    let results: Vec<String> = model
        .last_messages()
        .into_iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content)
        .collect();
    assert_eq!(
        results,
        [r#"{"said":"first"}"#, "[redacted]", r#"{"said":"plain"}"#]
    );
    let transcripts = verifier.transcripts.lock().expect("not poisoned").clone();
    assert_eq!(transcripts.len(), 1);
    assert!(transcripts[0].contains("[redacted]"));
}

/// Answers every tool call as if it were a model call.
struct Confused;

impl Layer for Confused {
    fn around<'a>(&'a self, call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Answer> {
        if call.site() == Site::Tool {
            return Box::pin(async { Answer::Model(Ok(ModelTurn::default())) });
        }
        next.run(call)
    }
}

#[tokio::test]
async fn an_answer_of_the_wrong_site_stops_the_run_with_a_fault() {
    let model = Script::new([calls(&[("echo", json!({}))]), done("Done.")]);
    let err = Run::new("Echo", Policy::default(), model)
        .tools(ToolSet::new().with("echo", Echo::new(Duration::ZERO)))
        .adapters(|mut adapters| adapters.layer(Arc::new(Confused)))
        .execute()
        .await
        .expect_err("the tool call's answer is a fault");
    let RunError::Fault(fault) = err else {
        panic!("not a fault: {err:?}");
    };
    assert_eq!(
        fault.message,
        "a layer answered a tool call with the answer to a model call"
    );
}

/// Passes a verification on to the model below, which is not made.
struct Misrouted;

impl Layer for Misrouted {
    fn around<'a>(&'a self, _call: Call<'a>, next: Next<'a>) -> BoxFuture<'a, Answer> {
        assert_eq!(next.site(), Site::Model);
        next.run(Call::Tool {
            name: "echo",
            idempotent: true,
            arguments: json!({}),
        })
    }
}

#[tokio::test]
async fn a_call_passed_on_to_the_wrong_adapter_is_not_made() {
    let model = Script::new([done("Done.")]);
    let layered = layer::model(model.clone(), Arc::new(Misrouted));
    let request = ModelRequest {
        messages: &[],
        tools: &[],
        tools_enabled: true,
        purpose: Purpose::Verify,
    };
    let answer = layered.complete(request).await;
    assert_eq!(model.requests(), 0);
    let Err(terminus_runtime::ModelError::Fault(fault)) = answer else {
        panic!("not a fault: {answer:?}");
    };
    assert_eq!(
        fault.message,
        "a layer passed a tool call on to a model call's adapter"
    );
}

/// What the adapters say about themselves.
struct Described;

#[async_trait::async_trait]
impl Model for Described {
    async fn complete(
        &self,
        _request: ModelRequest<'_>,
    ) -> Result<ModelTurn, terminus_runtime::ModelError> {
        Ok(ModelTurn::default())
    }

    fn info(&self) -> ModelInfo {
        ModelInfo {
            provider: "p".into(),
            model: "m".into(),
        }
    }

    fn reads_messages(&self) -> bool {
        false
    }
}

#[async_trait::async_trait]
impl Tool for Described {
    fn description(&self) -> &str {
        "described"
    }

    fn parameters(&self) -> Value {
        json!({ "type": "object", "required": ["x"] })
    }

    fn idempotent(&self) -> bool {
        false
    }

    async fn call(&self, _arguments: Value) -> Result<ToolOutcome, terminus_runtime::Fault> {
        Ok(ToolOutcome::ok(Value::Null))
    }
}

#[async_trait::async_trait]
impl Verifier for Described {
    async fn verify(
        &self,
        _verification: Verification<'_>,
    ) -> Result<terminus_kernel::Verdict, terminus_runtime::Fault> {
        Ok(terminus_kernel::Verdict::default())
    }

    fn reads_transcript(&self) -> bool {
        false
    }
}

#[test]
fn the_wrapped_adapters_describe_themselves_as_before() {
    let layer: Arc<dyn Layer> = Arc::new(Log::default());
    let model = layer::model(Arc::new(Described), layer.clone());
    assert_eq!(model.info(), Described.info());
    assert!(!model.reads_messages());

    let mut set = ToolSet::new().with("d", Arc::new(Described));
    set.hold("d", terminus_kernel::Hold::Approval);
    let tools = layer::tools(&set, layer.clone());
    assert_eq!(tools.specs(), set.specs());
    assert_eq!(tools.held("d"), Some(terminus_kernel::Hold::Approval));
    let tool = tools.get("d").expect("wrapped");
    assert!(!tool.idempotent());

    let verifier = layer::verifier(Arc::new(Described), layer);
    assert!(!verifier.reads_transcript());
}

/// A source whose list is `echo` at the start and `greet` (an echo too) once asked.
struct Swap;

#[async_trait::async_trait]
impl terminus_runtime::ToolSource for Swap {
    async fn refresh(&self) -> Option<ToolSet> {
        Some(ToolSet::empty().with("greet", Echo::new(Duration::ZERO)))
    }
}

#[tokio::test]
async fn a_tool_that_appears_later_gets_the_layer_too() {
    let log = Arc::new(Log::default());
    let mut set = ToolSet::new().with("echo", Echo::new(Duration::ZERO));
    set.watch(Arc::new(Swap), ["echo".to_owned()]);
    let mut tools = layer::tools(&set, log.clone());
    let change = tools.refresh().await.expect("the list changed");
    assert_eq!(
        (change.added, change.removed),
        (vec!["greet".to_owned()], vec!["echo".to_owned()])
    );
    assert!(!tools.contains("echo"));
    let greet = tools.get("greet").expect("greet appeared").clone();
    greet
        .call(json!({"text": "hi"}))
        .await
        .expect("the echo answers");
    assert_eq!(
        log.lines(),
        vec![
            r#"call tool greet {"text":"hi"}"#.to_owned(),
            r#"answer tool greet {"text":"hi"}: {"text":"hi"}"#.to_owned(),
        ]
    );
}
