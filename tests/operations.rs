//! Running as a service: the live stream across closes and drops, the daemon
//! stopped by SIGTERM mid-backfill, one writer per warehouse, status and metrics.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use fdsync_core::clock::Clock;
use fdsync_core::sink::SinkHandle;
use fdsync_emulator::{Faults, PlanLimits, StreamTiming, news};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::util::{Harness, TEST_KEY, config_text, emulator_config, frozen_clock};

/// Polls `check` until it holds, failing after `limit`: a wait for a
/// condition, not a sleep standing in for one.
async fn wait_for<F: std::future::Future<Output = bool>>(what: &str, limit: Duration, mut check: impl FnMut() -> F) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The stream over four simulated hours, with the server closing every
/// connection after 300 ms and one connection cut mid-flight: every item
/// arrives, in its last version, delivered once as new; every rewrite once.
#[tokio::test]
async fn the_stream_delivers_every_item_once_across_server_closes_and_a_dropped_link() {
    let h = Harness::with_emulator(streaming_emulator(), &["MSFT"]).await;
    let pipeline = h.only(&["news"]).remove(0);
    let world = h.emulator.emulator.world().clone();
    let sim = h.clock.as_sim().unwrap().clone();
    let started = h.clock.now();
    let first = news::CADENCE.count_at(world.seed, started);
    let shutdown = CancellationToken::new();

    let stream = h.syncer.run_stream(&pipeline, &shutdown, false);
    let drive = async {
        // Connected first: a stream with no cursor starts at the head.
        stream_connected(&h, 0).await;
        let mut dropped = 0;
        for step in 0..12 {
            sim.advance(Duration::from_secs(20 * 60));
            if step == 6 {
                wait_for("an open stream to cut", Duration::from_secs(20), || async {
                    h.emulator.emulator.drop_streams() > 0
                })
                .await;
                dropped += 1;
            }
            // The server closes a stream after `close_after` of wall time: on a
            // fast machine the steps can all pass within one connection, so
            // twice the test waits for a server close and the reconnect it
            // brings (every request of a stream is a connection).
            if step == 2 || step == 9 {
                let connected = h.emulator.emulator.stats().requests;
                wait_for(
                    "the server to close the stream and fdsync to reconnect",
                    Duration::from_secs(20),
                    || async { h.emulator.emulator.stats().requests > connected },
                )
                .await;
            }
            stream_caught_up(&h).await;
        }
        shutdown.cancel();
        dropped
    };
    let (report, dropped) = tokio::join!(stream, drive);
    let report = report.unwrap();
    let last = h.clock.now();
    let count = news::CADENCE.count_at(world.seed, last);

    assert!(report.connections >= 4, "several server closes: {report:?}");
    assert!(
        report.dropped >= dropped && dropped == 1,
        "a connection was cut: {report:?}"
    );
    // Every item from the stream's start to the head, and the older items
    // whose headlines were rewritten while it ran (the service sends those too).
    let lookback = news::CADENCE.first_at_or_after(started - chrono::Duration::minutes(news::MAX_REWRITE_MINUTES + 1));
    let older_rewritten: Vec<u64> = (lookback..first)
        .filter(|n| news::rewritten_at(world.seed, *n).is_some_and(|t| t > started && t <= last))
        .collect();
    assert!(
        !older_rewritten.is_empty(),
        "the scenario rewrites items older than the stream"
    );
    let expected: Vec<u64> = older_rewritten.iter().copied().chain(first..count).collect();
    let ids = h.strings("SELECT id FROM news_items ORDER BY id").await;
    assert_eq!(ids, expected.iter().map(|n| news::id(*n)).collect::<Vec<_>>());
    assert_eq!(
        report.new_items,
        count - first,
        "each item delivered as new exactly once"
    );
    let mut truth = BTreeSet::new();
    for n in expected {
        let it = news::item(&world, n, last).unwrap();
        truth.insert(format!("{}|{}", it.body.id, it.body.headline));
    }
    let stored: BTreeSet<String> = h
        .strings("SELECT id || '|' || headline FROM news_items")
        .await
        .into_iter()
        .collect();
    assert_eq!(stored, truth, "every item in the version served last");
    let revisions = h.int("SELECT count(*) FROM news_headline_revisions").await;
    assert!(report.rewrites > 0, "the scenario rewrites delivered headlines");
    assert_eq!(
        revisions as u64,
        (count - first) + report.rewrites,
        "every version delivered once and kept: {report:?}"
    );
    h.assert_unique("news_headline_revisions", "id, updated_at").await;
    let run = h
        .strings("SELECT status FROM _sync_runs WHERE pipeline = 'news:stream'")
        .await;
    assert_eq!(run, ["ok"], "the stream session is in the run log");
}

/// An emulator whose news stream closes every 300 ms of wall time.
fn streaming_emulator() -> fdsync_emulator::EmulatorConfig {
    let mut config = emulator_config(&frozen_clock(), PlanLimits::build());
    config.stream = StreamTiming {
        ping: Duration::from_millis(40),
        close_after: Duration::from_millis(300),
        poll: Duration::from_millis(5),
    };
    config
}

/// Waits until the stream has connected (its first request).
async fn stream_connected(h: &Harness, requests_before: u64) {
    wait_for("the stream to connect", Duration::from_secs(20), || async {
        h.emulator.emulator.stats().requests > requests_before
    })
    .await;
}

/// Waits until the news stream's committed cursor is the newest item served.
async fn stream_caught_up(h: &Harness) {
    let world = h.emulator.emulator.world().clone();
    wait_for("the stream to catch up", Duration::from_secs(30), || async {
        let head = news::id(news::CADENCE.count_at(world.seed, h.clock.now()) - 1);
        let committed = h
            .strings("SELECT cursor FROM _sync_checkpoints WHERE pipeline = 'news' AND \"partition\" = 'stream'")
            .await;
        committed.first().is_some_and(|c| c.contains(&format!("\"{head}\"")))
    })
    .await;
}

/// A daemon whose only activity is the live stream (news polled once
/// before, its schedule not firing again): the lake is published while
/// frames commit, at most every `stream_publish_secs`, and once at the
/// stop, so it ends holding exactly the warehouse's items.
#[tokio::test]
async fn a_daemon_with_only_the_stream_publishes_the_lake() {
    use fdsync_core::lake::Lake;

    let mut h = Harness::with_emulator(streaming_emulator(), &["MSFT"]).await;
    let lake_dir = h._tempdir.path().join("lake");
    h.restart(|c| {
        c.warehouse.parquet_dir = Some(lake_dir.display().to_string());
        c.daemon.stream_publish_secs = 30 * 60;
    })
    .await;
    let mut pipelines = h.only(&["news"]);
    pipelines[0].params.backfill_days = Some(1);
    let (_, result) = h.syncer.run_once(&pipelines).await;
    result.unwrap();
    let polled = h.int("SELECT count(*) FROM news_items").await;
    pipelines[0].auto = false;
    // A date that never comes: the daemon would sleep its simulated clock to a firing.
    pipelines[0].schedule = fdsync_core::pipeline::parse_schedule("0 0 30 2 *").unwrap();

    let config = h.syncer.config.clone();
    h.syncer.sink.close().await;
    let syncer = std::sync::Arc::new(crate::util::syncer(config.clone(), &h.clock).await);
    // The test reads through the daemon's writer: one writer per file.
    h.syncer.sink = syncer.sink.clone();
    let daemon = fdsync_core::daemon::Daemon {
        syncer,
        pipelines,
        stream: fdsync_core::config::StreamMode::On,
        metrics_addr: None,
        stale_after: None,
        lake: Lake::configured(&config.warehouse).unwrap().map(std::sync::Arc::new),
    };
    let shutdown = CancellationToken::new();
    let polled_requests = h.emulator.emulator.stats().requests;
    let running = tokio::spawn(daemon.run(shutdown.clone()));
    stream_connected(&h, polled_requests).await;
    let sim = h.clock.as_sim().unwrap().clone();
    let versions = || {
        std::fs::read_dir(lake_dir.join("news_items/_delta_log"))
            .map(|dir| {
                dir.filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "json"))
                    .count()
            })
            .unwrap_or(0)
    };
    // Each step passes the interval: the commit that follows it publishes.
    for step in 1..=3 {
        sim.advance(Duration::from_secs(40 * 60));
        stream_caught_up(&h).await;
        wait_for("a publish while streaming", Duration::from_secs(60), || async {
            versions() >= step
        })
        .await;
    }
    sim.advance(Duration::from_secs(10 * 60));
    stream_caught_up(&h).await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the daemon stops on request")
        .unwrap()
        .expect("a clean stop");

    h.syncer = crate::util::syncer(config.clone(), &h.clock).await;
    let stored = h.strings("SELECT id FROM news_items ORDER BY id").await;
    assert!(stored.len() as i64 > polled, "the stream added items");
    let runs = h.strings("SELECT pipeline FROM _sync_runs ORDER BY started_at").await;
    let scheduled = runs.iter().filter(|p| *p == "news").count() - 1;
    let lake = Lake::configured(&config.warehouse).unwrap().unwrap();
    let table = &fdsync_core::feeds::news::NEWS_ITEMS;
    let delta = fdsync_core::lake::delta::open_existing(lake.root(), table)
        .await
        .unwrap()
        .expect("news_items published");
    let files: Vec<String> = fdsync_core::lake::delta::live_files(&delta, table)
        .unwrap()
        .into_iter()
        .map(|f| format!("'{}'", lake_dir.join("news_items").join(&f.path).display()))
        .collect();
    let in_lake = h
        .strings(&format!(
            "SELECT id FROM read_parquet([{}], hive_partitioning = false) ORDER BY id",
            files.join(", ")
        ))
        .await;
    assert_eq!(in_lake, stored, "the lake holds the warehouse's items");
    assert_eq!(scheduled, 0, "{runs:?}");
    assert_eq!(
        versions(),
        4,
        "three publishes on the interval, and the stop's with the last ten minutes"
    );
}

/// A stream whose frames hold their items newest first does not follow on
/// from its cursor, as the poll's forward pages must: no such frame is
/// stored, the session is `partial`, and once the service sends them
/// oldest first the stream catches up with nothing lost.
#[tokio::test]
async fn a_stream_frame_that_does_not_follow_on_is_not_stored_and_nothing_is_lost() {
    let h = Harness::with_emulator(streaming_emulator(), &["MSFT"]).await;
    let mut pipeline = h.only(&["news"]).remove(0);
    pipeline.params.backfill_days = Some(1);
    // Polled first: the stream goes on from the poll's cursor.
    let (_, result) = h.syncer.run_once(std::slice::from_ref(&pipeline)).await;
    result.unwrap();
    let polled = h.int("SELECT count(*) FROM news_items").await;
    let world = h.emulator.emulator.world().clone();
    let first = news::CADENCE.count_at(world.seed, h.clock.now());
    h.emulator
        .emulator
        .set_quirks(fdsync_emulator::Quirks::parse("after_newest_first").unwrap());
    // The poll's requests are counted too: the stream's connections are
    // those beyond them.
    let polled_requests = h.emulator.emulator.stats().requests;
    let connections = || h.emulator.emulator.stats().requests - polled_requests;
    let shutdown = CancellationToken::new();
    let stream = h.syncer.run_stream(&pipeline, &shutdown, false);
    let drive = async {
        stream_connected(&h, polled_requests).await;
        h.clock.as_sim().unwrap().advance(Duration::from_secs(30 * 60));
        // Refused frames: the stream connects again and again. The second
        // connection began after the advance, so it was served newest first.
        wait_for(
            "the stream to refuse frames and reconnect",
            Duration::from_secs(30),
            || async { connections() >= 3 },
        )
        .await;
        let refused_stored = h.int("SELECT count(*) FROM news_items").await;
        h.emulator.emulator.set_quirks(fdsync_emulator::Quirks::default());
        stream_caught_up(&h).await;
        shutdown.cancel();
        refused_stored
    };
    let (report, refused_stored) = tokio::join!(stream, drive);
    report.unwrap();
    assert_eq!(refused_stored, polled, "no newest-first frame stored");
    let count = news::CADENCE.count_at(world.seed, h.clock.now());
    let ids = h.strings("SELECT id FROM news_items ORDER BY id").await;
    let expected: Vec<String> = (first..count).map(news::id).collect();
    assert!(
        expected.iter().all(|id| ids.contains(id)),
        "every item since the stream started: {} of {}",
        ids.len(),
        expected.len()
    );
    let run = h
        .strings("SELECT status FROM _sync_runs WHERE pipeline = 'news:stream'")
        .await;
    assert_eq!(run, ["partial"], "the refused frames are in the run log");
}

/// A config file and a pipelines folder whose news backfill is `days` long.
fn write_config(dir: &Path, base_url: &str, backfill_days: u32) -> PathBuf {
    let text = config_text(base_url, &dir.join("wh.duckdb"), &["MSFT"]);
    let news = dir.join("pipelines/news.toml");
    let edited = std::fs::read_to_string(&news)
        .unwrap()
        .replace("backfill_days = 7\n", &format!("backfill_days = {backfill_days}\n"));
    assert!(edited.contains(&format!("\nbackfill_days = {backfill_days}\n")));
    std::fs::write(&news, edited).unwrap();
    let config = dir.join("fdsync.toml");
    std::fs::write(&config, format!("{text}\n[daemon]\nmetrics_addr = \"127.0.0.1:0\"\n")).unwrap();
    config
}

fn fdsync(config: &Path, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_fdsync"));
    cmd.arg("--config")
        .arg(config)
        .args(["--log-format", "json"])
        .args(args)
        .env("FDSYNC_TEST_KEY_UNSET", TEST_KEY)
        .kill_on_drop(true);
    cmd
}

/// Reads the daemon's JSON log lines until one carries `field` with a
/// message `message`; returns that field.
async fn log_field(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
    message: &str,
    field: &str,
) -> String {
    while let Some(line) = lines.next_line().await.unwrap() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        // Flat: the message and the fields beside level and target.
        assert!(event["level"].is_string() && event["target"].is_string(), "{line}");
        if event["message"] == message {
            return event[field].as_str().unwrap_or_default().to_owned();
        }
    }
    panic!("the log ended before {message:?}");
}

/// One sample of a Prometheus text page.
fn sample(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// SIGTERM mid-backfill: the daemon exits 0; what it committed matches its
/// checkpoint (a contiguous run of items down to the `before` cursor); a
/// later `sync --once` completes the tape with nothing lost or duplicated.
#[tokio::test]
async fn sigterm_mid_backfill_leaves_consistent_checkpoints_and_a_later_run_completes() {
    let mut config = emulator_config(&Clock::System, PlanLimits::build());
    config.faults = Faults::parse("slow=1.0,slow_ms=100").unwrap();
    let emulator = crate::util::spawn(config).await;
    let world = emulator.emulator.world().clone();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &emulator.base_url(), 3);
    let mut daemon = fdsync(&config, &["daemon", "--pipeline", "news"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(daemon.stderr.take().unwrap()).lines();
    let metrics = log_field(&mut log, "Metrics served.", "url").await;
    let http = reqwest::Client::new();
    let news_rows = || async {
        let page = http.get(&metrics).send().await.unwrap().text().await.unwrap();
        sample(&page, "fdsync_rows_written_total{table=\"news_items\"}")
    };
    wait_for("ten pages committed", Duration::from_secs(60), || async {
        news_rows().await >= 2000.0
    })
    .await;
    let page = http.get(&metrics).send().await.unwrap().text().await.unwrap();
    assert!(sample(&page, "fdsync_requests_total{status=\"200\"}") >= 10.0, "{page}");
    assert!(page.contains("fdsync_quota_remaining"), "{page}");

    crate::util::sigterm(&daemon).await;
    let drain = tokio::spawn(async move { while let Ok(Some(_)) = log.next_line().await {} });
    let status = tokio::time::timeout(Duration::from_secs(30), daemon.wait())
        .await
        .expect("the daemon stops within 30 s of SIGTERM")
        .unwrap();
    drain.await.unwrap();
    assert_eq!(status.code(), Some(0), "a clean stop exits 0");

    // What was committed is what the checkpoint says: every item from the
    // backfill's `before` cursor up to the newest, no gap.
    let warehouse = dir.path().join("wh.duckdb");
    let sink = SinkHandle::open_duckdb(warehouse.clone()).await.unwrap();
    let (cursor, ids) = sink
        .call(|s| {
            let c = s.connection();
            let cursor: String = c
                .query_row(
                    "SELECT cursor FROM _sync_checkpoints WHERE pipeline = 'news' AND \"partition\" = ''",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            let mut stmt = c.prepare("SELECT id FROM news_items ORDER BY id").unwrap();
            let ids: Vec<String> = stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
            (cursor, ids)
        })
        .await
        .unwrap();
    sink.close().await;
    let cursor: serde_json::Value = serde_json::from_str(&cursor).unwrap();
    let before = cursor["before"].as_str().expect("the backfill was cut short");
    let after = news::parse_id(cursor["after"].as_str().unwrap()).unwrap();
    // The poll's rows; the live stream's (newer than `after`) have their own cursor.
    let numbers: Vec<u64> = ids
        .iter()
        .map(|i| news::parse_id(i).unwrap())
        .filter(|n| *n <= after)
        .collect();
    assert_eq!(
        ids[0], before,
        "stored rows reach exactly the checkpoint's before cursor"
    );
    assert_eq!(*numbers.last().unwrap(), after);
    assert_eq!(
        numbers.len() as u64,
        after - numbers[0] + 1,
        "no gap between the checkpoint's before and after"
    );

    let out = fdsync(&config, &["sync", "--once", "--pipeline", "news"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let sink = SinkHandle::open_duckdb(warehouse).await.unwrap();
    let (ids, dupes, cursor) = sink
        .call(|s| {
            let c = s.connection();
            let mut stmt = c.prepare("SELECT id FROM news_items ORDER BY id").unwrap();
            let ids: Vec<String> = stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
            let dupes: i64 = c
                .query_row(
                    "SELECT count(*) FROM (SELECT id, updated_at FROM news_headline_revisions GROUP BY ALL HAVING count(*) > 1)",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            let cursor: String = c
                .query_row(
                    "SELECT cursor FROM _sync_checkpoints WHERE pipeline = 'news' AND \"partition\" = ''",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            (ids, dupes, cursor)
        })
        .await
        .unwrap();
    let cursor: serde_json::Value = serde_json::from_str(&cursor).unwrap();
    // Reached past the horizon, three days back; `before` kept for a horizon raised later.
    let reached: chrono::DateTime<chrono::Utc> = cursor["reached"].as_str().unwrap().parse().unwrap();
    assert!(
        reached < chrono::Utc::now() - chrono::Duration::days(3),
        "the backfill finished: {cursor}"
    );
    assert!(cursor["before"].is_string(), "{cursor}");
    let numbers: Vec<u64> = ids.iter().map(|i| news::parse_id(i).unwrap()).collect();
    let oldest_needed = news::CADENCE.first_at_or_after(reached);
    let head = news::parse_id(cursor["after"].as_str().unwrap()).unwrap();
    assert!(numbers[0] <= oldest_needed, "the backfill reached the horizon");
    assert_eq!(*numbers.last().unwrap(), head, "the forward poll reached the head");
    assert_eq!(
        numbers.len() as u64,
        head - numbers[0] + 1,
        "every item from the horizon to the head, each once"
    );
    assert!(head < news::CADENCE.count_at(world.seed, chrono::Utc::now()));
    assert_eq!(dupes, 0, "no revision twice");
}

/// While one process writes the warehouse, a second writer is told who holds
/// it (not a DuckDB lock error), and `fdsync status` reads it meanwhile.
#[tokio::test]
async fn a_second_writer_is_told_who_holds_the_warehouse_and_status_reads_meanwhile() {
    let emulator = crate::util::spawn(emulator_config(&Clock::System, PlanLimits::build())).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &emulator.base_url(), 1);
    let out = fdsync(&config, &["sync", "--once", "--pipeline", "news"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    let mut stream = fdsync(&config, &["stream"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(stream.stderr.take().unwrap()).lines();
    log_field(&mut log, "Live stream connected.", "route").await;
    let drain = tokio::spawn(async move { while let Ok(Some(_)) = log.next_line().await {} });

    let second = fdsync(&config, &["sync", "--once"]).output().await.unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{err}");
    assert!(err.contains("in use by another fdsync writer"), "{err}");
    assert!(err.contains("`fdsync stream`"), "names the holder: {err}");
    assert!(err.contains(&format!("pid {}", stream.id().unwrap())), "{err}");
    assert!(!err.contains("Conflicting lock"), "not DuckDB's own message: {err}");

    let status = fdsync(&config, &["status", "--json"]).output().await.unwrap();
    assert_eq!(
        status.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["writer"]["command"], "fdsync stream");
    let news = status["pipelines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pipeline"] == "news")
        .unwrap();
    assert_eq!(news["last_run"]["status"], "ok");
    assert!(news["last_run"]["rows_written"].as_i64().unwrap() > 0);
    assert!(news["freshness_secs"].as_i64().unwrap() >= 0);
    assert!(news["checkpoint"].as_str().unwrap().contains("after"));
    assert_eq!(status["quota"][0]["limit"], 100_000);

    crate::util::sigterm(&stream).await;
    let code = tokio::time::timeout(Duration::from_secs(30), stream.wait())
        .await
        .expect("the stream stops on SIGTERM")
        .unwrap();
    drain.await.unwrap();
    assert_eq!(code.code(), Some(0));
}

/// The warehouse writer dies under a running daemon (a job panics): the
/// daemon stops with an error within seconds, so that its supervisor starts
/// a new process rather than keep one that can never commit. (`/healthz`
/// meanwhile: the daemon's unit test.)
#[tokio::test]
async fn a_dead_writer_stops_the_daemon_with_an_error() {
    let h = Harness::new(PlanLimits::build(), &["MSFT"]).await;
    let config = h.syncer.config.clone();
    h.syncer.sink.close().await;
    // On the system clock, as the binary runs: a frozen one would fire the
    // schedules back to back.
    let syncer = crate::util::syncer(config, &Clock::System).await;
    let sink = syncer.sink.clone();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let daemon = fdsync_core::daemon::Daemon {
        syncer: std::sync::Arc::new(syncer),
        pipelines: h.only(&["indices"]),
        stream: fdsync_core::config::StreamMode::Off,
        metrics_addr: Some(port),
        stale_after: None,
        lake: None,
    };
    let running = tokio::spawn(daemon.run(CancellationToken::new()));
    let url = format!("http://{port}/healthz");
    wait_for("a healthy daemon", Duration::from_secs(10), || async {
        reqwest::get(&url).await.is_ok_and(|r| r.status() == 200)
    })
    .await;
    let killed = sink
        .call(|_| -> () { panic!("the test kills the warehouse writer") })
        .await;
    assert!(killed.is_err(), "the job's panic ends the writer");
    let stopped = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the daemon stops within seconds")
        .unwrap();
    let err = stopped.expect_err("a dead writer is an error exit");
    assert!(err.to_string().contains("writer stopped"), "{err}");
    assert_ne!(err.exit_code(), 0);
}

/// The service refuses the live stream (403 to this key): the daemon asks
/// again later and later rather than stop or reconnect at once, and its
/// pipelines keep running on their schedules, news polling among them.
#[tokio::test]
async fn a_stream_refused_403_keeps_the_daemons_pipelines_running() {
    let config = fdsync_emulator::EmulatorConfig {
        quirks: fdsync_emulator::Quirks::parse("refuse=stream:403").unwrap(),
        ..emulator_config(&frozen_clock(), PlanLimits::build())
    };
    let h = Harness::with_emulator(config, &["MSFT"]).await;
    let mut pipelines = h.only(&["news", "indices"]);
    for p in &mut pipelines {
        p.params.backfill_days = Some(1);
    }
    let config = h.syncer.config.clone();
    h.syncer.sink.close().await;
    let syncer = crate::util::syncer(config.clone(), &h.clock).await;
    let started = h.clock.now();
    let daemon = fdsync_core::daemon::Daemon {
        syncer: std::sync::Arc::new(syncer),
        pipelines,
        stream: fdsync_core::config::StreamMode::On,
        metrics_addr: None,
        stale_after: None,
        lake: None,
    };
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(daemon.run(shutdown.clone()));
    let emulator = h.emulator.emulator.clone();
    emulator.record_served();
    // The stream's waits move the simulated clock too, so the schedules fire
    // as it goes. A news poll forward (`after=`) is a run after the first.
    wait_for(
        "the stream refused and news polled again",
        Duration::from_secs(120),
        || {
            let refused = emulator.stats().by_status.get(&403).copied().unwrap_or(0);
            let polled = emulator
                .served()
                .iter()
                .filter(|s| s.target.starts_with("/api/v1/news/feed?after="))
                .count();
            async move { refused >= 3 && polled >= 1 }
        },
    )
    .await;
    assert!(!running.is_finished(), "the daemon runs on");
    shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the daemon stops on request")
        .unwrap();
    stopped.expect("a clean stop");
    let refused_at = h.clock.now();

    let syncer = crate::util::syncer(config, &h.clock).await;
    let sink = syncer.sink.clone();
    let runs: Vec<(String, String)> = sink
        .call(|s| {
            let conn = s.reading_connection().unwrap();
            let mut stmt = conn
                .prepare("SELECT pipeline, status FROM _sync_runs ORDER BY started_at")
                .unwrap();
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap()
        })
        .await
        .unwrap();
    let news_runs = runs.iter().filter(|(p, _)| p == "news").count();
    assert!(news_runs >= 2, "news polled on its schedule: {runs:?}");
    assert!(runs.iter().any(|(p, s)| p == "news" && s == "ok"), "{runs:?}");
    assert!(runs.iter().any(|(p, s)| p == "indices" && s == "ok"), "{runs:?}");
    // Each refusal doubles the wait from 15 minutes up to a day: eight
    // refusals in the first two days, then one a day.
    let refusals = h.emulator.emulator.stats().by_status.get(&403).copied().unwrap_or(0);
    let days = (refused_at - started).num_hours() as u64 / 24;
    assert!(
        refusals <= 9 + days,
        "{refusals} refusals in {days} simulated days: asked again later and later"
    );
}
