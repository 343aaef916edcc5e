//! `fdsync lake`: publish, compact and vacuum the Delta lake.

use std::io::Write as _;

use anyhow::Result;
use clap::Subcommand;
use fdsync_core::config::Config;
use fdsync_core::lake::{Lake, PublishReport};
use fdsync_core::sync::SyncError;

use crate::common::{open_sink, print_json};

#[derive(Subcommand)]
pub enum LakeCommand {
    /// Publish every row committed to DuckDB since the last publish, one Delta
    /// commit per table (`sync --once` does this after its pipelines).
    ///
    /// Example: AWS_REGION=eu-west-1 fdsync lake publish
    Publish {
        /// Print what was published as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rewrite each partition that has accumulated several files (each publish
    /// of an append-only table adds one) as one file. Readers' results do not
    /// change. Run it now and then, e.g. nightly.
    ///
    /// Example: fdsync lake compact --min-files 4
    Compact {
        /// Compact partitions with at least this many live files.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(2..))]
        min_files: u64,
        #[arg(long)]
        json: bool,
    },
    /// Delete data files that no version younger than --retain-hours needs:
    /// files replaced by publishes and compactions, and files a crashed publish
    /// uploaded but never committed. Time travel to older versions ends there.
    ///
    /// Example: fdsync lake vacuum --retain-hours 168 --dry-run
    Vacuum {
        /// Keep files needed by any version of the last N hours (at least 1: a
        /// publish in flight elsewhere has uploaded files it has not committed yet).
        #[arg(long, default_value_t = 168, value_parser = clap::value_parser!(u64).range(1..))]
        retain_hours: u64,
        /// List what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
    },
}

/// The lake `[warehouse] parquet_dir` names, if any, with its scratch folder beside the warehouse.
pub fn open_lake(config: &Config) -> Result<Option<Lake>> {
    Ok(Lake::configured(&config.warehouse).map_err(SyncError::from)?)
}

/// The lake a `fdsync lake` command works on: it needs one.
fn configured_lake(config: &Config) -> Result<Lake> {
    open_lake(config)?.ok_or_else(|| {
        anyhow::anyhow!("no lake is configured: set [warehouse] parquet_dir (a folder or an s3://, gs://, az:// URL)")
    })
}

pub async fn run(config: &Config, command: LakeCommand) -> Result<()> {
    let lake = configured_lake(config)?;
    let mut out = std::io::stdout();
    match command {
        LakeCommand::Publish { json } => {
            let sink = open_sink(config, "fdsync lake publish").await?;
            let published = lake.publish(&sink).await;
            sink.close().await;
            let published = published.map_err(SyncError::from)?;
            if json {
                return print_json(&published);
            }
            print_published(&mut out, &published)?;
        }
        LakeCommand::Compact { min_files, json } => {
            let min = usize::try_from(min_files).unwrap_or(usize::MAX);
            let compacted = lake.compact(min).await.map_err(SyncError::from)?;
            if json {
                return print_json(&compacted);
            }
            if compacted.is_empty() {
                writeln!(out, "lake: no partition has {min_files} files or more")?;
            }
            for t in &compacted {
                writeln!(
                    out,
                    "lake: {:<26} -{} +{} files  version {}",
                    t.table, t.files_removed, t.files_added, t.version
                )?;
            }
        }
        LakeCommand::Vacuum {
            retain_hours,
            dry_run,
            json,
        } => {
            let retain = chrono::Duration::hours(i64::try_from(retain_hours).unwrap_or(i64::MAX / 3_600_000));
            let vacuumed = lake.vacuum(retain, dry_run).await.map_err(SyncError::from)?;
            if json {
                return print_json(&vacuumed);
            }
            let verb = if dry_run { "would delete" } else { "deleted" };
            if vacuumed.is_empty() {
                writeln!(out, "lake: nothing to delete")?;
            }
            for t in &vacuumed {
                writeln!(out, "lake: {:<26} {verb} {} files", t.table, t.files.len())?;
            }
        }
    }
    Ok(())
}

pub fn print_published(out: &mut impl std::io::Write, published: &PublishReport) -> std::io::Result<()> {
    if published.tables.is_empty() {
        return writeln!(out, "lake: nothing new to publish");
    }
    for t in &published.tables {
        writeln!(
            out,
            "lake: {:<26} {:>9} rows  +{} -{} files  version {}",
            t.table, t.rows, t.files_added, t.files_removed, t.version
        )?;
    }
    Ok(())
}
