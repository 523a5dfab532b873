//! Native tools: the schema comes from the argument struct, arguments are checked before the
//! function runs, and failures keep their class.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use terminus_kernel::{ToolErrorKind, ToolOutcome};
use terminus_runtime::Tool;
use terminus_tools::{ToolFailure, native};

/// Arguments of `read_lines`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadLines {
    /// The file to read.
    path: String,
    /// How many lines, from the top.
    #[serde(default)]
    limit: Option<u32>,
}

#[tokio::test]
async fn the_schema_comes_from_the_struct() {
    let tool = native("Read lines.", |_: ReadLines| async {
        Ok::<_, ToolFailure>("x")
    });
    let schema = tool.parameters();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["path"]));
    assert_eq!(schema["properties"]["path"]["type"], "string");
    assert_eq!(
        schema["properties"]["path"]["description"],
        "The file to read."
    );
    assert!(schema.get("$schema").is_none());
    assert_eq!(schema["additionalProperties"], json!(false));
}

#[tokio::test]
async fn arguments_that_do_not_fit_the_struct_never_reach_the_function() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let tool = native("Read lines.", move |args: ReadLines| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, ToolFailure>(format!("{} up to {:?}", args.path, args.limit)) }
    });
    let cases = [
        (json!({ "limit": 3 }), "missing field `path`"),
        (json!({ "path": 7 }), "at `path`"),
        (json!({ "path": "a", "limit": -1 }), "at `limit`"),
        (json!({ "path": "a", "lines": 3 }), "unknown field `lines`"),
    ];
    for (arguments, says) in cases {
        match tool.call(arguments.clone()).await.expect("no fault") {
            ToolOutcome::Error { kind, message } => {
                assert_eq!(kind, ToolErrorKind::InvalidArguments, "{arguments}");
                assert!(message.contains(says), "{arguments}: {message}");
            }
            other => panic!("{arguments} was accepted: {other:?}"),
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let ok = tool
        .call(json!({ "path": "a.rs", "limit": 2 }))
        .await
        .expect("no fault");
    assert_eq!(ok, ToolOutcome::ok(json!("a.rs up to Some(2)")));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn failures_keep_their_class_and_io_errors_map() {
    let tool = native("Open.", |args: ReadLines| async move {
        std::fs::read_to_string(&args.path).map_err(ToolFailure::from)
    })
    .with_idempotent(false);
    assert!(!tool.idempotent());
    match tool
        .call(json!({ "path": "/nonexistent/terminus/file" }))
        .await
        .expect("no fault")
    {
        ToolOutcome::Error { kind, .. } => assert_eq!(kind, ToolErrorKind::NotFound),
        other => panic!("{other:?}"),
    }
    let denied = native("Deny.", |_: ReadLines| async {
        Err::<String, _>(ToolFailure::permission_denied("outside the sandbox"))
    });
    assert_eq!(
        denied.call(json!({ "path": "x" })).await.expect("no fault"),
        ToolOutcome::Error {
            kind: ToolErrorKind::PermissionDenied,
            message: "outside the sandbox".into()
        }
    );
}
