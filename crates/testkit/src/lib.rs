//! The tests' kit: an emulator on 127.0.0.1:0, a throwaway warehouse, and a
//! syncer wired to both, so each test reads as what it checks. The
//! integration tests under tests/ name it `util`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use fdsync_core::clock::Clock;
use fdsync_core::config::{Config, Credential};
use fdsync_core::pipeline::{self, Pipeline};
use fdsync_core::sink::SinkHandle;
use fdsync_core::sync::{RunStatus, Syncer};
use fdsync_core::upstream::Client;
use fdsync_emulator::{self as emulator, Account, EmulatorConfig, PlanLimits, RunningEmulator, news, world::World};

pub const TEST_KEY: &str = "pk_live_test_account_key_0001";

/// A Wednesday evening, after the session closed.
pub fn start_time() -> DateTime<Utc> {
    "2026-11-25T23:00:00Z".parse().unwrap()
}

/// The checkout being tested: the folder holding `pipelines/`, from the
/// crate's folder up. Cargo sets `CARGO_MANIFEST_DIR` when it runs a test,
/// and that wins over the compile-time value: cargo reuses a test binary built
/// from another clone that shares the target folder (as CI does), with that
/// clone's path baked in.
pub fn repo() -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest
        .ancestors()
        .find(|dir| dir.join("pipelines").is_dir())
        .unwrap_or_else(|| panic!("no pipelines/ folder above {}", manifest.display()))
        .to_path_buf()
}

/// A frozen simulated clock: it moves only when someone waits or a test advances it.
pub fn frozen_clock() -> Clock {
    Clock::simulated(start_time(), 0.0)
}

/// One account, "test", holding [`TEST_KEY`] on `plan`.
pub fn emulator_config(clock: &Clock, plan: PlanLimits) -> EmulatorConfig {
    EmulatorConfig {
        clock: clock.clone(),
        accounts: vec![Account::new("test", plan, vec![TEST_KEY.into()])],
        generated_companies: 50,
        ..EmulatorConfig::default()
    }
}

pub async fn emulator_with(clock: &Clock, plan: PlanLimits) -> RunningEmulator {
    spawn(emulator_config(clock, plan)).await
}

pub async fn spawn(config: EmulatorConfig) -> RunningEmulator {
    emulator::spawn(config, SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap()
}

/// The horizons the tests were written against (the shipped ones until every
/// backfill became complete by default): the emulator serves years of news
/// and filings, more than most tests want to read. A test of a backfill to
/// the start of the tape sets its own.
pub const TEST_HORIZONS: &[(&str, &str, u32)] = &[
    ("news", "backfill_days", 7),
    ("company_news", "backfill_days", 30),
    ("events_wire", "backfill_days", 7),
    ("event_texts", "text_days", 30),
    ("filings", "text_days", 730),
];

/// The shipped pipelines with [`TEST_HORIZONS`].
pub fn test_pipelines() -> Vec<Pipeline> {
    let mut pipelines = pipeline::load_dir(&repo().join("pipelines"), None).unwrap();
    for p in &mut pipelines {
        for (name, param, days) in TEST_HORIZONS {
            match (p.name == *name, *param) {
                (true, "backfill_days") => p.params.backfill_days = Some(*days),
                (true, _) => p.params.text_days = Some(*days),
                (false, _) => {}
            }
        }
    }
    pipelines
}

/// The shipped pipeline files with [`TEST_HORIZONS`], written to `dir`, for
/// tests that run the binary.
pub fn write_test_pipelines(dir: &Path) -> PathBuf {
    let out = dir.join("pipelines");
    std::fs::create_dir_all(&out).unwrap();
    for entry in std::fs::read_dir(repo().join("pipelines")).unwrap() {
        let path = entry.unwrap().path();
        let mut text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        for (_, param, days) in TEST_HORIZONS.iter().filter(|h| h.0 == name) {
            let line = format!("{param} = {days}\n");
            text = match text.find("[params]\n") {
                Some(at) => format!("{}{line}{}", &text[..at + 9], &text[at + 9..]),
                None => format!("{text}\n[params]\n{line}"),
            };
        }
        std::fs::write(out.join(path.file_name().unwrap()), text).unwrap();
    }
    out
}

/// A config for the emulator at `base_url`, with the test pipelines written
/// next to `warehouse`.
pub fn config_text(base_url: &str, warehouse: &Path, companies: &[&str]) -> String {
    let companies: Vec<String> = companies.iter().map(|c| format!("{c:?}")).collect();
    format!(
        r#"
[upstream]
base_url = "{base_url}"
api_key_env = "FDSYNC_TEST_KEY_UNSET"
timeout_secs = 10

[warehouse]
duckdb = "{}"

[universe]
companies = [{}]

[pipelines]
dir = "{}"
"#,
        warehouse.display(),
        companies.join(", "),
        write_test_pipelines(warehouse.parent().expect("a warehouse in a folder")).display()
    )
}

pub const UNIVERSE: &[&str] = &["AAPL", "MSFT", "0000789019", "TW:2330", "JP:7203", "O"];

pub async fn syncer(config: Config, clock: &Clock) -> Syncer {
    // The configured key file when there is one, as `fdsync sync` would read it.
    let key = config
        .credential()
        .unwrap_or_else(|_| Credential::parse(TEST_KEY, "test").unwrap());
    let client = Client::new(&config.upstream, Some(key), clock.clone()).unwrap();
    // With the `[warehouse]` options, as `fdsync sync` opens it.
    let sink = SinkHandle::open_configured(&config.warehouse, "test").await.unwrap();
    Syncer {
        config,
        client,
        sink,
        clock: clock.clone(),
    }
}

/// The pipelines the client-side tests (pacing, budgets, incremental loads)
/// were written against: one request per company or route, a known count.
pub const FOUNDATION: &[&str] = &["companies", "indices", "prices", "dividends", "coverage", "macro"];

pub struct Harness {
    pub emulator: RunningEmulator,
    pub clock: Clock,
    pub syncer: Syncer,
    /// The [`FOUNDATION`] pipelines.
    pub pipelines: Vec<Pipeline>,
    /// Every pipeline file in `pipelines/`.
    pub all_pipelines: Vec<Pipeline>,
    /// Keeps the warehouse directory alive for the test.
    pub _tempdir: tempfile::TempDir,
}

impl Harness {
    pub async fn new(plan: PlanLimits, companies: &[&str]) -> Harness {
        Harness::with_emulator(emulator_config(&frozen_clock(), plan), companies).await
    }

    /// A harness whose emulator runs `config` (its clock becomes the harness's).
    pub async fn with_emulator(config: EmulatorConfig, companies: &[&str]) -> Harness {
        let clock = config.clock.clone();
        let emulator = spawn(config).await;
        let dir = tempfile::tempdir().unwrap();
        let warehouse = dir.path().join("wh.duckdb");
        let text = config_text(&emulator.base_url(), &warehouse, companies);
        let config = Config::from_toml(&text, Path::new("test.toml"), std::iter::empty()).unwrap();
        let all_pipelines = pipeline::load_dir(&config.pipelines.dir, None).unwrap();
        assert!(
            all_pipelines
                .iter()
                .any(|p| p.name == "news" && p.params.backfill_days.is_some())
        );
        let pipelines = all_pipelines
            .iter()
            .filter(|p| FOUNDATION.contains(&p.name.as_str()))
            .cloned()
            .collect();
        let syncer = syncer(config, &clock).await;
        Harness {
            emulator,
            clock,
            syncer,
            pipelines,
            all_pipelines,
            _tempdir: dir,
        }
    }

    /// As if the process exited and a new one started (a cron run): a fresh
    /// client that knows nothing, the same warehouse, `config` changed by `edit`.
    pub async fn restart(&mut self, edit: impl FnOnce(&mut Config)) {
        self.syncer.sink.close().await;
        let mut config = self.syncer.config.clone();
        edit(&mut config);
        self.syncer = syncer(config, &self.clock).await;
    }

    /// The named pipelines, from every file in `pipelines/`.
    pub fn only(&self, names: &[&str]) -> Vec<Pipeline> {
        let picked: Vec<Pipeline> = self
            .all_pipelines
            .iter()
            .filter(|p| names.contains(&p.name.as_str()))
            .cloned()
            .collect();
        assert_eq!(picked.len(), names.len(), "pipelines {names:?}");
        picked
    }

    /// One integer from a SQL query on the warehouse.
    pub async fn int(&self, sql: &str) -> i64 {
        let sql = sql.to_owned();
        self.syncer
            .sink
            .call(move |s| s.connection().query_row(&sql, [], |r| r.get::<_, i64>(0)))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("query failed: {e}"))
    }

    /// No key of `key` (a column list) appears twice in `table`.
    pub async fn assert_unique(&self, table: &str, key: &str) {
        let dupes = self
            .int(&format!(
                "SELECT count(*) FROM (SELECT {key} FROM {table} GROUP BY ALL HAVING count(*) > 1)"
            ))
            .await;
        assert_eq!(dupes, 0, "duplicate keys in {table}");
    }

    /// Text rows from a SQL query.
    pub async fn strings(&self, sql: &str) -> Vec<String> {
        let query = sql.to_owned();
        self.syncer
            .sink
            .call(move |s| {
                let mut stmt = s.connection().prepare(&query)?;
                let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
                rows.collect::<Result<Vec<_>, _>>()
            })
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("query failed: {e}\n{sql}"))
    }
}

/// Sends SIGTERM to `child`, as systemd and Kubernetes stop a service. A
/// system call, not the `kill` program, which a minimal Debian does not have.
pub async fn sigterm(child: &tokio::process::Child) {
    let id = child.id().expect("the child still runs");
    let pid = rustix::process::Pid::from_raw(id.try_into().expect("a process id fits an i32")).expect("a process id");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM)
        .unwrap_or_else(|e| panic!("SIGTERM to process {id}: {e}"));
}

/// Checks that the checked-in `doc` (a path in the repository) is
/// `generated`; with `FDSYNC_BLESS` set, writes it first. `rerun` is the
/// test to run with it.
pub fn assert_doc_current(doc: &str, generated: &str, rerun: &str) {
    let file = repo().join(doc);
    if std::env::var_os("FDSYNC_BLESS").is_some() {
        std::fs::write(&file, generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{doc} is out of date: FDSYNC_BLESS=1 cargo test --release --test main {rerun}"
    );
}

/// Runs `pipelines` once; every pipeline must end `ok`.
pub async fn run_ok(h: &Harness, pipelines: &[Pipeline]) {
    let (report, result) = h.syncer.run_once(pipelines).await;
    result.unwrap_or_else(|e| panic!("{e}: {report:?}"));
    for o in &report.outcomes {
        assert_eq!(o.status, RunStatus::Ok, "{o:?}");
    }
}

/// Runs `pipelines` after each of `minutes` more of the simulated clock,
/// each run `ok`; returns when each ran.
pub async fn run_ok_after(h: &Harness, pipelines: &[Pipeline], minutes: &[u64]) -> Vec<DateTime<Utc>> {
    let sim = h.clock.as_sim().expect("a simulated clock").clone();
    let mut run_times = Vec::new();
    for m in minutes {
        sim.advance(std::time::Duration::from_secs(m * 60));
        run_times.push(h.clock.now());
        run_ok(h, pipelines).await;
    }
    run_times
}

/// Every headline version of the news items from `first` on that a run at
/// one of `run_times` could have seen (`id|headline`): the last one served,
/// and the one before a rewrite some run saw first. With how many rewrites.
pub fn headline_versions(world: &World, first: u64, run_times: &[DateTime<Utc>]) -> (BTreeSet<String>, usize) {
    let last = *run_times.last().expect("a run");
    let mut versions = BTreeSet::new();
    let mut rewritten = 0;
    for n in first..news::CADENCE.count_at(world.seed, last) {
        let it = news::item(world, n, last).expect("an item");
        versions.insert(format!("{}|{}", it.body.id, it.body.headline));
        if let Some(at) = news::rewritten_at(world.seed, n).filter(|t| *t <= last)
            && run_times
                .iter()
                .any(|t| n < news::CADENCE.count_at(world.seed, *t) && *t < at)
        {
            rewritten += 1;
            let before = news::item(world, n, at - chrono::Duration::seconds(1)).expect("an item");
            versions.insert(format!("{}|{}", before.body.id, before.body.headline));
        }
    }
    (versions, rewritten)
}
