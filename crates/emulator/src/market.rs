//! The emulator's market-wide data: the indices route's benchmark and sector
//! ETFs, and the coverage route's markets, derived from the world like the
//! companies' own data.

use chrono::{DateTime, Datelike, Duration, NaiveDate, Timelike, Utc};

use super::world::{CompanyProfile, World, close_on_or_before, d, round};
use crate::wire::Bar;
use crate::wire::IndexEntry;
use crate::wire::{CoverageDataType, CoverageMarket};

impl World {
    /// The benchmark and sector ETFs the indices route serves.
    pub fn indices(&self, now: DateTime<Utc>) -> Vec<IndexEntry> {
        INDICES
            .iter()
            .map(|ix| {
                let profile = CompanyProfile {
                    cik: format!("INDEX:{}", ix.symbol),
                    symbol: ix.symbol.into(),
                    name: ix.name.into(),
                    market: "US".into(),
                    currency: "USD".into(),
                    predecessors: Vec::new(),
                    listed: d(ix.inception.0, ix.inception.1, ix.inception.2),
                    start_price: ix.price,
                    drift: 0.0003,
                    vol: 0.011,
                    base_volume: 5e7,
                    dividend: None,
                    split: None,
                    renamed: None,
                };
                let bars = self.daily_bars(&profile, now);
                index_entry(ix, &profile, &bars, now.date_naive())
            })
            .collect()
    }

    /// Coverage by market, as generated at the top of the clock's hour.
    pub fn coverage(&self, now: DateTime<Utc>) -> (DateTime<Utc>, Vec<CoverageMarket>) {
        let generated_at = now
            .with_minute(0)
            .and_then(|t| t.with_second(0))
            .and_then(|t| t.with_nanosecond(0))
            .unwrap_or(now);
        let today = now.date_naive();
        let markets = [
            ("US", 5231 + self.generated as i64 / 100),
            ("JP", 3890),
            ("TW", 1810),
            ("KR", 2450),
            ("GB", 1620),
            ("SA", 230),
            ("AE", 140),
            ("EU", 4100),
        ];
        let types = [
            ("prices", (1990, 1, 2), 99.1),
            ("dividends", (1995, 1, 3), 97.4),
            ("events", (2004, 8, 23), 95.2),
            ("news", (2018, 1, 1), 92.8),
            ("filings", (2001, 1, 2), 98.3),
        ];
        let out = markets
            .iter()
            .enumerate()
            .map(|(mi, (market, companies))| CoverageMarket {
                market: (*market).into(),
                companies: *companies,
                data_types: types
                    .iter()
                    .enumerate()
                    .map(|(ti, (ty, from, pct))| {
                        let from = d(from.0 + mi as i32, from.1, from.2);
                        CoverageDataType {
                            data_type: (*ty).into(),
                            history_from: Some(from),
                            completeness_pct: Some(round(pct - mi as f64 * 0.7 - ti as f64 * 0.1, 1)),
                            periods: Some((today - from).num_days()),
                        }
                    })
                    .collect(),
            })
            .collect();
        (generated_at, out)
    }
}

struct IndexDef {
    symbol: &'static str,
    name: &'static str,
    short_name: &'static str,
    category: &'static str,
    role: &'static str,
    sector: Option<&'static str>,
    family: &'static str,
    issuer: &'static str,
    expense: f64,
    inception: (i32, u32, u32),
    price: f64,
}

const INDICES: &[IndexDef] = &[
    IndexDef {
        symbol: "SPY",
        name: "SPDR S&P 500 ETF Trust",
        short_name: "S&P 500",
        category: "broad_market",
        role: "market",
        sector: None,
        family: "S&P 500",
        issuer: "State Street",
        expense: 0.0945,
        inception: (1995, 1, 3),
        price: 46.0,
    },
    IndexDef {
        symbol: "QQQ",
        name: "Invesco QQQ Trust",
        short_name: "Nasdaq-100",
        category: "broad_market",
        role: "none",
        sector: None,
        family: "Nasdaq-100",
        issuer: "Invesco",
        expense: 0.2,
        inception: (1999, 3, 10),
        price: 51.0,
    },
    IndexDef {
        symbol: "IWM",
        name: "iShares Russell 2000 ETF",
        short_name: "Russell 2000",
        category: "broad_market",
        role: "none",
        sector: None,
        family: "Russell",
        issuer: "BlackRock",
        expense: 0.19,
        inception: (2000, 5, 22),
        price: 48.0,
    },
    IndexDef {
        symbol: "XLK",
        name: "Technology Select Sector SPDR Fund",
        short_name: "Technology",
        category: "sector",
        role: "none",
        sector: Some("technology"),
        family: "Select Sector",
        issuer: "State Street",
        expense: 0.09,
        inception: (1998, 12, 16),
        price: 30.0,
    },
    IndexDef {
        symbol: "XLF",
        name: "Financial Select Sector SPDR Fund",
        short_name: "Financials",
        category: "sector",
        role: "none",
        sector: Some("financials"),
        family: "Select Sector",
        issuer: "State Street",
        expense: 0.09,
        inception: (1998, 12, 16),
        price: 18.0,
    },
    IndexDef {
        symbol: "XLE",
        name: "Energy Select Sector SPDR Fund",
        short_name: "Energy",
        category: "sector",
        role: "none",
        sector: Some("energy"),
        family: "Select Sector",
        issuer: "State Street",
        expense: 0.09,
        inception: (1998, 12, 16),
        price: 22.0,
    },
];

fn index_entry(ix: &IndexDef, _p: &CompanyProfile, bars: &[(NaiveDate, Bar)], today: NaiveDate) -> IndexEntry {
    let (last_date, last) = bars.last().map(|(d, b)| (*d, b.c)).unwrap_or((today, 0.0));
    let back = |days: i64| close_on_or_before(bars, last_date - Duration::days(days));
    let ret = |then: Option<f64>| then.filter(|p| *p > 0.0).map(|p| round(last / p - 1.0, 6));
    let year_ago = last_date - Duration::days(365);
    let window: Vec<f64> = bars.iter().filter(|(d, _)| *d > year_ago).map(|(_, b)| b.c).collect();
    let recent: Vec<f64> = bars.iter().rev().take(31).map(|(_, b)| b.c).collect();
    let rets: Vec<f64> = recent.windows(2).map(|w| (w[0] / w[1]).ln()).collect();
    let mean = rets.iter().sum::<f64>() / rets.len().max(1) as f64;
    let var = rets.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (rets.len().max(2) - 1) as f64;
    let ytd_start = NaiveDate::from_ymd_opt(last_date.year(), 1, 1).expect("jan 1") - Duration::days(1);
    IndexEntry {
        symbol: ix.symbol.into(),
        name: Some(ix.name.into()),
        short_name: Some(ix.short_name.into()),
        category: Some(ix.category.into()),
        benchmark_role: Some(ix.role.into()),
        sector_key: ix.sector.map(Into::into),
        index_family: Some(ix.family.into()),
        issuer: Some(ix.issuer.into()),
        expense_ratio: Some(ix.expense),
        inception_date: Some(d(ix.inception.0, ix.inception.1, ix.inception.2)),
        last_price: Some(last),
        last_price_date: last_date,
        return_1d: ret(bars.len().checked_sub(2).map(|i| bars[i].1.c)),
        return_1w: ret(back(7)),
        return_1m: ret(back(30)),
        return_ytd: ret(close_on_or_before(bars, ytd_start)),
        return_1y: ret(back(365)),
        return_5y: ret(back(365 * 5)),
        low_52w: window.iter().copied().reduce(f64::min),
        high_52w: window.iter().copied().reduce(f64::max),
        volatility_30d: Some(round(var.sqrt() * 252f64.sqrt(), 6)),
        price_rows: Some(bars.len() as i64),
        days_stale: Some((today - last_date).num_days()),
    }
}
