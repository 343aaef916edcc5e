//! What several commands share: the pipelines, the warehouse, the syncer,
//! and the signal that stops a long-running command.

use anyhow::{Context, Result};
use fdsync_core::clock::Clock;
use fdsync_core::config::Config;
use fdsync_core::pipeline::Pipeline;
use fdsync_core::sink::SinkHandle;
use fdsync_core::sync::{SyncError, Syncer};
use fdsync_core::upstream::Client;
use tokio_util::sync::CancellationToken;

/// Pipelines by name (default: the enabled ones), from the configured folder.
pub fn load_pipelines(config: &Config, names: Vec<String>) -> Result<Vec<Pipeline>> {
    let enabled = if names.is_empty() {
        config.pipelines.enabled.clone()
    } else {
        Some(names)
    };
    Ok(fdsync_core::pipeline::load_dir(&config.pipelines.dir, enabled.as_deref()).map_err(SyncError::from)?)
}

pub async fn open_sink(config: &Config, holder: &str) -> Result<SinkHandle> {
    let sink = SinkHandle::open_configured(&config.warehouse, holder).await;
    Ok(sink.map_err(SyncError::from)?)
}

/// Runs the syncer as if the time were this instant (RFC 3339), its waits
/// passing at once, instead of on the system clock. For tests that compare
/// runs against an emulator whose clock is frozen: on the system clock, every
/// horizon ("the last 7 days") moves between two runs and can cut the data at
/// another item. Not for production.
const FROZEN_CLOCK_VAR: &str = "FDSYNC_FROZEN_CLOCK";

pub fn syncer_clock() -> Result<Clock> {
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
    let key = config.credential().map_err(SyncError::from)?;
    let clock = syncer_clock()?;
    let client = Client::new(&config.upstream, Some(key), clock.clone())?;
    let sink = open_sink(&config, holder).await?;
    Ok(Syncer {
        config,
        client,
        sink,
        clock,
    })
}

/// A command that has printed what went wrong and ends with the operator
/// contract's `code`.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ExitWith {
    pub code: u8,
    pub message: String,
}

/// `text` to the file `out`, or stdout.
pub fn write_out(out: Option<&std::path::Path>, text: &str) -> Result<()> {
    match out {
        Some(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            }
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
        }
        None => {
            use std::io::Write;
            Ok(std::io::stdout().write_all(text.as_bytes())?)
        }
    }
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json<T: serde::Serialize>(value: &T) -> Result<()> {
    let mut stdout = std::io::stdout();
    serde_json::to_writer_pretty(&mut stdout, value)?;
    println!();
    Ok(())
}

/// The number of the signal that asked the process to stop; 0 before one.
static STOP_SIGNAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// The exit code of a command stopped by a signal: 128 plus its number, as
/// shells report it (143 for SIGTERM, 130 for SIGINT), so a scheduler can
/// tell it from success and from a failure.
pub fn stopped_exit_code() -> u8 {
    match STOP_SIGNAL.load(std::sync::atomic::Ordering::Relaxed) {
        n @ 1..=64 => 128 + n as u8,
        _ => 143,
    }
}

/// Stops `client` sending at SIGTERM or SIGINT: a run then ends at its next
/// commit boundary, with what it received committed.
pub fn stop_sending_on_signal(client: &fdsync_core::upstream::Client) {
    let shutdown = shutdown_on_signal();
    let client = client.clone();
    tokio::spawn(async move {
        shutdown.cancelled().await;
        client.stop_sending();
    });
}

/// Cancelled at the first SIGTERM or SIGINT; a second one exits at once.
pub fn shutdown_on_signal() -> CancellationToken {
    use tokio::signal::unix::{SignalKind, signal};
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let (mut terminate, mut interrupt) = match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(t), Ok(i)) => (t, i),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(message = "Cannot listen for SIGTERM and SIGINT; only a kill stops the process.", error = %e);
                return;
            }
        };
        let mut next = async || {
            tokio::select! {
                _ = terminate.recv() => 15,
                _ = interrupt.recv() => 2,
            }
        };
        let first = next().await;
        STOP_SIGNAL.store(first, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(
            message = "Stopping: no further request is sent; what was received commits. A second signal exits at once."
        );
        cancel.cancel();
        let second = next().await;
        eprintln!("fdsync: a second signal: exiting at once (the last commit stands)");
        std::process::exit(128 + second);
    });
    token
}
