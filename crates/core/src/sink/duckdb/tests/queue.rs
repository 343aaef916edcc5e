//! Commits queued on the writer one behind another.

use super::*;

/// Commits queued one behind another: when one fails, the one queued after
/// it does not run, so its checkpoint never lands past the rows that were
/// rolled back; queued on its own, the same commit lands.
#[tokio::test]
async fn a_commit_queued_behind_a_failed_one_does_not_land() {
    use crate::sink::{CommitChain, SinkError, SinkHandle};
    let dir = tempfile::tempdir().unwrap();
    let sink = SinkHandle::open_duckdb(dir.path().join("w.duckdb")).await.unwrap();
    // Price rows under the texts' table: the load refuses them.
    let misshapen = TableBatch {
        table: feeds::table("event_item_texts").unwrap(),
        ..price_days((0..10).map(|d| (d, 1.0)))
    };
    let later = || Commit {
        batches: vec![price_days((100..110).map(|d| (d, 1.0)))],
        checkpoints: vec![Checkpoint {
            pipeline: "prices".into(),
            partition: "S0001".into(),
            cursor: "1950-04-20".into(),
        }],
    };
    let chain = CommitChain::default();
    let failing = sink
        .queue_commit(
            Commit {
                batches: vec![misshapen],
                checkpoints: Vec::new(),
            },
            true,
            &chain,
        )
        .unwrap();
    let queued = sink.queue_commit(later(), true, &chain).unwrap();
    assert!(failing.await.is_err());
    assert!(matches!(queued.await, Err(SinkError::EarlierCommitFailed)));
    sink.commit_held_now().await.unwrap();
    let stored = || {
        sink.call(|s| {
            let bars: i64 = s
                .connection()
                .query_row("SELECT count(*) FROM prices_daily", [], |r| r.get(0))
                .unwrap();
            (bars, s.checkpoints("prices").unwrap().len())
        })
    };
    assert_eq!(stored().await.unwrap(), (0, 0));
    sink.queue_commit(later(), true, &CommitChain::default())
        .unwrap()
        .await
        .unwrap();
    sink.commit_held_now().await.unwrap();
    assert_eq!(stored().await.unwrap(), (10, 1));
}
