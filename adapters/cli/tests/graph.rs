//! `terminus graph`: the machine drawn from the kernel's transition table. Every rule and every
//! state is drawn, terminal states have no way out, the output is the same on every run, and
//! the generated files (`spec/machine.dot`, the mermaid block of README.md) are up to date:
//! `TERMINUS_BLESS=1 cargo test -p terminus-cli --test graph` rewrites them.

use std::path::PathBuf;
use std::process::Command;
use terminus_kernel::{Phase, Rule};

fn graph(format: Option<&str>) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_terminus"));
    command.arg("graph");
    if let Some(f) = format {
        command.args(["--format", f]);
    }
    let out = command.output().expect("the binary runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The (from, to, label) edges of a mermaid diagram, start and end markers left out.
fn mermaid_edges(text: &str) -> Vec<(String, String, String)> {
    text.lines()
        .filter_map(|l| {
            let (pair, label) = l.trim().split_once(": ")?;
            let (from, to) = pair.split_once(" --> ")?;
            Some((
                from.trim().to_owned(),
                to.trim().to_owned(),
                label.to_owned(),
            ))
        })
        .filter(|(from, to, _)| from != "[*]" && to != "[*]")
        .collect()
}

#[test]
fn mermaid_draws_every_rule_and_state_and_nothing_leaves_a_terminal_state() {
    let text = graph(None);
    assert_eq!(text, graph(Some("mermaid")), "mermaid is the default");
    assert!(
        text.starts_with("stateDiagram-v2\n    [*] --> Exploring\n"),
        "{text}"
    );
    let edges = mermaid_edges(&text);
    for phase in Phase::ALL {
        assert!(
            edges
                .iter()
                .any(|(f, t, _)| f == phase.as_str() || t == phase.as_str()),
            "{} is not drawn",
            phase.as_str()
        );
        if phase.is_terminal() {
            assert!(
                !edges.iter().any(|(f, _, _)| f == phase.as_str()),
                "{} has a way out",
                phase.as_str()
            );
            assert!(text.contains(&format!("    {} --> [*]\n", phase.as_str())));
        }
    }
    for rule in Rule::ALL {
        let drawn: Vec<(String, String)> = edges
            .iter()
            .filter(|(_, _, label)| label.split(", ").any(|r| r == rule.name()))
            .map(|(f, t, _)| (f.clone(), t.clone()))
            .collect();
        let table: Vec<(String, String)> = rule
            .transitions()
            .iter()
            .map(|(f, t)| (f.as_str().to_owned(), t.as_str().to_owned()))
            .collect();
        assert_eq!(drawn, table, "the edges of {}", rule.name());
        assert!(text.contains(rule.name()), "{} is not drawn", rule.name());
    }
}

#[test]
fn dot_draws_every_rule_and_state_and_nothing_leaves_a_terminal_state() {
    let text = graph(Some("dot"));
    assert!(text.contains("digraph terminus {") && text.trim_end().ends_with('}'));
    for phase in Phase::ALL {
        assert!(text.contains(&format!("    {0} [label=\"{0}\"", phase.as_str())));
        if phase.is_terminal() {
            assert!(
                !text.contains(&format!("    {} -> ", phase.as_str())),
                "{} has a way out",
                phase.as_str()
            );
        }
    }
    for rule in Rule::ALL {
        for (from, to) in rule.transitions() {
            let edge = text
                .lines()
                .find(|l| l.starts_with(&format!("    {} -> {} ", from.as_str(), to.as_str())))
                .unwrap_or_else(|| panic!("no edge {from:?} -> {to:?}"));
            assert!(edge.contains(rule.name()), "{} not on {edge}", rule.name());
        }
        assert!(text.contains(rule.name()), "{} is not drawn", rule.name());
    }
}

#[test]
fn the_graph_is_the_same_on_every_run() {
    for format in ["mermaid", "dot"] {
        assert_eq!(graph(Some(format)), graph(Some(format)), "{format}");
    }
}

#[test]
fn bad_formats_exit_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_terminus"))
        .args(["graph", "--format", "png"])
        .output()
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_generated_files_are_up_to_date() {
    let bless = std::env::var_os("TERMINUS_BLESS").is_some();
    let dot_path = root().join("spec/machine.dot");
    let dot = graph(Some("dot"));
    if bless {
        std::fs::write(&dot_path, &dot).expect("write spec/machine.dot");
    }
    let stored = std::fs::read_to_string(&dot_path).unwrap_or_default();
    assert!(
        stored == dot,
        "spec/machine.dot is out of date; run `TERMINUS_BLESS=1 cargo test -p terminus-cli --test graph`"
    );

    let readme_path = root().join("README.md");
    let readme = std::fs::read_to_string(&readme_path).expect("README.md");
    let (begin, end) = (
        "<!-- BEGIN GENERATED graph -->\n",
        "<!-- END GENERATED graph -->",
    );
    let (Some(b), Some(e)) = (readme.find(begin), readme.find(end)) else {
        panic!("README.md lacks the markers of the generated graph");
    };
    let block = format!("```mermaid\n{}```\n", graph(None));
    let expected = format!("{}{block}{}", &readme[..b + begin.len()], &readme[e..]);
    if bless {
        std::fs::write(&readme_path, &expected).expect("write README.md");
        return;
    }
    assert!(
        readme == expected,
        "the mermaid diagram in README.md is out of date; run `TERMINUS_BLESS=1 cargo test -p terminus-cli --test graph`"
    );
}
