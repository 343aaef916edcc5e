//! The 8-K wire: one global, time-ordered stream of filings across the universe.
//!
//! Filing `n` is accepted at `EPOCH + n * SPACING` plus a jitter smaller than the
//! spacing, so acceptance times are monotonic in `n`, a date window maps to a
//! range of `n`, and nothing is held in memory. New filings arrive as the clock
//! moves; a filing's headline is null until the platform's gate passes it, some
//! hours later.

use chrono::{DateTime, Duration, NaiveDate, Utc};
use serde_json::{Value, json};

use super::world::{Cadence, CompanyProfile, World, mix_str, unit};

pub const FAMILIES: &[&str] = &[
    "earnings",
    "guidance",
    "mna",
    "agreement",
    "dividend",
    "buyback",
    "stock_split",
    "debt_financing",
    "equity_financing",
    "leadership",
    "governance_vote",
    "restructuring",
    "impairment",
    "restatement_non_reliance",
    "legal_regulatory",
    "listing_compliance",
    "cyber_incident",
    "other",
];

/// Item codes a filing of each family carries; an empty list is the uncoded item.
fn items_for(family: &str, roll: f64) -> Vec<&'static str> {
    match family {
        "earnings" => vec!["2.02", "9.01"],
        "guidance" => vec!["7.01", "9.01"],
        "mna" => vec!["2.01", "8.01"],
        "agreement" => vec!["1.01"],
        "dividend" | "buyback" | "stock_split" => vec!["8.01"],
        "debt_financing" => vec!["2.03"],
        "equity_financing" => vec!["3.02"],
        "leadership" => vec!["5.02"],
        "governance_vote" => vec!["5.07"],
        "restructuring" => vec!["2.05"],
        "impairment" => vec!["2.06"],
        "restatement_non_reliance" => vec!["4.02"],
        "legal_regulatory" => vec!["8.01"],
        "listing_compliance" => vec!["3.01"],
        "cyber_incident" => vec!["1.05"],
        _ if roll < 0.5 => vec![],
        _ => vec!["8.01"],
    }
}

#[derive(Debug, Clone)]
pub struct Event {
    pub n: u64,
    pub company: CompanyProfile,
    pub accession: String,
    pub family: &'static str,
    pub items: Vec<&'static str>,
    pub accepted_at: DateTime<Utc>,
    /// When the headline passes the gate.
    pub headline_at: DateTime<Utc>,
    pub headline: String,
}

impl Event {
    pub fn filing_date(&self) -> NaiveDate {
        self.accepted_at.date_naive()
    }

    /// The index entry as served at `now`.
    pub fn entry(&self, now: DateTime<Utc>) -> Value {
        json!({
            "accession": self.accession,
            "family": self.family,
            "items": self.items,
            "filingDate": self.filing_date().to_string(),
            "acceptedAt": self.accepted_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            "headline": (now >= self.headline_at).then_some(&self.headline),
        })
    }

    /// The wire's entry: the index entry plus who filed it.
    pub fn wire_entry(&self, now: DateTime<Utc>) -> Value {
        let mut v = self.entry(now);
        v["cik"] = json!(self.company.cik);
        v["symbol"] = json!(self.company.symbol);
        v["name"] = json!(self.company.name);
        v
    }

    /// The verbatim text of one item (`""` for the uncoded one).
    pub fn item_text(&self, item: &str) -> String {
        let label = if item.is_empty() {
            "Other events".to_owned()
        } else {
            format!("Item {item}")
        };
        format!(
            "{label}.\n\nOn {}, {} filed this current report ({}) in the {} family. \
             The text of the item is served verbatim as extracted from the filing.\n",
            self.filing_date(),
            self.company.name,
            self.accession,
            self.family.replace('_', " ")
        )
    }
}

/// Arrival times of filings in `world`, one every `filing_spacing_minutes`.
pub fn cadence(world: &World) -> Cadence {
    Cadence {
        epoch: DateTime::from_timestamp(1_093_266_000, 0).expect("2004-08-23T13:00:00Z"),
        spacing_ms: world.filing_spacing_minutes.max(1) * 60_000,
        salt: 0xE7E7,
    }
}

/// The first filing number accepted on or after `day`.
pub fn first_on_or_after(world: &World, day: NaiveDate) -> u64 {
    cadence(world).first_at_or_after(day.and_hms_opt(0, 0, 0).expect("midnight").and_utc())
}

/// Who filed filing `n`, cheap to compute: named companies by position,
/// generated ones by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filer {
    Named(usize),
    Generated(u64),
}

pub fn filer(world: &World, n: u64) -> Filer {
    let pick = unit(world.seed, 0xC0, n);
    if pick < 0.33 || world.generated == 0 {
        let named = super::world::named_count();
        Filer::Named((((pick / 0.33).min(0.999_999)) * named as f64) as usize % named)
    } else {
        Filer::Generated((unit(world.seed, 0xC1, n) * world.generated as f64) as u64 % world.generated)
    }
}

/// The filer identity of a resolved company.
pub fn filer_of(world: &World, c: &CompanyProfile) -> Option<Filer> {
    if let Some(i) = world.named_position(&c.cik) {
        return Some(Filer::Named(i));
    }
    world.generated_number(&c.cik).map(Filer::Generated)
}

/// Filing `n`: who filed it and what it says. A third of filings come from the
/// named companies so demos and tests see activity on well-known tickers.
pub fn event(world: &World, n: u64) -> Option<Event> {
    let seed = world.seed;
    let company = match filer(world, n) {
        Filer::Named(i) => world.named_by_index(i)?,
        Filer::Generated(g) => world.generated_by_index(g)?,
    };
    let family = FAMILIES[(unit(seed, 0xFA, n) * FAMILIES.len() as f64) as usize % FAMILIES.len()];
    let items = items_for(family, unit(seed, 0x17, n));
    let accepted_at = cadence(world).at(seed, n);
    let cik_number: u64 = company
        .cik
        .parse()
        .unwrap_or_else(|_| mix_str(&company.cik) % 9_000_000_000);
    let accession = format!("{cik_number:010}-{:02}-{n:06}", accepted_at.format("%y"));
    let headline_at = accepted_at + Duration::minutes((unit(seed, 0x6A, n) * 360.0) as i64);
    let headline = format!("{} files 8-K: {}", company.name, family.replace('_', " "));
    Some(Event {
        n,
        company,
        accession,
        family,
        items,
        accepted_at,
        headline_at,
        headline,
    })
}

/// The filing an accession names, if it exists at `now`.
pub fn by_accession(world: &World, accession: &str, now: DateTime<Utc>) -> Option<Event> {
    let n: u64 = accession.get(14..)?.parse().ok()?;
    let e = event(world, n)?;
    (e.accession == accession && e.accepted_at <= now).then_some(e)
}

/// Filing numbers `from..to`, newest first when `newest`.
pub fn numbers(from: u64, to: u64, newest: bool) -> Box<dyn Iterator<Item = u64>> {
    if newest {
        Box::new((from..to).rev())
    } else {
        Box::new(from..to)
    }
}
