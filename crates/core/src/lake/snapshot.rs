//! Snapshot folders for readers without a Delta reader (a BI tool pointed at
//! a folder of Parquet files, `pyarrow.dataset`, a plain `read_parquet`):
//! they list every file in a table's folder, superseded ones included until
//! `lake vacuum`, and would count a rewritten partition twice.
//!
//! With `[warehouse] parquet_snapshots`, each publish also links a table's
//! live files (hard links: no copy) into `_snapshots/<table>/v<version>/`
//! and then points `_current/<table>` at it by renaming a symbolic link over
//! the old one, which a reader sees whole or not at all. Readers open
//! `_current/<table>`. The newest [`KEPT`] snapshots of a table stay, so a
//! reader that listed one while the next was published can still open its
//! files.

use std::path::{Path, PathBuf};

use super::LakeError;
use super::delta;
use super::store::LakeRoot;
use crate::tables::TableDef;

/// Snapshots kept per table: the current one and those readers may still
/// be reading.
pub const KEPT: usize = 3;

/// The folder readers open for `table`.
pub fn current(lake: &Path, table: &str) -> PathBuf {
    lake.join("_current").join(table)
}

fn version_dir(version: u64) -> String {
    format!("v{version:020}")
}

/// Makes `_current/<table>` show the table's live files at its newest Delta
/// version; returns that version when it had to move.
///
/// # Errors
/// When the lake is not a local folder, or a link cannot be made.
pub async fn refresh(root: &LakeRoot, table: &'static TableDef) -> Result<Option<u64>, LakeError> {
    let lake = local_folder(root)?;
    let Some(delta) = delta::open_existing(root, table).await? else {
        return Ok(None);
    };
    let version = delta.version().unwrap_or(0);
    let current = current(&lake, table.name);
    let target = Path::new("..")
        .join("_snapshots")
        .join(table.name)
        .join(version_dir(version));
    if std::fs::read_link(&current).is_ok_and(|t| t == target) {
        return Ok(None);
    }
    let io = |context: &'static str, path: &Path| {
        let path = path.display().to_string();
        move |e: std::io::Error| LakeError::Store {
            table: table.name.to_owned(),
            context,
            path,
            source: Box::new(e),
        }
    };
    let snapshots = lake.join("_snapshots").join(table.name);
    let dir = snapshots.join(version_dir(version));
    // A snapshot a crash left half made is made again.
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(io("clearing the snapshot", &dir))?;
    }
    let files = lake.join(table.name);
    for file in delta::live_files(&delta, table)? {
        // Partition values are years and months: no character the log escapes.
        let (from, to) = (files.join(&file.path), dir.join(&file.path));
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(io("creating the snapshot", parent))?;
        }
        if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to).map_err(io("copying into the snapshot", &from))?;
        }
    }
    std::fs::create_dir_all(&dir).map_err(io("creating the snapshot", &dir))?;
    let links = lake.join("_current");
    std::fs::create_dir_all(&links).map_err(io("creating", &links))?;
    let staged = links.join(format!(".{}.{}", table.name, std::process::id()));
    let _ = std::fs::remove_file(&staged);
    std::os::unix::fs::symlink(&target, &staged).map_err(io("linking", &staged))?;
    std::fs::rename(&staged, &current).map_err(io("switching", &current))?;
    prune(&snapshots).map_err(io("pruning old snapshots", &snapshots))?;
    Ok(Some(version))
}

/// Removes all but the newest [`KEPT`] snapshots of a table.
fn prune(snapshots: &Path) -> std::io::Result<()> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir(snapshots)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('v')))
        .collect();
    versions.sort();
    let old = versions.len().saturating_sub(KEPT);
    for dir in &versions[..old] {
        std::fs::remove_dir_all(dir)?;
    }
    Ok(())
}

/// The lake's folder, when it is on this machine's file system.
///
/// # Errors
/// When it is an object store: snapshots need links and an atomic rename.
pub fn local_folder(root: &LakeRoot) -> Result<PathBuf, LakeError> {
    match root.url.scheme() {
        "file" => root.url.to_file_path().map_err(|()| LakeError::Location {
            location: root.url.to_string(),
            message: "not a local path".into(),
        }),
        _ => Err(LakeError::Location {
            location: root.url.to_string(),
            message: "parquet_snapshots needs a lake on a local or mounted file system (links and an atomic rename); \
                      object-store readers should use the Delta log (docs/lake.md)"
                .into(),
        }),
    }
}
