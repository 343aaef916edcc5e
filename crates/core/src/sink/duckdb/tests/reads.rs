//! What the warehouse answers about itself: the run log as the planner reads
//! it, and the point-in-time macro views.

use super::*;

/// Whether a run left work for the next is read from `_sync_runs.resumes`;
/// runs logged before that column say it by their status or their error's
/// words, and are read the same, with the column added or not.
#[test]
fn a_run_log_from_before_the_resumes_column_still_says_which_runs_resume() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(&format!(
        "CREATE TABLE _sync_runs (run_id VARCHAR, pipeline VARCHAR, started_at TIMESTAMPTZ, \
         finished_at TIMESTAMPTZ, status VARCHAR, requests BIGINT, rows_written BIGINT, error VARCHAR, \
         shortfall BIGINT);
         INSERT INTO _sync_runs VALUES
           ('r1', 'budget', '2026-11-01T00:00:00Z', NULL, 'partial', 5, 0, 'budget spent; {resumes}', 0),
           ('r1', 'broken', '2026-11-01T00:00:00Z', NULL, 'failed', 5, 0, 'the route answered 500', 0),
           ('r1', 'walled', '2026-11-01T00:00:00Z', NULL, 'quota_exhausted', 5, 0, NULL, 0);",
        resumes = crate::bookkeeping::RESUMES
    ))
    .unwrap();
    let read = |conn: &Connection| -> Vec<(String, bool)> {
        let reader = reader::BookkeepingReader::on(conn.try_clone().unwrap());
        let mut runs: Vec<(String, bool)> = reader
            .last_runs()
            .unwrap()
            .into_iter()
            .map(|(pipeline, run)| (pipeline, run.resumes))
            .collect();
        runs.sort();
        runs
    };
    let expected = vec![
        ("broken".to_owned(), false),
        ("budget".to_owned(), true),
        ("walled".to_owned(), true),
    ];
    assert_eq!(read(&conn), expected, "without the column");
    conn.execute_batch(
        "ALTER TABLE _sync_runs ADD COLUMN resumes BOOLEAN;
         INSERT INTO _sync_runs VALUES ('r2', 'later', '2026-11-02T00:00:00Z', NULL, 'partial', 1, 0, 'a note', 0, true);",
    )
    .unwrap();
    let mut expected = expected;
    expected.push(("later".to_owned(), true));
    expected.sort();
    assert_eq!(read(&conn), expected, "with the column, old rows and new");
}

/// A value restated A, then B, then back to A under one vintage: what the
/// service serves now is A, so `macro_latest` serves A; `macro_as_of` serves
/// what was seen last by each moment.
#[test]
fn macro_views_serve_the_value_seen_last_when_a_restatement_is_taken_back() {
    use crate::feeds::macro_series::{MACRO_OBSERVATIONS, MacroObservationRow};
    let dir = tempfile::tempdir().unwrap();
    let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
    let day = |d: &str| d.parse::<NaiveDate>().unwrap();
    let at = |t: &str| t.parse::<chrono::DateTime<Utc>>().unwrap();
    for (value, seen) in [
        (1.0, "2026-11-01T00:00:00Z"),
        (2.0, "2026-11-02T00:00:00Z"),
        (1.0, "2026-11-03T00:00:00Z"),
    ] {
        let mut b = BatchBuilder::new(&MACRO_OBSERVATIONS, "run", at(seen));
        b.push(
            MacroObservationRow {
                country: Some("US"),
                series_key: Some("cpi"),
                period: Some(day("2026-09-01")),
                vintage: Some(day("2026-10-15")),
                value: Some(value),
                first_seen_at: Some(at(seen)),
                last_seen_at: Some(at(seen)),
            },
            "{}",
            "/x",
        );
        sink.commit(Commit {
            batches: vec![TableBatch::build(b).unwrap()],
            checkpoints: Vec::new(),
        })
        .unwrap();
    }
    let value = |sql: &str| -> f64 { sink.conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(value("SELECT value FROM macro_latest"), 1.0, "served now");
    for (ts, expected) in [
        ("2026-11-01T12:00:00Z", 1.0),
        ("2026-11-02T12:00:00Z", 2.0),
        ("2026-11-03T12:00:00Z", 1.0),
        // Before fdsync first looked: the first value it saw.
        ("2026-10-20T00:00:00Z", 1.0),
    ] {
        assert_eq!(
            value(&format!("SELECT value FROM macro_as_of(TIMESTAMPTZ '{ts}')")),
            expected,
            "as of {ts}"
        );
    }
}
