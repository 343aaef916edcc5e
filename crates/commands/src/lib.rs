//! The commands that report on the warehouse or set up around the engine,
//! above it: they read what [`fdsync_core::planner`] and the bookkeeping say,
//! and no module of `fdsync-core` can call them.
//! - [`status`]: `fdsync status`, where each pipeline stands.
//! - [`plan`]: `fdsync plan`, the requests a day the schedules need.
//! - [`check`]: `fdsync check`, whether a configuration can run.
//! - [`reset`]: `fdsync reset`, a pipeline or one company backfilled again.
//! - [`schema`]: `fdsync schema`, the tables described (Markdown, `COMMENT ON`, dbt).
//! - [`state`]: `fdsync state`, the checkpoints as stored.

pub mod check;
pub mod plan;
pub mod reset;
pub mod schema;
pub mod state;
pub mod status;
