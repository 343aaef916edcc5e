//! Each company's data: its profile, prices, dividends, regulation links,
//! monthly revenue and filings with their sections.

use super::{Family, Named, company_or_404};
use crate::*;

pub(crate) const FAMILY: Family = Family {
    routes,
    named: &[
        Named::other("company", &["/api/v1/companies/{id}"]),
        Named::list("prices", &["/api/v1/companies/{id}/prices"], "bars"),
        Named::list("dividends", &["/api/v1/companies/{id}/dividends"], "events"),
        Named::list("regulation", &["/api/v1/companies/{id}/regulation"], "executiveActions").inner("links"),
        Named::list("monthly_revenue", &["/api/v1/companies/{id}/monthly-revenue"], "months"),
        Named::list("filings", &["/api/v1/companies/{id}/filing-notes"], "filings").inner("sections"),
        Named::other(
            "section",
            &["/api/v1/companies/{id}/filing-notes/{accession}/{section}"],
        ),
    ],
};

/// Each company's data: its profile, prices, dividends, regulation links,
/// monthly revenue and filings with their sections.
fn routes(router: DataRouter) -> DataRouter {
    router
        .route("/api/v1/companies/{id}", get(company))
        .route("/api/v1/companies/{id}/prices", get(prices))
        .route("/api/v1/companies/{id}/dividends", get(dividends))
        .route("/api/v1/companies/{id}/regulation", get(regulation))
        .route("/api/v1/companies/{id}/monthly-revenue", get(monthly_revenue))
        .route("/api/v1/companies/{id}/filing-notes", get(filing_notes))
        .route(
            "/api/v1/companies/{id}/filing-notes/{accession}/{section}",
            get(filing_section),
        )
}

async fn company(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    let today = state.clock.now().date_naive();
    Ok(Json(company_or_404(&state, &id)?.payload(today)).into_response())
}

/// Start of a lookback range ending at `today`, or `None` for ALL.
fn range_start(range: &str, today: NaiveDate) -> Result<Option<NaiveDate>, ()> {
    let months = |m: u32| today.checked_sub_months(chrono::Months::new(m)).ok_or(());
    Ok(match range {
        "1M" => Some(months(1)?),
        "3M" => Some(months(3)?),
        "6M" => Some(months(6)?),
        "YTD" => NaiveDate::from_ymd_opt(today.year(), 1, 1),
        "1Y" => Some(months(12)?),
        "2Y" => Some(months(24)?),
        "5Y" => Some(months(60)?),
        "ALL" => None,
        _ => return Err(()),
    })
}

async fn prices(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult {
    let range = query.get("range").map(String::as_str).unwrap_or("1Y");
    let now = state.clock.now();
    let start = range_start(range, now.date_naive()).map_err(|()| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("invalid range '{range}': use one of 1M, 3M, 6M, YTD, 1Y, 2Y, 5Y, ALL"),
        )
    })?;
    let c = company_or_404(&state, &id)?;
    let bars = state.world.daily_bars(&c, now);
    let from = start.unwrap_or(c.listed);
    let display_from = from
        .and_hms_opt(0, 0, 0)
        .expect("midnight")
        .and_utc()
        .timestamp_millis();
    let bars: Vec<_> = bars.into_iter().filter(|(d, _)| *d >= from).map(|(_, b)| b).collect();
    Ok(Json(PricesBody {
        symbol: &c.symbol,
        bars,
        display_from,
    })
    .into_response())
}

/// The body of `GET /companies/{id}/prices`, serialized directly: a
/// `serde_json::Value` with a map for each bar costs more than gzipping the
/// history, on the cores the client shares.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct PricesBody<'a> {
    symbol: &'a str,
    bars: Vec<crate::wire::Bar>,
    display_from: i64,
}

async fn dividends(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    let c = company_or_404(&state, &id)?;
    let now = state.clock.now();
    let bars = state.world.daily_bars(&c, now);
    let (events, summary, series) = state.world.dividends(&c, &bars, now.date_naive());
    Ok(Json(json!({
        "cik": c.cik, "symbol": c.symbol, "currency": c.currency,
        "events": events, "summary": summary, "yieldSeries": series,
    }))
    .into_response())
}

async fn regulation(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    let c = company_or_404(&state, &id)?;
    Ok(Json(company_docs::regulation(state.world.seed, &c, state.clock.now())).into_response())
}

async fn monthly_revenue(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    let c = company_or_404(&state, &id)?;
    company_docs::monthly_revenue(state.world.seed, &c, state.clock.now())
        .map(|v| Json(v).into_response())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("{} has no monthly revenue mandate", c.cik),
            )
        })
}

async fn filing_notes(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    let c = company_or_404(&state, &id)?;
    Ok(Json(company_docs::filing_notes(state.world.seed, &c, state.clock.now())).into_response())
}

async fn filing_section(
    State(state): State<Arc<AppState>>,
    Path((id, accession, section)): Path<(String, String, String)>,
) -> ApiResult {
    let c = company_or_404(&state, &id)?;
    if !company_docs::is_accession(&accession) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("malformed accession '{accession}': expected NNNNNNNNNN-NN-NNNNNN"),
        ));
    }
    company_docs::section_text(state.world.seed, &c, &accession, &section, state.clock.now())
        .map(|v| Json(v).into_response())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no section '{section}' in filing {accession}"),
            )
        })
}
