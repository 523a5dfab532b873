//! `terminus tools CONFIG.toml list | call`: a user checks the `[[mcp]]` servers of an agent
//! config before running an agent on them. The server is the real filesystem MCP server.

use std::path::Path;
use std::process::{Command, Output};
use terminus_fixture::peers;

fn terminus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn config(dir: &Path, mcp: &str) -> String {
    let path = dir.join("agent.toml");
    let body = format!(
        "[model]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"gpt-4o-mini\"\n\n{mcp}"
    );
    std::fs::write(&path, body).expect("write the config");
    path.to_string_lossy().into_owned()
}

#[test]
fn list_and_call_the_filesystem_server() {
    let Some(peers) = peers::dir() else { return };
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = dir.path().canonicalize().expect("a real path").join("work");
    std::fs::create_dir(&root).expect("mkdir");
    std::fs::write(root.join("notes.txt"), "hello from disk").expect("write");
    let mcp = format!(
        "[[mcp]]\nname = \"fs\"\ncommand = [{:?}, {:?}, {:?}]\ntool_timeout_ms = 10000\n",
        peers::node(&peers),
        peers::server_js(&peers, "server-filesystem"),
        root.to_string_lossy()
    );
    let cfg = config(dir.path(), &mcp);

    let out = terminus(&["tools", &cfg, "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listing = text(&out.stdout);
    let line = listing
        .lines()
        .find(|l| l.starts_with("read_text_file\t"))
        .expect("read_text_file is listed");
    assert!(
        line.split('\t').nth(1).is_some_and(|d| !d.is_empty()),
        "{line}"
    );
    assert!(
        listing.lines().any(|l| l.starts_with("write_todos\t")),
        "the built-in tool too"
    );

    let file = root.join("notes.txt");
    let args = serde_json::json!({ "path": file }).to_string();
    let out = terminus(&["tools", &cfg, "call", "read_text_file", &args]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim_end(), "hello from disk");

    let outside = serde_json::json!({ "path": "/etc/hostname" }).to_string();
    let out = terminus(&["tools", &cfg, "call", "read_text_file", &outside]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("invalid_arguments: Access denied"),
        "{}",
        text(&out.stderr)
    );

    let out = terminus(&["tools", &cfg, "call", "read_text_file", "{not json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = terminus(&["tools", &cfg, "call", "no_such_tool", "{}"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no tool named `no_such_tool`"));
}

#[test]
fn a_bad_config_or_a_server_that_cannot_start_exits_2_naming_it() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let cfg = config(
        dir.path(),
        "[[mcp]]\nname = \"fs\"\ncommand = [\"node\"]\ntimeout = 5\n",
    );
    let out = terminus(&["tools", &cfg, "list"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("agent.toml") && err.contains("mcp[0].timeout"),
        "{err}"
    );

    let cfg = config(
        dir.path(),
        "[[mcp]]\nname = \"ghost\"\ncommand = [\"/nonexistent/mcp-server\"]\n",
    );
    let out = terminus(&["tools", &cfg, "list"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("[[mcp]] `ghost`: cannot start"),
        "{}",
        text(&out.stderr)
    );

    let cfg = config(
        dir.path(),
        "[[mcp]]\nname = \"dies\"\ncommand = [\"sh\", \"-c\", \"echo no such directory >&2; exit 1\"]\n",
    );
    let out = terminus(&["tools", &cfg, "list"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("[[mcp]] `dies`: the server did not start"),
        "{err}"
    );
    assert!(err.contains("no such directory"), "{err}");
}

#[test]
fn a_bad_mcp_protocol_exits_2_naming_the_field_and_the_values() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let cfg = config(
        dir.path(),
        "[[mcp]]\nname = \"fs\"\ncommand = [\"node\"]\nprotocol = \"2026\"\n",
    );
    let out = terminus(&["tools", &cfg, "list"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "agent.toml: [[mcp]] #1 `fs`: protocol: unknown value \"2026\", expected \
             \"2025-11-25\" or \"2026-07-28\""
        ),
        "{err}"
    );
}

/// `[[mcp]] protocol = "2026-07-28"` against the official conformance suite's 2026-07-28 server
/// (its `tools_call` client scenario): the suite runs a script that writes the config for the
/// URL it serves and calls the tool with `terminus tools`. The same config at 2025-11-25 fails
/// the scenario (that server refuses the handshake), so the pass is the key's doing.
#[test]
fn a_config_at_2026_07_28_speaks_it_to_the_conformance_server() {
    let Some(peers) = peers::dir() else { return };
    let suite = peers.join("node_modules/conformance-2026/dist/index.js");
    let dir = tempfile::tempdir().expect("a temp dir");
    let run = |protocol: &str| {
        let script = dir.path().join(format!("client-{protocol}.sh"));
        let cfg = dir.path().join(format!("agent-{protocol}.toml"));
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\n\
                 for url; do :; done\n\
                 printf '[[mcp]]\\nname = \"conformance\"\\nurl = \"%s\"\\nprotocol = \"{protocol}\"\\n' \"$url\" > {cfg}\n\
                 exec {terminus} tools {cfg} call add_numbers '{{\"a\": 5, \"b\": 3}}'\n",
                cfg = cfg.display(),
                terminus = env!("CARGO_BIN_EXE_terminus"),
            ),
        )
        .expect("write the script");
        let mut perms = std::fs::metadata(&script).expect("stat").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&script, perms).expect("chmod");
        let out = Command::new(peers::node(&peers))
            .arg(&suite)
            .args(["client", "--command"])
            .arg(&script)
            .args(["--scenario", "tools_call", "--spec-version", "2026-07-28"])
            .args(["--timeout", "30000"])
            .output()
            .expect("the suite runs");
        format!("{}{}", text(&out.stdout), text(&out.stderr))
    };
    let stateless = run("2026-07-28");
    assert!(
        stateless.contains("Passed: 2/2, 0 failed, 0 warnings")
            && stateless.contains("OVERALL: PASSED"),
        "{stateless}"
    );
    // The suite's server refuses the 2025-11-25 handshake: the start fails, exit 2.
    let handshake = run("2025-11-25");
    assert!(
        handshake.contains("Client exited with code 2")
            && handshake.contains("Missing MCP-Protocol-Version header")
            && handshake.contains("OVERALL: FAILED"),
        "{handshake}"
    );
}
