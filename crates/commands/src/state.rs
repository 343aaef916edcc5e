//! `fdsync state [PIPELINE]`: the checkpoints the engines keep, as stored,
//! read from the warehouse without writing to it.

use std::io::Write;
use std::path::Path;

use chrono::{DateTime, SecondsFormat, Utc};
use fdsync_core::error::SyncError;
use fdsync_core::sink::duckdb::reader::BookkeepingReader;
use fdsync_core::sink::lock::WriterLock;
use serde::Serialize;

/// One checkpoint: where a part of a pipeline resumes.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointState {
    pub pipeline: String,
    /// The part it covers: a company key, a country, a series, `backfill`,
    /// or '' for the whole pipeline.
    pub partition: String,
    /// Where the next run resumes, as the pipeline's engine wrote it.
    pub cursor: String,
    pub updated_at: DateTime<Utc>,
}

/// The checkpoints of `pipeline` (every pipeline's without one). A
/// warehouse that does not exist yet holds none.
///
/// # Errors
/// When the warehouse cannot be read.
pub fn read(warehouse: &Path, pipeline: Option<&str>) -> Result<Vec<CheckpointState>, SyncError> {
    if !warehouse.exists() {
        return Ok(Vec::new());
    }
    let reader = BookkeepingReader::open(warehouse, WriterLock::holder_of(warehouse).as_ref())?;
    Ok(reader
        .checkpoints(pipeline)?
        .into_iter()
        .map(|(pipeline, (partition, cursor, updated_at))| CheckpointState {
            pipeline,
            partition,
            cursor,
            updated_at,
        })
        .collect())
}

/// The checkpoints as a table for people: one line each, the cursor whole.
///
/// # Errors
/// When `out` cannot be written.
pub fn write_text(out: &mut impl Write, states: &[CheckpointState]) -> std::io::Result<()> {
    if states.is_empty() {
        return writeln!(
            out,
            "no checkpoints: nothing synced yet (the next run starts from the beginning)"
        );
    }
    let width = states.iter().map(|s| s.partition.len()).max().unwrap_or(0).clamp(9, 40);
    writeln!(out, "{:<16} {:<width$} {:<20} cursor", "pipeline", "partition", "moved")?;
    for s in states {
        let partition = if s.partition.is_empty() {
            "(whole)"
        } else {
            &s.partition
        };
        writeln!(
            out,
            "{:<16} {partition:<width$} {:<20} {}",
            s.pipeline,
            s.updated_at.to_rfc3339_opts(SecondsFormat::Secs, true),
            s.cursor
        )?;
    }
    Ok(())
}
