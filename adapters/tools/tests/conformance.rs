//! The official MCP client conformance suite (`@modelcontextprotocol/conformance`, pinned by
//! `.ci/peers.sh`) drives our adapter through `terminus-mcp-conformance`: scenarios
//! `initialize`, `tools_call` and `sse-retry` (rmcp resumes a dropped SSE stream with
//! `Last-Event-ID` after the server's `retry` delay). Any failed check fails the test; the suite's
//! result lines are printed (`-- --nocapture`).

mod common;

use std::process::Command;

#[test]
fn the_official_client_scenarios_pass() {
    let Some(peers) = common::peers() else { return };
    let node = common::node(&peers);
    let suite = peers.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let client = env!("CARGO_BIN_EXE_terminus-mcp-conformance");
    for scenario in ["initialize", "tools_call", "sse-retry"] {
        let out = Command::new(&node)
            .arg(&suite)
            .args(["client", "--command", client, "--scenario", scenario])
            .args(["--timeout", "30000"])
            .output()
            .expect("the suite runs");
        let text = strip_ansi(&format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
        let results: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.contains("] SUCCESS")
                    || l.contains("] FAILURE")
                    || l.contains("] WARNING")
                    || l.contains("Passed:")
                    || l.contains("OVERALL")
            })
            .collect();
        println!("--- {scenario}\n{}", results.join("\n"));
        assert!(
            out.status.success() && text.contains("OVERALL: PASSED"),
            "scenario {scenario} failed:\n{text}"
        );
        assert!(
            !text.contains("] FAILURE"),
            "{scenario}: a check failed:\n{text}"
        );
        assert!(
            results.iter().any(|l| l.contains("] SUCCESS")),
            "{scenario}: no check ran:\n{text}"
        );
    }
}

/// The text without its terminal colour codes (`ESC [ ... m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
