//! 8-K events: the per-company index (`/companies/{id}/events`), the
//! market-wide wire (`/events/wire`), the newest across the market
//! (`/events/latest`), and each filing's verbatim item texts
//! (`/companies/{id}/events/{accession}`).

use chrono::{DateTime, NaiveDate, Utc};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{
    BodyError, CompanyIndex, Entry, Feed, Fetch, Params, ParentTexts, Pending, Stored, StoredParts, Tally, WindowPage,
    Windows, nothing_more, page_limit, parse_envelope,
};
use crate::batch::table;
use crate::records::Rows;
use crate::tables::Compression::Zstd;
use crate::tables::{LakePartition, LoadRule};

/// `GET /companies/{id}/events` (newest first), `/events/wire` and `/events/latest`.
#[derive(Debug, Deserialize)]
pub struct EventsPage<'a> {
    pub cik: Option<String>,
    pub symbol: Option<String>,
    #[serde(borrow)]
    pub events: Vec<&'a RawValue>,
    /// The wire only: rows matching the query, and where this page starts.
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_count")]
    pub total: Option<u64>,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_count")]
    pub offset: Option<u64>,
    /// The wire only: the page size the service used, which may be less than asked.
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_count")]
    pub limit: Option<u64>,
    /// The wire with `counts=1`: the events matching the query, per family.
    #[serde(default, borrow)]
    pub counts: Option<&'a RawValue>,
}

/// An 8-K event entry; the wire and latest add who filed it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventEntry {
    pub accession: String,
    pub family: Option<String>,
    /// The filing's item codes (`[]`: one uncoded item). Absent, `null` or
    /// under another name, the entry is unreadable, never "uncoded".
    pub items: Vec<String>,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_date")]
    pub filing_date: Option<NaiveDate>,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_timestamp")]
    pub accepted_at: Option<DateTime<Utc>>,
    pub headline: Option<String>,
    pub cik: Option<String>,
    pub symbol: Option<String>,
    pub name: Option<String>,
}

table! {
    /// 8-K filings, from the per-company index, the market-wide wire and latest.
    pub const EVENTS: EventRow = "events" {
        /// SEC accession number of the filing, NNNNNNNNNN-NN-NNNNNN.
        accession: Text,
        /// The company: its canonical `cik` from the company payload (10-digit SEC CIK or a
        /// platform key such as TW:2330), whatever spelling the configuration used.
        company_key: Text,
        /// SEC CIK, zero-padded to 10 digits, or the platform key for non-SEC issuers.
        cik: Text,
        /// Ticker symbol.
        symbol: Text,
        /// Name as served.
        name: Text,
        /// The 8-K event family the filing's items are typed into.
        family: Text,
        /// The filing's 8-K item codes.
        items: TextList,
        /// The filing's date as the SEC records it.
        filing_date: Date,
        /// When the SEC accepted the filing (UTC).
        accepted_at: Timestamp,
        /// Headline text; NULL while the service gates it.
        headline: Text,
    }
    key: &["accession"],
    load: LoadRule::Upsert,
    versions: true,
    keep_stored: &["symbol", "name", "headline"],
    lake_partition: Some(LakePartition::Year("filing_date")),
    compression: &[("raw", Zstd)],
}

table! {
    /// Verbatim 8-K item texts; `item` is '' for a filing's uncoded item.
    pub const EVENT_ITEM_TEXTS: EventItemTextRow = "event_item_texts" {
        /// SEC accession number of the filing, NNNNNNNNNN-NN-NNNNNN.
        accession: Text,
        /// 8-K item code such as 2.02; '' for a filing's uncoded item.
        item: Text,
        /// The company: its canonical `cik` from the company payload (10-digit SEC CIK or a
        /// platform key such as TW:2330), whatever spelling the configuration used.
        company_key: Text,
        /// The text exactly as extracted by the service.
        text: Text,
    }
    key: &["accession", "item"],
    load: LoadRule::InsertOnce,
    compression: &[("text", Zstd), ("raw", Zstd)],
}

/// Where events are stored, for the queries that size and steer requests.
static STORED: Stored = Stored {
    table: &EVENTS,
    company: "company_key",
    id: "accession",
    dated: "filing_date",
};

/// A headline is gated (served null) for hours after a filing is accepted.
static GATED: Pending = Pending {
    column: "headline",
    received: "accepted_at",
};

/// The per-company index: whole history once, then only what is new.
pub static FEED: Feed = Feed {
    name: "events",
    route: "/api/v1/companies/{company}/events",
    auth: true,
    tables: &[&EVENTS],
    fetch: Fetch::CompanyIndex(CompanyIndex {
        read: read_index,
        stored: &STORED,
        pending: &GATED,
    }),
    params: &[],
    check: nothing_more,
};

table! {
    /// The wire's own tally (`counts=1`) of a filing day's events per family,
    /// asked once after the day closed (`tally_days` back) and held against
    /// the `events` stored of that day; a row when a family's count moves (a
    /// family the tally no longer names is counted 0). `raw` is the whole
    /// tally as served.
    pub const EVENTS_WIRE_COUNTS: WireCountRow = "events_wire_counts" {
        /// The filing day counted (UTC date, as `events.filing_date`).
        filing_date: Date,
        /// The 8-K family counted (earnings, leadership, m_and_a, ...).
        family: Text,
        /// Events of the family filed that day, as the service counts them.
        events: Int,
        /// When fdsync read the tally (UTC).
        observed_at: Timestamp,
    }
    key: &["filing_date", "family", "observed_at"],
    load: LoadRule::AppendOnChange,
}

static WIRE_TALLY: Tally = Tally {
    query: |day| format!("from={day}&to={day}&limit=1&counts=1"),
    read: read_tally,
    table: &EVENTS_WIRE_COUNTS,
    kind: "family",
    count: "events",
    observed: "observed_at",
};

/// The market-wide wire, by filing-date windows paged by offset.
pub static WIRE: Feed = Feed {
    name: "events_wire",
    route: "/api/v1/events/wire",
    auth: true,
    tables: &[&EVENTS, &EVENTS_WIRE_COUNTS],
    fetch: Fetch::OffsetWindows(Windows {
        query: |from, to, newest_first, limit, offset| {
            let from = from.map(|d| format!("from={d}&")).unwrap_or_default();
            let sort = if newest_first { "newest" } else { "oldest" };
            format!("{from}to={to}&sort={sort}&limit={limit}&offset={offset}")
        },
        read: read_wire,
        stored: &STORED,
        pending: &GATED,
        tally: Some(&WIRE_TALLY),
    }),
    params: &["backfill_days", "since", "page_limit", "tally_days"],
    check: paged,
};

/// The newest events across the market, one request a run.
pub static LATEST: Feed = Feed {
    name: "events_latest",
    route: "/api/v1/events/latest?limit=100",
    auth: true,
    tables: &[&EVENTS],
    fetch: Fetch::Single(read_latest),
    params: &[],
    check: nothing_more,
};

/// Item texts, once per (accession, item), of the `events` rows of the
/// configured companies filed in the last `text_days`.
pub static TEXTS: Feed = Feed {
    name: "event_texts",
    route: "/api/v1/companies/{company}/events/{accession}",
    auth: true,
    tables: &[&EVENT_ITEM_TEXTS],
    fetch: Fetch::ParentTexts(ParentTexts {
        parent: &STORED,
        parts: "items",
        texts: &StoredParts {
            table: &EVENT_ITEM_TEXTS,
            company: "company_key",
            id: "accession",
            part: "item",
        },
        part_query: "item",
        read: read_item_text,
    }),
    params: &["text_days"],
    check: nothing_more,
};

fn paged(_route: &str, params: &Params) -> Result<(), String> {
    page_limit(params)
}

fn read_wire(rows: &mut Rows, body: &[u8]) -> Result<WindowPage, BodyError> {
    let page: EventsPage = parse_envelope(rows, body)?;
    let records = page
        .events
        .iter()
        .map(|raw| match read(rows, raw, None, None) {
            Some(e) => {
                let dated = e.filing_date.or(e.accepted_at.map(|t| t.date_naive()));
                (e.accession, dated)
            }
            // Quarantined: still a place in the order, at no known date.
            None => (raw.get().to_owned(), None),
        })
        .collect();
    Ok(WindowPage {
        records,
        total: page.total,
        limit: page.limit,
    })
}

/// A day's tally as `events_wire_counts` rows (its one event is not read:
/// the wire's read stores it). A number that is not a whole count
/// quarantines the tally whole; it then counts nothing.
fn read_tally(
    rows: &mut Rows,
    body: &[u8],
    day: NaiveDate,
    before: &[String],
) -> Result<Option<Vec<(String, u64)>>, BodyError> {
    let page: EventsPage = parse_envelope(rows, body)?;
    let Some(counts) = page.counts else {
        return Ok(None);
    };
    let tally: Result<Vec<(String, u64)>, String> =
        serde_json::from_str::<std::collections::BTreeMap<String, serde_json::Value>>(counts.get())
            .map_err(|e| format!("not an object of counts: {e}"))
            .and_then(|tally| {
                tally
                    .into_iter()
                    // A value that is no number is no family's count (a note beside them): kept in raw.
                    .filter(|(_, n)| n.is_number())
                    // Whole and not negative, as every count the wire serves.
                    .map(|(family, n)| match crate::wire::tolerant::option_count(n) {
                        Ok(Some(count)) => Ok((family, count)),
                        Ok(None) => Err(format!("{family}: no count")),
                        Err(e) => Err(format!("{family}: {e}")),
                    })
                    .collect()
            });
    let mut tally = match tally {
        Ok(tally) => tally,
        Err(why) => {
            rows.quarantine(counts.get(), format!("wire counts of {day}: {why}"));
            return Ok(Some(Vec::new()));
        }
    };
    for family in before {
        if !tally.iter().any(|(f, _)| f == family) {
            tally.push((family.clone(), 0));
        }
    }
    let observed_at = rows.fetched_at;
    for (family, events) in &tally {
        let row = WireCountRow {
            filing_date: Some(day),
            family: Some(family),
            events: Some(*events as i64),
            observed_at: Some(observed_at),
        };
        rows.push(row, counts.get());
    }
    Ok(Some(tally))
}

fn read_index(rows: &mut Rows, body: &[u8], company_key: &str) -> Result<Vec<Entry>, BodyError> {
    let page: EventsPage = parse_envelope(rows, body)?;
    Ok(page
        .events
        .iter()
        .filter_map(|raw| read(rows, raw, Some(company_key), page.symbol.as_deref()))
        .map(|e| Entry {
            id: e.accession,
            received: e.accepted_at,
        })
        .collect())
}

fn read_latest(rows: &mut Rows, body: &[u8]) -> Result<String, BodyError> {
    let page: EventsPage = parse_envelope(rows, body)?;
    for raw in &page.events {
        read(rows, raw, None, None);
    }
    Ok(rows.fetched_at.to_rfc3339())
}

/// An `events` row; returns the entry. The filer is `company_key` when the
/// route names it (the per-company index), else the entry's own `cik`,
/// padded to ten digits as every company key is.
pub fn read(rows: &mut Rows, raw: &RawValue, company_key: Option<&str>, symbol: Option<&str>) -> Option<EventEntry> {
    let mut e: EventEntry = rows.parse(raw, "8-K event")?;
    e.cik = e.cik.as_deref().map(crate::wire::company_key);
    let Some(key) = company_key.or(e.cik.as_deref()) else {
        rows.quarantine(raw.get(), "8-K event: no cik names the filer".into());
        return None;
    };
    let row = EventRow {
        accession: Some(&e.accession),
        company_key: Some(key),
        cik: Some(e.cik.as_deref().unwrap_or(key)),
        symbol: e.symbol.as_deref().or(symbol),
        name: e.name.as_deref(),
        family: e.family.as_deref(),
        items: &e.items,
        filing_date: e.filing_date.or(e.accepted_at.map(|t| t.date_naive())),
        accepted_at: e.accepted_at,
        headline: e.headline.as_deref(),
    };
    rows.push(row, raw.get());
    Some(e)
}

/// An `event_item_texts` row; the plain-text body is kept as a JSON string in `raw`.
pub fn read_item_text(rows: &mut Rows, text: &str, company_key: &str, accession: &str, item: &str) {
    let row = EventItemTextRow {
        accession: Some(accession),
        item: Some(item),
        company_key: Some(company_key),
        text: Some(text),
    };
    rows.push(row, &serde_json::to_string(text).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(body: &str, before: &[&str]) -> (Option<Vec<(String, u64)>>, usize) {
        let day = NaiveDate::from_ymd_opt(2026, 11, 20).unwrap();
        let route = "/api/v1/events/wire?from=2026-11-20&to=2026-11-20&limit=1&counts=1";
        let mut rows = Rows::new("run", route, "2026-11-23T00:00:00Z".parse().unwrap());
        let before: Vec<String> = before.iter().map(|s| (*s).to_owned()).collect();
        let counted = read_tally(&mut rows, body.as_bytes(), day, &before).unwrap();
        (counted, rows.quarantined.len())
    }

    #[test]
    fn a_tally_counts_each_family_with_zero_for_one_it_no_longer_names() {
        let page = r#"{"total": 3, "offset": 0, "limit": 1, "events": [],
            "counts": {"earnings": 2, "guidance": 1.0, "servedShape": "other"}}"#;
        let owned = |v: &[(&str, u64)]| v.iter().map(|(f, n)| ((*f).to_owned(), *n)).collect::<Vec<_>>();
        assert_eq!(
            tally(page, &["earnings", "leadership"]),
            (Some(owned(&[("earnings", 2), ("guidance", 1), ("leadership", 0)])), 0)
        );
        let no_tally = r#"{"total": 0, "offset": 0, "limit": 1, "events": []}"#;
        assert_eq!(tally(no_tally, &[]), (None, 0));
        let fraction = r#"{"total": 1, "offset": 0, "limit": 1, "events": [], "counts": {"earnings": 1.5}}"#;
        assert_eq!(tally(fraction, &["earnings"]), (Some(Vec::new()), 1));
    }
}
