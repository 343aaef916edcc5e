//! Integration tests: fdsync against its emulator on 127.0.0.1 and a real DuckDB
//! file. Time is simulated: the clock is shared by the emulator and the client,
//! so waiting out a rate window takes no real time.

/// The tools beyond Rust some tests need, and the line a test says when one is missing.
mod tools;
/// The emulator, warehouse and syncer every test wires up.
use fdsync_testkit as util;

/// The emulator's accounts: key lifecycle, credits, OAuth metadata, header forms.
mod accounts;
/// Backfills to everything the service serves, newest first, under a small budget.
mod backfill;
/// Spending the quota: the ledger, budgets, priorities, concurrency, key files.
mod budget;
/// A chaos upstream: random legal choices and slips, read whole or refused loudly.
mod chaos;
/// The `fdsync` binary: exit codes and the key never printed.
mod cli;
/// The service definitions in deploy/: systemd, Kubernetes, Docker.
mod deploy;
/// The quota run by run: what is due, shared so no pipeline starves.
mod economy;
/// The emulator: as strict as the spec.
mod emulator;
/// A Free key's week of the shipped daemon: the quota, the forecast, auto schedules.
mod free_week;
/// History: versions of changed and withdrawn rows, `<table>_as_of(ts)`.
mod history;
/// A hostile upstream: redirects, absurd headers, stuck cursors, endless bodies.
mod hostile;
/// Incremental loads: no duplicate keys, no rewritten rows, new data lands.
mod incremental;
/// The lake on S3: Delta commits, merges, kill -9, Spark and DuckDB read-back.
mod lake;
/// The workspace's shape: route families complete, generated docs, the binary's commands.
mod layout;
/// The operator's day: check, run summaries, reset.
mod lifecycle;
/// Macro series: every vintage ever served, point in time.
mod macro_history;
/// Running as a service: stream, daemon, SIGTERM, one writer, status, metrics.
mod operations;
/// Pacing and retries: no self-caused 429, Retry-After honoured, quota stops.
mod pacing;
/// Every pipeline's tables against the emulator's ground truth.
mod pipelines;
/// The service's other legal choices and likely slips: read whole, or said loudly.
mod quirks;
/// Crash it, starve it, feed it garbage: lose nothing (RELIABILITY.md).
mod reliability;
/// What a run tells everyone (metrics file, alerts, systemd, logs) and the operator's controls.
mod reporting;
/// A warehouse an earlier release wrote, opened and synced on by this one.
mod upgrade;
/// Every legal shape of the wire read; every leaf the service sends stored.
mod wire;
