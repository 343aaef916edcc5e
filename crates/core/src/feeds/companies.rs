//! `GET /companies/{id}`: the company payload that fixes a configured
//! identifier's canonical `company_key`, asked again each time the pipeline
//! runs; every version of a payload is kept with when it was first and last
//! seen, so a rename or a new predecessor shows when it happened.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{BodyError, Feed, Fetch, nothing_more, parse_body};
use crate::batch::table;
use crate::records::Rows;
use crate::tables::LoadRule;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Company {
    pub cik: String,
    pub symbol: Option<String>,
    pub name: Option<String>,
    pub market: Option<String>,
    pub currency: Option<String>,
    #[serde(default)]
    pub predecessors: Vec<String>,
}

table! {
    /// One row per company of the universe: the company payload that fixes its key.
    pub const COMPANIES: CompanyRow = "companies" {
        /// The company: its canonical `cik` from the company payload (10-digit SEC CIK or a
        /// platform key such as TW:2330), whatever spelling the configuration used.
        company_key: Text,
        /// SEC CIK, zero-padded to 10 digits, or the platform key for non-SEC issuers.
        cik: Text,
        /// Ticker symbol.
        symbol: Text,
        /// Name as served.
        name: Text,
        /// Market or exchange lane.
        market: Text,
        /// ISO 4217 currency code.
        currency: Text,
        /// Earlier identifiers of the company.
        predecessors: TextList,
    }
    key: &["company_key"],
    load: LoadRule::Upsert,
    versions: true,
}

table! {
    /// Each distinct payload a company has had: `version` is a digest of
    /// its fields, `first_seen_at` when fdsync first saw it (the change, as
    /// near as the refresh schedule tells), `last_seen_at` when last.
    pub const COMPANY_VERSIONS: CompanyVersionRow = "company_versions" {
        /// The company: its canonical `cik` from the company payload (10-digit SEC CIK or a
        /// platform key such as TW:2330), whatever spelling the configuration used.
        company_key: Text,
        /// Digest of the company payload's fields: one per distinct payload.
        version: Text,
        /// Ticker symbol.
        symbol: Text,
        /// Name as served.
        name: Text,
        /// Market or exchange lane.
        market: Text,
        /// ISO 4217 currency code.
        currency: Text,
        /// Earlier identifiers of the company.
        predecessors: TextList,
        /// When fdsync (or the service, for news) first saw this value (UTC).
        first_seen_at: Timestamp,
        /// When fdsync last saw this value served (UTC).
        last_seen_at: Timestamp,
    }
    key: &["company_key", "version"],
    load: LoadRule::History,
}

pub static FEED: Feed = Feed {
    name: "companies",
    route: "/api/v1/companies/{company}",
    auth: true,
    tables: &[&COMPANIES, &COMPANY_VERSIONS],
    fetch: Fetch::Universe(read_key),
    params: &[],
    check: nothing_more,
};

/// A lookup's `companies` row; the canonical key, unless the payload has none usable.
fn read_key(rows: &mut Rows, body: &[u8]) -> Result<Option<String>, BodyError> {
    let raw: &RawValue = parse_body(body)?;
    Ok(read(rows, raw).map(|company| company.cik))
}

/// A `companies` row; the company, unless its payload has no usable key.
pub fn read(rows: &mut Rows, raw: &RawValue) -> Option<Company> {
    let mut company: Company = rows.parse(raw, "company")?;
    if company.cik.trim().is_empty() {
        rows.quarantine(raw.get(), "company: empty cik".into());
        return None;
    }
    // One spelling of a company key wherever it arrives: `789019` is `0000789019`.
    company.cik = crate::wire::company_key(&company.cik);
    for predecessor in &mut company.predecessors {
        *predecessor = crate::wire::company_key(predecessor);
    }
    let row = CompanyRow {
        company_key: Some(&company.cik),
        cik: Some(&company.cik),
        symbol: company.symbol.as_deref(),
        name: company.name.as_deref(),
        market: company.market.as_deref(),
        currency: company.currency.as_deref(),
        predecessors: &company.predecessors,
    };
    rows.push(row, raw.get());
    let version = CompanyVersionRow {
        company_key: Some(&company.cik),
        version: Some(&version_of(&company)),
        symbol: company.symbol.as_deref(),
        name: company.name.as_deref(),
        market: company.market.as_deref(),
        currency: company.currency.as_deref(),
        predecessors: &company.predecessors,
        first_seen_at: Some(rows.fetched_at),
        last_seen_at: Some(rows.fetched_at),
    };
    rows.push(version, raw.get());
    Some(company)
}

/// A digest of the fields a company's identity is made of: equal payloads,
/// equal versions, whatever their key order or unknown fields.
fn version_of(company: &Company) -> String {
    use sha2::{Digest, Sha256};
    let fields = serde_json::json!([
        company.symbol,
        company.name,
        company.market,
        company.currency,
        company.predecessors
    ]);
    let digest = Sha256::digest(fields.to_string().as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}
