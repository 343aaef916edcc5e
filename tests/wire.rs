//! What the service sends, whichever legal shape it chose: a full sync
//! through the emulator's other shapes stores what a sync of the contract's
//! shapes stores.

use std::collections::BTreeSet;

use fdsync::emulator::{EmulatorConfig, PlanLimits, WireShapes};
use fdsync::feeds::catalogue;
use fdsync::sync::RunStatus;

use crate::util::{Harness, UNIVERSE, emulator_config, frozen_clock};

/// An emulator with room for every pipeline's full sync in one run.
fn emulator(shapes: WireShapes) -> EmulatorConfig {
    EmulatorConfig {
        shapes,
        ..emulator_config(&frozen_clock(), PlanLimits::scale(1_000_000, None))
    }
}

/// Every pipeline, once, to completion.
async fn full_sync(shapes: WireShapes) -> Harness {
    let mut h = Harness::with_emulator(emulator(shapes), UNIVERSE).await;
    h.restart(|c| c.universe.countries = vec!["US".into(), "JP".into(), "TW".into()])
        .await;
    let (report, result) = h.syncer.run_once(&h.all_pipelines).await;
    result.unwrap_or_else(|e| panic!("{shapes:?}: {e}: {report:?}"));
    for o in &report.outcomes {
        assert_eq!(o.status, RunStatus::Ok, "{shapes:?}: {o:?}");
    }
    h
}

/// Each data table's rows as text, lineage (`raw` included) left out.
async fn rows_of(h: &Harness, table: &fdsync::tables::TableDef) -> BTreeSet<String> {
    let columns: Vec<String> = table
        .columns
        .iter()
        .map(|c| format!("coalesce(CAST(\"{}\" AS VARCHAR), '∅')", c.name))
        .collect();
    let sql = format!(
        "SELECT concat_ws(' | ', {}) FROM \"{}\"",
        columns.join(", "),
        table.name
    );
    h.strings(&sql).await.into_iter().collect()
}

#[tokio::test]
async fn the_other_legal_shapes_store_what_the_contract_s_shapes_store() {
    let contract = full_sync(WireShapes::Contract).await;
    let other = full_sync(WireShapes::Other).await;
    assert_eq!(
        other.int("SELECT count(*) FROM _sync_quarantine").await,
        0,
        "{:?}",
        other.strings("SELECT error FROM _sync_quarantine LIMIT 5").await
    );
    let mut differences = Vec::new();
    let mut tables = 0;
    let mut empty = Vec::new();
    for table in catalogue().filter(|t| t.lineage) {
        let expected = rows_of(&contract, table).await;
        let found = rows_of(&other, table).await;
        if expected.is_empty() {
            empty.push(table.name);
        }
        tables += 1;
        if expected != found {
            let missing: Vec<_> = expected.difference(&found).take(3).collect();
            let extra: Vec<_> = found.difference(&expected).take(3).collect();
            differences.push(format!("{}:\n  expected {missing:?}\n  found {extra:?}", table.name));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    assert!(empty.is_empty(), "the full sync stored nothing in {empty:?}");
    // The other shapes were served, and what the contract does not name is kept.
    let kept = other
        .int("SELECT count(*) FROM filings WHERE raw LIKE '%servedShape%' AND raw LIKE '%T00:00:00+00:00%'")
        .await;
    assert!(kept > 0, "no filing kept its served shape in raw");
    println!("wire: {tables} tables identical under the other legal shapes");
}
