//! Context management in whole runs: the drop-the-middle loop does not happen, every view the
//! model is sent is a valid conversation inside the window, and the journal keeps everything.
//!
//! The model here is a *reactive* agent, not a script: it must read files `f0`..`f7`, and each
//! turn it reads the first file it cannot see the content of, unless the state notice says it
//! has already read that many. That is how agents behave when a pruner drops their tool results:
//! a host that drops the middle of the conversation makes it read the same files again and again
//! until a budget stops it; Terminus's pruning (latest result of each tool, recent turns, a
//! notice with the ledger's counts) lets it finish with every file read once. An agent whose
//! answer needs two early files (it names their keys, and reads again those it cannot see) shows
//! what ranking adds: a result a later message named comes back first, and a tool marked `keep`
//! keeps its results while the window can hold them.

use async_trait::async_trait;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use terminus_kernel::{
    AbortReason, CompleteReason, Entry, ModelErrorKind, ModelTurn, Outcome, Policy, ToolCall,
    ToolOutcome, Verdict,
};
use terminus_runtime::context::{Heuristic, NOTICE_HEADER, message_tokens};
use terminus_runtime::{
    ContextPolicy, Fault, Journal, MemoryStore, Message, Model, ModelError, ModelFailure,
    ModelRequest, Role, Run, Tokenizer, Tool, ToolSet, Verification, Verifier,
};

const FILES: usize = 8;
/// Words of filler in each file (about 300 tokens with the heuristic).
const FILE_WORDS: usize = 300;

fn content(i: usize) -> String {
    let mut s = format!("CONTENT f{i}:");
    for _ in 0..FILE_WORDS {
        s.push_str(" log");
    }
    s
}

/// The key file K holds (a salient token: an answer that needs the file quotes it).
fn key(i: usize) -> String {
    format!("key-{}", 4_000 + i * 37)
}

/// [`content`] with the file's key after its marker.
fn keyed_content(i: usize) -> String {
    content(i).replacen(':', &format!(": {}", key(i)), 1)
}

/// `read_file {"path": "fK"}` returns file K (with its key when `keyed`); it records every
/// path it was asked for.
#[derive(Default)]
struct Files {
    reads: Mutex<Vec<String>>,
    keyed: bool,
}

#[async_trait]
impl Tool for Files {
    async fn call(&self, arguments: Value) -> Result<ToolOutcome, Fault> {
        let path = arguments["path"].as_str().unwrap_or("").to_owned();
        self.reads.lock().expect("not poisoned").push(path.clone());
        let i: usize = path.trim_start_matches('f').parse().unwrap_or(usize::MAX);
        Ok(if i < FILES {
            ToolOutcome::ok(Value::String(if self.keyed {
                keyed_content(i)
            } else {
                content(i)
            }))
        } else {
            ToolOutcome::Error {
                kind: terminus_kernel::ToolErrorKind::NotFound,
                message: format!("no file {path}"),
            }
        })
    }
}

/// How the agent's host shows it the conversation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum View {
    /// As the runtime sends it (with a context policy: Terminus's pruned view).
    AsSent,
    /// The common fix: keep the task and the longest run of whole recent turns that fits
    /// `budget` tokens, drop the middle, say nothing.
    DropTheMiddle { budget: u64 },
}

/// The reactive agent. It also plays the provider's checks: a conversation with a tool result
/// whose call is not in it, or a call without its result, is refused as `bad_request`.
struct Agent {
    view: View,
    /// The files whose content its answer needs: it notes each one's key when it reads it,
    /// and before it answers it reads again any of them it cannot see.
    needs: Vec<usize>,
    /// The largest request it was sent, in tokens (heuristic).
    peak: Mutex<u64>,
    requests: Mutex<u32>,
}

impl Agent {
    fn new(view: View) -> Arc<Agent> {
        Agent::needing(view, Vec::new())
    }

    fn needing(view: View, needs: Vec<usize>) -> Arc<Agent> {
        Arc::new(Agent {
            view,
            needs,
            peak: Mutex::new(0),
            requests: Mutex::new(0),
        })
    }
}

fn drop_the_middle(messages: &[Message], budget: u64) -> Vec<Message> {
    let tokens = |m: &Message| u64::from(message_tokens(&Heuristic, m));
    let head = &messages[..1];
    let mut used = tokens(&head[0]);
    let mut start = messages.len();
    // Walk back over whole turns (an assistant message and what follows it).
    let mut i = messages.len();
    while i > 1 {
        i -= 1;
        if messages[i].role == Role::Assistant {
            let turn: u64 = messages[i..start].iter().map(tokens).sum();
            if used + turn > budget {
                break;
            }
            used += turn;
            start = i;
        }
    }
    head.iter().chain(&messages[start..]).cloned().collect()
}

/// Whether every tool result answers a call before it and every call is answered.
fn valid(messages: &[Message]) -> Result<(), String> {
    let mut open: Vec<&str> = Vec::new();
    for m in messages {
        match m.role {
            Role::Assistant => {
                if let Some(id) = open.first() {
                    return Err(format!("call {id} has no result"));
                }
                open = m.tool_calls.iter().map(|c| c.id.as_str()).collect();
            }
            Role::Tool => {
                let id = m.tool_call_id.as_deref().unwrap_or("");
                let Some(at) = open.iter().position(|o| *o == id) else {
                    return Err(format!("result {id} answers no call in the conversation"));
                };
                open.remove(at);
            }
            _ => {}
        }
    }
    open.first()
        .map_or(Ok(()), |id| Err(format!("call {id} has no result")))
}

#[async_trait]
impl Model for Agent {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        let n = {
            let mut r = self.requests.lock().expect("not poisoned");
            *r += 1;
            *r
        };
        let sent: u64 = request
            .messages
            .iter()
            .map(|m| u64::from(message_tokens(&Heuristic, m)))
            .sum();
        {
            let mut peak = self.peak.lock().expect("not poisoned");
            *peak = (*peak).max(sent);
        }
        if let Err(problem) = valid(request.messages) {
            return Err(ModelError::Failure(ModelFailure::new(
                ModelErrorKind::BadRequest,
                problem,
            )));
        }
        let seen = match self.view {
            View::AsSent => request.messages.to_vec(),
            View::DropTheMiddle { budget } => drop_the_middle(request.messages, budget),
        };
        let visible = |i: usize| {
            let marker = format!("CONTENT f{i}:");
            seen.iter().any(|m| m.content.contains(&marker))
        };
        // What the state notice says was read already (the ledger's count).
        let read_before = seen
            .iter()
            .filter(|m| m.content.starts_with(NOTICE_HEADER))
            .find_map(|m| {
                let at = m.content.find("read_file ")? + "read_file ".len();
                m.content[at..].split(' ').next()?.parse::<usize>().ok()
            })
            .unwrap_or(0);
        // The keys of the needed files among the results just received: noted in this turn's
        // text, so that a later message names them.
        let answered = seen
            .iter()
            .rposition(|m| m.role == Role::Assistant)
            .map_or(0, |a| a + 1);
        let mut noted = String::new();
        for &i in &self.needs {
            let marker = format!("CONTENT f{i}:");
            if seen[answered..].iter().any(|m| m.content.contains(&marker)) {
                noted.push_str(&format!("Noted {} from f{i}. ", key(i)));
            }
        }
        let next = (0..FILES)
            .find(|&i| i >= read_before && !visible(i))
            .or_else(|| self.needs.iter().copied().find(|&i| !visible(i)));
        Ok(match next {
            Some(i) => ModelTurn {
                text: format!("{noted}Reading f{i}."),
                tool_calls: vec![ToolCall {
                    id: format!("read-{n}").into(),
                    name: "read_file".into(),
                    arguments: json!({ "path": format!("f{i}") }).into(),
                }],
                ..ModelTurn::default()
            },
            None => ModelTurn {
                text: format!("Read all {FILES} files."),
                needs_more_work: Some(false),
                ..ModelTurn::default()
            },
        })
    }
}

fn policy() -> Policy {
    Policy {
        max_model_calls: 40,
        max_steps: 200,
        ..Policy::default()
    }
}

/// A window that holds about four files: the eight never fit at once.
fn context() -> ContextPolicy {
    ContextPolicy {
        window: 2_000,
        reserve: 250,
        prune_at: 1_333,
        prune_to: 1_000,
        max_tool_result_tokens: Some(500),
        keep_recent_turns: 2,
        max_system_tokens: None,
    }
}

#[tokio::test]
async fn dropping_the_middle_makes_the_agent_reread_until_the_loop_detector_stops_it() {
    let files = Arc::new(Files::default());
    let agent = Agent::new(View::DropTheMiddle {
        budget: u64::from(context().prune_at),
    });
    let report = Run::new("Read f0 to f7.", policy(), agent.clone())
        .tools(ToolSet::new().with("read_file", files.clone()))
        .execute()
        .await
        .expect("the run reaches a stop");
    let reads = files.reads.lock().expect("not poisoned").clone();
    // The agent forgets what was dropped and reads the same files again, in the same order, with
    // the same results: a loop, which the repeat detector stops at its `max_repeats`-th
    // occurrence, long before the model-call budget (40) would.
    assert_eq!(
        report.outcome,
        Outcome::Aborted(AbortReason::NoProgress),
        "reads: {reads:?}"
    );
    let period = reads
        .iter()
        .skip(1)
        .position(|p| *p == reads[0])
        .map_or(reads.len(), |i| i + 1);
    let repeats = Policy::default().max_repeats as usize;
    assert_eq!(reads.len(), period * repeats, "{reads:?}");
    assert!(
        reads.chunks(period).all(|w| w == &reads[..period]),
        "{reads:?}"
    );
    assert!(report.model_calls < policy().max_model_calls, "{report:?}");
}

#[tokio::test]
async fn terminus_pruning_lets_the_agent_finish_with_every_file_read_once() {
    let files = Arc::new(Files::default());
    let agent = Agent::new(View::AsSent);
    let store = Arc::new(MemoryStore::new());
    let report = Run::new("Read f0 to f7.", policy(), agent.clone())
        .tools(ToolSet::new().with("read_file", files.clone()))
        .context(context(), Arc::new(Heuristic))
        .store(store.clone())
        .execution("ctx")
        .execute()
        .await
        .expect("the run reaches a stop");
    let reads = files.reads.lock().expect("not poisoned").clone();
    assert_eq!(
        report.outcome,
        Outcome::Complete(CompleteReason::Explicit),
        "reads: {reads:?}"
    );
    let expected: Vec<String> = (0..FILES).map(|i| format!("f{i}")).collect();
    assert_eq!(reads, expected, "each file read once, in order");
    assert_eq!(report.tool_calls, 8);
    let stats = report
        .context
        .expect("a run with a context policy reports it");
    assert!(stats.prunes >= 2, "{stats:?}");
    // Every request was valid (the agent refuses invalid ones, which would have failed the run)
    // and inside the window.
    let peak = *agent.peak.lock().expect("not poisoned");
    assert!(
        peak <= u64::from(context().limit()),
        "peak request {peak} tokens > limit {}",
        context().limit()
    );
    assert!(stats.peak_tokens <= u64::from(context().limit()));

    // The journal keeps every result whole: only the model's view was pruned.
    let records = store.records("ctx").await.expect("the journal reads");
    let mut journaled: BTreeMap<String, String> = BTreeMap::new();
    for r in &records {
        if let Entry::ToolResults { results } = &r.entry {
            for res in results {
                if let ToolOutcome::Ok(out) = &res.outcome
                    && let Value::String(s) = out.value()
                {
                    journaled.insert(res.call_id.to_string(), s.clone());
                }
            }
        }
    }
    assert_eq!(journaled.len(), FILES, "{:?}", journaled.keys());
    for i in 0..FILES {
        assert!(
            journaled.values().any(|s| *s == content(i)),
            "the journal lacks the whole of f{i}"
        );
    }
}

/// Reads of a file after its first, in `reads`.
fn rereads(reads: &[String]) -> usize {
    let mut seen = std::collections::BTreeSet::new();
    reads.iter().filter(|p| !seen.insert(p.as_str())).count()
}

/// The needy agent's run under `context`, `read_file` marked `keep` or not: the paths read.
async fn needy_run(context: ContextPolicy, keep: bool) -> Vec<String> {
    let files = Arc::new(Files {
        keyed: true,
        ..Files::default()
    });
    let agent = Agent::needing(View::AsSent, vec![1, 3]);
    let mut tools = ToolSet::new().with("read_file", files.clone());
    if keep {
        tools.keep("read_file");
    }
    let report = Run::new("Read f0 to f7.", policy(), agent.clone())
        .tools(tools)
        .context(context, Arc::new(Heuristic))
        .execute()
        .await
        .expect("the run reaches a stop");
    let reads = files.reads.lock().expect("not poisoned").clone();
    assert_eq!(
        report.outcome,
        Outcome::Complete(CompleteReason::Explicit),
        "reads: {reads:?}"
    );
    let peak = *agent.peak.lock().expect("not poisoned");
    assert!(peak <= u64::from(context.limit()), "{peak} tokens");
    reads
}

#[tokio::test]
async fn results_the_agent_named_stay_in_view_so_it_reads_them_again_less() {
    // The agent's answer needs f1 and f3: it names their keys when it reads them, and before
    // answering it reads again any of the two it cannot see. Before results were ranked, each
    // of these runs read both twice (2 re-reads).
    let window = context();
    // The latest result and the last two turns fill `prune_to`: nothing else comes back, named
    // or not, so both are read again.
    let reads = needy_run(window, false).await;
    assert_eq!(rereads(&reads), 2, "reads: {reads:?}");
    // With one recent turn, there is room for one more unit: f3, named, comes back before the
    // newer f6, which nothing named.
    let one_turn = ContextPolicy {
        keep_recent_turns: 1,
        ..window
    };
    let reads = needy_run(one_turn, false).await;
    assert_eq!(rereads(&reads), 1, "reads: {reads:?}");
    assert_eq!(reads[FILES..], ["f1"], "only f1 read again");
    // `read_file` marked `keep`: its results stay up to the limit, the named ones first.
    let reads = needy_run(window, true).await;
    assert_eq!(rereads(&reads), 0, "reads: {reads:?}");
}

#[tokio::test]
async fn without_the_notice_the_same_pruning_would_loop() {
    // The notice is what tells the agent it has read the files it can no longer see: an agent
    // that ignores it re-reads them (this guards the test agent itself, so that the run above
    // finishes because of what the view says, not by accident).
    let agent = Agent::new(View::AsSent);
    let files = Arc::new(Files::default());
    let report = Run::new("Read f0 to f7.", policy(), Arc::new(IgnoreNotice(agent)))
        .tools(ToolSet::new().with("read_file", files.clone()))
        .context(context(), Arc::new(Heuristic))
        .execute()
        .await
        .expect("the run reaches a stop");
    // It re-reads what it can no longer see, in a loop the repeat detector stops.
    assert_eq!(report.outcome, Outcome::Aborted(AbortReason::NoProgress));
    let reads = files.reads.lock().expect("not poisoned").clone();
    assert!(reads.iter().filter(|p| *p == "f0").count() > 1, "{reads:?}");
}

/// The agent, shown the view without its state notice.
struct IgnoreNotice(Arc<Agent>);

#[async_trait]
impl Model for IgnoreNotice {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        let messages: Vec<Message> = request
            .messages
            .iter()
            .filter(|m| !m.content.starts_with(NOTICE_HEADER))
            .cloned()
            .collect();
        self.0
            .complete(ModelRequest {
                messages: &messages,
                ..request
            })
            .await
    }
}

/// The agent until its `after`-th request, which kills the process (an adapter fault).
struct DiesAfter {
    agent: Arc<Agent>,
    after: u32,
    calls: Mutex<u32>,
}

#[async_trait]
impl Model for DiesAfter {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        let n = {
            let mut c = self.calls.lock().expect("not poisoned");
            *c += 1;
            *c
        };
        if n >= self.after {
            return Err(ModelError::Fault(Fault::internal("the process died")));
        }
        self.agent.complete(request).await
    }
}

#[tokio::test]
async fn a_pruned_run_resumes_from_the_whole_journal_and_reads_nothing_twice() {
    let files = Arc::new(Files::default());
    let store = Arc::new(MemoryStore::new());
    let tools = ToolSet::new().with("read_file", files.clone());
    let dies = Arc::new(DiesAfter {
        agent: Agent::new(View::AsSent),
        after: 7,
        calls: Mutex::new(0),
    });
    let err = Run::new("Read f0 to f7.", policy(), dies)
        .tools(tools.clone())
        .context(context(), Arc::new(Heuristic))
        .store(store.clone())
        .execution("r")
        .execute()
        .await
        .expect_err("the model died");
    assert!(matches!(err, terminus_runtime::RunError::Fault(_)), "{err}");
    let before = files.reads.lock().expect("not poisoned").len();
    assert_eq!(before, 6, "six files read before the crash");

    // The resumed run rebuilds the whole conversation from the journal and prunes it again.
    let agent = Agent::new(View::AsSent);
    let report = Run::resume("r", agent.clone())
        .tools(tools)
        .context(context(), Arc::new(Heuristic))
        .store(store.clone())
        .execute()
        .await
        .expect("a report");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Explicit));
    let reads = files.reads.lock().expect("not poisoned").clone();
    let expected: Vec<String> = (0..FILES).map(|i| format!("f{i}")).collect();
    assert_eq!(reads, expected, "no file read twice across the crash");
    let stats = report.context.expect("context stats");
    assert!(stats.prunes >= 1, "the resumed view was pruned: {stats:?}");
    assert!(*agent.peak.lock().expect("not poisoned") <= u64::from(context().limit()));
}

/// A log of `LOG_LINES` numbered lines: far over the window's per-result limit.
const LOG_LINES: usize = 400;

fn long_log() -> String {
    (0..LOG_LINES)
        .map(|i| format!("line {i:04}: worker ok\n"))
        .collect()
}

/// `dump_log` answers the whole log.
struct Log;

#[async_trait]
impl Tool for Log {
    async fn call(&self, _arguments: Value) -> Result<ToolOutcome, Fault> {
        Ok(ToolOutcome::ok(Value::String(long_log())))
    }
}

/// Calls `dump_log`, then claims completion; keeps the messages of its second request.
#[derive(Default)]
struct Reader {
    seen: Mutex<Vec<Message>>,
}

#[async_trait]
impl Model for Reader {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        if request.messages.iter().all(|m| m.role != Role::Tool) {
            return Ok(ModelTurn {
                text: "Reading the log.".into(),
                tool_calls: vec![ToolCall {
                    id: "log-1".into(),
                    name: "dump_log".into(),
                    arguments: json!({}).into(),
                }],
                ..ModelTurn::default()
            });
        }
        *self.seen.lock().expect("not poisoned") = request.messages.to_vec();
        Ok(ModelTurn {
            text: "The workers are fine.".into(),
            needs_more_work: Some(false),
            ..ModelTurn::default()
        })
    }
}

/// Accepts every claim; keeps the tool results of the transcript it was given.
#[derive(Default)]
struct Witness {
    results: Mutex<Vec<String>>,
}

#[async_trait]
impl Verifier for Witness {
    async fn verify(&self, verification: Verification<'_>) -> Result<Verdict, Fault> {
        *self.results.lock().expect("not poisoned") = verification
            .transcript
            .iter()
            .filter(|e| e.role == Role::Tool)
            .map(|e| e.content.to_owned())
            .collect();
        Ok(Verdict {
            complete: true,
            missing: Vec::new(),
        })
    }
}

#[tokio::test]
async fn a_long_result_is_cut_for_the_model_and_whole_for_the_journal_and_the_verifier() {
    let limit = 500;
    let context = ContextPolicy {
        max_tool_result_tokens: Some(limit),
        ..ContextPolicy::for_window(16_000)
    };
    let model = Arc::new(Reader::default());
    let witness = Arc::new(Witness::default());
    let store = Arc::new(MemoryStore::new());
    let report = Run::new(
        "Are the workers healthy?",
        Policy {
            verify_completion: true,
            ..policy()
        },
        model.clone(),
    )
    .tools(ToolSet::new().with("dump_log", Arc::new(Log)))
    .verifier(witness.clone())
    .context(context, Arc::new(Heuristic))
    .store(store.clone())
    .execution("log")
    .execute()
    .await
    .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Complete(CompleteReason::Verified));
    let stats = report.context.expect("context stats");
    assert_eq!((stats.truncated_results, stats.prunes), (1, 0), "{stats:?}");

    // The model saw the head of the log and a marker with the exact numbers.
    let log = long_log();
    let total = Heuristic.count(&log);
    let seen = model.seen.lock().expect("not poisoned").clone();
    let shown = seen
        .iter()
        .find(|m| m.role == Role::Tool)
        .expect("the result is in the view");
    assert!(message_tokens(&Heuristic, shown) <= limit, "{shown:?}");
    let (head, marker) = shown
        .content
        .split_once("\n\n[terminus: cut")
        .expect("the marker follows the head");
    assert!(
        log.starts_with(head) && head.starts_with("line 0000"),
        "{head}"
    );
    assert!(
        !shown
            .content
            .contains(&format!("line {:04}", LOG_LINES - 1))
    );
    let cut = total - Heuristic.count(head);
    assert_eq!(
        marker,
        format!(
            " to fit the context, {cut} of {total} tokens not shown; the journal keeps all of \
             call log-1. For the rest, call dump_log for a narrower part.]"
        )
    );

    // The journal and the verifier have the whole log.
    let records = store.records("log").await.expect("the journal reads");
    let journaled: Vec<&ToolOutcome> = records
        .iter()
        .filter_map(|r| match &r.entry {
            Entry::ToolResults { results } => Some(results.iter().map(|r| &r.outcome)),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(
        journaled,
        vec![&ToolOutcome::ok(Value::String(log.clone()))]
    );
    let verified = witness.results.lock().expect("not poisoned").clone();
    assert_eq!(verified, vec![log], "the verifier saw a cut result");
}
