//! The warehouse schema in one place. `../shared/spec/warehouse-contract.md` is the
//! public interface; every sink derives its DDL, staging and merge from [`TABLES`].

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

/// A column's type, named for what the warehouse stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColType {
    Text,
    Int,
    Float,
    Bool,
    Date,
    Timestamp,
    /// JSON text; staged as VARCHAR, stored as DuckDB's JSON type.
    Json,
    TextList,
}

impl ColType {
    pub fn sql(self) -> &'static str {
        match self {
            ColType::Text => "VARCHAR",
            ColType::Int => "BIGINT",
            ColType::Float => "DOUBLE",
            ColType::Bool => "BOOLEAN",
            ColType::Date => "DATE",
            ColType::Timestamp => "TIMESTAMPTZ",
            ColType::Json => "JSON",
            ColType::TextList => "VARCHAR[]",
        }
    }

    pub fn arrow(self) -> DataType {
        match self {
            ColType::Text | ColType::Json => DataType::Utf8,
            ColType::Int => DataType::Int64,
            ColType::Float => DataType::Float64,
            ColType::Bool => DataType::Boolean,
            ColType::Date => DataType::Date32,
            ColType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            ColType::TextList => DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
        }
    }
}

/// How a batch of rows lands in its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadRule {
    /// Insert new keys; replace a stored row only when its content changed.
    Upsert,
    /// Insert new keys; a key already stored is never touched.
    InsertOnce,
    /// Keep every row (history and logs). With a key, a row whose key is
    /// already stored is the same version seen again and is skipped.
    Append,
    /// Point-in-time history keyed by its whole content: a row seen before only
    /// has its `last_seen_at` moved; anything new is a new row; nothing is
    /// deleted or overwritten.
    History,
    /// A partition (the first key column, such as a company) is replaced as a
    /// whole by what the service serves now: rows no longer served go, new ones
    /// come, unchanged ones are not rewritten. Partitions are named by the batch,
    /// so a partition that became empty is emptied too.
    Replace,
    /// A change log: a row is appended only when its content differs from the
    /// newest stored row of its partition (every key column but the last, which
    /// orders the log).
    AppendOnChange,
}

impl LoadRule {
    pub fn parse(s: &str) -> Option<LoadRule> {
        match s {
            "upsert" => Some(LoadRule::Upsert),
            "insert_once" => Some(LoadRule::InsertOnce),
            "append" => Some(LoadRule::Append),
            "history" => Some(LoadRule::History),
            "replace" => Some(LoadRule::Replace),
            "append_on_change" => Some(LoadRule::AppendOnChange),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub struct Column {
    pub name: &'static str,
    pub ty: ColType,
}

#[derive(Debug)]
pub struct TableDef {
    pub name: &'static str,
    pub columns: &'static [Column],
    /// Columns that identify a row; empty for append-only logs.
    pub key: &'static [&'static str],
    pub load: LoadRule,
    /// Whether the entity columns `raw`, `_fetched_at`, `_run_id`, `_route` follow.
    pub lineage: bool,
    /// Upsert: columns where a new row's NULL keeps the stored value. The same
    /// record reaches these tables through routes that carry different fields
    /// (a licence withholds a body, an index entry lacks the filer's name), and
    /// an absent field is not news that the value went away.
    pub keep_stored: &'static [&'static str],
    /// Upsert: a column that orders versions of a row; an older version arriving
    /// late never replaces a newer one.
    pub newer_by: Option<&'static str>,
    /// How the lake splits the table into hive partitions; `None` for tables
    /// small enough to be one partition.
    pub lake_partition: Option<LakePartition>,
}

/// A lake partition: the year (`year`, an integer) or month (`month`, text
/// `YYYY-MM`, UTC) of one of the table's own date columns, so a row always
/// lands in the same partition whenever and however often it is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LakePartition {
    Year(&'static str),
    Month(&'static str),
}

impl LakePartition {
    /// The partition column's name in the lake.
    pub fn column(self) -> &'static str {
        match self {
            LakePartition::Year(_) => "year",
            LakePartition::Month(_) => "month",
        }
    }

    /// The date or timestamp column it is computed from.
    pub fn source(self) -> &'static str {
        match self {
            LakePartition::Year(c) | LakePartition::Month(c) => c,
        }
    }
}

/// The columns every entity table carries after its own.
pub const LINEAGE: &[Column] = &[
    col("raw", ColType::Json),
    col("_fetched_at", ColType::Timestamp),
    col("_run_id", ColType::Text),
    col("_route", ColType::Text),
];

const fn col(name: &'static str, ty: ColType) -> Column {
    Column { name, ty }
}

impl TableDef {
    /// The `_sync_*` tables: fdsync's own record of runs, checkpoints,
    /// requests, quota and quarantine, not data from the service.
    pub fn is_bookkeeping(&self) -> bool {
        self.name.starts_with("_sync_")
    }

    /// Every column in storage order, lineage included.
    pub fn all_columns(&self) -> impl Iterator<Item = &'static Column> + '_ {
        let lineage: &'static [Column] = if self.lineage { LINEAGE } else { &[] };
        self.columns.iter().chain(lineage.iter())
    }

    pub fn arrow_schema(&self) -> SchemaRef {
        let fields: Vec<Field> = self
            .all_columns()
            .map(|c| Field::new(c.name, c.ty.arrow(), !self.key.contains(&c.name)))
            .collect();
        Arc::new(Schema::new(fields))
    }
}

/// Looks a table up by name.
pub fn table(name: &str) -> Option<&'static TableDef> {
    TABLES.iter().find(|t| t.name == name)
}

use ColType::*;

pub const COMPANIES: TableDef = TableDef {
    name: "companies",
    columns: &[
        col("company_key", Text),
        col("cik", Text),
        col("symbol", Text),
        col("name", Text),
        col("market", Text),
        col("currency", Text),
        col("predecessors", TextList),
    ],
    key: &["company_key"],
    load: LoadRule::Upsert,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: None,
};

pub const PRICES_DAILY: TableDef = TableDef {
    name: "prices_daily",
    columns: &[
        col("company_key", Text),
        col("date", Date),
        col("symbol", Text),
        col("t_ms", Int),
        col("open", Float),
        col("high", Float),
        col("low", Float),
        col("close", Float),
        col("volume", Int),
    ],
    key: &["company_key", "date"],
    load: LoadRule::Upsert,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: Some(LakePartition::Year("date")),
};

pub const DIVIDENDS: TableDef = TableDef {
    name: "dividends",
    columns: &[
        col("company_key", Text),
        col("ex_date", Date),
        col("type", Text),
        col("cik", Text),
        col("symbol", Text),
        col("currency", Text),
        col("amount", Float),
        col("amount_split_adj", Float),
        col("ttm", Float),
        col("change_pct", Float),
        col("yield_at_ex_date_pct", Float),
        col("yield_period_avg_pct", Float),
    ],
    key: &["company_key", "ex_date", "type"],
    load: LoadRule::Upsert,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: Some(LakePartition::Year("ex_date")),
};

pub const DIVIDEND_SUMMARIES: TableDef = TableDef {
    name: "dividend_summaries",
    columns: &[
        col("company_key", Text),
        col("as_of_date", Date),
        col("cik", Text),
        col("symbol", Text),
        col("currency", Text),
        col("count", Int),
        col("latest_amount", Float),
        col("latest_ex_date", Date),
        col("ttm_total", Float),
        col("last_price", Float),
        col("trailing_yield_pct", Float),
        col("indicated_yield_pct", Float),
        col("growth_1y", Float),
        col("growth_3y", Float),
        col("cadence", Text),
    ],
    key: &["company_key", "as_of_date"],
    load: LoadRule::Upsert,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: Some(LakePartition::Year("as_of_date")),
};

pub const MACRO_SERIES: TableDef = TableDef {
    name: "macro_series",
    columns: &[
        col("country", Text),
        col("series_key", Text),
        col("name", Text),
        col("frequency", Text),
        col("description", Text),
        col("source_name", Text),
        col("source_link", Text),
    ],
    key: &["country", "series_key"],
    load: LoadRule::Upsert,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: None,
};

/// Every (period, vintage, value) ever served. `raw`, `_fetched_at`, `_run_id`
/// and `_route` are those of the first sighting.
pub const MACRO_OBSERVATIONS: TableDef = TableDef {
    name: "macro_observations",
    columns: &[
        col("country", Text),
        col("series_key", Text),
        col("period", Date),
        col("vintage", Date),
        col("value", Float),
        col("first_seen_at", Timestamp),
        col("last_seen_at", Timestamp),
    ],
    key: &["country", "series_key", "period", "vintage", "value"],
    load: LoadRule::History,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: Some(LakePartition::Year("vintage")),
};

pub const INDEX_SNAPSHOTS: TableDef = TableDef {
    name: "index_snapshots",
    columns: &[
        col("symbol", Text),
        col("last_price_date", Date),
        col("name", Text),
        col("short_name", Text),
        col("category", Text),
        col("benchmark_role", Text),
        col("sector_key", Text),
        col("index_family", Text),
        col("issuer", Text),
        col("expense_ratio", Float),
        col("inception_date", Date),
        col("last_price", Float),
        col("return_1d", Float),
        col("return_1w", Float),
        col("return_1m", Float),
        col("return_ytd", Float),
        col("return_1y", Float),
        col("return_5y", Float),
        col("low_52w", Float),
        col("high_52w", Float),
        col("volatility_30d", Float),
        col("price_rows", Int),
        col("days_stale", Int),
    ],
    key: &["symbol", "last_price_date"],
    load: LoadRule::Upsert,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: None,
};

pub const COVERAGE_SNAPSHOTS: TableDef = TableDef {
    name: "coverage_snapshots",
    columns: &[
        col("observed_date", Date),
        col("market", Text),
        col("data_type", Text),
        col("companies", Int),
        col("history_from", Date),
        col("completeness_pct", Float),
        col("periods", Int),
    ],
    key: &["observed_date", "market", "data_type"],
    load: LoadRule::Upsert,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: Some(LakePartition::Year("observed_date")),
};

/// 8-K filings, from the per-company index, the market-wide wire and latest.
pub const EVENTS: TableDef = TableDef {
    name: "events",
    columns: &[
        col("accession", Text),
        col("company_key", Text),
        col("cik", Text),
        col("symbol", Text),
        col("name", Text),
        col("family", Text),
        col("items", TextList),
        col("filing_date", Date),
        col("accepted_at", Timestamp),
        col("headline", Text),
    ],
    key: &["accession"],
    load: LoadRule::Upsert,
    lineage: true,
    keep_stored: &["symbol", "name", "headline"],
    newer_by: None,
    lake_partition: Some(LakePartition::Year("filing_date")),
};

/// Verbatim 8-K item texts; `item` is '' for a filing's uncoded item.
pub const EVENT_ITEM_TEXTS: TableDef = TableDef {
    name: "event_item_texts",
    columns: &[
        col("accession", Text),
        col("item", Text),
        col("company_key", Text),
        col("text", Text),
    ],
    key: &["accession", "item"],
    load: LoadRule::InsertOnce,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: None,
};

/// The news tape, each item in its newest version. Fields a licence withholds
/// are NULL, and an absent field never erases one stored from another route.
pub const NEWS_ITEMS: TableDef = TableDef {
    name: "news_items",
    columns: &[
        col("id", Text),
        col("published_at", Timestamp),
        col("first_seen_at", Timestamp),
        col("updated_at", Timestamp),
        col("headline", Text),
        col("snippet", Text),
        col("body", Text),
        col("url", Text),
        col("source_id", Text),
        col("source_name", Text),
        col("licence_class", Text),
        col("attribution", Text),
        col("display_policy", Text),
        col("tickers", TextList),
        col("ciks", TextList),
        col("people", TextList),
        col("indicators", TextList),
        col("topics", TextList),
        col("storyline_id", Text),
        col("importance", Int),
        col("flash", Bool),
        col("form", Text),
    ],
    key: &["id"],
    load: LoadRule::Upsert,
    lineage: true,
    keep_stored: &["snippet", "body", "url", "form"],
    newer_by: Some("updated_at"),
    lake_partition: Some(LakePartition::Month("published_at")),
};

/// Every headline version ever seen, by the item's `updatedAt`.
pub const NEWS_HEADLINE_REVISIONS: TableDef = TableDef {
    name: "news_headline_revisions",
    columns: &[col("id", Text), col("updated_at", Timestamp), col("headline", Text)],
    key: &["id", "updated_at"],
    load: LoadRule::Append,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: Some(LakePartition::Month("updated_at")),
};

/// Sources from the sources route (with 24-hour counts) and from the source
/// object every item carries (with its display policy).
pub const NEWS_SOURCES: TableDef = TableDef {
    name: "news_sources",
    columns: &[
        col("source_id", Text),
        col("name", Text),
        col("licence_class", Text),
        col("attribution", Text),
        col("display_policy", Text),
        col("count_24h", Int),
    ],
    key: &["source_id"],
    load: LoadRule::Upsert,
    lineage: true,
    keep_stored: &["name", "licence_class", "attribution", "display_policy", "count_24h"],
    newer_by: None,
    lake_partition: None,
};

pub const NEWS_TOPICS: TableDef = TableDef {
    name: "news_topics",
    columns: &[col("topic_key", Text), col("name", Text), col("parent_key", Text)],
    key: &["topic_key"],
    load: LoadRule::Upsert,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: None,
};

/// Which news items a company's own feed served: items tagged to the company
/// or to a predecessor in its corporate lineage (beyond the contract).
pub const NEWS_COMPANY_ITEMS: TableDef = TableDef {
    name: "news_company_items",
    columns: &[
        col("company_key", Text),
        col("news_id", Text),
        col("first_seen_at", Timestamp),
    ],
    key: &["company_key", "news_id"],
    load: LoadRule::InsertOnce,
    lineage: false,
    keep_stored: &[],
    newer_by: None,
    lake_partition: None,
};

/// One row per company, document and link basis; `rank` 1 is the strongest basis.
pub const REGULATION_ACTIONS: TableDef = TableDef {
    name: "regulation_actions",
    columns: &[
        col("company_key", Text),
        col("document_id", Text),
        col("basis", Text),
        col("title", Text),
        col("published_at", Date),
        col("rank", Int),
        col("evidence", Text),
        col("accession", Text),
    ],
    key: &["company_key", "document_id", "basis"],
    load: LoadRule::Replace,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: None,
};

pub const REGULATION_COVERAGE: TableDef = TableDef {
    name: "regulation_coverage",
    columns: &[
        col("company_key", Text),
        col("observed_at", Timestamp),
        col("documents_read", Int),
        col("documents_total", Int),
        col("complete", Bool),
        col("pilot", Bool),
    ],
    key: &["company_key", "observed_at"],
    load: LoadRule::AppendOnChange,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: None,
};

/// Taiwan monthly revenue; `month` is the first day of the month.
pub const MONTHLY_REVENUE: TableDef = TableDef {
    name: "monthly_revenue",
    columns: &[
        col("company_key", Text),
        col("month", Date),
        col("symbol", Text),
        col("revenue", Float),
        col("yoy_pct", Float),
        col("mom_pct", Float),
        col("filed_at", Date),
        col("currency", Text),
        col("licence", Text),
    ],
    key: &["company_key", "month"],
    load: LoadRule::Upsert,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: Some(LakePartition::Year("month")),
};

pub const FILINGS: TableDef = TableDef {
    name: "filings",
    columns: &[
        col("accession", Text),
        col("company_key", Text),
        col("form", Text),
        col("filed_at", Date),
        col("period_end", Date),
        col("section_keys", TextList),
    ],
    key: &["accession"],
    load: LoadRule::InsertOnce,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: Some(LakePartition::Year("filed_at")),
};

pub const FILING_SECTIONS: TableDef = TableDef {
    name: "filing_sections",
    columns: &[
        col("accession", Text),
        col("section_key", Text),
        col("company_key", Text),
        col("title", Text),
        col("text", Text),
    ],
    key: &["accession", "section_key"],
    load: LoadRule::InsertOnce,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: None,
};

pub const GEO_COUNTRY_COUNTS: TableDef = TableDef {
    name: "geo_country_counts",
    columns: &[
        col("observed_date", Date),
        col("layer", Text),
        col("country", Text),
        col("count", Int),
    ],
    key: &["observed_date", "layer", "country"],
    load: LoadRule::Upsert,
    lineage: true,
    keep_stored: &[],
    newer_by: None,
    lake_partition: Some(LakePartition::Year("observed_date")),
};

pub const SYNC_RUNS: TableDef = TableDef {
    name: "_sync_runs",
    columns: &[
        col("run_id", Text),
        col("pipeline", Text),
        col("started_at", Timestamp),
        col("finished_at", Timestamp),
        col("status", Text),
        col("requests", Int),
        col("rows_written", Int),
        col("error", Text),
    ],
    key: &["run_id", "pipeline"],
    load: LoadRule::Upsert,
    lineage: false,
    keep_stored: &[],
    newer_by: None,
    lake_partition: None,
};

pub const SYNC_CHECKPOINTS: TableDef = TableDef {
    name: "_sync_checkpoints",
    columns: &[
        col("pipeline", Text),
        col("partition", Text),
        col("cursor", Text),
        col("updated_at", Timestamp),
    ],
    key: &["pipeline", "partition"],
    load: LoadRule::Upsert,
    lineage: false,
    keep_stored: &[],
    newer_by: None,
    lake_partition: None,
};

pub const SYNC_QUARANTINE: TableDef = TableDef {
    name: "_sync_quarantine",
    columns: &[
        col("run_id", Text),
        col("route", Text),
        col("record", Text),
        col("error", Text),
        col("seen_at", Timestamp),
    ],
    key: &[],
    load: LoadRule::Append,
    lineage: false,
    keep_stored: &[],
    newer_by: None,
    lake_partition: None,
};

pub const SYNC_REQUESTS: TableDef = TableDef {
    name: "_sync_requests",
    columns: &[
        col("at", Timestamp),
        col("run_id", Text),
        col("route", Text),
        col("status", Int),
        col("latency_ms", Int),
        col("rate_remaining", Int),
        col("quota_remaining", Int),
        col("retry_after_s", Float),
        col("error", Text),
    ],
    key: &[],
    load: LoadRule::Append,
    lineage: false,
    keep_stored: &[],
    newer_by: None,
    lake_partition: Some(LakePartition::Month("at")),
};

/// The quota ledger: what the service last said about each key's windows, so
/// that a process started by cron knows what today's window already spent.
/// `key_id` is a one-way fingerprint, never the key.
pub const SYNC_QUOTA: TableDef = TableDef {
    name: "_sync_quota",
    columns: &[
        col("key_id", Text),
        col("observed_at", Timestamp),
        col("quota_window", Text),
        col("quota_limit", Int),
        col("quota_remaining", Int),
        col("quota_reset_at", Timestamp),
        col("rate_limit", Int),
        col("rate_remaining", Int),
        col("billing_source", Text),
        col("credits_remaining_usd", Float),
    ],
    key: &["key_id"],
    load: LoadRule::Upsert,
    lineage: false,
    keep_stored: &[],
    newer_by: None,
    lake_partition: None,
};

pub const TABLES: &[TableDef] = &[
    COMPANIES,
    PRICES_DAILY,
    DIVIDENDS,
    DIVIDEND_SUMMARIES,
    INDEX_SNAPSHOTS,
    COVERAGE_SNAPSHOTS,
    MACRO_SERIES,
    MACRO_OBSERVATIONS,
    EVENTS,
    EVENT_ITEM_TEXTS,
    NEWS_ITEMS,
    NEWS_HEADLINE_REVISIONS,
    NEWS_SOURCES,
    NEWS_TOPICS,
    NEWS_COMPANY_ITEMS,
    REGULATION_ACTIONS,
    REGULATION_COVERAGE,
    MONTHLY_REVENUE,
    FILINGS,
    FILING_SECTIONS,
    GEO_COUNTRY_COUNTS,
    SYNC_RUNS,
    SYNC_CHECKPOINTS,
    SYNC_QUARANTINE,
    SYNC_REQUESTS,
    SYNC_QUOTA,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_real_columns() {
        for t in TABLES {
            for k in t.key {
                assert!(t.columns.iter().any(|c| c.name == *k), "{}: key {k}", t.name);
            }
            assert!(!t.key.is_empty() || t.load == LoadRule::Append, "{}", t.name);
            for c in t.keep_stored.iter().chain(t.newer_by.iter()) {
                assert!(
                    t.columns.iter().any(|k| k.name == *c && !t.key.contains(c)),
                    "{}: {c}",
                    t.name
                );
            }
        }
    }
}
