//! What the benches ask of a warehouse beyond the sync's own reads, in SQL
//! on the sink's connection as a user's query would: the pages a sync's data
//! fills, the request log, DuckDB's own Parquet copy of a table (a baseline),
//! and a table grown by repeating its rows.

use std::path::Path;

use anyhow::Context;
use chrono::{DateTime, NaiveDate, Utc};
use duckdb::Connection;
use fdsync_core::sink::duckdb::{ident, sql_string};
use fdsync_core::tables::TableDef;

/// Pages of `page` rows that `table` fills, and the number of groups:
/// grouped by `group`, one page at least per group; otherwise one group.
/// Only rows whose `_route` starts with `route`, and whose `dated` column
/// is within the range, when given.
///
/// # Errors
/// When the table cannot be read.
pub fn pages(
    conn: &Connection,
    table: &TableDef,
    page: u64,
    group: Option<&str>,
    route: Option<&str>,
    dated: Option<(&str, NaiveDate, NaiveDate)>,
) -> anyhow::Result<(u64, u64)> {
    let mut conditions = vec!["true".to_owned()];
    if let Some(route) = route {
        conditions.push(format!("starts_with(_route, {})", sql_string(route)));
    }
    if let Some((column, from, to)) = dated {
        conditions.push(format!("{} BETWEEN DATE '{from}' AND DATE '{to}'", ident(column)));
    }
    let group_by = group.map_or_else(String::new, |g| format!("GROUP BY {}", ident(g)));
    let sql = format!(
        "SELECT coalesce(sum(greatest(1, ceil(n / {page})::BIGINT)), 0), count(*) FROM \
         (SELECT count(*) AS n FROM {} WHERE {} {group_by})",
        ident(table.name),
        conditions.join(" AND ")
    );
    conn.query_row(&sql, [], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
        .map(|(pages, groups)| (pages.max(0) as u64, groups.max(0) as u64))
        .with_context(|| format!("counting the pages of {}", table.name))
}

/// The routes requested since `since`, in order, from the request log.
///
/// # Errors
/// When the log cannot be read.
pub fn routes_since(conn: &Connection, since: DateTime<Utc>) -> anyhow::Result<Vec<String>> {
    let mut statement =
        conn.prepare("SELECT route FROM _sync_requests WHERE \"at\" >= ?::TIMESTAMPTZ ORDER BY \"at\"")?;
    let routes = statement.query_map([since.to_rfc3339()], |r| r.get(0))?;
    routes.collect::<Result<_, _>>().context("reading the request log")
}

/// DuckDB's own `COPY ... TO` Parquet (zstd) of `table`; the rows written.
///
/// # Errors
/// When the copy fails.
pub fn copy_to_parquet(conn: &Connection, table: &TableDef, target: &Path) -> anyhow::Result<u64> {
    let sql = format!(
        "COPY (SELECT * FROM {}) TO {} (FORMAT parquet, COMPRESSION zstd)",
        ident(table.name),
        sql_string(&target.display().to_string())
    );
    conn.query_row(&sql, [], |r| r.get::<_, i64>(0))
        .map(|n| n.max(0) as u64)
        .with_context(|| format!("copying {} to Parquet", table.name))
}

/// Replaces `table`'s rows with `rows` rows made by repeating them further
/// back in time: each copy `k` gets `-k` after its `key` and its `times`
/// moved back `k` spans of the first time column, so sizes, text and the
/// spread over time are the stored rows' own.
///
/// # Errors
/// When the table cannot be rewritten.
pub fn repeat_rows(conn: &Connection, table: &TableDef, key: &str, times: &[&str], rows: u64) -> anyhow::Result<()> {
    let name = ident(table.name);
    let stored: i64 = conn.query_row(&format!("SELECT count(*) FROM {name}"), [], |r| r.get(0))?;
    let copies = rows.div_ceil(stored.max(1) as u64);
    let span_of = ident(times.first().copied().unwrap_or(key));
    let mut replaced = vec![format!("{} || '-' || k AS {}", ident(key), ident(key))];
    replaced.extend(
        times
            .iter()
            .map(|t| format!("CAST(utc({t}) - k * span AS TIMESTAMPTZ) AS {t}", t = ident(t))),
    );
    // Time arithmetic on UTC text: the bundled DuckDB has no ICU for TIMESTAMPTZ.
    conn.execute_batch(&format!(
        "CREATE TEMP MACRO utc(ts) AS CAST(left(CAST(ts AS VARCHAR), 19) AS TIMESTAMP);
             CREATE TEMP TABLE page AS SELECT * FROM {name};
             DELETE FROM {name};
             INSERT INTO {name}
             SELECT page.* REPLACE ({replaced})
             FROM page, range({copies}) r(k),
                  (SELECT max(utc({span_of})) - min(utc({span_of})) + INTERVAL 45 SECOND AS span FROM page) s
             LIMIT {rows};
             DROP TABLE page;",
        replaced = replaced.join(", ")
    ))
    .with_context(|| format!("repeating the rows of {}", table.name))
}
