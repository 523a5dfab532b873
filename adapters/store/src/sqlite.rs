//! The SQLite backend (rusqlite, bundled SQLite): the embedded default.
//!
//! Where statements run. A statement that would wait (for another process's write
//! transaction, up to the busy timeout) or that syncs the disk at commit runs on tokio's
//! blocking pool, never on the async executor. Every other statement runs on the caller's
//! thread, sparing the two thread switches of the pool: with [`Durability::Process`] a commit
//! is a write into the WAL, which is done in microseconds, and reads never wait in WAL mode. So
//! the connection's busy timeout is zero; a statement that finds the database busy (or the
//! connection in use by a call on the pool) is run again on the pool with the full timeout.
//! Every closure given to [`Sqlite::run`] may therefore run twice: a busy statement changed
//! nothing, and writes of more than one statement take the write lock first
//! (`BEGIN IMMEDIATE`).
//!
//! Checkpoints (copying the WAL back into the database, which syncs the disk) run on a
//! thread of their own with a connection of their own, started when the WAL passes
//! [`CHECKPOINT_PAGES`]: a run never waits for one. SQLite's automatic checkpoint, which the
//! committing connection runs inside its commit, is off.
//!
//! Where entries are stored (schema 5). An execution created since schema 5 has a number
//! (`executions.num`), and its entries are rows of `packed_entries`, keyed by one integer
//! that packs the number, the checkpoint and the index ([`packed_key`]): an execution's
//! entries are one range of keys, and a step's entries go at the end of the table's b-tree, so
//! its commit writes one page, two when the page fills up. (The entries table of schemas 1-4,
//! keyed by (execution, checkpoint, index) WITHOUT ROWID, is balanced as an index b-tree: a
//! full page is rebalanced with its two neighbours, and a step's commit wrote about four
//! pages.) An entry whose key does not fit the packing, and every entry of an execution that
//! has no number (created before schema 5, or whose entries were appended before it was
//! created), is a row of `entries` as before. Each key has one place, so an append stays one
//! idempotent insert; reads merge both tables in key order.

use crate::backend::{
    Backend, Claimed, Decided, ExecutionRow, Fault, ListFilter, ListedRow, RawEntry, millis, now_ms,
};
use crate::durable::Durable;
use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::thread::JoinHandle;
use std::time::Duration;
use terminus_runtime::{Cause, StoreError};

/// What a committed entry survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// A killed process (WAL, `synchronous=NORMAL`): the default.
    #[default]
    Process,
    /// Power loss (WAL, `synchronous=FULL`: every commit is fsynced).
    PowerLoss,
}

/// WAL pages past which a checkpoint is started (SQLite's own default threshold).
const CHECKPOINT_PAGES: i32 = 1000;

/// WAL pages past which the store's own connection checkpoints before its next write, so that
/// the WAL starts over (see [`ask_for_checkpoints`]).
const CATCH_UP_PAGES: i32 = 8 * CHECKPOINT_PAGES;

const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/sqlite_001_init.sql"),
    include_str!("../migrations/sqlite_002_failure.sql"),
    include_str!("../migrations/sqlite_003_conflicts.sql"),
    include_str!("../migrations/sqlite_004_cells.sql"),
    include_str!("../migrations/sqlite_005_packed.sql"),
    include_str!("../migrations/sqlite_006_suspended.sql"),
];

/// The executions (`Backend::executions`): each one's row, what its report or else its stop
/// entry says, and else counts of its journal (transitions, model answers, tool intents), in
/// both tables (`packed_entries` by the key range of the execution's number, see
/// [`key_range`]; `entries` by its id). Parameters: now (ms), outcome, reason, min steps.
const LIST: &str = "
SELECT id, name, live, failed, outcome, reason, rule, steps, model_calls, tool_calls, entries,
  suspended, decided
FROM (
  SELECT e.id AS id, e.created_ms AS created,
    (e.held > 0) AS suspended, (e.held = 0 AND e.suspended_ms IS NOT NULL) AS decided,
    json_extract(e.spec, '$.name') AS name,
    (e.worker IS NOT NULL AND e.lease_until_ms >= ?1) AS live,
    (e.failure IS NOT NULL) AS failed,
    COALESCE(json_extract(e.report, '$.outcome'), json_extract(e.stop, '$.outcome')) AS outcome,
    COALESCE(json_extract(e.report, '$.reason'), json_extract(e.stop, '$.reason')) AS reason,
    COALESCE(json_extract(e.report, '$.rule'), json_extract(e.stop, '$.rule')) AS rule,
    COALESCE(json_extract(e.report, '$.steps'), json_extract(e.stop, '$.stats.steps'),
      (SELECT count(*) FROM packed_entries t
       WHERE t.key >= e.lo AND t.key < e.hi AND t.kind = 'transition')
      + (SELECT count(*) FROM entries t WHERE t.execution = e.id AND t.kind = 'transition'))
      AS steps,
    COALESCE(json_extract(e.report, '$.model_calls'), json_extract(e.stop, '$.stats.model_calls'),
      (SELECT count(*) FROM packed_entries t
       WHERE t.key >= e.lo AND t.key < e.hi AND t.kind IN ('assistant', 'model_error'))
      + (SELECT count(*) FROM entries t
         WHERE t.execution = e.id AND t.kind IN ('assistant', 'model_error'))) AS model_calls,
    COALESCE(json_extract(e.report, '$.tool_calls'), json_extract(e.stop, '$.stats.tool_calls'),
      (SELECT count(*) FROM packed_entries t
       WHERE t.key >= e.lo AND t.key < e.hi AND t.kind = 'tool_call')
      + (SELECT count(*) FROM entries t WHERE t.execution = e.id AND t.kind = 'tool_call'))
      AS tool_calls,
    (SELECT count(*) FROM packed_entries t WHERE t.key >= e.lo AND t.key < e.hi)
      + (SELECT count(*) FROM entries t WHERE t.execution = e.id) AS entries
  FROM (
    SELECT r.*,
      COALESCE(
        (SELECT CASE WHEN p.kind = 'stop' THEN p.body END FROM packed_entries p
         WHERE p.key >= r.lo AND p.key < r.hi AND p.kind IN ('stop', 'raised')
         ORDER BY p.key DESC LIMIT 1),
        (SELECT CASE WHEN w.kind = 'stop' THEN w.body END FROM entries w
         WHERE w.execution = r.id AND w.kind IN ('stop', 'raised')
         ORDER BY w.checkpoint DESC, w.idx DESC LIMIT 1))
        AS stop
    FROM (
      SELECT x.*,
        CASE WHEN x.num BETWEEN 1 AND 8388606 THEN x.num << 40 END AS lo,
        CASE WHEN x.num BETWEEN 1 AND 8388606 THEN (x.num + 1) << 40 END AS hi
      FROM executions x
    ) r
  ) e
)
WHERE (?2 IS NULL OR outcome = ?2) AND (?3 IS NULL OR reason = ?3) AND steps >= ?4
ORDER BY created, id";

/// How an entry's key (checkpoint, index) is packed with its execution's number
/// (`executions.num`) into the one integer key of `packed_entries`: the number in the high
/// bits, then the checkpoint, then the index, so that an execution's entries are one range of
/// keys, in key order, and a step's entries are appended at the end of that range. (The same
/// numbers are written out in [`LIST`] and in the `journal` view of migration 5.)
const INDEX_BITS: u32 = 14;
/// See [`INDEX_BITS`].
const CHECKPOINT_BITS: u32 = 26;
/// See [`INDEX_BITS`].
const NUM_SHIFT: u32 = INDEX_BITS + CHECKPOINT_BITS;
/// The largest number whose entries are packed: the end of its range, `(num + 1) << 40`, is
/// still a positive 64-bit integer.
const MAX_NUM: i64 = (1 << (63 - NUM_SHIFT)) - 2;

/// The range of keys `[lo, hi)` of execution `num`, when its entries are packed.
fn key_range(num: i64) -> Option<(i64, i64)> {
    (1..=MAX_NUM)
        .contains(&num)
        .then(|| (num << NUM_SHIFT, (num + 1) << NUM_SHIFT))
}

/// The packed key of entry (`checkpoint`, `index`) of execution `num`; `None` when it does not
/// fit (the entry is then stored in `entries`, by its execution's id).
fn packed_key(num: Option<i64>, checkpoint: u32, index: u32) -> Option<i64> {
    let (lo, _) = key_range(num?)?;
    (checkpoint < 1 << CHECKPOINT_BITS && index < 1 << INDEX_BITS)
        .then(|| lo | i64::from(checkpoint) << INDEX_BITS | i64::from(index))
}

/// The (checkpoint, index) of a packed key.
fn unpacked(key: i64) -> (u32, u32) {
    let field = |bits: u32, shift: u32| {
        u32::try_from((key >> shift) & ((1 << bits) - 1)).unwrap_or(u32::MAX)
    };
    (field(CHECKPOINT_BITS, INDEX_BITS), field(INDEX_BITS, 0))
}

/// The packed keys of execution `num` after entry `after` (all of them for `None`), as the
/// bounds `(start, end)` of `start < key < end`; `None` when none can be.
fn packed_after(num: Option<i64>, after: Option<(u32, u32)>) -> Option<(i64, i64)> {
    let (lo, hi) = key_range(num?)?;
    match after {
        None => Some((lo - 1, hi)),
        // Entries of a checkpoint past the packing's are all in `entries`; an index past it
        // leaves none of its checkpoint packed after it.
        Some((checkpoint, _)) if checkpoint >= 1 << CHECKPOINT_BITS => None,
        Some((checkpoint, index)) => {
            let index = index.min((1 << INDEX_BITS) - 1);
            Some((
                lo | i64::from(checkpoint) << INDEX_BITS | i64::from(index),
                hi,
            ))
        }
    }
}

/// The number of `execution` (`None`: no row, or a row from before migration 5).
fn num_of(c: &Connection, execution: &str) -> rusqlite::Result<Option<i64>> {
    Ok(
        c.prepare_cached("SELECT num FROM executions WHERE id = ?1")?
            .query_row([execution], |r| r.get(0))
            .optional()?
            .flatten(),
    )
}

/// Inserts entry `e` of `execution` (numbered `num`) unless its key is stored: whether it was
/// written.
fn insert_entry(
    c: &Connection,
    execution: &str,
    num: Option<i64>,
    e: &RawEntry,
) -> rusqlite::Result<bool> {
    let inserted = match packed_key(num, e.checkpoint, e.index) {
        Some(key) => c
            .prepare_cached(
                "INSERT INTO packed_entries (key, kind, body) VALUES (?1, ?2, ?3)
                 ON CONFLICT DO NOTHING",
            )?
            .execute(params![key, e.kind, e.body])?,
        None => c
            .prepare_cached(
                "INSERT INTO entries (execution, checkpoint, idx, kind, body)
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
            )?
            .execute(params![execution, e.checkpoint, e.index, e.kind, e.body])?,
    };
    Ok(inserted == 1)
}

/// The body stored under the key of entry `e` of `execution` (numbered `num`).
fn stored_body(
    c: &Connection,
    execution: &str,
    num: Option<i64>,
    e: &RawEntry,
) -> rusqlite::Result<String> {
    match packed_key(num, e.checkpoint, e.index) {
        Some(key) => c
            .prepare_cached("SELECT body FROM packed_entries WHERE key = ?1")?
            .query_row([key], |r| r.get(0)),
        None => c
            .prepare_cached(
                "SELECT body FROM entries WHERE execution = ?1 AND checkpoint = ?2 AND idx = ?3",
            )?
            .query_row(params![execution, e.checkpoint, e.index], |r| r.get(0)),
    }
}

/// Marks execution `?1` done with report `?2`, freeing the claim of worker `?3` if it holds it.
const FINISH: &str = "UPDATE executions SET status = 'done', report = ?2,
                             lease_until_ms = CASE WHEN worker = ?3 THEN 0 ELSE lease_until_ms END,
                             worker = CASE WHEN worker = ?3 THEN NULL ELSE worker END
                      WHERE id = ?1";

/// Two pages of entries in key order, each sorted and the two disjoint, merged into one of at
/// most `limit`.
fn merged(
    a: Vec<(u32, u32, String)>,
    b: Vec<(u32, u32, String)>,
    limit: u32,
) -> Vec<(u32, u32, String)> {
    if b.is_empty() {
        return a;
    }
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut out = Vec::with_capacity((a.len() + b.len()).min(limit));
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    while out.len() < limit {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if (x.0, x.1) <= (y.0, y.1) => a.next(),
            (Some(_), Some(_)) | (None, _) => b.next(),
            (Some(_), None) => a.next(),
        };
        match next {
            Some(entry) => out.push(entry),
            None => break,
        }
    }
    out
}

/// Prepared statements kept by the connection: more than the store has (21, above rusqlite's
/// default of 16), so that none is evicted and prepared again.
const STATEMENTS: usize = 64;

/// How long a statement waits for another process's write transaction.
const BUSY: Duration = Duration::from_secs(10);

/// A journal in one SQLite file.
pub type SqliteStore = Durable<Sqlite>;

/// One SQLite connection, shared behind a mutex by the calls of one store.
#[derive(Debug)]
pub struct Sqlite {
    /// Declared before `_checkpointer`, so it is dropped first (see [`Checkpointer`]).
    conn: Arc<Mutex<Connection>>,
    path: String,
    /// The file the connection opened: SQLite goes on writing into a file deleted or replaced
    /// under it (another process then sees none of it), so every call first checks the path
    /// still names this file.
    file: Arc<FileId>,
    /// Whether a commit may run on the caller's thread (it does not sync the disk).
    inline_writes: bool,
    /// Set by the WAL hook when the next write must checkpoint first.
    catch_up: Arc<AtomicBool>,
    _checkpointer: Checkpointer,
}

/// The thread that checkpoints the WAL. It ends when the store's connection closes (which
/// drops the connection's WAL hook, and with it the channel the thread waits on); dropping it
/// waits for that, so that the connection closed last has checkpointed the WAL and removed it:
/// the file alone then holds the journal, as with SQLite's own checkpoints.
#[derive(Debug)]
struct Checkpointer(Option<JoinHandle<()>>);

impl Drop for Checkpointer {
    fn drop(&mut self) {
        if let Some(thread) = self.0.take() {
            let _ = thread.join();
        }
    }
}

/// Checkpoints the WAL of `path` whenever asked, on a connection of its own opened at the first
/// request (a journal deleted or replaced meanwhile is left alone: it does not create files).
/// Once the store's connection has closed, this one closes last, and so checkpoints the WAL and
/// removes it.
fn checkpointer(path: PathBuf, file: Arc<FileId>, asked: Receiver<()>) {
    let mut conn: Option<Connection> = None;
    while asked.recv().is_ok() {
        if file.check().is_err() {
            continue;
        }
        if conn.is_none() {
            let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            conn = Connection::open_with_flags(&path, flags)
                .and_then(|c| c.busy_timeout(BUSY).map(|()| c))
                .ok();
        }
        // A checkpoint copies what no reader still needs and never waits for a writer; what it
        // could not copy is copied by the next one.
        if let Some(c) = &conn {
            let _ = c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        }
    }
}

/// The WAL hook of the store's connection. Each time the WAL grows by [`CHECKPOINT_PAGES`]
/// pages it asks the checkpointer for a checkpoint (one request at a time). A checkpoint that
/// runs beside a writer copies what was committed when it started; the WAL starts over only
/// when a write finds everything copied, which a writer that never pauses never lets happen:
/// past [`CATCH_UP_PAGES`] pages it sets `catch_up`, and the store's next write checkpoints
/// first, itself, with nothing written meanwhile (a wait of one checkpoint of what the
/// checkpointer has not copied yet).
fn ask_for_checkpoints(
    conn: &mut Connection,
    ask: SyncSender<()>,
    catch_up: Arc<AtomicBool>,
) -> rusqlite::Result<()> {
    let (mut next, mut last) = (CHECKPOINT_PAGES, 0);
    conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: i32| {
        if pages < last {
            // The WAL started over.
            next = CHECKPOINT_PAGES;
        }
        last = pages;
        if pages >= next {
            next = pages.saturating_add(CHECKPOINT_PAGES);
            match ask.try_send(()) {
                Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
            }
        }
        if pages >= CATCH_UP_PAGES {
            catch_up.store(true, Ordering::Relaxed);
        }
        Ok(())
    }))
}

/// Whether `fault` is SQLite's "database is busy/locked": the statement changed nothing and
/// may run again with a busy timeout.
fn busy(fault: &Fault) -> bool {
    let Fault::Db(cause) = fault else {
        return false;
    };
    matches!(
        cause.get().downcast_ref::<rusqlite::Error>(),
        Some(rusqlite::Error::SqliteFailure(f, _))
            if matches!(
                f.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            )
    )
}

/// Which file a path named when the journal was opened.
#[derive(Debug, PartialEq, Eq)]
struct FileId {
    path: std::path::PathBuf,
    id: Option<(u64, u64)>,
}

impl FileId {
    fn of(path: &Path) -> FileId {
        FileId {
            // Absolute, so a host that changes directory still checks the same path.
            path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned()),
            id: Self::id(path),
        }
    }

    #[cfg(unix)]
    fn id(path: &Path) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }

    #[cfg(not(unix))]
    fn id(path: &Path) -> Option<(u64, u64)> {
        std::fs::metadata(path).ok().map(|_| (0, 0))
    }

    /// An error if the path no longer names the file that was opened.
    fn check(&self) -> Result<(), Fault> {
        if Self::id(&self.path) == self.id {
            return Ok(());
        }
        Err(Fault::Db(Cause::new(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the journal file was deleted or replaced while in use; nothing more is written to \
             it, since no other process could read it",
        ))))
    }
}

fn lock(conn: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // Every mutation is a single statement or a transaction, so a poisoned lock still guards a
    // consistent connection.
    conn.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Durable<Sqlite> {
    /// Opens (creating if needed) the journal at `path` and migrates its schema.
    pub fn open(path: impl AsRef<Path>, durability: Durability) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let failed = |action: &str, e: rusqlite::Error| StoreError::Backend {
            journal: name.clone(),
            action: action.to_owned(),
            source: Cause::new(e),
        };
        let conn = Connection::open(path).map_err(|e| failed("open the file", e))?;
        // Every statement is prepared once per connection and kept.
        conn.set_prepared_statement_cache_capacity(STATEMENTS);
        conn.busy_timeout(BUSY)
            .map_err(|e| failed("set the busy timeout", e))?;
        let sync = match durability {
            Durability::Process => "NORMAL",
            Durability::PowerLoss => "FULL",
        };
        let pragmas =
            format!("PRAGMA journal_mode=WAL; PRAGMA synchronous={sync}; PRAGMA foreign_keys=ON;");
        // While another connection recovers the WAL of a process that was killed, setting the
        // journal mode can answer SQLITE_BUSY without calling the busy handler: wait as the
        // busy timeout would, rather than fail a process that merely started at that moment.
        let waited = std::time::Instant::now();
        loop {
            match conn.execute_batch(&pragmas) {
                Ok(()) => break,
                Err(rusqlite::Error::SqliteFailure(f, _))
                    if f.code == rusqlite::ErrorCode::DatabaseBusy && waited.elapsed() < BUSY =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(failed("set WAL mode", e)),
            }
        }
        let file = Arc::new(FileId::of(path));
        let (ask, asked) = sync_channel(1);
        let mut conn = conn;
        let catch_up = Arc::new(AtomicBool::new(false));
        ask_for_checkpoints(&mut conn, ask, Arc::clone(&catch_up))
            .map_err(|e| failed("set the WAL hook", e))?;
        let thread = {
            let (path, file) = (file.path.clone(), Arc::clone(&file));
            std::thread::Builder::new()
                .name("terminus-sqlite-checkpoint".into())
                .spawn(move || checkpointer(path, file, asked))
                .map_err(|e| StoreError::Backend {
                    journal: name.clone(),
                    action: "start the checkpoint thread".into(),
                    source: Cause::new(e),
                })?
        };
        let store = Durable::new(Sqlite {
            conn: Arc::new(Mutex::new(conn)),
            path: name,
            file,
            inline_writes: durability == Durability::Process,
            catch_up,
            _checkpointer: Checkpointer(Some(thread)),
        });
        store.migrate()?;
        // From now on a statement that would wait runs on the blocking pool (`Sqlite::run`).
        store
            .unchecked(|c| c.busy_timeout(Duration::ZERO))
            .map_err(|e| StoreError::Backend {
                journal: store.backend.path.clone(),
                action: "set the busy timeout".into(),
                source: Cause::new(e),
            })?;
        Ok(store)
    }

    fn migrate(&self) -> Result<(), StoreError> {
        let backend = &self.backend;
        let failed = |e: rusqlite::Error| StoreError::Backend {
            journal: backend.path.clone(),
            action: "migrate the schema".into(),
            source: Cause::new(e),
        };
        let mut conn = lock(&backend.conn);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(failed)?;
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(failed)?;
        let version = usize::try_from(version).unwrap_or(usize::MAX);
        if version > MIGRATIONS.len() {
            return Err(StoreError::Corrupt {
                journal: backend.path.clone(),
                what: format!(
                    "the schema version is {version}, newer than this build knows ({})",
                    MIGRATIONS.len()
                ),
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
            tx.execute_batch(sql).map_err(failed)?;
            tx.pragma_update(None, "user_version", i64::try_from(i + 1).unwrap_or(0))
                .map_err(failed)?;
        }
        tx.commit().map_err(failed)
    }

    /// The schema version (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        self.unchecked(|c| c.query_row("PRAGMA user_version", [], |r| r.get(0)))
    }

    /// Runs raw SQL on the journal's own connection (tests and maintenance only: a `PRAGMA`
    /// holds for this connection alone).
    #[doc(hidden)]
    pub fn execute_unchecked(&self, sql: &str) -> Result<(), StoreError> {
        self.unchecked(|c| c.execute_batch(sql))
    }

    /// Runs `f` on the connection on this thread, waiting up to the busy timeout for another
    /// process's transaction.
    fn unchecked<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        waiting(&mut lock(&self.backend.conn), |c| f(c)).map_err(|e| StoreError::Backend {
            journal: self.backend.path.clone(),
            action: "run a maintenance statement".into(),
            source: Cause::new(e),
        })
    }
}

/// Runs `f` with the connection's busy timeout set to [`BUSY`], then zero again.
fn waiting<T, E: From<rusqlite::Error>>(
    conn: &mut Connection,
    f: impl FnOnce(&mut Connection) -> Result<T, E>,
) -> Result<T, E> {
    conn.busy_timeout(BUSY)?;
    let out = f(conn);
    conn.busy_timeout(Duration::ZERO)?;
    out
}

/// What a statement does, for where it may run (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Reads only: never waits in WAL mode, except briefly while a crashed process's WAL is
    /// recovered (then it is busy, and goes to the pool).
    Read,
    /// Writes: commits, which sync the disk with [`Durability::PowerLoss`].
    Write,
}

impl Sqlite {
    /// Runs `f` on the connection: on this thread when it cannot wait there (the connection
    /// is free, and a write does not sync the disk) and the database is not busy, else on the
    /// blocking pool with the busy timeout. `f` may run twice: a statement that found the
    /// database busy changed nothing.
    async fn run<T: Send + 'static>(
        &self,
        access: Access,
        f: impl Fn(&mut Connection) -> Result<T, Fault> + Send + 'static,
    ) -> Result<T, Fault> {
        let catch_up = access == Access::Write && self.catch_up.swap(false, Ordering::Relaxed);
        if !catch_up && (access == Access::Read || self.inline_writes) {
            let conn = match self.conn.try_lock() {
                Ok(conn) => Some(conn),
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            };
            if let Some(mut conn) = conn {
                self.file.check()?;
                match f(&mut conn) {
                    Err(fault) if busy(&fault) => {}
                    done => return done,
                }
            }
        }
        let (conn, file) = (Arc::clone(&self.conn), Arc::clone(&self.file));
        tokio::task::spawn_blocking(move || {
            file.check()?;
            waiting(&mut lock(&conn), |c| {
                if catch_up {
                    // Waits for the checkpointer, then copies the rest: the next write starts
                    // the WAL over.
                    c.query_row("PRAGMA wal_checkpoint(FULL)", [], |_| Ok(()))?;
                }
                f(c)
            })
        })
        .await
        .map_err(|e| Fault::Db(Cause::new(e)))?
    }
}

fn count(n: i64, what: &str) -> Result<u64, Fault> {
    u64::try_from(n).map_err(|_| Fault::Corrupt(format!("{what} is negative ({n})")))
}

#[async_trait]
impl Backend for Sqlite {
    fn name(&self) -> &str {
        &self.path
    }

    async fn create(
        &self,
        execution: &str,
        spec: String,
        claim: Option<(&str, Duration)>,
    ) -> Result<bool, Fault> {
        let execution = execution.to_owned();
        let claim = claim.map(|(worker, lease)| (worker.to_owned(), lease));
        self.run(Access::Write, move |c| {
            let now = now_ms();
            let (worker, until) = match &claim {
                Some((worker, lease)) => (Some(worker), now.saturating_add(millis(*lease))),
                None => (None, 0),
            };
            // A new execution takes the next number, and its entries are packed under it;
            // one that already has entries by its id (appended before it was created) keeps
            // them all there, so that each key has one place.
            let n = c
                .prepare_cached(
                    "INSERT INTO executions (id, created_ms, spec, worker, lease_until_ms, num)
                 VALUES (?1, ?2, ?3, ?4, ?5,
                   CASE WHEN EXISTS (SELECT 1 FROM entries WHERE execution = ?1) THEN NULL
                        ELSE (SELECT coalesce(max(num), 0) + 1 FROM executions) END)
                 ON CONFLICT(id) DO NOTHING",
                )?
                .execute(params![execution, now, spec, worker, until])?;
            Ok(n == 1)
        })
        .await
    }

    async fn row(&self, execution: &str) -> Result<Option<ExecutionRow>, Fault> {
        let execution = execution.to_owned();
        self.run(Access::Read, move |c| {
            Ok(c.prepare_cached(
                "SELECT status, worker, spec, report, failure, conflicts, held, suspended_ms,
                   paused_ms
                 FROM executions WHERE id = ?1",
            )?
            .query_row([&execution], |r| {
                Ok(ExecutionRow {
                    status: r.get(0)?,
                    worker: r.get(1)?,
                    spec: r.get(2)?,
                    report: r.get(3)?,
                    failure: r.get(4)?,
                    conflicts: {
                        let n: i64 = r.get(5)?;
                        u64::try_from(n)
                            .map_err(|_| rusqlite::Error::IntegralValueOutOfRange(5, n))?
                    },
                    held: r.get(6)?,
                    suspended_ms: r.get(7)?,
                    paused_ms: r.get(8)?,
                })
            })
            .optional()?)
        })
        .await
    }

    async fn append(
        &self,
        execution: &str,
        entries: Vec<RawEntry>,
    ) -> Result<Vec<Option<String>>, Fault> {
        let execution = execution.to_owned();
        self.run(Access::Write, move |c| {
            // The write lock first: busy now, or never (the closure may then run again).
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let num = num_of(&tx, &execution)?;
            let mut out = Vec::with_capacity(entries.len());
            for e in &entries {
                let stored = if insert_entry(&tx, &execution, num, e)? {
                    None
                } else {
                    Some(stored_body(&tx, &execution, num, e)?)
                };
                out.push(stored);
            }
            tx.commit()?;
            Ok(out)
        })
        .await
    }

    async fn page(
        &self,
        execution: &str,
        kind: Option<&'static str>,
        after: Option<(u32, u32)>,
        limit: u32,
    ) -> Result<Vec<(u32, u32, String)>, Fault> {
        let execution = execution.to_owned();
        let (cp, idx) = after.map_or((-1, -1), |(cp, idx)| (i64::from(cp), i64::from(idx)));
        self.run(Access::Read, move |c| {
            let mut packed = Vec::new();
            if let Some((start, end)) = packed_after(num_of(c, &execution)?, after) {
                let mut stmt = c.prepare_cached(
                    "SELECT key, body FROM packed_entries
                     WHERE key > ?1 AND key < ?2 AND (?3 IS NULL OR kind = ?3)
                     ORDER BY key LIMIT ?4",
                )?;
                let rows = stmt.query_map(params![start, end, kind, limit], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                })?;
                for row in rows {
                    let (key, body) = row?;
                    let (checkpoint, index) = unpacked(key);
                    packed.push((checkpoint, index, body));
                }
            }
            let mut stmt = c.prepare_cached(
                "SELECT checkpoint, idx, body FROM entries
                 WHERE execution = ?1 AND (?2 IS NULL OR kind = ?2)
                   AND (checkpoint > ?3 OR (checkpoint = ?3 AND idx > ?4))
                 ORDER BY checkpoint, idx LIMIT ?5",
            )?;
            let rows = stmt.query_map(params![execution, kind, cp, idx, limit], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
            let by_id = rows.collect::<Result<Vec<_>, _>>()?;
            Ok(merged(packed, by_id, limit))
        })
        .await
    }

    async fn count(&self, execution: &str) -> Result<u64, Fault> {
        let execution = execution.to_owned();
        self.run(Access::Read, move |c| {
            // One statement (one read transaction) over both tables.
            let n: i64 = c
                .prepare_cached(
                    "SELECT
                       (SELECT count(*) FROM packed_entries
                        WHERE key >= (SELECT num << 40 FROM executions
                                      WHERE id = ?1 AND num BETWEEN 1 AND 8388606)
                          AND key < (SELECT (num + 1) << 40 FROM executions
                                     WHERE id = ?1 AND num BETWEEN 1 AND 8388606))
                       + (SELECT count(*) FROM entries WHERE execution = ?1)",
                )?
                .query_row([&execution], |r| r.get(0))?;
            count(n, "the entry count")
        })
        .await
    }

    async fn finish(
        &self,
        execution: &str,
        report: String,
        release: Option<&str>,
    ) -> Result<(), Fault> {
        let execution = execution.to_owned();
        let release = release.map(str::to_owned);
        self.run(Access::Write, move |c| {
            c.prepare_cached(FINISH)?
                .execute(params![execution, report, release])?;
            Ok(())
        })
        .await
    }

    async fn finish_appending(
        &self,
        execution: &str,
        entries: Vec<RawEntry>,
        report: String,
        release: &str,
    ) -> Result<bool, Fault> {
        let execution = execution.to_owned();
        let release = release.to_owned();
        self.run(Access::Write, move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let num = num_of(&tx, &execution)?;
            for e in &entries {
                if !insert_entry(&tx, &execution, num, e)? {
                    // Dropping the transaction rolls it back.
                    return Ok(false);
                }
            }
            tx.prepare_cached(FINISH)?
                .execute(params![execution, report, release])?;
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    async fn reopen(&self, execution: &str, entries: Vec<RawEntry>) -> Result<bool, Fault> {
        let execution = execution.to_owned();
        self.run(Access::Write, move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let ended = tx
                .prepare_cached("SELECT report IS NOT NULL FROM executions WHERE id = ?1")?
                .query_row([&execution], |r| r.get::<_, bool>(0))
                .optional()?;
            if ended != Some(true) {
                return Ok(false);
            }
            let num = num_of(&tx, &execution)?;
            for e in &entries {
                if !insert_entry(&tx, &execution, num, e)? {
                    // Dropping the transaction rolls it back.
                    return Ok(false);
                }
            }
            tx.prepare_cached(
                "UPDATE executions SET status = 'running', report = NULL WHERE id = ?1",
            )?
            .execute([&execution])?;
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    async fn claim(
        &self,
        execution: &str,
        worker: &str,
        lease: Duration,
    ) -> Result<Claimed, Fault> {
        let (execution, worker) = (execution.to_owned(), worker.to_owned());
        self.run(Access::Write, move |c| {
            let now = now_ms();
            let until = now.saturating_add(millis(lease));
            let n = c.prepare_cached(
                "UPDATE executions SET worker = ?2, lease_until_ms = ?3,
                        status = CASE WHEN status IN ('done', 'failed') THEN status ELSE 'running' END,
                        suspended_ms = CASE WHEN held = 0 THEN NULL ELSE suspended_ms END
                 WHERE id = ?1 AND (worker IS NULL OR worker = ?2 OR lease_until_ms < ?4)")?.execute(
                params![execution, worker, until, now],
            )?;
            if n == 1 {
                return Ok(Claimed::Taken);
            }
            let holder: Option<Option<String>> = c
                .query_row(
                    "UPDATE executions SET conflicts = conflicts + 1 WHERE id = ?1 RETURNING worker",
                    [&execution],
                    |r| r.get(0),
                )
                .optional()?;
            Ok(match holder {
                None => Claimed::Missing,
                Some(holder) => Claimed::HeldBy(holder.unwrap_or_default()),
            })
        })
        .await
    }

    async fn claim_next(&self, worker: &str, lease: Duration) -> Result<Option<String>, Fault> {
        let worker = worker.to_owned();
        self.run(Access::Write, move |c| {
            let now = now_ms();
            let until = now.saturating_add(millis(lease));
            // One immediate transaction: SQLite has one writer at a time, so two workers cannot
            // take the same row.
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let id: Option<String> = tx
                .query_row(
                    "SELECT id FROM executions WHERE status NOT IN ('done', 'failed')
                     AND spec IS NOT NULL AND held = 0 AND (worker IS NULL OR lease_until_ms < ?1)
                     ORDER BY created_ms, id LIMIT 1",
                    [now],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(id) = &id {
                tx.prepare_cached(
                    "UPDATE executions SET worker = ?2, lease_until_ms = ?3, status = 'running',
                       suspended_ms = NULL
                     WHERE id = ?1",
                )?
                .execute(params![id, worker, until])?;
            }
            tx.commit()?;
            Ok(id)
        })
        .await
    }

    async fn renew(&self, execution: &str, worker: &str, lease: Duration) -> Result<bool, Fault> {
        let (execution, worker) = (execution.to_owned(), worker.to_owned());
        self.run(Access::Write, move |c| {
            let until = now_ms().saturating_add(millis(lease));
            let n = c
                .prepare_cached(
                    "UPDATE executions SET lease_until_ms = ?3 WHERE id = ?1 AND worker = ?2",
                )?
                .execute(params![execution, worker, until])?;
            if n == 0 {
                c.prepare_cached("UPDATE executions SET conflicts = conflicts + 1 WHERE id = ?1")?
                    .execute([&execution])?;
            }
            Ok(n == 1)
        })
        .await
    }

    async fn release(&self, execution: &str, worker: &str) -> Result<(), Fault> {
        let (execution, worker) = (execution.to_owned(), worker.to_owned());
        self.run(Access::Write, move |c| {
            c.prepare_cached(
                "UPDATE executions SET worker = NULL, lease_until_ms = 0
                 WHERE id = ?1 AND worker = ?2",
            )?
            .execute(params![execution, worker])?;
            Ok(())
        })
        .await
    }

    async fn suspend(
        &self,
        execution: &str,
        worker: &str,
        held: u32,
        at_ms: i64,
    ) -> Result<bool, Fault> {
        let (execution, worker) = (execution.to_owned(), worker.to_owned());
        self.run(Access::Write, move |c| {
            let n = c
                .prepare_cached(
                    "UPDATE executions SET held = ?3, suspended_ms = coalesce(suspended_ms, ?4),
                       worker = NULL,
                       lease_until_ms = 0
                     WHERE id = ?1 AND worker = ?2",
                )?
                .execute(params![execution, worker, held, at_ms])?;
            Ok(n == 1)
        })
        .await
    }

    async fn decide(&self, execution: &str, entry: RawEntry, at_ms: i64) -> Result<Decided, Fault> {
        let execution = execution.to_owned();
        self.run(Access::Write, move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let Some((num, held)) = tx
                .prepare_cached("SELECT num, held FROM executions WHERE id = ?1")?
                .query_row([&execution], |r| {
                    Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, i64>(1)?))
                })
                .optional()?
            else {
                return Ok(Decided::Missing);
            };
            if let Some(body) = stored_body(&tx, &execution, num, &entry).optional()? {
                return Ok(Decided::Stored(body));
            }
            if held <= 0 {
                return Ok(Decided::NotSuspended);
            }
            insert_entry(&tx, &execution, num, &entry)?;
            tx.prepare_cached(
                "UPDATE executions SET held = held - 1,
                   paused_ms = paused_ms + CASE WHEN held = 1
                     THEN max(0, ?2 - coalesce(suspended_ms, ?2)) ELSE 0 END
                 WHERE id = ?1",
            )?
            .execute(params![execution, at_ms])?;
            tx.commit()?;
            Ok(Decided::Written)
        })
        .await
    }

    async fn fail(&self, execution: &str, worker: &str, failure: String) -> Result<bool, Fault> {
        let (execution, worker) = (execution.to_owned(), worker.to_owned());
        self.run(Access::Write, move |c| {
            let n = c
                .prepare_cached(
                    "UPDATE executions SET status = 'failed', failure = ?3, worker = NULL,
                        lease_until_ms = 0
                 WHERE id = ?1 AND worker = ?2 AND status != 'done'",
                )?
                .execute(params![execution, worker, failure])?;
            Ok(n == 1)
        })
        .await
    }

    async fn executions(&self, filter: &ListFilter) -> Result<Vec<ListedRow>, Fault> {
        let filter = filter.clone();
        self.run(Access::Read, move |c| {
            let mut stmt = c.prepare_cached(LIST)?;
            let rows = stmt.query_map(
                params![now_ms(), filter.outcome, filter.reason, filter.min_steps],
                |r| {
                    Ok(ListedRow {
                        id: r.get(0)?,
                        name: r.get(1)?,
                        live: r.get(2)?,
                        failed: r.get(3)?,
                        outcome: r.get(4)?,
                        reason: r.get(5)?,
                        rule: r.get(6)?,
                        steps: r.get(7)?,
                        model_calls: r.get(8)?,
                        tool_calls: r.get(9)?,
                        entries: r.get(10)?,
                        suspended: r.get(11)?,
                        decided: r.get(12)?,
                    })
                },
            )?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    async fn cell(&self, key: &str) -> Result<Option<(u64, String)>, Fault> {
        let key = key.to_owned();
        self.run(Access::Read, move |c| {
            let row: Option<(i64, String)> = c
                .query_row(
                    "SELECT version, body FROM cells WHERE key = ?1",
                    [&key],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            row.map(|(v, body)| Ok((count(v, "a cell's version")?, body)))
                .transpose()
        })
        .await
    }

    async fn put_cell(
        &self,
        key: &str,
        expected: Option<u64>,
        body: String,
    ) -> Result<Option<u64>, Fault> {
        let key = key.to_owned();
        self.run(Access::Write, move |c| {
            let n = match expected {
                None => c
                    .prepare_cached(
                        "INSERT INTO cells (key, version, body) VALUES (?1, 1, ?2)
                     ON CONFLICT (key) DO NOTHING",
                    )?
                    .execute(params![key, body])?,
                Some(v) => c
                    .prepare_cached(
                        "UPDATE cells SET version = version + 1, body = ?3
                     WHERE key = ?1 AND version = ?2",
                    )?
                    .execute(params![key, i64::try_from(v).unwrap_or(i64::MAX), body])?,
            };
            Ok((n == 1).then(|| expected.map_or(1, |v| v + 1)))
        })
        .await
    }
}
