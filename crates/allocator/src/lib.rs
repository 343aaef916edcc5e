//! How soon the allocator returns the memory DuckDB frees.
//!
//! jemalloc starts with its purging inline and at once (`background_thread:false`,
//! `dirty_decay_ms:0`, built in by `.cargo/config.toml`): a thread that frees
//! whole pages returns them as it frees them. A run that loads little then
//! holds what is live, not what it freed. A bulk load frees and reuses so much
//! that this doubles its system time, so from a load of `BULK_LOAD_ROWS`
//! rows the writer hands purging to a background thread, which returns pages
//! unused for `BACKGROUND_DECAY_MS`, until `BULK_LINGER` of small loads
//! hands it back.
//!
//! A binary declares [`Jemalloc`] its global allocator and hands
//! [`note_load`] to the sink (`fdsync_core::sink::on_load`).

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tikv_jemalloc_ctl::{Access, AsName};
pub use tikv_jemallocator::Jemalloc;

/// Rows in one load from which loads count as bulk.
const BULK_LOAD_ROWS: usize = 1_000;

/// Small loads for this long after the last bulk one end the bulk pace.
const BULK_LINGER: Duration = Duration::from_secs(5);

/// How long freed pages stay for reuse while a background thread purges.
const BACKGROUND_DECAY_MS: isize = 100;

/// Who returns freed pages to the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purging {
    /// The thread that frees, as it frees.
    Inline,
    /// A background thread, after `BACKGROUND_DECAY_MS`.
    Background,
}

/// The pace the writer's loads set.
#[derive(Debug, Default)]
struct Pace {
    /// When the last bulk load began, while purging is in the background.
    last_bulk_load: Option<Instant>,
}

impl Pace {
    /// The purging to switch to as a load of `rows` rows begins at `now`,
    /// when it changes.
    fn on_load(&mut self, rows: usize, now: Instant) -> Option<Purging> {
        if rows >= BULK_LOAD_ROWS {
            let switch = self.last_bulk_load.is_none().then_some(Purging::Background);
            self.last_bulk_load = Some(now);
            switch
        } else if self
            .last_bulk_load
            .is_some_and(|at| now.saturating_duration_since(at) >= BULK_LINGER)
        {
            self.last_bulk_load = None;
            Some(Purging::Inline)
        } else {
            None
        }
    }
}

static PACE: Mutex<Pace> = Mutex::new(Pace { last_bulk_load: None });

/// Tells the pace that the writer begins a load of `rows` rows.
pub fn note_load(rows: usize) {
    if !started_inline() {
        return;
    }
    let change = PACE.lock().ok().and_then(|mut pace| pace.on_load(rows, Instant::now()));
    if let Some(purging) = change
        && let Err(e) = set(purging)
    {
        tracing::debug!(message = "Could not change the allocator's purging.", ?purging, error = %e);
    }
}

/// Whether jemalloc started with its purging inline: when an operator turned
/// background threads on (`MALLOC_CONF`), the pace leaves them be.
fn started_inline() -> bool {
    *STARTED_INLINE.get_or_init(|| matches!(tikv_jemalloc_ctl::opt::background_thread::read(), Ok(false)))
}

static STARTED_INLINE: OnceLock<bool> = OnceLock::new();

/// Switches the process's purging, for processes that only bulk load or
/// serve (the emulator, the bench's baselines) as well as for the pace.
///
/// # Errors
/// When jemalloc refuses a setting, such as in a build without it.
pub fn set(purging: Purging) -> Result<(), tikv_jemalloc_ctl::Error> {
    let background = purging == Purging::Background;
    let decay_ms = if background { BACKGROUND_DECAY_MS } else { 0 };
    tikv_jemalloc_ctl::background_thread::write(background)?;
    // The default for arenas made from now on, then every arena made so far:
    // the automatic ones and, after them, the one of allocations past
    // `oversize_threshold` (DuckDB's blocks), which is made lazily.
    b"arenas.dirty_decay_ms\0".name().write(decay_ms)?;
    let automatic = tikv_jemalloc_ctl::opt::narenas::read()?;
    for arena in 0..=automatic {
        let name = format!("arena.{arena}.dirty_decay_ms\0");
        if let Err(e) = name.as_bytes().name().write(decay_ms) {
            tracing::trace!(message = "An arena not made yet.", arena, error = %e);
        }
    }
    tracing::debug!(message = "Allocator purging changed.", ?purging, decay_ms);
    Ok(())
}

/// glibc's `malloc_trim`, for binaries that link glibc statically. DuckDB
/// calls it, and glibc's own would pull glibc's malloc into the link beside
/// jemalloc's. It trims nothing, as glibc's does in a dynamic build where
/// jemalloc leaves glibc's heap empty; the pace above returns jemalloc's pages.
#[cfg(all(target_os = "linux", target_env = "gnu", target_feature = "crt-static"))]
#[unsafe(no_mangle)]
pub extern "C" fn malloc_trim(_pad: usize) -> std::ffi::c_int {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_loads_purge_in_the_background_until_small_loads_linger() {
        let start = Instant::now();
        let at = |secs: f64| start + Duration::from_secs_f64(secs);
        let mut pace = Pace::default();
        assert_eq!(pace.on_load(10, at(0.0)), None, "small loads keep the inline start");
        assert_eq!(pace.on_load(BULK_LOAD_ROWS, at(1.0)), Some(Purging::Background));
        assert_eq!(pace.on_load(50_000, at(2.0)), None, "already in the background");
        assert_eq!(
            pace.on_load(10, at(6.9)),
            None,
            "within the linger of the last bulk load"
        );
        assert_eq!(pace.on_load(20_000, at(7.0)), None);
        assert_eq!(pace.on_load(10, at(11.9)), None);
        assert_eq!(pace.on_load(10, at(12.0)), Some(Purging::Inline));
        assert_eq!(pace.on_load(10, at(30.0)), None, "inline stays inline");
        assert_eq!(pace.on_load(BULK_LOAD_ROWS - 1, at(31.0)), None);
        assert_eq!(pace.on_load(BULK_LOAD_ROWS, at(32.0)), Some(Purging::Background));
    }

    #[test]
    fn jemalloc_takes_either_purging() {
        set(Purging::Background).unwrap();
        set(Purging::Inline).unwrap();
    }
}
