//! Sinks: where record batches and checkpoints are committed together.
//!
//! The DuckDB connection is blocking and single-writer, so it lives on its own
//! thread; async pipeline code talks to it through a [`SinkHandle`], which keeps
//! network waits and disk writes from blocking each other.

pub mod duckdb;

use std::path::PathBuf;
use std::sync::mpsc;

use arrow::record_batch::RecordBatch;

use crate::tables::TableDef;

pub use self::duckdb::DuckDbSink;

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
    #[error("building a batch for {table}: {source}")]
    Batch {
        table: String,
        source: arrow::error::ArrowError,
    },
    #[error("the warehouse writer stopped")]
    Closed,
}

/// One table's rows, ready to load.
#[derive(Debug)]
pub struct TableBatch {
    pub table: &'static TableDef,
    pub batch: RecordBatch,
    /// [`LoadRule::Replace`](crate::tables::LoadRule::Replace): the partitions
    /// this batch holds in full, even those it holds no row of.
    pub partitions: Vec<String>,
}

impl TableBatch {
    /// Finishes a builder into a batch for its table.
    ///
    /// # Errors
    /// When a row was misshapen (a bug in a record mapper), named with the table.
    pub fn build(builder: crate::batch::BatchBuilder) -> Result<TableBatch, SinkError> {
        let table = builder.table();
        let batch = builder.finish().map_err(|source| SinkError::Batch {
            table: table.name.into(),
            source,
        })?;
        Ok(TableBatch {
            table,
            batch,
            partitions: Vec::new(),
        })
    }
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

/// Rows a commit inserted or changed, per table (unchanged rows are not rewritten).
#[derive(Debug, Default, Clone)]
pub struct CommitStats {
    pub rows_written: u64,
    pub per_table: Vec<(&'static str, u64)>,
}

type Job = Box<dyn FnOnce(&mut DuckDbSink) + Send>;

enum Message {
    Job(Job),
    /// Close the database (releasing its file lock) and stop the thread.
    Close(tokio::sync::oneshot::Sender<()>),
}

/// Async access to a sink that runs on its own thread.
#[derive(Clone)]
pub struct SinkHandle {
    jobs: mpsc::Sender<Message>,
}

impl SinkHandle {
    /// Opens (creating if needed) the DuckDB warehouse at `path` on a writer thread.
    ///
    /// # Errors
    /// When the file cannot be opened or its schema cannot be created.
    pub async fn open_duckdb(path: PathBuf) -> Result<SinkHandle, SinkError> {
        let (jobs, inbox) = mpsc::channel::<Message>();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("fdsync-duckdb".into())
            .spawn(move || match DuckDbSink::open(&path) {
                Ok(mut sink) => {
                    let _ = ready_tx.send(Ok(()));
                    for message in inbox {
                        match message {
                            Message::Job(job) => job(&mut sink),
                            Message::Close(done) => {
                                drop(sink);
                                let _ = done.send(());
                                return;
                            }
                        }
                    }
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
        Ok(SinkHandle { jobs })
    }

    /// Runs `f` on the writer thread and returns its result.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut DuckDbSink) -> R + Send + 'static,
    ) -> Result<R, SinkError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Message::Job(Box::new(move |sink| {
                let _ = tx.send(f(sink));
            })))
            .map_err(|_| SinkError::Closed)?;
        rx.await.map_err(|_| SinkError::Closed)
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
        self.call(move |sink| sink.commit(commit)).await?
    }
}
