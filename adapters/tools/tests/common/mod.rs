//! The real MCP reference servers, installed pinned by `.ci/peers.sh` into `target/peers` (or
//! `$TERMINUS_PEERS`), started as stdio children with the Node binary installed beside them.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;
use terminus_tools::{McpConfig, McpTransport};

pub use terminus_fixture::peers::{dir as peers, node, server_js};

/// server-filesystem over stdio, allowed to touch `root` only.
pub fn filesystem(peers: &std::path::Path, root: &std::path::Path) -> McpConfig {
    McpConfig::new(
        "fs",
        McpTransport::Stdio {
            command: vec![
                node(peers),
                server_js(peers, "server-filesystem"),
                root.to_string_lossy().into_owned(),
            ],
        },
    )
}

/// server-everything over stdio.
pub fn everything(peers: &std::path::Path) -> McpConfig {
    let mut config = McpConfig::new(
        "everything",
        McpTransport::Stdio {
            command: vec![
                node(peers),
                server_js(peers, "server-everything"),
                "stdio".into(),
            ],
        },
    );
    config.tool_timeout = Duration::from_secs(20);
    config
}

/// A server on the official TypeScript SDK whose tool list changes (`tests/servers/
/// list_changed.js`): `echo` and `swap`; a `swap` call adds `greet`, removes `echo` and sends
/// `notifications/tools/list_changed`.
pub fn list_changed(peers: &std::path::Path) -> McpConfig {
    sdk_server(peers, "changing", "list_changed.js", &[])
}

/// A server on the official TypeScript SDK whose `delete_branch` asks its user to confirm
/// (`tests/servers/elicit.js`, a form elicitation) and logs each deletion to `log`; its
/// questions wait for a person (`elicitation = "person"`).
pub fn elicit(peers: &std::path::Path, log: &std::path::Path) -> McpConfig {
    let mut config = sdk_server(peers, "branches", "elicit.js", &[log]);
    config.elicitation = terminus_tools::Elicitation::Person;
    config
}

/// The binary of this crate's example `name`, which cargo builds with the tests: the test
/// binary is target/<profile>/deps/NAME, and the examples are beside deps.
fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target/<profile>");
    dir.join("examples").join(name)
}

/// The same tool list as [`list_changed`]'s, on rmcp's own server side at the 2026-07-28
/// revision (`examples/changing_2026.rs`, which cargo builds with the tests): the change is
/// sent on the client's `subscriptions/listen` stream.
pub fn changing_2026() -> McpConfig {
    let server = example("changing_2026");
    let mut config = McpConfig::new(
        "changing",
        McpTransport::Stdio {
            command: vec![server.to_string_lossy().into_owned()],
        },
    );
    config.protocol = terminus_tools::McpProtocol::Stateless;
    config
}

/// The tasks of the 2026-07-28 revision's extension, on rmcp's own server side
/// (`examples/tasks_2026.rs`): `build` and `deploy` are called as tasks, and the server appends
/// what it saw to `log`.
pub fn tasks_2026(log: &std::path::Path) -> McpConfig {
    let server = example("tasks_2026");
    let mut config = McpConfig::new(
        "builds",
        McpTransport::Stdio {
            command: vec![
                server.to_string_lossy().into_owned(),
                log.to_string_lossy().into_owned(),
            ],
        },
    );
    config.protocol = terminus_tools::McpProtocol::Stateless;
    config.tasks = vec!["build".into(), "deploy".into()];
    config.tool_timeout = Duration::from_secs(20);
    config
}

/// A stdio server of `tests/servers/` on the official TypeScript SDK, named `name`: `node
/// SCRIPT NODE_MODULES ARGS...`.
fn sdk_server(
    peers: &std::path::Path,
    name: &str,
    script: &str,
    args: &[&std::path::Path],
) -> McpConfig {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/servers")
        .join(script);
    let mut command = vec![
        node(peers),
        script.to_string_lossy().into_owned(),
        peers.join("node_modules").to_string_lossy().into_owned(),
    ];
    command.extend(args.iter().map(|a| a.to_string_lossy().into_owned()));
    McpConfig::new(name, McpTransport::Stdio { command })
}
