//! `terminus inspect --svg`: the timeline is well-formed SVG with one mark per model call, tool
//! call, nudge and verification of the run, the stop reason in its title, the same bytes on every
//! run, and the picture committed under `spec/` is up to date (`TERMINUS_BLESS=1 cargo test -p
//! terminus-cli --test timeline` rewrites it; render the PNG beside it with `rsvg-convert`).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The timeline and the JSON explanation of a scenario run in memory.
fn timeline(name: &str, dir: &Path) -> (String, Value) {
    let file = root().join(format!("spec/scenarios/{name}.json"));
    let svg = dir.join(format!("{name}.svg"));
    let out = Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(["inspect", "--scenario"])
        .arg(&file)
        .arg("--svg")
        .arg(&svg)
        .arg("--json")
        .output()
        .expect("the binary runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let explanation: Value =
        serde_json::from_slice(out.stdout.trim_ascii()).expect("the JSON explanation");
    (
        std::fs::read_to_string(&svg).expect("the SVG is written"),
        explanation,
    )
}

fn marks(doc: &roxmltree::Document<'_>, class: &str) -> usize {
    doc.descendants()
        .filter(|n| {
            n.attribute("class")
                .is_some_and(|c| c.split_whitespace().any(|w| w == class))
        })
        .count()
}

#[test]
fn the_timeline_has_a_mark_per_call_nudge_and_verification() {
    let dir = tempfile::tempdir().expect("temp dir");
    for name in [
        "architect-stops-early",
        "repeated-failing-call",
        "slow-tool-deadline",
        "host-cancels",
        "rate-limited-forever",
        "verification-loop",
        "recursion-limit",
    ] {
        let (svg, e) = timeline(name, dir.path());
        let doc = roxmltree::Document::parse(&svg)
            .unwrap_or_else(|err| panic!("{name}: not well-formed XML: {err}"));
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg", "{name}");
        assert_eq!(
            root.tag_name().namespace(),
            Some("http://www.w3.org/2000/svg")
        );
        let stat = |field: &str| e["stats"][field].as_u64().unwrap_or(0) as usize;
        assert_eq!(
            marks(&doc, "model-call"),
            stat("model_calls"),
            "{name}: model calls"
        );
        assert_eq!(
            marks(&doc, "tool-call"),
            stat("tool_calls"),
            "{name}: tool calls"
        );
        assert_eq!(
            marks(&doc, "tool-error"),
            stat("tool_failures"),
            "{name}: tool errors"
        );
        assert_eq!(
            marks(&doc, "verification"),
            stat("verifications"),
            "{name}: verifications"
        );
        let path = e["path"].as_array().expect("a path");
        let nudges = path.iter().filter(|s| s["nudge"].is_string()).count();
        assert_eq!(marks(&doc, "nudge"), nudges, "{name}: nudges");
        assert_eq!(
            marks(&doc, "step"),
            path.len(),
            "{name}: one point per step"
        );
        // The title says how the run stopped.
        let title = doc
            .descendants()
            .find(|n| n.has_tag_name("text"))
            .map(|n| n.descendants().filter_map(|t| t.text()).collect::<String>())
            .unwrap_or_default();
        let reason = e["reason"].as_str().unwrap_or_default();
        assert!(title.contains(&format!("({reason})")), "{name}: {title}");
        // A bar for every budget with a limit, the one that stopped the run among them.
        let bars = marks(&doc, "budget-fill");
        assert!(bars >= 10, "{name}: {bars} bars");
        // The same run draws the same bytes.
        assert_eq!(timeline(name, dir.path()).0, svg, "{name}: deterministic");
    }
}

#[test]
fn the_committed_timeline_is_up_to_date() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (svg, _) = timeline("architect-stops-early", dir.path());
    let path = root().join("spec/timeline-architect-stops-early.svg");
    if std::env::var_os("TERMINUS_BLESS").is_some() {
        std::fs::write(&path, &svg).expect("write the timeline");
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        stored == svg,
        "{} is out of date; run `TERMINUS_BLESS=1 cargo test -p terminus-cli --test timeline`",
        path.display()
    );
}
