//! The official MCP client conformance suite (`@modelcontextprotocol/conformance`, pinned by
//! `.ci/peers.sh`) drives our adapter through `terminus-mcp-conformance`: every client scenario
//! it scores for the 2025-11-25 spec (18): `initialize`, `tools_call`, `sse-retry` (rmcp resumes
//! a dropped SSE stream with `Last-Event-ID` after the server's `retry` delay),
//! `elicitation-sep1034-client-defaults` (form requests accepted with the schema's defaults) and
//! the fourteen `auth/*` scenarios (OAuth 2.1, `terminus_tools::mcp_auth`). Any failed check or
//! warning fails the test; the suite's result lines are printed (`-- --nocapture`).

mod common;

use std::process::Command;

/// `conformance list`'s client scenarios for 2025-11-25, all of them.
const SCENARIOS: [&str; 18] = [
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
];

#[test]
fn the_official_client_scenarios_pass() {
    let Some(peers) = common::peers() else { return };
    let node = common::node(&peers);
    let suite = peers.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let client = env!("CARGO_BIN_EXE_terminus-mcp-conformance");
    for scenario in SCENARIOS {
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
            !text.contains("] FAILURE") && !text.contains("] WARNING"),
            "{scenario}: a check failed or warned:\n{text}"
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
