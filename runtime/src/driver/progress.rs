//! The few words on an event that progress lines show.

use std::fmt::Write as _;
use terminus_kernel::{Event, Finish, ToolOutcome, textcall};

/// A few words on an event, for progress lines.
pub(super) fn summarize(event: &Event, detail: Option<&str>) -> String {
    let mut s = String::new();
    match event {
        Event::ModelTurn(turn) if !turn.tool_calls.is_empty() => {
            s.push_str("calls ");
            for (i, call) in turn.tool_calls.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                s.push_str(&call.name);
            }
            if turn.recovered_calls() > 0 {
                s.push_str(" (written as text, recovered)");
            }
        }
        Event::ModelTurn(turn) if turn.finish == Finish::Repetition => {
            let _ = write!(
                s,
                "reply cut: it repeated itself ({} characters kept)",
                turn.text.chars().count()
            );
        }
        Event::ModelTurn(turn) if let Some(written) = textcall::find(&turn.text) => {
            let _ = write!(
                s,
                "tool call written as text, not run: {}",
                written.names().join(", ")
            );
        }
        Event::ModelTurn(turn) => {
            let text = turn.text.trim();
            if text.is_empty() {
                s.push_str("no content");
            } else {
                let preview: String = text.chars().take(60).collect();
                let _ = write!(s, "{preview:?}");
                if preview.len() < text.len() {
                    s.push('…');
                }
            }
            match turn.needs_more_work {
                Some(true) => s.push_str(" needs_more_work: true"),
                Some(false) => s.push_str(" needs_more_work: false"),
                None => {}
            }
        }
        Event::ModelError { kind, .. } => {
            s.push_str(kind.as_str());
            if let Some(detail) = detail {
                s.push_str(": ");
                s.push_str(detail);
            }
        }
        Event::ToolResults(results) => {
            for (i, r) in results.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                s.push_str(&r.name);
                match &r.outcome {
                    ToolOutcome::Ok(_) => s.push_str(" ok"),
                    ToolOutcome::Error { kind, .. } => {
                        s.push(' ');
                        s.push_str(kind.as_str());
                    }
                }
            }
        }
        Event::Verdict(v) => {
            if v.complete {
                s.push_str("verdict: complete");
            } else {
                s.push_str("verdict: incomplete");
                if !v.missing.is_empty() {
                    s.push_str(" (missing: ");
                    s.push_str(&v.missing.join("; "));
                    s.push(')');
                }
            }
        }
        Event::Tick { now_ms } => {
            let _ = write!(s, "clock at {now_ms} ms");
        }
        Event::Cancel => s.push_str("kill switch"),
        other => s.push_str(other.label()),
    }
    s
}
