//! The cost of context management on a 10,000-message agent conversation: a system prompt, a
//! task, then turns of assistant text with 1 to 3 tool calls (read_file, run_shell, http_get,
//! search, write_file) and their results, all cut from the crate's corpus (`corpus/`: code,
//! JSON, logs, prose, non-Latin text) at sizes from a hundred bytes to whole files of ~20 KB.
//!
//! - `cold_count`: counting every message from nothing ([`message_tokens`]) with o200k_base,
//!   cl100k_base and the heuristic.
//! - `turn`: the steady state. One more turn (assistant + results) is appended to a
//!   conversation the [`ContextWindow`] has already counted, and `prepare` brings the view up
//!   to date: it counts only the new messages, and prunes again when the view passes
//!   `prune_at` (every couple of dozen turns here; that cost is spread over the turns). The
//!   conversation grows from 10,000 messages by up to 1,000 turns, then starts again from the
//!   10,000 (outside the measurement). The baseline recounts every message and prunes, each
//!   turn.
//! - `prune`: one full prune of the 10,000 messages ([`prune_with`]: sizes and referred results
//!   already known, as the window keeps them), and the same with the view rendered; `referred`:
//!   finding the referred results of the whole conversation from nothing ([`referred`], which
//!   the window spreads over the turns, a message at a time).
//!
//! Policy: `ContextPolicy::for_window(128_000)`. Run: `cargo bench -p terminus-tokenizer --bench
//! context`. After criterion's report, a summary prints medians of repeated runs and the ratios
//! (the machine may be shared and noisy: compare medians and ratios, not single numbers).

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use serde_json::json;
use std::collections::BTreeSet;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};
use terminus_kernel::ToolCall;
use terminus_runtime::context::{NOTICE_HEADER, Plan, message_tokens, prune, prune_with, referred};
use terminus_runtime::{ContextPolicy, ContextWindow, Heuristic, Message, Tokenizer};
use terminus_tokenizer::corpus::{self, Category, Sample};
use terminus_tokenizer::{Encoding, Tiktoken};

/// Messages of the conversation.
const MESSAGES: usize = 10_000;
/// Turns appended in the steady state before starting again from `MESSAGES`.
const POOL_TURNS: usize = 1_000;
/// The model's window.
const WINDOW: u32 = 128_000;
/// Tokens of a request outside its messages (tool definitions).
const FIXED: u32 = 1_500;

/// SplitMix64: a small deterministic generator, so every run builds the same conversation.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..hi` (`hi > lo`).
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo) as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.range(0, items.len())]
    }

    /// A provider-style call id: `call_` and 24 letters and digits.
    fn call_id(&mut self) -> String {
        const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let mut id = String::from("call_");
        for _ in 0..24 {
            id.push(char::from(*self.pick(ALNUM)));
        }
        id
    }
}

/// A piece of `text` of about `len` bytes, from a line start, ending on a character boundary
/// (the whole text when it is shorter).
fn excerpt<'a>(rng: &mut Rng, text: &'a str, len: usize) -> &'a str {
    if text.len() <= len {
        return text;
    }
    let mut start = rng.range(0, text.len() - len);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let mut end = (start + len).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[start..end]
}

/// The size of a tool result: half under 1 KB, a third 1-4 KB, the rest whole files.
fn result_len(rng: &mut Rng) -> usize {
    match rng.range(0, 100) {
        0..50 => rng.range(100, 1_000),
        50..85 => rng.range(1_000, 4_000),
        _ => usize::MAX,
    }
}

/// Builds agent conversations from the corpus.
struct Traffic {
    rng: Rng,
    by_category: Vec<(Category, Vec<Sample>)>,
    file_paths: Vec<&'static str>,
}

impl Traffic {
    fn new(samples: &[Sample]) -> Traffic {
        let by_category = Category::ALL
            .into_iter()
            .map(|c| {
                let of: Vec<Sample> = samples
                    .iter()
                    .filter(|s| s.category == c)
                    .cloned()
                    .collect();
                assert!(!of.is_empty(), "the corpus has {c:?} samples");
                (c, of)
            })
            .collect();
        Traffic {
            rng: Rng(0x7E51_3A11),
            by_category,
            file_paths: vec![
                "src/git/submodule.rs",
                "src/commands/status.rs",
                "src/watcher.rs",
                "Cargo.toml",
                "docs/CHANGELOG.md",
                "billing/summarize.py",
                "web/src/components/IssueList.tsx",
                "deploy/staging/orders-api.yaml",
                "docs/zh/README.md",
            ],
        }
    }

    /// An excerpt of a sample of one of `categories`, of a tool result's size.
    fn sample(&mut self, categories: &[Category]) -> String {
        let category = *self.rng.pick(categories);
        let len = result_len(&mut self.rng);
        self.sample_len(category, len)
    }

    fn prose(&mut self, max: usize) -> String {
        let len = self.rng.range(80, max);
        self.sample_len(Category::Prose, len)
    }

    fn sample_len(&mut self, category: Category, len: usize) -> String {
        let of = self
            .by_category
            .iter()
            .find(|(c, _)| *c == category)
            .map(|(_, s)| s.as_slice())
            .unwrap_or_default();
        let sample = self.rng.pick(of);
        excerpt(&mut self.rng, &sample.text, len).to_owned()
    }

    /// One tool call and its result.
    fn call(&mut self) -> (ToolCall, String) {
        let id = self.rng.call_id();
        let path = *self.rng.pick(&self.file_paths);
        let (name, arguments, result) = match self.rng.range(0, 100) {
            0..35 => (
                "read_file",
                json!({ "path": path }),
                self.sample(&[
                    Category::Code,
                    Category::Code,
                    Category::Config,
                    Category::Prose,
                    Category::NonLatin,
                ]),
            ),
            35..60 => (
                "run_shell",
                json!({ "command": *self.rng.pick(&[
                    "cargo test --workspace 2>&1 | tail -80",
                    "git log --stat -n 5",
                    "ls -la",
                    "docker ps",
                    "python -m pytest -x -q",
                    "tail -n 200 /var/log/nginx/access.log",
                ]), "timeout_s": 120 }),
                self.sample(&[Category::Log, Category::Diff]),
            ),
            60..80 => (
                "http_get",
                json!({ "url": "https://api.example.com/v2/items?warehouse=BER-1&limit=100" }),
                self.sample(&[Category::Json]),
            ),
            80..92 => (
                "search",
                json!({ "query": "submodule status", "path": "src", "regex": false }),
                self.sample(&[Category::Json, Category::Log]),
            ),
            _ => {
                let len = self.rng.range(200, 3_000);
                let content = self.sample_len(Category::Code, len);
                (
                    "write_file",
                    json!({ "path": path, "content": content }),
                    format!(
                        "{{\"ok\": true, \"path\": \"{path}\", \"bytes_written\": {}}}",
                        content.len()
                    ),
                )
            }
        };
        let call = ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        };
        (call, result)
    }

    /// One turn: an assistant message (often with some text) with `calls` tool calls, then
    /// their results; no calls: a final text answer.
    fn turn(&mut self, calls: usize) -> Vec<Message> {
        let text = if calls == 0 || self.rng.chance(60) {
            self.prose(600)
        } else {
            String::new()
        };
        let mut calls_and_results: Vec<(ToolCall, String)> =
            (0..calls).map(|_| self.call()).collect();
        let results = calls_and_results
            .iter_mut()
            .map(|(call, result)| {
                Message::tool_result(
                    call.id.clone(),
                    call.name.clone(),
                    std::mem::take(result),
                    None,
                )
            })
            .collect::<Vec<_>>();
        let calls = calls_and_results.into_iter().map(|(c, _)| c).collect();
        let mut turn = vec![Message::assistant(text, calls)];
        turn.extend(results);
        turn
    }

    /// A conversation of exactly `n` messages: system, task, turns.
    fn conversation(&mut self, n: usize) -> Vec<Message> {
        let mut messages = Vec::with_capacity(n);
        let system = format!(
            "You are a careful software engineering agent. Use the tools to inspect and change \
             the repository; never guess file contents. Reply in the user's language.\n\n{}",
            self.sample_len(Category::Prose, 1_600)
        );
        messages.push(Message::system(system));
        messages.push(Message::user(self.sample_len(Category::Prose, 1_400)));
        while messages.len() < n {
            let room = n - messages.len();
            let calls = if room == 1 {
                0
            } else {
                self.rng.range(1, 4).min(room - 1)
            };
            messages.extend(self.turn(calls));
        }
        messages
    }

    /// `n` more turns of 1 to 3 calls.
    fn turns(&mut self, n: usize) -> Vec<Vec<Message>> {
        (0..n)
            .map(|_| {
                let calls = self.rng.range(1, 4);
                self.turn(calls)
            })
            .collect()
    }
}

fn tokenizers() -> Vec<Arc<dyn Tokenizer>> {
    vec![
        Arc::new(Tiktoken::new(Encoding::O200kBase)),
        Arc::new(Tiktoken::new(Encoding::Cl100kBase)),
        Arc::new(Heuristic),
    ]
}

fn policy() -> ContextPolicy {
    ContextPolicy::for_window(WINDOW)
}

fn notice() -> String {
    format!(
        "{NOTICE_HEADER} Earlier messages are not shown, to fit the context window; the run's \
         journal keeps them all. Where the run is:\n- model call 3400 of 5000, step 6800 of \
         10000, tokens 2100000\n- tools already run: read_file 1200 times (1190 ok, 10 failed); \
         run_shell 850 times (800 ok, 50 failed); http_get 680 times (680 ok, 0 failed); search \
         400 times (400 ok, 0 failed); write_file 270 times (270 ok, 0 failed)\n- no open todos"
    )
}

/// Every message counted from nothing.
fn count_all(tokenizer: &dyn Tokenizer, messages: &[Message]) -> Vec<u32> {
    messages
        .iter()
        .map(|m| message_tokens(tokenizer, m))
        .collect()
}

/// One full prune of `messages`, whose sizes are `sizes` and referred results `used`, with a
/// notice of `notice` tokens.
fn full_prune(messages: &[Message], sizes: &[u32], used: &[bool], notice: u32) -> Plan {
    prune_with(
        messages,
        sizes,
        u64::from(FIXED),
        notice,
        &policy(),
        &BTreeSet::new(),
        used,
    )
    .expect("the kept messages fit the window")
}

/// The baseline turn: recount everything, then prune.
fn recount_and_prune(tokenizer: &dyn Tokenizer, messages: &[Message]) -> usize {
    let sizes = count_all(tokenizer, messages);
    let notice = message_tokens(tokenizer, &Message::kernel(notice()));
    prune(
        messages,
        &sizes,
        u64::from(FIXED),
        notice,
        &policy(),
        &BTreeSet::new(),
    )
    .expect("the kept messages fit the window")
    .keep
    .len()
}

/// A window that has counted the conversation, and the turns to append to it.
struct Steady<'a> {
    base: &'a [Message],
    pool: &'a [Vec<Message>],
    tokenizer: Arc<dyn Tokenizer>,
    conversation: Vec<Message>,
    window: ContextWindow,
    next: usize,
}

impl<'a> Steady<'a> {
    fn new(
        base: &'a [Message],
        pool: &'a [Vec<Message>],
        tokenizer: Arc<dyn Tokenizer>,
    ) -> Steady<'a> {
        let window = ContextWindow::new(policy(), tokenizer.clone(), FIXED);
        let mut steady = Steady {
            base,
            pool,
            tokenizer,
            conversation: Vec::new(),
            window,
            next: 0,
        };
        steady.reset();
        steady
    }

    /// Back to the base conversation, counted (the cold count is not measured).
    fn reset(&mut self) {
        self.conversation.clear();
        self.conversation.extend_from_slice(self.base);
        self.window = ContextWindow::new(policy(), self.tokenizer.clone(), FIXED);
        self.window
            .prepare(&self.conversation, notice)
            .expect("the kept messages fit the window");
        self.next = 0;
    }

    /// Appends the next turn and prepares the view; the time `prepare` took.
    fn turn(&mut self) -> Duration {
        if self.next == self.pool.len() {
            self.reset();
        }
        self.conversation
            .extend(self.pool[self.next].iter().cloned());
        self.next += 1;
        let start = Instant::now();
        self.window
            .prepare(&self.conversation, notice)
            .expect("the kept messages fit the window");
        let took = start.elapsed();
        black_box(self.window.messages(&self.conversation).len());
        took
    }
}

struct Setup {
    conversation: Vec<Message>,
    pool: Vec<Vec<Message>>,
    bytes: u64,
}

/// The conversation of `messages` messages and `pool` more turns.
fn setup(messages: usize, pool: usize) -> Setup {
    let samples = corpus::load().expect("the corpus directory is readable");
    let mut traffic = Traffic::new(&samples);
    let conversation = traffic.conversation(messages);
    let pool = traffic.turns(pool);
    let bytes = conversation
        .iter()
        .map(|m| {
            m.content.len()
                + m.tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.to_string().len())
                    .sum::<usize>()
        })
        .sum::<usize>();
    Setup {
        conversation,
        pool,
        bytes: bytes as u64,
    }
}

fn benches(c: &mut Criterion, s: &Setup) {
    let tokenizers = tokenizers();

    let mut group = c.benchmark_group("cold_count");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Bytes(s.bytes));
    for t in &tokenizers {
        group.bench_function(BenchmarkId::from_parameter(t.name()), |b| {
            b.iter(|| count_all(&**t, black_box(&s.conversation)));
        });
    }
    group.finish();

    let mut group = c.benchmark_group("turn");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let mut plus_one = s.conversation.clone();
    plus_one.extend(s.pool[0].iter().cloned());
    for t in &tokenizers {
        let mut steady = Steady::new(&s.conversation, &s.pool, t.clone());
        group.bench_function(BenchmarkId::new("incremental", t.name()), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| steady.turn()).sum());
        });
        group.bench_function(BenchmarkId::new("recount_all", t.name()), |b| {
            b.iter(|| recount_and_prune(&**t, black_box(&plus_one)));
        });
    }
    group.finish();

    let mut group = c.benchmark_group("prune");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let o200k = Tiktoken::new(Encoding::O200kBase);
    let sizes = count_all(&o200k, &s.conversation);
    let notice_message = Message::kernel(notice());
    let notice_tokens = message_tokens(&o200k, &notice_message);
    let used = referred(&s.conversation);
    group.bench_function("prune", |b| {
        b.iter(|| full_prune(black_box(&s.conversation), &sizes, &used, notice_tokens));
    });
    group.bench_function("referred", |b| {
        b.iter(|| referred(black_box(&s.conversation)));
    });
    let mut view = Vec::new();
    group.bench_function("prune_and_render", |b| {
        b.iter(|| {
            let plan = full_prune(black_box(&s.conversation), &sizes, &used, notice_tokens);
            plan.render(|i| &s.conversation[i], &notice_message, &mut view);
            view.len()
        });
    });
    group.finish();
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort_unstable();
    xs[xs.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    black_box(f());
    median(
        (0..runs)
            .map(|_| {
                let start = Instant::now();
                black_box(f());
                start.elapsed()
            })
            .collect(),
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Medians of repeated runs, and the ratios.
fn summary(s: &Setup) {
    let o200k = Tiktoken::new(Encoding::O200kBase);
    let sizes = count_all(&o200k, &s.conversation);
    let tokens: u64 = sizes.iter().map(|&n| u64::from(n)).sum();
    let turn_messages: usize = s.pool.iter().map(Vec::len).sum();
    eprintln!();
    eprintln!(
        "conversation: {} messages, {:.1} MB of text, {} o200k tokens; {} more turns ({} \
         messages) appended in the steady state; window {WINDOW}",
        s.conversation.len(),
        s.bytes as f64 / 1e6,
        tokens,
        s.pool.len(),
        turn_messages
    );
    eprintln!(
        "{:<12} {:>10} {:>8} | {:>10} {:>10} {:>10} {:>6} {:>10} | {:>11} {:>9} {:>9}",
        "tokenizer",
        "cold ms",
        "MB/s",
        "turn us",
        "turn us",
        "turn us",
        "prunes",
        "count us",
        "recount ms",
        "ratio",
        "ratio"
    );
    eprintln!(
        "{:<12} {:>10} {:>8} | {:>10} {:>10} {:>10} {:>6} {:>10} | {:>11} {:>9} {:>9}",
        "", "median", "", "median", "mean", "max", "", "mean", "median", "/mean", "/median"
    );
    let mut cold = Vec::new();
    for t in tokenizers() {
        let exact = t.exact();
        let runs = if exact { 5 } else { 31 };
        let cold_count = time(runs, || count_all(&*t, &s.conversation));
        cold.push((t.name().to_owned(), cold_count));
        let mut steady = Steady::new(&s.conversation, &s.pool, t.clone());
        let before = steady.window.stats().prunes;
        let turns: Vec<Duration> = (0..s.pool.len()).map(|_| steady.turn()).collect();
        let prunes = steady.window.stats().prunes - before;
        let mean = turns.iter().sum::<Duration>() / u32::try_from(turns.len()).unwrap_or(1);
        let max = turns.iter().copied().max().unwrap_or_default();
        let turn_median = median(turns);
        // Counting only the turns' own messages: what the incremental turn cannot avoid.
        let count_only = time(3, || {
            s.pool
                .iter()
                .map(|turn| count_all(&*t, turn).len())
                .sum::<usize>()
        }) / u32::try_from(s.pool.len()).unwrap_or(1);
        let mut plus_one = s.conversation.clone();
        plus_one.extend(s.pool[0].iter().cloned());
        let recount = time(runs, || recount_and_prune(&*t, &plus_one));
        eprintln!(
            "{:<12} {:>10.1} {:>8.1} | {:>10.1} {:>10.1} {:>10.1} {:>6} {:>10.1} | {:>11.1} {:>8.0}x {:>8.0}x",
            t.name(),
            ms(cold_count),
            s.bytes as f64 / cold_count.as_secs_f64() / 1e6,
            us(turn_median),
            us(mean),
            us(max),
            prunes,
            us(count_only),
            ms(recount),
            recount.as_secs_f64() / mean.as_secs_f64(),
            recount.as_secs_f64() / turn_median.as_secs_f64()
        );
    }
    let heuristic = cold.last().map_or(Duration::ZERO, |(_, d)| *d);
    for (name, d) in &cold[..cold.len() - 1] {
        eprintln!(
            "cold count {name} / heuristic: {:.0}x",
            d.as_secs_f64() / heuristic.as_secs_f64()
        );
    }
    let notice_message = Message::kernel(notice());
    let notice_tokens = message_tokens(&o200k, &notice_message);
    let mut view = Vec::new();
    let mut kept = 0;
    let used = referred(&s.conversation);
    let prune_only = time(51, || {
        full_prune(&s.conversation, &sizes, &used, notice_tokens)
    });
    let scoring = time(11, || referred(&s.conversation).len());
    let prune_render = time(51, || {
        let plan = full_prune(&s.conversation, &sizes, &used, notice_tokens);
        plan.render(|i| &s.conversation[i], &notice_message, &mut view);
        kept = view.len();
    });
    eprintln!(
        "prune of {} messages (o200k sizes): {:.0} us median, {:.0} us with the view rendered \
         ({kept} messages kept); their referred results from nothing: {:.0} us median ({} \
         referred)",
        s.conversation.len(),
        us(prune_only),
        us(prune_render),
        us(scoring),
        used.iter().filter(|u| **u).count()
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not (criterion's test mode:
    // each benchmark runs once, on a conversation a tenth the size, without the summary).
    let bench = std::env::args().any(|a| a == "--bench");
    let s = if bench {
        setup(MESSAGES, POOL_TURNS)
    } else {
        setup(MESSAGES / 10, POOL_TURNS / 10)
    };
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c, &s);
    c.final_summary();
    if bench {
        summary(&s);
    }
}
