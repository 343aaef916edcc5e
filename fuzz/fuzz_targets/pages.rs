//! Any bytes as every response fdsync reads: a parse error, or each record
//! mapped or quarantined, and the rows always valid batches. Never a panic.
//! Every reader of every feed of the registry is fuzzed
//! ([`fdsync_core::feeds::read_as_every_response`]), so a new feed is covered
//! without a line here.
#![no_main]

use fdsync_core::feeds::{self, Tape};
use fdsync_core::records::Rows;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let mut rows = Rows::new("run-fuzz", "/api/v1/fuzz", chrono::DateTime::UNIX_EPOCH);
    feeds::read_as_every_response(&mut rows, body);
    rows.into_batches().expect("mapped rows make valid batches");

    // A tape item that is not mapped is quarantined, never dropped.
    let feeds::Fetch::Cursor(Tape { read, .. }) = &feeds::news::FEED.fetch else {
        unreachable!("the news feed is a tape");
    };
    let mut rows = Rows::new("run-fuzz", "/api/v1/fuzz", chrono::DateTime::UNIX_EPOCH);
    if let Ok(page) = serde_json::from_slice::<feeds::news::NewsPage>(body)
        && let Ok(arrivals) = read(&mut rows, body, None)
    {
        assert_eq!(
            arrivals.len() + rows.quarantined.len(),
            page.items.len(),
            "every item is mapped or quarantined"
        );
    }
});
