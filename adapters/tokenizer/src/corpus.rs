//! The accuracy corpus: samples of agent traffic in the crate's `corpus/` directory (code,
//! diffs, JSON tool results, configs, shell output and logs, prose, non-Latin text), and the
//! error of the runtime's [`Heuristic`] (a token per four characters) against the exact
//! encodings on them.
//!
//! Shared by the accuracy test (`tests/accuracy.rs`), the example that prints the table
//! (`cargo run --release -p terminus-tokenizer --example accuracy`) and the context bench
//! (`benches/context.rs`, which builds its conversation from these samples). Not part of the
//! crate's API.
//!
//! A sample's category is the prefix of its file name before the first `-` (`code-`, `diff-`,
//! `json-`, `config-`, `log-`, `prose-`, `intl-`); the second part names the language
//! (`code-rust-…`, `intl-zh-…`).

use crate::{Encoding, Tiktoken};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use terminus_runtime::{Heuristic, Tokenizer};

/// What kind of agent traffic a sample is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// Source code (Rust, Python, TypeScript, Go, SQL, shell, C).
    Code,
    /// Unified diffs.
    Diff,
    /// JSON tool results and API responses, pretty-printed and minified.
    Json,
    /// Configuration files: TOML, YAML, INI.
    Config,
    /// Shell output, build and test output, stack traces, logs.
    Log,
    /// English Markdown and plain prose: plans, READMEs, replies, reviews (some with emoji).
    Prose,
    /// Non-Latin text: Chinese, Japanese, Korean, Russian, Arabic, Hindi, emoji-heavy chat.
    NonLatin,
}

impl Category {
    /// Every category, in table order.
    pub const ALL: [Category; 7] = [
        Category::Code,
        Category::Diff,
        Category::Json,
        Category::Config,
        Category::Log,
        Category::Prose,
        Category::NonLatin,
    ];

    /// The file-name prefix of the category's samples (without the `-`).
    pub const fn prefix(self) -> &'static str {
        match self {
            Category::Code => "code",
            Category::Diff => "diff",
            Category::Json => "json",
            Category::Config => "config",
            Category::Log => "log",
            Category::Prose => "prose",
            Category::NonLatin => "intl",
        }
    }

    /// The category of a sample by its file name; `None`: no known prefix.
    pub fn of(file_name: &str) -> Option<Category> {
        let (prefix, _) = file_name.split_once('-')?;
        Category::ALL.into_iter().find(|c| c.prefix() == prefix)
    }
}

/// One sample of the corpus.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The file name.
    pub name: String,
    /// Its category.
    pub category: Category,
    /// The text.
    pub text: String,
}

impl Sample {
    /// The second part of the name: the language (`rust`, `zh`, `ru`) or kind (`github`).
    pub fn tag(&self) -> &str {
        self.name.split('-').nth(1).unwrap_or("")
    }
}

/// The corpus directory of this crate.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// Every sample of the corpus in `dir`, by file name. A file whose name has no known category
/// prefix, or that is not UTF-8, is an error.
pub fn load_from(dir: &Path) -> std::io::Result<Vec<Sample>> {
    let mut samples = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let category = Category::of(&name).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{name}: no category prefix (code-, json-, prose-, intl-, ...)"),
            )
        })?;
        let text = std::fs::read_to_string(entry.path())?;
        samples.push(Sample {
            name,
            category,
            text,
        });
    }
    samples.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(samples)
}

/// Every sample of this crate's corpus ([`dir`]).
pub fn load() -> std::io::Result<Vec<Sample>> {
    load_from(&dir())
}

/// A sample's counts: characters, bytes, the heuristic and each exact encoding.
#[derive(Debug, Clone)]
pub struct Counted {
    /// The sample.
    pub sample: Sample,
    /// Its characters (Unicode scalar values).
    pub chars: usize,
    /// Its bytes (UTF-8).
    pub bytes: usize,
    /// [`Heuristic`]'s count.
    pub heuristic: u32,
    /// The exact counts, in the order of [`Encoding::ALL`].
    pub exact: [u32; 2],
}

impl Counted {
    /// The exact count in `encoding`.
    pub fn exact(&self, encoding: Encoding) -> u32 {
        self.exact[index(encoding)]
    }

    /// The heuristic's signed relative error against `encoding`: (heuristic - exact) / exact.
    /// Negative: the heuristic undercounts (the dangerous direction: a view it thinks fits may
    /// not).
    pub fn error(&self, encoding: Encoding) -> f64 {
        relative(u64::from(self.heuristic), u64::from(self.exact(encoding)))
    }
}

fn index(encoding: Encoding) -> usize {
    Encoding::ALL
        .iter()
        .position(|&e| e == encoding)
        .unwrap_or(0)
}

fn relative(estimate: u64, exact: u64) -> f64 {
    if exact == 0 {
        return 0.0;
    }
    (estimate as f64 - exact as f64) / exact as f64
}

/// Counts every sample with the heuristic and each exact encoding.
pub fn count(samples: &[Sample]) -> Vec<Counted> {
    let exact = Encoding::ALL.map(Tiktoken::new);
    samples
        .iter()
        .map(|s| Counted {
            sample: s.clone(),
            chars: s.text.chars().count(),
            bytes: s.text.len(),
            heuristic: Heuristic.count(&s.text),
            exact: exact.each_ref().map(|t| t.count(&s.text)),
        })
        .collect()
}

/// The distribution of the heuristic's signed relative error over a set of samples, against
/// one encoding.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Samples.
    pub n: usize,
    /// Median error.
    pub median: f64,
    /// 10th percentile.
    pub p10: f64,
    /// 90th percentile.
    pub p90: f64,
    /// Smallest (most negative) error.
    pub min: f64,
    /// Largest error.
    pub max: f64,
    /// Share of samples off by more than 10% either way.
    pub over_10: f64,
    /// Share of samples off by more than 25% either way.
    pub over_25: f64,
    /// The error of the totals: (sum of heuristic - sum of exact) / sum of exact (what a
    /// context window of these samples would be off by).
    pub pooled: f64,
    /// Characters per exact token, over all the samples.
    pub chars_per_token: f64,
}

/// The percentile `p` (0 to 1) of sorted values, interpolating linearly between ranks.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let rank = p.clamp(0.0, 1.0) * (n - 1) as f64;
            let lo = rank.floor() as usize;
            let hi = rank.ceil() as usize;
            sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
        }
    }
}

/// The error distribution of `counted` against `encoding`; `None` for no samples.
pub fn summarize<'a>(
    counted: impl IntoIterator<Item = &'a Counted>,
    encoding: Encoding,
) -> Option<Summary> {
    let counted: Vec<&Counted> = counted.into_iter().collect();
    if counted.is_empty() {
        return None;
    }
    let mut errors: Vec<f64> = counted.iter().map(|c| c.error(encoding)).collect();
    errors.sort_by(f64::total_cmp);
    let n = errors.len();
    let share = |limit: f64| errors.iter().filter(|e| e.abs() > limit).count() as f64 / n as f64;
    let heuristic: u64 = counted.iter().map(|c| u64::from(c.heuristic)).sum();
    let exact: u64 = counted.iter().map(|c| u64::from(c.exact(encoding))).sum();
    let chars: usize = counted.iter().map(|c| c.chars).sum();
    Some(Summary {
        n,
        median: percentile(&errors, 0.5),
        p10: percentile(&errors, 0.1),
        p90: percentile(&errors, 0.9),
        min: errors[0],
        max: errors[n - 1],
        over_10: share(0.10),
        over_25: share(0.25),
        pooled: relative(heuristic, exact),
        chars_per_token: chars as f64 / exact.max(1) as f64,
    })
}

/// The rows of the report: each category, each language of the non-Latin samples, and all.
pub fn groups(counted: &[Counted]) -> Vec<(String, Vec<&Counted>)> {
    let mut rows = Vec::new();
    for category in Category::ALL {
        let members: Vec<&Counted> = counted
            .iter()
            .filter(|c| c.sample.category == category)
            .collect();
        rows.push((category.prefix().to_owned(), members.clone()));
        if category == Category::NonLatin {
            let mut tags: Vec<&str> = members.iter().map(|c| c.sample.tag()).collect();
            tags.sort_unstable();
            tags.dedup();
            for tag in tags {
                let of_tag = members
                    .iter()
                    .copied()
                    .filter(|c| c.sample.tag() == tag)
                    .collect();
                rows.push((format!("  intl-{tag}"), of_tag));
            }
        }
    }
    rows.push(("all".to_owned(), counted.iter().collect()));
    rows
}

/// The report: for each encoding, one row per group of [`groups`] with the distribution of the
/// heuristic's signed relative error, in percent.
pub fn table(counted: &[Counted]) -> String {
    let mut out = String::new();
    let bytes: usize = counted.iter().map(|c| c.bytes).sum();
    let _ = writeln!(
        out,
        "corpus: {} samples, {} bytes; error = (heuristic - exact) / exact, in %; \
         negative = the heuristic undercounts",
        counted.len(),
        bytes
    );
    for encoding in Encoding::ALL {
        let _ = writeln!(out, "\nheuristic (ceil(chars/4)) vs {}:", encoding.name());
        let _ = writeln!(
            out,
            "{:<12} {:>3} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6} {:>8} {:>7}",
            "category",
            "n",
            "median",
            "p10",
            "p90",
            "min",
            "max",
            ">10%",
            ">25%",
            "pooled",
            "ch/tok"
        );
        for (label, members) in groups(counted) {
            let Some(s) = summarize(members, encoding) else {
                continue;
            };
            let pct = |x: f64| x * 100.0;
            let _ = writeln!(
                out,
                "{:<12} {:>3} {:>+8.1} {:>+8.1} {:>+8.1} {:>+8.1} {:>+8.1} {:>5.0}% {:>5.0}% {:>+8.1} {:>7.2}",
                label,
                s.n,
                pct(s.median),
                pct(s.p10),
                pct(s.p90),
                pct(s.min),
                pct(s.max),
                pct(s.over_10),
                pct(s.over_25),
                pct(s.pooled),
                s.chars_per_token
            );
        }
    }
    out
}

/// One line per sample: name, bytes, characters, heuristic, exact counts and errors.
pub fn details(counted: &[Counted]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<40} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7}",
        "sample", "bytes", "chars", "heur", "o200k", "cl100k", "err o2", "err cl"
    );
    for c in counted {
        let _ = writeln!(
            out,
            "{:<40} {:>6} {:>6} {:>6} {:>6} {:>6} {:>+6.1}% {:>+6.1}%",
            c.sample.name,
            c.bytes,
            c.chars,
            c.heuristic,
            c.exact(Encoding::O200kBase),
            c.exact(Encoding::Cl100kBase),
            c.error(Encoding::O200kBase) * 100.0,
            c.error(Encoding::Cl100kBase) * 100.0
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&xs, 0.5), 2.5);
        assert_eq!(percentile(&xs, 0.0), 1.0);
        assert_eq!(percentile(&xs, 1.0), 4.0);
        assert!((percentile(&xs, 0.1) - 1.3).abs() < 1e-9);
        assert_eq!(percentile(&[7.0], 0.9), 7.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn categories_come_from_the_prefix() {
        assert_eq!(
            Category::of("code-rust-parser.rs.txt"),
            Some(Category::Code)
        );
        assert_eq!(Category::of("intl-zh-readme.md"), Some(Category::NonLatin));
        assert_eq!(Category::of("readme.md"), None);
        assert_eq!(Category::of("notes-x.md"), None);
    }
}
