//! `fdsync reset`: makes the next run of a pipeline, or of one company in
//! it, start over: its checkpoints are forgotten, so it backfills again, and
//! with `drop_rows` the rows it wrote go first. Recorded in `_sync_resets`;
//! the lake rebuilds the tables whose rows went on its next publish.

use chrono::{DateTime, Utc};
use serde::Serialize;

use fdsync_core::error::SyncError;
use fdsync_core::pipeline::Pipeline;
use fdsync_core::sink::SinkHandle;
use fdsync_core::sink::duckdb::reset::Reset;
use fdsync_core::tables::TableDef;

#[derive(Debug, Serialize)]
pub struct ResetReport {
    pub pipeline: String,
    pub company_key: Option<String>,
    pub checkpoints_removed: u64,
    /// Rows deleted per table (with `--drop-rows`).
    pub rows_deleted: Vec<(&'static str, u64)>,
    /// Tables of the pipeline left as they are by a one-company reset: they
    /// have no company column to select its rows by.
    pub kept: Vec<&'static str>,
}

/// Resets `pipeline` (or the company `company` names in it) in the warehouse
/// `sink` holds; with `table`, `drop_rows` deletes that table's rows only.
///
/// # Errors
/// When `company` names no company the warehouse knows, or the warehouse
/// cannot be written: then nothing changed.
pub async fn reset(
    sink: &SinkHandle,
    pipeline: &Pipeline,
    company: Option<&str>,
    table: Option<&'static TableDef>,
    drop_rows: bool,
    at: DateTime<Utc>,
) -> Result<ResetReport, SyncError> {
    let company_key = match company {
        Some(id) => {
            let owned = id.to_owned();
            let key = sink.call(move |s| s.company_key_of(&owned)).await??;
            Some(key.ok_or_else(|| {
                SyncError::Other(format!(
                    "--company {id}: no company with that key, CIK or symbol in the warehouse's companies table; \
                     give a company_key as `SELECT company_key, symbol FROM companies` lists it"
                ))
            })?)
        }
        None => None,
    };
    let mut kept = Vec::new();
    let mut rows_of = Vec::new();
    if drop_rows {
        for &table in pipeline
            .feed
            .tables
            .iter()
            .filter(|t| table.is_none_or(|only| only.name == t.name))
        {
            if company_key.is_some() && !table.has_column("company_key") {
                kept.push(table.name);
                continue;
            }
            rows_of.push((table, shared(table, pipeline).then(|| route_pattern(&pipeline.route))));
        }
    }
    let (name, key) = (pipeline.name.clone(), company_key.clone());
    let done = sink
        .call(move |s| {
            s.reset(&Reset {
                pipeline: &name,
                company_key: key.as_deref(),
                rows_of,
                at,
            })
        })
        .await??;
    tracing::info!(
        message = "Reset.",
        pipeline = %pipeline.name,
        company_key = company_key.as_deref().unwrap_or("(all)"),
        checkpoints = done.checkpoints_removed,
        rows = done.rows_deleted.iter().map(|(_, n)| n).sum::<u64>()
    );
    Ok(ResetReport {
        pipeline: pipeline.name.clone(),
        company_key,
        checkpoints_removed: done.checkpoints_removed,
        rows_deleted: done.rows_deleted,
        kept,
    })
}

/// Whether another feed writes `table` too: then only the rows this
/// pipeline's routes wrote are its own.
fn shared(table: &TableDef, pipeline: &Pipeline) -> bool {
    table.lineage
        && crate::schema::writers(table)
            .iter()
            .any(|f| f.name != pipeline.feed.name)
}

/// `_route` values of the requests under `route` (its placeholders any
/// value, any query and sub-path after it) as a SQL `LIKE` pattern with `\`
/// as its escape.
fn route_pattern(route: &str) -> String {
    let mut pattern = String::new();
    let mut in_hole = false;
    for c in route.chars() {
        match c {
            '{' => {
                in_hole = true;
                pattern.push('%');
            }
            '}' => in_hole = false,
            _ if in_hole => {}
            '%' | '_' | '\\' => {
                pattern.push('\\');
                pattern.push(c);
            }
            c => pattern.push(c),
        }
    }
    pattern.push('%');
    pattern
}

#[cfg(test)]
mod tests {
    use super::route_pattern;

    #[test]
    fn a_route_pattern_matches_any_placeholder_and_query() {
        assert_eq!(
            route_pattern("/api/v1/companies/{company}/news"),
            "/api/v1/companies/%/news%"
        );
        assert_eq!(route_pattern("/api/v1/geo_x"), "/api/v1/geo\\_x%");
    }
}
