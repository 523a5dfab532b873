//! Degenerate repetition: a reply whose text ends in the same window repeated over and over (a
//! small model once wrote the same four list items 88 times, until its 2,048-token cap, at two
//! tokens a second). [`find`] sees it in a reply's text as it streams; the adapter then stops
//! reading, and the turn (finish [`crate::Finish::Repetition`], the text cut after the window's
//! first occurrence) is a no-op ([`crate::NoOpKind::Repetitive`]): never an answer, answered
//! with a note that tells the model it repeated itself, and bounded by `max_no_ops`.

/// The shortest window that counts: shorter runs are lists, tables and code that legitimately
/// repeat a line.
pub const MIN_WINDOW: usize = 64;
/// How many times in a row the window must occur.
pub const MIN_TIMES: usize = 4;
/// The longest window looked for.
pub const MAX_WINDOW: usize = 2048;

/// A repetition the text ends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repeated {
    /// Where the repeated run starts, in bytes.
    pub start: usize,
    /// The window's length, in bytes.
    pub window: usize,
    /// How many whole windows the run holds.
    pub times: usize,
}

impl Repeated {
    /// Where the text is cut: after the window's first occurrence (on a character boundary of
    /// `text`, the text `find` was given).
    pub fn cut(&self, text: &str) -> usize {
        let mut at = (self.start + self.window).min(text.len());
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        at
    }
}

/// Whether `text` ends with a window of at least [`MIN_WINDOW`] bytes (holding a letter or a
/// digit) repeated at least [`MIN_TIMES`] times in a row, and where that run starts. The
/// shortest such window wins. Linear in the text for ordinary prose (each candidate window
/// fails at its first differing byte); at most [`MAX_WINDOW`] candidates.
pub fn find(text: &str) -> Option<Repeated> {
    let s = text.trim_end().as_bytes();
    let n = s.len();
    if n < MIN_WINDOW * MIN_TIMES {
        return None;
    }
    let longest = (n / MIN_TIMES).min(MAX_WINDOW);
    for p in MIN_WINDOW..=longest {
        // The last `MIN_TIMES` windows equal: s[i] == s[i - p] for the last (MIN_TIMES - 1) * p
        // bytes, compared from the end.
        let span = (MIN_TIMES - 1) * p;
        if !(1..=span).all(|k| s[n - k] == s[n - k - p]) {
            continue;
        }
        // A run that also repeats a shorter window is short lines repeated (a table's rows,
        // code, a rule of dashes): not degenerate.
        let run = &s[n - MIN_TIMES * p..];
        if (1..MIN_WINDOW).any(|q| (q..run.len()).all(|i| run[i] == run[i - q])) {
            return None;
        }
        let window = &s[n - p..];
        if !window.iter().any(u8::is_ascii_alphanumeric) && window.is_ascii() {
            continue;
        }
        // The run goes back as long as the text keeps the period.
        let mut start = n - MIN_TIMES * p;
        while start > 0 && s[start - 1] == s[start - 1 + p] {
            start -= 1;
        }
        return Some(Repeated {
            start,
            window: p,
            times: (n - start) / p,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reply of the issue: four list items over and over, as the model streamed them.
    fn degenerate(times: usize) -> String {
        let items = "- Count the words of each file.\n- Count the lines.\n- Accept several files.\n- Add tests.\n";
        format!("Here is the plan:\n{}", items.repeat(times))
    }

    #[test]
    fn the_four_items_repeated_are_found_and_cut_after_their_first_occurrence() {
        let text = degenerate(88);
        let r = find(&text).expect("a repetition");
        let items = degenerate(1).len() - "Here is the plan:\n".len();
        assert_eq!(r.window, items);
        assert_eq!(r.times, 88);
        let kept = &text[..r.cut(&text)];
        assert_eq!(kept, degenerate(1).trim_end());
    }

    #[test]
    fn three_times_is_not_enough() {
        assert_eq!(find(&degenerate(3)), None);
        assert!(find(&degenerate(4)).is_some());
    }

    #[test]
    fn short_repeated_lines_tables_and_code_are_not_degenerate() {
        let table = format!("| a | b |\n|---|---|\n{}", "| x | 1 |\n".repeat(40));
        let code = "fn a() {}\n".repeat(30);
        let rule = "-".repeat(400);
        let prose = "The kernel stops every run with a named reason. ".repeat(3);
        for text in [table.as_str(), code.as_str(), rule.as_str(), prose.as_str()] {
            assert_eq!(find(text), None, "{text}");
        }
    }

    #[test]
    fn a_repetition_in_the_middle_is_not_one_the_text_ends_with() {
        let text = format!("{}And then a proper ending.", degenerate(10));
        assert_eq!(find(&text), None);
    }

    #[test]
    fn the_cut_is_on_a_character_boundary() {
        let window = "Prüfe die Wörter jeder Datei und zähle sie alle genau; é à ü ö ß. "; // 64+ bytes
        assert!(window.len() >= MIN_WINDOW);
        let text = window.repeat(5);
        let r = find(&text).expect("a repetition");
        let at = r.cut(&text);
        assert!(text.is_char_boundary(at));
        assert!(at <= 2 * window.len());
    }
}
