//! `fdsync schema`: the warehouse's tables described for the people and tools
//! that read them: Markdown (docs/schema.md), `COMMENT ON` statements (applied
//! to every warehouse fdsync opens) and a dbt `sources.yml` with key tests and
//! freshness from the pipelines' schedules.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use crate::feeds::{FEEDS, Feed, catalogue};
use crate::pipeline::Pipeline;
use crate::tables::{Column, LoadRule, TableDef};

/// What a column holds, by name; a name means the same in every table that
/// has it. `(table, column)` entries in [`TABLE_COLUMN_DOCS`] win.
const COLUMN_DOCS: &[(&str, &str)] = &[
    ("accepted_at", "When the SEC accepted the filing (UTC)."),
    ("accession", "SEC accession number of the filing, NNNNNNNNNN-NN-NNNNNN."),
    ("amount", "Dividend per share as paid, in `currency`."),
    ("amount_split_adj", "Dividend per share adjusted for later splits."),
    ("as_of_date", "The day (UTC) this summary was served."),
    ("at", "When the request was sent (UTC)."),
    (
        "attribution",
        "The attribution text the source requires wherever its items are shown.",
    ),
    (
        "basis",
        "Why the document is linked to the company: named, company_cited or sector.",
    ),
    ("benchmark_role", "The index's role as a benchmark (market, none)."),
    (
        "billing_source",
        "`credits` when prepaid credits paid for the request (X-Billing-Source).",
    ),
    (
        "body",
        "Full text of the item; only for full-text-licensed sources, else NULL (withheld, not missing).",
    ),
    ("cadence", "Payment cadence, such as Quarterly or Monthly."),
    ("category", "Index category, such as broad_market."),
    (
        "change_pct",
        "Change against the prior payment, in percent; NULL for the first payment.",
    ),
    ("checkpoints_removed", "Checkpoints the reset forgot."),
    (
        "cik",
        "SEC CIK, zero-padded to 10 digits, or the platform key for non-SEC issuers.",
    ),
    ("ciks", "Companies the item is tagged with, by CIK or platform key."),
    ("close", "Closing price."),
    ("companies", "Companies covered."),
    (
        "company_key",
        "The company: its canonical `cik` from the company payload (10-digit SEC CIK or a platform key such as TW:2330), whatever spelling the configuration used.",
    ),
    (
        "complete",
        "Whether the whole record has been read (coverage is whole).",
    ),
    ("completeness_pct", "Share of the expected data present, in percent."),
    ("count", "Number counted."),
    ("count_24h", "Items from the source in the last 24 hours."),
    ("country", "ISO 3166-1 alpha-2 country code."),
    (
        "credits_remaining_usd",
        "Prepaid credits left, in USD (X-Credits-Remaining-USD).",
    ),
    ("currency", "ISO 4217 currency code."),
    (
        "cursor",
        "Where the partition's next run resumes: a date, an id or a JSON cursor, as the pipeline's engine writes it.",
    ),
    ("data_type", "The kind of data covered, such as prices or filings."),
    ("date", "The day (UTC) the row is for."),
    ("days_stale", "Days since the index's last price."),
    ("description", "Description as served."),
    (
        "display_policy",
        "How the source's items may be displayed (its licence terms).",
    ),
    ("document_id", "The government document's identifier."),
    ("documents_read", "Documents read so far."),
    ("documents_total", "Documents in the record."),
    (
        "drop_rows",
        "Whether the reset deleted the pipeline's rows too (--drop-rows).",
    ),
    ("error", "What went wrong, in words; NULL when nothing did."),
    ("evidence", "The text that ties the document to the company."),
    ("ex_date", "Ex-dividend date."),
    (
        "expense_ratio",
        "Annual expense ratio of the fund tracking the index, as a fraction.",
    ),
    ("family", "The 8-K event family the filing's items are typed into."),
    ("filed_at", "When the document was filed (UTC)."),
    ("filing_date", "The filing's date as the SEC records it."),
    ("finished_at", "When the run ended (UTC)."),
    (
        "first_seen_at",
        "When fdsync (or the service, for news) first saw this value (UTC).",
    ),
    (
        "flash",
        "Whether the service marks the item as a flash (breaking) item.",
    ),
    ("form", "SEC form type, such as 10-K, 10-Q, 20-F, DEF 14A or S-1."),
    ("frequency", "Observation frequency, such as monthly or quarterly."),
    ("generated_at", "When the service generated the snapshot (UTC)."),
    ("growth_1y", "Dividend-per-share growth over one year, as a fraction."),
    (
        "growth_3y",
        "Dividend-per-share growth over three years, as a fraction.",
    ),
    ("headline", "Headline text; NULL while the service gates it."),
    ("high", "Highest price of the day."),
    ("high_52w", "52-week high."),
    ("history_from", "The earliest period covered."),
    ("id", "The service's item id (also the tape's cursor)."),
    ("importance", "The service's importance score, 0-100."),
    ("inception_date", "The index's inception date."),
    ("index_family", "The index family."),
    (
        "indicated_yield_pct",
        "Indicated yield from the latest payment annualised, in percent.",
    ),
    ("indicators", "Macro indicators the item is tagged with."),
    ("issuer", "Issuer of the fund tracking the index."),
    ("item", "8-K item code such as 2.02; '' for a filing's uncoded item."),
    ("items", "The filing's 8-K item codes."),
    ("key_id", "One-way fingerprint of the API key (never the key)."),
    ("last_price", "Last price."),
    ("last_price_date", "Date of the last price."),
    ("last_seen_at", "When fdsync last saw this value served (UTC)."),
    ("latency_ms", "Milliseconds from sending the request to its answer."),
    ("latest_amount", "The latest dividend per share."),
    ("latest_ex_date", "The latest ex-dividend date."),
    ("layer", "Geo layer code, such as power_plants or data_centers."),
    ("licence", "The open-data licence the figures are published under."),
    (
        "licence_class",
        "The source's licence class, which decides what of an item may be shown.",
    ),
    ("low", "Lowest price of the day."),
    ("low_52w", "52-week low."),
    ("market", "Market or exchange lane."),
    ("mom_pct", "Change against the prior month, in percent."),
    ("month", "The month (first day) the figure is for."),
    ("name", "Name as served."),
    ("news_id", "The news item's id (news_items.id)."),
    ("observed_at", "When fdsync observed the value (UTC)."),
    ("observed_date", "The day (UTC) the snapshot was taken."),
    ("open", "Opening price."),
    ("parent_key", "The parent topic's key; NULL for a top-level topic."),
    (
        "partition",
        "The part of the pipeline the checkpoint covers: a company key, a country, a series, or '' for the whole pipeline.",
    ),
    ("people", "People the item is tagged with."),
    ("period", "The period the observation is for, as served."),
    ("period_end", "The end of the period the filing reports on."),
    ("periods", "Periods covered."),
    ("pilot", "Whether the coverage is a pilot."),
    ("pipeline", "The pipeline (a file under pipelines/)."),
    ("predecessors", "Earlier identifiers of the company."),
    ("price_rows", "Daily prices held for the index."),
    ("published_at", "When the source published it (UTC)."),
    ("quota_limit", "Requests allowed in the quota window (X-Quota-Limit)."),
    (
        "quota_remaining",
        "Requests left in the quota window after the request (X-Quota-Remaining).",
    ),
    ("quota_reset_at", "When the quota window resets (UTC)."),
    ("quota_window", "The quota window: day or month."),
    ("rank", "Strength of the link, 1 the strongest."),
    ("rate_limit", "Requests allowed per minute (RateLimit-Limit)."),
    ("rate_remaining", "Requests left this minute (RateLimit-Remaining)."),
    ("record", "The record exactly as served (JSON text)."),
    ("requests", "Upstream requests the run sent, retries included."),
    ("reset_at", "When the reset ran (UTC)."),
    (
        "retry_after_s",
        "Seconds the service asked to wait (Retry-After), if it did.",
    ),
    ("return_1d", "One-day return, as a fraction (0.01 is 1%)."),
    ("return_1m", "One-month return, as a fraction."),
    ("return_1w", "One-week return, as a fraction."),
    ("return_1y", "One-year return, as a fraction."),
    ("return_5y", "Five-year return, as a fraction."),
    ("return_ytd", "Year-to-date return, as a fraction."),
    ("revenue", "Revenue for the month, in `currency`."),
    ("reviewed_assets", "Reviewed assets in the layer."),
    ("route", "The request path, without the key."),
    ("rows_deleted", "Rows the reset deleted."),
    ("rows_written", "Rows inserted or changed by the run."),
    ("run_id", "The run (`_sync_runs.run_id`)."),
    ("section_key", "The section: business, risk_factors, mdna and the like."),
    ("section_keys", "Keys of the sections the filing has."),
    ("sector_key", "The sector the index tracks; NULL for a broad index."),
    ("seen_at", "When the record was quarantined (UTC)."),
    (
        "series_key",
        "The macro series key (macroSeries[].key of the country payload).",
    ),
    (
        "shortfall",
        "Records the service counted (a wire total, listed sections, item codes) that the run did not store; 0 when it proved itself complete.",
    ),
    ("short_name", "Short name."),
    (
        "snippet",
        "Short excerpt of the item; NULL where the licence withholds it.",
    ),
    ("source_id", "The news source (news_sources.source_id)."),
    ("source_link", "Link to the original source."),
    ("source_name", "Name of the original source."),
    ("started_at", "When the run started (UTC)."),
    (
        "status",
        "Outcome: ok, partial, failed, quota_exhausted or interrupted (runs); the HTTP status, 0 when no answer came (requests).",
    ),
    ("storyline_id", "The storyline the item belongs to."),
    ("symbol", "Ticker symbol."),
    ("t_ms", "The bar's time as served, epoch milliseconds."),
    ("tables", "The tables whose rows the reset deleted."),
    ("text", "The text exactly as extracted by the service."),
    ("tickers", "Tickers the item is tagged with."),
    ("title", "Title."),
    ("topic_key", "The topic's key."),
    ("topics", "Topics the item is tagged with (news_topics.topic_key)."),
    (
        "trailing_yield_pct",
        "Trailing-twelve-month dividends over the price, in percent.",
    ),
    ("ttm", "Trailing-twelve-month dividend total at this payment."),
    ("ttm_total", "Trailing-twelve-month dividend total."),
    ("type", "Kind of dividend; a cash dividend is Cash."),
    ("updated_at", "When it last changed (UTC)."),
    ("url", "Link to the item at its source."),
    ("value", "The observed value."),
    (
        "version",
        "Digest of the company payload's fields: one per distinct payload.",
    ),
    ("vintage", "When the value was published or revised (point-in-time)."),
    ("volatility_30d", "30-day volatility."),
    ("volume", "Shares traded."),
    (
        "yield_at_ex_date_pct",
        "`ttm` over the last split-adjusted close before the ex-date, in percent.",
    ),
    (
        "yield_period_avg_pct",
        "`ttm` over the average close since the previous ex-date, in percent.",
    ),
    ("yoy_pct", "Change against the same month a year earlier, in percent."),
    ("raw", "The record exactly as served (JSON), unknown fields included."),
    ("_fetched_at", "When fdsync fetched the record (UTC)."),
    ("_run_id", "The run that wrote the row (`_sync_runs.run_id`)."),
    ("_route", "The request path the row came from, without the key."),
];

/// Where a name means something particular in one table.
const TABLE_COLUMN_DOCS: &[(&str, &str, &str)] = &[
    (
        "_sync_checkpoints",
        "updated_at",
        "When the checkpoint last moved (UTC).",
    ),
    (
        "news_items",
        "updated_at",
        "When the service last revised the item (UTC).",
    ),
    (
        "news_headline_revisions",
        "updated_at",
        "When the service revised the headline to this (UTC).",
    ),
    (
        "news_items",
        "first_seen_at",
        "When the service first saw the item (UTC).",
    ),
    (
        "_sync_quarantine",
        "error",
        "Why it could not be loaded: the field, its value and what was expected.",
    ),
    (
        "_sync_quarantine",
        "route",
        "The request path the record came from, without the key.",
    ),
    (
        "coverage_snapshots",
        "companies",
        "Companies covered in the market for this data type.",
    ),
];

/// Descriptions of the tables without a doc comment on their declaration.
const TABLE_DOCS: &[(&str, &str)] = &[
    (
        "companies",
        "One row per company of the universe: the company payload that fixes its key.",
    ),
    (
        "prices_daily",
        "Daily OHLCV bars per company; a restated bar replaces the stored one.",
    ),
    ("dividends", "Dividend events per company, one per ex-date and type."),
    (
        "dividend_summaries",
        "The dividend summary per company, as served each day.",
    ),
    (
        "index_snapshots",
        "Benchmark indices and sector ETFs, one row per index and last price date.",
    ),
    ("macro_series", "Macro series per country: name, frequency and source."),
    (
        "macro_observations",
        "Every macro value ever served, with its vintage: point-in-time history; nothing is deleted or overwritten. `macro_latest` and `macro_as_of(ts)` read it.",
    ),
    ("events", "8-K events: one per filing, with its family and item codes."),
    (
        "event_item_texts",
        "The text of each 8-K item, as extracted by the service.",
    ),
    (
        "news_items",
        "The attributed news tape, one row per item at its newest version.",
    ),
    (
        "news_headline_revisions",
        "Every headline version of a news item ever seen.",
    ),
    (
        "news_sources",
        "News sources with the attribution that must travel with their items.",
    ),
    ("news_topics", "The news topic tree."),
    (
        "regulation_actions",
        "Government documents linked to a company, with the evidence for each link; a company's set is replaced when it changes.",
    ),
    (
        "regulation_coverage",
        "How much of a company's regulation record has been read, appended when it changes.",
    ),
    (
        "monthly_revenue",
        "Regulator-mandated monthly revenue of Taiwan issuers, as filed.",
    ),
    (
        "filings",
        "Parsed filings (10-K, 10-Q, 20-F, DEF 14A, S-1 and exchange-lane reports).",
    ),
    (
        "filing_sections",
        "Narrative sections of filings (Business, Risk Factors, MD&A and others).",
    ),
    ("geo_layers", "Geo layers and their reviewed assets, per day."),
    ("geo_country_counts", "Reviewed assets per layer and country, per day."),
    (
        "coverage_snapshots",
        "The service's coverage statistics per market and data type, per day.",
    ),
    ("_sync_runs", "fdsync's run log: one row per pipeline run."),
    (
        "_sync_checkpoints",
        "Where each pipeline (and partition) resumes; committed with the rows it covers.",
    ),
    (
        "_sync_quarantine",
        "Records that could not be loaded, so nothing is dropped silently.",
    ),
    (
        "_sync_requests",
        "One row per upstream request, with the limits its answer reported.",
    ),
    (
        "_sync_replaced",
        "Partitions replaced as a whole (replace-per-company tables), for the lake's publish.",
    ),
];

/// What `column` of `table` holds.
pub fn column_doc(table: &TableDef, column: &str) -> String {
    TABLE_COLUMN_DOCS
        .iter()
        .find(|(t, c, _)| *t == table.name && *c == column)
        .map(|(_, _, d)| *d)
        .or_else(|| COLUMN_DOCS.iter().find(|(c, _)| *c == column).map(|(_, d)| *d))
        .map_or_else(|| format!("`{column}`: not described yet."), str::to_owned)
}

/// The feeds that write `table`.
pub fn writers(table: &TableDef) -> Vec<&'static Feed> {
    FEEDS
        .iter()
        .copied()
        .filter(|f| f.tables.iter().any(|t| t.name == table.name))
        .collect()
}

/// What `table` holds: its declaration's doc comment, else the catalogue's.
pub fn table_doc(table: &TableDef) -> String {
    let doc = table.doc.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    let doc = doc.trim();
    if !doc.is_empty() {
        return doc.to_owned();
    }
    TABLE_DOCS
        .iter()
        .find(|(t, _)| *t == table.name)
        .map_or_else(|| format!("The `{}` table.", table.name), |(_, d)| (*d).to_owned())
}

/// How rows land, in a sentence.
pub fn load_doc(table: &TableDef) -> &'static str {
    match table.load {
        LoadRule::Upsert => "upsert: a new key is inserted; a stored row is replaced only when its content changed",
        LoadRule::InsertOnce => "insert once: a key already stored is never touched",
        LoadRule::Append if table.key.is_empty() => "append: every row is kept",
        LoadRule::Append => "append: every version is kept, one row per key",
        LoadRule::History => {
            "history: a value seen again only moves last_seen_at; anything new is a new row; nothing is deleted"
        }
        LoadRule::Replace => "replace per partition: the first key column's rows are replaced by what is served now",
        LoadRule::AppendOnChange => "append on change: a row is added only when it differs from the partition's newest",
    }
}

fn all_columns(table: &TableDef) -> Vec<&'static Column> {
    table.all_columns().collect()
}

/// The catalogue as Markdown: docs/schema.md.
pub fn markdown() -> String {
    let mut out = String::new();
    out.push_str(
        "# Warehouse schema\n\n\
         Generated by `fdsync schema` from the table declarations (`tests/lifecycle.rs`\n\
         fails when this file is not what it prints). The same descriptions are\n\
         stored in the warehouse as `COMMENT ON` (`SELECT * FROM duckdb_columns()`), and\n\
         `fdsync schema --format dbt` writes them as a dbt `sources.yml`.\n\n\
         Every entity table ends with the lineage columns `raw`, `_fetched_at`,\n\
         `_run_id` and `_route`; the `_sync_*` tables are fdsync's own bookkeeping.\n\
         The key is what no two rows share; the load rule is how a run writes rows.\n\n",
    );
    out.push_str("| table | key | load rule | written by |\n|---|---|---|---|\n");
    for t in catalogue() {
        let key = if t.key.is_empty() {
            "(none)".to_owned()
        } else {
            t.key.join(", ")
        };
        let by: Vec<String> = writers(t).iter().map(|f| format!("`{}`", f.name)).collect();
        let by = if by.is_empty() {
            "fdsync".to_owned()
        } else {
            by.join(", ")
        };
        let rule = load_doc(t).split(':').next().unwrap_or_default();
        let _ = writeln!(out, "| [`{0}`](#{0}) | {key} | {rule} | {by} |", t.name);
    }
    for t in catalogue() {
        let _ = write!(out, "\n## {}\n\n{}\n\n", t.name, table_doc(t));
        if !t.key.is_empty() {
            let _ = writeln!(out, "One row per ({}). Load rule: {}.", t.key.join(", "), load_doc(t));
        } else {
            let _ = writeln!(out, "Load rule: {}.", load_doc(t));
        }
        for f in writers(t) {
            let _ = writeln!(out, "Written by the `{}` pipeline from `GET {}`.", f.name, f.route);
        }
        out.push_str("\n| column | type | description |\n|---|---|---|\n");
        for c in all_columns(t) {
            let key = if t.key.contains(&c.name) { " (key)" } else { "" };
            let _ = writeln!(
                out,
                "| `{}`{key} | {} | {} |",
                c.name,
                c.ty.sql(),
                column_doc(t, c.name).replace('|', "\\|")
            );
        }
    }
    out
}

/// Every table's and column's description, as the warehouse stores them
/// (`COMMENT ON`): `(table, column or None for the table, text)`.
pub fn comments() -> Vec<(&'static str, Option<&'static str>, String)> {
    let mut out = Vec::new();
    for t in catalogue() {
        out.push((t.name, None, table_doc(t)));
        for c in all_columns(t) {
            out.push((t.name, Some(c.name), column_doc(t, c.name)));
        }
    }
    out
}

/// One `COMMENT ON` statement of [`comments`].
pub fn comment_statement(table: &str, column: Option<&str>, text: &str) -> String {
    let text = text.replace('\'', "''");
    match column {
        Some(c) => format!("COMMENT ON COLUMN \"{table}\".\"{c}\" IS '{text}';"),
        None => format!("COMMENT ON TABLE \"{table}\" IS '{text}';"),
    }
}

/// Every statement of [`comments`]: what every warehouse fdsync opens
/// carries, for another DuckDB (or a copy) to apply.
pub fn comment_sql() -> String {
    comments()
        .into_iter()
        .map(|(table, column, text)| comment_statement(table, column, &text) + "\n")
        .collect()
}

/// A YAML scalar: JSON's string syntax is YAML's double-quoted style.
fn yaml(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

/// How often `pipeline` runs, in hours, from its schedule's next firings.
fn period_hours(pipeline: &Pipeline, now: DateTime<Utc>) -> Option<f64> {
    let mut at = pipeline.schedule.next_after(&now)?;
    let mut longest = 0i64;
    // The longest gap of a week of firings: a weekday schedule's weekend counts.
    for _ in 0..64 {
        let next = pipeline.schedule.next_after(&at)?;
        longest = longest.max((next - at).num_seconds());
        if next - now > chrono::Duration::days(8) {
            break;
        }
        at = next;
    }
    Some(longest as f64 / 3600.0)
}

/// A dbt `sources.yml` for the warehouse: every table and column with its
/// description; `not_null` on each key column and `unique` on the key;
/// freshness from the schedules of `pipelines` that write each table,
/// measured by their last `ok` run in `_sync_runs`.
pub fn dbt_sources(pipelines: &[Pipeline], now: DateTime<Utc>) -> String {
    let mut out = String::new();
    out.push_str(
        "# Generated by `fdsync schema --format dbt`: the fdsync warehouse as a dbt source.\n\
         # Freshness is the age of each table's pipelines' last ok run (_sync_runs):\n\
         # warn after two schedule periods, error after four (at least 1 and 2 hours).\n\
         version: 2\n\nsources:\n  - name: fdsync\n    schema: main\n    description: ",
    );
    out.push_str(&yaml(
        "Financial disclosure data mirrored by fdsync: one table per upstream resource, plus fdsync's _sync_* bookkeeping.",
    ));
    out.push_str("\n    tables:\n");
    for t in catalogue() {
        let _ = writeln!(out, "      - name: {}", t.name);
        let _ = writeln!(
            out,
            "        description: {}",
            yaml(&format!("{} {}.", table_doc(t), load_doc(t)))
        );
        let feeds: Vec<&str> = writers(t).iter().map(|f| f.name).collect();
        let mine: Vec<&Pipeline> = pipelines.iter().filter(|p| feeds.contains(&p.feed.name)).collect();
        let period = mine.iter().filter_map(|p| period_hours(p, now)).reduce(f64::max);
        if let Some(period) = period {
            let names: Vec<String> = mine
                .iter()
                .map(|p| format!("'{}'", p.name.replace('\'', "''")))
                .collect();
            let warn = (period * 2.0).ceil().max(1.0) as u64;
            let error = (period * 4.0).ceil().max(2.0) as u64;
            let _ = writeln!(out, "        config:");
            let _ = writeln!(out, "          freshness:");
            let _ = writeln!(out, "            warn_after: {{count: {warn}, period: hour}}");
            let _ = writeln!(out, "            error_after: {{count: {error}, period: hour}}");
            let _ = writeln!(
                out,
                "          loaded_at_query: {}",
                yaml(&format!(
                    "select max(finished_at) from main._sync_runs where status = 'ok' and pipeline in ({})",
                    names.join(", ")
                ))
            );
        }
        if t.key.len() > 1 {
            let cols: Vec<String> = t.key.iter().map(|k| format!("\"{k}\"")).collect();
            let _ = writeln!(out, "        data_tests:");
            let _ = writeln!(out, "          - unique:");
            let _ = writeln!(
                out,
                "              column_name: {}",
                yaml(&format!("row({})", cols.join(", ")))
            );
        }
        let _ = writeln!(out, "        columns:");
        for c in all_columns(t) {
            let _ = writeln!(out, "          - name: {}", c.name);
            let _ = writeln!(out, "            quote: true");
            let _ = writeln!(out, "            data_type: {}", c.ty.sql());
            let _ = writeln!(out, "            description: {}", yaml(&column_doc(t, c.name)));
            if t.key.contains(&c.name) {
                let unique = if t.key.len() == 1 { ", unique" } else { "" };
                let _ = writeln!(out, "            data_tests: [not_null{unique}]");
            }
        }
    }
    out
}
