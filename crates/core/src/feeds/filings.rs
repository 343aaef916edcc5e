//! `GET /companies/{id}/filing-notes` and its section texts
//! (`/companies/{id}/filing-notes/{accession}/{sectionKey}`), each fetched once.

use chrono::NaiveDate;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{
    BodyError, Document, DocumentParts, Feed, Fetch, Params, Part, Stored, StoredParts, parse_body, parse_envelope,
    route_param,
};
use crate::batch::table;
use crate::records::Rows;
use crate::tables::Compression::Zstd;
use crate::tables::{LakePartition, LoadRule};

/// `GET /companies/{id}/filing-notes`, newest first.
#[derive(Debug, Deserialize)]
pub struct FilingNotesPage<'a> {
    #[serde(borrow)]
    pub filings: Vec<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FilingNote {
    pub accession: String,
    pub form: Option<String>,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_date")]
    pub filed_at: Option<NaiveDate>,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_date")]
    pub period_end: Option<NaiveDate>,
    /// The sections the filing carries, each fetched once: absent, `null`
    /// or under another name, the filing is unreadable, never "no sections".
    pub sections: Vec<SectionRef>,
}

#[derive(Debug, Deserialize)]
pub struct SectionRef {
    pub key: String,
    pub title: Option<String>,
    /// The section's length, known but not stored (it stays in `raw`):
    /// named here so that drift detection does not report it.
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_integer")]
    pub chars: Option<i64>,
}

/// `GET /companies/{id}/filing-notes/{accession}/{sectionKey}`.
#[derive(Debug, Deserialize)]
pub struct SectionText {
    pub accession: Option<String>,
    pub key: Option<String>,
    pub title: Option<String>,
    pub text: String,
}

table! {
    /// Parsed filings (10-K, 10-Q, 20-F, DEF 14A, S-1 and exchange-lane reports).
    pub const FILINGS: FilingRow = "filings" {
        /// SEC accession number of the filing, NNNNNNNNNN-NN-NNNNNN.
        accession: Text,
        /// The company: its canonical `cik` from the company payload (10-digit SEC CIK or a
        /// platform key such as TW:2330), whatever spelling the configuration used.
        company_key: Text,
        /// SEC form type, such as 10-K, 10-Q, 20-F, DEF 14A or S-1.
        form: Text,
        /// When the document was filed (UTC).
        filed_at: Date,
        /// The end of the period the filing reports on.
        period_end: Date,
        /// Keys of the sections the filing has.
        section_keys: TextList,
    }
    key: &["accession"],
    load: LoadRule::InsertOnce,
    lake_partition: Some(LakePartition::Year("filed_at")),
}

table! {
    /// Narrative sections of filings (Business, Risk Factors, MD&A and others).
    pub const FILING_SECTIONS: FilingSectionRow = "filing_sections" {
        /// SEC accession number of the filing, NNNNNNNNNN-NN-NNNNNN.
        accession: Text,
        /// The section: business, risk_factors, mdna and the like.
        section_key: Text,
        /// The company: its canonical `cik` from the company payload (10-digit SEC CIK or a
        /// platform key such as TW:2330), whatever spelling the configuration used.
        company_key: Text,
        /// Title.
        title: Text,
        /// The text exactly as extracted by the service.
        text: Text,
    }
    key: &["accession", "section_key"],
    load: LoadRule::InsertOnce,
    compression: &[("text", Zstd), ("raw", Zstd)],
}

pub static FEED: Feed = Feed {
    name: "filings",
    route: "/api/v1/companies/{company}/filing-notes",
    auth: true,
    tables: &[&FILINGS, &FILING_SECTIONS],
    fetch: Fetch::DocumentsAndSections(DocumentParts {
        list: read_list,
        read_part,
        documents: &Stored {
            table: &FILINGS,
            company: "company_key",
            id: "accession",
            dated: "filed_at",
        },
        listed: "section_keys",
        parts: &StoredParts {
            table: &FILING_SECTIONS,
            company: "company_key",
            id: "accession",
            part: "section_key",
        },
    }),
    params: &["section_route", "text_days"],
    check,
};

fn check(_route: &str, params: &Params) -> Result<(), String> {
    route_param(
        params.section_route.as_deref(),
        "section_route",
        &["{company}", "{accession}", "{section}"],
    )
}

fn read_list(rows: &mut Rows, body: &[u8], company_key: &str) -> Result<Vec<Document>, BodyError> {
    let page: FilingNotesPage = parse_envelope(rows, body)?;
    Ok(read(rows, &page, company_key)
        .into_iter()
        .map(|f| Document {
            id: f.accession,
            dated: f.filed_at,
            parts: f
                .sections
                .into_iter()
                .map(|s| Part {
                    key: s.key,
                    title: s.title,
                })
                .collect(),
        })
        .collect())
}

fn read_part(rows: &mut Rows, body: &[u8], company_key: &str, accession: &str, part: &Part) -> Result<(), BodyError> {
    let raw: &RawValue = parse_body(body)?;
    let section = SectionRef {
        key: part.key.clone(),
        title: part.title.clone(),
        chars: None,
    };
    read_section(rows, raw, company_key, accession, &section);
    Ok(())
}

/// `filings` from the filing-notes list; returns each filing with its sections, newest first.
pub fn read(rows: &mut Rows, page: &FilingNotesPage<'_>, company_key: &str) -> Vec<FilingNote> {
    let mut out = Vec::new();
    for raw in &page.filings {
        let Some(f) = rows.parse::<FilingNote>(raw, "filing") else {
            continue;
        };
        let section_keys: Vec<String> = f.sections.iter().map(|s| s.key.clone()).collect();
        let row = FilingRow {
            accession: Some(&f.accession),
            company_key: Some(company_key),
            form: f.form.as_deref(),
            filed_at: f.filed_at,
            period_end: f.period_end,
            section_keys: &section_keys,
        };
        rows.push(row, raw.get());
        out.push(f);
    }
    out
}

/// One `filing_sections` row; false when the record was quarantined.
pub fn read_section(rows: &mut Rows, raw: &RawValue, company_key: &str, accession: &str, section: &SectionRef) -> bool {
    let Some(t) = rows.parse::<SectionText>(raw, "filing section") else {
        return false;
    };
    // Keyed by what was asked for: a body that names another section would
    // otherwise leave the one listed missing, and asked for again every run.
    let row = FilingSectionRow {
        accession: Some(accession),
        section_key: Some(&section.key),
        company_key: Some(company_key),
        title: t.title.as_deref().or(section.title.as_deref()),
        text: Some(&t.text),
    };
    rows.push(row, raw.get());
    true
}
