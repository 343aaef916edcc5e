//! A chaos upstream: per seed, the emulator takes a random combination of
//! the service's other legal choices and its likely slips
//! (`docs/open-choices.md`: shapes, quirks, faults, header forms), and
//! fdsync syncs every pipeline on it over four days while the service
//! changes (arrivals, rewritten headlines, restated bars, new vintages).
//! A quirk-free emulator of the same seed, synced at the same moments, is
//! the ground truth (the ground-truth tests hold it to the emulator's own).
//!
//! After every run, for every pipeline and table:
//! - a pipeline ends `ok` with no company refused, or its outcome names a
//!   route (`/api/v1/...`) and what it could not read;
//! - a table whose every feeding pipeline ended `ok` at every run so far
//!   equals the ground truth;
//! - no row stored before the run was deleted or overwritten unless the
//!   ground truth lost it too, and no row was stored that the ground truth
//!   does not hold.
//!
//! `FDSYNC_CHAOS_SEEDS=N` runs seeds 1 to N (the suite runs a few);
//! `FDSYNC_CHAOS_SEED=K` runs seed K alone. A failing seed prints its draw.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use fdsync_core::clock::Clock;
use fdsync_core::config::Config;
use fdsync_core::feeds::catalogue;
use fdsync_core::pipeline::Pipeline;
use fdsync_core::sync::{PipelineOutcome, RunStatus, Syncer};
use fdsync_core::tables::TableDef;
use fdsync_emulator::{
    EmulatorConfig, Faults, HeaderForm, PlanLimits, Quirks, RunningEmulator, WireShapes, inner_families, list_families,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::util::{config_text, emulator_config, test_pipelines};

/// Seeds the suite runs.
const SUITE_SEEDS: u64 = 6;

/// The universe: an SEC registrant, a monthly payer, a Taiwan issuer (monthly
/// revenue) and a Japanese one (no 8-K index of its own).
const COMPANIES: &[&str] = &["MSFT", "O", "TW:2330", "JP:7203"];

/// Hours after the start at which each run happens: the service changes
/// between them.
const RUNS_AT_HOURS: &[i64] = &[0, 26, 75, 98];

/// Columns that hold when fdsync observed something: they differ between
/// two warehouses synced at the same moments whenever a retry waited.
const OBSERVATION_COLUMNS: &[(&str, &str)] = &[
    ("company_versions", "first_seen_at"),
    ("company_versions", "last_seen_at"),
    ("macro_observations", "first_seen_at"),
    ("macro_observations", "last_seen_at"),
    ("news_company_items", "first_seen_at"),
    ("regulation_coverage", "observed_at"),
    ("events_wire_counts", "observed_at"),
];

/// One side of the comparison: an emulator with its own clock, and fdsync
/// with another, so that fdsync's retries and waits never move the
/// service's time: both sides see the same service at each run.
struct Side {
    _running: RunningEmulator,
    service_clock: Clock,
    client_clock: Clock,
    syncer: Syncer,
    _dir: tempfile::TempDir,
}

impl Side {
    async fn new(config: EmulatorConfig, start: chrono::DateTime<chrono::Utc>) -> Side {
        let service_clock = config.clock.clone();
        let running = fdsync_emulator::spawn(config, SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let warehouse = dir.path().join("wh.duckdb");
        let text = config_text(&running.base_url(), &warehouse, COMPANIES);
        let config = Config::from_toml(&text, Path::new("chaos.toml"), std::iter::empty()).unwrap();
        let client_clock = Clock::simulated(start, 0.0);
        let syncer = crate::util::syncer(config, &client_clock).await;
        Side {
            _running: running,
            service_clock,
            client_clock,
            syncer,
            _dir: dir,
        }
    }

    /// Both clocks at `at`.
    fn at(&self, at: chrono::DateTime<chrono::Utc>) {
        self.service_clock.as_sim().unwrap().advance_to(at);
        self.client_clock.as_sim().unwrap().advance_to(at);
    }

    /// Every data table's rows as text: lineage and observation times left
    /// out, and versions, which hold each side's own history.
    async fn tables(&self) -> BTreeMap<&'static str, BTreeSet<String>> {
        let mut out = BTreeMap::new();
        // What each answer said about its own window is compared by the
        // quirk tests: a service that ignores the lookback serves another one.
        for table in catalogue().filter(|t| t.lineage && t.versions_of.is_none() && t.name != "price_windows") {
            out.insert(table.name, self.rows_of(table).await);
        }
        out
    }

    async fn rows_of(&self, table: &'static TableDef) -> BTreeSet<String> {
        let sql = crate::wire::rows_sql(table, OBSERVATION_COLUMNS);
        self.syncer
            .sink
            .call(move |s| {
                let mut stmt = s.connection().prepare(&sql)?;
                let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
                rows.collect::<Result<BTreeSet<_>, _>>()
            })
            .await
            .unwrap()
            .unwrap()
    }
}

/// What one seed draws: everything that shapes the service it syncs.
#[derive(Debug, Clone)]
struct Draw {
    quirks: String,
    /// Quirks that change what the service says (a split restating bars, a
    /// dividend retyped): among `quirks`, and the ground truth's too.
    content: String,
    faults: String,
    shapes: WireShapes,
    header_form: HeaderForm,
}

impl std::fmt::Display for Draw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--quirks '{}' --faults '{}' --shapes {:?} --header-form {:?}",
            self.quirks, self.faults, self.shapes, self.header_form
        )
    }
}

/// A random combination of the service's other legal choices and likely
/// slips. Of the quirks that change what the service says rather than how,
/// the restatements are drawn too (the ground truth then syncs a service
/// with them); a restated filing date or a frozen `updatedAt` are left to
/// their own tests.
fn draw(seed: u64) -> Draw {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut quirks: Vec<String> = Vec::new();
    let one_of = |rng: &mut ChaCha8Rng, names: &[&str]| names[rng.random_range(0..names.len())].to_owned();
    let list_families = list_families();
    let inner_families = inner_families();
    let chance = |rng: &mut ChaCha8Rng, p: f64| rng.random_bool(p);
    // Each of `names`, drawn with chance `p`, in order.
    let some_of = |rng: &mut ChaCha8Rng, names: &[&str], p: f64| -> Vec<String> {
        names
            .iter()
            .filter(|_| rng.random_bool(p))
            .map(|n| (*n).to_owned())
            .collect()
    };
    if chance(&mut rng, 0.4) {
        quirks.push(format!("page_cap={}", rng.random_range(7..60)));
    }
    if chance(&mut rng, 0.15) {
        quirks.push(format!("rename={}", one_of(&mut rng, &list_families)));
    }
    if chance(&mut rng, 0.15) {
        quirks.push(format!("null={}", one_of(&mut rng, &list_families)));
    }
    if chance(&mut rng, 0.2) {
        quirks.push(format!("rename_inner={}", one_of(&mut rng, &inner_families)));
    }
    quirks.extend(some_of(
        &mut rng,
        &[
            "unpadded_ciks",
            "offsetless_timestamps",
            "ignore_sort",
            "no_total",
            "empty_texts",
            "json_texts",
            "no_server_time",
        ],
        0.3,
    ));
    if chance(&mut rng, 0.1) {
        quirks.push("after_newest_first".into());
    }
    quirks.extend(some_of(&mut rng, &["local_midnight_bars", "ignored_lookback"], 0.15));
    let content = some_of(
        &mut rng,
        &[
            "split=2026-11-20",
            "retyped_dividend",
            "withdrawn_month",
            "withdrawn_country",
        ],
        0.15,
    );
    quirks.extend(content.iter().cloned());
    if chance(&mut rng, 0.1) {
        quirks.push("exclusive_dates".into());
    }
    if chance(&mut rng, 0.2) {
        quirks.push(format!("withhold_page={}", rng.random_range(1..120)));
    }
    if chance(&mut rng, 0.25) {
        quirks.push(format!("offset_cap={}", rng.random_range(50..400)));
    }
    if chance(&mut rng, 0.3) {
        let families = one_of(
            &mut rng,
            &[
                "prices",
                "dividends",
                "events",
                "regulation",
                "filings",
                "monthly_revenue",
                "news",
            ],
        );
        let company = one_of(&mut rng, COMPANIES);
        let status = one_of(&mut rng, &["402", "403", "404", "410", "422"]);
        quirks.push(format!("unserved={families}@{company}:{status}"));
    }
    if chance(&mut rng, 0.15) {
        let family = one_of(&mut rng, &["topics", "sources", "indices", "geo_layers"]);
        let status = one_of(&mut rng, &["402", "403", "410"]);
        quirks.push(format!("refuse={family}:{status}"));
    }
    let mut faults = Vec::new();
    for (name, rate) in [
        ("5xx", 0.05),
        ("reset", 0.03),
        ("truncate", 0.03),
        ("bad_record", 0.02),
        ("throttle", 0.02),
    ] {
        if chance(&mut rng, 0.3) {
            faults.push(format!("{name}={rate}"));
        }
    }
    let shapes = if chance(&mut rng, 0.5) {
        WireShapes::Other
    } else {
        WireShapes::Contract
    };
    let header_form = match rng.random_range(0..3) {
        0 => HeaderForm::Legacy,
        1 => HeaderForm::Ietf,
        _ => HeaderForm::Both,
    };
    Draw {
        quirks: quirks.join(","),
        content: content.join(","),
        faults: faults.join(","),
        shapes,
        header_form,
    }
}

fn start() -> chrono::DateTime<chrono::Utc> {
    "2026-11-25T12:00:00Z".parse().unwrap()
}

fn service(draw: Option<&Draw>) -> EmulatorConfig {
    let base = emulator_config(&Clock::simulated(start(), 0.0), PlanLimits::scale(1_000_000, None));
    let Some(draw) = draw else { return base };
    EmulatorConfig {
        quirks: Quirks::parse(&draw.quirks).unwrap(),
        faults: Faults::parse(&draw.faults).unwrap(),
        shapes: draw.shapes,
        header_form: draw.header_form,
        ..base
    }
}

/// What every table holds at each of `times`, synced from a service with
/// `quirks` only (none: the plain service).
async fn ground_truth(
    quirks: &str,
    times: &[chrono::DateTime<chrono::Utc>],
    pipelines: &[Pipeline],
) -> Vec<BTreeMap<&'static str, BTreeSet<String>>> {
    let config = EmulatorConfig {
        quirks: Quirks::parse(quirks).unwrap(),
        ..service(None)
    };
    let reference = Side::new(config, start()).await;
    let mut truth = Vec::new();
    for at in times {
        reference.at(*at);
        let (report, result) = reference.syncer.run_once(pipelines).await;
        result.unwrap_or_else(|e| panic!("the reference sync ({quirks}) failed: {e}: {report:?}"));
        for o in &report.outcomes {
            assert!(
                o.status == RunStatus::Ok && o.not_served.is_empty(),
                "reference ({quirks}): {o:?}"
            );
        }
        truth.push(reference.tables().await);
    }
    truth
}

/// Tables whose rows a pipeline asks for from what another table holds:
/// item texts are fetched for the events stored.
const READ_FROM: &[(&str, &str)] = &[("event_item_texts", "events")];

/// The pipelines each table is fed by, directly or through the table its
/// pipeline reads what to ask for from.
fn feeders(pipelines: &[Pipeline]) -> BTreeMap<&'static str, Vec<String>> {
    let mut out: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for p in pipelines {
        for t in p.feed.tables {
            out.entry(t.name).or_default().push(p.name.clone());
        }
    }
    for (table, source) in READ_FROM {
        let more = out.get(source).cloned().unwrap_or_default();
        out.entry(table).or_default().extend(more);
    }
    out
}

/// Whether an outcome that is not a clean `ok` says which route and why.
fn names_a_route(o: &PipelineOutcome) -> bool {
    o.error.iter().chain(&o.not_served).any(|s| s.contains("/api/v1/"))
}

/// Where two table sets differ, a few rows each way.
fn differences(expected: &BTreeSet<String>, found: &BTreeSet<String>) -> String {
    let missing: Vec<_> = expected.difference(found).take(3).collect();
    let extra: Vec<_> = found.difference(expected).take(3).collect();
    format!("missing {missing:?}, extra {extra:?}")
}

#[tokio::test]
async fn a_chaos_upstream_is_read_whole_or_refused_loudly_and_loses_nothing_stored() {
    let seeds: Vec<u64> = match (std::env::var("FDSYNC_CHAOS_SEED"), std::env::var("FDSYNC_CHAOS_SEEDS")) {
        (Ok(one), _) => vec![one.parse().expect("FDSYNC_CHAOS_SEED: a number")],
        (_, Ok(n)) => (1..=n.parse().expect("FDSYNC_CHAOS_SEEDS: a number")).collect(),
        _ => (1..=SUITE_SEEDS).collect(),
    };
    let pipelines = test_pipelines();
    let feeders = feeders(&pipelines);
    let times: Vec<_> = RUNS_AT_HOURS
        .iter()
        .map(|h| start() + chrono::Duration::hours(*h))
        .collect();

    // The ground truth at each run: the same service without quirks.
    let plain_truth = ground_truth("", &times, &pipelines).await;

    let mut failures = Vec::new();
    for seed in seeds {
        let draw = draw(seed);
        let started = std::time::Instant::now();
        // A restating service's truth is its own, synced without the other quirks.
        let truth = if draw.content.is_empty() {
            plain_truth.clone()
        } else {
            ground_truth(&draw.content, &times, &pipelines).await
        };
        let chaos = Side::new(service(Some(&draw)), start()).await;
        let mut before = chaos.tables().await;
        // Pipelines ok (and refusing no company) at every run so far.
        let mut clean: BTreeSet<String> = pipelines.iter().map(|p| p.name.clone()).collect();
        let mut said = Vec::new();
        let mut broken = Vec::new();
        for (run, at) in times.iter().enumerate() {
            chaos.at(*at);
            let (report, _) = chaos.syncer.run_once(&pipelines).await;
            let mut ok_now = BTreeSet::new();
            for o in &report.outcomes {
                let clean_run = o.status == RunStatus::Ok && o.not_served.is_empty();
                if clean_run {
                    ok_now.insert(o.pipeline.clone());
                } else {
                    clean.remove(&o.pipeline);
                    if !names_a_route(o) {
                        broken.push(format!(
                            "run {run}: {} ended {} without naming a route: {o:?}",
                            o.pipeline, o.status
                        ));
                    }
                    said.push(format!("{} {}", o.pipeline, o.status));
                }
            }
            let after = chaos.tables().await;
            let expected = &truth[run];
            for (table, rows) in &after {
                let truth_rows = &expected[table];
                let was = &before[table];
                let lost: Vec<_> = was
                    .difference(rows)
                    .filter(|r| truth_rows.contains(*r))
                    .take(3)
                    .collect();
                if !lost.is_empty() {
                    broken.push(format!(
                        "run {run}: {table}: rows the service still serves were deleted or overwritten: {lost:?}"
                    ));
                }
                // A row several pipelines fill in (a news source: its name
                // from one route, its display policy from another) is whole
                // only once every one of them has read.
                let feeding = feeders.get(table).map_or(&[][..], Vec::as_slice);
                let whole_rows = feeding.len() == 1 || feeding.iter().all(|n| ok_now.contains(n));
                let invented: Vec<_> = rows
                    .difference(was)
                    .filter(|r| !truth_rows.contains(*r))
                    .take(3)
                    .collect();
                if whole_rows && !invented.is_empty() {
                    broken.push(format!(
                        "run {run}: {table}: rows the service does not serve were stored: {invented:?}"
                    ));
                }
                let fed_clean = feeders
                    .get(table)
                    .is_some_and(|names| names.iter().all(|n| clean.contains(n)));
                if fed_clean && rows != truth_rows {
                    broken.push(format!(
                        "run {run}: {table}: every pipeline feeding it ended ok, yet it differs from the service: {}",
                        differences(truth_rows, rows)
                    ));
                }
            }
            before = after;
        }
        println!(
            "chaos seed {seed}: {draw}; {:.1} s; not ok: {}",
            started.elapsed().as_secs_f64(),
            if said.is_empty() {
                "none".to_owned()
            } else {
                said.join(", ")
            }
        );
        if !broken.is_empty() {
            failures.push(format!(
                "seed {seed} (FDSYNC_CHAOS_SEED={seed}; emulator {draw}):\n  {}",
                broken.join("\n  ")
            ));
        }
        drop(chaos);
        tokio::time::sleep(Duration::ZERO).await;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
