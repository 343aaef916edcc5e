//! The generic fetch engines a feed names ([`Fetch`]), and what each asks of
//! its feed: readers of the feed's bodies, and, where stored rows steer the
//! requests, which table and columns hold them. The engines are in
//! [`crate::sync`] and know no feed by name.

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::value::RawValue;

use super::{BodyError, Params};
use crate::config::Config;
use crate::records::Rows;
use crate::tables::TableDef;

/// A reader of a whole single-request response: rows, and the checkpoint
/// cursor to save with them.
pub type ReadSingle = fn(&mut Rows, body: &[u8]) -> Result<String, BodyError>;

/// A reader of one company's response: the newest date it holds, if any.
pub type ReadCompany = fn(&mut Rows, body: &[u8], company_key: &str) -> Result<Option<NaiveDate>, BodyError>;

/// A reader of an identifier's lookup: the canonical company key, unless the
/// payload has none usable (then quarantined).
pub type ReadCompanyKey = fn(&mut Rows, body: &[u8]) -> Result<Option<String>, BodyError>;

/// The query (without `?`) of one company's request, from the date its
/// checkpoint holds.
pub type CompanyQuery = fn(last: Option<NaiveDate>, today: NaiveDate, params: &Params) -> String;

/// A reader of a tape's page: its items as rows, with the tape's key (the
/// company on a company's tape, the text on a saved search's); what each
/// item was, for the live stream's lag.
pub type ReadTape = fn(&mut Rows, body: &[u8], key: Option<&str>) -> Result<Vec<Arrival>, BodyError>;

/// A reader of a company's index: rows, and each entry read.
pub type ReadIndex = fn(&mut Rows, body: &[u8], company_key: &str) -> Result<Vec<Entry>, BodyError>;

/// A reader of a company's document list: rows, and each document, newest first.
pub type ReadDocuments = fn(&mut Rows, body: &[u8], company_key: &str) -> Result<Vec<Document>, BodyError>;

/// A reader of one part of a document.
pub type ReadPart = fn(&mut Rows, body: &[u8], company_key: &str, id: &str, part: &Part) -> Result<(), BodyError>;

/// A reader of a layer list observed on `day`: rows, and every code it names.
pub type ReadLayers = fn(&mut Rows, body: &[u8], day: NaiveDate) -> Result<Vec<String>, BodyError>;

/// The generic engines that fetch feeds.
pub enum Fetch {
    /// One request per run.
    Single(ReadSingle),
    /// One request per company of the universe, committed with the
    /// company's checkpoint (the newest date read).
    PerCompany(PerCompany),
    /// Resolves the universe's identifiers to company keys.
    Universe(ReadCompanyKey),
    /// Per configured country: a list, then each listed entity's history.
    PerCountry(PerCountry),
    /// A cursor-paged tape: forward with `after`, back with `before`.
    Cursor(Tape),
    /// Each company's cursor-paged tape.
    CompanyCursor(Tape),
    /// Each saved search's cursor-paged tape (`[news] searches`), its text
    /// sent as `q`.
    SearchCursor(Tape),
    /// Each company's index: whole history once, then only what is new.
    CompanyIndex(CompanyIndex),
    /// A market-wide list by one-day windows, each paged by offset.
    OffsetWindows(Windows),
    /// The texts of the parts of a parent table's documents still missing them.
    ParentTexts(ParentTexts),
    /// Each company's document list, then the parts not yet stored.
    DocumentsAndSections(DocumentParts),
    /// A list of layers, then counts for the configured ones.
    Layers(Layers),
    /// Rows of a table lacking what a per-record route serves, each asked
    /// by its key, most important first, within a daily budget.
    Details(Details),
}

/// How an engine's backfill goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackfillKind {
    /// Back by date, to the start of what the service serves or to
    /// `backfill_days`; the pipeline stays due until it gets there.
    Dated,
    /// The parts whose texts are still missing, newest documents first;
    /// each run fetches what its turn allows.
    Parts,
}

impl Fetch {
    /// The placeholders a route for this engine must hold.
    pub fn holes(&self) -> &'static [&'static str] {
        match self {
            Fetch::PerCompany(_)
            | Fetch::Universe(_)
            | Fetch::CompanyCursor(_)
            | Fetch::CompanyIndex(_)
            | Fetch::DocumentsAndSections(_) => &["{company}"],
            Fetch::ParentTexts(_) => &["{company}", "{accession}"],
            Fetch::Details(_) => &["{id}"],
            Fetch::PerCountry(_) => &["{country}"],
            Fetch::Layers(_) => &["{layers}"],
            Fetch::Single(_) | Fetch::Cursor(_) | Fetch::SearchCursor(_) | Fetch::OffsetWindows(_) => &[],
        }
    }

    /// How the engine reads history back over several runs; `None` when a
    /// run reads all it needs.
    pub fn backfill(&self) -> Option<BackfillKind> {
        match self {
            Fetch::Cursor(_) | Fetch::CompanyCursor(_) | Fetch::SearchCursor(_) | Fetch::OffsetWindows(_) => {
                Some(BackfillKind::Dated)
            }
            Fetch::ParentTexts(_) | Fetch::DocumentsAndSections(_) => Some(BackfillKind::Parts),
            Fetch::Single(_)
            | Fetch::PerCompany(_)
            | Fetch::Universe(_)
            | Fetch::PerCountry(_)
            | Fetch::CompanyIndex(_)
            | Fetch::Layers(_)
            | Fetch::Details(_) => None,
        }
    }

    /// The fewest requests a run of the engine sends, before it knows what
    /// changed: texts wait on the parent table, and a country's list leads
    /// to one history at least.
    pub fn least_requests(&self, reach: Reach) -> u64 {
        let Reach {
            companies,
            countries,
            searches,
        } = reach;
        match self {
            Fetch::SearchCursor(_) => searches,
            Fetch::ParentTexts(_) | Fetch::Details(_) => 0,
            Fetch::Universe(_)
            | Fetch::PerCompany(_)
            | Fetch::CompanyCursor(_)
            | Fetch::CompanyIndex(_)
            | Fetch::DocumentsAndSections(_) => companies,
            Fetch::PerCountry(_) => 2 * countries,
            Fetch::Single(_) | Fetch::Cursor(_) | Fetch::OffsetWindows(_) | Fetch::Layers(_) => 1,
        }
    }

    /// Whether a run sends nothing at all: an engine that goes member by
    /// member, with no member configured.
    pub fn idle(&self, reach: Reach) -> bool {
        match self {
            Fetch::SearchCursor(_) => reach.searches == 0,
            Fetch::PerCountry(_) => reach.countries == 0,
            _ => self.per_company() && reach.companies == 0,
        }
    }

    /// Whether the engine sends a request per company of the universe each
    /// run (texts go by the parent table's rows instead).
    pub fn per_company(&self) -> bool {
        match self {
            Fetch::PerCompany(_)
            | Fetch::Universe(_)
            | Fetch::CompanyCursor(_)
            | Fetch::CompanyIndex(_)
            | Fetch::DocumentsAndSections(_) => true,
            Fetch::Single(_)
            | Fetch::PerCountry(_)
            | Fetch::Cursor(_)
            | Fetch::SearchCursor(_)
            | Fetch::OffsetWindows(_)
            | Fetch::ParentTexts(_)
            | Fetch::Layers(_)
            | Fetch::Details(_) => false,
        }
    }
}

/// What a run's engines fan out over: [`Fetch::least_requests`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Reach {
    pub companies: u64,
    pub countries: u64,
    /// Saved searches (`[news] searches`).
    pub searches: u64,
}

impl Reach {
    /// As configured; `companies` the universe's identifiers, before they resolve.
    pub fn of(config: &Config) -> Reach {
        Reach {
            companies: config.universe.companies.len() as u64,
            countries: config.universe.countries.len() as u64,
            searches: config.news.searches.len() as u64,
        }
    }
}

/// How [`Fetch::PerCompany`] asks for one company and reads the answer.
pub struct PerCompany {
    /// The query string (without `?`) a company's request adds, from the
    /// date its checkpoint holds; `None` asks for the route as it is.
    pub query: Option<CompanyQuery>,
    pub read: ReadCompany,
    /// A 404 says the company has none of this data (no mandate): noted in
    /// its checkpoint and asked again after `params.recheck_days`.
    pub absent_on_404: bool,
    /// A history the service may restate whole (prices after a split).
    pub restates: Option<Restates>,
}

/// How a restated history is told and read again. A refetch overlaps what
/// is stored; a stored row it changed that is older than
/// `params.restate_days` is not yesterday corrected but the history
/// adjusted, so the company's whole history is asked again and replaces
/// its rows, the old ones kept as versions.
pub struct Restates {
    pub table: &'static crate::tables::TableDef,
    /// The table's date column.
    pub date: &'static str,
    /// The value whose old-to-new ratio is the restatement's factor (a split's).
    pub value: &'static str,
    /// The query (without `?`) that asks for the whole history.
    pub whole: &'static str,
}

impl super::Feed {
    /// The tables one company's answer holds whole, so that `fdsync verify`
    /// compares every stored row: the feed's replace tables, and a history
    /// it can read again whole. `None` for a feed verify cannot ask whole.
    pub fn whole_tables(&self) -> Option<Vec<&'static crate::tables::TableDef>> {
        let Fetch::PerCompany(per_company) = &self.fetch else {
            return None;
        };
        if per_company.query.is_some() && per_company.restates.is_none() {
            return None;
        }
        let mut tables: Vec<&'static crate::tables::TableDef> = per_company.restates.iter().map(|r| r.table).collect();
        tables.extend(self.tables.iter().copied().filter(|t| {
            t.load == crate::tables::LoadRule::Replace && t.versions && t.key.first() == Some(&"company_key")
        }));
        (!tables.is_empty()).then_some(tables)
    }
}

impl PerCompany {
    /// A route asked as it is, whose 404 is a failure like any other.
    pub const fn plain(read: ReadCompany) -> PerCompany {
        PerCompany {
            query: None,
            read,
            absent_on_404: false,
            restates: None,
        }
    }
}

/// [`Fetch::PerCountry`]: each configured country's list at the feed's
/// route, then each listed entity's history at `params.series_route`.
pub struct PerCountry {
    /// A country's list: each usable entry; an unusable one is quarantined into the rows.
    pub list: fn(&mut Rows, body: &[u8]) -> Result<Vec<Listed>, BodyError>,
    /// One entity's history as rows; returns the cursor of its checkpoint.
    pub read: fn(&mut Rows, body: &[u8], country: &str, listed: &Listed) -> Result<String, BodyError>,
}

/// An entry of a [`PerCountry`] list: the key its history route takes, and
/// the entry as served.
pub struct Listed {
    pub key: String,
    pub raw: Box<RawValue>,
}

/// [`Fetch::Cursor`], [`Fetch::CompanyCursor`] and [`Fetch::SearchCursor`]: a tape paged with the
/// wire contract's cursors (`after`, `before`, `changedSince`, `limit`).
pub struct Tape {
    /// A page's own fields: what the next request needs; with `with_ids`,
    /// the ids of the new items too (a forward page's).
    pub head: fn(body: &[u8], with_ids: bool) -> Result<TapeHead, BodyError>,
    /// A page's items as rows, with `company_key` on a company's tape; what
    /// each item was, for the live stream's lag.
    pub read: ReadTape,
    /// The query filters (each `&name=value`) every request of the tape carries.
    pub filters: fn(&Config) -> String,
}

/// [`Tape::head`].
#[derive(Debug, Default)]
pub struct TapeHead {
    /// The next `after`.
    pub latest_id: Option<String>,
    /// The next `before`.
    pub next_cursor: Option<String>,
    pub has_more: bool,
    /// The next `changedSince`: the page's `serverTime`, or, from a service
    /// that sends none, its newest item's first sighting, which no later
    /// rewrite can precede.
    pub server_time: Option<String>,
    pub items: usize,
    /// Its oldest item's first sighting: whether a backfill goes on.
    pub oldest: Option<DateTime<Utc>>,
    /// The ids of the items not sent again for a rewrite, in the page's
    /// order, when asked for.
    pub new_ids: Vec<String>,
}

/// One item a tape's page delivered.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub first_seen_at: Option<DateTime<Utc>>,
    /// Delivered again for a change, not as a new arrival.
    pub rewritten: bool,
}

/// Where a feed's documents are stored: the queries that size and steer
/// requests read these columns.
pub struct Stored {
    pub table: &'static TableDef,
    /// The company's key.
    pub company: &'static str,
    /// The document's own key.
    pub id: &'static str,
    /// Its date (a DATE column).
    pub dated: &'static str,
}

/// Documents the service serves before one column is filled in (a gated
/// headline): stored with it NULL, they are read again until it is.
pub struct Pending {
    /// The column served NULL at first.
    pub column: &'static str,
    /// When the service received the document (a TIMESTAMP column).
    pub received: &'static str,
}

/// The rows holding each part's text of stored documents.
pub struct StoredParts {
    pub table: &'static TableDef,
    pub company: &'static str,
    /// The document's key.
    pub id: &'static str,
    /// The part's key within the document.
    pub part: &'static str,
}

/// [`Fetch::CompanyIndex`].
pub struct CompanyIndex {
    /// A company's index as rows; returns each entry read.
    pub read: ReadIndex,
    pub stored: &'static Stored,
    pub pending: &'static Pending,
}

/// An entry of a company's index.
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: String,
    pub received: Option<DateTime<Utc>>,
}

/// [`Fetch::OffsetWindows`].
pub struct Windows {
    /// The query (without `?`) of one page of the records dated `from`
    /// (open: from the start) to `to`, inclusive, newest or oldest first.
    pub query: fn(from: Option<NaiveDate>, to: NaiveDate, newest_first: bool, limit: u32, offset: u64) -> String,
    /// A page as rows: its records and the window's total.
    pub read: fn(&mut Rows, body: &[u8]) -> Result<WindowPage, BodyError>,
    pub stored: &'static Stored,
    pub pending: &'static Pending,
    /// The list's own count of a day's records by kind, where it gives one.
    pub tally: Option<&'static Tally>,
}

/// A tally as read: each kind and its count.
pub type Counted = Vec<(String, u64)>;

/// [`Tally::read`]: an answer of `day`, given the kinds counted before.
pub type ReadTally =
    fn(&mut Rows, body: &[u8], day: NaiveDate, before: &[String]) -> Result<Option<Counted>, BodyError>;

/// Closed days back whose tally is asked when `tally_days` is not set.
pub const DEFAULT_TALLY_DAYS: u32 = 7;

/// What a [`Windows`] list counts of one day by kind (the wire's `counts=1`):
/// asked once for each day after it closed, kept as the service said it,
/// and held against the records stored of that day.
pub struct Tally {
    /// The query (without `?`) of one day's tally, asking a single record.
    pub query: fn(day: NaiveDate) -> String,
    /// An answer as rows of `table`, given the kinds that day's last tally
    /// counted above zero (one the answer leaves out is counted zero now);
    /// `None` when the answer holds no tally.
    pub read: ReadTally,
    /// Where tallies are kept: the day in [`Stored::dated`]'s name, the kind
    /// in `kind`, the count in `count`, when it was read in `observed`.
    pub table: &'static TableDef,
    /// The kind's column, in `table` and in the stored records alike.
    pub kind: &'static str,
    pub count: &'static str,
    pub observed: &'static str,
}

/// [`Windows::read`].
#[derive(Debug)]
pub struct WindowPage {
    /// Each record's key and date, in the page's order.
    pub records: Vec<(String, Option<NaiveDate>)>,
    /// The records the service counts in the window.
    pub total: Option<u64>,
    /// The page size the service used, when it says.
    pub limit: Option<u64>,
}

/// [`Fetch::ParentTexts`]: the route holds `{company}` and `{accession}` (the
/// document's key); a coded part is asked with `?{part_query}=`, the uncoded
/// one ('') without. A 400 for the uncoded part that lists the coded ones
/// (the wire contract's error `items`) is followed.
pub struct ParentTexts {
    pub parent: &'static Stored,
    /// The parent's column listing a document's parts (empty: one uncoded part).
    pub parts: &'static str,
    pub texts: &'static StoredParts,
    pub part_query: &'static str,
    /// One part's text (UTF-8, as served) as rows.
    pub read: fn(&mut Rows, text: &str, company_key: &str, id: &str, part: &str),
}

/// Requests a UTC day of a [`Details`] pipeline that sets no
/// `daily_requests`: a tenth of the Free plan's 250.
pub const DEFAULT_DAILY_REQUESTS: u32 = 25;

/// [`Fetch::Details`]: the route holds `{id}`, the key of a row of `table`.
pub struct Details {
    /// The table whose rows lack what the route serves; its key's one column is `{id}`.
    pub table: &'static TableDef,
    /// SQL on the table's columns: a row that still lacks it.
    pub lacking: &'static str,
    /// SQL order: the rows asked first.
    pub first: &'static str,
    /// The column dating a row's arrival, for the forecast of a day's rows.
    pub arrived: &'static str,
    /// One record's response as rows: whether it served what the row lacked.
    pub read: fn(&mut Rows, body: &[u8], id: &str) -> Result<bool, BodyError>,
}

/// [`Fetch::DocumentsAndSections`]: the part route (`params.section_route`)
/// holds `{company}`, `{accession}` and `{section}`.
pub struct DocumentParts {
    /// A company's document list as rows; returns each document, newest first.
    pub list: ReadDocuments,
    /// One part's response as rows.
    pub read_part: ReadPart,
    pub documents: &'static Stored,
    /// The documents' column listing each one's part keys.
    pub listed: &'static str,
    pub parts: &'static StoredParts,
}

/// A document of a [`DocumentParts`] list.
#[derive(Debug)]
pub struct Document {
    pub id: String,
    pub dated: Option<NaiveDate>,
    pub parts: Vec<Part>,
}

/// A part a document lists.
#[derive(Debug, Clone)]
pub struct Part {
    pub key: String,
    pub title: Option<String>,
}

/// [`Fetch::Layers`]: the list at `params.layers_route`, then the feed's
/// route with `{layers}` the codes asked for.
pub struct Layers {
    /// The list as rows observed on `day`; returns every code it names.
    pub list: ReadLayers,
    /// The counts as rows observed on `day`.
    pub read: fn(&mut Rows, body: &[u8], day: NaiveDate) -> Result<(), BodyError>,
    /// The counts' table ([`crate::tables::LoadRule::Replace`], by day): an
    /// answer for every listed layer replaces the day's counts.
    pub counts: &'static crate::tables::TableDef,
    /// The configured codes (none: all listed), and the key that configures them.
    pub configured: fn(&Config) -> &[String],
    pub configured_key: &'static str,
}
