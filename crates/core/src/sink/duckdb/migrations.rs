//! The warehouse's layout version and the ordered steps that bring an older
//! warehouse to it. New tables and columns come from the schema's own
//! `IF NOT EXISTS` statements; each such change is still a step here, so the
//! version a warehouse records says what it holds, and a step's SQL does what
//! additions cannot (rewriting rows stored in an older form). Each step runs
//! once, in its own transaction with its row in `_sync_migrations`.
//! CHANGELOG.md names every step.

use chrono::Utc;

use super::{DuckDbSink, ident, sql_err};
use crate::bookkeeping::SYNC_MIGRATIONS;
use crate::sink::SinkError;

/// One change of the warehouse's layout.
#[derive(Debug)]
pub struct Migration {
    pub version: u32,
    /// What changed, as CHANGELOG.md says it.
    pub change: &'static str,
    /// Run once when an older warehouse reaches this version; empty when the
    /// schema's additions did it all.
    pub sql: &'static str,
}

/// Every change since the first release, oldest first; versions count up by one.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        change: "0.1.0: the first layout",
        sql: "",
    },
    Migration {
        version: 2,
        change: "a company a route refused is remembered as `not_served:<company>` with the refusal as JSON; \
                 the `404:<company>` checkpoints of older warehouses are rewritten so",
        // Insert, then delete: the checkpoints' key is declared, and DuckDB
        // updates a key column as a delete and an insert anyway.
        sql: "INSERT INTO _sync_checkpoints (pipeline, \"partition\", cursor, updated_at) \
              SELECT o.pipeline, 'not_served:' || substr(o.\"partition\", 5), \
                     json_object('at', o.cursor, 'status', 404, 'message', '', 'route', '')::VARCHAR, o.updated_at \
              FROM _sync_checkpoints o \
              WHERE starts_with(o.\"partition\", '404:') AND NOT EXISTS ( \
                  SELECT 1 FROM _sync_checkpoints n \
                  WHERE n.pipeline = o.pipeline AND n.\"partition\" = 'not_served:' || substr(o.\"partition\", 5)); \
              DELETE FROM _sync_checkpoints WHERE starts_with(\"partition\", '404:');",
    },
    Migration {
        version: 3,
        change: "every table that keeps history has `<table>_versions` (each changed or withdrawn row as it was) \
                 and the macro `<table>_as_of(ts)`",
        sql: "",
    },
    Migration {
        version: 4,
        change: "`_sync_runs.resumes` (work the next run picks up at once), `_sync_verify` (fdsync verify), \
                 `_sync_schema` (the fingerprint of the statements the warehouse was set up with)",
        sql: "",
    },
    Migration {
        version: 5,
        change: "`price_windows`: each prices answer's window (`display_from`, the range asked, the first bar)",
        sql: "",
    },
    Migration {
        version: 6,
        change: "news: `news_storylines` (news_bodies), `news_top` (ranking snapshots), `news_search_hits` \
                 (saved searches)",
        sql: "",
    },
    Migration {
        version: 7,
        change: "`_sync_envelope_fields`: envelope fields no reader reads, with their values; drift counts envelopes",
        sql: "",
    },
    Migration {
        version: 8,
        change: "`events_wire_counts`: the wire's tally per family of each closed filing day",
        sql: "",
    },
    Migration {
        version: 9,
        change: "`_sync_migrations` (this log: the warehouse's layout version) and `_sync_alerts` (alerts sent)",
        sql: "",
    },
];

/// The layout this build writes.
pub fn schema_version() -> u32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

impl DuckDbSink {
    /// The layout version the warehouse records (0: none recorded, a new
    /// file or one from before versions were); refused, before anything is
    /// written, when a newer fdsync wrote it.
    ///
    /// # Errors
    /// When the warehouse is newer than this build.
    pub(super) fn layout_version(&self) -> Result<u32, SinkError> {
        let at: Option<i64> = self
            .conn
            .query_row(
                &format!("SELECT max(version) FROM {}", ident(SYNC_MIGRATIONS.name)),
                [],
                |r| r.get(0),
            )
            .unwrap_or(None);
        let (at, known) = (at.map_or(0, |v| u32::try_from(v).unwrap_or(u32::MAX)), schema_version());
        if at > known {
            return Err(SinkError::NewerLayout {
                path: self.path.clone(),
                found: at,
                known,
            });
        }
        Ok(at)
    }

    /// Runs the steps past `at`, the warehouse's recorded version, in
    /// order. A warehouse from before versions were recorded goes through
    /// them all: the first is 0.1.0's layout.
    ///
    /// # Errors
    /// When a step fails: then that step left nothing behind, and the
    /// earlier ones stay recorded.
    pub(super) fn migrate(&self, at: u32) -> Result<(), SinkError> {
        let table = ident(SYNC_MIGRATIONS.name);
        for step in MIGRATIONS.iter().filter(|m| m.version > at) {
            let mut sql = String::from("BEGIN TRANSACTION; ");
            sql.push_str(step.sql);
            sql.push_str(&format!(
                " INSERT INTO {table} (version, change, applied_at) VALUES ({}, '{}', '{}'); COMMIT;",
                step.version,
                step.change.replace('\'', "''"),
                Utc::now().to_rfc3339()
            ));
            if let Err(e) = self.conn.execute_batch(&sql) {
                let _ = self.conn.execute_batch("ROLLBACK");
                return Err(sql_err(SYNC_MIGRATIONS.name, "migrating the layout")(e));
            }
            tracing::info!(
                message = "Warehouse migrated.",
                version = step.version,
                change = step.change
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::MIGRATIONS;

    #[test]
    fn versions_count_up_by_one_from_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version as usize, i + 1, "{m:?}");
        }
    }
}
