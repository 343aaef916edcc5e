//! Any bytes as every JSON page fdsync reads, and as a plain-text item body:
//! a parse error, or each record mapped or quarantined, and the rows always
//! valid batches. Never a panic. Every feed of the registry whose reader
//! takes a whole response is fuzzed through it, so a new feed is covered
//! without a line here.
#![no_main]

use chrono::NaiveDate;
use fdsync::feeds::{self, FEEDS, Fetch};
use fdsync::records::Rows;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let mut rows = Rows::new("run-fuzz", "/api/v1/fuzz", chrono::DateTime::UNIX_EPOCH);
    let day = NaiveDate::from_ymd_opt(2026, 11, 25).unwrap();
    for feed in FEEDS {
        match &feed.fetch {
            Fetch::Single(read) => {
                let _ = read(&mut rows, body);
            }
            Fetch::PerCompany(per_company) => {
                let _ = (per_company.read)(&mut rows, body, "0000320193");
            }
            _ => {}
        }
    }
    if let Ok(page) = serde_json::from_slice::<feeds::news::NewsPage>(body) {
        for raw in &page.items {
            let quarantined = rows.quarantined.len();
            if feeds::news::read_item(&mut rows, raw, Some("0000320193")).is_none() {
                assert_eq!(rows.quarantined.len(), quarantined + 1, "an unmapped item is quarantined");
            }
        }
    }
    if let Ok(raw) = serde_json::from_slice::<&serde_json::value::RawValue>(body) {
        let _ = feeds::companies::read(&mut rows, raw);
        let _ = feeds::events::read(&mut rows, raw, Some("0000320193"), Some("AAPL"));
        let section = feeds::filings::SectionRef {
            key: "mdna".into(),
            title: None,
        };
        let _ = feeds::filings::read_section(&mut rows, raw, "0000320193", "0000320193-26-000001", &section);
    }
    // A plain-text item body: stored as it came (any UTF-8), kept as a JSON
    // string in `raw`. Bodies that are not UTF-8 are quarantined before this.
    if let Ok(text) = std::str::from_utf8(body) {
        feeds::events::read_item_text(&mut rows, "0000320193-26-000001", "2.02", "0000320193", text);
    }
    if let Ok(page) = serde_json::from_slice::<feeds::macro_series::SeriesPage>(body) {
        let _ = feeds::macro_series::read_observations(&mut rows, "US", "GDP", &page);
    }
    if let Ok(page) = serde_json::from_slice::<feeds::filings::FilingNotesPage>(body) {
        let _ = feeds::filings::read(&mut rows, &page, "0000320193");
    }
    if let Ok(page) = serde_json::from_slice::<feeds::geo::GeoLayersPage>(body) {
        let _ = feeds::geo::read_layers(&mut rows, &page, day);
    }
    if let Ok(page) = serde_json::from_slice::<feeds::geo::GeoCountriesPage>(body) {
        feeds::geo::read_counts(&mut rows, &page, day);
    }
    rows.into_batches().expect("mapped rows make valid batches");
});
