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
    /// Keep every row (history and logs).
    Append,
    /// Point-in-time history keyed by its whole content: a row seen before only
    /// has its `last_seen_at` moved; anything new is a new row; nothing is
    /// deleted or overwritten.
    History,
}

impl LoadRule {
    pub fn parse(s: &str) -> Option<LoadRule> {
        match s {
            "upsert" => Some(LoadRule::Upsert),
            "insert_once" => Some(LoadRule::InsertOnce),
            "append" => Some(LoadRule::Append),
            "history" => Some(LoadRule::History),
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
            assert_eq!(t.key.is_empty(), t.load == LoadRule::Append, "{}", t.name);
        }
    }
}
