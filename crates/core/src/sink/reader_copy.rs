//! The reader copy (`[warehouse] reader_copy`): the closed warehouse file
//! copied beside its destination and renamed over it, so a reader that holds
//! the old copy open keeps reading it and the writer never waits for one.

use std::path::{Path, PathBuf};

use super::SinkError;

/// What `publish` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// The copy was replaced; its size in bytes.
    Replaced(u64),
    /// The warehouse had not changed since the copy was made.
    Unchanged,
}

/// Copies the closed warehouse at `warehouse` to `copy`, unless the copy
/// already is of this very file: the copy takes the warehouse's modification
/// time, so a later `sync --once` process can tell without reading either.
///
/// # Errors
/// When the warehouse still has a write-ahead log (it was not closed cleanly)
/// or the copy cannot be written; the old copy, if any, stays in place.
pub(crate) fn publish(warehouse: &Path, copy: &Path) -> Result<Published, SinkError> {
    let failed = |message: String| SinkError::ReaderCopy {
        path: copy.to_owned(),
        message,
    };
    let wal = crate::config::wal_path(warehouse);
    if wal.exists() {
        return Err(failed(format!(
            "the warehouse has changes not yet written into its file ({}); the next run copies it",
            wal.display()
        )));
    }
    let meta = std::fs::metadata(warehouse).map_err(|e| failed(format!("reading {}: {e}", warehouse.display())))?;
    let modified = meta.modified().ok();
    if let (Some(modified), Ok(copied)) = (modified, std::fs::metadata(copy))
        && copied.len() == meta.len()
        && copied.modified().ok() == Some(modified)
    {
        return Ok(Published::Unchanged);
    }
    let dir = match copy.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => dir.to_owned(),
        None => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| failed(format!("creating {}: {e}", dir.display())))?;
    // In the destination's folder, so the rename cannot cross file systems.
    let partial = tempfile::Builder::new()
        .prefix(".fdsync-reader-copy-")
        .tempfile_in(&dir)
        .map_err(|e| failed(format!("creating a file in {}: {e}", dir.display())))?;
    let mut source =
        std::fs::File::open(warehouse).map_err(|e| failed(format!("opening {}: {e}", warehouse.display())))?;
    let mut target = partial.as_file();
    let bytes = std::io::copy(&mut source, &mut target).map_err(|e| failed(format!("copying: {e}")))?;
    if let Some(modified) = modified {
        partial
            .as_file()
            .set_modified(modified)
            .map_err(|e| failed(format!("dating the copy: {e}")))?;
    }
    partial
        .as_file()
        .sync_all()
        .map_err(|e| failed(format!("flushing the copy: {e}")))?;
    partial
        .persist(copy)
        .map_err(|e| failed(format!("renaming the copy into place: {}", e.error)))?;
    // The rename is durable only once the folder is flushed too.
    if let Ok(folder) = std::fs::File::open(&dir) {
        let _ = folder.sync_all();
    }
    Ok(Published::Replaced(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_replaced_whole_and_an_unchanged_warehouse_is_not_copied_again() {
        let dir = tempfile::tempdir().unwrap();
        let warehouse = dir.path().join("wh.duckdb");
        let copy = dir.path().join("read").join("wh.read.duckdb");
        std::fs::write(&warehouse, b"first").unwrap();
        assert_eq!(publish(&warehouse, &copy).unwrap(), Published::Replaced(5));
        assert_eq!(std::fs::read(&copy).unwrap(), b"first");
        // A reader's open handle keeps the old file when the copy is replaced.
        let held = std::fs::File::open(&copy).unwrap();
        assert_eq!(publish(&warehouse, &copy).unwrap(), Published::Unchanged);
        std::fs::write(&warehouse, b"second, longer").unwrap();
        assert_eq!(publish(&warehouse, &copy).unwrap(), Published::Replaced(14));
        assert_eq!(std::fs::read(&copy).unwrap(), b"second, longer");
        assert_eq!(std::io::read_to_string(held).unwrap(), "first");
        let left: Vec<_> = std::fs::read_dir(copy.parent().unwrap()).unwrap().collect();
        assert_eq!(left.len(), 1, "no partial copy left behind");
    }

    #[test]
    fn a_warehouse_with_a_pending_log_is_not_copied() {
        let dir = tempfile::tempdir().unwrap();
        let warehouse = dir.path().join("wh.duckdb");
        let copy = dir.path().join("wh.read.duckdb");
        std::fs::write(&warehouse, b"data").unwrap();
        std::fs::write(crate::config::wal_path(&warehouse), b"log").unwrap();
        let e = publish(&warehouse, &copy).unwrap_err().to_string();
        assert!(e.contains("not yet written"), "{e}");
        assert!(!copy.exists());
    }
}
