//! How the sync side should group its commits for this warehouse: what the
//! sink's tuning asks of the writer's callers, derived from one setting,
//! `[warehouse] memory_limit_mb`.

use std::time::Duration;

/// Responses (companies, filings, series) committed in one transaction at
/// most by default: enough to spread a commit's fixed cost, few enough that
/// a crash re-reads little.
pub const COMMIT_GROUP: usize = 10;

/// How the sync side groups what it fetched into commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitPolicy {
    /// Responses of the plain per-company or per-document pipelines per commit.
    pub group: usize,
    /// News pages per commit: DuckDB holds a transaction's rows and index
    /// entries in memory until it commits.
    pub page_group: usize,
    /// Companies per commit of the per-company pipelines: thirty whole price
    /// histories fill a row group, written straight into the file.
    pub company_group: usize,
    /// Groups the fetch side may run ahead of the writer, so fetching goes on
    /// while DuckDB compresses a full row group.
    pub groups_ahead: usize,
    /// Rows fetched and not yet committed, at most, in KiB of values
    /// (`IN_FLIGHT_MIB`); a tape page waiting packed counts a few times its
    /// packed bytes instead.
    pub in_flight_kib: u32,
    /// Rows a response must bring for its commit to be held open for the
    /// next ones: a backfill's pages are, a poll's few rows are not.
    pub bulk_response_rows: usize,
    /// Company lookups per commit of the universe, more than the
    /// per-company pipelines' group: a lookup brings a row or two to small
    /// tables, and a commit costs the writer a few statements a table
    /// whatever it holds.
    pub universe_group: usize,
    /// Rows a group of bulk responses waits for before it commits: a commit
    /// of three pages kept the writer busy with fixed costs.
    pub bulk_group_rows: usize,
    /// How long such a group waits for the next response: bounded, since the
    /// fetch side may be waiting for room only a commit gives back.
    pub bulk_group_wait: Duration,
}

impl CommitPolicy {
    /// The policy for a writer limited to `memory_limit_mb`. At every limit
    /// commits are large enough that their fixed costs do not show and the
    /// fetch side runs a few groups ahead; what it fetched and
    /// has not committed is bounded in bytes, which is what grows a peak.
    pub fn for_memory_limit_mb(memory_limit_mb: u64) -> CommitPolicy {
        let scaled = |per: u64, low: usize, high: usize| {
            usize::try_from(memory_limit_mb / per)
                .unwrap_or(usize::MAX)
                .clamp(low, high)
        };
        let in_flight_mib = (memory_limit_mb / 8).clamp(IN_FLIGHT_MIB.0, IN_FLIGHT_MIB.1);
        CommitPolicy {
            group: COMMIT_GROUP,
            page_group: scaled(6, 20, 40),
            company_group: scaled(8, 20, 30),
            groups_ahead: scaled(32, 4, 8),
            in_flight_kib: u32::try_from(in_flight_mib * 1024).unwrap_or(u32::MAX),
            bulk_response_rows: 100,
            universe_group: UNIVERSE_GROUP,
            bulk_group_rows: 8_000,
            bulk_group_wait: Duration::from_millis(25),
        }
    }
}

/// Company lookups per commit ([`CommitPolicy::universe_group`]).
const UNIVERSE_GROUP: usize = 100;

/// The least and the most MiB of fetched rows not yet committed: below the
/// least, fetching waits on every commit; above the most, a peak grows with
/// no gain.
const IN_FLIGHT_MIB: (u64, u64) = (12, 32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_are_large_from_the_default_and_in_flight_bytes_bounded() {
        let default = CommitPolicy::for_memory_limit_mb(crate::config::DEFAULT_MEMORY_LIMIT_MB);
        assert_eq!(
            (default.page_group, default.company_group, default.groups_ahead),
            (20, 20, 4)
        );
        assert_eq!(default.in_flight_kib, 12 * 1024);
        assert!(default.universe_group > default.company_group);
        let large = CommitPolicy::for_memory_limit_mb(1024);
        assert_eq!((large.page_group, large.company_group, large.groups_ahead), (40, 30, 8));
        assert_eq!(large.in_flight_kib, 32 * 1024);
    }
}
