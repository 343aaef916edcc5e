//! What the service sends, whichever legal shape it chose: a full sync
//! through the emulator's other shapes stores what a sync of the contract's
//! shapes stores, and every field of every body served is stored, in a
//! column or in the `raw` of a row. The second writes `docs/wire-fields.md`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use fdsync_core::feeds::catalogue;
use fdsync_core::sync::RunStatus;
use fdsync_emulator::{EXTRA_FIELD, EmulatorConfig, PlanLimits, WireShapes};

use crate::util::{Harness, UNIVERSE, emulator_config, frozen_clock};

/// An emulator with room for every pipeline's full sync in one run.
fn emulator(shapes: WireShapes) -> EmulatorConfig {
    EmulatorConfig {
        shapes,
        ..emulator_config(&frozen_clock(), PlanLimits::scale(1_000_000, None))
    }
}

/// Every pipeline, once, to completion.
async fn full_sync(shapes: WireShapes) -> Harness {
    let mut h = Harness::with_emulator(emulator(shapes), UNIVERSE).await;
    h.restart(|c| c.universe.countries = vec!["US".into(), "JP".into(), "TW".into()])
        .await;
    h.emulator.emulator.record_served();
    let (report, result) = h.syncer.run_once(&h.all_pipelines).await;
    result.unwrap_or_else(|e| panic!("{shapes:?}: {e}: {report:?}"));
    for o in &report.outcomes {
        assert_eq!(o.status, RunStatus::Ok, "{shapes:?}: {o:?}");
    }
    h
}

/// Each data table's rows as text, lineage (`raw` included) left out.
pub(crate) async fn rows_of(h: &Harness, table: &fdsync_core::tables::TableDef) -> BTreeSet<String> {
    h.strings(&rows_sql(table, &[])).await.into_iter().collect()
}

/// The query of a table's rows as text, lineage and the `skipped` (table,
/// column) pairs left out.
pub(crate) fn rows_sql(table: &fdsync_core::tables::TableDef, skipped: &[(&str, &str)]) -> String {
    let columns: Vec<String> = table
        .columns
        .iter()
        .filter(|c| !skipped.contains(&(table.name, c.name)))
        .map(|c| format!("coalesce(CAST(\"{}\" AS VARCHAR), '∅')", c.name))
        .collect();
    format!(
        "SELECT concat_ws(' | ', {}) FROM \"{}\"",
        columns.join(", "),
        table.name
    )
}

#[tokio::test]
async fn the_other_legal_shapes_store_what_the_contract_s_shapes_store() {
    let contract = full_sync(WireShapes::Contract).await;
    let other = full_sync(WireShapes::Other).await;
    assert_eq!(
        other.int("SELECT count(*) FROM _sync_quarantine").await,
        0,
        "{:?}",
        other.strings("SELECT error FROM _sync_quarantine LIMIT 5").await
    );
    let mut differences = Vec::new();
    let mut tables = 0;
    let mut empty = Vec::new();
    for table in catalogue().filter(|t| t.lineage && t.versions_of.is_none()) {
        let expected = rows_of(&contract, table).await;
        let found = rows_of(&other, table).await;
        if expected.is_empty() {
            empty.push(table.name);
        }
        tables += 1;
        if expected != found {
            let missing: Vec<_> = expected.difference(&found).take(3).collect();
            let extra: Vec<_> = found.difference(&expected).take(3).collect();
            differences.push(format!("{}:\n  expected {missing:?}\n  found {extra:?}", table.name));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    assert!(empty.is_empty(), "the full sync stored nothing in {empty:?}");
    // The other shapes were served, and what the contract does not name is kept.
    let kept = other
        .int("SELECT count(*) FROM filings WHERE raw LIKE '%servedShape%' AND raw LIKE '%T00:00:00+00:00%'")
        .await;
    assert!(kept > 0, "no filing kept its served shape in raw");
    println!("wire: {tables} tables identical under the other legal shapes");
    a_field_the_service_starts_sending_is_named_by_status(&other).await;
}

/// Drift: the other shapes' extra field, which no column holds, is counted
/// once per route in `_sync_unknown_fields` and named by `fdsync status`;
/// nothing else is (the contract's own fields all have a home).
async fn a_field_the_service_starts_sending_is_named_by_status(other: &Harness) {
    let fields = other
        .strings("SELECT DISTINCT field FROM _sync_unknown_fields ORDER BY 1")
        .await;
    assert!(
        fields.iter().all(|f| f.rsplit(['.', ']']).next() == Some(EXTRA_FIELD)),
        "{fields:?}"
    );
    let routes = other
        .strings("SELECT DISTINCT route FROM _sync_unknown_fields WHERE field = 'servedShape' ORDER BY 1")
        .await;
    for route in [
        "/api/v1/companies/{id}/prices",
        "/api/v1/news/feed",
        "/api/v1/events/wire",
    ] {
        assert!(routes.iter().any(|r| r == route), "{route} not among {routes:?}");
    }
    assert!(
        routes.iter().all(|r| !r.contains("AAPL") && !r.contains('?')),
        "one row per route, not per request: {routes:?}"
    );
    let status = other.syncer.status(&other.all_pipelines).await.unwrap();
    let mut text = Vec::new();
    fdsync_commands::status::write_text(&mut text, &status).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("new fields:"), "{text}");
    assert!(
        text.contains(&format!("/api/v1/companies/{{id}}/prices {EXTRA_FIELD}")),
        "{text}"
    );
    let json = serde_json::to_value(&status).unwrap();
    assert!(
        json["unknown_fields"].as_array().is_some_and(|a| !a.is_empty()),
        "{json}"
    );
}

/// Envelope fields about the request rather than the data: the wire
/// contract's cursors and counts, kept where at all in the checkpoints, and
/// the range or filter asked for, echoed.
const PAGING: &[&str] = &[
    "hasMore",
    "nextCursor",
    "latestId",
    "serverTime",
    "total",
    "offset",
    "limit",
];
const ECHOES: &[&str] = &["window", "displayFrom", "layers"];

/// Where the warehouse keeps what it was sent.
struct Stored {
    /// Each record's `raw`, re-serialized in one key order, and its table.
    raw: BTreeMap<String, &'static str>,
    /// Every cell of every table as text, and the first `table.column` holding it.
    cells: BTreeMap<String, Vec<String>>,
}

impl Stored {
    async fn read(h: &Harness) -> Stored {
        let mut raw = BTreeMap::new();
        for table in catalogue().filter(|t| t.lineage) {
            for text in h
                .strings(&format!("SELECT raw FROM \"{}\" WHERE raw IS NOT NULL", table.name))
                .await
            {
                let value: Value = serde_json::from_str(&text).unwrap();
                raw.entry(value.to_string()).or_insert(table.name);
            }
        }
        let mut cells: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let columns = h
            .strings(
                "SELECT table_name || '.' || column_name FROM information_schema.columns \
                 WHERE column_name <> 'raw' AND table_name NOT LIKE '\\_stage\\_%' ESCAPE '\\' \
                 ORDER BY table_name, ordinal_position",
            )
            .await;
        for column in columns {
            let (table, name) = column.split_once('.').unwrap();
            let sql =
                format!("SELECT DISTINCT CAST(\"{name}\" AS VARCHAR) FROM \"{table}\" WHERE \"{name}\" IS NOT NULL");
            for cell in h.strings(&sql).await {
                cells.entry(cell).or_default().push(column.clone());
            }
        }
        Stored { raw, cells }
    }

    /// A column named `name` holding a scalar as the service wrote it.
    fn column_named(&self, value: &Value, name: &str) -> Option<String> {
        let mut forms = Vec::new();
        match value {
            Value::String(s) => {
                forms.push(s.clone());
                if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
                    forms.push(t.to_utc().format("%Y-%m-%d %H:%M:%S%.f+00").to_string());
                    forms.push(t.to_utc().date_naive().to_string());
                }
            }
            Value::Number(n) => {
                forms.push(n.to_string());
                if let Some(f) = n.as_f64() {
                    forms.push(format!("{f:?}"));
                }
            }
            Value::Bool(b) => forms.push(b.to_string()),
            _ => {}
        }
        let suffix = format!(".{name}");
        forms
            .iter()
            .filter_map(|f| self.cells.get(f))
            .flatten()
            .find(|c| c.ends_with(&suffix))
            .cloned()
    }
}

/// One field of one route: what was served there and where it was kept.
#[derive(Default)]
struct Field {
    kinds: BTreeSet<&'static str>,
    stored_in: BTreeSet<String>,
    lost: usize,
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::String(s) if s.len() == 10 && chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok() => "date",
        Value::String(s) if chrono::DateTime::parse_from_rfc3339(s).is_ok() => "timestamp",
        Value::String(_) => "string",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::Bool(_) => "boolean",
        Value::Null => "null",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The shapes a reader accepts for what was served as `kind`.
fn accepted(kind: &str) -> &'static str {
    match kind {
        "date" => "`YYYY-MM-DD` or an RFC 3339 timestamp (its date as written)",
        "timestamp" => "RFC 3339 at any offset, or a date (midnight UTC)",
        "integer" => "any JSON number with a whole value: `12`, `12.0`, `1.2e1`",
        "number" => "any JSON number: integer, fraction or exponent form",
        "null" => "null or absent",
        _ => "as served",
    }
}

/// The route a target answered, its identifiers replaced by names.
fn route_of(target: &str) -> String {
    let path = target.split('?').next().unwrap_or(target);
    let segments: Vec<&str> = path.split('/').collect();
    let named: Vec<&str> = segments
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let back = |n: usize| if i >= n { segments[i - n] } else { "" };
            match (back(1), back(2), back(3)) {
                ("companies", _, _) => "{id}",
                ("countries", _, _) => "{iso}",
                ("items", "news", _) => "{id}",
                ("filing-notes", _, _) => "{accession}",
                (_, "filing-notes", _) => "{section}",
                ("events", _, "companies") => "{accession}",
                _ => s,
            }
        })
        .collect();
    named.join("/")
}

/// `lowerCamel` as `lower_camel`, the warehouse's column naming.
fn snake(name: &str) -> String {
    name.chars().fold(String::new(), |mut s, c| {
        if c.is_uppercase() {
            s.push('_');
        }
        s.push(c.to_ascii_lowercase());
        s
    })
}

/// The last name in a path: `events[].items[]` is `items`.
fn name_of(path: &str) -> &str {
    let path = path.trim_end_matches("[]");
    path.rsplit(['.', '[']).next().unwrap_or(path)
}

/// Visits every leaf of `value`. `kept` is the raw table of the nearest
/// ancestor stored whole. A leaf outside it is found in a column named as
/// its field, or, outside any record (the page's envelope), is a paging field.
fn walk(
    value: &Value,
    path: &str,
    kept: Option<&'static str>,
    in_record: bool,
    stored: &Stored,
    fields: &mut BTreeMap<String, Field>,
) {
    let kept = kept.or_else(|| match value {
        Value::Object(_) | Value::Array(_) => stored.raw.get(&value.to_string()).copied(),
        _ => None,
    });
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let sub = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                walk(v, &sub, kept, in_record, stored, fields);
            }
        }
        Value::Array(list)
            if kept.is_none() && !list.is_empty() && list.iter().all(|v| !v.is_object() && !v.is_array()) =>
        {
            // A list of scalars kept as a list column: `[2.02, 9.01]`.
            let items: Vec<String> = list
                .iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .collect();
            let column = stored.column_named(&Value::String(format!("[{}]", items.join(", "))), &snake(name_of(path)));
            for v in list {
                let sub = format!("{path}[]");
                match &column {
                    Some(c) => {
                        let field = fields.entry(sub).or_default();
                        field.kinds.insert(kind(v));
                        field.stored_in.insert(format!("`{c}`"));
                    }
                    None => walk(v, &sub, kept, in_record, stored, fields),
                }
            }
        }
        Value::Array(list) => {
            for v in list {
                walk(
                    v,
                    &format!("{path}[]"),
                    kept,
                    in_record || v.is_object(),
                    stored,
                    fields,
                );
            }
        }
        leaf => {
            let field = fields.entry(path.to_owned()).or_default();
            field.kinds.insert(kind(leaf));
            let name = name_of(path);
            if let Some(table) = kept {
                field.stored_in.insert(format!("`raw` of `{table}`"));
            } else if leaf.is_null() {
                // Null is the absence of a value: nothing to keep.
            } else if !in_record && PAGING.contains(&name) {
                field.stored_in.insert("paging (checkpoints)".into());
            } else if !in_record && ECHOES.contains(&name) {
                field.stored_in.insert("the request's range or filter, echoed".into());
            } else if let Some(column) = stored.column_named(leaf, &snake(name)) {
                field.stored_in.insert(format!("`{column}`"));
            } else {
                field.lost += 1;
            }
        }
    }
}

#[tokio::test]
async fn every_field_of_every_body_served_is_stored_in_a_column_or_in_raw() {
    let h = full_sync(WireShapes::Contract).await;
    let served = h.emulator.emulator.served();
    assert!(served.len() > 50, "{} bodies served", served.len());
    let stored = Stored::read(&h).await;
    let mut routes: BTreeMap<String, BTreeMap<String, Field>> = BTreeMap::new();
    for body in &served {
        let value: Value = serde_json::from_str(&body.body).unwrap();
        walk(
            &value,
            "",
            None,
            false,
            &stored,
            routes.entry(route_of(&body.target)).or_default(),
        );
    }
    let lost: Vec<String> = routes
        .iter()
        .flat_map(|(route, fields)| {
            fields
                .iter()
                .filter(|(_, f)| f.lost > 0)
                .map(move |(path, f)| format!("{route} {path}: {} values not stored", f.lost))
        })
        .collect();
    assert!(lost.is_empty(), "fields served and not stored:\n{}", lost.join("\n"));
    let unknown = h
        .strings("SELECT route || ' ' || field FROM _sync_unknown_fields ORDER BY 1")
        .await;
    assert!(unknown.is_empty(), "contract fields no column holds: {unknown:?}");

    let mut doc = String::from(
        "# Wire fields: what fdsync reads, in which shapes, and where it keeps it\n\n\
         Generated by `tests/wire.rs` from a full sync of every pipeline against the\n\
         emulator (`FDSYNC_BLESS=1 cargo test --release --test main wire::` rewrites it;\n\
         the test fails when it is out of date). Each row is one field of one route:\n\
         the JSON shape the emulator served, the shapes fdsync's reader accepts there\n\
         (`tests/wire.rs` also syncs every pipeline with the emulator serving the other\n\
         legal shape of each, `fdsync emulator --shapes other`, and finds the same rows),\n\
         and where the value is stored. `raw` holds each record as served, unknown\n\
         fields included.\n\n\
         Absent and null are read alike. A record is quarantined only when a field\n\
         its row cannot do without (its key, a bar's close) is missing or unusable;\n\
         any other unusable field is stored as NULL, its value kept in `raw`. The\n\
         reason in `_sync_quarantine.error` names the field, the value and what was\n\
         expected: `filing: field `filedAt`: \"last Tuesday\" is neither a date\n\
         (YYYY-MM-DD) nor an RFC 3339 timestamp`.\n",
    );
    for (route, fields) in &routes {
        doc.push_str(&format!(
            "\n## `{route}`\n\n| field | served as | accepted | stored in |\n|---|---|---|---|\n"
        ));
        for (path, f) in fields {
            let served_as: Vec<&str> = f.kinds.iter().copied().collect();
            let accepts: Vec<&str> = f
                .kinds
                .iter()
                .map(|k| accepted(k))
                .filter(|a| *a != "as served")
                .collect();
            let stored_in: Vec<&str> = f.stored_in.iter().map(String::as_str).collect();
            doc.push_str(&format!(
                "| `{path}` | {} | {} | {} |\n",
                served_as.join(", "),
                if accepts.is_empty() {
                    "as served".into()
                } else {
                    accepts.join("; ")
                },
                if stored_in.is_empty() {
                    "(always null)".into()
                } else {
                    stored_in.join(", ")
                },
            ));
        }
    }
    crate::util::assert_doc_current("docs/wire-fields.md", &doc, "wire::");
    let leaves: usize = routes.values().map(BTreeMap::len).sum();
    println!(
        "wire: {} bodies, {} routes, {leaves} fields, every one stored",
        served.len(),
        routes.len()
    );
}
