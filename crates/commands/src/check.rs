//! `fdsync check`: whether a configuration can run, before the first sync
//! finds out. Config, pipelines, key, service, quota, warehouse and lake,
//! one line each, with what to do when one fails. It sends one request.

use std::io::Write;
use std::path::Path;

use serde::Serialize;

use fdsync_core::clock::Clock;
use fdsync_core::config::{Config, Credential, CredentialKind};
use fdsync_core::sink::lock::WriterLock;
use fdsync_core::upstream::{Access, BodyError, Client, UpstreamError};

/// The one request `check` sends: keyed, so the service judges the key and
/// answers with the key's quota headers, and the smallest answer a keyed
/// route gives. It costs one request of the quota.
pub const PROBE_ROUTE: &str = "/api/v1/events/latest?limit=1";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// Works, but worth knowing (a writer holds the warehouse, the quota is low).
    Warn,
    /// Not tried: a check it depends on failed.
    Skipped,
    Fail,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub check: &'static str,
    pub outcome: Outcome,
    pub detail: String,
    /// What to do about a failure or a warning.
    pub fix: Option<String>,
    /// The operator contract's exit code this failure alone would give.
    #[serde(skip)]
    exit_code: u8,
    /// The quota the service's headers named (the `quota` check).
    #[serde(skip)]
    limit: Option<fdsync_core::planner::cost::Limit>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub config: String,
    pub checks: Vec<Check>,
    /// 0 when nothing failed; else 2 for the configuration, the key or the
    /// service's address, 75 for a spent quota, 1 for anything else.
    pub exit_code: u8,
}

impl Check {
    fn ok(check: &'static str, detail: String) -> Check {
        Check {
            check,
            outcome: Outcome::Ok,
            detail,
            fix: None,
            exit_code: 0,
            limit: None,
        }
    }

    fn warn(check: &'static str, detail: String, fix: String) -> Check {
        Check {
            outcome: Outcome::Warn,
            fix: Some(fix),
            ..Check::ok(check, detail)
        }
    }

    fn fail(check: &'static str, exit_code: u8, detail: String, fix: String) -> Check {
        Check {
            outcome: Outcome::Fail,
            fix: Some(fix),
            exit_code,
            ..Check::ok(check, detail)
        }
    }

    fn skipped(check: &'static str, because: &str) -> Check {
        Check {
            outcome: Outcome::Skipped,
            ..Check::ok(check, format!("not checked: {because}"))
        }
    }
}

/// Runs every check of the configuration at `config_path` (else where
/// [`Config::locate`] finds one).
pub async fn run(config_path: Option<&Path>) -> Report {
    let mut checks = Vec::new();
    // The file an error is in: the one given, else the first found.
    let read_from = config_path
        .map(Path::to_owned)
        .or_else(|| Config::search_path().into_iter().find(|p| p.is_file()));
    let mut source_text = read_from
        .as_ref()
        .map_or_else(|| "(built-in config)".to_owned(), |p| p.display().to_string());
    let config = match Config::locate(config_path) {
        Ok((config, source)) => {
            source_text = source.to_string();
            checks.push(Check::ok(
                "config",
                format!(
                    "{source}: {} companies, {} countries, warehouse {}",
                    config.universe.companies.len(),
                    config.universe.countries.len(),
                    config.warehouse.duckdb.display()
                ),
            ));
            Some(config)
        }
        Err(e) => {
            checks.push(Check::fail(
                "config",
                2,
                e.to_string(),
                match &read_from {
                    Some(path) => format!(
                        "mend {} (or point --config / FDSYNC_CONFIG at the right file); `fdsync init` writes a commented example",
                        path.display()
                    ),
                    None => "mend the FDSYNC_ overrides the error names, or write a config with `fdsync init`".to_owned(),
                },
            ));
            None
        }
    };
    if let Some(config) = &config {
        checks.push(pipelines(config));
        let key = credential(config, &mut checks);
        match key {
            Some(key) => checks.extend(service(config, key).await),
            None => {
                checks.push(Check::skipped("service", "no usable API key"));
                checks.push(Check::skipped("quota", "no usable API key"));
            }
        }
        if let Some(check) = stream(config, &checks) {
            checks.push(check);
        }
        checks.push(warehouse(&config.warehouse.duckdb));
        checks.push(fields(&config.warehouse.duckdb));
        checks.push(lake(config).await);
    } else {
        for check in [
            "pipelines",
            "api key",
            "service",
            "quota",
            "warehouse",
            "fields",
            "lake",
        ] {
            checks.push(Check::skipped(check, "the config did not load"));
        }
    }
    let failed: Vec<u8> = checks.iter().map(|c| c.exit_code).filter(|&c| c != 0).collect();
    let exit_code = [2, 1, 75].into_iter().find(|c| failed.contains(c)).unwrap_or(0);
    Report {
        config: source_text,
        checks,
        exit_code,
    }
}

fn pipelines(config: &Config) -> Check {
    let dir = &config.pipelines.dir;
    match fdsync_core::pipeline::load_dir(dir, config.pipelines.enabled.as_deref()) {
        Ok(pipelines) if pipelines.is_empty() => Check::fail(
            "pipelines",
            2,
            format!("no pipeline enabled in {}", dir.display()),
            "add pipeline files to [pipelines] dir, or list existing ones in [pipelines] enabled".into(),
        ),
        Ok(pipelines) => Check::ok(
            "pipelines",
            format!(
                "{} enabled in {}: {}",
                pipelines.len(),
                dir.display(),
                pipelines.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
            ),
        ),
        Err(e) => Check::fail(
            "pipelines",
            2,
            e.to_string(),
            "mend the file named; docs/feeds.md lists what a pipeline file holds".into(),
        ),
    }
}

fn credential(config: &Config, checks: &mut Vec<Check>) -> Option<Credential> {
    let oauth = config.upstream.credential == CredentialKind::Oauth;
    let source = match config.upstream.credential_file() {
        Some(file) => format!("the file {}", file.display()),
        None if oauth => "upstream.access_token_file".to_owned(),
        None => format!("${}", config.upstream.api_key_env),
    };
    let (name, what) = if oauth {
        ("access token", "the OAuth access token (the token helper writes it)")
    } else {
        ("api key", "the key (it starts with pk_live_)")
    };
    match config.credential() {
        Ok(key) => {
            let expiry = key
                .expires_at()
                .map(|at| format!(", expires {}", at.to_rfc3339()))
                .unwrap_or_default();
            checks.push(Check::ok(
                name,
                format!("read from {source} (fingerprint {}{expiry})", key.fingerprint()),
            ));
            Some(key)
        }
        Err(e) => {
            checks.push(Check::fail(name, 2, e.to_string(), format!("put {what} in {source}")));
            None
        }
    }
}

/// The service and quota checks, from one keyed request.
async fn service(config: &Config, key: Credential) -> Vec<Check> {
    let base = &config.upstream.base_url;
    let key_kind = key.describe();
    // Two attempts: a wrong address should be reported in seconds, not after
    // a sync's patient retries; the key is already read, so no key file is watched.
    let upstream = fdsync_core::config::UpstreamConfig {
        max_attempts: config.upstream.max_attempts.min(2),
        api_key_file: None,
        access_token_file: None,
        ..config.upstream.clone()
    };
    let client = match Client::new(&upstream, Some(key), Clock::System) {
        Ok(client) => client,
        Err(e) => {
            return vec![
                Check::fail(
                    "service",
                    1,
                    e.to_string(),
                    "install CA certificates, or report this as a bug".into(),
                ),
                Check::skipped("quota", "the service was not reached"),
            ];
        }
    };
    let answer = client
        .get(PROBE_ROUTE, Access::Key, |body| {
            serde_json::from_slice::<serde_json::Value>(body)
                .map(|_| ())
                .map_err(|e| BodyError::Malformed(format!("not JSON: {e}")))
        })
        .await;
    let asked = format!("GET {base}{PROBE_ROUTE}");
    let service = match answer {
        Ok(_) => Check::ok(
            "service",
            format!("{asked}: {} accepted (1 request of the quota)", key_kind),
        ),
        Err(e @ UpstreamError::Unauthenticated { .. }) => Check::fail(
            "service",
            2,
            format!("{asked}: {e}"),
            if config.upstream.credential == CredentialKind::Oauth {
                "the service refused the access token: check the token helper keeps upstream.access_token_file fresh"
                    .to_owned()
            } else {
                format!(
                    "the service refused the key: check ${} holds a live key (revoked keys stay refused)",
                    config.upstream.api_key_env
                )
            },
        ),
        Err(e @ (UpstreamError::NotFound { .. } | UpstreamError::Redirected { .. })) => Check::fail(
            "service",
            2,
            format!("{asked}: {e}"),
            "upstream.base_url must be the service's own address, without /api/v1".into(),
        ),
        Err(e @ UpstreamError::QuotaExhausted { .. }) => Check::fail(
            "service",
            75,
            format!("{asked}: {e}"),
            "wait for the quota window to reset (a sync now would exit 75), or see `fdsync plan`".into(),
        ),
        Err(e) => Check::fail(
            "service",
            1,
            format!("{asked}: {e}"),
            "check upstream.base_url and that this machine can reach it (proxy, firewall, DNS)".into(),
        ),
    };
    let reached = service.outcome == Outcome::Ok || service.exit_code == 75;
    let quota = if reached {
        quota(&client)
    } else {
        Check::skipped("quota", "the service did not answer")
    };
    vec![service, quota]
}

fn quota(client: &Client) -> Check {
    let seen = client.quota_seen();
    let (q, rate) = (&seen.quota, &seen.rate);
    let Some(remaining) = q.remaining else {
        return Check::warn(
            "quota",
            "the answer carried no X-Quota-* headers".into(),
            "fdsync paces by the minute headers alone; set upstream.plan so `fdsync plan` knows the quota".into(),
        );
    };
    let window = q.window.as_deref().unwrap_or("window");
    let published = |plan| {
        let limit = fdsync_core::planner::cost::Limit::of(plan);
        match window {
            "day" => limit.per_day,
            "month" => limit.per_month,
            _ => None,
        }
    };
    use fdsync_core::config::Plan;
    let plan = match q.limit {
        l if l.is_some() && l == published(Plan::Free) => "the Free plan",
        l if l.is_some() && l == published(Plan::Build) => "the Build plan",
        _ => "a custom plan",
    };
    let limit = q.limit.map_or_else(|| "?".into(), |l| l.to_string());
    let minute = match (rate.remaining, rate.limit) {
        (Some(r), Some(l)) => format!("; {r} of {l} this minute"),
        _ => String::new(),
    };
    let resets = q
        .reset_at
        .map(|t| format!(", resets {}", t.format("%Y-%m-%dT%H:%MZ")))
        .unwrap_or_default();
    let detail = format!("{plan} by its headers: {remaining} of {limit} left this {window}{resets}{minute}");
    let named = q.limit.map(|l| fdsync_core::planner::cost::Limit {
        per_day: (window == "day").then_some(l),
        per_month: (window == "month").then_some(l),
        source: format!("the quota the service's headers named ({l} a {window})"),
    });
    let check = if remaining == 0 {
        Check::fail(
            "quota",
            75,
            detail,
            "a sync now stops at once (exit 75); wait for the reset".into(),
        )
    } else {
        Check::ok("quota", detail)
    };
    Check { limit: named, ..check }
}

/// Whether `fdsync daemon` would connect the live stream: under
/// `daemon.stream`, held against the quota the service's headers named (the
/// `quota` check's), else `upstream.plan`, else the Free plan's.
fn stream(config: &Config, checks: &[Check]) -> Option<Check> {
    let pipelines = fdsync_core::pipeline::load_dir(&config.pipelines.dir, config.pipelines.enabled.as_deref()).ok()?;
    let limit = checks.iter().find_map(|c| c.limit.clone());
    let planned = fdsync_core::planner::cost::stream_of(config, &pipelines, None, limit, chrono::Utc::now())
        .ok()
        .flatten()?;
    let detail = format!(
        "daemon.stream = {}: {} ({})",
        planned.mode,
        if planned.connected {
            "the daemon connects it"
        } else {
            "not connected"
        },
        planned.reason
    );
    Some(match (planned.connected, planned.fits) {
        (true, true) => Check::ok("stream", detail),
        (true, false) => Check::warn(
            "stream",
            detail,
            "set daemon.stream = \"auto\" (the news pipeline then polls on its schedule), or use a larger plan".into(),
        ),
        (false, _) => Check::warn(
            "stream",
            detail,
            "news arrives at the news pipeline's polls; set daemon.stream = true to connect anyway (fdsync plan shows the cost)".into(),
        ),
    })
}

/// Whether a sync could write the warehouse: the file (when it exists) and
/// its folder (DuckDB writes a WAL beside it), and who holds it now.
fn warehouse(path: &Path) -> Check {
    let fix = |what: &str| {
        format!("{what}; or set [warehouse] duckdb (FDSYNC_WAREHOUSE__DUCKDB) to a path this user can write")
    };
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => std::path::PathBuf::from("."),
    };
    if let Err(e) = std::fs::create_dir_all(&folder) {
        return Check::fail(
            "warehouse",
            1,
            format!("cannot create the folder {}: {e}", folder.display()),
            fix("create it"),
        );
    }
    let probe = folder.join(format!(".fdsync-check-{}", std::process::id()));
    if let Err(e) = std::fs::write(&probe, b"") {
        return Check::fail(
            "warehouse",
            1,
            format!("cannot write in {}: {e}", folder.display()),
            fix("make the folder writable by this user"),
        );
    }
    let _ = std::fs::remove_file(&probe);
    if path.exists()
        && let Err(e) = std::fs::OpenOptions::new().append(true).open(path)
    {
        return Check::fail(
            "warehouse",
            1,
            format!("cannot write {}: {e}", path.display()),
            fix("make the file writable by this user"),
        );
    }
    let state = if path.exists() { "writable" } else { "to be created" };
    match WriterLock::holder_of(path) {
        Some(holder) => Check::warn(
            "warehouse",
            format!("{} {state}; held now by {holder}", path.display()),
            "one process writes at a time: a sync waits for the holder's run to end; stop it first to run `fdsync reset`"
                .into(),
        ),
        None => Check::ok("warehouse", format!("{} {state}", path.display())),
    }
}

/// Whether the service sends fields that no column holds (drift), as the
/// warehouse recorded them.
fn fields(path: &Path) -> Check {
    if !path.exists() {
        return Check::ok("fields", "no warehouse yet, so no field to report".into());
    }
    let holder = WriterLock::holder_of(path);
    let seen = fdsync_core::sink::duckdb::reader::BookkeepingReader::open(path, holder.as_ref())
        .and_then(|reader| reader.unknown_fields());
    match seen {
        Err(e) => Check::skipped("fields", &format!("the warehouse could not be read: {e}")),
        Ok(seen) if seen.is_empty() => Check::ok("fields", "every field the service sent has a column".into()),
        Ok(seen) => {
            let named: Vec<String> = seen.iter().map(|f| format!("{} {}", f.route, f.field)).collect();
            Check::warn(
                "fields",
                format!(
                    "the service sends {} field(s) no column holds: {}",
                    seen.len(),
                    named.join(", ")
                ),
                "their values are kept in each row's raw column; `fdsync status` shows an example of each, and a \
                 newer fdsync may store them (docs/operations.md, Drift)"
                    .into(),
            )
        }
    }
}

async fn lake(config: &Config) -> Check {
    let fix = "check [warehouse] parquet_dir and the store's credentials in the environment (AWS_*, GOOGLE_*, AZURE_*)";
    let lake = match fdsync_core::lake::Lake::configured(&config.warehouse) {
        Ok(Some(lake)) => lake,
        Ok(None) => return Check::ok("lake", "none configured ([warehouse] parquet_dir)".into()),
        Err(e) => return Check::fail("lake", 2, e.to_string(), fix.into()),
    };
    match lake.probe().await {
        Ok(()) => Check::ok("lake", format!("{}: wrote and deleted a test object", lake.root().url)),
        Err(e) => Check::fail("lake", 1, format!("{}: {e}", lake.root().url), fix.into()),
    }
}

/// The report as lines, one per check, the fix under a failure or warning.
///
/// # Errors
/// When `out` cannot be written.
pub fn write_text(out: &mut dyn Write, report: &Report) -> std::io::Result<()> {
    for c in &report.checks {
        let mark = match c.outcome {
            Outcome::Ok => "ok",
            Outcome::Warn => "warn",
            Outcome::Skipped => "-",
            Outcome::Fail => "FAIL",
        };
        writeln!(out, "  {mark:<5} {:<10} {}", c.check, c.detail)?;
        if let Some(fix) = &c.fix {
            writeln!(out, "  {:<5} {:<10} -> {fix}", "", "")?;
        }
    }
    match report.exit_code {
        0 => writeln!(out, "ready: `fdsync sync --once` can run"),
        code => writeln!(out, "not ready (exit {code}): mend the FAIL lines above"),
    }
}
