//! Any bytes as every JSON page fdsync reads, and as a plain-text item body:
//! a parse error, or each record mapped or quarantined, and the rows always
//! valid batches. Never a panic.
#![no_main]

use chrono::NaiveDate;
use fdsync::records::{self, Rows};
use fdsync::wire;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let mut rows = Rows::new("run-fuzz", "/api/v1/fuzz", chrono::DateTime::UNIX_EPOCH);
    let day = NaiveDate::from_ymd_opt(2026, 11, 25).unwrap();
    if let Ok(page) = serde_json::from_slice::<wire::NewsPage>(body) {
        for raw in &page.items {
            let quarantined = rows.quarantined.len();
            if records::news_item(&mut rows, raw).is_none() {
                assert_eq!(rows.quarantined.len(), quarantined + 1, "an unmapped item is quarantined");
            }
        }
    }
    if let Ok(raw) = serde_json::from_slice::<&serde_json::value::RawValue>(body) {
        let _ = records::company(&mut rows, raw);
        let _ = records::event(&mut rows, raw, Some("0000320193"), Some("AAPL"));
        let section = wire::SectionRef {
            key: "mdna".into(),
            title: None,
        };
        let _ = records::filing_section(&mut rows, raw, "0000320193", "0000320193-26-000001", &section);
    }
    // A plain-text item body: stored as it came (any UTF-8), kept as a JSON
    // string in `raw`. Bodies that are not UTF-8 are quarantined before this.
    if let Ok(text) = std::str::from_utf8(body) {
        records::event_item_text(&mut rows, "0000320193-26-000001", "2.02", "0000320193", text);
    }
    if let Ok(page) = serde_json::from_slice::<wire::PricesPage>(body) {
        let _ = records::prices(&mut rows, &page, "0000320193");
    }
    if let Ok(page) = serde_json::from_slice::<wire::DividendsPage>(body) {
        let _ = records::dividends(&mut rows, &page, "0000320193", day);
    }
    if let Ok(page) = serde_json::from_slice::<wire::IndicesPage>(body) {
        records::indices(&mut rows, &page);
    }
    if let Ok(page) = serde_json::from_slice::<wire::CoveragePage>(body) {
        records::coverage(&mut rows, &page);
    }
    if let Ok(page) = serde_json::from_slice::<wire::SeriesPage>(body) {
        let _ = records::macro_observations(&mut rows, "US", "GDP", &page);
    }
    if let Ok(page) = serde_json::from_slice::<wire::NewsSourcesPage>(body) {
        records::news_sources(&mut rows, &page);
    }
    if let Ok(page) = serde_json::from_slice::<wire::NewsTopicsPage>(body) {
        records::news_topics(&mut rows, &page);
    }
    if let Ok(page) = serde_json::from_slice::<wire::RegulationPage>(body) {
        records::regulation(&mut rows, &page, "0000320193");
    }
    if let Ok(page) = serde_json::from_slice::<wire::MonthlyRevenuePage>(body) {
        let _ = records::monthly_revenue(&mut rows, &page, "TW:2330");
    }
    if let Ok(page) = serde_json::from_slice::<wire::FilingNotesPage>(body) {
        let _ = records::filings(&mut rows, &page, "0000320193");
    }
    if let Ok(page) = serde_json::from_slice::<wire::GeoCountriesPage>(body) {
        records::geo_country_counts(&mut rows, &page, day);
    }
    rows.into_batches().expect("mapped rows make valid batches");
});
