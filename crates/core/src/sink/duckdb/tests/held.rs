//! Held transactions, and the memory limit the writer gives DuckDB while
//! it appends, merges and commits.

use super::*;

/// Held commits land together, with their checkpoints: a writer that
/// stops before they land (a crash) leaves neither their rows nor their
/// checkpoints, and one that lands them leaves both.
#[test]
fn held_commits_land_together_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.duckdb");
    let mut sink = DuckDbSink::open(&path, &Settings::default()).unwrap();
    sink.commit_held(price_commit(0..2000, "a")).unwrap();
    sink.commit_held(price_commit(2000..4000, "b")).unwrap();
    assert_eq!(
        sink.held.as_ref().map(|h| (h.commits, h.checkpoints.len())),
        Some((2, 2)),
        "both held, their checkpoints loaded when they land"
    );
    drop(sink);
    assert_eq!(stored_prices(&path), (0, None), "a crash loses them whole");

    let mut sink = DuckDbSink::open(&path, &Settings::default()).unwrap();
    sink.commit_held(price_commit(0..2000, "a")).unwrap();
    sink.commit_held(price_commit(2000..4000, "b")).unwrap();
    sink.commit_held_now().unwrap();
    assert!(sink.held.is_none());
    drop(sink);
    assert_eq!(
        stored_prices(&path),
        (4000, Some("b".to_owned())),
        "landed: rows and checkpoint"
    );

    // Below the default limit a writer does not hold: each commit lands at once.
    let small = Settings {
        memory_limit_mb: 16,
        ..Settings::default()
    };
    let mut sink = DuckDbSink::open(&path, &small).unwrap();
    sink.commit_held(price_commit(4000..6000, "c")).unwrap();
    assert!(sink.held.is_none());
}

/// A commit that lands at once behind held ones lands its checkpoint after
/// theirs: a checkpoint never moves back to a page read before it.
#[test]
fn a_commit_behind_held_ones_keeps_the_newest_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.duckdb");
    let mut sink = DuckDbSink::open(&path, &Settings::default()).unwrap();
    sink.commit_held(price_commit(0..2000, "a")).unwrap();
    assert!(sink.held.is_some(), "held");
    sink.commit(price_commit(2000..2010, "b")).unwrap();
    assert!(sink.held.is_none(), "landed together");
    drop(sink);
    assert_eq!(stored_prices(&path), (2010, Some("b".to_owned())));
}

/// At the default limit a batch of new keys goes into its table whole, however
/// many slices a merge of it would take: a short last slice merged inside a
/// held transaction ran out of memory.
#[test]
fn a_held_batch_of_new_keys_is_appended_whole_at_the_default_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
    let long = "x".repeat(400);
    let texts = text_rows_keyed(&vec![long.as_str(); 20_001], false);
    let table = texts.table;
    assert!(
        sink.slices(table, texts.batch.clone()).len() > 1,
        "a merge would slice it"
    );
    sink.commit_held(Commit {
        batches: vec![texts],
        checkpoints: Vec::new(),
    })
    .unwrap();
    assert!(sink.held.is_some(), "held");
    let one = |sink: &DuckDbSink, sql: &str| -> i64 { sink.conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(
        one(
            &sink,
            "SELECT count(*) FROM duckdb_columns() WHERE table_name = '_stage_event_item_texts'"
        ),
        0,
        "nothing was staged: no stored row lies in the keys' range"
    );
    sink.commit_held_now().unwrap();
    assert_eq!(one(&sink, "SELECT count(*) FROM event_item_texts"), 20_001);
}

/// A writer that runs out of memory on a commit it could hold reports it,
/// rolled back, and commits each load on its own from then on.
#[test]
fn a_writer_out_of_memory_while_holding_stops_holding() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
    // A repeated day takes the merge path, which runs under the limit the
    // writer set; an append would set its own.
    let commit = |from: i64| Commit {
        batches: vec![price_days((from..from + 100_000).chain([from]).map(|d| (d, 1.0)))],
        checkpoints: Vec::new(),
    };
    // Written out first, the new file's pages can be let go of under the limit.
    sink.conn
        .execute_batch("CHECKPOINT; SET memory_limit = '1MiB'")
        .unwrap();
    let failed = sink.commit_held(commit(0)).unwrap_err();
    assert!(matches!(failed, SinkError::OutOfMemory { .. }), "{failed}");
    assert!(sink.held.is_none() && !sink.holds_bulk_commits);
    sink.conn.execute_batch("SET memory_limit = '256MiB'").unwrap();
    let stored = |sink: &DuckDbSink| -> i64 {
        sink.conn
            .query_row("SELECT count(*) FROM prices_daily", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(stored(&sink), 0, "rolled back");
    sink.commit_held(commit(0)).unwrap();
    assert!(sink.held.is_none(), "committed on its own");
    assert_eq!(stored(&sink), 100_000);
}

/// What DuckDB's memory limit is now, as it prints it.
fn memory_limit(sink: &DuckDbSink) -> String {
    sink.conn
        .query_row("SELECT current_setting('memory_limit')", [], |r| r.get(0))
        .unwrap()
}

/// Appends in a held transaction run under part of the memory limit, so
/// DuckDB spills the transaction's last row groups rather than keeping
/// them until the whole limit is full; its commit and a merge get the
/// whole limit back.
#[test]
fn held_appends_run_under_part_of_the_limit_and_commits_under_all_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
    assert_eq!(memory_limit(&sink), "64.0 MiB");
    sink.commit_held(Commit {
        batches: vec![price_days((0..20_000).map(|d| (d, 1.0)))],
        checkpoints: Vec::new(),
    })
    .unwrap();
    assert!(sink.held.is_some());
    let lowered = memory_limit(&sink);
    assert_eq!(lowered, "48.0 MiB", "appending under part of the limit");
    // Days already stored merge.
    sink.commit_held(Commit {
        batches: vec![price_days((0..200).map(|d| (d, 2.0)))],
        checkpoints: Vec::new(),
    })
    .unwrap();
    assert_eq!(sink.held.as_ref().map(|h| h.commits), Some(2));
    assert_eq!(memory_limit(&sink), "64.0 MiB", "a merge runs under the whole limit");
    sink.commit_held(Commit {
        batches: vec![price_days((20_000..40_000).map(|d| (d, 1.0)))],
        checkpoints: Vec::new(),
    })
    .unwrap();
    assert_ne!(memory_limit(&sink), "64.0 MiB");
    sink.commit_held_now().unwrap();
    assert_eq!(memory_limit(&sink), "64.0 MiB", "committed under the whole limit");
}

/// A held transaction commits once a table holds six row groups, and
/// a checkpoint (merges allowed) leaves the row groups it wrote as they
/// are. Committed one by one, each of these loads ended in a partial row
/// group, and the checkpoint merged them.
#[test]
fn held_commits_land_in_row_groups_no_checkpoint_merges() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
    let mut held_after = |from: i64| {
        let days = (from..from + 150_000).map(|d| (d, 1.0));
        sink.commit_held(Commit {
            batches: vec![price_days(days)],
            checkpoints: Vec::new(),
        })
        .unwrap();
        sink.held.as_ref().map_or(0, |h| h.commits)
    };
    assert_eq!(held_after(0), 1);
    assert_eq!(held_after(150_000), 2);
    assert_eq!(held_after(300_000), 0, "450,000 rows: six row groups and more");
    assert_ne!(
        memory_limit(&sink),
        "64.0 MiB",
        "a bulk load commits under part of the limit"
    );
    sink.conn.execute_batch("FORCE CHECKPOINT").unwrap();
    assert_eq!(
        price_row_groups(&sink.conn),
        "61440, 61440, 61440, 61440, 61440, 61440, 61440, 19920"
    );
}

/// A small commit leaves DuckDB next to nothing cached, and the whole limit
/// for what comes next: what earlier statements read is not carried through
/// a run of small commits.
#[test]
fn a_small_commit_trims_what_duckdb_keeps_cached() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
    sink.conn
        .execute_batch(
            "CREATE TABLE wide AS SELECT md5(i::VARCHAR) || md5((i + 1)::VARCHAR) AS s FROM range(1500000) t(i); \
             CHECKPOINT;",
        )
        .unwrap();
    let cached_mib = |sink: &DuckDbSink| -> i64 {
        sink.conn
            .query_row(
                "SELECT sum(memory_usage_bytes)::BIGINT >> 20 FROM duckdb_memory()",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    let _: String = sink
        .conn
        .query_row("SELECT max(s) FROM wide", [], |r| r.get(0))
        .unwrap();
    let lowered = Settings::default().append_memory_limit_mb(APPEND_ROOM_BYTES) as i64;
    assert!(
        cached_mib(&sink) > lowered,
        "the scan filled the cache: {} MiB",
        cached_mib(&sink)
    );
    sink.commit(Commit {
        batches: vec![price_days((0..10).map(|d| (d, 1.0)))],
        checkpoints: Vec::new(),
    })
    .unwrap();
    let trimmed = cached_mib(&sink);
    assert!(trimmed <= CACHED_AFTER_SMALL_COMMIT_MB as i64, "trimmed: {trimmed} MiB");
    assert_eq!(memory_limit(&sink), "64.0 MiB");
}

#[test]
fn the_checkpoint_threshold_follows_the_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    for (memory_limit_mb, expected) in [(256, "128.0 MiB"), (64, "32.0 MiB"), (48, "16.0 MiB"), (24, "6.0 MiB")] {
        let settings = Settings {
            memory_limit_mb,
            ..Settings::default()
        };
        let sink = DuckDbSink::open(&dir.path().join(format!("w{memory_limit_mb}.duckdb")), &settings).unwrap();
        let threshold: String = sink
            .conn
            .query_row("SELECT current_setting('checkpoint_threshold')", [], |r| r.get(0))
            .unwrap();
        assert_eq!(threshold, expected, "memory_limit_mb = {memory_limit_mb}");
    }
}

/// Small held commits land before one would take a table past six
/// row groups, so a landing ends with a nearly full row group, not a
/// few rows in one of their own that a later vacuum would merge.
#[test]
fn small_held_commits_land_before_they_pass_six_row_groups() {
    let dir = tempfile::tempdir().unwrap();
    let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
    for first in (0..400_000i64).step_by(10_000) {
        sink.commit_held(Commit {
            batches: vec![price_days((first..first + 10_000).map(|d| (d, 1.0)))],
            checkpoints: Vec::new(),
        })
        .unwrap();
    }
    sink.commit_held_now().unwrap();
    let counts: Vec<i64> = {
        let mut stmt = sink
            .conn
            .prepare(
                "SELECT sum(count)::BIGINT FROM pragma_storage_info('prices_daily') \
                 WHERE column_name = 'date' AND segment_type = 'DATE' GROUP BY row_group_id ORDER BY row_group_id",
            )
            .unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    assert_eq!(counts.iter().sum::<i64>(), 400_000, "{counts:?}");
    let (last, before) = counts.split_last().unwrap();
    assert!(*last > 0);
    assert!(
        before.iter().all(|c| *c as usize >= ROW_GROUP_ROWS * 3 / 4),
        "a row group under three quarters full before the last: {counts:?}"
    );
}

/// A held transaction with fewer rows than a row group, which DuckDB
/// would write row by row to its WAL, lands with a checkpoint instead:
/// the WAL stays empty, the rows are in the file, and the configured
/// threshold is back for the commits after it.
#[test]
fn a_held_landing_under_a_row_group_checkpoints_instead_of_writing_the_wal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.duckdb");
    let wal_bytes = || std::fs::metadata(dir.path().join("w.duckdb.wal")).map_or(0, |m| m.len());
    let mut sink = DuckDbSink::open(&path, &Settings::default()).unwrap();
    for days in [0..30_000, 30_000..60_000] {
        sink.commit_held(Commit {
            batches: vec![price_days(days.map(|d| (d, 1.0)))],
            checkpoints: Vec::new(),
        })
        .unwrap();
    }
    sink.commit_held_now().unwrap();
    assert!(
        wal_bytes() < 64 * 1024,
        "the landing went through the WAL: {} bytes",
        wal_bytes()
    );
    let setting = |sink: &DuckDbSink| -> String {
        sink.conn
            .query_row("SELECT current_setting('checkpoint_threshold')", [], |r| r.get(0))
            .unwrap()
    };
    let configured = format!("{}.0 MiB", Settings::default().checkpoint_threshold_mb());
    assert_eq!(setting(&sink), configured);
    // A small commit after it goes to the WAL as before.
    sink.commit(Commit {
        batches: vec![price_days((60_000..60_010).map(|d| (d, 1.0)))],
        checkpoints: Vec::new(),
    })
    .unwrap();
    assert!(wal_bytes() > 0, "a small commit checkpointed");
    drop(sink);
    let sink = DuckDbSink::open(&path, &Settings::default()).unwrap();
    let rows: i64 = sink
        .conn
        .query_row("SELECT count(*) FROM prices_daily", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 60_010);
}
