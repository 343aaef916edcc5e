//! The library fdsync's commands run on: it mirrors a financial disclosure
//! data API into a warehouse (DuckDB by default) that data teams query with
//! SQL. The `fdsync` binary parses and dispatches; the emulator and the
//! benchmarks are crates of their own that use this one.
//!
//! # Layout
//! Data flows one way, one module per stage:
//! - [`config`]: the operator's TOML and environment overrides; the [`config::ApiKey`] type.
//! - [`pipeline`]: the pipeline files under `pipelines/`: a feed and what an operator tunes.
//! - [`planner`]: what a run must fetch, from checkpoints.
//! - [`upstream`]: the HTTP client: auth, pacing, retries, request log.
//! - [`feeds`]: one module per upstream route family: its wire shapes, its
//!   tables and rows with their docs, and the fetch engine that reads it; the
//!   engines' contracts ([`feeds::Fetch`]), the registry and the catalogue.
//! - [`wire`]: the service's error body, and percent-encoding for paths.
//! - [`records`]: what a feed's reader writes a response into, with quarantine for bad records.
//! - [`drift`]: fields the service sends that no column holds, noticed as records are read.
//! - [`tables`] and [`batch`]: what a table is, how one is declared with its
//!   row struct, and the Arrow batches built from rows.
//! - [`bookkeeping`]: fdsync's own `_sync_*` tables and the run log's
//!   vocabulary (run times, what resumes, the checkpoints' cursors).
//! - [`sink`]: DuckDB; rows and checkpoints committed together.
//! - [`error`]: why a run could not finish, with its exit code.
//! - [`sync`]: one run of the pipelines, with its run log; one file per fetch engine.
//! - [`clock`]: real or simulated time, shared with the emulator.
//! - [`plan`]: `fdsync plan`: the requests a day the schedules need, and `auto` schedules.
//! - [`daemon`]: `fdsync daemon`: schedules, the live stream, metrics, clean stop.
//! - [`status`]: `fdsync status`, read from the bookkeeping tables.
//! - [`check`]: `fdsync check`: whether a configuration can run.
//! - [`reset`]: `fdsync reset`: a pipeline or one company backfilled again.
//! - [`schema`]: `fdsync schema`: the tables described (Markdown, `COMMENT ON`, dbt).
//! - [`metrics`] and [`progress`]: what operators watch.
//! - [`lake`]: the Delta lake of Parquet files published from the warehouse.

// Unsafe code lives in one module, `sink::duckdb::arrow_scan`: DuckDB's C API
// for Arrow, which the `duckdb` crate does not wrap.
#![deny(unsafe_code)]

pub mod batch;
pub use fdsync_clock as clock;
pub mod bookkeeping;
pub mod check;
pub mod config;
pub mod daemon;
pub mod drift;
pub mod error;
pub mod feeds;
pub mod lake;
pub mod metrics;
pub mod pipeline;
pub mod plan;
pub mod planner;
pub mod progress;
pub mod records;
pub mod reset;
pub mod schema;
pub mod sink;
pub mod status;
pub mod sync;
pub mod tables;
pub mod upstream;
pub mod wire;

// The tests' kit, shared with the integration tests, names this crate as they do.
#[cfg(test)]
extern crate self as fdsync_core;
#[cfg(test)]
#[allow(dead_code)]
pub(crate) mod testkit;
