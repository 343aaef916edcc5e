//! fdsync mirrors a financial disclosure data API into a warehouse (DuckDB by
//! default) that data teams query with SQL.
//!
//! # Layout
//! Data flows one way, one module per stage:
//! - [`config`]: the operator's TOML and environment overrides; the [`config::ApiKey`] type.
//! - [`pipeline`]: the declarative pipeline files under `pipelines/`.
//! - [`planner`]: what a run must fetch, from checkpoints.
//! - [`upstream`]: the HTTP client: auth, pacing, retries, request log.
//! - [`wire`]: the service's payload shapes.
//! - [`records`]: responses to rows, with quarantine for bad records.
//! - [`tables`] and [`batch`]: the warehouse schema and Arrow batches built from it.
//! - [`sink`]: DuckDB; rows and checkpoints committed together.
//! - [`sync`]: one run of the pipelines, with its run log.
//! - [`emulator`]: the upstream service, offline, for tests, demo and benchmarks.
//! - [`clock`]: real or simulated time, shared by the emulator and the client.
//! - [`daemon`]: `fdsync daemon`: schedules, the live stream, metrics, clean stop.
//! - [`status`]: `fdsync status`, read from the bookkeeping tables.
//! - [`metrics`] and [`progress`]: what operators watch.
//! - [`demo`]: `fdsync demo`.

pub mod batch;
pub mod bench;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod emulator;
pub mod lake;
pub mod metrics;
pub mod pipeline;
pub mod planner;
pub mod progress;
pub mod records;
pub mod sink;
pub mod status;
pub mod sync;
pub mod tables;
pub mod upstream;
pub mod wire;
