//! Progress of long work: a live line per running pipeline on a terminal,
//! and a plain log line every half minute otherwise (journald, `kubectl
//! logs`), so a backfill that takes an hour never looks hung.

use std::io::{IsTerminal, Write};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

static BARS: OnceLock<MultiProgress> = OnceLock::new();

/// Turns live bars on when stderr is a terminal and `wanted` (text logs, not
/// quiet); otherwise progress goes to plain log lines.
pub fn init(wanted: bool) {
    if wanted && std::io::stderr().is_terminal() {
        let _ = BARS.set(MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
    }
}

const PLAIN_EVERY: Duration = Duration::from_secs(30);
const LIVE_EVERY: Duration = Duration::from_millis(150);

/// One pipeline's progress for the length of its run.
pub struct Tracker {
    pipeline: String,
    bar: Option<ProgressBar>,
    started: Instant,
}

impl Tracker {
    pub fn start(pipeline: &str) -> Tracker {
        let bar = BARS.get().map(|bars| {
            let bar = bars.add(ProgressBar::new_spinner());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix:<16} {msg} [{elapsed}]")
                    .expect("a fixed template parses"),
            );
            bar.set_prefix(pipeline.to_owned());
            bar
        });
        Tracker {
            pipeline: pipeline.to_owned(),
            bar,
            started: Instant::now(),
        }
    }

    /// Waits until the next update is due.
    pub async fn tick(&self) {
        let every = if self.bar.is_some() { LIVE_EVERY } else { PLAIN_EVERY };
        tokio::time::sleep(every).await;
    }

    pub fn show(&self, requests: u64, rows: u64) {
        match &self.bar {
            Some(bar) => {
                bar.set_message(format!("{requests} requests, {rows} rows"));
                bar.tick();
            }
            None => tracing::info!(
                message = "Pipeline progress.",
                pipeline = %self.pipeline,
                requests,
                rows_written = rows,
                elapsed_s = self.started.elapsed().as_secs()
            ),
        }
    }

    pub fn finish(self) {
        if let (Some(bar), Some(bars)) = (self.bar, BARS.get()) {
            bar.finish_and_clear();
            bars.remove(&bar);
        }
    }
}

/// Log lines written around the live bars instead of through them.
#[derive(Clone, Copy, Default)]
pub struct LogWriter;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogLine;

    fn make_writer(&'a self) -> LogLine {
        LogLine(Vec::with_capacity(256))
    }
}

/// One log event, written to stderr in one piece when dropped.
pub struct LogLine(Vec<u8>);

impl Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        let write = || {
            let _ = std::io::stderr().write_all(&self.0);
        };
        match BARS.get() {
            Some(bars) => bars.suspend(write),
            None => write(),
        }
    }
}
