//! The warehouse's schema: every table of the catalogue, the commit log,
//! and the point-in-time macro views.

use super::settings::WAREHOUSE_ALIAS;
use super::{COMMIT_SEQ, DuckDbSink, REPLACED_LOG, ident, sql_err};
use crate::feeds;
use crate::sink::SinkError;
use crate::tables::Compression;

/// Point-in-time views over `macro_observations` (warehouse contract).
///
/// `macro_latest`: per period, the newest vintage; of two values served under
/// one vintage (a restatement), the one seen last (`last_seen_at`: a value
/// restated and then served again is the one served now).
///
/// `macro_as_of(ts)`: per period, the newest vintage published on or before
/// `ts`; of its values, the one fdsync had seen last by `ts` (its last
/// sighting when that was by `ts`, else its first), or the first one it ever
/// saw when it first looked later (a backfill of old vintages).
/// `ts`'s date is read from its text form (UTC), since the bundled DuckDB has
/// no ICU time-zone extension for a TIMESTAMPTZ-to-DATE cast (and must not try
/// to download one).
pub(super) const MACRO_VIEWS: &str = "
CREATE OR REPLACE VIEW macro_latest AS
SELECT * FROM macro_observations
QUALIFY row_number() OVER (PARTITION BY country, series_key, period ORDER BY vintage DESC, last_seen_at DESC, first_seen_at DESC) = 1;
CREATE OR REPLACE MACRO macro_as_of(ts) AS TABLE
SELECT * FROM macro_observations
WHERE vintage <= CAST(left(CAST(CAST(ts AS TIMESTAMPTZ) AS VARCHAR), 10) AS DATE)
QUALIFY row_number() OVER (
    PARTITION BY country, series_key, period
    ORDER BY vintage DESC,
             CASE WHEN last_seen_at <= CAST(ts AS TIMESTAMPTZ) THEN last_seen_at
                  WHEN first_seen_at <= CAST(ts AS TIMESTAMPTZ) THEN first_seen_at END DESC NULLS LAST,
             first_seen_at ASC) = 1;
";

/// `<table>_as_of(ts)`: the table as fdsync knew it at `ts`. A stored row
/// holds from when it was fetched (`_fetched_at`: a load rewrites a row only
/// when its content changes); a kept version from then until it was
/// superseded.
fn as_of_macro(table: &crate::tables::TableDef) -> String {
    let cols = super::merge::stored_columns(table, "");
    format!(
        "CREATE OR REPLACE MACRO {}(ts) AS TABLE \
         SELECT {cols} FROM {} WHERE _fetched_at <= CAST(ts AS TIMESTAMPTZ) \
         UNION ALL \
         SELECT {cols} FROM {} WHERE _fetched_at <= CAST(ts AS TIMESTAMPTZ) AND _superseded_at > CAST(ts AS TIMESTAMPTZ);",
        ident(&format!("{}_as_of", table.name)),
        ident(table.name),
        ident(&table.versions_name()),
    )
}

/// The fingerprint of the statements the warehouse was last set up with.
pub(super) const SCHEMA_LOG: &str = "_sync_schema";

pub(super) const COMMIT_LOG: &str = "
CREATE SEQUENCE IF NOT EXISTS _sync_commit_seq START 1;
CREATE TABLE IF NOT EXISTS _sync_replaced (
    _commit_seq BIGINT NOT NULL, table_name VARCHAR NOT NULL, \"partition\" VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS _sync_lake_moves (
    _commit_seq BIGINT NOT NULL, table_name VARCHAR NOT NULL, \"partition\" VARCHAR
);
";

impl DuckDbSink {
    /// Creates or completes every table, the commit log and the macros, and
    /// describes them; skipped whole when the warehouse was last set up from
    /// the same statements (their fingerprint in [`SCHEMA_LOG`]), since the
    /// hundreds of `IF NOT EXISTS` statements are most of opening a
    /// warehouse that is already current.
    pub(super) fn create_schema(&self) -> Result<(), SinkError> {
        let separate_fsst = self.writes_separate_fsst()?;
        let mut statements: Vec<(&'static str, &'static str, String)> = Vec::new();
        for table in feeds::catalogue() {
            let mut cols: Vec<String> = table
                .all_columns()
                .map(|c| {
                    let not_null = if table.key.contains(&c.name) { " NOT NULL" } else { "" };
                    let compression = table
                        .compression_of(c.name)
                        .filter(|m| separate_fsst || *m == Compression::Zstd)
                        .map(|m| format!(" USING COMPRESSION {}", m.sql()))
                        .unwrap_or_default();
                    format!("{} {}{compression}{not_null}", ident(c.name), c.ty.sql())
                })
                .collect();
            // Only the bookkeeping tables declare their key. A data table's
            // key is kept by the loads, as in the Parquet sink: each stages its
            // rows once per key and merges them by joins on the key, which run
            // whether or not an index exists and costs the same either way.
            // DuckDB keeps a declared key in an ART index, inserted twice per
            // row (the transaction's own, then the table's at commit): 17% of
            // a price backfill's time, for no faster
            // merges. Warehouses made before keep their keys; the loads work
            // on both.
            if !table.key.is_empty() && table.is_bookkeeping() {
                let key: Vec<String> = table.key.iter().map(|k| ident(k)).collect();
                cols.push(format!("PRIMARY KEY ({})", key.join(", ")));
            }
            // A warehouse made before a column was added gains it, NULL in
            // the rows stored before; loads name their columns, so its place
            // at the end does not matter.
            let added: String = table
                .all_columns()
                .filter(|c| !table.key.contains(&c.name))
                .map(|c| {
                    format!(
                        " ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {};",
                        ident(table.name),
                        ident(c.name),
                        c.ty.sql()
                    )
                })
                .collect();
            let ddl = format!(
                "CREATE TABLE IF NOT EXISTS {name} ({}); ALTER TABLE {name} ADD COLUMN IF NOT EXISTS {COMMIT_SEQ} BIGINT;{added}",
                cols.join(", "),
                name = ident(table.name),
            );
            statements.push((table.name, "creating table", ddl));
        }
        statements.push((
            REPLACED_LOG,
            "creating the commit sequence and replaced-partition log",
            COMMIT_LOG.to_owned(),
        ));
        statements.push((
            "macro_observations",
            "creating macro_latest and macro_as_of",
            MACRO_VIEWS.to_owned(),
        ));
        for table in feeds::catalogue().filter(|t| t.versions) {
            statements.push((table.name, "creating its _as_of macro", as_of_macro(table)));
        }
        let fingerprint = {
            use sha2::Digest;
            let mut hash = sha2::Sha256::new();
            for (_, _, sql) in &statements {
                hash.update(sql.as_bytes());
            }
            for (table, column, text) in crate::describe::comments() {
                hash.update(format!("{table}.{}={text}", column.unwrap_or("")).as_bytes());
            }
            format!("{:x}", hash.finalize())
        };
        let stored: Option<String> = self
            .conn
            .query_row(&format!("SELECT max(fingerprint) FROM {SCHEMA_LOG}"), [], |r| r.get(0))
            .ok()
            .flatten();
        if stored.as_deref() == Some(fingerprint.as_str()) {
            return Ok(());
        }
        for (table, context, sql) in &statements {
            self.conn.execute_batch(sql).map_err(sql_err(table, context))?;
        }
        self.describe_tables()?;
        self.conn
            .execute_batch(&format!(
                "CREATE TABLE IF NOT EXISTS {SCHEMA_LOG} (fingerprint VARCHAR); DELETE FROM {SCHEMA_LOG}; \
                 INSERT INTO {SCHEMA_LOG} VALUES ('{fingerprint}');"
            ))
            .map_err(sql_err(SCHEMA_LOG, "recording the schema's fingerprint"))
    }

    /// Whether the file's format writes DuckDB's FSST and dictionary
    /// compressions: from v1.3.0 on it writes one that combines them, and a
    /// table may not declare the older two (a file made with
    /// `storage_version = "latest"` keeps DuckDB's choice for those columns).
    fn writes_separate_fsst(&self) -> Result<bool, SinkError> {
        let format: Option<String> = self
            .conn
            .query_row(
                &format!(
                    "SELECT tags['storage_version'] FROM duckdb_databases() WHERE database_name = '{WAREHOUSE_ALIAS}'"
                ),
                [],
                |r| r.get(0),
            )
            .map_err(sql_err("-", "reading the file's storage version"))?;
        Ok(format.as_deref().and_then(major_minor).is_some_and(|v| v < (1, 3)))
    }

    /// Stores every table's and column's description ([`crate::describe`]) as
    /// `COMMENT ON`, where it is not already what is stored: BI tools and
    /// `duckdb_columns()` show them.
    fn describe_tables(&self) -> Result<(), SinkError> {
        let context = ("_sync_runs", "describing the tables (COMMENT ON)");
        let stored: std::collections::HashSet<(String, String, String)> = self.rows(
            context,
            "SELECT table_name, '', coalesce(comment, '') FROM duckdb_tables() WHERE database_name = current_database() \
             UNION ALL SELECT table_name, column_name, coalesce(comment, '') FROM duckdb_columns() \
             WHERE database_name = current_database()",
            &[],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let mut sql = String::new();
        for (table, column, text) in crate::describe::comments() {
            if stored.contains(&(table.to_owned(), column.unwrap_or("").to_owned(), text.clone())) {
                continue;
            }
            sql.push_str(&crate::describe::comment_statement(table, column, &text));
        }
        if sql.is_empty() {
            return Ok(());
        }
        self.conn.execute_batch(&sql).map_err(sql_err(context.0, context.1))
    }
}

/// The major and minor numbers of a storage version tag such as `v1.2.0+`.
fn major_minor(tag: &str) -> Option<(u32, u32)> {
    let mut parts = tag.strip_prefix('v')?.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts
        .next()?
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    #[test]
    fn storage_version_tags_read_as_major_and_minor() {
        assert_eq!(super::major_minor("v1.2.0+"), Some((1, 2)));
        assert_eq!(super::major_minor("v1.3.2"), Some((1, 3)));
        assert_eq!(super::major_minor("v2.0+"), Some((2, 0)));
        assert_eq!(super::major_minor("latest"), None);
        assert_eq!(super::major_minor(""), None);
    }
}
