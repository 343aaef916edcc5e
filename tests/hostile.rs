//! A hostile upstream (the emulator's `--hostile` behaviours): the key never
//! leaves its origin, absurd headers neither panic nor stall, a cursor that
//! does not move costs a few requests, and a body or a stream frame without
//! end is cut at its limit.

use std::sync::{Arc, Mutex};

use fdsync_core::sync::RunStatus;
use fdsync_emulator::{Hostile, PlanLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::util::{Harness, TEST_KEY, config_text, emulator_config, frozen_clock, spawn};

/// A listener on another loopback port (another origin) that keeps every
/// request it receives and answers `{}`.
async fn recording_origin() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/collect", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                let mut head = vec![0u8; 16 * 1024];
                let n = socket.read(&mut head).await.unwrap_or(0);
                kept.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head[..n]).into_owned());
                let _ = socket
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
                    .await;
            });
        }
    });
    (url, seen)
}

/// `fdsync sync --once` with `args` against `base_url`, with the test key;
/// its exit code and everything it printed.
async fn sync_binary(base_url: &str, args: &[&str]) -> (Option<i32>, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fdsync.toml");
    std::fs::write(&config, config_text(base_url, &dir.path().join("wh.duckdb"), &["MSFT"])).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_fdsync"))
        .arg("--config")
        .arg(&config)
        .args(["sync", "--once"])
        .args(args)
        .env("FDSYNC_TEST_KEY_UNSET", TEST_KEY)
        .output()
        .await
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text, dir)
}

async fn hostile_emulator(hostile: Hostile) -> fdsync_emulator::RunningEmulator {
    let mut config = emulator_config(&frozen_clock(), PlanLimits::build());
    config.hostile = hostile;
    spawn(config).await
}

#[tokio::test]
async fn a_redirect_to_another_origin_is_refused_and_the_key_never_reaches_it() {
    let (elsewhere, seen) = recording_origin().await;
    let emulator = hostile_emulator(Hostile {
        redirect_to: Some(elsewhere.clone()),
        ..Hostile::default()
    })
    .await;
    let (code, text, _dir) = sync_binary(&emulator.base_url(), &["--pipeline", "indices", "-vv"]).await;
    assert_eq!(code, Some(2), "a misdirected service is a configuration error: {text}");
    assert!(
        text.contains(&elsewhere) && text.contains("upstream.base_url"),
        "the error names where the service pointed and what to fix: {text}"
    );
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing, key or not, went to the other origin"
    );
    assert!(!text.contains(TEST_KEY), "the key leaked into the output");
    println!(
        "hostile: redirect: exit 2 naming the Location; {} requests reached the other origin",
        seen.lock().unwrap().len()
    );
}

#[tokio::test]
async fn plain_http_to_another_machine_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let text = config_text("http://data.example.com", &dir.path().join("wh.duckdb"), &["MSFT"]);
    let refused = fdsync_core::config::Config::from_toml(&text, std::path::Path::new("t.toml"), std::iter::empty())
        .expect_err("plain http off loopback is refused");
    assert!(refused.to_string().contains("allow_plain_http"), "{refused}");
    let allowed = text.replace("timeout_secs = 10", "timeout_secs = 10\nallow_plain_http = true");
    fdsync_core::config::Config::from_toml(&allowed, std::path::Path::new("t.toml"), std::iter::empty())
        .expect("allowed explicitly");
    let https = config_text("https://data.example.com", &dir.path().join("wh.duckdb"), &["MSFT"]);
    fdsync_core::config::Config::from_toml(&https, std::path::Path::new("t.toml"), std::iter::empty()).expect("https");
}

#[tokio::test]
async fn absurd_limit_headers_neither_panic_nor_wait_past_their_caps() {
    let mut config = emulator_config(&frozen_clock(), PlanLimits::build());
    config.hostile = Hostile {
        absurd_headers: true,
        ..Hostile::default()
    };
    let h = Harness::with_emulator(config, &["MSFT", "AAPL"]).await;
    let started = h.clock.now();
    let (report, result) = h.syncer.run_once(&h.pipelines).await;
    result.expect("the run completes");
    let requests: u64 = report.outcomes.iter().map(|o| o.requests).sum();
    let rows: u64 = report.outcomes.iter().map(|o| o.rows_written).sum();
    assert!(rows > 0, "the data still loads");
    // Every answer says the minute's window is spent and ends 10^13 s away:
    // each request waits at most the capped minute (plus its margin), never more.
    let waited = h.clock.now() - started;
    assert!(
        waited <= chrono::Duration::seconds(62 * requests as i64),
        "waited {waited} for {requests} requests"
    );
    let quota = h.syncer.client.quota_seen().quota;
    assert!(
        quota
            .reset_at
            .is_some_and(|at| at <= h.clock.now() + chrono::Duration::days(31)),
        "a quota reset in the year 9999 is held to a month: {:?}",
        quota.reset_at
    );
    println!(
        "hostile: absurd headers: {requests} requests, {rows} rows, {} s simulated waiting (at most 62 s a request), quota reset held to {:?}",
        waited.num_seconds(),
        quota.reset_at
    );
}

#[tokio::test]
async fn cursors_that_never_move_fail_their_pipelines_within_a_few_requests_and_the_rest_loads() {
    let mut config = emulator_config(&frozen_clock(), PlanLimits::build());
    config.hostile = Hostile {
        stuck_cursors: true,
        ..Hostile::default()
    };
    let h = Harness::with_emulator(config, &["MSFT"]).await;
    let pipelines = h.only(&["companies", "news", "events_wire", "prices"]);
    let (report, result) = h.syncer.run_once(&pipelines).await;
    assert!(result.is_err(), "two pipelines failed");
    let outcome = |name: &str| report.outcomes.iter().find(|o| o.pipeline == name).unwrap().clone();
    for (name, says) in [("news", "did not move"), ("events_wire", "same page")] {
        let o = outcome(name);
        assert_eq!(o.status, RunStatus::Failed, "{name}: {o:?}");
        assert!(o.error.as_deref().unwrap_or("").contains(says), "{name}: {o:?}");
        // The wire's empty days cost one request each before the first day with filings.
        let bound = if name == "news" { 2 } else { 9 };
        assert!(
            o.requests <= bound,
            "{name} spent {} requests on a cursor that never moved",
            o.requests
        );
    }
    let prices = outcome("prices");
    assert_eq!(prices.status, RunStatus::Ok, "{prices:?}");
    assert!(prices.rows_written > 0);
    println!(
        "hostile: stuck cursors: news failed after {} requests, events_wire after {}; prices loaded {} rows",
        outcome("news").requests,
        outcome("events_wire").requests,
        prices.rows_written
    );
}

#[tokio::test]
async fn a_body_that_decodes_to_gigabytes_fails_its_request_in_bounded_memory() {
    let emulator = hostile_emulator(Hostile {
        huge_body: true,
        ..Hostile::default()
    })
    .await;
    let (code, text, _dir) = sync_binary(
        &emulator.base_url(),
        &["--pipeline", "indices", "--pipeline", "coverage"],
    )
    .await;
    assert_eq!(code, Some(1), "the indices pipeline failed, nothing else: {text}");
    assert!(text.contains("max_body_mb"), "the error names the limit: {text}");
    let coverage = text
        .lines()
        .find(|l| l.trim_start().starts_with("coverage"))
        .unwrap_or("");
    assert!(coverage.contains(" ok "), "coverage still loads: {text}");
    let peak: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("peak memory: "))
        .and_then(|v| v.trim_end_matches(" MiB").parse().ok())
        .expect("the run reports its peak memory");
    assert!(peak < 300.0, "an 8 GiB body was read into {peak} MiB");
    println!("hostile: huge body: an 8 GiB gzip body cut at 64 MiB; coverage loaded; peak memory {peak:.1} MiB");
}

#[tokio::test]
async fn a_stream_frame_without_end_is_cut_and_the_stream_backs_off() {
    let mut config = emulator_config(&frozen_clock(), PlanLimits::build());
    config.hostile = Hostile {
        endless_frame: true,
        ..Hostile::default()
    };
    let mut h = Harness::with_emulator(config, &["MSFT"]).await;
    h.restart(|c| c.upstream.max_frame_mb = 1).await;
    let news = h.only(&["news"]).remove(0);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stop = shutdown.clone();
    let stats = h.emulator.emulator.clone();
    // Stopped once three connections were cut: each must end at the frame limit.
    let watcher = tokio::spawn(async move {
        while stats.stats().requests < 3 {
            tokio::task::yield_now().await;
        }
        stop.cancel();
    });
    let started = h.clock.now();
    let report = h
        .syncer
        .run_stream(&news, &shutdown, false)
        .await
        .expect("a stopped stream is not an error");
    watcher.await.unwrap();
    assert_eq!(report.frames, 0, "no endless frame was taken as one");
    assert!(report.dropped >= 2, "{report:?}");
    assert!(
        h.clock.now() - started >= chrono::Duration::milliseconds(200),
        "reconnecting after a cut frame backs off rather than hammering"
    );
    println!(
        "hostile: endless frame: {} connections each cut at 1 MiB, 0 frames taken, {} ms of backoff (simulated)",
        report.connections,
        (h.clock.now() - started).num_milliseconds()
    );
}
