//! `GET /companies/{id}/regulation`: each document's links to the company,
//! replaced as a whole per company, and the coverage observed over time.

use chrono::NaiveDate;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{BodyError, Feed, Fetch, PerCompany, nothing_more, parse_envelope};
use crate::batch::table;
use crate::records::Rows;
use crate::tables::LoadRule;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegulationPage<'a> {
    /// The company asked, echoed: known, not stored (rows carry the key asked).
    #[serde(default, borrow, rename = "cik")]
    _cik: Option<&'a RawValue>,
    #[serde(borrow)]
    pub executive_actions: Vec<&'a RawValue>,
    pub coverage: Option<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutiveAction {
    pub document_id: String,
    pub title: Option<String>,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_date")]
    pub published_at: Option<NaiveDate>,
    /// Every link basis of the document (spec section 2): absent, `null` or
    /// under another name, the action is unreadable, never "no links".
    pub links: Vec<RegulationLink>,
}

#[derive(Debug, Deserialize)]
pub struct RegulationLink {
    pub basis: String,
    pub evidence: Option<String>,
    pub accession: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegulationCoverage {
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_integer")]
    pub documents_read: Option<i64>,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_integer")]
    pub documents_total: Option<i64>,
    pub complete: Option<bool>,
    pub pilot: Option<bool>,
}

table! {
    /// One row per company, document and link basis; `rank` 1 is the strongest basis.
    pub const REGULATION_ACTIONS: RegulationActionRow = "regulation_actions" {
        /// The company: its canonical `cik` from the company payload (10-digit SEC CIK or a
        /// platform key such as TW:2330), whatever spelling the configuration used.
        company_key: Text,
        /// The government document's identifier.
        document_id: Text,
        /// Why the document is linked to the company: named, company_cited or sector.
        basis: Text,
        /// Title.
        title: Text,
        /// When the source published it (UTC).
        published_at: Date,
        /// Strength of the link, 1 the strongest.
        rank: Int,
        /// The text that ties the document to the company.
        evidence: Text,
        /// SEC accession number of the filing, NNNNNNNNNN-NN-NNNNNN.
        accession: Text,
    }
    key: &["company_key", "document_id", "basis"],
    load: LoadRule::Replace,
    versions: true,
}

table! {
    /// How much of a company's regulation record has been read, appended when it changes.
    pub const REGULATION_COVERAGE: RegulationCoverageRow = "regulation_coverage" {
        /// The company: its canonical `cik` from the company payload (10-digit SEC CIK or a
        /// platform key such as TW:2330), whatever spelling the configuration used.
        company_key: Text,
        /// When fdsync observed the value (UTC).
        observed_at: Timestamp,
        /// Documents read so far.
        documents_read: Int,
        /// Documents in the record.
        documents_total: Int,
        /// Whether the whole record has been read (coverage is whole).
        complete: Bool,
        /// Whether the coverage is a pilot.
        pilot: Bool,
    }
    key: &["company_key", "observed_at"],
    load: LoadRule::AppendOnChange,
}

pub static FEED: Feed = Feed {
    name: "regulation",
    route: "/api/v1/companies/{company}/regulation",
    auth: true,
    tables: &[&REGULATION_ACTIONS, &REGULATION_COVERAGE],
    fetch: Fetch::PerCompany(PerCompany::plain(read_page)),
    params: &[],
    check: nothing_more,
};

/// `regulation_actions` (the company's whole set, replacing what was stored)
/// and a `regulation_coverage` observation; the checkpoint is the day read.
fn read_page(rows: &mut Rows, body: &[u8], company_key: &str) -> Result<Option<NaiveDate>, BodyError> {
    let page: RegulationPage = parse_envelope(rows, body)?;
    rows.replace_partition(&REGULATION_ACTIONS, company_key);
    for raw in &page.executive_actions {
        let Some(a) = rows.parse::<ExecutiveAction>(raw, "executive action") else {
            continue;
        };
        for (rank, link) in a.links.iter().enumerate() {
            let row = RegulationActionRow {
                company_key: Some(company_key),
                document_id: Some(&a.document_id),
                basis: Some(&link.basis),
                title: a.title.as_deref(),
                published_at: a.published_at,
                rank: Some(rank as i64 + 1),
                evidence: link.evidence.as_deref(),
                accession: link.accession.as_deref(),
            };
            rows.push(row, raw.get());
        }
    }
    if let Some(raw) = page.coverage
        && let Some(c) = rows.parse::<RegulationCoverage>(raw, "regulation coverage")
    {
        let row = RegulationCoverageRow {
            company_key: Some(company_key),
            observed_at: Some(rows.fetched_at),
            documents_read: c.documents_read,
            documents_total: c.documents_total,
            complete: c.complete,
            pilot: c.pilot,
        };
        rows.push(row, raw.get());
    }
    Ok(Some(rows.fetched_at.date_naive()))
}
