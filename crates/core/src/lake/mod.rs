//! The lake: every warehouse table as a Delta Lake table of Parquet files, in
//! a local folder or object storage, for Spark, Trino, DuckDB and BI tools.
//!
//! DuckDB stays the system of record (rows and checkpoints commit there
//! first); the lake is published from it. Every row carries the commit that
//! last wrote it (`_commit_seq`), and each Delta commit records, as the Delta
//! protocol's application transaction of this warehouse, the newest commit it
//! includes. A publish reads what changed after that watermark, rewrites only
//! the partitions it touches, and commits the files and the new watermark in
//! one log entry: a reader sees all of it or none, a crash publishes it again,
//! and a retried file has the same name as the one it replaces.

pub mod delta;
pub mod rewrite;
pub mod snapshot;
pub mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use self::delta::{Change, LiveFile, NewFile};
use self::rewrite::Kind;
use self::store::LakeRoot;
use crate::bookkeeping::SYNC_RUNS;
use crate::feeds;
use crate::sink::{Checkpoint, Commit, SinkError, SinkHandle};
use crate::tables::TableDef;

#[derive(Debug, thiserror::Error)]
pub enum LakeError {
    #[error("warehouse.parquet_dir = {location:?}: {message}")]
    Location { location: String, message: String },
    #[error("lake table {table}: {context}: {source}")]
    Delta {
        table: String,
        context: &'static str,
        source: Box<deltalake_core::DeltaTableError>,
    },
    #[error("lake table {table}: {context} {path}: {source}")]
    Store {
        table: String,
        context: &'static str,
        path: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("lake table {table}: another writer committed meanwhile ({message}); publishing again")]
    Conflict { table: String, message: String },
    #[error(
        "lake table {table}: other writers kept committing; gave up after {attempts} attempts (the next publish resumes)"
    )]
    Contended { table: String, attempts: u32 },
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error("lake scratch folder {path}: {source}")]
    Scratch { path: PathBuf, source: std::io::Error },
}

/// Publishes fought over by other writers are retried this many times.
const MAX_ATTEMPTS: u32 = 8;

/// What a publish did to one table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TablePublished {
    pub table: &'static str,
    /// Rows read out of the warehouse (changed since the last publish).
    pub rows: u64,
    pub files_added: usize,
    pub files_removed: usize,
    /// The table's Delta version after the commit.
    pub version: u64,
    /// The warehouse commit sequence the table now includes.
    pub upto: i64,
    /// 1, or more when another writer committed first and the publish ran again.
    pub attempts: u32,
}

/// What a compaction did to one table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TableCompacted {
    pub table: &'static str,
    pub files_removed: usize,
    pub files_added: usize,
    pub version: u64,
}

/// The files a vacuum deleted (or would delete, on a dry run) from one table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TableVacuumed {
    pub table: &'static str,
    pub files: Vec<String>,
}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct PublishReport {
    pub tables: Vec<TablePublished>,
}

/// The lake at `[warehouse] parquet_dir`.
pub struct Lake {
    root: LakeRoot,
    scratch: PathBuf,
    /// Whether each publish also refreshes the tables' snapshot folders
    /// ([`snapshot`]).
    snapshots: bool,
    /// DuckDB memory for a table's merges, in MiB, as the writer's
    /// (`[warehouse] memory_limit_mb`), so a publish stays within a sync's
    /// bound; more spills to the scratch folder.
    memory_limit_mb: u64,
}

impl Lake {
    /// Opens the lake at `location` (a path or URL). `scratch` is a local
    /// folder this process owns for temporary files (the warehouse's writer
    /// lock guards it); whatever a crash left there is cleared on each publish.
    ///
    /// # Errors
    /// See [`LakeRoot::open`].
    pub fn open(location: &str, scratch: PathBuf) -> Result<Lake, LakeError> {
        Self::open_with_env(location, scratch, std::env::vars())
    }

    /// Opens the lake as [`open`](Self::open) does, with `env` standing in
    /// for the process environment (its credentials and endpoints).
    ///
    /// # Errors
    /// See [`LakeRoot::open`].
    pub fn open_with_env(
        location: &str,
        scratch: PathBuf,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Lake, LakeError> {
        Ok(Lake {
            root: LakeRoot::open_with_env(location, env)?,
            scratch,
            snapshots: false,
            memory_limit_mb: crate::config::DEFAULT_MEMORY_LIMIT_MB,
        })
    }

    /// Merges with `mb` MiB of DuckDB memory ([`Lake::configured`] gives
    /// `[warehouse] memory_limit_mb`).
    #[must_use]
    pub fn with_memory_limit_mb(mut self, mb: u64) -> Lake {
        self.memory_limit_mb = mb.max(crate::config::MIN_MEMORY_LIMIT_MB);
        self
    }

    /// Keeps a snapshot folder per table for plain Parquet readers
    /// (`[warehouse] parquet_snapshots`).
    ///
    /// # Errors
    /// When the lake is not on a local or mounted file system.
    pub fn with_snapshots(mut self, on: bool) -> Result<Lake, LakeError> {
        if on {
            snapshot::local_folder(&self.root)?;
        }
        self.snapshots = on;
        Ok(self)
    }

    /// The lake `[warehouse]` configures (`parquet_dir`, `parquet_snapshots`),
    /// its scratch folder beside the warehouse; `None` without one.
    ///
    /// # Errors
    /// See [`LakeRoot::open`] and [`Lake::with_snapshots`].
    pub fn configured(warehouse: &crate::config::WarehouseConfig) -> Result<Option<Lake>, LakeError> {
        let Some(dir) = &warehouse.parquet_dir else {
            return Ok(None);
        };
        let lake =
            Lake::open(dir, Lake::scratch_beside(&warehouse.duckdb))?.with_memory_limit_mb(warehouse.memory_limit_mb);
        Ok(Some(lake.with_snapshots(warehouse.parquet_snapshots)?))
    }

    /// The scratch folder beside a DuckDB warehouse file.
    pub fn scratch_beside(warehouse: &Path) -> PathBuf {
        let mut name = warehouse.file_name().unwrap_or_default().to_owned();
        name.push(".lake-scratch");
        warehouse.with_file_name(name)
    }

    pub fn root(&self) -> &LakeRoot {
        &self.root
    }

    /// Writes a small object under the root and deletes it: the lake is
    /// reachable and its credentials may write, as a publish needs.
    ///
    /// # Errors
    /// The store's own error for the write or the delete, naming the object.
    pub async fn probe(&self) -> Result<(), LakeError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let object = self
            .root
            .path
            .clone()
            .join("_fdsync_check")
            .join(format!("{}-{nanos}", std::process::id()).as_str());
        let failed = |context: &'static str| {
            let path = object.to_string();
            move |e: object_store::Error| LakeError::Store {
                table: "(root)".into(),
                context,
                path,
                source: Box::new(e),
            }
        };
        self.root
            .store
            .put(&object, object_store::PutPayload::from_static(b"fdsync check"))
            .await
            .map_err(failed("writing"))?;
        self.root.store.delete(&object).await.map_err(failed("deleting"))?;
        Ok(())
    }

    /// Publishes every table's rows committed since its last publish, each
    /// table in one Delta commit. `_sync_runs` goes last, so a run the lake
    /// lists has all of its rows in every table.
    ///
    /// # Errors
    /// The first table that fails stops the publish; tables already committed
    /// stay committed, and the next publish resumes from each table's own
    /// watermark.
    pub async fn publish(&self, sink: &SinkHandle) -> Result<PublishReport, LakeError> {
        let started = Instant::now();
        let app_id = writer_app_id(sink).await?;
        let mut report = PublishReport::default();
        let runs_last = feeds::catalogue()
            .filter(|t| t.name != SYNC_RUNS.name)
            .chain(std::iter::once(&SYNC_RUNS));
        for table in runs_last {
            if let Some(done) = self.publish_table(sink, table, &app_id).await? {
                report.tables.push(done);
            }
            if self.snapshots {
                snapshot::refresh(&self.root, table).await?;
            }
        }
        tracing::info!(
            message = "Lake published.",
            lake = %self.root.url,
            tables = report.tables.len(),
            rows = report.tables.iter().map(|t| t.rows).sum::<u64>(),
            secs = started.elapsed().as_secs_f64()
        );
        Ok(report)
    }

    async fn publish_table(
        &self,
        sink: &SinkHandle,
        table: &'static TableDef,
        app_id: &str,
    ) -> Result<Option<TablePublished>, LakeError> {
        for attempt in 1..=MAX_ATTEMPTS {
            match self.try_publish_table(sink, table, app_id).await {
                Ok(published) => {
                    return Ok(published.map(|p| TablePublished { attempts: attempt, ..p }));
                }
                Err(LakeError::Conflict { table: name, message }) if attempt < MAX_ATTEMPTS => {
                    tracing::info!(
                        message = "Another writer committed to the lake table; publishing again.",
                        table = name,
                        conflict = message,
                        attempt
                    );
                }
                Err(LakeError::Conflict { .. }) => {
                    return Err(LakeError::Contended {
                        table: table.name.to_owned(),
                        attempts: attempt,
                    });
                }
                other => return other,
            }
        }
        unreachable!("the last attempt returns")
    }

    async fn try_publish_table(
        &self,
        sink: &SinkHandle,
        table: &'static TableDef,
        app_id: &str,
    ) -> Result<Option<TablePublished>, LakeError> {
        let delta = delta::open(&self.root, table).await?;
        let after = delta::watermark(&delta, table, app_id).await?.unwrap_or(-1);
        let scratch = self.fresh_scratch(table.name)?;
        let _cleared = ClearOnDrop(scratch.clone());
        let changes_file = scratch.join("changes.parquet");
        let started = Instant::now();
        let changes = {
            let file = changes_file.clone();
            sink.call(move |s| s.export_changes(table, after, &file)).await??
        };
        let exported = started.elapsed();
        let Some(changes) = changes else {
            return Ok(None);
        };
        if changes.rows == 0 && changes.replaced.is_empty() && !changes.rebuild {
            return Ok(None);
        }
        let rebuild = changes.rebuild;
        let kind = Kind::of(table);
        let db = ScratchDb::open(&scratch, self.memory_limit_mb).await?;
        let mut touched = {
            let file = changes.file.clone();
            db.run(move |conn| rewrite::load_changes(conn, table, &file)).await?
        };
        // Partitions rows moved out of: their old copies are removed there.
        for moved in &changes.moved_from {
            if !touched.contains(moved) {
                touched.push(moved.clone());
            }
        }
        let live = delta::live_files(&delta, table)?;
        let version = delta.version().unwrap_or(0).to_string();
        let changes = Arc::new(changes);
        let (mut adds, mut removes) = (Vec::new(), Vec::new());
        let name_of = |partition: Option<&str>| {
            file_name(
                &[
                    app_id,
                    table.name,
                    &version,
                    &after.to_string(),
                    &changes.upto.to_string(),
                ],
                partition,
                &changes.upto.to_string(),
            )
        };
        // One partition at a time: the scratch folder holds one partition's
        // files, never the table's.
        for partition in touched {
            let old: Vec<LiveFile> = if kind == Kind::Append || rebuild {
                Vec::new()
            } else {
                live.iter().filter(|f| f.partition == partition).cloned().collect()
            };
            let name = name_of(partition.as_deref());
            let (changes, part) = (changes.clone(), partition.clone());
            let new = self
                .write_partition_file(
                    table,
                    (&scratch, &db),
                    &old,
                    partition,
                    name,
                    move |conn, local, out| {
                        rewrite::rewrite_partition(conn, table, &changes, part.as_deref(), local, out)
                    },
                )
                .await?;
            if kind == Kind::Merge {
                removes.extend(old.into_iter().map(|f| f.remove));
            }
            adds.extend(new);
        }
        if rebuild {
            // Rows a reset deleted are in no change: every live file goes.
            removes = live.iter().map(|f| f.remove.clone()).collect();
        }
        let change = if kind == Kind::Append && !rebuild {
            Change::BlindAppend
        } else {
            Change::Merge
        };
        let (files_added, files_removed) = (adds.len(), removes.len());
        let version = delta::commit(&delta, table, change, removes, adds, Some((app_id, changes.upto))).await?;
        tracing::debug!(
            message = "Lake table published.",
            table = table.name,
            rows = changes.rows,
            version,
            files_added,
            files_removed,
            export_secs = exported.as_secs_f64(),
            total_secs = started.elapsed().as_secs_f64()
        );
        Ok(Some(TablePublished {
            table: table.name,
            rows: changes.rows,
            files_added,
            files_removed,
            version,
            upto: changes.upto,
            attempts: 1,
        }))
    }

    /// Rewrites every partition that has `min_files` live files or more as
    /// one file, in key order. Readers see the same rows before and after; a
    /// publish that lands meanwhile wins and the partition is left for the
    /// next compaction.
    ///
    /// # Errors
    /// When the lake cannot be read or written; tables compacted before stay so.
    pub async fn compact(&self, min_files: usize) -> Result<Vec<TableCompacted>, LakeError> {
        let mut done = Vec::new();
        for table in feeds::catalogue() {
            match self.compact_table(table, min_files.max(2)).await {
                Ok(Some(t)) => done.push(t),
                Ok(None) => {}
                Err(LakeError::Conflict { table, message }) => {
                    tracing::info!(
                        message = "A publish changed the table during compaction; left for the next one.",
                        table,
                        conflict = message
                    );
                }
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    async fn compact_table(
        &self,
        table: &'static TableDef,
        min_files: usize,
    ) -> Result<Option<TableCompacted>, LakeError> {
        let Some(delta) = delta::open_existing(&self.root, table).await? else {
            return Ok(None);
        };
        let live = delta::live_files(&delta, table)?;
        let mut groups: std::collections::BTreeMap<Option<String>, Vec<LiveFile>> = std::collections::BTreeMap::new();
        for file in live {
            groups.entry(file.partition.clone()).or_default().push(file);
        }
        groups.retain(|_, files| files.len() >= min_files);
        if groups.is_empty() {
            return Ok(None);
        }
        let scratch = self.fresh_scratch(table.name)?;
        let _cleared = ClearOnDrop(scratch.clone());
        let version = delta.version().unwrap_or(0).to_string();
        let db = ScratchDb::open(&scratch, self.memory_limit_mb).await?;
        let (mut adds, mut removes) = (Vec::new(), Vec::new());
        for (partition, files) in groups {
            let name = file_name(&["compact", table.name, &version], partition.as_deref(), "c");
            let new = self
                .write_partition_file(
                    table,
                    (&scratch, &db),
                    &files,
                    partition,
                    name,
                    move |conn, local, out| rewrite::compact_files(conn, table, local, out),
                )
                .await?;
            removes.extend(files.into_iter().map(|f| f.remove));
            adds.extend(new);
        }
        let (files_added, files_removed) = (adds.len(), removes.len());
        let version = delta::commit(&delta, table, Change::Compact, removes, adds, None).await?;
        Ok(Some(TableCompacted {
            table: table.name,
            files_removed,
            files_added,
            version,
        }))
    }

    /// Deletes data files no live version needs: those removed by publishes or
    /// compactions more than `retain` ago, and files a crashed publish left
    /// unlisted once they are that old.
    ///
    /// # Errors
    /// When a table cannot be read or a file deleted.
    pub async fn vacuum(&self, retain: chrono::Duration, dry_run: bool) -> Result<Vec<TableVacuumed>, LakeError> {
        let mut done = Vec::new();
        for table in feeds::catalogue() {
            let Some(delta) = delta::open_existing(&self.root, table).await? else {
                continue;
            };
            let (_, metrics) = delta
                .vacuum()
                .with_retention_period(retain)
                .with_enforce_retention_duration(false)
                .with_mode(deltalake_core::operations::vacuum::VacuumMode::Full)
                .with_dry_run(dry_run)
                .await
                .map_err(delta::delta_err(table, "vacuuming"))?;
            if !metrics.files_deleted.is_empty() {
                done.push(TableVacuumed {
                    table: table.name,
                    files: metrics.files_deleted,
                });
            }
        }
        Ok(done)
    }

    /// One partition's new file: its `old` live files, fetched into `scratch`,
    /// go through `rewrite` (in a scratch DuckDB) into one file, uploaded as
    /// `name`; `None` when no row is left. Only this partition's files are
    /// on local disk at a time.
    async fn write_partition_file(
        &self,
        table: &'static TableDef,
        (scratch, db): (&Path, &ScratchDb),
        old: &[LiveFile],
        partition: Option<String>,
        name: String,
        rewrite: impl FnOnce(&duckdb::Connection, &[PathBuf], &Path) -> Result<u64, SinkError> + Send + 'static,
    ) -> Result<Option<NewFile>, LakeError> {
        let table_path = self.root.table_path(table.name);
        let mut local = Vec::new();
        for (i, file) in old.iter().enumerate() {
            let path = scratch.join(format!("old-{i}.parquet"));
            download(&*self.root.store, &table_path, &file.path, &path, table).await?;
            local.push(path);
        }
        let out = scratch.join("new.parquet");
        let rows = {
            let (local, out) = (local.clone(), out.clone());
            db.run(move |conn| rewrite(conn, &local, &out)).await?
        };
        let new = if rows > 0 {
            let relative = in_partition(table, partition.as_deref(), name);
            let size = upload(&self.root.store, &table_path, &relative, &out, table).await?;
            Some(NewFile {
                path: relative,
                partition,
                size,
                rows,
            })
        } else {
            None
        };
        for file in local.iter().chain([&out]) {
            let _ = std::fs::remove_file(file);
        }
        Ok(new)
    }

    /// An empty scratch folder for one table's publish.
    fn fresh_scratch(&self, table: &str) -> Result<PathBuf, LakeError> {
        let dir = self.scratch.join(table);
        let io = |source| LakeError::Scratch {
            path: dir.clone(),
            source,
        };
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        std::fs::create_dir_all(&dir).map_err(io)?;
        Ok(dir)
    }
}

/// One table's private in-memory DuckDB, for merging: the warehouse's writer
/// stays free meanwhile. Its work runs on the blocking pool, one job at a time.
struct ScratchDb(Arc<std::sync::Mutex<duckdb::Connection>>);

impl ScratchDb {
    async fn open(scratch: &Path, memory_limit_mb: u64) -> Result<ScratchDb, LakeError> {
        let scratch = scratch.to_owned();
        let limit = format!("{memory_limit_mb}MiB");
        let conn = blocking(move || rewrite::scratch_connection(&scratch, &limit)).await?;
        Ok(ScratchDb(Arc::new(std::sync::Mutex::new(conn))))
    }

    async fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce(&duckdb::Connection) -> Result<T, SinkError> + Send + 'static,
    ) -> Result<T, LakeError> {
        let conn = self.0.clone();
        blocking(move || job(&conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner))).await
    }
}

/// Removes a scratch folder when the publish that used it ends, however it
/// ends; one left by a crash is cleared by the next publish instead.
struct ClearOnDrop(PathBuf);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The Delta application id of this warehouse: fixed at its first publish
/// and kept with its checkpoints, so the lake's watermarks are this
/// warehouse's commit numbers and no other's.
async fn writer_app_id(sink: &SinkHandle) -> Result<String, LakeError> {
    const PIPELINE: &str = "_lake";
    const PARTITION: &str = "writer_id";
    let stored = sink
        .call(|s| s.checkpoints(PIPELINE))
        .await??
        .remove(PARTITION)
        .map(|c| c.cursor);
    let id = match stored {
        Some(id) => id,
        None => {
            let id = hex::encode(rand::random::<[u8; 8]>());
            sink.commit(Commit {
                batches: Vec::new(),
                checkpoints: vec![Checkpoint {
                    pipeline: PIPELINE.into(),
                    partition: PARTITION.into(),
                    cursor: id.clone(),
                }],
            })
            .await?;
            id
        }
    };
    Ok(format!("fdsync-{id}"))
}

/// Same inputs, same name: a publish retried after a crash overwrites the
/// file it left behind instead of adding another. `suffix` is for people
/// (the commit sequence a file reaches, or `c` for a compaction).
fn file_name(inputs: &[&str], partition: Option<&str>, suffix: &str) -> String {
    let mut digest = Sha256::new();
    for part in inputs.iter().chain([&partition.unwrap_or("\0")]) {
        digest.update(part.as_bytes());
        digest.update([0]);
    }
    format!("part-{}-{suffix}.zstd.parquet", &hex::encode(digest.finalize())[..20])
}

/// A file's path in the table folder: in its hive partition folder, if any.
fn in_partition(table: &TableDef, partition: Option<&str>, name: String) -> String {
    match table.lake_partition {
        Some(part) => format!(
            "{}={}/{name}",
            part.column(),
            partition.unwrap_or("__HIVE_DEFAULT_PARTITION__")
        ),
        None => name,
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SinkError> + Send + 'static,
) -> Result<T, LakeError> {
    Ok(tokio::task::spawn_blocking(f).await.map_err(|_| SinkError::Closed)??)
}

fn store_err<E: std::error::Error + Send + Sync + 'static>(
    table: &TableDef,
    context: &'static str,
    path: &str,
) -> impl FnOnce(E) -> LakeError {
    let (table, path) = (table.name.to_owned(), path.to_owned());
    move |e| LakeError::Store {
        table,
        context,
        path,
        source: Box::new(e),
    }
}

fn object_path(table_path: &StorePath, relative: &str) -> StorePath {
    relative
        .split('/')
        .filter(|p| !p.is_empty())
        .fold(table_path.clone(), |path, part| path.join(part))
}

/// Streams a live file to `to`, a chunk at a time.
async fn download(
    store: &dyn ObjectStore,
    table_path: &StorePath,
    relative: &str,
    to: &Path,
    table: &TableDef,
) -> Result<(), LakeError> {
    let path = object_path(table_path, relative);
    let mut body = store
        .get(&path)
        .await
        .map_err(store_err(table, "reading", path.as_ref()))?
        .into_stream();
    let mut file =
        tokio::fs::File::create(to)
            .await
            .map_err(store_err(table, "creating a local copy of", path.as_ref()))?;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(store_err(table, "reading", path.as_ref()))?;
        file.write_all(&chunk)
            .await
            .map_err(store_err(table, "writing a local copy of", path.as_ref()))?;
    }
    file.flush()
        .await
        .map_err(store_err(table, "writing a local copy of", path.as_ref()))?;
    Ok(())
}

/// Streams a new file into the table folder (multipart when large); returns its size.
async fn upload(
    store: &Arc<dyn ObjectStore>,
    table_path: &StorePath,
    relative: &str,
    from: &Path,
    table: &TableDef,
) -> Result<i64, LakeError> {
    let path = object_path(table_path, relative);
    let mut file =
        tokio::fs::File::open(from)
            .await
            .map_err(store_err(table, "opening the new file for", path.as_ref()))?;
    let size = file
        .metadata()
        .await
        .map_err(store_err(table, "opening the new file for", path.as_ref()))?
        .len();
    let mut writer = object_store::buffered::BufWriter::new(store.clone(), path.clone());
    tokio::io::copy(&mut file, &mut writer)
        .await
        .map_err(store_err(table, "writing", path.as_ref()))?;
    writer
        .shutdown()
        .await
        .map_err(store_err(table, "writing", path.as_ref()))?;
    Ok(size as i64)
}
