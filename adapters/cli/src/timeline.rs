//! The timeline picture of `terminus inspect --svg`: a run's states over its steps (a lane per
//! state, the path stepping between lanes), its model calls, tool calls, nudges and
//! verifications as marks at their steps, every bounded budget as a bar filling up, and the stop
//! reason in the title. Hand-written SVG, drawn from the [`Explanation`] alone, so the same run
//! always gives the same bytes.
//!
//! Marks carry classes tests and style sheets can find: `mark model-call` (one per model call:
//! at the step its answer arrived, or hollow at the last step when it was never answered),
//! `mark tool-call` (one per tool execution, at the step that started it), `mark tool-error`,
//! `mark nudge`, `mark verification`.

use std::fmt::Write as _;
use terminus_kernel::Phase;
use terminus_runtime::explain::{Budget, Explanation};

const WIDTH: f64 = 960.0;
const LEFT: f64 = 150.0;
const RIGHT: f64 = 30.0;
const LANE: f64 = 26.0;
const ROW: f64 = 22.0;

/// Text for an SVG text node or attribute.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A coordinate, with one decimal: enough for a screen, and stable text.
fn n(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map_or(s.clone(), str::to_owned)
}

fn lane(phase: Phase) -> usize {
    Phase::ALL.iter().position(|p| *p == phase).unwrap_or(0)
}

fn lane_color(phase: Phase) -> &'static str {
    match phase {
        Phase::Complete => "#1a7f37",
        Phase::Aborted => "#cf222e",
        _ => "#24292f",
    }
}

/// The bar's fill: green, amber from 80 %, red once reached.
fn bar_color(b: &Budget, ratio: f64) -> &'static str {
    if b.reached || b.stopped {
        "#cf222e"
    } else if ratio >= 0.8 {
        "#bf8700"
    } else {
        "#2da44e"
    }
}

/// Lines of at most `width` characters.
fn lines(text: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            out.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push(line);
    }
    out
}

/// The run's timeline as an SVG document.
pub(crate) fn svg(e: &Explanation) -> String {
    let steps = e.path.len();
    let plot = WIDTH - LEFT - RIGHT;
    let dx = plot / steps.max(1) as f64;
    let x = |step: u32| LEFT + f64::from(step) * dx;

    let title_h = 62.0;
    let lanes_top = title_h;
    let lanes_h = LANE * Phase::ALL.len() as f64;
    let y_lane = |phase: Phase| lanes_top + LANE * lane(phase) as f64 + LANE / 2.0;
    let marks_top = lanes_top + lanes_h + 8.0;
    let rows = [
        "model calls",
        "tool calls",
        "nudges, notices",
        "verifications",
    ];
    let y_row = |i: usize| marks_top + ROW * i as f64 + ROW / 2.0;
    let axis_y = marks_top + ROW * rows.len() as f64 + 4.0;
    let bars: Vec<&Budget> = e
        .budgets
        .iter()
        .filter(|b| b.limit.is_some() && (b.used.is_some() || b.stopped))
        .collect();
    let bars_top = axis_y + 50.0;
    let bar_rows = bars.len().div_ceil(2);
    let why_top = bars_top + 22.0 * bar_rows as f64 + 16.0;
    let why = lines(&e.why, 150);
    let height = why_top + 15.0 * why.len() as f64 + 12.0;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="Helvetica, Arial, sans-serif" font-size="12">"#,
        w = n(WIDTH),
        h = n(height)
    );
    let _ = writeln!(
        s,
        r##"<rect x="0" y="0" width="{}" height="{}" fill="#ffffff"/>"##,
        n(WIDTH),
        n(height)
    );

    // Title: the run and how it stopped.
    let name = e.name.as_deref().unwrap_or(&e.execution);
    let how = match (e.outcome, e.reason, e.rule) {
        (Some(o), Some(r), Some(rule)) => format!("{o} ({r}), rule {}", rule.name()),
        _ => e.status.to_owned(),
    };
    let color = match e.outcome {
        Some("complete") => "#1a7f37",
        Some(_) => "#cf222e",
        None => "#57606a",
    };
    let _ = writeln!(
        s,
        r##"<text x="16" y="24" font-size="17" font-weight="bold" fill="#24292f">{} <tspan fill="{color}">{}</tspan></text>"##,
        esc(name),
        esc(&format!("— {how}"))
    );
    let stats = e.stats.unwrap_or_default();
    let _ = writeln!(
        s,
        r##"<text x="16" y="44" fill="#57606a">{}</text>"##,
        esc(&format!(
            "steps {} · model calls {} · tool calls {} · nudges {} · verifications {} · tokens {}",
            stats.steps,
            stats.model_calls,
            stats.tool_calls,
            stats.nudges,
            stats.verifications,
            stats.tokens()
        ))
    );

    // Lanes, one per state.
    for phase in Phase::ALL {
        let top = lanes_top + LANE * lane(phase) as f64;
        let fill = if lane(phase).is_multiple_of(2) {
            "#f6f8fa"
        } else {
            "#ffffff"
        };
        let _ = writeln!(
            s,
            r#"<rect class="lane" x="{}" y="{}" width="{}" height="{}" fill="{fill}"/>"#,
            n(LEFT - 6.0),
            n(top),
            n(plot + 12.0),
            n(LANE)
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end" fill="{}">{}</text>"#,
            n(LEFT - 12.0),
            n(top + LANE / 2.0 + 4.0),
            lane_color(phase),
            phase.as_str()
        );
    }

    // The path: from Exploring at step 0, along the state it was in, then to the next state.
    let mut points = vec![format!("{},{}", n(x(0)), n(y_lane(Phase::Exploring)))];
    for step in &e.path {
        points.push(format!("{},{}", n(x(step.step)), n(y_lane(step.from))));
        points.push(format!("{},{}", n(x(step.step)), n(y_lane(step.to))));
    }
    let _ = writeln!(
        s,
        r##"<polyline class="path" points="{}" fill="none" stroke="#0969da" stroke-width="2" stroke-linejoin="round"/>"##,
        points.join(" ")
    );
    for (step, record) in e.path.iter().zip(&e.trace) {
        let _ = writeln!(
            s,
            r##"<circle class="step" cx="{}" cy="{}" r="3" fill="#0969da"><title>{}</title></circle>"##,
            n(x(step.step)),
            n(y_lane(step.to)),
            esc(&record.to_string())
        );
    }

    // Where it ended.
    if let Some(end) = e.path.last().filter(|p| p.to.is_terminal()) {
        let _ = writeln!(
            s,
            r#"<circle class="end" cx="{}" cy="{}" r="7" fill="none" stroke="{}" stroke-width="2.5"/>"#,
            n(x(end.step)),
            n(y_lane(end.to)),
            lane_color(end.to)
        );
    }

    // Marks.
    for (i, label) in rows.iter().enumerate() {
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" text-anchor="end" fill="#57606a">{label}</text>"##,
            n(LEFT - 12.0),
            n(y_row(i) + 4.0)
        );
        let _ = writeln!(
            s,
            r##"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="#d0d7de" stroke-dasharray="2,3"/>"##,
            n(LEFT - 6.0),
            n(LEFT + plot + 6.0),
            y = n(y_row(i))
        );
    }
    for step in &e.path {
        let cx = x(step.step);
        if let Some(model) = step.model {
            let (fill, what) = if model == "turn" {
                ("#8250df", "model answered".to_owned())
            } else {
                ("#cf222e", format!("model error {model}"))
            };
            let _ = writeln!(
                s,
                r#"<circle class="mark model-call" cx="{}" cy="{}" r="5" fill="{fill}"><title>step {}: {}</title></circle>"#,
                n(cx),
                n(y_row(0)),
                step.step,
                esc(&what)
            );
        }
        let calls = step.tool_calls.len();
        for (j, tool) in step.tool_calls.iter().enumerate() {
            let offset = (j as f64 - (calls as f64 - 1.0) / 2.0) * 4.0;
            let _ = writeln!(
                s,
                r##"<rect class="mark tool-call" x="{}" y="{}" width="8" height="8" fill="#0a3069"><title>step {}: {}</title></rect>"##,
                n(cx - 4.0 + offset),
                n(y_row(1) - 4.0 + offset),
                step.step,
                esc(tool)
            );
        }
        for err in &step.tool_errors {
            let (a, b, y) = (cx - 4.0, cx + 4.0, y_row(1));
            let _ = writeln!(
                s,
                r##"<path class="mark tool-error" d="M{} {} L{} {} M{} {} L{} {}" stroke="#cf222e" stroke-width="2"><title>step {}: {} failed: {}</title></path>"##,
                n(a),
                n(y - 4.0),
                n(b),
                n(y + 4.0),
                n(a),
                n(y + 4.0),
                n(b),
                n(y - 4.0),
                step.step,
                esc(&err.tool),
                esc(err.kind)
            );
        }
        if let Some(kind) = step.nudge {
            let y = y_row(2);
            let _ = writeln!(
                s,
                r##"<path class="mark nudge" d="M{} {} L{} {} L{} {} Z" fill="#bf8700"><title>step {}: nudge ({kind})</title></path>"##,
                n(cx),
                n(y - 6.0),
                n(cx + 6.0),
                n(y + 5.0),
                n(cx - 6.0),
                n(y + 5.0),
                step.step
            );
        }
        for notice in &step.notices {
            let y = y_row(2);
            let _ = writeln!(
                s,
                r##"<path class="mark notice" d="M{} {} L{} {} L{} {} Z" fill="none" stroke="#bf8700" stroke-width="1.5"><title>step {}: notice: {}</title></path>"##,
                n(cx),
                n(y + 6.0),
                n(cx + 6.0),
                n(y - 5.0),
                n(cx - 6.0),
                n(y - 5.0),
                step.step,
                esc(notice)
            );
        }
        if let Some(accepted) = step.verdict {
            let y = y_row(3);
            let (fill, what) = if accepted {
                ("#1a7f37", "accepted")
            } else {
                ("#cf222e", "rejected")
            };
            let _ = writeln!(
                s,
                r#"<path class="mark verification" d="M{} {} L{} {} L{} {} L{} {} Z" fill="{fill}"><title>step {}: verdict {what}</title></path>"#,
                n(cx),
                n(y - 6.0),
                n(cx + 6.0),
                n(y),
                n(cx),
                n(y + 6.0),
                n(cx - 6.0),
                n(y),
                step.step
            );
        }
    }
    let last = e.path.last().map_or(0, |p| p.step);
    for k in 0..e.unanswered_model_calls {
        let _ = writeln!(
            s,
            r##"<circle class="mark model-call unanswered" cx="{}" cy="{}" r="5" fill="none" stroke="#8250df" stroke-width="2"><title>step {last}: a model call never answered</title></circle>"##,
            n(x(last) + 12.0 * f64::from(k + 1)),
            n(y_row(0))
        );
    }

    // The step axis.
    let _ = writeln!(
        s,
        r##"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="#57606a"/>"##,
        n(LEFT),
        n(LEFT + plot),
        y = n(axis_y)
    );
    let every = (steps / 20).max(1);
    let mut tick = 0;
    while tick <= steps {
        let tx = x(u32::try_from(tick).unwrap_or(u32::MAX));
        let _ = writeln!(
            s,
            r##"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="#57606a"/><text x="{x}" y="{}" text-anchor="middle" font-size="10" fill="#57606a">{tick}</text>"##,
            n(axis_y),
            n(axis_y + 4.0),
            n(axis_y + 15.0),
            x = n(tx)
        );
        tick += every;
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="end" fill="#57606a">step</text>"##,
        n(LEFT - 12.0),
        n(axis_y + 15.0)
    );

    // Budgets as bars filling up, two columns.
    let _ = writeln!(
        s,
        r##"<text x="16" y="{}" font-weight="bold" fill="#24292f">budgets (spent / limit)</text>"##,
        n(bars_top - 8.0)
    );
    let col_w = (WIDTH - 32.0) / 2.0;
    let bar_w = 150.0;
    for (i, b) in bars.iter().enumerate() {
        let left = 16.0 + col_w * (i % 2) as f64;
        let top = bars_top + 22.0 * (i / 2) as f64;
        let limit = b.limit.unwrap_or(0);
        let (ratio, label) = match b.used {
            Some(used) => {
                let ratio = if limit == 0 {
                    1.0
                } else {
                    (used as f64 / limit as f64).min(1.0)
                };
                (ratio, format!("{used} / {limit}"))
            }
            None => (1.0, format!("{limit} ms, passed")),
        };
        let stopped = if b.stopped { "stopped the run" } else { "" };
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" fill="#24292f">{}</text>"##,
            n(left),
            n(top + 11.0),
            esc(b.field)
        );
        let bx = left + 200.0;
        let _ = writeln!(
            s,
            r##"<rect class="budget" x="{}" y="{}" width="{}" height="12" rx="2" fill="#eaeef2"/>"##,
            n(bx),
            n(top + 1.0),
            n(bar_w)
        );
        let _ = writeln!(
            s,
            r#"<rect class="budget-fill" x="{}" y="{}" width="{}" height="12" rx="2" fill="{}"><title>{}</title></rect>"#,
            n(bx),
            n(top + 1.0),
            n(bar_w * ratio),
            bar_color(b, ratio),
            esc(&format!("{}: {label}", b.counter))
        );
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" fill="#57606a">{}<tspan dx="10" fill="#cf222e">{stopped}</tspan></text>"##,
            n(bx + bar_w + 8.0),
            n(top + 11.0),
            esc(&label)
        );
    }

    // Why it stopped.
    for (i, line) in why.iter().enumerate() {
        let _ = writeln!(
            s,
            r##"<text x="16" y="{}" font-size="11" fill="#24292f">{}</text>"##,
            n(why_top + 15.0 * i as f64),
            esc(line)
        );
    }
    s.push_str("</svg>\n");
    s
}
