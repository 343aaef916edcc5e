//! Upgrades: a small warehouse written by a release is kept in
//! `tests/fixtures/` (tests/fixtures/README.md says how it was made); this
//! release opens it, syncs on from its checkpoints and must end with what a
//! fresh sync stores. A change of the warehouse layout keeps this passing or
//! ships a migration.

use std::io::{Read, Write};
use std::path::PathBuf;

use fdsync_core::sink::duckdb::migrations::MIGRATIONS;

use crate::reliability::{Subject, content, text, unlimited_emulator_of};

/// The pipelines the fixture was synced with: one of each load rule that
/// keeps state across runs (upserts, history, tapes, per-company routes).
const PIPELINES: &[&str] = &["companies", "prices", "dividends", "events_latest", "news", "macro"];

/// Each release's fixture, oldest first; `FDSYNC_WRITE_UPGRADE_FIXTURE=1`
/// writes this version's.
fn fixtures() -> Vec<PathBuf> {
    let dir = crate::util::repo().join("tests/fixtures");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".duckdb.gz"))
        .collect();
    found.sort();
    found
}

fn subject(base_url: &str) -> Subject {
    let subject = Subject::new(base_url, false);
    let names: Vec<String> = PIPELINES.iter().map(|p| format!("{p:?}")).collect();
    let universe = crate::util::UNIVERSE
        .iter()
        .map(|c| format!("{c:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let config = std::fs::read_to_string(&subject.config)
        .unwrap()
        .replace(
            "[pipelines]\n",
            &format!("[pipelines]\nenabled = [{}]\n", names.join(", ")),
        )
        .replace(&universe, r#""AAPL", "TW:2330""#);
    std::fs::write(&subject.config, config).unwrap();
    // A day of the news tape rather than the tests' week.
    let news = subject.dir.path().join("pipelines/news.toml");
    let text = std::fs::read_to_string(&news).unwrap();
    std::fs::write(&news, text.replace("backfill_days = 7\n", "backfill_days = 1\n")).unwrap();
    subject
}

/// `sync --once --all --json` on `subject`: the rows it wrote.
async fn sync(subject: &Subject) -> u64 {
    let out = subject.run(&["sync", "--once", "--all", "--json"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    summary["rows_written"].as_u64().unwrap_or_else(|| panic!("{summary}"))
}

#[tokio::test]
async fn a_warehouse_an_earlier_release_wrote_syncs_on_to_what_this_release_writes() {
    // No generated companies, and a universe of two: the fixture stays small.
    let emulator = unlimited_emulator_of(0).await;
    let fresh = subject(&emulator.base_url());
    let fresh_rows = sync(&fresh).await;

    if std::env::var_os("FDSYNC_WRITE_UPGRADE_FIXTURE").is_some() {
        let path = crate::util::repo().join(format!(
            "tests/fixtures/warehouse-{}.duckdb.gz",
            env!("CARGO_PKG_VERSION")
        ));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&std::fs::read(fresh.warehouse()).unwrap()).unwrap();
        std::fs::write(&path, gz.finish().unwrap()).unwrap();
        eprintln!("wrote {}", path.display());
    }
    let fixtures = fixtures();
    assert!(
        !fixtures.is_empty(),
        "no warehouse fixture in tests/fixtures: write this release's with FDSYNC_WRITE_UPGRADE_FIXTURE=1"
    );
    let expected = content(&fresh.warehouse());
    // What a run that resumes writes: the same warehouse synced again.
    let again = subject(&emulator.base_url());
    std::fs::copy(fresh.warehouse(), again.warehouse()).unwrap();
    let resumed_rows = sync(&again).await;
    assert!(
        resumed_rows < fresh_rows,
        "{resumed_rows} rows again, {fresh_rows} at first"
    );
    for fixture in fixtures {
        let old = subject(&emulator.base_url());
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&fixture).unwrap())
            .read_to_end(&mut bytes)
            .unwrap();
        std::fs::write(old.warehouse(), bytes).unwrap();
        let rows = sync(&old).await;
        // Every table this release declares is there, and holds what a fresh sync holds.
        assert_eq!(content(&old.warehouse()), expected, "{}", fixture.display());
        // It resumed from the fixture's checkpoints rather than starting over.
        assert_eq!(
            rows,
            resumed_rows,
            "{}: rows written after the upgrade, against a run that resumed",
            fixture.display()
        );
        let status = old.run(&["status"]).await;
        assert!(status.status.success(), "{}", text(&status));
        // It went through every recorded step, in order, to this build's layout.
        let conn = crate::reliability::read_only(&old.warehouse());
        let mut stmt = conn
            .prepare("SELECT version FROM _sync_migrations ORDER BY applied_at, version")
            .unwrap();
        let steps: Vec<i64> = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let all: Vec<i64> = MIGRATIONS.iter().map(|m| i64::from(m.version)).collect();
        assert_eq!(steps, all, "{}", fixture.display());
    }
    // Every step is named in the changelog.
    let changelog = std::fs::read_to_string(crate::util::repo().join("CHANGELOG.md")).unwrap();
    for m in MIGRATIONS {
        assert!(
            changelog.contains(&format!("layout version {}:", m.version)),
            "CHANGELOG.md does not name layout version {}: {}",
            m.version,
            m.change
        );
    }
}

/// A warehouse a newer fdsync wrote (a layout version past this build's) is
/// refused with exit 2 and left as it was.
#[tokio::test]
async fn a_warehouse_from_a_newer_release_is_refused_untouched() {
    let emulator = unlimited_emulator_of(0).await;
    let subject = subject(&emulator.base_url());
    sync(&subject).await;
    let newer = fdsync_core::sink::duckdb::migrations::schema_version() + 1;
    {
        let conn = duckdb::Connection::open(subject.warehouse()).unwrap();
        conn.execute_batch(&format!(
            "INSERT INTO _sync_migrations (version, change, applied_at) VALUES ({newer}, 'from the future', now())"
        ))
        .unwrap();
    }
    let before = std::fs::read(subject.warehouse()).unwrap();
    let out = subject.run(&["sync", "--once", "--all"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("layout version {newer}")),
        "{}",
        text(&out)
    );
    assert_eq!(
        std::fs::read(subject.warehouse()).unwrap(),
        before,
        "the warehouse changed"
    );
}
