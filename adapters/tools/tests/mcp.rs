//! The MCP adapter against the real reference servers from npm: server-filesystem and
//! server-everything, as stdio children and over streamable HTTP.

mod common;

use serde_json::{Value, json};
use std::time::Duration;
use terminus_kernel::{ToolErrorKind, ToolOutcome};
use terminus_runtime::{ToolSet, ToolsChanged};
use terminus_tools::{McpConfig, McpError, McpServer, McpTools, McpTransport};

fn ok_text(outcome: &ToolOutcome) -> &str {
    match outcome {
        ToolOutcome::Ok(v) => match v.value() {
            Value::String(s) => s,
            other => panic!("expected a text result, got {other:?}"),
        },
        other => panic!("expected a text result, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_lists_reads_writes_and_refuses_paths_outside_its_root() {
    let Some(peers) = common::peers() else { return };
    let root = tempfile::tempdir().expect("a temp dir");
    let root_path = root.path().canonicalize().expect("a real path");
    std::fs::write(
        root_path.join("lib.rs"),
        "pub fn add(a: i32, b: i32) -> i32 { a + b }",
    )
    .expect("write");
    let tools = McpTools::connect(&[common::filesystem(&peers, &root_path)])
        .await
        .expect("the server starts");
    let names: Vec<&str> = tools.names().collect();
    for expected in ["list_directory", "read_text_file", "write_file"] {
        assert!(names.contains(&expected), "{names:?}");
    }
    let call = |name: &str, args: Value| {
        let tool = tools.get(name).expect("listed").clone();
        async move {
            terminus_runtime::Tool::call(&*tool, args)
                .await
                .expect("no fault")
        }
    };
    let listing = call("list_directory", json!({ "path": root_path })).await;
    assert!(ok_text(&listing).contains("lib.rs"), "{listing:?}");
    let read = call(
        "read_text_file",
        json!({ "path": root_path.join("lib.rs") }),
    )
    .await;
    assert_eq!(
        ok_text(&read),
        "pub fn add(a: i32, b: i32) -> i32 { a + b }"
    );
    let plan = root_path.join("plan.md");
    let written = call("write_file", json!({ "path": plan, "content": "# Plan\n" })).await;
    assert!(matches!(written, ToolOutcome::Ok(_)), "{written:?}");
    assert_eq!(std::fs::read_to_string(&plan).expect("on disk"), "# Plan\n");
    // Outside the allowed directory: an isError result, `invalid_arguments` (the model can
    // choose an allowed path) with the server's text; arguments the server's schema refuses:
    // `invalid_arguments` too.
    match call("read_text_file", json!({ "path": "/etc/hostname" })).await {
        ToolOutcome::Error { kind, message } => {
            assert_eq!(kind, ToolErrorKind::InvalidArguments);
            assert!(message.contains("Access denied"), "{message}");
        }
        other => panic!("read outside the root: {other:?}"),
    }
    match call("write_file", json!({ "path": plan })).await {
        ToolOutcome::Error { kind, message } => {
            assert_eq!(kind, ToolErrorKind::InvalidArguments);
            assert!(message.contains("Invalid arguments"), "{message}");
        }
        other => panic!("a write without content: {other:?}"),
    }
    // MCP tools are not idempotent unless configured.
    assert!(!terminus_runtime::Tool::idempotent(
        &**tools.get("write_file").expect("listed")
    ));
    tools.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_echo_sum_structured_content_and_images() {
    let Some(peers) = common::peers() else { return };
    let server = McpServer::connect(common::everything(&peers))
        .await
        .expect("starts");
    let specs = server.list().await.expect("tools");
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    for expected in [
        "echo",
        "get-sum",
        "get-structured-content",
        "get-tiny-image",
    ] {
        assert!(names.contains(&expected), "{names:?}");
    }
    let echo = specs.iter().find(|s| s.name == "echo").expect("echo");
    assert_eq!(echo.parameters["type"], "object");
    assert!(echo.parameters["properties"]["message"].is_object());

    let echoed = server.call("echo", json!({ "message": "hello" })).await;
    assert!(ok_text(&echoed).contains("hello"), "{echoed:?}");
    let sum = server.call("get-sum", json!({ "a": 2, "b": 40 })).await;
    assert!(ok_text(&sum).contains("42"), "{sum:?}");
    let weather = server
        .call("get-structured-content", json!({ "location": "Chicago" }))
        .await;
    assert!(ok_text(&weather).contains("temperature"), "{weather:?}");
    let image = server.call("get-tiny-image", json!({})).await;
    let text = ok_text(&image);
    assert!(text.contains("[image image/png,"), "{text}");
    assert!(
        text.len() < 400,
        "the image is summarised, not dumped: {text}"
    );
    // Arguments of the wrong shape: the server's own error reaches the model.
    match server.call("get-sum", json!({ "a": "two" })).await {
        ToolOutcome::Error { kind, message } => {
            assert!(
                matches!(
                    kind,
                    ToolErrorKind::Failed | ToolErrorKind::InvalidArguments
                ),
                "{kind:?}"
            );
            assert!(!message.is_empty());
        }
        other => panic!("bad arguments were accepted: {other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_operation_past_the_timeout_is_a_timeout_and_the_server_goes_on() {
    let Some(peers) = common::peers() else { return };
    let mut config = common::everything(&peers);
    config.tool_timeout = Duration::from_millis(500);
    let server = McpServer::connect(config).await.expect("starts");
    let started = std::time::Instant::now();
    let outcome = server
        .call(
            "trigger-long-running-operation",
            json!({ "duration": 10, "steps": 5 }),
        )
        .await;
    assert_eq!(
        outcome,
        ToolOutcome::Error {
            kind: ToolErrorKind::Timeout,
            message: "no result within 500 ms".into()
        }
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let echoed = server
        .call("echo", json!({ "message": "still here" }))
        .await;
    assert!(ok_text(&echoed).contains("still here"));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_fails_that_call_is_restarted_once_then_its_tools_are_gone() {
    let Some(peers) = common::peers() else { return };
    let server = McpServer::connect(common::everything(&peers))
        .await
        .expect("starts");
    let kill = |pid: Option<u32>| {
        let pid = pid.expect("a stdio child");
        let status = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "the server process {pid} was killed");
    };
    let first = server.pid().await;
    let running = server.call(
        "trigger-long-running-operation",
        json!({ "duration": 5, "steps": 5 }),
    );
    let killer = async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        kill(first);
    };
    let (outcome, ()) = tokio::join!(running, killer);
    match &outcome {
        ToolOutcome::Error { kind, message } => {
            assert_eq!(*kind, ToolErrorKind::Failed);
            assert!(message.contains("started again"), "{message}");
        }
        other => panic!("the call in flight did not fail: {other:?}"),
    }
    // The restarted server answers.
    let echoed = server
        .call("echo", json!({ "message": "after restart" }))
        .await;
    assert!(ok_text(&echoed).contains("after restart"), "{echoed:?}");
    // Lost a second time: its tools are gone, an unrecoverable `not_found`, never a hang.
    let second = server.pid().await;
    assert_ne!(first, second, "a new child");
    kill(second);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lost = server.call("echo", json!({ "message": "x" })).await;
    assert!(
        matches!(
            lost,
            ToolOutcome::Error {
                kind: ToolErrorKind::Failed,
                ..
            }
        ),
        "{lost:?}"
    );
    let gone = server.call("echo", json!({ "message": "x" })).await;
    match gone {
        ToolOutcome::Error { kind, message } => {
            assert_eq!(kind, ToolErrorKind::NotFound);
            assert!(message.contains("lost 2 times"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_cannot_start_names_its_server() {
    let missing = McpConfig::new(
        "ghost",
        McpTransport::Stdio {
            command: vec!["/nonexistent/terminus-mcp-server".into()],
        },
    );
    let err = McpServer::connect(missing).await.expect_err("cannot start");
    assert!(matches!(err, McpError::Spawn { .. }));
    assert!(
        err.to_string().starts_with("[[mcp]] `ghost`: cannot start"),
        "{err}"
    );

    let dies = McpConfig::new(
        "dies",
        McpTransport::Stdio {
            command: vec![
                "sh".into(),
                "-c".into(),
                "echo 'boom: no config' >&2; exit 3".into(),
            ],
        },
    );
    let err = McpServer::connect(dies).await.expect_err("exits at start");
    let text = err.to_string();
    assert!(
        text.starts_with("[[mcp]] `dies`: the server did not start"),
        "{text}"
    );
    assert!(
        text.contains("boom: no config"),
        "its stderr is shown: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_offering_one_name_are_namespaced() {
    let Some(peers) = common::peers() else { return };
    let mut a = common::everything(&peers);
    a.name = "left".into();
    let mut b = common::everything(&peers);
    b.name = "right".into();
    let tools = McpTools::connect(&[a, b]).await.expect("both start");
    let names: Vec<&str> = tools.names().collect();
    assert!(
        names.contains(&"left__echo") && names.contains(&"right__echo"),
        "{names:?}"
    );
    assert!(!names.contains(&"echo"));
    let echoed = terminus_runtime::Tool::call(
        &**tools.get("right__echo").expect("listed"),
        json!({ "message": "hi" }),
    )
    .await
    .expect("no fault");
    assert!(ok_text(&echoed).contains("hi"));
    tools.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_and_a_401() {
    let Some(peers) = common::peers() else { return };
    let port = free_port();
    let mut child = tokio::process::Command::new(common::node(&peers))
        .arg(common::server_js(&peers, "server-everything"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mut config = McpConfig::new("http", McpTransport::Http { url });
    config.tool_timeout = Duration::from_secs(10);
    let mut server = None;
    for _ in 0..100 {
        match McpServer::connect(config.clone()).await {
            Ok(s) => {
                server = Some(s);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let server = server.expect("the HTTP server came up");
    let echoed = server.call("echo", json!({ "message": "over http" })).await;
    assert!(ok_text(&echoed).contains("over http"), "{echoed:?}");
    server.shutdown().await;
    let _ = child.kill().await;

    // A server that refuses every request with 401.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("port");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 8192];
            let _ = s.read(&mut buf).await;
            let body = "{\"error\":\"unauthorized\"}";
            let _ = s
                .write_all(
                    format!("HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
                        .as_bytes(),
                )
                .await;
        }
    });
    let refused = McpConfig::new(
        "locked",
        McpTransport::Http {
            url: format!("http://{addr}/mcp"),
        },
    );
    let err = McpServer::connect(refused).await.expect_err("401");
    assert!(err.to_string().contains("401"), "{err}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A server that sends `notifications/tools/list_changed` is listed again at the set's next
/// refresh: the tool that appeared is added and runs, the one that is gone is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_changed_notification_refreshes_the_tools() {
    let Some(peers) = common::peers() else { return };
    a_changing_list_is_followed(common::list_changed(&peers)).await;
}

/// The same at the 2026-07-28 revision, where a change is only sent on a subscription
/// (`subscriptions/listen`), which the session opens when the server offers list changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_session_subscribes_to_list_changes_and_refreshes_the_tools() {
    a_changing_list_is_followed(common::changing_2026()).await;
}

/// `echo` and `swap`; a `swap` call adds `greet`, removes `echo`, and says the list changed.
async fn a_changing_list_is_followed(server: terminus_tools::McpConfig) {
    let mcp = McpTools::connect(&[server]).await.expect("starts");
    let mut tools = ToolSet::new();
    mcp.add_to(&mut tools);
    assert_eq!(
        tools.names().collect::<Vec<_>>(),
        ["echo", "swap", "write_todos"]
    );
    assert!(tools.refresh().await.is_none(), "nothing changed yet");

    let swap = tools.get("swap").expect("swap").clone();
    let swapped = swap.call(json!({})).await.expect("no fault");
    assert_eq!(ok_text(&swapped), "swapped");
    let change = tools
        .refresh()
        .await
        .expect("the server said its list changed");
    assert_eq!(
        change,
        ToolsChanged {
            model_call: 0,
            added: vec!["greet".into()],
            removed: vec!["echo".into()],
            changed: Vec::new(),
        }
    );
    assert_eq!(
        tools.names().collect::<Vec<_>>(),
        ["greet", "swap", "write_todos"]
    );
    let spec = tools
        .specs()
        .into_iter()
        .find(|s| s.name == "greet")
        .expect("greet is offered");
    assert_eq!(spec.description, "Say hello.");
    let greet = tools.get("greet").expect("greet").clone();
    let greeted = greet.call(json!({})).await.expect("no fault");
    assert_eq!(ok_text(&greeted), "hello from greet");
    assert!(tools.refresh().await.is_none(), "listed once per change");
    // What connect listed stays as it was; only the watching set moves.
    assert!(mcp.get("echo").is_some() && mcp.get("greet").is_none());
    mcp.shutdown().await;
}

/// `elicitation = "person"`: a question the call asks while it runs is cancelled (so the server
/// does nothing) and reported to the run; the call's second run gets the person's reply to that
/// question: an accepted form acts once, a declined one or the form's defaults do not, and a
/// reply to another question answers nothing. Outside a run nobody replies: the cancel stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_nobody_can_answer_is_asked_of_the_run_and_the_reply_answers_the_second_run() {
    use terminus_runtime::asking::{self, Question, Reply};
    let Some(peers) = common::peers() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = dir.path().join("deleted.log");
    let mcp = McpTools::connect(&[common::elicit(&peers, &log)])
        .await
        .expect("starts");
    let tool = mcp.get("delete_branch").expect("listed").clone();
    let call = |reply: Option<(Question, Reply)>| {
        let tool = tool.clone();
        asking::scope(reply, async move {
            terminus_runtime::Tool::call(&*tool, json!({"branch": "main"}))
                .await
                .expect("no fault")
        })
    };
    let deleted = || std::fs::read_to_string(&log).unwrap_or_default();

    let (first, asked) = call(None).await;
    let question = asked.expect("the call asked");
    assert_eq!(question.message, "Delete branch main?");
    assert_eq!(
        question.schema["properties"]["confirm"]["default"],
        json!(false),
        "{question:?}"
    );
    assert_eq!(ok_text(&first), "kept main: the user chose cancel");
    assert_eq!(deleted(), "", "a cancelled question deletes nothing");

    let accept = Reply::Accept(json!({"confirm": true, "reason": "merged"}));
    let (second, again) = call(Some((question.clone(), accept))).await;
    assert_eq!(ok_text(&second), "deleted main");
    assert_eq!(again, None, "a second run asks nothing of the run");
    assert_eq!(deleted(), "deleted main (merged)\n");

    for (reply, said) in [
        (Reply::Decline, "kept main: the user chose decline"),
        (Reply::Defaults, "kept main: not confirmed"),
    ] {
        let (outcome, asked) = call(Some((question.clone(), reply))).await;
        assert_eq!((ok_text(&outcome), asked), (said, None));
    }
    let other = Question {
        message: "Delete branch dev?".into(),
        schema: question.schema.clone(),
    };
    let accept = Reply::Accept(json!({"confirm": true}));
    let (outcome, _) = call(Some((other, accept))).await;
    assert_eq!(
        ok_text(&outcome),
        "kept main: the user chose decline",
        "a reply answers its own question only"
    );
    let outside = terminus_runtime::Tool::call(&*tool, json!({"branch": "main"}))
        .await
        .expect("no fault");
    assert_eq!(ok_text(&outside), "kept main: the user chose cancel");
    assert_eq!(deleted(), "deleted main (merged)\n", "one deletion in all");
    mcp.shutdown().await;
}

/// The steps `login.js` logged, one a line.
fn logged(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// An authorization server that wants a person to log in: with a credentials file, the
/// connection ends waiting for them (`McpError::Login` with the URL, nothing hangs); the person
/// logs in, `complete_login` exchanges the code their browser brings back, and every later
/// connection, in any process, uses the kept token without asking anyone again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_waits_for_a_person_and_its_token_serves_later_connections() {
    use std::os::unix::fs::PermissionsExt as _;
    let Some(peers) = common::peers() else { return };
    let dir = tempfile::tempdir().expect("dir");
    let log = dir.path().join("login.log");
    let (_server, base) = terminus_fixture::peers::login_server(&peers, &log).await;
    let file = dir.path().join("state").join("login.json");
    let mut config = McpConfig::new(
        "hosted",
        McpTransport::Http {
            url: format!("{base}/mcp"),
        },
    );
    config.auth = Some(terminus_tools::McpAuth {
        credentials_file: Some(file.clone()),
        ..terminus_tools::McpAuth::default()
    });

    // Without a file, nothing can wait for the person: the step is named.
    let mut headless = config.clone();
    headless.auth = Some(terminus_tools::McpAuth::default());
    let err = McpServer::connect(headless).await.expect_err("a person");
    assert!(
        matches!(&err, McpError::Auth { step: terminus_tools::AuthStep::Authorization, reason, .. }
            if reason.contains("wants a person to log in")),
        "{err}"
    );

    let headless_steps = logged(&log).len();

    let url = match McpServer::connect(config.clone()).await {
        Err(McpError::Login { server, url }) => {
            assert_eq!(server, "hosted");
            url
        }
        other => panic!("expected a login, got {other:?}"),
    };
    assert!(url.starts_with(&format!("{base}/authorize?")), "{url}");
    assert!(url.contains("code_challenge_method=S256"), "{url}");
    let mode = std::fs::metadata(&file).expect("kept").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");

    // Another connection before the login registers no second client, and waits again.
    let again = match McpServer::connect(config.clone()).await {
        Err(McpError::Login { url, .. }) => url,
        other => panic!("expected a login, got {other:?}"),
    };
    assert_ne!(again, url, "a new state and PKCE challenge");
    let steps = logged(&log)[headless_steps..].to_vec();
    assert_eq!(
        steps.iter().filter(|l| *l == "register").count(),
        1,
        "{steps:?}"
    );

    // A refused login is named, and leaves the login pending.
    let denied = terminus_fixture::peers::log_in(&url, "alice", true);
    let err = terminus_tools::complete_login(&config, &denied)
        .await
        .expect_err("denied");
    assert!(err.to_string().contains("access_denied"), "{err}");

    // The person logs in at the first URL; the code their browser brings back is exchanged.
    let redirect = terminus_fixture::peers::log_in(&url, "alice", false);
    terminus_tools::complete_login(&config, &redirect)
        .await
        .expect("the login completes");
    let kept = std::fs::read_to_string(&file).expect("kept");
    assert!(kept.contains("\"access_token\""), "the token is kept");
    // The same redirect again: its state is used up.
    let err = terminus_tools::complete_login(&config, &redirect)
        .await
        .expect_err("used");
    assert!(err.to_string().contains("no authorization waits"), "{err}");

    // Later connections use the kept token: no login page, no new token.
    let before = logged(&log);
    for _ in 0..2 {
        let server = McpServer::connect(config.clone())
            .await
            .expect("authorized");
        let answer = server.call("whoami", json!({})).await;
        assert_eq!(ok_text(&answer), "hello alice");
        server.shutdown().await;
    }
    let after = logged(&log)[before.len()..].to_vec();
    assert_eq!(
        after.iter().filter(|l| *l == "call whoami alice").count(),
        2,
        "{after:?}"
    );
    // (Metadata discovery at the start probes the endpoint with a GET, unauthenticated: the
    // challenge names the resource's metadata.)
    for step in ["login page", "register", "token code", "unauthorized POST"] {
        assert!(
            !after.iter().any(|l| l.starts_with(step)),
            "{step} in {after:?}"
        );
    }
    assert_eq!(
        before.iter().filter(|l| *l == "token code").count(),
        1,
        "{before:?}"
    );

    // An expired token is refreshed with the kept refresh token, still without a person.
    let mut kept: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("kept")).expect("JSON");
    kept["credentials"]["token_received_at"] = json!(1);
    std::fs::write(&file, kept.to_string()).expect("aged");
    let server = McpServer::connect(config.clone()).await.expect("refreshed");
    assert_eq!(
        ok_text(&server.call("whoami", json!({})).await),
        "hello alice"
    );
    server.shutdown().await;
    let last = logged(&log);
    assert_eq!(
        last.iter().filter(|l| *l == "token refresh").count(),
        1,
        "{last:?}"
    );
    assert!(
        !last[before.len()..].iter().any(|l| l == "login page"),
        "{last:?}"
    );

    // A token the authorization server revokes in the middle of a run: the refresh is refused
    // too, and the call answers `auth_failed` with the URL where the person logs in again.
    let server = McpServer::connect(config.clone())
        .await
        .expect("authorized");
    let revoked = reqwest::Client::new()
        .post(format!("{base}/revoke"))
        .send()
        .await
        .expect("revoked");
    assert_eq!(revoked.status(), 200);
    match server.call("whoami", json!({})).await {
        ToolOutcome::Error { kind, message } => {
            assert_eq!(kind, ToolErrorKind::AuthFailed);
            assert!(
                message.contains(&format!(
                    "waits for a person to log in at {base}/authorize?"
                )),
                "{message}"
            );
        }
        other => panic!("expected auth_failed, got {other:?}"),
    }
    server.shutdown().await;
}
