//! Jobs a tool's call starts that outlive the process running it (an MCP task: a build, a
//! deploy, a research query on the server's side). A crash while the call waits must not lose
//! the job, and a resume must not start a second one.
//!
//! The runtime runs each tool call inside [`scope`]. A tool that starts such a job reports its
//! handle with [`started`] as soon as it has one, before it waits: the runtime journals it with
//! the call ([`Entry::Started`](terminus_kernel::Entry::Started)) and only then lets the tool go
//! on. A resumed run finds the call [`CallState::Started`](terminus_kernel::CallState::Started)
//! and runs it again inside a scope that carries the handle ([`resumed`]): the tool waits for
//! that job instead of calling anything. A job whoever ran it no longer knows (a task past its
//! time to live) is reported [`lost`]: the runtime answers the call as in doubt, never by running
//! it again. The tool port ([`Tool::call`](crate::Tool::call)) and every layer around it stay as
//! they are, as with [`crate::asking`].

use serde_json::Value;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{mpsc, oneshot};

/// What a tool says about its job: its handle, to journal (and where to say whether it was),
/// or what the job is doing now.
enum Report {
    Started(Value, oneshot::Sender<bool>),
    /// The job, as it was when the status was said, and the status.
    Status(Value, String),
}

/// What the job of one call is doing, as its tool said ([`status`]): the run shows it while it
/// waits (a progress line, an event on the call's span).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JobStatus {
    /// The tool called.
    pub tool: String,
    /// The call's id.
    pub call_id: String,
    /// The job's handle, as journaled.
    pub job: Value,
    /// What the job is doing, in its server's words (`working (building app: second 2 of 4)`).
    pub status: String,
}

impl JobStatus {
    /// A status of the job `job` of call `call_id` of `tool`.
    pub fn new(tool: &str, call_id: &str, job: Value, status: String) -> JobStatus {
        JobStatus {
            tool: tool.to_owned(),
            call_id: call_id.to_owned(),
            job,
            status,
        }
    }
}

impl std::fmt::Display for JobStatus {
    /// `` `build` (call c1) waits for its job: working (building app: second 2 of 4) ``.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` (call {}) waits for its job: {}",
            self.tool, self.call_id, self.status
        )
    }
}

/// What one call's run carries: the job its earlier run started, the job it started or waits
/// for, the way to report them, and whether the earlier job was lost.
struct Slot {
    resumed: Option<Value>,
    /// The job this run started or waits for (the resumed one, until another is started).
    current: Mutex<Option<Value>>,
    reports: mpsc::UnboundedSender<Report>,
    lost: Mutex<Option<String>>,
}

tokio::task_local! {
    static JOBS: Arc<Slot>;
}

/// Runs `call` (one tool call's run) with `resumed`, the job its earlier run started (`None` on
/// a first run). Each job the call reports with [`started`] is given to `journal`, which says
/// whether it is journaled; the call waits for that answer. Each [`status`] it reports of its
/// job is given to `on_status` with the job. Returns the call's output and, when the call
/// reported its resumed job [`lost`], why.
pub async fn scope<F, J, W, S>(
    resumed: Option<Value>,
    mut journal: J,
    mut on_status: S,
    call: F,
) -> (F::Output, Option<String>)
where
    F: Future,
    J: FnMut(Value) -> W,
    W: Future<Output = bool>,
    S: FnMut(&Value, String),
{
    let (tx, mut rx) = mpsc::unbounded_channel::<Report>();
    let slot = Arc::new(Slot {
        current: Mutex::new(resumed.clone()),
        resumed,
        reports: tx,
        lost: Mutex::new(None),
    });
    let running = JOBS.scope(slot.clone(), call);
    tokio::pin!(running);
    let out = loop {
        tokio::select! {
            biased;
            Some(report) = rx.recv() => match report {
                Report::Started(job, ack) => {
                    let journaled = journal(job).await;
                    let _ = ack.send(journaled);
                }
                Report::Status(job, status) => on_status(&job, status),
            },
            out = &mut running => break out,
        }
    };
    // What the call said last, before it ended.
    while let Ok(report) = rx.try_recv() {
        if let Report::Status(job, status) = report {
            on_status(&job, status);
        }
    }
    let lost = lock(&slot.lost).take();
    (out, lost)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The job this call's earlier run started, when the run is a resume waiting for it: the tool
/// waits for this job and starts nothing. `None` on a first run, or outside a run.
pub fn resumed() -> Option<Value> {
    JOBS.try_with(|slot| slot.resumed.clone()).ok().flatten()
}

/// Reports that this run of a call started `job` (a handle the tool can wait for again from
/// another process: for an MCP task, its server and task id), and waits until it is journaled.
/// `true` once it is; `false` outside a run, or when the journal refused it (the run then fails
/// on its next write: the tool goes on waiting).
pub async fn started(job: Value) -> bool {
    let Ok(reports) = JOBS.try_with(|slot| {
        *lock(&slot.current) = Some(job.clone());
        slot.reports.clone()
    }) else {
        return false;
    };
    let (ack, answer) = oneshot::channel();
    if reports.send(Report::Started(job, ack)).is_err() {
        return false;
    }
    answer.await.unwrap_or(false)
}

/// Reports what the job this call started or waits for is doing now, in its server's words
/// (`working (building app: second 2 of 4)`): the run shows it while it waits. Nothing outside
/// a run, or before a job is started or resumed.
pub fn status(status: impl Into<String>) {
    let status = status.into();
    let _ = JOBS.try_with(|slot| {
        if let Some(job) = lock(&slot.current).clone() {
            let _ = slot.reports.send(Report::Status(job, status));
        }
    });
}

/// The job this run of a call started ([`started`]) or waits for ([`resumed`]), for a layer
/// around the tool that keeps what the call did (a recording). `None` outside a run.
pub fn current() -> Option<Value> {
    JOBS.try_with(|slot| lock(&slot.current).clone())
        .ok()
        .flatten()
}

/// Reports that the job of [`resumed`] is unknown to whoever ran it, `why` in its words: the
/// runtime answers the call as in doubt instead of with this run's outcome.
pub fn lost(why: impl Into<String>) {
    let why = why.into();
    let _ = JOBS.try_with(|slot| *lock(&slot.lost) = Some(why));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_job_is_journaled_before_the_call_goes_on_and_a_resume_carries_it() {
        let journaled = Arc::new(Mutex::new(Vec::new()));
        let seen = journaled.clone();
        let mut statuses = Vec::new();
        let (out, none) = scope(
            None,
            |job| {
                let seen = seen.clone();
                async move {
                    lock(&seen).push(job);
                    true
                }
            },
            |job: &Value, status| statuses.push((job.clone(), status)),
            async {
                assert_eq!(resumed(), None, "a first run");
                status("before any job: not said");
                let ok = started(json!({"task": "t-1"})).await;
                // Journaled by the time `started` returns.
                let count = lock(&journaled).len();
                assert_eq!(current(), Some(json!({"task": "t-1"})));
                status("working (second 1)");
                (ok, count)
            },
        )
        .await;
        assert_eq!(out, (true, 1));
        assert_eq!(none, None);
        assert_eq!(
            statuses,
            vec![(json!({"task": "t-1"}), "working (second 1)".to_owned())]
        );
        let line = JobStatus::new("build", "c1", json!({}), "working (second 1)".into());
        assert_eq!(
            line.to_string(),
            "`build` (call c1) waits for its job: working (second 1)"
        );

        let (again, why) = scope(
            Some(json!({"task": "t-1"})),
            |_| async { false },
            |_: &Value, _| {},
            async {
                let job = resumed();
                lost("task t-1: not found");
                job
            },
        )
        .await;
        assert_eq!(again, Some(json!({"task": "t-1"})));
        assert_eq!(why.as_deref(), Some("task t-1: not found"));
        // Outside a run nothing is journaled, resumed, said or lost.
        assert!(!started(json!({})).await);
        assert_eq!((resumed(), current()), (None, None));
        status("ignored");
        lost("ignored");
    }

    #[tokio::test]
    async fn a_refused_journal_write_is_said() {
        let (ok, _) = scope(
            None,
            |_| async { false },
            |_: &Value, _| {},
            started(json!({"task": "t"})),
        )
        .await;
        assert!(!ok);
    }
}
