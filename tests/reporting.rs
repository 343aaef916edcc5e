//! What a run tells everyone, and what an operator controls: the textfile
//! metrics of a timer run, webhook alerts once a day per cause, systemd's
//! notify protocol, flat JSON logs, `state`, `reset --table`, `sync --since`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::reliability::{Subject, read_only, text, unlimited_emulator_of};
use crate::util::TEST_KEY;

/// `--pipeline NAME` for each name.
fn pipelines(names: &[&str]) -> Vec<String> {
    let mut args = Vec::new();
    for n in names {
        args.push("--pipeline".to_owned());
        args.push((*n).to_owned());
    }
    args
}

/// A timer run's metrics file: every line a Prometheus text sample or a
/// comment, written whole (no temporary file left), with the build, each
/// pipeline's run duration, requests, rows, quota left, shortfall and drift.
#[tokio::test]
async fn a_timer_run_writes_its_metrics_for_the_textfile_collector() {
    let emulator = unlimited_emulator_of(0).await;
    let subject = Subject::new(&emulator.base_url(), false);
    let file = subject.dir.path().join("textfile/fdsync.prom");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let mut args = vec![
        "sync".to_owned(),
        "--once".into(),
        "--metrics-file".into(),
        file.display().to_string(),
    ];
    args.extend(pipelines(&["companies", "events_latest"]));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = subject.run(&args).await;
    assert!(out.status.success(), "{}", text(&out));
    let page = std::fs::read_to_string(&file).unwrap();
    let mut samples: BTreeMap<String, f64> = BTreeMap::new();
    for line in page.lines().filter(|l| !l.is_empty()) {
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("not a value: {line}"));
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "not a metric name: {line}"
        );
        if series.contains('{') {
            assert!(series.ends_with('}'), "labels not closed: {line}");
        }
        samples.insert(series.to_owned(), value);
    }
    let has = |prefix: &str| samples.iter().any(|(s, v)| s.starts_with(prefix) && *v > 0.0);
    assert!(has("fdsync_build_info{"), "{page}");
    assert!(
        has("fdsync_pipeline_last_run_duration_seconds{pipeline=\"companies\"}"),
        "{page}"
    );
    assert!(has("fdsync_requests_total{status=\"200\"}"), "{page}");
    assert!(has("fdsync_rows_written_total{"), "{page}");
    assert!(samples.contains_key("fdsync_quota_remaining"), "{page}");
    assert!(
        has("fdsync_pipeline_last_success_timestamp_seconds{pipeline=\"events_latest\"}"),
        "{page}"
    );
    assert!(
        samples.contains_key("fdsync_pipeline_shortfall{pipeline=\"companies\"}"),
        "{page}"
    );
    assert!(samples.contains_key("fdsync_drift_fields"), "{page}");
    let left: Vec<_> = std::fs::read_dir(file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "only the metrics file: {left:?}");
    assert!(!page.contains(TEST_KEY));

    // A file that cannot be written fails the run by its key, after the
    // run's rows and its log were committed and the warehouse closed.
    let unwritable = subject.dir.path().join("no-such-folder/fdsync.prom");
    let mut args = vec!["sync", "--once", "--metrics-file", unwritable.to_str().unwrap()];
    args.extend(["--pipeline", "companies"]);
    let out = subject.run(&args).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("[metrics] textfile"), "{}", text(&out));
    let state = subject.run(&["state", "companies"]).await;
    assert!(state.status.success(), "the warehouse opens again: {}", text(&state));
}

/// A receiver on loopback: every body POSTed to it.
async fn receiver() -> (String, Arc<Mutex<Vec<serde_json::Value>>>) {
    let got: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let kept = got.clone();
    let app = axum::Router::new().route(
        "/hook/T0/secret",
        axum::routing::post(move |body: String| {
            let kept = kept.clone();
            async move {
                kept.lock().unwrap().push(serde_json::from_str(&body).unwrap());
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/hook/T0/secret"), got)
}

/// A pipeline that fails alerts the webhook once, naming the pipeline, the
/// cause, the reason and the run, with no key in the body; the same failure
/// again that day sends nothing, and the webhook's URL is never logged.
#[tokio::test]
async fn a_failing_pipeline_alerts_the_webhook_once_a_day() {
    let emulator = unlimited_emulator_of(0).await;
    let subject = Subject::new(&emulator.base_url(), false);
    let (hook, got) = receiver().await;
    let config = std::fs::read_to_string(&subject.config).unwrap();
    std::fs::write(&subject.config, format!("{config}\n[alerts]\nwebhook = \"{hook}\"\n")).unwrap();
    // A route the service does not have: the pipeline fails at every run.
    let latest = subject.dir.path().join("pipelines/events_latest.toml");
    let text_of = std::fs::read_to_string(&latest).unwrap();
    assert!(!text_of.contains("\nroute"), "{text_of}");
    std::fs::write(&latest, format!("route = \"/api/v1/events/gone\"\n{text_of}")).unwrap();

    let first = subject.run(&["sync", "--once", "--pipeline", "events_latest"]).await;
    assert_eq!(first.status.code(), Some(1), "{}", text(&first));
    {
        let bodies = got.lock().unwrap();
        assert_eq!(bodies.len(), 1, "{bodies:?}");
        let alert = &bodies[0];
        assert_eq!(alert["pipeline"], "events_latest");
        assert_eq!(alert["cause"], "failed");
        assert_eq!(alert["status"], "failed");
        assert!(
            alert["reason"].as_str().unwrap().contains("/api/v1/events/gone"),
            "{alert}"
        );
        assert!(alert["run_id"].as_str().is_some_and(|r| !r.is_empty()), "{alert}");
        assert!(!alert.to_string().contains(TEST_KEY), "{alert}");
    }
    let again = subject.run(&["sync", "--once", "--pipeline", "events_latest"]).await;
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert_eq!(
        got.lock().unwrap().len(),
        1,
        "the same failure the same day alerts once"
    );
    for out in [&first, &again] {
        assert!(!text(out).contains("/hook/T0/secret"), "the webhook URL was logged");
    }
    let sent = read_only(&subject.warehouse())
        .query_row("SELECT count(*) FROM _sync_alerts WHERE cause = 'failed'", [], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap();
    assert_eq!(sent, 1);
}

/// A shortfall, new drift and the quota wall each alert once a day, by
/// pipeline and cause: drift as pipeline `*`, naming the field and route.
#[tokio::test]
async fn a_shortfall_new_drift_and_the_quota_wall_each_alert_once_a_day() {
    use fdsync_emulator::PlanLimits;

    let quirks = "page_cap=37,withhold_page=37,envelope_field=factSource";
    let quirked = crate::util::spawn(crate::quirks::with_quirks(
        &crate::util::frozen_clock(),
        crate::quirks::roomy(),
        quirks,
    ))
    .await;
    let subject = Subject::new(&quirked.base_url(), false);
    let (hook, got) = receiver().await;
    let config = std::fs::read_to_string(&subject.config).unwrap();
    std::fs::write(&subject.config, format!("{config}\n[alerts]\nwebhook = \"{hook}\"\n")).unwrap();
    let alerts = || {
        let mut seen: Vec<(String, String)> = got
            .lock()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["pipeline"].as_str().unwrap().to_owned(),
                    a["cause"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        seen.sort();
        seen
    };
    let pair = |p: &str, c: &str| (p.to_owned(), c.to_owned());

    let first = subject.run(&["sync", "--once", "--pipeline", "events_wire"]).await;
    assert_eq!(
        alerts(),
        [pair("*", "drift"), pair("events_wire", "shortfall")],
        "{}",
        text(&first)
    );
    {
        let bodies = got.lock().unwrap();
        let drift = bodies.iter().find(|a| a["cause"] == "drift").unwrap();
        let reason = drift["reason"].as_str().unwrap();
        assert!(reason.contains("/api/v1/events/wire $.factSource"), "{drift}");
        let short = bodies.iter().find(|a| a["cause"] == "shortfall").unwrap();
        assert_eq!(short["status"], "partial", "{short}");
        assert!(
            short["reason"].as_str().unwrap().contains("the service counts"),
            "{short}"
        );
    }
    // The same shortfall again, and no field first seen: nothing new.
    let again = subject.run(&["sync", "--once", "--pipeline", "events_wire"]).await;
    assert_eq!(alerts().len(), 2, "{}", text(&again));

    // The quota spent by someone else: the wall, once.
    let spent = crate::util::spawn(crate::util::emulator_config(
        &crate::util::frozen_clock(),
        PlanLimits::free(),
    ))
    .await;
    let http = reqwest::Client::new();
    for _ in 0..250 {
        http.get(format!("{}/api/v1/indices", spent.base_url()))
            .header("X-API-KEY", TEST_KEY)
            .send()
            .await
            .unwrap();
    }
    let config = std::fs::read_to_string(&subject.config).unwrap();
    std::fs::write(&subject.config, config.replace(&quirked.base_url(), &spent.base_url())).unwrap();
    for _ in 0..2 {
        let walled = subject.run(&["sync", "--once", "--pipeline", "indices"]).await;
        assert_eq!(walled.status.code(), Some(75), "{}", text(&walled));
    }
    assert_eq!(
        alerts(),
        [
            pair("*", "drift"),
            pair("events_wire", "shortfall"),
            pair("indices", "quota_wall")
        ]
    );
    let sent = read_only(&subject.warehouse())
        .query_row("SELECT count(*) FROM _sync_alerts", [], |r| r.get::<_, i64>(0))
        .unwrap();
    assert_eq!(sent, 3);
}

/// The daemon under a service manager: READY=1 once it runs, WATCHDOG=1 at
/// half the watchdog's timeout while it lives, STOPPING=1 on SIGTERM.
#[tokio::test]
async fn the_daemon_speaks_systemd_s_notify_protocol() {
    let emulator = unlimited_emulator_of(0).await;
    let subject = Subject::new(&emulator.base_url(), false);
    let config = std::fs::read_to_string(&subject.config).unwrap();
    std::fs::write(&subject.config, format!("{config}\n[daemon]\nmetrics_addr = \"off\"\n")).unwrap();
    let socket_path = subject.dir.path().join("notify.sock");
    let socket = tokio::net::UnixDatagram::bind(&socket_path).unwrap();
    let mut daemon = subject
        .command(&["daemon", "--pipeline", "coverage", "--no-stream"])
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "400000")
        .env_remove("FDSYNC_FROZEN_CLOCK")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let mut next = async || {
        let n = tokio::time::timeout(Duration::from_secs(30), socket.recv(&mut buf))
            .await
            .expect("a notification within 30 s")
            .unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let mut seen = Vec::new();
    while !seen.iter().any(|m: &String| m.contains("READY=1")) {
        seen.push(next().await);
    }
    let mut pings = 0;
    while pings < 3 {
        let m = next().await;
        pings += usize::from(m.contains("WATCHDOG=1"));
        seen.push(m);
    }
    crate::util::sigterm(&daemon).await;
    while !seen.iter().any(|m| m.contains("STOPPING=1")) {
        seen.push(next().await);
    }
    let status = tokio::time::timeout(Duration::from_secs(30), daemon.wait())
        .await
        .expect("the daemon stops within 30 s of SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{seen:?}");
}

/// JSON log lines are flat: `message`, `level` and `target` at the top,
/// beside the event's fields; `RUST_LOG=debug` turns debug lines on.
#[tokio::test]
async fn json_logs_are_flat_and_rust_log_is_honoured() {
    let emulator = unlimited_emulator_of(0).await;
    let subject = Subject::new(&emulator.base_url(), false);
    let out = subject
        .command(&["--log-format", "json", "sync", "--once", "--pipeline", "coverage"])
        .env("RUST_LOG", "debug")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(!lines.is_empty());
    for line in &lines {
        assert!(
            line["message"].is_string() && line["level"].is_string() && line["target"].is_string(),
            "{line}"
        );
        assert!(line.get("fields").is_none(), "nested: {line}");
    }
    let finished = lines
        .iter()
        .find(|l| l["message"] == "Pipeline finished.")
        .expect("the pipeline's end is logged");
    assert_eq!(finished["pipeline"], "coverage", "{finished}");
    assert!(
        lines.iter().any(|l| l["level"] == "DEBUG"),
        "RUST_LOG=debug shows debug lines"
    );
}

/// `fdsync state` prints every checkpoint as stored (one pipeline's with a
/// name); `reset --table` resets the table's writers and drops its rows
/// alone; `sync --since` backfills the wire back to a date.
#[tokio::test]
async fn state_reset_table_and_since_control_a_pipeline_s_position() {
    let emulator = unlimited_emulator_of(0).await;
    let subject = Subject::new(&emulator.base_url(), false);
    // A Thursday: the wire has filings that day.
    let since = (crate::util::start_time() - chrono::Duration::days(6)).date_naive();
    let out = subject
        .run(&[
            "sync",
            "--once",
            "--pipeline",
            "events_wire",
            "--since",
            &since.to_string(),
        ])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let conn = read_only(&subject.warehouse());
    let oldest: String = conn
        .query_row("SELECT min(filing_date)::VARCHAR FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        oldest,
        since.to_string(),
        "the wire reached back to --since and no further"
    );
    drop(conn);

    let state = subject.run(&["state", "events_wire", "--json"]).await;
    assert!(state.status.success(), "{}", text(&state));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&state.stdout).unwrap();
    let partitions: Vec<&str> = rows.iter().map(|r| r["partition"].as_str().unwrap()).collect();
    assert!(partitions.contains(&"") && partitions.contains(&"backfill"), "{rows:?}");
    assert!(rows.iter().all(|r| r["pipeline"] == "events_wire"));
    let table = subject.run(&["state"]).await;
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("events_wire"),
        "{}",
        text(&table)
    );
    let unknown = subject.run(&["state", "no_such_pipeline"]).await;
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown));

    let reset = subject
        .run(&["reset", "--table", "events_wire_counts", "--drop-rows"])
        .await;
    assert!(reset.status.success(), "{}", text(&reset));
    let conn = read_only(&subject.warehouse());
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
    assert_eq!(count("SELECT count(*) FROM events_wire_counts"), 0);
    assert!(
        count("SELECT count(*) FROM events") > 0,
        "the other table of the pipeline keeps its rows"
    );
    assert_eq!(
        count("SELECT count(*) FROM _sync_checkpoints WHERE pipeline = 'events_wire'"),
        0
    );
    drop(conn);
    let bad = subject.run(&["reset", "--table", "no_such_table"]).await;
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
}
