//! The writer connection's settings and the tuning constants of the load
//! path, each with why it has its value; the backfill benchmark holds them
//! to their figures (BENCHMARKS.md).

/// The writer connection's DuckDB settings (`[warehouse]`).
#[derive(Debug, Clone)]
pub struct Settings {
    pub memory_limit_mb: u64,
    pub threads: u64,
    /// Rows committed before the writer closes the file and opens it again
    /// ([`REOPEN_AFTER_ROWS`] but in tests).
    pub reopen_after_rows: usize,
    /// The DuckDB storage format a new warehouse file is written in
    /// (`[warehouse] storage_version`).
    pub storage_version: String,
}

impl Settings {
    /// The memory limit DuckDB is given: the configured one (32 or more,
    /// which the configuration checks), and 16 at least for settings made
    /// in code.
    pub fn duckdb_memory_limit_mb(&self) -> u64 {
        self.memory_limit_mb.max(16)
    }

    /// Whether bulk commits may be held in one transaction until it fills
    /// the warehouse's row groups ([`DuckDbSink::commit_held`](super::DuckDbSink::commit_held)):
    /// from `HOLD_FROM_MB` up. A held transaction writes its row groups to
    /// the file as they fill and compresses its rows once; what it keeps
    /// pinned is what a merge inside it then lacks, which is why the default
    /// is above this.
    pub fn holds_bulk_commits(&self) -> bool {
        self.memory_limit_mb >= HOLD_FROM_MB
    }

    /// DuckDB's memory limit while it appends new rows, `room_bytes` of them
    /// on their way in, and while a bulk load commits: five eighths of the
    /// limit, and twice those bytes, which an append holds and cannot spill. Under the
    /// whole limit DuckDB kept each table's last row group of a held
    /// transaction uncompressed in memory until the limit was full, on top
    /// of everything else the process holds;
    /// under three eighths it spilled and read back enough to make the
    /// writer the bound.
    /// Never less than the least configurable limit, though: at 32 appends
    /// under 20 MiB ran out where a row group's compression analysis copied
    /// each bar's distinct `raw`.
    pub fn append_memory_limit_mb(&self, room_bytes: usize) -> u64 {
        let limit = self.duckdb_memory_limit_mb();
        let headroom = u64::try_from(room_bytes.saturating_mul(2))
            .unwrap_or(u64::MAX)
            .div_ceil(1 << 20);
        (limit * 5 / 8)
            .saturating_add(headroom)
            .clamp(crate::config::MIN_MEMORY_LIMIT_MB.min(limit), limit)
    }

    /// The WAL size at which DuckDB checkpoints: half the memory limit from
    /// 64 MiB, since each checkpoint makes the next one compress a row group
    /// again; DuckDB's own 16 MiB down to 32, where more runs out of memory;
    /// a quarter of the limit below, where a checkpoint of 16 MiB of small
    /// commits runs out of memory and leaves DuckDB's database invalidated.
    pub fn checkpoint_threshold_mb(&self) -> u64 {
        match self.memory_limit_mb {
            64.. => self.memory_limit_mb / 2,
            32.. => 16,
            _ => (self.memory_limit_mb / 4).max(1),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            memory_limit_mb: crate::config::DEFAULT_MEMORY_LIMIT_MB,
            threads: crate::config::DEFAULT_DUCKDB_THREADS,
            reopen_after_rows: REOPEN_AFTER_ROWS,
            storage_version: crate::config::DEFAULT_STORAGE_VERSION.into(),
        }
    }
}

/// The fewest rows a merge statement takes when a batch is sliced: below
/// this a statement's fixed cost outweighs the memory it saves.
pub(super) const MIN_SLICE_ROWS: usize = 256;

/// The fewest staged rows worth probing for stored keys before a plain
/// append: below it the probe's fixed cost outweighs the merge it saves.
pub(crate) const MIN_PROBE_ROWS: usize = 100;

/// The fewest staged rows that make a transaction a bulk load, whose
/// checkpoint is kept from merging row groups so a backfill's rows are
/// compressed once, not at every checkpoint.
pub(super) const BULK_ROWS: usize = 1000;

/// Rows of one table, under a row group, from which a held transaction
/// checkpoints as it commits instead of writing its rows to the WAL and
/// compressing them later.
pub(super) const CHECKPOINT_ON_COMMIT_ROWS: usize = 50_000;

/// Stops checkpoints merging row groups, until [`RESUME_MERGES`] or the
/// database is opened again.
pub(super) const PAUSE_MERGES: &str = "SET GLOBAL max_vacuum_tasks = 0";

pub(super) const RESUME_MERGES: &str = "RESET GLOBAL max_vacuum_tasks";

/// Rows a connection commits before the writer closes the file and opens it
/// again: an open database keeps, outside its memory limit, what it knows of
/// every row group written.
pub const REOPEN_AFTER_ROWS: usize = 500_000;

/// Rows per row group where bulk commits are held, half DuckDB's default, so
/// that a backfill's commits are bulk appends written compressed as they
/// load.
pub(super) const ROW_GROUP_ROWS: usize = 61_440;

/// DuckDB's own rows per row group, kept where no commit fills one.
pub(super) const DUCKDB_ROW_GROUP_ROWS: usize = 122_880;

/// What the writer's connection calls the warehouse file it attaches.
pub(super) const WAREHOUSE_ALIAS: &str = "warehouse";

/// Row groups of one table that end a held transaction: with three whole
/// ones or more between two partial ones, a checkpoint merges none.
pub(super) const HELD_ROW_GROUPS: usize = 6;

/// The most rows of a table a commit may bring to land a held transaction
/// without it: news pages, not whole price histories.
pub(super) const SMALL_COMMIT_ROWS: usize = ROW_GROUP_ROWS / 4;

/// The smallest `memory_limit_mb` that holds bulk commits: below the least
/// the configuration allows (32), so every setting writes a backfill in
/// bulk, and the tests of appends at the least limit run at this one. It
/// holds because a batch of new keys is appended whole (a last slice merged
/// on its own would run a held backfill out of memory) and small commits
/// checkpoint at a quarter of the limit below 32.
pub(super) const HOLD_FROM_MB: u64 = 20;

/// Prepared statements kept per connection: a few per table.
pub(super) const STATEMENT_CACHE: usize = 256;

/// Bytes of Arrow rows on their way in that a bulk load's lowered memory
/// limit keeps room for, at most ([`Settings::append_memory_limit_mb`]).
pub(super) const APPEND_ROOM_BYTES: usize = 4 << 20;

/// What DuckDB may keep cached after a commit smaller than a row group, in
/// MiB. A later merge reads the blocks it dropped again, from the system's
/// page cache: a few percent of a backfill's wall, for a fifth of a
/// no-change run's peak.
pub(super) const CACHED_AFTER_SMALL_COMMIT_MB: u64 = 4;

/// The statement that sets DuckDB's `memory_limit` to `mb` MiB.
pub(super) fn set_memory_limit(mb: u64) -> String {
    format!("SET memory_limit = '{mb}MiB'")
}

/// The statement that sets DuckDB's `checkpoint_threshold` to `mb` MiB.
pub(super) fn set_checkpoint_threshold(mb: u64) -> String {
    format!("SET checkpoint_threshold = '{mb}MiB'")
}
