//! `fdsync bench`: figures for BENCHMARKS.md, each measured against a baseline
//! taken in the same invocation so that a noisy machine shifts both alike.
//!
//! Benchmarks run the release binary itself (not `cargo bench`, whose profile
//! would rebuild the bundled DuckDB) and talk to an emulator on loopback.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::sync::SyncError;

const BENCH_KEY: &str = "pk_live_bench_unlimited_0001";
/// A Wednesday evening: the news tape then holds a little over a million items.
const BENCH_START: &str = "2026-11-25T23:00:00Z";

/// Memory of a process, from `/proc/<pid>/status` (Linux).
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub rss_kib: u64,
    pub peak_kib: u64,
}

pub fn memory_of(pid: u32) -> Option<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some(Memory {
        rss_kib: field("VmRSS:")?,
        peak_kib: field("VmHWM:")?,
    })
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// `fdsync emulator` as a child process on a free loopback port, with a
/// frozen clock and an account without limits, so the bench measures serving
/// and nothing else.
struct EmulatorProcess {
    child: Child,
    base_url: String,
}

impl EmulatorProcess {
    fn start() -> Result<EmulatorProcess, SyncError> {
        let exe = std::env::current_exe().map_err(|e| SyncError::Other(format!("cannot find fdsync itself: {e}")))?;
        let mut child = Command::new(exe)
            .args([
                "--quiet",
                "emulator",
                "--addr",
                "127.0.0.1:0",
                "--speed",
                "0",
                "--start",
                BENCH_START,
            ])
            .args(["--key", &format!("{BENCH_KEY}=scale:100000000")])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| SyncError::Other(format!("cannot start the emulator: {e}")))?;
        let stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| SyncError::Other(format!("emulator did not start: {e}")))?;
        let base_url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .ok_or_else(|| SyncError::Other(format!("emulator did not announce its address: {line:?}")))?
            .to_owned();
        Ok(EmulatorProcess { child, base_url })
    }

    fn memory(&self) -> Result<Memory, SyncError> {
        memory_of(self.child.id()).ok_or_else(|| SyncError::Other("cannot read /proc/<pid>/status (Linux only)".into()))
    }
}

impl Drop for EmulatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct TapePass {
    pub items: u64,
    pub requests: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub idle: Memory,
    pub after: Memory,
}

/// Pages the news feed back from the newest item with `before` cursors until
/// `items` were served, in a fresh emulator process.
pub async fn emulator_tape_pass(items: u64) -> Result<TapePass, SyncError> {
    let emulator = EmulatorProcess::start()?;
    let http = reqwest::Client::new();
    // One request first, so the baseline includes a warmed-up server.
    let feed = format!("{}/api/v1/news/feed", emulator.base_url);
    let fetch = |cursor: Option<String>| {
        let mut req = http
            .get(&feed)
            .header("X-API-KEY", BENCH_KEY)
            .query(&[("limit", "200")]);
        if let Some(c) = cursor {
            req = req.query(&[("before", c)]);
        }
        async move {
            let body = req
                .send()
                .await
                .and_then(|r| r.error_for_status())
                .map_err(|e| SyncError::Other(format!("feed request failed: {e}")))?
                .bytes()
                .await
                .map_err(|e| SyncError::Other(format!("feed body failed: {e}")))?;
            let page: serde_json::Value =
                serde_json::from_slice(&body).map_err(|e| SyncError::Other(format!("feed page is not JSON: {e}")))?;
            Ok::<_, SyncError>((body.len() as u64, page))
        }
    };
    fetch(None).await?;
    let idle = emulator.memory()?;
    let started = Instant::now();
    let (mut served, mut requests, mut bytes, mut cursor) = (0u64, 0u64, 0u64, None);
    while served < items {
        let (len, page) = fetch(cursor.take()).await?;
        requests += 1;
        bytes += len;
        served += page["items"].as_array().map_or(0, |a| a.len() as u64);
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(TapePass {
        items: served,
        requests,
        bytes,
        seconds,
        idle,
        after: emulator.memory()?,
    })
}

/// The emulator's peak memory over full passes at three tape sizes; the
/// baseline is the same process's resident memory before the pass.
pub async fn emulator_memory(sizes: &[u64], out: &mut impl Write) -> Result<(), SyncError> {
    writeln!(
        out,
        "emulator peak memory while serving the news tape back to front (limit=200 pages)"
    )?;
    writeln!(
        out,
        "| items served | requests | MiB sent | seconds | idle RSS MiB (baseline) | peak RSS MiB | peak / idle |"
    )?;
    writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|")?;
    for &size in sizes {
        let pass = emulator_tape_pass(size).await?;
        writeln!(
            out,
            "| {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.2} |",
            pass.items,
            pass.requests,
            pass.bytes as f64 / (1024.0 * 1024.0),
            pass.seconds,
            mib(pass.idle.rss_kib),
            mib(pass.after.peak_kib),
            pass.after.peak_kib as f64 / pass.idle.rss_kib.max(1) as f64,
        )?;
        out.flush()?;
    }
    Ok(())
}
