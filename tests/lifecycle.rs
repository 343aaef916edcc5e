//! The operator's day with the `fdsync` binary: `check` before the first run,
//! the run summary a machine reads, `reset` to backfill again.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::lake::S3Server;
use crate::reliability::{Immutable, Subject, content, lake_rows, read_only, text, unlimited_emulator};
use crate::util::{TEST_KEY, emulator_with, frozen_clock};
use fdsync_emulator::PlanLimits;

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(out)))
}

/// The named check of a `check --json` report.
fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {report}"))
}

/// Only these pipelines are enabled in the subject's config.
fn enable(subject: &Subject, pipelines: &[&str]) {
    let names: Vec<String> = pipelines.iter().map(|p| format!("{p:?}")).collect();
    let text = std::fs::read_to_string(&subject.config).unwrap();
    let text: String = text
        .lines()
        .filter(|l| !l.starts_with("enabled = ["))
        .map(|l| format!("{l}\n"))
        .collect();
    let text = text.replace(
        "[pipelines]\n",
        &format!("[pipelines]\nenabled = [{}]\n", names.join(", ")),
    );
    std::fs::write(&subject.config, text).unwrap();
}

fn count(warehouse: &Path, sql: &str) -> i64 {
    read_only(warehouse).query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Each failure `check` knows, one at a time on a configuration that
/// otherwise works: it names what failed and what to do, exits with the
/// operator contract's code, and sends at most its one request.
#[tokio::test]
async fn check_passes_on_a_working_setup_and_names_each_failure_with_what_to_do() {
    let emulator = emulator_with(&frozen_clock(), PlanLimits::build()).await;
    let subject = Subject::new(&emulator.base_url(), false);
    let requests = || emulator.emulator.stats().requests;

    let out = subject.run(&["check", "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report = json(&out);
    for c in report["checks"].as_array().unwrap() {
        assert_eq!(c["outcome"], "ok", "{c}");
    }
    assert!(
        check(&report, "service")["detail"]
            .as_str()
            .unwrap()
            .contains("/api/v1/events/latest?limit=1")
    );
    assert!(
        check(&report, "quota")["detail"]
            .as_str()
            .unwrap()
            .contains("the Build plan by its headers: 99999 of 100000 left this month"),
        "{report}"
    );
    assert_eq!(requests(), 1, "check sends one request");
    let plain = subject.run(&["check"]).await;
    assert!(
        text(&plain).contains("ready: `fdsync sync --once` can run"),
        "{}",
        text(&plain)
    );

    // A service that is not there.
    let before = requests();
    let mut cmd = subject.command(&["check", "--json"]);
    let out = cmd
        .env("FDSYNC_UPSTREAM__BASE_URL", "http://127.0.0.1:9")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report = json(&out);
    assert_eq!(check(&report, "service")["outcome"], "fail");
    assert!(
        check(&report, "service")["fix"]
            .as_str()
            .unwrap()
            .contains("upstream.base_url")
    );
    assert_eq!(check(&report, "quota")["outcome"], "skipped");
    assert_eq!(
        check(&report, "warehouse")["outcome"],
        "ok",
        "the other checks still run"
    );

    // A key the service refuses: exit 2, and the key is never printed.
    let secret = "pk_live_refused_S3CR3T";
    let mut cmd = subject.command(&["check"]);
    let out = cmd.env("FDSYNC_TEST_KEY_UNSET", secret).output().await.unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("FAIL  service") && text(&out).contains("refused"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("S3CR3T"), "the key leaked: {}", text(&out));
    // A malformed key fails before any request.
    let mut cmd = subject.command(&["check", "--json"]);
    let out = cmd.env("FDSYNC_TEST_KEY_UNSET", "sk_S3CR3T").output().await.unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert_eq!(check(&json(&out), "api key")["outcome"], "fail");
    assert_eq!(check(&json(&out), "service")["outcome"], "skipped");
    assert!(!text(&out).contains("S3CR3T"));
    assert_eq!(requests(), before + 1, "only the refused key's request was sent");

    // A warehouse that cannot be written (even by root).
    let synced = subject.run(&["sync", "--once", "--pipeline", "coverage"]).await;
    assert!(synced.status.success(), "{}", text(&synced));
    let warehouse = subject.warehouse();
    if crate::tools::missing_for("a warehouse even root cannot write", &[crate::tools::Tool::Root]).is_none() {
        let _frozen = Immutable::set(&[&warehouse, subject.dir.path()]);
        let out = subject.run(&["check", "--json"]).await;
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let c = check(&json(&out), "warehouse").clone();
        assert_eq!(c["outcome"], "fail", "{c}");
        assert!(
            c["detail"]
                .as_str()
                .unwrap()
                .contains(&subject.dir.path().display().to_string()),
            "{c}"
        );
        assert!(c["fix"].as_str().unwrap().contains("writable"), "{c}");
    }

    // A warehouse another process writes: reported with who, not a failure.
    {
        let _held = fdsync_core::sink::lock::WriterLock::acquire(&warehouse, "fdsync daemon (test)").unwrap();
        let out = subject.run(&["check", "--json"]).await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let c = check(&json(&out), "warehouse").clone();
        assert_eq!(c["outcome"], "warn");
        assert!(c["detail"].as_str().unwrap().contains("fdsync daemon (test)"), "{c}");
    }

    // A lake whose bucket does not exist, then one that does.
    if crate::tools::missing_for("a lake on S3", &[crate::tools::Tool::Python]).is_none() {
        let s3 = S3Server::start().await;
        let on_s3 = |bucket: &str| {
            let mut cmd = subject.command(&["check", "--json"]);
            cmd.envs(s3.env())
                .env("FDSYNC_WAREHOUSE__PARQUET_DIR", format!("s3://{bucket}/lake"));
            cmd
        };
        let out = on_s3("missing").output().await.unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let c = check(&json(&out), "lake").clone();
        assert_eq!(c["outcome"], "fail", "{c}");
        assert!(c["detail"].as_str().unwrap().contains("s3://missing/lake"), "{c}");
        assert!(c["fix"].as_str().unwrap().contains("AWS_"), "{c}");
        s3.create_bucket("present").await;
        let out = on_s3("present").output().await.unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert_eq!(check(&json(&out), "lake")["outcome"], "ok");
    }

    // A config that does not load: exit 2, everything else skipped.
    std::fs::write(&subject.config, "[upstream\n").unwrap();
    let out = subject.run(&["check", "--json"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let report = json(&out);
    assert_eq!(check(&report, "config")["outcome"], "fail");
    assert_eq!(check(&report, "service")["outcome"], "skipped");
}

/// `reset` of one company, then of a whole pipeline writing a table it
/// shares: each re-backfills to the same rows as the first sync (the
/// emulator's data is frozen), the lake follows, and what was done is in
/// `_sync_resets`. Refused while another process holds the warehouse.
#[tokio::test]
async fn reset_re_backfills_a_company_and_a_pipeline_to_the_ground_truth_and_the_lake_follows() {
    let emulator = unlimited_emulator().await;
    let subject = Subject::new(&emulator.base_url(), true);
    enable(&subject, &["companies", "prices", "events", "events_wire"]);
    let warehouse = subject.warehouse();
    let lake = subject.dir.path().join("lake");
    let out = subject.run(&["sync", "--once"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let truth = content(&warehouse);
    let prices_of = |key: &str| {
        count(
            &warehouse,
            &format!("SELECT count(*) FROM prices_daily WHERE company_key = '{key}'"),
        )
    };
    let (msft, all_prices) = (prices_of("0000789019"), truth["prices_daily"].0);
    assert!(msft > 1000 && all_prices > msft, "{msft} of {all_prices}");
    assert_eq!(lake_rows(&lake).await["prices_daily"], all_prices);

    // Nothing is due: the schedules have not fired.
    let out = subject.run(&["sync", "--once", "--json"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let summary = json(&out);
    assert_eq!(summary["requests"], 0, "{summary}");
    assert!(
        summary["pipelines"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["status"] == "skipped"),
        "{summary}"
    );

    // Refused while a writer holds the warehouse.
    {
        let _held = fdsync_core::sink::lock::WriterLock::acquire(&warehouse, "fdsync daemon (test)").unwrap();
        let out = subject
            .run(&["reset", "prices", "--company", "MSFT", "--drop-rows"])
            .await;
        assert!(!out.status.success());
        assert!(text(&out).contains("fdsync daemon (test)"), "{}", text(&out));
        assert_eq!(prices_of("0000789019"), msft, "nothing changed");
    }

    // One company: its checkpoint and rows go, the others' stay.
    let out = subject
        .run(&["reset", "prices", "--company", "MSFT", "--drop-rows", "--json"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let done = json(&out);
    assert_eq!(done["company_key"], "0000789019", "{done}");
    assert_eq!(done["checkpoints_removed"], 1, "{done}");
    assert_eq!(
        done["rows_deleted"][0],
        serde_json::json!(["prices_daily", msft]),
        "{done}"
    );
    assert_eq!(prices_of("0000789019"), 0);
    assert_eq!(
        count(&warehouse, "SELECT count(*) FROM prices_daily"),
        all_prices - msft
    );
    let published = subject.run(&["lake", "publish"]).await;
    assert!(published.status.success(), "{}", text(&published));
    assert_eq!(
        lake_rows(&lake).await["prices_daily"],
        all_prices - msft,
        "the lake follows"
    );

    // The next run is due for prices alone and backfills the company again.
    let out = subject.run(&["sync", "--once", "--json"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let summary = json(&out);
    let prices = summary["pipelines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pipeline"] == "prices")
        .unwrap()
        .clone();
    assert_eq!(prices["status"], "ok", "{summary}");
    // The company's bars, and the window its answer said it served.
    assert_eq!(prices["rows_written"], msft + 1, "{summary}");
    assert!(prices["work_left"].is_null(), "{summary}");
    assert_eq!(summary["requests"], prices["requests"], "nothing else ran: {summary}");
    assert_eq!(content(&warehouse)["prices_daily"], truth["prices_daily"]);
    assert_eq!(lake_rows(&lake).await["prices_daily"], all_prices, "the lake follows");

    // A whole pipeline writing a table another pipeline writes too: only its
    // own rows go, and it backfills them again.
    let wire_rows = count(
        &warehouse,
        "SELECT count(*) FROM events WHERE _route LIKE '/api/v1/events/wire%'",
    );
    let all_events = truth["events"].0;
    assert!(wire_rows > 0 && all_events > wire_rows, "{wire_rows} of {all_events}");
    let out = subject.run(&["reset", "events_wire", "--drop-rows"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(count(&warehouse, "SELECT count(*) FROM events"), all_events - wire_rows);
    assert_eq!(
        count(
            &warehouse,
            "SELECT count(*) FROM _sync_checkpoints WHERE pipeline = 'events_wire'"
        ),
        0
    );
    let out = subject.run(&["sync", "--once"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("events_wire"), "{}", text(&out));
    assert_eq!(content(&warehouse)["events"], truth["events"]);
    assert_eq!(lake_rows(&lake).await["events"], all_events, "the lake follows");
    assert_eq!(
        count(
            &warehouse,
            "SELECT count(*) FROM _sync_resets WHERE drop_rows AND rows_deleted > 0"
        ),
        2
    );
}

/// The daemon writes one JSON summary line per run on stdout.
#[tokio::test]
async fn the_daemon_writes_one_json_summary_line_per_run() {
    let emulator = unlimited_emulator().await;
    let subject = Subject::new(&emulator.base_url(), false);
    let mut daemon = subject
        .command(&["daemon", "--pipeline", "prices", "--no-stream", "--metrics-addr", "off"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(daemon.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("a summary within a minute")
        .unwrap()
        .expect("a line");
    let summary: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(summary["status"], "ok", "{summary}");
    assert_eq!(summary["pipelines"][0]["pipeline"], "prices", "{summary}");
    assert!(
        summary["pipelines"][0]["rows_written"].as_u64().unwrap() > 0,
        "{summary}"
    );
    assert!(
        summary["pipelines"][0]["checkpoint_updated_at"].is_string(),
        "{summary}"
    );
    assert!(!line.contains(TEST_KEY));
    crate::util::sigterm(&daemon).await;
    let status = tokio::time::timeout(Duration::from_secs(30), daemon.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

/// docs/schema.md is what `fdsync schema` prints (`FDSYNC_BLESS=1` rewrites it).
#[test]
fn the_schema_doc_is_current() {
    crate::util::assert_doc_current(
        "docs/schema.md",
        &fdsync_commands::schema::markdown(),
        "lifecycle::the_schema_doc_is_current",
    );
    for table in fdsync_core::feeds::catalogue() {
        assert!(
            !fdsync_commands::schema::table_doc(table).starts_with("The `"),
            "{} has no description",
            table.name
        );
        for column in table.all_columns() {
            assert!(
                !fdsync_commands::schema::column_doc(table, column.name).ends_with("not described yet."),
                "{}.{} has no description",
                table.name,
                column.name
            );
        }
    }
}

/// Every pipeline synced with the system clock (dbt measures freshness
/// against it), for the reader tests below.
async fn synced_everything(emulator: &fdsync_emulator::RunningEmulator, storage: Option<&str>) -> Subject {
    let subject = Subject::new(&emulator.base_url(), false);
    if let Some(version) = storage {
        let text = std::fs::read_to_string(&subject.config).unwrap();
        let text = text.replace(
            "[warehouse]\n",
            &format!("[warehouse]\nstorage_version = {version:?}\n"),
        );
        std::fs::write(&subject.config, text).unwrap();
    }
    let mut cmd = subject.command(&["sync", "--once"]);
    let out = cmd.env_remove("FDSYNC_FROZEN_CLOCK").output().await.unwrap();
    assert!(out.status.success(), "{}", text(&out));
    subject
}

/// dbt-duckdb reads the warehouse through the generated sources.yml:
/// `dbt source freshness` and `dbt test` (a unique and not_null test on
/// every key) pass against a synced warehouse, and the descriptions are the
/// ones stored as `COMMENT ON`.
#[tokio::test]
async fn dbt_source_freshness_and_dbt_test_pass_on_the_generated_sources() {
    crate::tools::needs!(Python);
    let emulator = unlimited_emulator().await;
    let subject = synced_everything(&emulator, None).await;
    let project = subject.dir.path().join("dbt");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("dbt_project.yml"),
        "name: fdsync_check\nversion: \"1.0\"\nconfig-version: 2\nprofile: fdsync\n",
    )
    .unwrap();
    std::fs::write(
        project.join("profiles.yml"),
        format!(
            // As docs/warehouse.md says: dbt's own database, the warehouse attached read-only.
            "fdsync:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n      path: {:?}\n      attach:\n        - path: {:?}\n          alias: fdsync\n          read_only: true\n",
            project.join("models.duckdb").display().to_string(),
            subject.warehouse().display().to_string()
        ),
    )
    .unwrap();
    let sources = project.join("models/fdsync/sources.yml");
    let out = subject
        .run(&["schema", "--format", "dbt", "--out", &sources.display().to_string()])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let yaml = std::fs::read_to_string(&sources).unwrap();
    assert!(yaml.contains("loaded_at_query") && yaml.contains("unique"), "{yaml}");

    let comment = count(
        &subject.warehouse(),
        "SELECT count(*) FROM duckdb_columns() WHERE table_name = 'prices_daily' AND column_name = 'close' AND comment = 'Closing price.'",
    );
    assert_eq!(comment, 1, "the warehouse carries the descriptions");

    let dbt = |args: &[&str]| {
        std::process::Command::new(crate::tools::venv_bin("dbt"))
            .args(args)
            .args(["--profiles-dir", ".", "--project-dir", "."])
            .current_dir(&project)
            .output()
            .expect("dbt is needed (`sh tests/run` installs dbt-duckdb in tests/.venv)")
    };
    let freshness = dbt(&["source", "freshness"]);
    let said = text(&freshness);
    assert!(freshness.status.success(), "{said}");
    assert!(said.contains("PASS freshness of fdsync.prices_daily"), "{said}");
    assert!(!said.contains("WARN freshness") && !said.contains("ERROR"), "{said}");
    let tests = dbt(&["test"]);
    let said = text(&tests);
    assert!(tests.status.success(), "{said}");
    assert!(said.contains("Completed successfully"), "{said}");
    assert!(
        said.contains("unique_fdsync_prices_daily"),
        "the composite key is tested: {said}"
    );
}

/// Where the older DuckDB for the reader test is installed (it cannot share
/// a Python environment with the current one).
fn old_duckdb(version: &str) -> std::path::PathBuf {
    let dir = crate::util::repo().join(format!("tests/.python/duckdb-{version}"));
    if !dir.join("duckdb").exists() {
        let out = std::process::Command::new(crate::tools::venv_bin("python3"))
            .args(["-m", "pip", "install", "-q", "--target"])
            .arg(&dir)
            .arg(format!("duckdb=={version}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "installing duckdb {version}: {}", text(&out));
    }
    dir
}

/// Rows of every table of `warehouse` as the Python DuckDB found on
/// `python_path` reads them (every column fetched), or its error.
fn python_rows(python_path: Option<&Path>, warehouse: &Path) -> Result<(String, Vec<(String, i64)>), String> {
    let script = r#"
import json, sys, duckdb
c = duckdb.connect(sys.argv[1], read_only=True)
tables = [r[0] for r in c.sql("select table_name from duckdb_tables() where database_name = current_database() order by 1").fetchall()]
print(json.dumps([duckdb.__version__, [[t, len(c.sql(f'select * from "{t}"').fetchall())] for t in tables]]))
"#;
    let mut cmd = std::process::Command::new(crate::tools::venv_bin("python3"));
    cmd.args(["-c", script]).arg(warehouse);
    if let Some(path) = python_path {
        cmd.env("PYTHONPATH", path);
    }
    let out = cmd.output().unwrap();
    if !out.status.success() {
        return Err(text(&out));
    }
    Ok(serde_json::from_slice(&out.stdout).unwrap())
}

/// A warehouse written with the default storage_version opens in DuckDB 1.2
/// (the oldest whose format has what it uses) and 1.5, which read every row
/// of every table; written with "latest", DuckDB 1.5 refuses it.
#[tokio::test]
async fn duckdb_1_2_and_1_5_read_every_table_of_a_default_warehouse() {
    crate::tools::needs!(Python);
    let emulator = unlimited_emulator().await;
    let subject = synced_everything(&emulator, None).await;
    // A file opened again keeps the format it was made in.
    let mut again = subject.command(&["sync", "--once", "--all"]);
    let out = again.env_remove("FDSYNC_FROZEN_CLOCK").output().await.unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let warehouse = subject.warehouse();
    let conn = read_only(&warehouse);
    let mut stmt = conn
        .prepare("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() ORDER BY 1")
        .unwrap();
    let tables: Vec<String> = stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
    let expected: Vec<(String, i64)> = tables
        .iter()
        .map(|t| {
            (
                t.clone(),
                conn.query_row(&format!("SELECT count(*) FROM \"{t}\""), [], |r| r.get(0))
                    .unwrap(),
            )
        })
        .collect();
    drop(stmt);
    drop(conn);
    assert!(expected.len() > 30, "{expected:?}");
    assert!(expected.iter().filter(|(_, n)| *n > 0).count() > 25, "{expected:?}");
    for (path, version) in [(Some(old_duckdb("1.2.2")), "1.2.2"), (None, "1.5.5")] {
        let (read_by, rows) = python_rows(path.as_deref(), &warehouse).unwrap_or_else(|e| panic!("{version}: {e}"));
        assert_eq!(read_by, version);
        assert_eq!(rows, expected, "DuckDB {version} reads every row of every table");
    }

    let newest = synced_everything(&emulator, Some("latest")).await;
    let refused = python_rows(None, &newest.warehouse()).unwrap_err();
    assert!(refused.contains("version number"), "{refused}");

    // The migration docs/warehouse.md gives for such a file.
    let copy = newest.dir.path().join("v12.duckdb");
    let conn = duckdb::Connection::open_in_memory().unwrap();
    conn.execute_batch(&format!(
        "ATTACH '{}' AS old (READ_ONLY); ATTACH '{}' AS new (STORAGE_VERSION 'v1.2.0'); COPY FROM DATABASE old TO new;",
        newest.warehouse().display(),
        copy.display()
    ))
    .unwrap();
    drop(conn);
    let (_, rows) = python_rows(None, &copy).unwrap();
    assert_eq!(rows.len(), expected.len(), "{rows:?}");
}

/// `[warehouse] reader_copy`: a reader holds the copy open through a whole
/// sync, which finishes; the reader sees the old rows until it opens the
/// copy again, then the new ones, and the copy matches the warehouse.
#[tokio::test]
async fn a_reader_holding_the_reader_copy_never_holds_up_a_sync_and_sees_new_data_on_reopening() {
    let emulator = unlimited_emulator().await;
    let subject = Subject::new(&emulator.base_url(), false);
    let copy = subject.dir.path().join("read").join("wh.read.duckdb");
    let config = std::fs::read_to_string(&subject.config).unwrap().replace(
        "[warehouse]\n",
        &format!("[warehouse]\nreader_copy = {:?}\n", copy.display().to_string()),
    );
    std::fs::write(&subject.config, config).unwrap();
    enable(&subject, &["prices"]);
    let out = subject.run(&["sync", "--once"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("reader copy: "), "{}", text(&out));
    let reader = read_only(&copy);
    let prices: i64 = reader
        .query_row("SELECT count(*) FROM prices_daily", [], |r| r.get(0))
        .unwrap();
    assert!(prices > 0);
    let dividends = "SELECT count(*) FROM dividends";
    assert_eq!(reader.query_row(dividends, [], |r| r.get::<_, i64>(0)).unwrap(), 0);

    enable(&subject, &["prices", "dividends"]);
    let out = tokio::time::timeout(Duration::from_secs(120), subject.run(&["sync", "--once"]))
        .await
        .expect("the sync does not wait for the reader");
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        reader.query_row(dividends, [], |r| r.get::<_, i64>(0)).unwrap(),
        0,
        "the open reader keeps the copy it opened"
    );
    drop(reader);
    let reopened = count(&copy, dividends);
    assert!(reopened > 0, "reopened, the reader sees the new rows");
    assert_eq!(reopened, count(&subject.warehouse(), dividends));
    assert_eq!(content(&copy), content(&subject.warehouse()));
    // A third run with nothing due leaves the copy as it is.
    let out = subject.run(&["sync", "--once"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("unchanged"), "{}", text(&out));
}
