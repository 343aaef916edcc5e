use std::process::Output;

use fdsync_emulator::PlanLimits;

use crate::util::{config_text, emulator_with, frozen_clock};

async fn run_sync(base_url: &str, key: Option<&str>, extra: &[&str]) -> (Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fdsync.toml");
    std::fs::write(&config, config_text(base_url, &dir.path().join("wh.duckdb"), &["MSFT"])).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_fdsync"));
    cmd.arg("--config")
        .arg(&config)
        .args(["sync", "--once"])
        .args(extra)
        .env_remove("FDSYNC_TEST_KEY_UNSET");
    if let Some(key) = key {
        cmd.env("FDSYNC_TEST_KEY_UNSET", key);
    }
    (cmd.output().await.unwrap(), dir)
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test]
async fn a_refused_key_exits_2_and_is_never_printed() {
    let emulator = emulator_with(&frozen_clock(), PlanLimits::build()).await;
    let secret = "pk_live_not_a_real_key_S3CR3T";
    let (out, _dir) = run_sync(&emulator.base_url(), Some(secret), &["-vv"]).await;
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("refused the API key"), "{all}");
    assert!(!all.contains("S3CR3T"), "the key leaked: {all}");
}

/// `FDSYNC_CONFIG` names the config file when `--config` is not given (the
/// image sets it, so `kubectl exec ... fdsync status` works).
#[tokio::test]
async fn fdsync_config_names_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("elsewhere.toml");
    std::fs::write(
        &config,
        config_text("http://127.0.0.1:9", &dir.path().join("wh.duckdb"), &["MSFT"]),
    )
    .unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_fdsync"))
        .args(["status", "--json"])
        .current_dir(dir.path())
        .env("FDSYNC_CONFIG", &config)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("pipelines"),
        "{}",
        text(&out)
    );
}

/// A missing config file is named once with its cause and what to do, and
/// exits 2; the cause is not printed twice.
#[tokio::test]
async fn a_missing_config_file_exits_2_saying_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_fdsync"))
        .args(["--config", "absent.toml", "status"])
        .current_dir(dir.path())
        .env_remove("FDSYNC_CONFIG")
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("absent.toml") && err.contains("pass --config PATH"),
        "{err}"
    );
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[tokio::test]
async fn a_malformed_key_exits_2_before_any_request() {
    let emulator = emulator_with(&frozen_clock(), PlanLimits::build()).await;
    let (out, _dir) = run_sync(&emulator.base_url(), Some("sk_live_S3CR3T"), &[]).await;
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("malformed") && all.contains("pk_live_"), "{all}");
    assert!(!all.contains("S3CR3T"), "the key leaked: {all}");
    assert_eq!(emulator.emulator.stats().requests, 0);
}

#[tokio::test]
async fn a_missing_key_exits_2_naming_the_variable() {
    let emulator = emulator_with(&frozen_clock(), PlanLimits::build()).await;
    let (out, _dir) = run_sync(&emulator.base_url(), None, &[]).await;
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("FDSYNC_TEST_KEY_UNSET"), "{all}");
}

#[tokio::test]
async fn a_good_key_syncs_and_exits_0() {
    let emulator = emulator_with(&frozen_clock(), PlanLimits::build()).await;
    let secret = crate::util::TEST_KEY;
    let (out, dir) = run_sync(&emulator.base_url(), Some(secret), &["-vv", "--pipeline", "prices"]).await;
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(!all.contains(secret), "the key leaked at trace level: {all}");
    let db = std::fs::read(dir.path().join("wh.duckdb")).unwrap();
    assert!(
        !db.windows(secret.len()).any(|w| w == secret.as_bytes()),
        "the key is in the warehouse file"
    );
}

/// A machine with no CA certificates (a bare container) cannot build the
/// HTTP client; the error says why and what to install, not "builder error".
#[tokio::test]
async fn no_trust_store_names_the_package_to_install() {
    let emulator = emulator_with(&frozen_clock(), PlanLimits::build()).await;
    let empty = tempfile::NamedTempFile::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fdsync.toml");
    std::fs::write(
        &config,
        config_text(&emulator.base_url(), &dir.path().join("wh.duckdb"), &["MSFT"]),
    )
    .unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_fdsync"))
        .arg("--config")
        .arg(&config)
        .args(["sync", "--once"])
        .env("FDSYNC_TEST_KEY_UNSET", crate::util::TEST_KEY)
        .env("SSL_CERT_FILE", empty.path())
        .env_remove("SSL_CERT_DIR")
        .output()
        .await
        .unwrap();
    let all = text(&out);
    assert_ne!(out.status.code(), Some(0), "{all}");
    assert!(all.contains("No CA certificates"), "the cause is named: {all}");
    assert!(
        all.contains("apt-get install ca-certificates"),
        "the fix is named: {all}"
    );
    assert_eq!(emulator.emulator.stats().requests, 0, "nothing was sent");
}

#[tokio::test]
async fn an_unknown_pipeline_is_a_usage_error() {
    let (out, _dir) = run_sync(
        "http://127.0.0.1:9",
        Some(crate::util::TEST_KEY),
        &["--pipeline", "nope"],
    )
    .await;
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("no pipeline named \"nope\""), "{all}");
}

#[tokio::test]
async fn max_requests_caps_the_run_and_exits_0_with_the_deferred_listed() {
    let emulator = emulator_with(&frozen_clock(), PlanLimits::build()).await;
    let (out, _dir) = run_sync(
        &emulator.base_url(),
        Some(crate::util::TEST_KEY),
        &["--max-requests", "2"],
    )
    .await;
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(all.contains("deferred") && all.contains("--max-requests"), "{all}");
    assert_eq!(emulator.emulator.stats().requests, 2);
    let (out, _dir) = run_sync(
        &emulator.base_url(),
        Some(crate::util::TEST_KEY),
        &["--max-requests", "0"],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// `--help` starts with the three commands a newcomer runs; completions and
/// man pages come from the same definition.
#[tokio::test]
async fn help_starts_with_three_commands_and_completions_and_man_pages_are_generated() {
    let fdsync = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_fdsync"))
            .args(args)
            .output()
            .unwrap()
    };
    let help = fdsync(&["--help"]);
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let start = help.find("Start here:").expect("a start block");
    let usage = help.find("Usage:").unwrap();
    assert!(start < usage, "{help}");
    let block = &help[start..usage];
    let (demo, check, sync) = (
        block.find("fdsync demo").unwrap(),
        block.find("fdsync check").unwrap(),
        block.find("fdsync sync --once").unwrap(),
    );
    assert!(demo < check && check < sync, "{block}");

    let bash = fdsync(&["completions", "bash"]);
    assert!(bash.status.success());
    let bash = String::from_utf8_lossy(&bash.stdout).into_owned();
    assert!(bash.contains("_fdsync") && bash.contains("--drop-rows"), "{bash}");
    let zsh = fdsync(&["completions", "zsh"]);
    assert!(String::from_utf8_lossy(&zsh.stdout).contains("#compdef fdsync"));

    let dir = tempfile::tempdir().unwrap();
    let man = fdsync(&["man", "--out", &dir.path().display().to_string()]);
    assert!(man.status.success(), "{}", text(&man));
    let page = std::fs::read_to_string(dir.path().join("fdsync-reset.1")).unwrap();
    assert!(
        page.contains(".TH fdsync-reset 1") && page.contains("drop\\-rows"),
        "{page}"
    );
    assert!(dir.path().join("fdsync.1").exists());
}
