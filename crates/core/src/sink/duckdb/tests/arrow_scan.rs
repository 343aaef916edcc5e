//! New rows inserted through the Arrow table function (`arrow_scan`).

use super::*;

/// Rows inserted through the Arrow scan arrive as they were: each column type
/// a batch has, nulls and empty lists, a JSON column, more rows than one of
/// DuckDB's vectors, and a batch that is a slice of another.
#[test]
fn rows_inserted_through_the_arrow_scan_arrive_as_they_were() {
    use std::sync::Arc;

    use arrow::array::{
        ArrayRef, BooleanArray, Date32Array, Float64Array, Int64Array, ListBuilder, StringArray, StringBuilder,
        TimestampMicrosecondArray,
    };
    use arrow::record_batch::RecordBatch;
    let dir = tempfile::tempdir().unwrap();
    let sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
    sink.conn
        .execute_batch(
            "CREATE TABLE t (s VARCHAR, i BIGINT, f DOUBLE, b BOOLEAN, d DATE, ts TIMESTAMPTZ, j JSON, l VARCHAR[])",
        )
        .unwrap();
    let n = 5_000_i64;
    let text = |i: i64| (i % 7 != 3).then(|| format!("text {i} {}", "long ".repeat((i % 5) as usize)));
    let mut lists = ListBuilder::new(StringBuilder::new());
    for i in 0..n {
        match i % 4 {
            0 => lists.append_null(),
            1 => lists.append(true),
            _ => {
                lists.values().append_value(format!("a{i}"));
                lists.values().append_null();
                lists.append(true);
            }
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new((0..n).map(text).collect::<StringArray>()),
        Arc::new(
            (0..n)
                .map(|i| (i % 11 != 0).then_some(i * 1_000_003))
                .collect::<Int64Array>(),
        ),
        Arc::new(
            (0..n)
                .map(|i| (i % 13 != 0).then_some(i as f64 / 8.0))
                .collect::<Float64Array>(),
        ),
        Arc::new(
            (0..n)
                .map(|i| (i % 17 != 0).then_some(i % 2 == 0))
                .collect::<BooleanArray>(),
        ),
        Arc::new(
            (0..n)
                .map(|i| (i % 19 != 0).then_some(i as i32))
                .collect::<Date32Array>(),
        ),
        Arc::new(
            (0..n)
                .map(|i| (i % 23 != 0).then_some(i * 1_000_001))
                .collect::<TimestampMicrosecondArray>()
                .with_timezone("UTC"),
        ),
        Arc::new(
            (0..n)
                .map(|i| (i % 29 != 0).then(|| format!("{{\"n\":{i}}}")))
                .collect::<StringArray>(),
        ),
        Arc::new(lists.finish()),
    ];
    let names = ["s", "i", "f", "b", "d", "ts", "j", "l"];
    let fields: Vec<_> = names
        .iter()
        .zip(&columns)
        .map(|(name, column)| arrow::datatypes::Field::new(*name, column.data_type().clone(), true))
        .collect();
    let batch = RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), columns).unwrap();
    let json = vec![false, false, false, false, false, false, true, false];
    let written = sink.insert_rows("t", &names, batch.slice(100, 4_900), json).unwrap();
    assert_eq!(written, 4_900);
    let stored: Vec<String> = sink
        .conn
        .prepare(
            "SELECT concat_ws('|', coalesce(s, '-'), coalesce(i::VARCHAR, '-'), coalesce((f * 8)::BIGINT::VARCHAR, '-'), \
             coalesce(b::VARCHAR, '-'), coalesce(d::VARCHAR, '-'), coalesce(epoch_us(ts)::VARCHAR, '-'), \
             coalesce(j->>'n', '-'), \
             CASE WHEN l IS NULL THEN '-' ELSE concat_ws(':', len(l), coalesce(l[1], 'null'), coalesce(l[2], 'null')) END) \
             FROM t ORDER BY rowid",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let expected: Vec<String> = (100..n)
        .map(|i| {
            let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
            let date = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap() + chrono::Days::new(i as u64);
            let list = match i % 4 {
                0 => "-".to_owned(),
                1 => "0:null:null".to_owned(),
                _ => format!("2:a{i}:null"),
            };
            [
                or_dash(text(i)),
                or_dash((i % 11 != 0).then(|| (i * 1_000_003).to_string())),
                or_dash((i % 13 != 0).then(|| i.to_string())),
                or_dash((i % 17 != 0).then(|| (i % 2 == 0).to_string())),
                or_dash((i % 19 != 0).then(|| date.to_string())),
                or_dash((i % 23 != 0).then(|| (i * 1_000_001).to_string())),
                or_dash((i % 29 != 0).then(|| i.to_string())),
                list,
            ]
            .join("|")
        })
        .collect();
    assert_eq!(stored.len(), expected.len());
    for (stored, expected) in stored.iter().zip(&expected) {
        assert_eq!(stored, expected);
    }
    let json_type: String = sink
        .conn
        .query_row("SELECT typeof(j) FROM t LIMIT 1", [], |r| r.get(0))
        .unwrap();
    assert_eq!(json_type, "JSON");
}

/// A statement naming a batch that is not lent fails; it reads nothing else.
#[test]
fn the_arrow_scan_refuses_a_batch_not_lent() {
    let dir = tempfile::tempdir().unwrap();
    let sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
    let e = sink
        .conn
        .query_row("SELECT count(*) FROM _fdsync_arrow_rows(123456789)", [], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap_err();
    assert!(e.to_string().contains("no Arrow batch is lent"), "{e}");
}
