//! Sinks: where record batches and checkpoints are committed together.
//!
//! The DuckDB connection is blocking and single-writer, so it lives on its own
//! thread; async pipeline code talks to it through a [`SinkHandle`], which keeps
//! network waits and disk writes from blocking each other.

pub mod duckdb;
pub mod lock;
pub mod policy;
pub mod reader_copy;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::{Duration, Instant};

pub use self::duckdb::DuckDbSink;
pub use crate::batch::TableBatch;

/// What the process does as the writer begins a load, given its rows: the
/// binary paces its allocator from it, which the sink knows nothing of.
static LOAD_HOOK: OnceLock<fn(usize)> = OnceLock::new();

/// Installs the process's hook for the writer's loads; the first one stays.
pub fn on_load(hook: fn(usize)) {
    if LOAD_HOOK.set(hook).is_err() {
        tracing::debug!("A load hook was installed already; the first one stays.");
    }
}

/// Tells the installed hook, if any, that a load of `rows` rows begins.
pub(crate) fn note_load(rows: usize) {
    if let Some(hook) = LOAD_HOOK.get() {
        hook(rows);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot open warehouse {path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error("warehouse table {table}: {context}: {source}")]
    Sql {
        table: String,
        context: &'static str,
        source: ::duckdb::Error,
    },
    #[error(
        "warehouse table {table}: {context}: DuckDB needed more than the {limit_mb} MiB it had for this \
         ({message}); raise [warehouse] memory_limit_mb (now {configured_mb}) in the config; nothing is \
         lost: the commit was rolled back and the next run resumes from the last one"
    )]
    OutOfMemory {
        table: String,
        context: &'static str,
        /// The limit DuckDB had when it ran out: appends and bulk commits
        /// run under part of the configured one.
        limit_mb: u64,
        configured_mb: u64,
        message: String,
    },
    #[error(
        "the disk holding the warehouse {path} is full ({message}); free space there or move the warehouse \
         ([warehouse] duckdb), then run again; nothing is lost: the commit was rolled back and the next run \
         resumes from the last one"
    )]
    DiskFull { path: PathBuf, message: String },
    #[error(
        "the warehouse {path} is at layout version {found}, written by a newer fdsync; this one knows up to \
         {known}: run the newer fdsync (or point [warehouse] duckdb at another file); nothing was changed"
    )]
    NewerLayout { path: PathBuf, found: u32, known: u32 },
    #[error(transparent)]
    Batch(#[from] crate::batch::BatchError),
    #[error("the warehouse writer stopped")]
    Closed,
    #[error("not committed: a commit queued before it failed; the next run reads its rows again")]
    EarlierCommitFailed,
    #[error(transparent)]
    Locked(#[from] lock::LockError),
    #[error(
        "cannot open warehouse {path} again for the next write (it was released while idle): {message}; \
         nothing is lost: the run resumes from its last commit"
    )]
    Reopen { path: PathBuf, message: String },
    #[error(
        "reader copy {path} not replaced: {message}; readers keep the previous copy and the warehouse is \
         untouched ([warehouse] reader_copy)"
    )]
    ReaderCopy { path: PathBuf, message: String },
}

/// A pipeline's position in one partition (a company, a feed), saved with its rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub pipeline: String,
    pub partition: String,
    pub cursor: String,
}

/// A checkpoint as stored.
#[derive(Debug, Clone)]
pub struct StoredCheckpoint {
    pub cursor: String,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

/// Rows and the checkpoints that cover them: committed in one transaction or not at all.
#[derive(Debug, Default)]
pub struct Commit {
    pub batches: Vec<TableBatch>,
    pub checkpoints: Vec<Checkpoint>,
}

/// The work on a commit's batches that needs no warehouse, done on the
/// caller's thread rather than the writer's, a backfill's bottleneck: for
/// now, whether each large batch's keys are distinct. Call it where blocking
/// is fine.
///
/// # Errors
/// When a batch lacks a key column (a bug in a reader).
pub fn prepare_batches(batches: &mut [TableBatch]) -> Result<(), SinkError> {
    Ok(TableBatch::find_distinct_keys(batches, self::duckdb::MIN_PROBE_ROWS)?)
}

/// Rows a commit inserted or changed, per table (unchanged rows are not rewritten).
#[derive(Debug, Default, Clone)]
pub struct CommitStats {
    pub rows_written: u64,
    pub per_table: Vec<(&'static str, u64)>,
}

/// Work for the writer thread; it gets the open database, or why it could
/// not be opened again after an idle release.
type Job = Box<dyn FnOnce(Result<&mut DuckDbSink, SinkError>) + Send>;

enum Message {
    Job(Job),
    /// Close the database (releasing its file lock) and stop the thread.
    Close(tokio::sync::oneshot::Sender<()>),
    /// Close the database, keeping the writer's claim, and copy its file.
    ReaderCopy(
        PathBuf,
        tokio::sync::oneshot::Sender<Result<reader_copy::Published, SinkError>>,
    ),
}

/// How the writer holds the warehouse.
#[derive(Debug, Clone)]
pub struct SinkOptions {
    /// Shown to a second writer that finds the warehouse taken (`fdsync daemon`).
    pub holder: String,
    /// Close the database after this long without work, so readers can open
    /// it; it is opened again for the next job. `None` holds it throughout.
    pub release_when_idle: Option<Duration>,
    /// How long a job waits for a reader to let go of the file before failing.
    pub reopen_wait: Duration,
    pub duckdb: duckdb::Settings,
}

impl SinkOptions {
    /// The options `[warehouse]` asks for, held as `holder` (the command line).
    pub fn from_config(warehouse: &crate::config::WarehouseConfig, holder: &str) -> SinkOptions {
        SinkOptions {
            holder: holder.to_owned(),
            release_when_idle: (warehouse.release_when_idle_ms > 0)
                .then(|| Duration::from_millis(warehouse.release_when_idle_ms)),
            duckdb: duckdb::Settings {
                memory_limit_mb: warehouse.memory_limit_mb,
                threads: warehouse.duckdb_threads,
                storage_version: warehouse.storage_version.clone(),
                ..duckdb::Settings::default()
            },
            ..SinkOptions::default()
        }
    }
}

impl Default for SinkOptions {
    fn default() -> Self {
        SinkOptions {
            holder: "fdsync".into(),
            release_when_idle: Some(Duration::from_secs(1)),
            reopen_wait: Duration::from_secs(60),
            duckdb: duckdb::Settings::default(),
        }
    }
}

/// Async access to a sink that runs on its own thread.
#[derive(Clone)]
pub struct SinkHandle {
    jobs: mpsc::Sender<Message>,
    /// False once the writer thread has ended.
    alive: Arc<AtomicBool>,
    /// When a commit last succeeded through this handle or its clones;
    /// watched by whoever acts on commits (the lake's publish while streaming).
    last_commit: Arc<tokio::sync::watch::Sender<Option<Instant>>>,
}

/// Commits queued on the writer one behind another ([`SinkHandle::queue_commit`]):
/// after one fails, the later ones do not run, so none can land a
/// checkpoint past rows that were rolled back.
#[derive(Debug, Clone, Default)]
pub struct CommitChain {
    broken: Arc<AtomicBool>,
}

/// A commit handed to the writer: resolves once it landed (or was held),
/// with what it wrote.
#[derive(Debug)]
pub struct QueuedCommit {
    landed: tokio::sync::oneshot::Receiver<Result<CommitStats, SinkError>>,
    last_commit: Arc<tokio::sync::watch::Sender<Option<Instant>>>,
}

impl std::future::Future for QueuedCommit {
    type Output = Result<CommitStats, SinkError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let landed = std::task::ready!(std::pin::Pin::new(&mut self.landed).poll(cx));
        let result = landed.unwrap_or(Err(SinkError::Closed));
        if let Ok(stats) = &result {
            self.last_commit.send_replace(Some(Instant::now()));
            crate::metrics::rows_written(stats.rows_written, &stats.per_table);
        }
        std::task::Poll::Ready(result)
    }
}

/// Marks the writer thread ended when dropped.
struct WriterAlive(Arc<AtomicBool>);

impl Drop for WriterAlive {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

impl SinkHandle {
    /// Opens (creating if needed) the DuckDB warehouse at `path` on a writer
    /// thread, with the default [`SinkOptions`].
    ///
    /// # Errors
    /// When another writer holds it, or the file cannot be opened or its schema created.
    pub async fn open_duckdb(path: PathBuf) -> Result<SinkHandle, SinkError> {
        Self::open_duckdb_with(path, SinkOptions::default()).await
    }

    /// Opens the warehouse `[warehouse]` names, with its options, for
    /// `holder` (what the lock names to another writer).
    ///
    /// # Errors
    /// When another writer holds it, or the file cannot be opened or its schema created.
    pub async fn open_configured(
        warehouse: &crate::config::WarehouseConfig,
        holder: &str,
    ) -> Result<SinkHandle, SinkError> {
        Self::open_duckdb_with(warehouse.duckdb.clone(), SinkOptions::from_config(warehouse, holder)).await
    }

    /// Opens the warehouse as [`open_duckdb`](Self::open_duckdb) does, with `options`.
    ///
    /// # Errors
    /// When another writer holds it, or the file cannot be opened or its schema created.
    pub async fn open_duckdb_with(path: PathBuf, options: SinkOptions) -> Result<SinkHandle, SinkError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| SinkError::Open {
                path: path.clone(),
                message: format!("creating {}: {e}", dir.display()),
            })?;
        }
        let claim = lock::WriterLock::acquire(&path, &options.holder)?;
        let (jobs, inbox) = mpsc::channel::<Message>();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let alive = Arc::new(AtomicBool::new(true));
        let writer_alive = WriterAlive(alive.clone());
        std::thread::Builder::new()
            .name("fdsync-duckdb".into())
            .spawn(move || match DuckDbSink::open(&path, &options.duckdb) {
                Ok(sink) => {
                    // Dropped when the thread ends, a panic included.
                    let _alive = writer_alive;
                    let _ = ready_tx.send(Ok(()));
                    serve(sink, claim, &path, &options, &inbox);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| SinkError::Open {
                path: PathBuf::new(),
                message: e.to_string(),
            })?;
        ready_rx.await.map_err(|_| SinkError::Closed)??;
        Ok(SinkHandle {
            jobs,
            alive,
            last_commit: Arc::new(tokio::sync::watch::Sender::new(None)),
        })
    }

    /// Whether the writer thread still runs: it stops on [`SinkHandle::close`]
    /// or when a job panics, after which every call fails with [`SinkError::Closed`].
    pub fn writer_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// How long ago a commit last succeeded through this handle, if one did.
    pub fn since_last_commit(&self) -> Option<Duration> {
        self.last_commit.borrow().map(|at| at.elapsed())
    }

    /// When a commit last succeeded, if one did: a receiver that wakes on
    /// each commit.
    pub fn commits(&self) -> tokio::sync::watch::Receiver<Option<Instant>> {
        self.last_commit.subscribe()
    }

    /// Runs `f` on the writer thread and returns its result.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut DuckDbSink) -> R + Send + 'static,
    ) -> Result<R, SinkError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Message::Job(Box::new(move |sink| {
                let _ = tx.send(sink.map(f));
            })))
            .map_err(|_| SinkError::Closed)?;
        rx.await.map_err(|_| SinkError::Closed)?
    }

    /// Finishes the jobs already queued, closes the database and releases its
    /// file, so another process (or a new handle) can open it.
    pub async fn close(&self) {
        let (done, closed) = tokio::sync::oneshot::channel();
        if self.jobs.send(Message::Close(done)).is_ok() {
            let _ = closed.await;
        }
    }

    pub async fn commit(&self, commit: Commit) -> Result<CommitStats, SinkError> {
        self.queue_commit(commit, false, &CommitChain::default())?.await
    }

    /// A commit that may wait for later ones in the same transaction
    /// ([`DuckDbSink::commit_held`]); [`SinkHandle::commit_held_now`] ends the wait.
    pub async fn commit_held(&self, commit: Commit) -> Result<CommitStats, SinkError> {
        self.queue_commit(commit, true, &CommitChain::default())?.await
    }

    /// Hands `commit` (held, with `hold`) to the writer behind the jobs
    /// already queued, without waiting for it: the caller prepares the next
    /// commit meanwhile, and the writer starts it as this one ends. It runs
    /// only if every earlier commit of `chain` succeeded.
    ///
    /// # Errors
    /// When the writer has stopped.
    pub fn queue_commit(&self, commit: Commit, hold: bool, chain: &CommitChain) -> Result<QueuedCommit, SinkError> {
        let (tx, landed) = tokio::sync::oneshot::channel();
        let broken = chain.broken.clone();
        let job: Job = Box::new(move |sink| {
            let result = if broken.load(Ordering::Relaxed) {
                Err(SinkError::EarlierCommitFailed)
            } else {
                sink.and_then(|sink| {
                    if hold {
                        sink.commit_held(commit)
                    } else {
                        sink.commit(commit)
                    }
                })
            };
            if result.is_err() {
                broken.store(true, Ordering::Relaxed);
            }
            let _ = tx.send(result);
        });
        self.jobs.send(Message::Job(job)).map_err(|_| SinkError::Closed)?;
        Ok(QueuedCommit {
            landed,
            last_commit: self.last_commit.clone(),
        })
    }

    /// Replaces the reader copy at `copy` with the warehouse as committed so
    /// far, behind the jobs already queued; the next job opens the warehouse
    /// again. An unchanged warehouse is not copied again.
    ///
    /// # Errors
    /// When the copy cannot be written (the old one stays) or the writer has stopped.
    pub async fn publish_reader_copy(&self, copy: PathBuf) -> Result<reader_copy::Published, SinkError> {
        let (done, copied) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Message::ReaderCopy(copy, done))
            .map_err(|_| SinkError::Closed)?;
        copied.await.map_err(|_| SinkError::Closed)?
    }

    /// Commits what [`SinkHandle::commit_held`] left waiting, if anything.
    pub async fn commit_held_now(&self) -> Result<(), SinkError> {
        self.call(DuckDbSink::commit_held_now).await?
    }
}

/// The writer thread: runs jobs in order, letting go of the file when idle
/// and taking it back for the next job.
fn serve(
    sink: DuckDbSink,
    claim: lock::WriterLock,
    path: &std::path::Path,
    options: &SinkOptions,
    inbox: &mpsc::Receiver<Message>,
) {
    let mut open = Some(sink);
    loop {
        let message = match (&open, options.release_when_idle) {
            (Some(_), Some(idle)) => match inbox.recv_timeout(idle) {
                Ok(m) => m,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    release(open.take());
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return release(open.take()),
            },
            _ => match inbox.recv() {
                Ok(m) => m,
                Err(_) => return release(open.take()),
            },
        };
        match message {
            Message::Job(job) => {
                if open.is_none() {
                    match reopen(path, options) {
                        Ok(sink) => open = Some(sink),
                        Err(e) => {
                            job(Err(e));
                            continue;
                        }
                    }
                }
                job(Ok(open.as_mut().expect("opened above")));
                if let Some(sink) = open.take_if(|s| s.wants_reopen()) {
                    sink.close_for_reopen();
                    // At once, so a reader has no time to take the file; if one
                    // did, the next job waits for it as after an idle release.
                    open = DuckDbSink::reopen(path, &options.duckdb).ok();
                }
            }
            Message::ReaderCopy(copy, done) => {
                // Closed so that the file holds every commit and no log is
                // pending; the claim stays, so no other writer slips in.
                release(open.take());
                let _ = done.send(reader_copy::publish(path, &copy));
            }
            Message::Close(done) => {
                // Both released before the caller hears back, so it can open the file at once.
                release(open.take());
                drop(claim);
                let _ = done.send(());
                return;
            }
        }
    }
}

/// Closes the database, committing first what the writer held: every held
/// commit is whole, and closing the connection would roll them back.
fn release(sink: Option<DuckDbSink>) {
    if let Some(mut sink) = sink
        && let Err(e) = sink.commit_held_now()
    {
        tracing::error!(message = "The warehouse could not commit the rows it held before closing.", error = %e);
    }
}

/// Opens the file again after an idle release, waiting while a reader has it.
fn reopen(path: &std::path::Path, options: &SinkOptions) -> Result<DuckDbSink, SinkError> {
    let wait = options.reopen_wait;
    let started = Instant::now();
    let mut warned = false;
    loop {
        let message = match DuckDbSink::reopen(path, &options.duckdb) {
            Ok(sink) => return Ok(sink),
            Err(SinkError::Open { message, .. }) => message,
            Err(e) => e.to_string(),
        };
        if started.elapsed() >= wait || !duckdb::held_by_another_process(&message) {
            return Err(SinkError::Reopen {
                path: path.to_owned(),
                message,
            });
        }
        if !warned {
            tracing::warn!(message = "A reader has the warehouse open; waiting for it to close.", path = %path.display());
            warned = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
