//! Per-company documents: regulation links, Taiwan monthly revenue, and parsed
//! filings with their section texts. Filings and sections never change once
//! served; regulation coverage grows as the service reads more documents.

use chrono::{DateTime, Datelike, Duration, Months, NaiveDate, Utc};
use serde_json::{Value, json};

use super::world::{CompanyProfile, mix_str, round, unit};

const WORDS: &[&str] = &[
    "revenue",
    "segment",
    "customers",
    "supply",
    "risk",
    "demand",
    "margin",
    "regulation",
    "capital",
    "liquidity",
    "operations",
    "guidance",
    "inventory",
    "pricing",
    "competition",
    "investment",
    "growth",
    "exposure",
    "market",
    "products",
];

/// Deterministic prose of about `chars` characters.
fn prose(seed: u64, h: u64, chars: usize) -> String {
    let mut out = String::with_capacity(chars + 16);
    let mut i = 0u64;
    while out.len() < chars {
        let w = WORDS[(unit(seed, h, i) * WORDS.len() as f64) as usize % WORDS.len()];
        out.push_str(w);
        i += 1;
        out.push_str(if i.is_multiple_of(12) { ". " } else { " " });
    }
    out.truncate(chars);
    out
}

fn numeric_cik(c: &CompanyProfile) -> u64 {
    c.cik.parse().unwrap_or_else(|_| mix_str(&c.cik) % 9_000_000_000)
}

/// Documents keep being published (one every two to four months per company),
/// and the service reads each about this long after it is published, so
/// coverage is incomplete for a while after every new document.
const READ_LAG_DAYS: i64 = 45;

/// `GET /companies/{id}/regulation` at `now`: every document published by
/// now; coverage counts those read so far.
pub fn regulation(seed: u64, c: &CompanyProfile, now: DateTime<Utc>) -> Value {
    let h = mix_str(&c.cik) ^ 0x4E6;
    let today = now.date_naive();
    let start = NaiveDate::from_ymd_opt(2025, 1, 20).expect("valid");
    let gap = 60 + (unit(seed, h, 0) * 60.0) as i64;
    let mut actions = Vec::new();
    let mut read = 0u64;
    for n in 0..500u64 {
        let published = start + Duration::days(n as i64 * gap + (unit(seed, h, 10 + n) * gap as f64 / 2.0) as i64);
        if published > today {
            break;
        }
        if published + Duration::days(READ_LAG_DAYS) <= today {
            read += 1;
        }
        let mut links = Vec::new();
        let roll = unit(seed, h, 20 + n);
        if roll < 0.3 {
            links.push(json!({"basis": "named", "evidence": format!("The order names {} in section {}.", c.name, 2 + n % 5), "accession": null}));
        }
        if roll < 0.6 {
            let accession = format!("{:010}-{:02}-{:06}", numeric_cik(c), published.year() % 100, 1000 + n);
            links.push(json!({"basis": "company_cited", "evidence": format!("{} describes the order in its periodic report.", c.name), "accession": accession}));
        }
        links.push(json!({"basis": "sector", "evidence": "The order acts directly on the company's industry.", "accession": null}));
        actions.push(json!({
            "documentId": format!("EO-{}-{:05}", published.year(), mix_str(&c.cik) % 90_000 + n),
            "title": format!("Executive order on {} ({})", WORDS[(n as usize * 7) % WORDS.len()], published.year()),
            "publishedAt": published.to_string(),
            "links": links,
        }));
    }
    let total = actions.len() as u64;
    json!({
        "cik": c.cik,
        "executiveActions": actions,
        "coverage": {"documentsRead": read, "documentsTotal": total, "complete": read == total, "pilot": true},
    })
}

/// `GET /companies/{id}/monthly-revenue`, or `None` for an issuer without a monthly mandate.
pub fn monthly_revenue(seed: u64, c: &CompanyProfile, now: DateTime<Utc>) -> Option<Value> {
    if !c.cik.starts_with("TW:") {
        return None;
    }
    let h = mix_str(&c.cik) ^ 0x7E7;
    let today = now.date_naive();
    let mut months = Vec::new();
    let mut revenues: Vec<f64> = Vec::new();
    let mut month = NaiveDate::from_ymd_opt(2015, 1, 1).expect("valid");
    let mut i = 0u64;
    loop {
        let filed = month + Months::new(1) + Duration::days(9);
        if filed > today {
            break;
        }
        let revenue = (1e10 * (1.0 + 0.01 * i as f64) * (0.9 + 0.2 * unit(seed, h, i))).round();
        let yoy = revenues
            .len()
            .checked_sub(12)
            .map(|j| round((revenue / revenues[j] - 1.0) * 100.0, 2));
        let mom = revenues.last().map(|p| round((revenue / p - 1.0) * 100.0, 2));
        months.push(json!({
            "month": month.format("%Y-%m").to_string(), "revenue": revenue as i64,
            "yoyPct": yoy, "momPct": mom, "filedAt": filed.to_string(),
        }));
        revenues.push(revenue);
        month = month + Months::new(1);
        i += 1;
    }
    months.reverse();
    Some(json!({
        "cik": c.cik, "symbol": c.symbol, "currency": c.currency,
        "licence": "Source: Market Observation Post System, open data licence (synthetic)",
        "months": months,
    }))
}

pub struct Section {
    pub key: &'static str,
    pub title: &'static str,
}

const ANNUAL: &[Section] = &[
    Section {
        key: "business",
        title: "Business",
    },
    Section {
        key: "risk_factors",
        title: "Risk Factors",
    },
    Section {
        key: "mdna",
        title: "Management's Discussion and Analysis",
    },
];
const QUARTERLY: &[Section] = &[
    Section {
        key: "mdna",
        title: "Management's Discussion and Analysis",
    },
    Section {
        key: "risk_factors",
        title: "Risk Factors",
    },
];

pub struct Filing {
    pub accession: String,
    pub form: &'static str,
    pub filed_at: NaiveDate,
    pub period_end: NaiveDate,
    pub sections: &'static [Section],
}

/// Filings published by `today`, newest first: a 10-K each February and a 10-Q
/// each May, August and November, since 2015 or the listing.
pub fn filings(c: &CompanyProfile, today: NaiveDate) -> Vec<Filing> {
    let form_annual = if c.market == "US" { "10-K" } else { "20-F" };
    let mut out = Vec::new();
    let mut seq = 0u32;
    for year in 2015.max(c.listed.year() + 1)..=today.year() {
        for (month, day, form, sections, period_end) in [
            (2, 20, form_annual, ANNUAL, NaiveDate::from_ymd_opt(year - 1, 12, 31)),
            (5, 5, "10-Q", QUARTERLY, NaiveDate::from_ymd_opt(year, 3, 31)),
            (8, 5, "10-Q", QUARTERLY, NaiveDate::from_ymd_opt(year, 6, 30)),
            (11, 5, "10-Q", QUARTERLY, NaiveDate::from_ymd_opt(year, 9, 30)),
        ] {
            let Some(filed_at) = NaiveDate::from_ymd_opt(year, month, day) else {
                continue;
            };
            if filed_at > today || (form == "10-Q" && form_annual == "20-F") {
                continue;
            }
            seq += 1;
            out.push(Filing {
                accession: format!("{:010}-{:02}-{:06}", numeric_cik(c), year % 100, seq),
                form,
                filed_at,
                period_end: period_end.expect("valid"),
                sections,
            });
        }
    }
    out.reverse();
    out
}

fn section_chars(seed: u64, accession: &str, key: &str) -> usize {
    2_000 + (unit(seed, mix_str(accession), mix_str(key)) * 6_000.0) as usize
}

pub fn filing_notes(seed: u64, c: &CompanyProfile, now: DateTime<Utc>) -> Value {
    let list: Vec<Value> = filings(c, now.date_naive())
        .iter()
        .map(|f| {
            let sections: Vec<Value> = f
                .sections
                .iter()
                .map(|s| json!({"key": s.key, "title": s.title, "chars": section_chars(seed, &f.accession, s.key)}))
                .collect();
            json!({"accession": f.accession, "form": f.form, "filedAt": f.filed_at.to_string(),
                   "periodEnd": f.period_end.to_string(), "sections": sections})
        })
        .collect();
    json!({"filings": list})
}

/// One section's text, if the filing and section exist at `now`.
pub fn section_text(seed: u64, c: &CompanyProfile, accession: &str, key: &str, now: DateTime<Utc>) -> Option<Value> {
    let filing = filings(c, now.date_naive())
        .into_iter()
        .find(|f| f.accession == accession)?;
    let section = filing.sections.iter().find(|s| s.key == key)?;
    let text = prose(
        seed,
        mix_str(accession) ^ mix_str(key),
        section_chars(seed, accession, key),
    );
    Some(json!({"accession": accession, "key": key, "title": section.title, "text": text}))
}

/// Accession numbers look like `0000320193-26-000011`.
pub fn is_accession(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| {
            if i == 10 || i == 13 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        })
}
