//! Prometheus metrics: what an operator graphs and alerts on. Counted where
//! things happen (the client, the sink, the runner, the stream), served by
//! the daemon at `/metrics` in the text exposition format.
//!
//! One registry per process, like the `metrics` facade: every stage can count
//! without the handle being threaded through it.

use std::sync::LazyLock;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TableLabel {
    table: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabel {
    pipeline: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerifyLabel {
    table: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PipelineLabel {
    pipeline: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabel {
    version: String,
    /// The warehouse layout version the build writes.
    layout: String,
}

struct Metrics {
    registry: Registry,
    requests: Family<StatusLabel, Counter>,
    rate_limited: Counter,
    rows_written: Family<TableLabel, Counter>,
    quota_remaining: Gauge,
    rate_remaining: Gauge,
    runs: Family<RunLabel, Counter>,
    last_success: Family<PipelineLabel, Gauge<f64, AtomicU64>>,
    stream_lag: Histogram,
    stream_connects: Family<StatusLabel, Counter>,
    shortfall: Family<PipelineLabel, Gauge>,
    unreadable: Family<PipelineLabel, Counter>,
    stream_planned: Family<PipelineLabel, Gauge<f64, AtomicU64>>,
    not_served: Family<RunLabel, Gauge>,
    verified: Family<VerifyLabel, Counter>,
    run_duration: Family<PipelineLabel, Gauge<f64, AtomicU64>>,
    drift_fields: Gauge,
    /// The statuses each pipeline's gauge was last set for, so that one
    /// no longer seen goes back to 0.
    not_served_seen: std::sync::Mutex<std::collections::HashMap<String, Vec<String>>>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::default();
    let requests = Family::<StatusLabel, Counter>::default();
    registry.register(
        "fdsync_requests",
        "Upstream requests sent, by HTTP status (\"error\": no response)",
        requests.clone(),
    );
    let rate_limited = Counter::default();
    registry.register(
        "fdsync_rate_limited",
        "Responses 429 (rate limit or quota)",
        rate_limited.clone(),
    );
    let rows_written = Family::<TableLabel, Counter>::default();
    registry.register(
        "fdsync_rows_written",
        "Warehouse rows inserted or changed, by table",
        rows_written.clone(),
    );
    let quota_remaining = Gauge::default();
    registry.register(
        "fdsync_quota_remaining",
        "Requests left in the daily or monthly quota, as the service last said",
        quota_remaining.clone(),
    );
    let rate_remaining = Gauge::default();
    registry.register(
        "fdsync_rate_remaining",
        "Requests left in the per-minute window, as the service last said",
        rate_remaining.clone(),
    );
    let runs = Family::<RunLabel, Counter>::default();
    registry.register("fdsync_pipeline_runs", "Pipeline runs, by how they ended", runs.clone());
    let last_success = Family::<PipelineLabel, Gauge<f64, AtomicU64>>::default();
    registry.register(
        "fdsync_pipeline_last_success_timestamp_seconds",
        "When each pipeline last finished ok (Unix seconds): alert on its age",
        last_success.clone(),
    );
    let stream_lag = Histogram::new(exponential_buckets(0.005, 2.0, 14));
    registry.register(
        "fdsync_news_stream_lag_seconds",
        "From a news item's first sighting by the service to its row committed by the live stream",
        stream_lag.clone(),
    );
    let stream_connects = Family::<StatusLabel, Counter>::default();
    registry.register(
        "fdsync_news_stream_connections",
        "Live stream connections, by how they ended (closed by the server, dropped, refused)",
        stream_connects.clone(),
    );
    let shortfall = Family::<PipelineLabel, Gauge>::default();
    registry.register(
        "fdsync_pipeline_shortfall",
        "Records the service counted that the pipeline's last run did not store (0: complete)",
        shortfall.clone(),
    );
    let unreadable = Family::<PipelineLabel, Counter>::default();
    registry.register(
        "fdsync_unreadable_responses",
        "Answers (200) that could not be read, kept in _sync_quarantine, by pipeline",
        unreadable.clone(),
    );
    let stream_planned = Family::<PipelineLabel, Gauge<f64, AtomicU64>>::default();
    registry.register(
        "fdsync_news_stream_planned_requests_per_day",
        "The live stream's connections a day in the daemon's quota plan (0: not connected, the feed polls)",
        stream_planned.clone(),
    );
    let not_served = Family::<RunLabel, Gauge>::default();
    registry.register(
        "fdsync_not_served",
        "Companies the pipeline's route refused at its last run or within the day before, by HTTP status (402: not in the plan)",
        not_served.clone(),
    );
    let verified = Family::<VerifyLabel, Counter>::default();
    registry.register(
        "fdsync_verified_rows",
        "Stored rows compared again with the service (fdsync verify), by table and result: equal, changed, withdrawn, missing",
        verified.clone(),
    );
    let build_info = Family::<BuildLabel, Gauge>::default();
    registry.register(
        "fdsync_build_info",
        "The fdsync build that wrote these series (always 1)",
        build_info.clone(),
    );
    build_info
        .get_or_create(&BuildLabel {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            layout: crate::sink::duckdb::migrations::schema_version().to_string(),
        })
        .set(1);
    let run_duration = Family::<PipelineLabel, Gauge<f64, AtomicU64>>::default();
    registry.register(
        "fdsync_pipeline_last_run_duration_seconds",
        "How long each pipeline's last run took",
        run_duration.clone(),
    );
    let drift_fields = Gauge::default();
    registry.register(
        "fdsync_drift_fields",
        "Fields the service sends that no column holds (_sync_unknown_fields, envelopes included): alert when it rises",
        drift_fields.clone(),
    );
    Metrics {
        registry,
        run_duration,
        drift_fields,
        verified,
        not_served,
        not_served_seen: Default::default(),
        stream_planned,
        shortfall,
        unreadable,
        requests,
        rate_limited,
        rows_written,
        quota_remaining,
        rate_remaining,
        runs,
        last_success,
        stream_lag,
        stream_connects,
    }
});

/// One request's answer: its status (0 when no response came) and the windows it reported.
pub fn request(status: u16, rate_remaining: Option<u32>, quota_remaining: Option<u64>) {
    let m = &*METRICS;
    let label = if status == 0 {
        "error".to_owned()
    } else {
        status.to_string()
    };
    m.requests.get_or_create(&StatusLabel { status: label }).inc();
    if status == 429 {
        m.rate_limited.inc();
    }
    if let Some(n) = rate_remaining {
        m.rate_remaining.set(i64::from(n));
    }
    if let Some(n) = quota_remaining {
        m.quota_remaining.set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// When this process last committed rows, for the daemon's `/healthz`.
static LAST_COMMIT: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);

/// How long ago this process last committed, if it did.
pub fn since_last_commit() -> Option<std::time::Duration> {
    LAST_COMMIT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .map(|at| at.elapsed())
}

/// Rows committed by this process so far, for progress lines.
static ROWS_COMMITTED: AtomicU64 = AtomicU64::new(0);

pub fn rows_committed() -> u64 {
    ROWS_COMMITTED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Rows a commit wrote, in all and by table.
pub fn rows_written(total: u64, per_table: &[(&'static str, u64)]) {
    ROWS_COMMITTED.fetch_add(total, std::sync::atomic::Ordering::Relaxed);
    for (table, rows) in per_table {
        METRICS
            .rows_written
            .get_or_create(&TableLabel {
                table: (*table).to_owned(),
            })
            .inc_by(*rows);
    }
}

pub fn pipeline_run(pipeline: &str, status: &str, finished_at: chrono::DateTime<chrono::Utc>) {
    let m = &*METRICS;
    m.runs
        .get_or_create(&RunLabel {
            pipeline: pipeline.to_owned(),
            status: status.to_owned(),
        })
        .inc();
    if status == "ok" {
        last_success(pipeline, finished_at);
    }
}

/// What the pipeline's last run fell short of the service's counts, and
/// the answers it could not read.
pub fn shortfall(pipeline: &str, missing: u64, unreadable: u64) {
    let label = PipelineLabel {
        pipeline: pipeline.to_owned(),
    };
    METRICS
        .shortfall
        .get_or_create(&label)
        .set(i64::try_from(missing).unwrap_or(i64::MAX));
    METRICS.unreadable.get_or_create(&label).inc_by(unreadable);
}

/// The companies `pipeline`'s route refused, by the status of each refusal.
pub fn not_served(pipeline: &str, statuses: impl Iterator<Item = u16>) {
    let mut counts: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
    for status in statuses {
        *counts.entry(status.to_string()).or_default() += 1;
    }
    let mut seen = METRICS.not_served_seen.lock().unwrap_or_else(|e| e.into_inner());
    let before = seen
        .insert(pipeline.to_owned(), counts.keys().cloned().collect())
        .unwrap_or_default();
    for status in before.into_iter().chain(counts.keys().cloned()) {
        let label = RunLabel {
            pipeline: pipeline.to_owned(),
            status: status.clone(),
        };
        METRICS
            .not_served
            .get_or_create(&label)
            .set(counts.get(&status).copied().unwrap_or(0));
    }
}

/// What the daemon planned for the live stream of `pipeline`: connections
/// a day, 0 when it polls on its schedule instead.
pub fn stream_planned(pipeline: &str, per_day: f64) {
    METRICS
        .stream_planned
        .get_or_create(&PipelineLabel {
            pipeline: pipeline.to_owned(),
        })
        .set(per_day);
}

/// What a verification found in `table`: rows by result.
pub fn verified(table: &str, results: &[(&str, u64)]) {
    for (result, n) in results {
        METRICS
            .verified
            .get_or_create(&VerifyLabel {
                table: table.to_owned(),
                result: (*result).to_owned(),
            })
            .inc_by(*n);
    }
}

/// How long `pipeline`'s run just ended took.
pub fn run_duration(pipeline: &str, seconds: f64) {
    METRICS
        .run_duration
        .get_or_create(&PipelineLabel {
            pipeline: pipeline.to_owned(),
        })
        .set(seconds.max(0.0));
}

/// The fields the warehouse knows the service sends that no column holds.
pub fn drift_fields(count: u64) {
    METRICS.drift_fields.set(i64::try_from(count).unwrap_or(i64::MAX));
}

/// When `pipeline` last finished ok, as the run log says: a timer run's
/// file then carries every pipeline's, not only those it ran.
pub fn last_success(pipeline: &str, at: chrono::DateTime<chrono::Utc>) {
    METRICS
        .last_success
        .get_or_create(&PipelineLabel {
            pipeline: pipeline.to_owned(),
        })
        .set(at.timestamp_millis() as f64 / 1000.0);
}

/// Writes every metric to `path` for node exporter's textfile collector:
/// to a temporary file beside it, then renamed over it, so the collector
/// never reads half a file.
///
/// # Errors
/// When the folder cannot be written.
pub fn write_textfile(path: &std::path::Path) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, render())?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

pub fn stream_lag(seconds: f64) {
    METRICS.stream_lag.observe(seconds.max(0.0));
}

pub fn stream_connection(outcome: &str) {
    METRICS
        .stream_connects
        .get_or_create(&StatusLabel {
            status: outcome.to_owned(),
        })
        .inc();
}

/// Every metric in the Prometheus text format.
pub fn render() -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &METRICS.registry).expect("writing to a String cannot fail");
    out
}

/// This process's peak resident memory so far, in KiB (`VmHWM`; Linux only).
pub fn peak_memory_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
