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

/// A job handle to journal, and where to say whether it was.
type Report = (Value, oneshot::Sender<bool>);

/// What one call's run carries: the job its earlier run started, the way to journal a job this
/// run starts, and whether the earlier job was lost.
struct Slot {
    resumed: Option<Value>,
    /// The job this run started or waits for (the resumed one, until another is started).
    current: Mutex<Option<Value>>,
    journal: mpsc::UnboundedSender<Report>,
    lost: Mutex<Option<String>>,
}

tokio::task_local! {
    static JOBS: Arc<Slot>;
}

/// Runs `call` (one tool call's run) with `resumed`, the job its earlier run started (`None` on
/// a first run). Each job the call reports with [`started`] is given to `journal`, which says
/// whether it is journaled; the call waits for that answer. Returns the call's output and, when
/// the call reported its resumed job [`lost`], why.
pub async fn scope<F, J, W>(
    resumed: Option<Value>,
    mut journal: J,
    call: F,
) -> (F::Output, Option<String>)
where
    F: Future,
    J: FnMut(Value) -> W,
    W: Future<Output = bool>,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<Report>();
    let slot = Arc::new(Slot {
        current: Mutex::new(resumed.clone()),
        resumed,
        journal: tx,
        lost: Mutex::new(None),
    });
    let running = JOBS.scope(slot.clone(), call);
    tokio::pin!(running);
    let out = loop {
        tokio::select! {
            biased;
            Some((job, ack)) = rx.recv() => {
                let journaled = journal(job).await;
                let _ = ack.send(journaled);
            }
            out = &mut running => break out,
        }
    };
    let lost = slot
        .lost
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    (out, lost)
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
    let Ok(journal) = JOBS.try_with(|slot| {
        *slot.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(job.clone());
        slot.journal.clone()
    }) else {
        return false;
    };
    let (ack, answer) = oneshot::channel();
    if journal.send((job, ack)).is_err() {
        return false;
    }
    answer.await.unwrap_or(false)
}

/// The job this run of a call started ([`started`]) or waits for ([`resumed`]), for a layer
/// around the tool that keeps what the call did (a recording). `None` outside a run.
pub fn current() -> Option<Value> {
    JOBS.try_with(|slot| {
        slot.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    })
    .ok()
    .flatten()
}

/// Reports that the job of [`resumed`] is unknown to whoever ran it, `why` in its words: the
/// runtime answers the call as in doubt instead of with this run's outcome.
pub fn lost(why: impl Into<String>) {
    let why = why.into();
    let _ = JOBS.try_with(|slot| {
        *slot.lost.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_job_is_journaled_before_the_call_goes_on_and_a_resume_carries_it() {
        let journaled = Arc::new(Mutex::new(Vec::new()));
        let seen = journaled.clone();
        let (out, none) = scope(
            None,
            |job| {
                let seen = seen.clone();
                async move {
                    seen.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(job);
                    true
                }
            },
            async {
                assert_eq!(resumed(), None, "a first run");
                let ok = started(json!({"task": "t-1"})).await;
                // Journaled by the time `started` returns.
                let count = journaled
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .len();
                assert_eq!(current(), Some(json!({"task": "t-1"})));
                (ok, count)
            },
        )
        .await;
        assert_eq!(out, (true, 1));
        assert_eq!(none, None);

        let (again, why) = scope(Some(json!({"task": "t-1"})), |_| async { false }, async {
            let job = resumed();
            lost("task t-1: not found");
            job
        })
        .await;
        assert_eq!(again, Some(json!({"task": "t-1"})));
        assert_eq!(why.as_deref(), Some("task t-1: not found"));
        // Outside a run nothing is journaled, resumed or lost.
        assert!(!started(json!({})).await);
        assert_eq!((resumed(), current()), (None, None));
        lost("ignored");
    }

    #[tokio::test]
    async fn a_refused_journal_write_is_said() {
        let (ok, _) = scope(None, |_| async { false }, started(json!({"task": "t"}))).await;
        assert!(!ok);
    }
}
