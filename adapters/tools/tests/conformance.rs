//! The official MCP client conformance suite (`@modelcontextprotocol/conformance`, pinned by
//! `.ci/peers.sh`) drives our adapter through `terminus-mcp-conformance`: every client scenario
//! it scores for the 2025-11-25 spec (18): `initialize`, `tools_call`, `sse-retry` (rmcp resumes
//! a dropped SSE stream with `Last-Event-ID` after the server's `retry` delay),
//! `elicitation-sep1034-client-defaults` (form requests accepted with the schema's defaults) and
//! the fourteen `auth/*` scenarios (OAuth 2.1, `terminus_tools::mcp_auth`). Any failed check or
//! warning fails the test; the suite's result lines are printed (`-- --nocapture`).
//!
//! The suite's prerelease (`conformance-2026`, an npm alias of
//! `@modelcontextprotocol/conformance@0.2.0-alpha.12`) runs the 2026-07-28 requirement set at
//! that revision's wire (`McpProtocol::Stateless`): all 32 scored client scenarios pass. Of the
//! 7 it runs but does not score, `json-schema-2020-12-preservation` (added after the revision
//! shipped) and 4 of the 6 auth extensions pass (the `client_credentials` grant with a secret
//! and with a signed assertion, workload identity federation, enterprise-managed
//! authorization); the 2 DPoP ones do not, for the reason [`NOT_PASSING_2026`] gives. A
//! scenario that starts or stops passing fails the test until the lists here and in
//! `docs/live-agents.md` say so.

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

/// `conformance list --client --requirements 2026-07-28`: the client scenarios 2026-07-28
/// requires, all of which pass.
const SCENARIOS_2026: [&str; 32] = [
    "tools_call",
    "request-metadata",
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
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/metadata-issuer-mismatch",
    "sep-2322-client-request-state",
    "http-standard-headers",
    "http-custom-headers",
    "http-invalid-tool-headers",
    "json-schema-ref-no-deref",
];

/// The client scenarios the 2026-07-28 run reports but does not score that pass:
/// `json-schema-2020-12-preservation` (added to the suite after the revision shipped: the
/// tool's JSON Schema 2020-12 `inputSchema` reaches the model unaltered) and four auth
/// extensions, each a `grant` of `[[mcp]] auth` (`McpGrant`).
const UNSCORED_PASSING_2026: [&str; 5] = [
    "json-schema-2020-12-preservation",
    // `grant = "client_credentials"` with `client_secret_env` (HTTP Basic, as the server asks).
    "auth/client-credentials-basic",
    // `grant = "client_credentials"` with `private_key_file` (a `private_key_jwt` assertion).
    "auth/client-credentials-jwt",
    // `grant = "jwt_bearer"`: the workload's JWT from `token_file` (SEP-1933).
    "auth/wif-jwt-bearer",
    // `grant = "enterprise"`: the ID token exchanged at `idp` for an ID-JAG (SEP-990).
    "auth/enterprise-managed-authorization",
];

/// The client scenarios the 2026-07-28 run reports but does not score that do not pass, both
/// auth extensions, and why (also in `docs/live-agents.md`).
const NOT_PASSING_2026: [(&str, &str); 2] = [
    (
        "auth/dpop",
        "extension: DPoP-bound tokens (SEP-1932); rmcp 3.11's auth client sends bearer tokens only",
    ),
    (
        "auth/dpop-nonce",
        "extension: DPoP nonces (SEP-1932); rmcp 3.11's auth client sends bearer tokens only",
    ),
];

#[test]
fn the_2026_07_28_client_scenarios_pass() {
    let Some(peers) = common::peers() else { return };
    let node = common::node(&peers);
    let suite = peers.join("node_modules/conformance-2026/dist/index.js");
    let client = env!("CARGO_BIN_EXE_terminus-mcp-conformance");
    let out = Command::new(&node)
        .arg(&suite)
        .args([
            "client",
            "--command",
            client,
            "--requirements",
            "2026-07-28",
        ])
        .args(["--timeout", "30000"])
        .output()
        .expect("the suite runs");
    let text = strip_ansi(&format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ));
    let summary = text
        .split("=== SUITE SUMMARY ===")
        .nth(1)
        .unwrap_or_else(|| panic!("no suite summary:\n{text}"));
    println!("{summary}");
    // `✓ name: 2 passed, 0 failed` or `✗ name: ...`, one a scenario.
    let mut passed = Vec::new();
    let mut failed = Vec::new();
    for line in summary.lines() {
        let line = line.trim();
        let (list, rest) = if let Some(rest) = line.strip_prefix("✓ ") {
            (&mut passed, rest)
        } else if let Some(rest) = line.strip_prefix("✗ ") {
            (&mut failed, rest)
        } else {
            continue;
        };
        if let Some((name, counts)) = rest.split_once(": ")
            && counts.contains("passed")
        {
            list.push(name.to_owned());
        }
    }
    passed.sort();
    failed.sort();
    let mut want_passed: Vec<String> = SCENARIOS_2026
        .iter()
        .chain(&UNSCORED_PASSING_2026)
        .map(|s| (*s).to_owned())
        .collect();
    want_passed.sort();
    let mut want_failed: Vec<String> = NOT_PASSING_2026
        .iter()
        .map(|(s, _)| (*s).to_owned())
        .collect();
    want_failed.sort();
    assert_eq!(
        passed, want_passed,
        "the passing 2026-07-28 scenarios:\n{text}"
    );
    assert_eq!(
        failed, want_failed,
        "the failing 2026-07-28 scenarios:\n{text}"
    );
    assert!(
        out.status.success(),
        "the 2026-07-28 requirement set failed:\n{text}"
    );
    assert!(
        summary.contains(" 0 warnings"),
        "a 2026-07-28 check warned:\n{text}"
    );
}

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
