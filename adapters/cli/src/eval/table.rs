//! The eval's table: per task and condition, the four counts of outcome against check (a trial
//! succeeds only when its run ended `complete` **and** its check passed), pass@1 and pass^k, the
//! outcomes, and the sums and medians of the run's figures; then one line per condition over the
//! whole suite. Pure: the same trials give the same table, byte for byte.

use super::{ConditionSpec, TaskSpec, Trial};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One line of the table: a task under a condition.
pub(super) struct Row {
    pub(super) task: String,
    pub(super) condition: String,
    pub(super) trials: usize,
    /// Ended `complete` and the check passed: the only success.
    pub(super) complete_passed: usize,
    /// Ended `complete` and the check failed: a false completion.
    pub(super) complete_failed: usize,
    /// Aborted (or the run could not finish) but the check passed.
    pub(super) aborted_passed: usize,
    /// Aborted and the check failed.
    pub(super) aborted_failed: usize,
    /// pass^k for k = 1 .. trials (pass^1 is pass@1).
    pub(super) pass: Vec<f64>,
    pub(super) outcomes: BTreeMap<String, usize>,
    pub(super) model_calls: Option<f64>,
    pub(super) tokens: Option<f64>,
    pub(super) wall_s: Option<f64>,
    pub(super) text_tool_calls: u64,
    pub(super) non_answers: u64,
    pub(super) verifications: u64,
    pub(super) errors: usize,
}

impl Row {
    pub(super) fn json(&self) -> Value {
        json!({
            "task": self.task,
            "condition": self.condition,
            "trials": self.trials,
            "successes": self.complete_passed,
            "complete_passed": self.complete_passed,
            "complete_failed": self.complete_failed,
            "aborted_passed": self.aborted_passed,
            "aborted_failed": self.aborted_failed,
            "pass_at_1": self.pass.first().copied().unwrap_or(0.0),
            "pass_k": self.pass,
            "outcomes": self.outcomes,
            "median_model_calls": self.model_calls,
            "median_tokens": self.tokens,
            "median_wall_s": self.wall_s,
            "text_tool_calls": self.text_tool_calls,
            "non_answers": self.non_answers,
            "verifications": self.verifications,
            "errors": self.errors,
        })
    }
}

/// Whether a trial succeeded: its run ended `complete` and its check passed.
pub(super) fn succeeded(t: &Trial) -> bool {
    t.passed && completed(t)
}

fn completed(t: &Trial) -> bool {
    t.report.as_ref().is_some_and(|r| r.outcome == "complete")
}

pub(super) fn rows(
    tasks: &[&TaskSpec],
    conditions: &[ConditionSpec],
    trials: &[Trial],
) -> Vec<Row> {
    let mut rows = Vec::new();
    for task in tasks {
        for condition in conditions {
            let these: Vec<&Trial> = trials
                .iter()
                .filter(|t| t.task == task.name && t.condition == condition.name)
                .collect();
            let n = these.len();
            let count = |complete: bool, passed: bool| {
                these
                    .iter()
                    .filter(|t| completed(t) == complete && t.passed == passed)
                    .count()
            };
            let successes = count(true, true);
            let mut outcomes = BTreeMap::new();
            for t in &these {
                let key = match &t.report {
                    Some(r) => format!("{} ({})", r.outcome, r.reason),
                    None => "error".to_owned(),
                };
                *outcomes.entry(key).or_insert(0) += 1;
            }
            let reports: Vec<_> = these.iter().filter_map(|t| t.report.as_ref()).collect();
            rows.push(Row {
                task: task.name.clone(),
                condition: condition.name.clone(),
                trials: n,
                complete_passed: successes,
                complete_failed: count(true, false),
                aborted_passed: count(false, true),
                aborted_failed: count(false, false),
                pass: (1..=n).map(|k| pass_k(n, successes, k)).collect(),
                outcomes,
                model_calls: median(reports.iter().map(|r| f64::from(r.model_calls)).collect()),
                tokens: median(reports.iter().map(|r| r.tokens as f64).collect()),
                wall_s: median(these.iter().map(|t| t.wall_ms as f64 / 1000.0).collect()),
                text_tool_calls: reports.iter().map(|r| u64::from(r.text_tool_calls)).sum(),
                non_answers: reports.iter().map(|r| u64::from(r.non_answers)).sum(),
                verifications: reports.iter().map(|r| u64::from(r.verifications)).sum(),
                errors: these.iter().filter(|t| t.error.is_some()).count(),
            });
        }
    }
    rows
}

/// pass^k: the chance that `k` trials drawn from `n` with `c` successes all succeed,
/// C(c, k) / C(n, k).
pub(super) fn pass_k(n: usize, c: usize, k: usize) -> f64 {
    if k == 0 || k > n {
        return 0.0;
    }
    (0..k)
        .map(|i| (c.saturating_sub(i)) as f64 / (n - i) as f64)
        .product()
}

pub(super) fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

/// The table, as Markdown: one row per task and condition, then one per condition over the suite.
pub(super) fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| task | condition | trials | success: complete, passed | false completions: complete, failed | aborted, passed | aborted, failed | errors | pass@1 | pass^k, k = 2..n | outcomes (count) | model calls (median) | tokens (median) | wall s (median) | written calls run (sum) | non-answers refused (sum) | verdicts (sum) |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let num = |v: Option<f64>, digits: usize| v.map_or("-".to_owned(), |v| format!("{v:.digits$}"));
    for r in rows {
        let outcomes: Vec<String> = r
            .outcomes
            .iter()
            .map(|(k, v)| format!("{k} x{v}"))
            .collect();
        let pass_k: Vec<String> = r.pass.iter().skip(1).map(|p| format!("{p:.2}")).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.task,
            r.condition,
            r.trials,
            r.complete_passed,
            r.complete_failed,
            r.aborted_passed,
            r.aborted_failed,
            r.errors,
            num(r.pass.first().copied(), 2),
            if pass_k.is_empty() {
                "-".to_owned()
            } else {
                pass_k.join(" ")
            },
            outcomes.join(", "),
            num(r.model_calls, 1),
            num(r.tokens, 0),
            num(r.wall_s, 1),
            r.text_tool_calls,
            r.non_answers,
            r.verifications,
        );
    }
    out.push_str(
        "\n| condition | trials (sum) | success (sum) | false completions (sum) | aborted, passed (sum) | aborted, failed (sum) | errors (sum) |\n\
         |---|---|---|---|---|---|---|\n",
    );
    let mut conditions: Vec<&str> = Vec::new();
    for r in rows {
        if !conditions.contains(&r.condition.as_str()) {
            conditions.push(&r.condition);
        }
    }
    for c in conditions {
        let sum = |f: fn(&Row) -> usize| -> usize {
            rows.iter().filter(|r| r.condition == c).map(f).sum()
        };
        let _ = writeln!(
            out,
            "| {c} | {} | {} | {} | {} | {} | {} |",
            sum(|r| r.trials),
            sum(|r| r.complete_passed),
            sum(|r| r.complete_failed),
            sum(|r| r.aborted_passed),
            sum(|r| r.aborted_failed),
            sum(|r| r.errors),
        );
    }
    out
}

/// A bar chart of the success rates: one group per task, one bar per condition.
pub(super) fn svg(rows: &[Row]) -> String {
    let mut conditions: Vec<&str> = Vec::new();
    let mut tasks: Vec<&str> = Vec::new();
    for r in rows {
        if !conditions.contains(&r.condition.as_str()) {
            conditions.push(&r.condition);
        }
        if !tasks.contains(&r.task.as_str()) {
            tasks.push(&r.task);
        }
    }
    const COLORS: [&str; 4] = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1"];
    let (bar, gap, height, top, left) = (28.0, 24.0, 200.0, 30.0, 40.0);
    let group = bar * conditions.len() as f64 + gap;
    let width = left + group * tasks.len() as f64 + 20.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{:.0}\" font-family=\"sans-serif\" font-size=\"11\">\n",
        top + height + 60.0
    );
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"16\">success (complete and check passed), per task and condition</text>"
    );
    for pct in [0.0, 0.5, 1.0] {
        let y = top + height * (1.0 - pct);
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/><text x=\"4\" y=\"{:.1}\">{:.0}%</text>",
            width - 10.0,
            y + 4.0,
            pct * 100.0
        );
    }
    for (i, task) in tasks.iter().enumerate() {
        let x0 = left + gap / 2.0 + group * i as f64;
        for (j, condition) in conditions.iter().enumerate() {
            let Some(r) = rows
                .iter()
                .find(|r| r.task == *task && r.condition == *condition)
            else {
                continue;
            };
            let rate = if r.trials == 0 {
                0.0
            } else {
                r.complete_passed as f64 / r.trials as f64
            };
            let h = height * rate;
            let x = x0 + bar * j as f64;
            let _ = writeln!(
                s,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{}\"><title>{task} / {condition}: {}/{}</title></rect>",
                top + height - h,
                bar - 4.0,
                COLORS[j % COLORS.len()],
                r.complete_passed,
                r.trials
            );
        }
        let _ = writeln!(
            s,
            "<text x=\"{x0:.1}\" y=\"{:.1}\">{}</text>",
            top + height + 16.0,
            xml(task)
        );
    }
    for (j, condition) in conditions.iter().enumerate() {
        let x = left + 120.0 * j as f64;
        let y = top + height + 40.0;
        let _ = writeln!(
            s,
            "<rect x=\"{x}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{y:.1}\">{}</text>",
            y - 9.0,
            COLORS[j % COLORS.len()],
            x + 14.0,
            xml(condition)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_k_is_the_chance_that_all_k_trials_succeed() {
        assert_eq!(pass_k(3, 3, 3), 1.0);
        assert_eq!(pass_k(3, 2, 3), 0.0);
        assert!((pass_k(4, 3, 2) - 0.5).abs() < 1e-12); // 3/4 * 2/3
        assert_eq!(pass_k(0, 0, 0), 0.0);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }
}
