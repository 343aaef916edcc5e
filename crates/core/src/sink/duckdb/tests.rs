//! The DuckDB sink's tests, against real warehouse files.

use std::path::Path;

use chrono::{NaiveDate, Utc};
use duckdb::Connection;

use super::settings::*;
use super::*;
use crate::batch::{BatchBuilder, TableBatch, date32};
use crate::feeds;
use crate::sink::{Checkpoint, Commit};

mod arrow_scan;
mod held;
mod queue;
mod reads;

/// 30,000 price bars of one company on distinct days, then its first day
/// again closing at `last_close`: the two rows of that key land in
/// different slices at a 32 MiB limit.
fn prices_with_a_repeat(last_close: f64) -> TableBatch {
    price_days((0..=30_000i64).map(|i| if i == 30_000 { (0, last_close) } else { (i, 1.0) }))
}

/// One company's bars: a day's number from 1950-01-01 and its close.
fn price_days(days: impl Iterator<Item = (i64, f64)>) -> TableBatch {
    let table = feeds::table("prices_daily").unwrap();
    let mut b = BatchBuilder::new(table, "run-1", Utc::now());
    let day0 = NaiveDate::from_ymd_opt(1950, 1, 1).unwrap();
    for (day, close) in days {
        let date = day0 + chrono::Duration::days(day);
        b.row()
            .text(Some("S0001"))
            .date(Some(date))
            .text(Some("S1"))
            .int(Some(i64::from(date32(date)) * 86_400_000))
            .float(Some(1.0))
            .float(Some(1.0))
            .float(Some(1.0))
            .float(Some(close))
            .int(Some(100))
            .end(
                r#"{"padding":"a raw record long enough to make the batch several MiB"}"#,
                "/x",
            );
    }
    TableBatch::build(b).unwrap()
}

fn text_rows(texts: &[&str]) -> TableBatch {
    text_rows_keyed(texts, true)
}

/// Rows of `event_item_texts`, each with its own key, but the last repeats
/// the first's when `last_repeats_first`.
fn text_rows_keyed(texts: &[&str], last_repeats_first: bool) -> TableBatch {
    let table = feeds::table("event_item_texts").unwrap();
    let mut b = BatchBuilder::new(table, "run-1", Utc::now());
    for (i, text) in texts.iter().enumerate() {
        let accession = if last_repeats_first && i + 1 == texts.len() {
            "0".to_owned()
        } else {
            i.to_string()
        };
        b.row()
            .text(Some(&accession))
            .text(Some("8.01"))
            .text(Some("S0001"))
            .text(Some(text))
            .end("{}", "/x");
    }
    TableBatch::build(b).unwrap()
}

/// The first commit's keys are all new (a plain insert), the second's all
/// stored (the upsert); a key staged twice keeps its last row either way.
#[test]
fn new_keys_and_stored_keys_both_load_by_the_tables_rule() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
    let one = |sink: &DuckDbSink, sql: &str| -> String { sink.conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    let commit = |sink: &mut DuckDbSink, batch: TableBatch| {
        sink.commit(Commit {
            batches: vec![batch],
            checkpoints: Vec::new(),
        })
        .unwrap();
    };
    for last_close in [7.0, 9.0] {
        commit(&mut sink, prices_with_a_repeat(last_close));
        assert_eq!(one(&sink, "SELECT count(*)::VARCHAR FROM prices_daily"), "30000");
        assert_eq!(
            one(
                &sink,
                "SELECT close::VARCHAR FROM prices_daily WHERE date = DATE '1950-01-01'"
            ),
            format!("{last_close:.1}")
        );
    }
    let texts = |last: &str| {
        let long = "x".repeat(40);
        let mut texts = vec![long.as_str(); 2000];
        texts.push(last);
        text_rows(&texts)
    };
    for last in ["the first", "the second"] {
        commit(&mut sink, texts(last));
    }
    // Insert once: the first load's last row of the key, never replaced.
    assert_eq!(one(&sink, "SELECT count(*)::VARCHAR FROM event_item_texts"), "2000");
    assert_eq!(
        one(&sink, "SELECT text FROM event_item_texts WHERE accession = '0'"),
        "the first"
    );
}

/// A batch whose keys are all new and distinct is appended as it is, with
/// its commit's number; one with a stored key is merged by the table's rule.
#[test]
fn a_batch_of_new_keys_is_appended_and_one_with_stored_keys_merged() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
    let mut commit = |days: std::ops::Range<i64>, close: f64| {
        sink.commit(Commit {
            batches: vec![price_days(days.map(|d| (d, close)))],
            checkpoints: Vec::new(),
        })
        .unwrap()
        .rows_written
    };
    assert_eq!(commit(0..2000, 1.0), 2000, "all new: appended");
    assert_eq!(commit(1000..3000, 2.0), 2000, "half stored: merged");
    assert_eq!(commit(3000..4000, 3.0), 1000, "all new again: appended");
    let one = |sql: &str| -> String { sink.conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(
        one(
            "SELECT string_agg(close::VARCHAR || ' x' || n, ', ' ORDER BY close) FROM \
             (SELECT close, count(*) n FROM prices_daily GROUP BY close)"
        ),
        "1.0 x1000, 2.0 x2000, 3.0 x1000"
    );
    // Each commit's rows carry its number, whichever way they went in.
    assert_eq!(
        one("SELECT string_agg(n::VARCHAR, ', ' ORDER BY s) FROM \
             (SELECT _commit_seq s, count(*) n FROM prices_daily GROUP BY s)"),
        "1000, 2000, 1000"
    );
    assert_eq!(
        one(
            "SELECT count(*)::VARCHAR FROM prices_daily WHERE json_extract_string(raw, '$.padding') IS NULL \
             OR _run_id IS NULL OR _fetched_at IS NULL"
        ),
        "0"
    );
}

/// A batch of new keys is appended without staging them when no stored row
/// lies in its keys' range; a batch whose least or greatest key is a stored
/// one, to the day or the microsecond, still finds it and merges.
#[test]
fn a_stored_key_at_a_batchs_bound_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
    fn commit(sink: &mut DuckDbSink, batch: TableBatch) -> u64 {
        sink.commit(Commit {
            batches: vec![batch],
            checkpoints: Vec::new(),
        })
        .unwrap()
        .rows_written
    }
    let staged_columns = |sink: &DuckDbSink| -> i64 {
        sink.conn
            .query_row(
                "SELECT count(*) FROM duckdb_columns() WHERE table_name = '_stage_prices_daily'",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    assert_eq!(commit(&mut sink, price_days((0..200).map(|d| (d, 1.0)))), 200);
    assert_eq!(staged_columns(&sink), 0, "appended without staging");
    assert_eq!(
        commit(&mut sink, price_days((199..400).map(|d| (d, 2.0)))),
        201,
        "day 199 merged"
    );
    // After a batch that held a stored key, the next one's keys are staged
    // and probed without looking at their range first; found all new, the
    // batch after it is looked at again.
    assert_eq!(commit(&mut sink, price_days((1000..1200).map(|d| (d, 4.0)))), 200);
    assert_eq!(staged_columns(&sink), 2, "the keys staged, to probe");
    assert_eq!(
        commit(&mut sink, price_days((-200..1).map(|d| (d, 3.0)))),
        201,
        "day 0 merged"
    );
    let t0 = chrono::DateTime::parse_from_rfc3339("2026-11-25T23:00:00.123457Z")
        .unwrap()
        .to_utc();
    let revisions = |micros: std::ops::Range<i64>, headline: &str| {
        let mut b = BatchBuilder::new(feeds::table("news_headline_revisions").unwrap(), "run-1", Utc::now());
        for us in micros {
            b.row()
                .text(Some("n_1"))
                .timestamp(Some(t0 + chrono::Duration::microseconds(us)))
                .text(Some(headline))
                .end("{}", "/x");
        }
        TableBatch::build(b).unwrap()
    };
    // A stored key with another headline is a version of its own, stamped
    // when it was fetched (`versioned_by`): one row more each time.
    assert_eq!(commit(&mut sink, revisions(0..200, "first")), 200);
    assert_eq!(
        commit(&mut sink, revisions(199..400, "second")),
        201,
        "the stored revision kept, the other headline at its time a version too"
    );
    assert_eq!(commit(&mut sink, revisions(1000..1200, "fourth")), 200);
    assert_eq!(
        commit(&mut sink, revisions(-200..1, "third")),
        201,
        "the stored revision kept, the other headline at its time a version too"
    );
    let one = |sql: &str| -> String { sink.conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(
        one("SELECT count(*)::VARCHAR || ' ' || count(DISTINCT date)::VARCHAR FROM prices_daily"),
        "800 800"
    );
    assert_eq!(
        one(
            "SELECT string_agg(close::VARCHAR, ' ' ORDER BY date) FROM prices_daily \
             WHERE date IN (DATE '1950-01-01', DATE '1950-07-19')"
        ),
        "3.0 2.0"
    );
    assert_eq!(
        one("SELECT count(*)::VARCHAR || ' ' || count(DISTINCT updated_at)::VARCHAR FROM news_headline_revisions"),
        "802 802"
    );
    assert_eq!(
        one(
            "SELECT string_agg(headline, ' ' ORDER BY updated_at) FROM news_headline_revisions \
             WHERE updated_at IN (TIMESTAMPTZ '2026-11-25 23:00:00.123457+00', TIMESTAMPTZ '2026-11-25 23:00:00.123656+00')"
        ),
        "first first"
    );
}

/// The range of a batch's keys as text DuckDB casts back to the same values;
/// none for a key column whose text would not be exact.
#[test]
fn key_bounds_are_exact_or_absent() {
    use arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray};
    let batch = |columns: Vec<ArrayRef>| {
        let fields: Vec<_> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| arrow::datatypes::Field::new(format!("k{i}"), c.data_type().clone(), true))
            .collect();
        arrow::record_batch::RecordBatch::try_new(std::sync::Arc::new(arrow::datatypes::Schema::new(fields)), columns)
            .unwrap()
    };
    let bounds = merge::key_bounds(&batch(vec![
        std::sync::Arc::new(StringArray::from(vec![Some("b"), None, Some("B"), Some("é")])),
        std::sync::Arc::new(Int64Array::from(vec![Some(-3), Some(i64::MAX), None, Some(0)])),
        std::sync::Arc::new(StringArray::from(vec![None::<&str>, None, None, None])),
    ]));
    let text = |v: &[Option<&str>]| v.iter().map(|b| b.map(str::to_owned)).collect::<Vec<_>>();
    assert_eq!(
        bounds,
        Some(text(&[
            Some("B"),
            Some("é"),
            Some("-3"),
            Some("9223372036854775807"),
            None,
            None
        ]))
    );
    assert_eq!(
        merge::key_bounds(&batch(vec![std::sync::Arc::new(Float64Array::from(vec![0.1, 0.2]))])),
        None
    );
}

/// Each column a table names is stored with its compression, loaded the way
/// a backfill loads it: news items' `raw` with ZSTD in both tables it goes
/// to, their text with FSST and their labels with a dictionary; a price
/// bar's `raw` with FSST and every lineage table's `_run_id` with a
/// dictionary.
#[test]
fn named_columns_are_stored_with_their_compression() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
    let mut rows = crate::records::Rows::new("run-1", "/api/v1/news/feed", Utc::now());
    for n in 0..3000 {
        let item = format!(
            r#"{{"id":"n_{n:010}","publishedAt":"2026-11-01T00:00:00Z","firstSeenAt":"2026-11-01T00:00:01.000Z",
            "updatedAt":"2026-11-01T00:00:01.000Z","headline":"Company {n} reports: markets update",
            "snippet":"Company {n} shared an update on markets.","url":"https://example.invalid/news/n_{n:010}",
            "source":{{"id":"sec_edgar","name":"SEC EDGAR","licenceClass":"public","attribution":"Source: U.S. SEC EDGAR",
            "displayPolicy":"full"}},"tickers":["S{n}"],"ciks":["{n:010}"],"people":[],"indicators":[],
            "topics":["markets"],"storylineId":"st_{n:08}","importance":50,"flash":false,"form":"8-K"}}"#
        );
        let raw = serde_json::value::RawValue::from_string(item).unwrap();
        assert!(crate::feeds::news::read_item(&mut rows, &raw, None).is_some());
    }
    let mut batches = rows.into_batches().unwrap();
    batches.push(price_days((0..3000).map(|d| (d, 1.0))));
    sink.commit(Commit {
        batches,
        checkpoints: Vec::new(),
    })
    .unwrap();
    sink.conn.execute_batch("CHECKPOINT").unwrap();
    for (table, column, stored) in [
        ("news_items", "raw", "ZSTD"),
        ("news_headline_revisions", "raw", "ZSTD"),
        ("news_items", "headline", "FSST"),
        ("news_items", "url", "FSST"),
        ("news_headline_revisions", "id", "FSST"),
        ("news_items", "source_name", "Dictionary"),
        ("news_items", "_run_id", "Dictionary"),
        ("prices_daily", "raw", "FSST"),
        ("prices_daily", "company_key", "Dictionary"),
        ("prices_daily", "_route", "Dictionary"),
    ] {
        assert_eq!(compression(&sink.conn, table, column), stored, "{table}.{column}");
    }
}

/// The compressions `table`'s `column` is stored with, in order.
fn compression(conn: &Connection, table: &str, column: &str) -> String {
    conn.query_row(
        &format!(
            "SELECT string_agg(DISTINCT compression, ', ' ORDER BY compression) FROM pragma_storage_info('{table}') \
             WHERE column_name = '{column}' AND segment_type <> 'VALIDITY'"
        ),
        [],
        |r| r.get(0),
    )
    .unwrap()
}

/// A warehouse in `dir` whose writer has the least memory limit that holds
/// bulk commits: 20, below the least the configuration allows (32).
fn sink_at_the_least_limit(dir: &Path) -> DuckDbSink {
    let settings = Settings {
        memory_limit_mb: HOLD_FROM_MB,
        ..Settings::default()
    };
    DuckDbSink::open(&dir.join("w.duckdb"), &settings).unwrap()
}

/// A row group of filings, each with its own `raw` record, appended at the
/// least memory limit. Before the events table's `raw` was created with ZSTD,
/// this ran out of memory every time: DuckDB's dictionary analysis of a row
/// group keeps a copy of every distinct string of the column until the
/// analysis ends.
#[test]
fn a_row_group_of_distinct_filing_records_appends_at_the_least_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = sink_at_the_least_limit(dir.path());
    let table = feeds::table("events").unwrap();
    let mut b = BatchBuilder::new(table, "run-1", Utc::now());
    let filed = NaiveDate::from_ymd_opt(2024, 3, 1).unwrap();
    let accepted = Utc::now();
    let filings = ROW_GROUP_ROWS + ROW_GROUP_ROWS / 6;
    for n in 0..filings {
        let accession = format!("{:010}-24-{n:06}", n % 997);
        let company = format!("S{:04}", n % 997);
        let headline = format!("Company {company} files an 8-K, number {n}");
        let raw = format!(
            r#"{{"accession":"{accession}","cik":"{:010}","symbol":"{company}","name":"Company {company}",
            "family":"8-K","items":["2.02","9.01"],"filingDate":"2024-03-01","acceptedAt":"{}","headline":"{headline}"}}"#,
            n % 997,
            accepted.to_rfc3339()
        );
        b.row()
            .text(Some(&accession))
            .text(Some(&company))
            .text(Some(&format!("{:010}", n % 997)))
            .text(Some(&company))
            .text(Some(&format!("Company {company}")))
            .text(Some("8-K"))
            .text_list(["2.02", "9.01"])
            .date(Some(filed))
            .timestamp(Some(accepted))
            .text(Some(&headline))
            .end(&raw, "/api/v1/events");
    }
    sink.commit(Commit {
        batches: vec![TableBatch::build(b).unwrap()],
        checkpoints: Vec::new(),
    })
    .unwrap();
    let stored: i64 = sink
        .conn
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, filings as i64);
    assert_eq!(compression(&sink.conn, "events", "raw"), "ZSTD");
}

/// A row group of distinct item texts of a few hundred bytes, appended at
/// the least memory limit: stored with ZSTD, as `events.raw` is, for the same
/// reason (the test above).
#[test]
fn a_row_group_of_distinct_item_texts_appends_at_the_least_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = sink_at_the_least_limit(dir.path());
    let texts: Vec<String> = (0..ROW_GROUP_ROWS + ROW_GROUP_ROWS / 6)
        .map(|n| {
            format!(
                "Item {n:08}. {}",
                "The company entered into a material agreement. ".repeat(6)
            )
        })
        .collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    sink.commit(Commit {
        batches: vec![text_rows_keyed(&texts, false)],
        checkpoints: Vec::new(),
    })
    .unwrap();
    let stored: i64 = sink
        .conn
        .query_row("SELECT count(DISTINCT text) FROM event_item_texts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, texts.len() as i64);
}

/// `prices_daily` as an earlier version made it: its columns in another
/// order, its key declared.
const OLDER_PRICES_DAILY: &str = "CREATE TABLE prices_daily (_commit_seq BIGINT, raw JSON, close DOUBLE, \
     volume BIGINT, company_key VARCHAR NOT NULL, date DATE NOT NULL, symbol VARCHAR, t_ms BIGINT, \
     open DOUBLE, high DOUBLE, low DOUBLE, _route VARCHAR, _run_id VARCHAR, _fetched_at TIMESTAMPTZ, \
     PRIMARY KEY (company_key, date))";

/// A warehouse at `path` whose `prices_daily` an earlier version made.
fn open_older_warehouse(path: &Path) -> DuckDbSink {
    Connection::open(path)
        .unwrap()
        .execute_batch(OLDER_PRICES_DAILY)
        .unwrap();
    DuckDbSink::open(path, &Settings::default()).unwrap()
}

fn primary_keys(conn: &Connection) -> String {
    conn.query_row(
        "SELECT coalesce(string_agg(table_name, ', ' ORDER BY table_name), '') FROM duckdb_constraints() \
         WHERE constraint_type = 'PRIMARY KEY' AND NOT starts_with(table_name, '_sync_')",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

/// A new warehouse declares only the bookkeeping tables' keys; a
/// warehouse made when entity tables declared theirs keeps them, and the
/// same merges load it, with a key updated twice in one transaction.
#[test]
fn entity_keys_are_kept_by_the_loads_with_or_without_a_declared_key() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = DuckDbSink::open(&dir.path().join("new.duckdb"), &Settings::default()).unwrap();
    assert_eq!(primary_keys(&fresh.conn), "", "no data table declares its key");
    let bookkeeping: i64 = fresh
        .conn
        .query_row(
            "SELECT count(*) FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY' \
             AND table_name IN ('_sync_checkpoints', '_sync_runs')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(bookkeeping, 2);

    let path = dir.path().join("older.duckdb");
    let mut sink = open_older_warehouse(&path);
    for close in [1.0, 2.0, 3.0] {
        sink.commit_held(Commit {
            batches: vec![price_days((0..2000).map(|d| (d, close)))],
            checkpoints: Vec::new(),
        })
        .unwrap();
    }
    sink.commit_held_now().unwrap();
    sink.commit(Commit {
        batches: vec![price_days((1990..2010).map(|d| (d, 4.0)))],
        checkpoints: Vec::new(),
    })
    .unwrap();
    let closes: String = sink
        .conn
        .query_row(
            "SELECT string_agg(close::VARCHAR || ' x' || n, ', ' ORDER BY close) FROM \
             (SELECT close, count(*) n FROM prices_daily GROUP BY close)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(closes, "3.0 x1990, 4.0 x20");
    assert_eq!(primary_keys(&sink.conn), "prices_daily");
}

/// New rows go in by column name: a warehouse made by another version
/// may hold the same columns in another order.
#[test]
fn new_rows_are_appended_by_column_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.duckdb");
    let mut sink = open_older_warehouse(&path);
    let written = sink
        .commit(Commit {
            batches: vec![price_days((0..2000).map(|d| (d, 5.0)))],
            checkpoints: Vec::new(),
        })
        .unwrap()
        .rows_written;
    assert_eq!(written, 2000);
    let matching: i64 = sink
        .conn
        .query_row(
            "SELECT count(*) FROM prices_daily WHERE close = 5.0 AND volume = 100 AND company_key = 'S0001' \
             AND symbol = 'S1' AND _run_id = 'run-1' AND _route = '/x' AND _commit_seq IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(matching, 2000);
}

/// Whether the writer's connection is still the one that created the
/// temp table `marker` (a temp table lives as long as its connection).
async fn first_connection(sink: &crate::sink::SinkHandle) -> bool {
    sink.call(|s| {
        s.connection().query_row(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'marker'",
            [],
            |r| r.get::<_, i64>(0),
        )
    })
    .await
    .unwrap()
    .unwrap()
        == 1
}

#[tokio::test]
async fn the_writer_opens_the_file_again_after_enough_rows_and_keeps_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let options = crate::sink::SinkOptions {
        duckdb: Settings {
            reopen_after_rows: 1_000,
            ..Settings::default()
        },
        ..crate::sink::SinkOptions::default()
    };
    let sink = crate::sink::SinkHandle::open_duckdb_with(dir.path().join("w.duckdb"), options)
        .await
        .unwrap();
    sink.call(|s| s.connection().execute_batch("CREATE TEMP TABLE marker (x INT)"))
        .await
        .unwrap()
        .unwrap();
    let days = |range: std::ops::Range<i64>| Commit {
        batches: vec![price_days(range.map(|day| (day, 1.0)))],
        checkpoints: Vec::new(),
    };
    let stored = || {
        sink.call(|s| {
            s.connection().query_row(
                "SELECT count(*), current_setting('max_vacuum_tasks') FROM prices_daily",
                [],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
            )
        })
    };
    sink.commit(days(0..600)).await.unwrap();
    assert!(first_connection(&sink).await, "600 rows: not yet");
    sink.commit(days(600..1_200)).await.unwrap();
    assert!(!first_connection(&sink).await, "1,200 rows: opened again");
    // Every row is there, and the pause the reopen set for its closing
    // checkpoint did not outlive it.
    assert_eq!(stored().await.unwrap().unwrap(), (1_200, 100));
    sink.commit(days(1_200..1_300)).await.unwrap();
    assert_eq!(stored().await.unwrap().unwrap(), (1_300, 100));
    sink.close().await;
}

/// With a checkpoint at every commit: the row groups two bulk loads
/// leave stay apart, and the next small commit's checkpoint merges them.
#[test]
fn a_bulk_load_leaves_row_groups_for_the_next_small_commit_to_merge() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
    sink.conn.execute_batch("SET checkpoint_threshold = '1KB'").unwrap();
    let table = feeds::table("event_item_texts").unwrap();
    let mut commit_texts = |from: usize, count: usize| {
        let mut b = BatchBuilder::new(table, "run-1", Utc::now());
        for accession in from..from + count {
            b.row()
                .text(Some(&accession.to_string()))
                .text(Some("8.01"))
                .text(Some("S0001"))
                .text(Some("an item's text"))
                .end("{}", "/x");
        }
        sink.commit(Commit {
            batches: vec![TableBatch::build(b).unwrap()],
            checkpoints: Vec::new(),
        })
        .unwrap();
        sink.conn
            .query_row(
                "SELECT count(DISTINCT row_group_id)::VARCHAR || ' row groups, ' || \
                 current_setting('max_vacuum_tasks')::VARCHAR || ' vacuum tasks' \
                 FROM pragma_storage_info('event_item_texts')",
                [],
                |r| r.get::<_, String>(0),
            )
            .unwrap()
    };
    assert_eq!(commit_texts(0, BULK_ROWS), "1 row groups, 100 vacuum tasks");
    assert_eq!(commit_texts(BULK_ROWS, BULK_ROWS), "2 row groups, 100 vacuum tasks");
    // Enough rows for the commit's log to pass the 1 KB threshold.
    assert_eq!(commit_texts(2 * BULK_ROWS, 100), "1 row groups, 100 vacuum tasks");
}

/// A commit of S0001's bars on `days` that moves its checkpoint to `cursor`.
fn price_commit(days: std::ops::Range<i64>, cursor: &str) -> Commit {
    Commit {
        batches: vec![price_days(days.map(|d| (d, 1.0)))],
        checkpoints: vec![Checkpoint {
            pipeline: "prices".into(),
            partition: "S0001".into(),
            cursor: cursor.into(),
        }],
    }
}

/// The bars stored at `path` and S0001's checkpoint.
fn stored_prices(path: &Path) -> (i64, Option<String>) {
    let sink = DuckDbSink::open(path, &Settings::default()).unwrap();
    let rows: i64 = sink
        .conn
        .query_row("SELECT count(*) FROM prices_daily", [], |r| r.get(0))
        .unwrap();
    let cursor = sink.checkpoints("prices").unwrap().remove("S0001").map(|c| c.cursor);
    (rows, cursor)
}

/// The rows of each of `prices_daily`'s row groups, in order.
fn price_row_groups(conn: &Connection) -> String {
    conn.query_row(
        "SELECT string_agg(n::VARCHAR, ', ' ORDER BY g) FROM (SELECT row_group_id g, \
         sum(count) FILTER (WHERE column_path = '[1]') n FROM pragma_storage_info('prices_daily') GROUP BY g)",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

/// A checkpoint that fails as a commit lands (DuckDB out of memory while
/// compressing; forced here by DuckDB's own switch for testing it) fails
/// that commit and invalidates DuckDB's database. The writer attaches the
/// file again, so what was committed before stays and later commits land.
#[test]
fn a_failed_checkpoint_keeps_the_commit_and_the_writer_working() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.duckdb");
    let mut sink = DuckDbSink::open(&path, &Settings::default()).unwrap();
    sink.commit(price_commit(0..500, "a")).unwrap();
    sink.conn
        .execute_batch("SET debug_checkpoint_abort = 'before_header'; SET checkpoint_threshold = '0b'")
        .unwrap();
    let failed = sink.commit(price_commit(500..1000, "b")).unwrap_err().to_string();
    assert!(failed.contains("invalidated"), "{failed}");
    sink.commit(price_commit(1000..1500, "c")).unwrap();
    drop(sink);
    assert_eq!(
        stored_prices(&path),
        (1000, Some("c".to_owned())),
        "the first and the last commit"
    );
}

/// The writer attaches the file with the warehouse's row group size and
/// spills beside it. A held landing of more than a row group goes into
/// the file as whole row groups, its WAL naming them rather than holding
/// the rows, and DuckDB opened on the file directly reads them. A writer
/// below the default limit, which holds no commits, keeps DuckDB's row groups.
#[test]
fn the_warehouse_is_attached_with_its_row_group_size_and_spills_beside_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.duckdb");
    let row_groups = |path: &Path| price_row_groups(&Connection::open(path).unwrap());
    let mut sink = DuckDbSink::open(&path, &Settings::default()).unwrap();
    let spill: String = sink
        .conn
        .query_row("SELECT current_setting('temp_directory')", [], |r| r.get(0))
        .unwrap();
    assert_eq!(spill, format!("{}.tmp", path.display()));
    sink.commit_held(Commit {
        batches: vec![price_days((0..100_000).map(|d| (d, 1.0)))],
        checkpoints: Vec::new(),
    })
    .unwrap();
    sink.commit_held_now().unwrap();
    let wal_bytes = std::fs::metadata(dir.path().join("w.duckdb.wal")).map_or(0, |m| m.len());
    // The rows are megabytes; what the WAL holds is the row groups' pointers.
    assert!(
        wal_bytes < 256 * 1024,
        "the landing's rows went through the WAL: {wal_bytes} bytes"
    );
    drop(sink);
    assert_eq!(row_groups(&path), "61440, 38560");

    let small = dir.path().join("small.duckdb");
    let settings = Settings {
        memory_limit_mb: 16,
        ..Settings::default()
    };
    let mut sink = DuckDbSink::open(&small, &settings).unwrap();
    sink.commit(Commit {
        batches: vec![price_days((0..100_000).map(|d| (d, 1.0)))],
        checkpoints: Vec::new(),
    })
    .unwrap();
    drop(sink);
    assert_eq!(row_groups(&small), "100000");
}

#[test]
fn a_batch_merged_in_slices_keeps_the_last_row_of_each_key() {
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        memory_limit_mb: 32,
        ..Settings::default()
    };
    let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &settings).unwrap();
    let prices = prices_with_a_repeat(7.0);
    let table = prices.table;
    assert!(
        sink.slices(table, prices.batch.clone()).len() > 1,
        "the batch is sliced"
    );
    let long = "x".repeat(400);
    let mut texts = vec![long.as_str(); 20_000];
    texts.push("the last one");
    let texts = text_rows(&texts);
    assert!(
        sink.slices(texts.table, texts.batch.clone()).len() > 1,
        "the batch is sliced"
    );
    sink.commit(Commit {
        batches: vec![prices, texts],
        checkpoints: Vec::new(),
    })
    .unwrap();
    let one = |sql: &str| -> String { sink.conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(one("SELECT count(*)::VARCHAR FROM prices_daily"), "30000");
    assert_eq!(
        one("SELECT close::VARCHAR FROM prices_daily WHERE date = DATE '1950-01-01'"),
        "7.0"
    );
    assert_eq!(one("SELECT count(*)::VARCHAR FROM event_item_texts"), "20000");
    assert_eq!(
        one("SELECT text FROM event_item_texts WHERE accession = '0'"),
        "the last one"
    );
}
