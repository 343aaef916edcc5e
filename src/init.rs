//! `fdsync init [DIR]`: the configuration and pipelines the binary carries,
//! written out for editing as `DIR/config/fdsync.toml` and
//! `DIR/pipelines/*.toml`, where a run from `DIR` finds them.

use std::path::Path;

use anyhow::Result;
use fdsync_core::config::SHIPPED_CONFIG;
use fdsync_core::pipeline::SHIPPED;

use crate::common::ExitWith;

/// Writes the files; refuses, writing none, when one exists and `force` is off.
///
/// # Errors
/// A file that exists (exit 2), or a folder that cannot be written.
pub fn run(dir: &Path, force: bool, out: &mut impl std::io::Write) -> Result<()> {
    let mut files = vec![(dir.join("config/fdsync.toml"), SHIPPED_CONFIG)];
    files.extend(
        SHIPPED
            .iter()
            .map(|(name, text)| (dir.join("pipelines").join(name), *text)),
    );
    let existing: Vec<String> = files
        .iter()
        .filter(|(path, _)| path.exists())
        .map(|(path, _)| path.display().to_string())
        .collect();
    if !existing.is_empty() && !force {
        return Err(ExitWith {
            code: 2,
            message: format!(
                "{} file(s) exist already, the first {}: nothing was written; edit them, or pass --force to \
                 replace them with the shipped ones",
                existing.len(),
                existing[0]
            ),
        }
        .into());
    }
    for (path, text) in &files {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    writeln!(
        out,
        "wrote {} and {} pipelines in {}",
        files[0].0.display(),
        SHIPPED.len(),
        dir.join("pipelines").display()
    )?;
    writeln!(out, "next, from {}:", dir.display())?;
    writeln!(
        out,
        "  edit config/fdsync.toml: [universe] companies, [warehouse] duckdb"
    )?;
    writeln!(out, "  export FDSYNC_API_KEY=pk_live_...")?;
    writeln!(out, "  fdsync check && fdsync plan && fdsync sync --once")?;
    Ok(())
}
