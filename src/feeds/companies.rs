//! `GET /companies/{id}`: the company payload that fixes a configured
//! identifier's canonical `company_key`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{Feed, Fetch, nothing_more, parse_body};
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
    pub const COMPANIES: CompanyRow = "companies" {
        company_key: Text,
        cik: Text,
        symbol: Text,
        name: Text,
        market: Text,
        currency: Text,
        predecessors: TextList,
    }
    key: &["company_key"],
    load: LoadRule::Upsert,
}

pub static FEED: Feed = Feed {
    name: "companies",
    route: "/api/v1/companies/{company}",
    auth: true,
    tables: &[&COMPANIES],
    fetch: Fetch::Universe(read_key),
    params: &[],
    check: nothing_more,
};

/// A lookup's `companies` row; the canonical key, unless the payload has none usable.
fn read_key(rows: &mut Rows, body: &[u8]) -> Result<Option<String>, String> {
    let raw: &RawValue = parse_body(body)?;
    Ok(read(rows, raw).map(|company| company.cik))
}

/// A `companies` row; the company, unless its payload has no usable key.
pub fn read(rows: &mut Rows, raw: &RawValue) -> Option<Company> {
    let company: Company = rows.parse(raw, "company")?;
    if company.cik.trim().is_empty() {
        rows.quarantine(raw.get(), "company: empty cik".into());
        return None;
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
    Some(company)
}
