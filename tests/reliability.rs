//! Reliability: crash it, starve it, feed it garbage; lose nothing. Each test
//! prints a `reliability:` line with what it injected and what it found, the
//! figures of RELIABILITY.md.
//!
//! Trials: `FDSYNC_RELIABILITY_TRIALS` (the full suite, as RELIABILITY.md ran
//! it: 20); without it, the reduced suite CI runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use fdsync_core::clock::Clock;
use fdsync_core::config::Config;
use fdsync_core::feeds::catalogue;
use fdsync_emulator::{Account, EmulatorConfig, Faults, PlanLimits, RunningEmulator};
use rand::{Rng, SeedableRng};

use crate::util::{TEST_KEY, UNIVERSE, config_text, frozen_clock, spawn, start_time};

/// Trials of a randomised test: the environment's count, else `reduced`.
fn trials(reduced: usize) -> usize {
    std::env::var("FDSYNC_RELIABILITY_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(reduced)
}

/// An emulator (frozen clock, so its data never changes) whose account has
/// no practical limit: a child process runs on the system clock, and under a
/// frozen emulator clock a spent minute window would never end.
pub(crate) async fn unlimited_emulator() -> RunningEmulator {
    unlimited_emulator_of(50).await
}

/// [`unlimited_emulator`] with `generated_companies` beside the named ones.
pub(crate) async fn unlimited_emulator_of(generated_companies: u64) -> RunningEmulator {
    spawn(EmulatorConfig {
        clock: frozen_clock(),
        accounts: vec![Account::new(
            "test",
            PlanLimits::scale(1_000_000_000, None),
            vec![TEST_KEY.into()],
        )],
        generated_companies,
        ..EmulatorConfig::default()
    })
    .await
}

/// A warehouse folder and its config, synced by `fdsync` processes.
pub(crate) struct Subject {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) config: PathBuf,
}

impl Subject {
    /// With `lake`, every sync also publishes to a local lake in the folder.
    pub(crate) fn new(base_url: &str, lake: bool) -> Subject {
        Subject::in_dir(tempfile::tempdir().unwrap(), base_url, lake)
    }

    fn in_dir(dir: tempfile::TempDir, base_url: &str, lake: bool) -> Subject {
        let warehouse = dir.path().join("wh.duckdb");
        let mut text = config_text(base_url, &warehouse, UNIVERSE);
        if lake {
            let lake = format!("[warehouse]\nparquet_dir = \"{}\"\n", dir.path().join("lake").display());
            text = text.replace("[warehouse]\n", &lake);
        }
        let config = dir.path().join("fdsync.toml");
        std::fs::write(&config, text).unwrap();
        Subject { dir, config }
    }

    pub(crate) fn warehouse(&self) -> PathBuf {
        self.dir.path().join("wh.duckdb")
    }

    pub(crate) fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_fdsync"));
        cmd.arg("--config")
            .arg(&self.config)
            .args(args)
            .env("FDSYNC_TEST_KEY_UNSET", TEST_KEY)
            // The emulator's frozen instant: runs minutes apart then cut the
            // tapes at the same horizon (with the system clock they did not
            // always: one run read a news page more than another).
            .env("FDSYNC_FROZEN_CLOCK", start_time().to_rfc3339())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    pub(crate) async fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().await.unwrap()
    }

    /// `sync --once` until it exits 0 (at most `runs` times); the last output.
    async fn sync_to_completion(&self, runs: usize) -> Output {
        let mut out = self.run(&["sync", "--once"]).await;
        for _ in 1..runs {
            if out.status.success() {
                break;
            }
            out = self.run(&["sync", "--once"]).await;
        }
        assert!(out.status.success(), "sync never completed: {}", text(&out));
        out
    }
}

pub(crate) fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Columns whose values come from the client's clock: runs at different
/// times write different ones, and neither is wrong.
const CLIENT_CLOCK: &[(&str, &str)] = &[
    ("macro_observations", "first_seen_at"),
    ("macro_observations", "last_seen_at"),
    ("company_versions", "first_seen_at"),
    ("company_versions", "last_seen_at"),
    ("regulation_coverage", "observed_at"),
    ("events_wire_counts", "observed_at"),
];

/// Logs of what each answer said about the request itself: they differ with
/// what was asked (a resumed warehouse asks prices for a month, a fresh one
/// for the whole history), not with what the service holds.
const REQUEST_LOGS: &[&str] = &["price_windows"];

/// Per data table: its rows and an order-free digest of their content
/// (lineage and client-clock columns left out).
pub(crate) fn content(warehouse: &Path) -> BTreeMap<&'static str, (i64, String)> {
    let conn = read_only(warehouse);
    catalogue()
        .filter(|t| t.lineage && t.versions_of.is_none() && !REQUEST_LOGS.contains(&t.name))
        .map(|t| {
            let cols: Vec<String> = t
                .columns
                .iter()
                .filter(|c| !CLIENT_CLOCK.contains(&(t.name, c.name)))
                .map(|c| format!("\"{}\"", c.name))
                .collect();
            let sql = format!(
                "SELECT count(*), coalesce(sum(hash({}))::VARCHAR, '0') FROM \"{}\"",
                cols.join(", "),
                t.name
            );
            let found = conn
                .query_row(&sql, [], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            (t.name, found)
        })
        .collect()
}

pub(crate) fn read_only(warehouse: &Path) -> duckdb::Connection {
    let config = duckdb::Config::default()
        .access_mode(duckdb::AccessMode::ReadOnly)
        .unwrap();
    duckdb::Connection::open_with_flags(warehouse, config).unwrap()
}

/// Keys stored twice, per keyed table (none, whatever happened).
fn duplicate_keys(warehouse: &Path) -> Vec<(&'static str, i64)> {
    let conn = read_only(warehouse);
    catalogue()
        .filter(|t| !t.key.is_empty())
        .map(|t| {
            let key: Vec<String> = t.key.iter().map(|k| format!("\"{k}\"")).collect();
            let sql = format!(
                "SELECT count(*) FROM (SELECT {} FROM \"{}\" GROUP BY ALL HAVING count(*) > 1)",
                key.join(", "),
                t.name
            );
            (t.name, conn.query_row(&sql, [], |r| r.get(0)).unwrap())
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Every file under `dir`, relative, except the lake's data and log files
/// (checked by [`lake_orphans`]).
fn files(dir: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.insert(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, dir, &mut out);
    out.into_iter().filter(|f| !f.starts_with("lake/")).collect()
}

/// Parquet files in the local lake that no log entry ever added: left by a
/// publish killed before its commit, and never cleaned up.
fn lake_orphans(lake: &Path) -> Vec<String> {
    let mut orphans = Vec::new();
    for table in std::fs::read_dir(lake).into_iter().flatten().flatten() {
        let root = table.path();
        let mut added = BTreeSet::new();
        for log in std::fs::read_dir(root.join("_delta_log"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let Ok(text) = std::fs::read_to_string(log.path()) else {
                continue;
            };
            for line in text.lines() {
                let Ok(action) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                if let Some(path) = action["add"]["path"].as_str() {
                    added.insert(percent_decoded(path));
                }
            }
        }
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    if !path.ends_with("_delta_log") {
                        stack.push(path);
                    }
                } else if path.extension().is_some_and(|e| e == "parquet") {
                    let rel = percent_decoded(&path.strip_prefix(&root).unwrap().display().to_string());
                    if !added.contains(&rel) {
                        orphans.push(format!("{}/{rel}", root.display()));
                    }
                }
            }
        }
    }
    orphans
}

/// `s` with its `%XX` escapes decoded (the Delta log escapes paths; the
/// local store escapes file names in its own way).
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Rows in the local lake's live files, per table, read by DuckDB.
pub(crate) async fn lake_rows(lake: &Path) -> BTreeMap<String, i64> {
    let root = fdsync_core::lake::store::LakeRoot::open(&lake.display().to_string()).unwrap();
    let conn = duckdb::Connection::open_in_memory().unwrap();
    let mut rows = BTreeMap::new();
    for table in catalogue().filter(|t| t.lineage) {
        let Some(delta) = fdsync_core::lake::delta::open_existing(&root, table).await.unwrap() else {
            continue;
        };
        let live: Vec<String> = fdsync_core::lake::delta::live_files(&delta, table)
            .unwrap()
            .into_iter()
            .map(|f| format!("'{}'", lake.join(table.name).join(&f.path).display()))
            .collect();
        let n = if live.is_empty() {
            0
        } else {
            let sql = format!("SELECT count(*) FROM read_parquet([{}])", live.join(", "));
            conn.query_row(&sql, [], |r| r.get(0)).unwrap()
        };
        rows.insert(table.name.to_owned(), n);
    }
    rows
}

/// `fdsync sync --once` of every pipeline (and a publish to a local lake),
/// killed with SIGKILL at random points many times in a row, each run resuming
/// from what the last one left; then run to completion. The warehouse holds
/// exactly what one uninterrupted sync wrote, no key twice; the lake holds the
/// warehouse's rows; no file is left that an uninterrupted sync does not leave.
#[tokio::test]
async fn killed_at_random_points_then_resumed_the_warehouse_equals_an_uninterrupted_sync() {
    let emulator = unlimited_emulator().await;
    let reference = Subject::new(&emulator.base_url(), true);
    let before = emulator.emulator.stats().requests;
    let out = reference.run(&["sync", "--once"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let per_sync = emulator.emulator.stats().requests - before;
    let truth = content(&reference.warehouse());

    let victim = Subject::new(&emulator.base_url(), true);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x00C2_A5E5);
    let trials = trials(4);
    let mut killed = 0;
    let mut spent = 0;
    for _ in 0..trials {
        let mut child = victim.command(&["sync", "--once"]).spawn().unwrap();
        // A point in what is left of the sync, by requests answered, then up
        // to 40 ms more: mid-request, mid-commit or mid-publish, wherever that
        // lands. A resumed run also re-reads what has no checkpoint yet and
        // asks again what its pipelines poll, so at least 60 requests are left.
        let left = per_sync.saturating_sub(spent).max(60);
        let started = emulator.emulator.stats().requests;
        let at = started + rng.random_range(1..left);
        let extra = std::time::Duration::from_millis(rng.random_range(0..40));
        let exited = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if emulator.emulator.stats().requests >= at {
                tokio::time::sleep(extra).await;
                break child.try_wait().unwrap();
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        };
        spent += emulator.emulator.stats().requests - started;
        if exited.is_none() {
            child.start_kill().unwrap();
            let status = child.wait().await.unwrap();
            assert_eq!(status.code(), None, "killed by a signal");
            killed += 1;
        }
    }
    assert!(
        killed * 2 >= trials,
        "most kills landed before the run ended ({killed} of {trials})"
    );
    victim.sync_to_completion(2).await;

    let found = content(&victim.warehouse());
    for (table, expected) in &truth {
        assert_eq!(&found[table], expected, "{table}: rows and content digest");
    }
    assert_eq!(duplicate_keys(&victim.warehouse()), vec![], "duplicate keys");
    assert_eq!(
        files(victim.dir.path()),
        files(reference.dir.path()),
        "files left behind"
    );
    let lake = victim.dir.path().join("lake");
    assert_eq!(lake_orphans(&lake), Vec::<String>::new(), "orphaned Parquet files");
    let lake_rows = lake_rows(&lake).await;
    for (table, (rows, _)) in &truth {
        assert_eq!(
            lake_rows.get(*table).copied().unwrap_or(0),
            *rows,
            "{table} in the lake"
        );
    }
    let rows: i64 = truth.values().map(|(n, _)| n).sum();
    println!(
        "reliability: crash: {killed} of {trials} runs killed with SIGKILL (uniform over a sync of {per_sync} requests, \
         +0-40 ms), then one run to completion: {rows} rows in {} tables equal, 0 duplicate keys, 0 orphaned files",
        truth.len()
    );
}

/// `fdsync sync --once` sent SIGTERM halfway through a first sync: it stops
/// sending, commits what it received, records the run `interrupted` and
/// exits 143 within seconds; the next run finishes the rest, spending about
/// what was left, and the warehouse equals an uninterrupted sync's.
#[tokio::test]
async fn sigterm_mid_backfill_commits_what_was_received_and_the_next_run_finishes_the_rest() {
    let emulator = unlimited_emulator().await;
    let reference = Subject::new(&emulator.base_url(), false);
    let before = emulator.emulator.stats().requests;
    let out = reference.run(&["sync", "--once"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let per_sync = emulator.emulator.stats().requests - before;
    let truth = content(&reference.warehouse());

    // Slowed so that half a sync takes a few seconds of real time.
    emulator.emulator.set_faults(Faults {
        slow: 1.0,
        slow_ms: 5,
        ..Faults::default()
    });
    let victim = Subject::new(&emulator.base_url(), false);
    let started = emulator.emulator.stats().requests;
    let mut child = victim.command(&["sync", "--once"]).spawn().unwrap();
    while emulator.emulator.stats().requests < started + per_sync / 2 {
        assert!(child.try_wait().unwrap().is_none(), "the sync ended before the signal");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let signalled = std::time::Instant::now();
    crate::util::sigterm(&child).await;
    let out = child.wait_with_output().await.unwrap();
    let took = signalled.elapsed();
    let before_signal = emulator.emulator.stats().requests - started;
    assert_eq!(out.status.code(), Some(143), "a stop by SIGTERM: {}", text(&out));
    assert!(
        took < std::time::Duration::from_secs(15),
        "exited {took:?} after the signal"
    );
    let conn = read_only(&victim.warehouse());
    let interrupted: i64 = conn
        .query_row(
            "SELECT count(*) FROM _sync_runs WHERE status = 'interrupted'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(interrupted, 1, "the run is recorded as interrupted: {}", text(&out));
    drop(conn);
    let kept: i64 = content(&victim.warehouse()).values().map(|(n, _)| n).sum();
    assert!(kept > 0, "what was received before the signal is in the warehouse");

    emulator.emulator.set_faults(Faults::default());
    let resumed_from = emulator.emulator.stats().requests;
    victim.sync_to_completion(1).await;
    let resumed = emulator.emulator.stats().requests - resumed_from;
    assert!(
        resumed * 4 < per_sync * 3,
        "the next run spent {resumed} requests; a whole sync is {per_sync}"
    );
    let found = content(&victim.warehouse());
    for (table, expected) in &truth {
        assert_eq!(&found[table], expected, "{table}: rows and content digest");
    }
    assert_eq!(duplicate_keys(&victim.warehouse()), vec![], "duplicate keys");
    println!(
        "reliability: sigterm: sync of {per_sync} requests signalled after {before_signal}; exit 143 in {:.2} s with \
         {kept} rows committed; the next run spent {resumed} requests; warehouse equal to an uninterrupted sync's",
        took.as_secs_f64()
    );
}

/// An in-process syncer configured by `text` whose clock is its own (frozen,
/// moved only by its waits): backoff and Retry-After waits take no real time
/// and leave the emulator's data where it was.
async fn own_clock_syncer(text: &str) -> fdsync_core::sync::Syncer {
    let config = Config::from_toml(text, Path::new("test.toml"), std::iter::empty()).unwrap();
    crate::util::syncer(config, &Clock::simulated(start_time(), 0.0)).await
}

/// Upstream faults at increasing rates (5xx, connection reset, truncated
/// body and Retry-After storm, a quarter of the rate each, and slow
/// responses): runs are repeated until one completes, as a scheduler would,
/// and the warehouse ends equal to a fault-free sync's; the requests spent
/// per fault rate are reported.
#[tokio::test]
async fn upstream_faults_at_increasing_rates_end_in_the_same_warehouse() {
    let emulator = unlimited_emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let all = crate::util::test_pipelines();

    let reference = dir.path().join("reference.duckdb");
    let syncer = own_clock_syncer(&config_text(&emulator.base_url(), &reference, UNIVERSE)).await;
    let before = emulator.emulator.stats().requests;
    syncer.run_once(&all).await.1.unwrap();
    let clean = emulator.emulator.stats().requests - before;
    syncer.sink.close().await;
    let truth = content(&reference);

    // The share of responses faulted, split evenly among the four kinds that
    // fail a request (each response is also slowed at that rate).
    let rates: &[f64] = if trials(0) >= 10 {
        &[0.05, 0.1, 0.2, 0.3, 0.5]
    } else {
        &[0.1, 0.3]
    };
    let mut report = Vec::new();
    for &rate in rates {
        emulator.emulator.set_faults(Faults {
            server_error: rate / 4.0,
            reset: rate / 4.0,
            truncate: rate / 4.0,
            throttle: rate / 4.0,
            slow: rate,
            slow_ms: 20,
            ..Faults::default()
        });
        let warehouse = dir.path().join(format!("faults-{rate}.duckdb"));
        let before = emulator.emulator.stats();
        let mut runs = 0;
        loop {
            runs += 1;
            let syncer = own_clock_syncer(&config_text(&emulator.base_url(), &warehouse, UNIVERSE)).await;
            let (_, result) = syncer.run_once(&all).await;
            syncer.sink.close().await;
            if result.is_ok() {
                break;
            }
            assert!(runs < 10, "at fault rate {rate} ten runs did not complete: {result:?}");
        }
        let after = emulator.emulator.stats();
        emulator.emulator.set_faults(Faults::default());
        let found = content(&warehouse);
        for (table, expected) in &truth {
            assert_eq!(&found[table], expected, "{table} at fault rate {rate}");
        }
        assert_eq!(
            duplicate_keys(&warehouse),
            vec![],
            "duplicate keys at fault rate {rate}"
        );
        let spent = after.requests - before.requests;
        report.push(format!(
            "rate {rate}: {} faults, {spent} requests ({:.2}x), {runs} run(s)",
            after.faults_injected - before.faults_injected,
            spent as f64 / clean as f64
        ));
    }
    println!(
        "reliability: faults: fault-free sync {clean} requests; {}; every warehouse equal to the fault-free one",
        report.join("; ")
    );
}

/// The pipelines the disk tests sync first: a warehouse worth losing.
const FIRST: &[&str] = &["companies", "prices", "dividends", "macro"];

fn pipeline_args(names: &[&'static str]) -> Vec<&'static str> {
    let mut args = vec!["sync", "--once"];
    for name in names {
        args.extend(["--pipeline", name]);
    }
    args
}

/// The content of the tables `names` filled, from [`content`].
fn content_of(warehouse: &Path, tables: &[&str]) -> BTreeMap<&'static str, (i64, String)> {
    content(warehouse)
        .into_iter()
        .filter(|(t, _)| tables.contains(t))
        .collect()
}

const FIRST_TABLES: &[&str] = &[
    "companies",
    "prices_daily",
    "dividends",
    "macro_series",
    "macro_observations",
];

fn sh(cmd: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(cmd).args(args).output().unwrap()
}

/// A tmpfs mounted on a fresh folder, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size_kib: u64) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let mounted = sh(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size_kib}k"),
                "tmpfs",
                &dir.path().display().to_string(),
            ],
        );
        assert!(
            mounted.status.success(),
            "mounting a small tmpfs (the test needs root or CAP_SYS_ADMIN): {}",
            String::from_utf8_lossy(&mounted.stderr)
        );
        SmallDisk { dir }
    }

    fn resize(&self, size_kib: u64) {
        let path = self.dir.path().display().to_string();
        let done = sh("mount", &["-o", &format!("remount,size={size_kib}k"), &path]);
        assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    }

    /// Leaves `free_kib` free until the guard drops, then [`FULL_SIZE_KIB`] again.
    fn shrink(&self, free_kib: u64) -> Regrow<'_> {
        self.resize(self.used_kib() + free_kib);
        Regrow(self)
    }

    fn used_kib(&self) -> u64 {
        let out = sh("df", &["-k", "--output=used", &self.dir.path().display().to_string()]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .unwrap()
    }
}

/// The tmpfs's size before [`SmallDisk::shrink`].
const FULL_SIZE_KIB: u64 = 512 * 1024;

struct Regrow<'a>(&'a SmallDisk);

impl Drop for Regrow<'_> {
    fn drop(&mut self) {
        self.0.resize(FULL_SIZE_KIB);
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = sh("umount", &[&self.dir.path().display().to_string()]);
    }
}

/// Syncs [`FIRST`], then syncs every pipeline while the trouble `cause`
/// sets up lasts (until its guard drops): that run fails, saying each of
/// `said`; what was stored is unchanged; the next run completes with no key
/// twice. Returns the failed run's last line that says `said[0]`.
async fn fails_clearly_and_loses_nothing<G>(subject: &Subject, cause: impl FnOnce() -> G, said: &[&str]) -> String {
    let out = subject.run(&pipeline_args(FIRST)).await;
    assert!(out.status.success(), "{}", text(&out));
    let stored = content_of(&subject.warehouse(), FIRST_TABLES);
    let failed = {
        let _trouble = cause();
        let out = subject.run(&["sync", "--once"]).await;
        let failed = text(&out);
        assert_ne!(out.status.code(), Some(0), "{failed}");
        for expected in said {
            assert!(failed.contains(expected), "the error should say {expected:?}: {failed}");
        }
        failed
    };
    assert_eq!(
        content_of(&subject.warehouse(), FIRST_TABLES),
        stored,
        "rows stored before changed"
    );
    let out = subject.run(&["sync", "--once"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(duplicate_keys(&subject.warehouse()), vec![]);
    assert_eq!(content_of(&subject.warehouse(), FIRST_TABLES), stored);
    let line = failed.lines().rev().find(|l| l.contains(said[0]));
    line.unwrap_or_default().trim().to_owned()
}

/// The disk fills up in the middle of a sync: the run fails naming the
/// problem, nothing stored before is lost, and once there is room again the
/// next run completes.
#[tokio::test]
async fn a_full_disk_fails_clearly_and_loses_nothing() {
    crate::tools::needs!(Root);
    let emulator = unlimited_emulator().await;
    let disk = SmallDisk::mount(FULL_SIZE_KIB);
    let subject = Subject::in_dir(
        tempfile::tempdir_in(disk.dir.path()).unwrap(),
        &emulator.base_url(),
        false,
    );
    // Room for a few more blocks, not for a whole sync of every pipeline.
    let full = || disk.shrink(768);
    let said = fails_clearly_and_loses_nothing(
        &subject,
        full,
        &[
            "No space left on device",
            "disk holding the warehouse",
            "nothing is lost",
        ],
    )
    .await;
    println!("reliability: disk full: tmpfs with 768 KiB free: {said}");
}

/// A warehouse that cannot be written (its file and folder immutable): a
/// clear error before any request, nothing lost, and a normal run after.
#[tokio::test]
async fn a_read_only_warehouse_fails_clearly_and_loses_nothing() {
    crate::tools::needs!(Root);
    let emulator = unlimited_emulator().await;
    let subject = Subject::new(&emulator.base_url(), false);
    let warehouse = subject.warehouse();
    let read_only = || {
        let requests = emulator.emulator.stats().requests;
        (
            Immutable::set(&[&warehouse, subject.dir.path()]),
            NoRequests(&emulator, requests),
        )
    };
    let said = fails_clearly_and_loses_nothing(
        &subject,
        read_only,
        &[&warehouse.display().to_string(), "must be able to write the file"],
    )
    .await;
    println!("reliability: read-only warehouse: {said}");
}

/// `chattr +i` on a path and its folder, so even root cannot write there;
/// undone when dropped.
pub(crate) struct Immutable(Vec<PathBuf>);

impl Immutable {
    pub(crate) fn set(paths: &[&Path]) -> Immutable {
        for path in paths {
            let done = sh("chattr", &["+i", &path.display().to_string()]);
            assert!(
                done.status.success(),
                "chattr +i: {}",
                String::from_utf8_lossy(&done.stderr)
            );
        }
        Immutable(paths.iter().map(|p| p.to_path_buf()).collect())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = sh("chattr", &["-i", &path.display().to_string()]);
        }
    }
}

/// Checks, when dropped, that the emulator answered no request since `.1`.
struct NoRequests<'a>(&'a RunningEmulator, u64);

impl Drop for NoRequests<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            assert_eq!(
                self.0.emulator.stats().requests,
                self.1,
                "no request spent on a run that cannot store"
            );
        }
    }
}

/// The warehouse file open in another process (here, this test's): a clear
/// error naming what to do, nothing lost, and a normal run once it is closed.
#[tokio::test]
async fn a_warehouse_held_by_another_process_fails_clearly_and_loses_nothing() {
    let emulator = unlimited_emulator().await;
    let subject = Subject::new(&emulator.base_url(), false);
    let held = || duckdb::Connection::open(subject.warehouse()).unwrap();
    let said = fails_clearly_and_loses_nothing(&subject, held, &["another process has the database file open"]).await;
    println!("reliability: warehouse held by another process: {said}");
}

/// Where the key could leak, read back: output at every log level and in
/// both formats, `status`, the warehouse (every table, every column, and the
/// file's bytes), the lake's Parquet files and log, and what `Debug` prints
/// of the config and the client (what a panic message would show).
#[tokio::test]
async fn the_key_appears_nowhere() {
    let emulator = unlimited_emulator().await;
    let subject = Subject::new(&emulator.base_url(), true);
    let mut seen = String::new();
    let levels: &[&[&str]] = &[
        &["-q"],
        &[],
        &["-v"],
        &["-vv"],
        &["-vvv"],
        &["--log-format", "json", "-vvv"],
    ];
    for level in levels {
        let mut args = level.to_vec();
        args.extend(pipeline_args(&["companies", "prices", "news", "events"]));
        let out = subject.run(&args).await;
        assert!(out.status.success(), "{}", text(&out));
        seen.push_str(&text(&out));
    }
    for args in [&["status"][..], &["status", "--json"], &["lake", "publish"]] {
        seen.push_str(&text(&subject.run(args).await));
    }
    assert!(!seen.contains(TEST_KEY), "the key is in the output");
    assert!(seen.contains("Pipeline finished"), "the trace was read");

    let conn = read_only(&subject.warehouse());
    let mut tables = 0;
    for table in catalogue() {
        let sql = format!(
            "SELECT count(*) FROM \"{}\" AS t WHERE t::VARCHAR LIKE '%' || ? || '%'",
            table.name
        );
        let hits: i64 = conn.query_row(&sql, [TEST_KEY], |r| r.get(0)).unwrap();
        assert_eq!(hits, 0, "the key is in {}", table.name);
        tables += 1;
    }
    drop(conn);
    let mut stack = vec![subject.dir.path().to_path_buf()];
    let mut scanned = 0;
    let reader = duckdb::Connection::open_in_memory().unwrap();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path == subject.config {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                !bytes.windows(TEST_KEY.len()).any(|w| w == TEST_KEY.as_bytes()),
                "the key is in {}",
                path.display()
            );
            // Parquet compresses its pages: read the rows back too.
            if path.extension().is_some_and(|e| e == "parquet") {
                let sql = format!(
                    "SELECT count(*) FROM read_parquet('{}') AS t WHERE t::VARCHAR LIKE '%' || ? || '%'",
                    path.display()
                );
                let hits: i64 = reader.query_row(&sql, [TEST_KEY], |r| r.get(0)).unwrap();
                assert_eq!(hits, 0, "the key is in the rows of {}", path.display());
            }
            scanned += 1;
        }
    }
    let key = fdsync_core::config::Credential::parse(TEST_KEY, "test").unwrap();
    let syncer = own_clock_syncer(&config_text(
        &emulator.base_url(),
        &subject.dir.path().join("debug.duckdb"),
        UNIVERSE,
    ))
    .await;
    let debug = format!("{key:?} {key} {:?} {:?}", syncer.config, syncer.client);
    assert!(!debug.contains(TEST_KEY), "Debug shows the key: {debug}");
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        panic!("while syncing with {key:?}: {:?}", syncer.client)
    }))
    .unwrap_err();
    let message = panicked.downcast_ref::<String>().unwrap();
    assert!(!message.contains(TEST_KEY), "a panic message shows the key");
    println!(
        "reliability: secrets: output at 6 log levels and formats, status, lake publish; {tables} tables; \
         {scanned} files (warehouse, lake Parquet and log); Debug and a panic message: no key"
    );
}

/// Bad input from the network and from config, generated: never a panic;
/// a record the mappers cannot use is quarantined with its reason.
mod garbage {
    use std::collections::BTreeMap;
    use std::path::Path;

    use chrono::{DateTime, Utc};
    use fdsync_core::feeds::events::read_item_text;
    use fdsync_core::feeds::news::{self, NewsPage};
    use fdsync_core::feeds::prices::{self, PricesPage};
    use fdsync_core::records::Rows;
    use fdsync_core::upstream::ratelimit::{QuotaWindow, RateWindow, retry_after};
    use futures::StreamExt;
    use proptest::prelude::*;
    use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
    use serde_json::Value;

    /// Keys the mappers look for, and others.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => prop::sample::select(vec![
                "id", "publishedAt", "firstSeenAt", "updatedAt", "headline", "snippet", "body", "url",
                "source", "licenceClass", "tickers", "ciks", "people", "indicators", "topics",
                "storylineId", "rewritten", "name", "attribution", "t", "o", "h", "l", "c", "v", "date",
            ])
            .prop_map(str::to_owned),
            1 => "[a-zA-Z_]{0,8}",
        ]
    }

    /// Any JSON, leaning towards the shapes and values the service sends.
    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("JSON numbers are finite", |f| f.is_finite())
                .prop_map(Value::from),
            ".{0,16}".prop_map(Value::from),
            "[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2}))?"
                .prop_map(Value::from),
            "n_[0-9]{10}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map(key(), inner, 0..10)
                    .prop_map(|m: BTreeMap<String, Value>| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn rows() -> Rows {
        Rows::new(
            "run-garbage",
            "/api/v1/garbage",
            "2026-11-25T23:00:00Z".parse().unwrap(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(super::trials(1) as u32 * 256))]

        /// A feed page of anything: each item is mapped or quarantined, and
        /// the rows always make valid batches.
        #[test]
        fn news_items_are_mapped_or_quarantined(items in prop::collection::vec(json(), 0..8)) {
            let body = serde_json::json!({"items": items, "latestId": null, "nextCursor": null, "hasMore": false}).to_string();
            let page: NewsPage = serde_json::from_str(&body).unwrap();
            let mut rows = rows();
            for raw in &page.items {
                let quarantined = rows.quarantined.len();
                if news::read_item(&mut rows, raw, None).is_none() {
                    prop_assert_eq!(rows.quarantined.len(), quarantined + 1, "{}", raw.get());
                }
            }
            prop_assert!(rows.into_batches().is_ok());
        }

        /// Any bytes where a page is expected: a parse error or a page, never a panic.
        #[test]
        fn any_bytes_as_a_page_never_panic(body in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = serde_json::from_slice::<NewsPage>(&body);
            let _ = serde_json::from_slice::<PricesPage>(&body);
        }

        /// A price page whose bars are anything: mapped or quarantined.
        #[test]
        fn price_bars_are_mapped_or_quarantined(bars in prop::collection::vec(json(), 0..8), symbol in ".{0,6}") {
            let body = serde_json::json!({"symbol": symbol, "bars": bars}).to_string();
            let page: PricesPage = serde_json::from_str(&body).unwrap();
            let mut rows = rows();
            prices::read(&mut rows, &page, "0000320193");
            prop_assert!(rows.row_count() + rows.quarantined.len() >= page.bars.len());
            prop_assert!(rows.into_batches().is_ok());
        }

        /// A plain-text item body of any text is stored as it came, and its
        /// `raw` is that text as a JSON string.
        #[test]
        fn item_texts_are_kept_verbatim(text in any::<String>()) {
            let mut rows = rows();
            read_item_text(&mut rows, &text, "0000320193", "0000320193-26-000001", "8.01");
            let batches = rows.into_batches().unwrap();
            let batch = &batches[0].batch;
            let column = |name: &str| {
                batch.column_by_name(name).unwrap().as_any().downcast_ref::<arrow::array::StringArray>().unwrap().value(0).to_owned()
            };
            prop_assert_eq!(column("text"), text.clone());
            prop_assert_eq!(serde_json::from_str::<String>(&column("raw")).unwrap(), text);
        }

        /// Rate-limit headers in either form, quota headers and Retry-After,
        /// with any bytes as values: read or ignored, never a panic, and no
        /// wait longer than a monthly quota's reset.
        #[test]
        fn rate_limit_headers_never_panic(
            values in prop::collection::vec(prop_oneof![
                "[0-9]{0,6}(\\.[0-9]{0,3})?",
                "-?[0-9e.+-]{0,12}",
                "\"minute\";(q|r|t|w)=[0-9a-z\"-]{0,5}(;[a-z]=[0-9]{0,4}){0,3}(, \"day\";r=[0-9]{0,5}){0,1}",
                "(Mon|Tue|Wed), [0-9]{2} (Jan|Nov|Dec) [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT",
                "[ -~]{0,24}",
            ], 10),
            offset_secs in -10_000_000_000i64..10_000_000_000,
        ) {
            let names = [
                "ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "ratelimit-policy", "ratelimit",
                "x-quota-limit", "x-quota-remaining", "x-quota-reset", "x-credits-remaining-usd", "retry-after",
            ];
            let mut headers = HeaderMap::new();
            for (name, value) in names.iter().zip(&values) {
                if let Ok(v) = HeaderValue::from_str(value) {
                    headers.insert(HeaderName::from_static(name), v);
                }
            }
            let now: DateTime<Utc> = "2026-11-25T23:00:00Z".parse().unwrap();
            let now = now + chrono::Duration::seconds(offset_secs % 100_000_000);
            let rate = RateWindow::from_headers(&headers);
            let quota = QuotaWindow::from_headers(&headers).bounded(now);
            if let Some(wait) = retry_after(&headers, now) {
                prop_assert!(!wait.is_zero() && wait.as_secs() <= 31 * 86_400, "{:?} from {:?}", wait, headers.get("retry-after"));
            }
            prop_assert!(quota.reset_at.is_none_or(|at| at <= now + chrono::Duration::days(31)), "{:?}", quota.reset_at);
            // What consumes them: the pacer, on a clock that moves only when
            // it waits. A request after any answer goes within a window and
            // its margin; the answer itself never panics.
            let clock = fdsync_core::clock::Clock::simulated(now, 0.0);
            let pacer = fdsync_core::upstream::ratelimit::Pacer::new(clock.clone(), None);
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let waited = runtime.block_on(async {
                pacer.acquire().await;
                pacer.observe(Some(&rate));
                let before = clock.now();
                pacer.acquire().await;
                clock.now() - before
            });
            prop_assert!(waited <= chrono::Duration::seconds(62), "waited {} after {:?}", waited, rate);
        }

        /// A stream of any bytes, cut anywhere, with real frames among them:
        /// every `items` frame is a page or a parse error, never a panic.
        #[test]
        fn sse_frames_never_panic(
            chunks in prop::collection::vec(prop_oneof![
                prop::collection::vec(any::<u8>(), 0..40),
                json().prop_map(|v| format!("event: items\ndata: {{\"items\": [{v}], \"latestId\": \"n_0000000001\"}}\n\n").into_bytes()),
                Just(b": ping\n\n".to_vec()),
                Just(b"event: items\ndata: {\"items\": [\n\n".to_vec()),
                Just(b"retry: 1000\nid: 7\r\n\r\n".to_vec()),
            ], 0..8),
        ) {
            let stream = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
            let events: Vec<_> = futures::executor::block_on(stream.map(|c| c.map(bytes::Bytes::from)).eventsource_collect());
            let mut rows = rows();
            for event in events.into_iter().flatten() {
                if event.event == "items"
                    && let Ok(page) = serde_json::from_str::<NewsPage>(&event.data) {
                        for raw in &page.items {
                            let _ = news::read_item(&mut rows, raw, None);
                        }
                    }
            }
            prop_assert!(rows.into_batches().is_ok());
        }

        /// Any text as the config file: a config or an error naming the file.
        #[test]
        fn any_config_text_is_a_config_or_a_clear_error(text in "[ -~\\n]{0,200}") {
            if let Err(e) = fdsync_core::config::Config::from_toml(&text, Path::new("bad.toml"), std::iter::empty()) {
                prop_assert!(e.to_string().contains("bad.toml"), "{}", e);
            }
        }

        /// A working config with one setting given a value of any type: a
        /// config or an error that names the setting.
        #[test]
        fn a_wrong_setting_is_named(
            setting in prop::sample::select(vec![
                ("upstream", "base_url"), ("upstream", "timeout_secs"), ("upstream", "concurrency"),
                ("upstream", "max_attempts"), ("warehouse", "duckdb"), ("warehouse", "memory_limit_mb"),
                ("warehouse", "release_when_idle_ms"), ("universe", "companies"), ("pipelines", "dir"),
            ]),
            value in prop_oneof![
                Just("-1".to_owned()), Just("\"\"".to_owned()), Just("[1, \"a\"]".to_owned()),
                Just("{ a = 1 }".to_owned()), Just("1e400".to_owned()), "\"[ -~]{0,12}\"", "-?[0-9]{1,20}",
            ],
        ) {
            let (section, key) = setting;
            static BASE: std::sync::LazyLock<(tempfile::TempDir, String)> = std::sync::LazyLock::new(|| {
                let dir = tempfile::tempdir().unwrap();
                let text = super::config_text("http://127.0.0.1:9", &dir.path().join("w.duckdb"), &["AAPL"]);
                (dir, text)
            });
            let text = BASE.1.replace(&format!("[{section}]\n"), &format!("[{section}]\n{key} = {value}\n"));
            if let Err(e) = fdsync_core::config::Config::from_toml(&text, Path::new("bad.toml"), std::iter::empty()) {
                let said = e.to_string();
                prop_assert!(said.contains(key) || said.contains("bad.toml"), "{}", said);
            }
        }
    }

    /// Reads a stream of byte chunks as SSE events, all of them.
    trait CollectEvents {
        fn eventsource_collect(
            self,
        ) -> impl std::future::Future<Output = Vec<Result<eventsource_stream::Event, String>>>;
    }

    impl<S> CollectEvents for S
    where
        S: futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Unpin,
    {
        async fn eventsource_collect(self) -> Vec<Result<eventsource_stream::Event, String>> {
            use eventsource_stream::Eventsource;
            self.eventsource().map(|e| e.map_err(|e| e.to_string())).collect().await
        }
    }
}

/// A commit failing in the middle of a per-company pipeline (the disk fills
/// up), while the fetching waits for room for the rows not yet committed:
/// the run ends (it does not hang) with an error that says what to do, and
/// what was committed before is kept.
#[tokio::test]
async fn a_commit_failing_while_the_fetching_waits_ends_the_run() {
    crate::tools::needs!(Root);
    let emulator = unlimited_emulator().await;
    let disk = SmallDisk::mount(6 * 1024);
    let warehouse = disk.dir.path().join("wh.duckdb");
    let generated: Vec<String> = (0..30).map(|i| format!("S{i:04}")).collect();
    let companies: Vec<&str> = generated.iter().map(String::as_str).collect();
    // The least memory limit commits the fewest companies at once and keeps
    // the fewest rows fetched ahead, so the fetching soon waits.
    let text = config_text(&emulator.base_url(), &warehouse, &companies).replace(
        "[warehouse]\n",
        &format!(
            "[warehouse]\nmemory_limit_mb = {}\n",
            fdsync_core::config::MIN_MEMORY_LIMIT_MB
        ),
    );
    let pipelines: Vec<_> = crate::util::test_pipelines()
        .into_iter()
        .filter(|p| ["companies", "prices"].contains(&p.name.as_str()))
        .collect();
    let syncer = own_clock_syncer(&text).await;
    // A guard against the hang this test is about, not a timing.
    let (_, result) = tokio::time::timeout(std::time::Duration::from_secs(300), syncer.run_once(&pipelines))
        .await
        .expect("the run ended");
    let said = result.unwrap_err().to_string();
    assert!(said.contains("disk holding the warehouse"), "{said}");
    let count = |sql: &'static str| {
        syncer
            .sink
            .call(move |s| s.connection().query_row(sql, [], |r| r.get::<_, i64>(0)))
    };
    assert_eq!(count("SELECT count(*) FROM companies").await.unwrap().unwrap(), 30);
    let bars = count("SELECT count(*) FROM prices_daily").await.unwrap().unwrap();
    println!("reliability: a commit failing while the fetching waits: the run ended after {bars} bars: {said}");
}
