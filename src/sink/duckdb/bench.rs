//! What `fdsync bench` asks of a warehouse beyond the sync's own reads: the
//! pages a sync's data fills, the request log, DuckDB's own Parquet copy of
//! a table (a baseline), and a table grown by repeating its rows.

use std::path::Path;

use chrono::{DateTime, NaiveDate, Utc};

use super::{DuckDbSink, ident, sql_err, sql_string};
use crate::sink::SinkError;
use crate::tables::TableDef;

impl DuckDbSink {
    /// Pages of `page` rows that `table` fills, and the number of groups:
    /// grouped by `group`, one page at least per group; otherwise one group.
    /// Only rows whose `_route` starts with `route`, and whose `dated` column
    /// is within the range, when given.
    ///
    /// # Errors
    /// When the table cannot be read.
    pub fn pages(
        &self,
        table: &TableDef,
        page: u64,
        group: Option<&str>,
        route: Option<&str>,
        dated: Option<(&str, NaiveDate, NaiveDate)>,
    ) -> Result<(u64, u64), SinkError> {
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
        self.conn
            .query_row(&sql, [], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
            .map(|(pages, groups)| (pages.max(0) as u64, groups.max(0) as u64))
            .map_err(sql_err(table.name, "counting pages"))
    }

    /// The routes requested since `since`, in order, from the request log.
    ///
    /// # Errors
    /// When the log cannot be read.
    pub fn routes_since(&self, since: DateTime<Utc>) -> Result<Vec<String>, SinkError> {
        self.rows(
            ("_sync_requests", "reading the request log"),
            "SELECT route FROM _sync_requests WHERE \"at\" >= ?::TIMESTAMPTZ ORDER BY \"at\"",
            &[&since.to_rfc3339()],
            |r| r.get(0),
        )
    }

    /// DuckDB's own `COPY ... TO` Parquet (zstd) of `table`; the rows written.
    ///
    /// # Errors
    /// When the copy fails.
    pub fn copy_to_parquet(&self, table: &TableDef, target: &Path) -> Result<u64, SinkError> {
        let sql = format!(
            "COPY (SELECT * FROM {}) TO {} (FORMAT parquet, COMPRESSION zstd)",
            ident(table.name),
            sql_string(&target.display().to_string())
        );
        self.conn
            .query_row(&sql, [], |r| r.get::<_, i64>(0))
            .map(|n| n.max(0) as u64)
            .map_err(sql_err(table.name, "copying to Parquet"))
    }

    /// Replaces `table`'s rows with `rows` rows made by repeating them further
    /// back in time: each copy `k` gets `-k` after its `key` and its `times`
    /// moved back `k` spans of the first time column, so sizes, text and the
    /// spread over time are the stored rows' own.
    ///
    /// # Errors
    /// When the table cannot be rewritten.
    pub fn repeat_rows(&self, table: &TableDef, key: &str, times: &[&str], rows: u64) -> Result<(), SinkError> {
        let name = ident(table.name);
        let stored: i64 = self
            .conn
            .query_row(&format!("SELECT count(*) FROM {name}"), [], |r| r.get(0))
            .map_err(sql_err(table.name, "counting rows"))?;
        let copies = rows.div_ceil(stored.max(1) as u64);
        let span_of = ident(times.first().copied().unwrap_or(key));
        let mut replaced = vec![format!("{} || '-' || k AS {}", ident(key), ident(key))];
        replaced.extend(
            times
                .iter()
                .map(|t| format!("CAST(utc({t}) - k * span AS TIMESTAMPTZ) AS {t}", t = ident(t))),
        );
        // Time arithmetic on UTC text: the bundled DuckDB has no ICU for TIMESTAMPTZ.
        self.conn
            .execute_batch(&format!(
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
            .map_err(sql_err(table.name, "repeating rows"))
    }
}
