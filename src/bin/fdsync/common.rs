//! What several commands share: the pipelines, the warehouse, the syncer,
//! and the signal that stops a long-running command.

use anyhow::{Context, Result};
use fdsync::clock::Clock;
use fdsync::config::Config;
use fdsync::pipeline::Pipeline;
use fdsync::sink::{SinkHandle, SinkOptions};
use fdsync::sync::{SyncError, Syncer};
use fdsync::upstream::Client;
use tokio_util::sync::CancellationToken;

/// Pipelines by name (default: the enabled ones), from the configured folder.
pub fn load_pipelines(config: &Config, names: Vec<String>) -> Result<Vec<Pipeline>> {
    let enabled = if names.is_empty() {
        config.pipelines.enabled.clone()
    } else {
        Some(names)
    };
    Ok(fdsync::pipeline::load_dir(&config.pipelines.dir, enabled.as_deref()).map_err(SyncError::from)?)
}

pub async fn open_sink(config: &Config, holder: &str) -> Result<SinkHandle> {
    let options = SinkOptions::from_config(&config.warehouse, holder);
    let sink = SinkHandle::open_duckdb_with(config.warehouse.duckdb.clone(), options).await;
    Ok(sink.map_err(SyncError::from)?)
}

/// Runs the syncer as if the time were this instant (RFC 3339), its waits
/// passing at once, instead of on the system clock. For tests that compare
/// runs against an emulator whose clock is frozen: on the system clock, every
/// horizon ("the last 7 days") moves between two runs and can cut the data at
/// another item. Not for production.
const FROZEN_CLOCK_VAR: &str = "FDSYNC_FROZEN_CLOCK";

fn syncer_clock() -> Result<Clock> {
    let Ok(at) = std::env::var(FROZEN_CLOCK_VAR) else {
        return Ok(Clock::System);
    };
    let start = chrono::DateTime::parse_from_rfc3339(&at).with_context(|| {
        format!("{FROZEN_CLOCK_VAR}={at:?}: give an RFC 3339 instant such as 2026-11-25T23:00:00Z, or unset it")
    })?;
    Ok(Clock::simulated(start.with_timezone(&chrono::Utc), 0.0))
}

/// A syncer with the configured key, holding the warehouse as `holder`.
pub async fn connect(config: Config, holder: &str) -> Result<Syncer> {
    let key = config.api_key().map_err(SyncError::from)?;
    let clock = syncer_clock()?;
    let client = Client::new(&config.upstream, Some(key), clock.clone()).context("cannot build the HTTP client")?;
    let sink = open_sink(&config, holder).await?;
    Ok(Syncer {
        config,
        client,
        sink,
        clock,
    })
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json<T: serde::Serialize>(value: &T) -> Result<()> {
    let mut stdout = std::io::stdout();
    serde_json::to_writer_pretty(&mut stdout, value)?;
    println!();
    Ok(())
}

/// Cancelled at the first SIGTERM or SIGINT.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(e) => {
                    tracing::warn!(message = "Cannot listen for SIGTERM; only SIGINT stops cleanly.", error = %e);
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminate => {}
        }
        tracing::info!(message = "Stopping: the commit in flight finishes, the page in flight is abandoned.");
        cancel.cancel();
    });
    token
}
