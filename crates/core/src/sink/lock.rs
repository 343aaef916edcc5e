//! One writer per warehouse.
//!
//! DuckDB locks its file only while a connection is open, and fdsync lets go
//! of the file between commits so that readers can open it (see
//! docs/operations.md). The writer's own claim therefore lives in a lock file
//! beside the database, held for the life of the process: the OS drops it
//! when the process ends, even by `kill -9`, so it never goes stale. The file
//! names its holder, so a second writer can say who it is waiting for.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use chrono::{SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

/// Who holds a warehouse, as written into its lock file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub command: String,
    pub host: String,
    pub since: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` (pid {} on {}, since {})",
            self.command, self.pid, self.host, self.since
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "warehouse {database} is in use by another fdsync writer: {holder}. One process writes a warehouse at a \
         time: stop that one or let it finish, then run again. To read the warehouse while it runs, see \
         docs/operations.md (\"Reading while fdsync runs\")."
    )]
    Held { database: PathBuf, holder: String },
    #[error("cannot create the writer lock {path}: {message}")]
    Io { path: PathBuf, message: String },
}

/// The held claim; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct WriterLock {
    _file: File,
    path: PathBuf,
}

impl WriterLock {
    /// The lock file of `database`: `<database>.lock` beside it.
    pub fn path_for(database: &Path) -> PathBuf {
        let mut name = database.as_os_str().to_owned();
        name.push(".lock");
        PathBuf::from(name)
    }

    /// Claims `database` for this process, as `command` (shown to a second writer).
    ///
    /// # Errors
    /// [`LockError::Held`] naming the holder when another process has it.
    pub fn acquire(database: &Path, command: &str) -> Result<WriterLock, LockError> {
        let path = Self::path_for(database);
        let io = |e: std::io::Error| LockError::Io {
            path: path.clone(),
            message: e.to_string(),
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let holder = serde_json::from_str::<Holder>(&text)
                    .map(|h| h.to_string())
                    .unwrap_or_else(|_| format!("a process that left no details in {}", path.display()));
                return Err(LockError::Held {
                    database: database.to_owned(),
                    holder,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        let holder = Holder {
            pid: std::process::id(),
            command: command.to_owned(),
            host: hostname(),
            since: Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true),
        };
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        file.write_all(serde_json::to_string(&holder).expect("a holder serializes").as_bytes())
            .map_err(io)?;
        file.flush().map_err(io)?;
        Ok(WriterLock { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The process holding `database` for writing, if any. The probe takes a
    /// shared lock for an instant; a writer starting in that instant would be
    /// refused, which is why only `fdsync status` asks.
    pub fn holder_of(database: &Path) -> Option<Holder> {
        let mut file = File::open(Self::path_for(database)).ok()?;
        match file.try_lock_shared() {
            Ok(()) => {
                let _ = file.unlock();
                None
            }
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                file.read_to_string(&mut text).ok()?;
                serde_json::from_str(&text).ok()
            }
            Err(TryLockError::Error(_)) => None,
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "this host".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_claim_names_the_first_holder_until_it_is_released() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("w.duckdb");
        let first = WriterLock::acquire(&db, "fdsync daemon").unwrap();
        let err = WriterLock::acquire(&db, "fdsync sync --once").unwrap_err().to_string();
        assert!(err.contains("fdsync daemon"), "{err}");
        assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
        drop(first);
        WriterLock::acquire(&db, "fdsync sync --once").unwrap();
    }
}
