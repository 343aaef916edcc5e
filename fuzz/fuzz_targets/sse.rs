//! Any bytes as the news stream, cut into chunks at every 0xFF byte: every
//! `items` frame is a page or a parse error, its items mapped or
//! quarantined. Never a panic.
#![no_main]

use eventsource_stream::Eventsource;
use fdsync_core::feeds::news::{self, NewsPage};
use fdsync_core::records::Rows;
use futures::StreamExt;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = input
        .split(|b| *b == 0xFF)
        .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
        .collect();
    let events: Vec<_> = futures::executor::block_on(futures::stream::iter(chunks).eventsource().collect());
    let mut rows = Rows::new("run-fuzz", "/api/v1/news/stream", chrono::DateTime::UNIX_EPOCH);
    for event in events.into_iter().flatten() {
        if event.event == "items"
            && let Ok(page) = serde_json::from_str::<NewsPage>(&event.data)
        {
            for raw in &page.items {
                let _ = news::read_item(&mut rows, raw, None);
            }
        }
    }
    rows.into_batches().expect("mapped rows make valid batches");
});
