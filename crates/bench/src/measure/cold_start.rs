//! `fdsync-bench cold-start`: a no-change `sync --once` of every pipeline,
//! the whole process timed, against a baseline process of the same binary
//! that only sends the requests that sync sent.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

use futures::StreamExt;

use super::{BENCH_KEY, EmulatorProcess, failure, fresh_dir};

/// The environment variable the bench's config names for the key.
const KEY_ENV: &str = "FDSYNC_BENCH_API_KEY";

/// One universe size's figures.
struct ColdStart {
    first_seconds: f64,
    seconds: f64,
    requests: u64,
    baseline_seconds: f64,
}

/// The bench's config: `config`'s pipelines folder, countries and geo layers,
/// `companies` generated companies, the emulator and a fresh warehouse.
fn bench_config(
    config: &fdsync_core::config::Config,
    base_url: &str,
    warehouse: &std::path::Path,
    companies: usize,
) -> anyhow::Result<String> {
    let pipelines = std::fs::canonicalize(&config.pipelines.dir).map_err(|e| {
        failure(format!(
            "cannot find the pipelines folder {}: {e}",
            config.pipelines.dir.display()
        ))
    })?;
    let list = |items: &mut dyn Iterator<Item = String>| items.map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
    Ok(format!(
        "[upstream]\nbase_url = {base_url:?}\napi_key_env = {KEY_ENV:?}\n\n\
         [warehouse]\nduckdb = {:?}\n\n\
         [universe]\ncompanies = [{}]\ncountries = [{}]\ngeo_layers = [{}]\n\n\
         [pipelines]\ndir = {:?}\n",
        warehouse.display().to_string(),
        list(&mut (0..companies).map(|i| format!("S{i:04}"))),
        list(&mut config.universe.countries.iter().cloned()),
        list(&mut config.universe.geo_layers.iter().cloned()),
        pipelines.display().to_string(),
    ))
}

/// Runs `<binary> --quiet <args>` to the end and returns its wall time.
fn timed_process(binary: &std::path::Path, args: &[&str]) -> anyhow::Result<f64> {
    let started = Instant::now();
    let output = Command::new(binary)
        .arg("--quiet")
        .args(args)
        .env(KEY_ENV, BENCH_KEY)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    let seconds = started.elapsed().as_secs_f64();
    if !output.status.success() {
        return Err(failure(format!(
            "{} {} failed: {}",
            binary.display(),
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(seconds)
}

/// The routes the last `sync --once` sent, from its request log.
async fn routes_since(
    warehouse: &std::path::Path,
    since: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<Vec<String>> {
    let sink = fdsync_core::sink::SinkHandle::open_duckdb(warehouse.to_owned()).await?;
    let routes = sink
        .call(move |s| crate::warehouse::routes_since(s.connection(), since))
        .await??;
    sink.close().await;
    Ok(routes)
}

/// The baseline's process: sends every route in `routes_file` (one a line)
/// to `base_url` with the key, `concurrency` at a time, and reads each body.
///
/// # Errors
/// When the file cannot be read or a request fails.
pub async fn child(base_url: &str, routes_file: &std::path::Path, concurrency: usize) -> anyhow::Result<()> {
    let routes = std::fs::read_to_string(routes_file)?;
    let http = reqwest::Client::new();
    let mut responses = futures::stream::iter(routes.lines().map(|route| {
        let request = http
            .get(format!("{base_url}{route}"))
            .header("X-API-KEY", BENCH_KEY)
            .send();
        async move { request.await?.bytes().await }
    }))
    .buffer_unordered(concurrency.max(1));
    while let Some(response) = responses.next().await {
        response.map_err(|e| failure(format!("baseline request: {e}")))?;
    }
    Ok(())
}

async fn cold_start(config: &fdsync_core::config::Config, companies: usize) -> anyhow::Result<ColdStart> {
    let emulator = EmulatorProcess::start()?;
    let dir = fresh_dir(&format!("cold-start-{companies}"))?;
    let warehouse = dir.join("warehouse.duckdb");
    let config_path = dir.join("fdsync.toml");
    std::fs::write(
        &config_path,
        bench_config(config, &emulator.base_url, &warehouse, companies)?,
    )?;
    let config_arg = config_path.display().to_string();
    let sync = ["--config", config_arg.as_str(), "sync", "--once"];
    let first_seconds = timed_process(super::fdsync_binary(), &sync)?;
    let since = chrono::Utc::now();
    let seconds = timed_process(super::fdsync_binary(), &sync)?;
    let routes = routes_since(&warehouse, since).await?;
    let routes_file = dir.join("routes.txt");
    std::fs::write(&routes_file, routes.join("\n"))?;
    let concurrency = config.upstream.concurrency.to_string();
    let baseline_seconds = timed_process(
        &std::env::current_exe()?,
        &[
            "cold-start-child",
            &emulator.base_url,
            &routes_file.display().to_string(),
            &concurrency,
        ],
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ColdStart {
        first_seconds,
        seconds,
        requests: routes.len() as u64,
        baseline_seconds,
    })
}

/// A first `sync --once` of every pipeline, then the timed one with nothing
/// changed upstream, at each universe size; the baseline is a process that
/// sends the same requests and nothing else.
///
/// # Errors
/// When the emulator, a sync or the baseline fails.
pub async fn cold_starts(
    config: &fdsync_core::config::Config,
    sizes: &[usize],
    out: &mut impl Write,
) -> anyhow::Result<()> {
    writeln!(
        out,
        "| companies | first sync s | no-change sync s | requests | baseline: the same requests s | ratio |\n|---:|---:|---:|---:|---:|---:|"
    )?;
    for &companies in sizes {
        let c = cold_start(config, companies).await?;
        writeln!(
            out,
            "| {companies} | {:.2} | {:.2} | {} | {:.2} | {:.2}x |",
            c.first_seconds,
            c.seconds,
            c.requests,
            c.baseline_seconds,
            c.seconds / c.baseline_seconds
        )?;
        out.flush()?;
    }
    Ok(())
}
