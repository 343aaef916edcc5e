//! The library fdsync's commands run on: it mirrors a financial disclosure
//! data API into a warehouse (DuckDB by default) that data teams query with
//! SQL. The `fdsync` binary parses and dispatches; the report commands
//! (`fdsync-commands`), the emulator and the benchmarks are crates of their
//! own above this one.
//!
//! # Layout
//! Data flows one way, one module per stage:
//! - [`config`]: the operator's TOML and environment overrides; the [`config::Credential`] type.
//! - [`pipeline`]: the pipeline files under `pipelines/`: a feed and what an operator tunes.
//! - [`planner`]: what a run must fetch and what the schedules cost, from the
//!   run log and the checkpoints; where each pipeline stands.
//! - [`upstream`]: the HTTP client: auth, pacing, retries, request log.
//! - [`feeds`]: one module per upstream route family: its wire shapes, its
//!   tables and rows with their docs, and the fetch engine that reads it; the
//!   engines' contracts ([`feeds::Fetch`]), the registry and the catalogue.
//! - [`wire`]: the service's error body, and percent-encoding for paths.
//! - [`records`]: what a feed's reader writes a response into, with quarantine for bad records.
//! - [`drift`]: fields the service sends that no column holds, noticed as records are read.
//! - [`tables`] and [`batch`]: what a table is, how one is declared with its
//!   row struct, and the Arrow batches built from rows; [`describe`]: each
//!   table's and column's description.
//! - [`bookkeeping`]: fdsync's own `_sync_*` tables and the run log's
//!   vocabulary (run times, what resumes, the checkpoints' cursors).
//! - [`sink`]: DuckDB; rows and checkpoints committed together.
//! - [`error`]: why a run could not finish, with its exit code.
//! - [`sync`]: one run of the pipelines, with its run log; one file per fetch engine.
//! - [`clock`]: real or simulated time, shared with the emulator.
//! - [`daemon`]: `fdsync daemon`: schedules, the live stream, metrics, clean stop.
//! - [`metrics`] and [`progress`]: what operators watch; [`alerts`]: what they are told.
//! - [`lake`]: the Delta lake of Parquet files published from the warehouse.

// Unsafe code lives in one module, `sink::duckdb::arrow_scan`: DuckDB's C API
// for Arrow, which the `duckdb` crate does not wrap.
#![deny(unsafe_code)]

pub mod alerts;
pub mod batch;
pub use fdsync_clock as clock;
pub mod bookkeeping;
pub mod config;
pub mod daemon;
pub mod describe;
pub mod drift;
pub mod error;
pub mod feeds;
pub mod lake;
pub mod metrics;
pub mod pipeline;
pub mod planner;
pub mod progress;
pub mod records;
pub mod sink;
pub mod sync;
pub mod tables;
pub mod upstream;
pub mod wire;
