use std::collections::HashMap;

use fdsync_emulator::PlanLimits;
use reqwest::StatusCode;
use serde_json::Value;

use crate::util::{TEST_KEY, emulator_with, frozen_clock};

async fn get(url: &str, headers: &[(&str, &str)]) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let mut req = reqwest::Client::new().get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let (status, h) = (r.status(), r.headers().clone());
    (status, h, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn authentication_follows_the_spec() {
    let emu = emulator_with(&frozen_clock(), PlanLimits::build()).await;
    let url = format!("{}/api/v1/indices", emu.base_url());
    let bearer = format!("Bearer {TEST_KEY}");

    let (s, _, body) = get(&url, &[]).await;
    assert_eq!(
        (s, body["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthenticated"))
    );
    let (s, _, body) = get(&url, &[("X-API-KEY", "sk_live_abc")]).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert!(body["error"].as_str().unwrap().contains("pk_live_"));
    let (s, _, _) = get(&url, &[("Authorization", &bearer)]).await;
    assert_eq!(s, StatusCode::OK, "Bearer is accepted");
    // X-API-KEY wins when both are sent, even when it is the wrong one.
    let (s, _, _) = get(&url, &[("X-API-KEY", "pk_live_wrong"), ("Authorization", &bearer)]).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _, _) = get(
        &url,
        &[("X-API-KEY", TEST_KEY), ("Authorization", "Bearer pk_live_wrong")],
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    // A data key is refused on account surfaces.
    let (s, _, _) = get(&format!("{}/api/v1/keys", emu.base_url()), &[("X-API-KEY", TEST_KEY)]).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // Coverage is public.
    let (s, _, body) = get(&format!("{}/api/v1/landing/coverage", emu.base_url()), &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert!(body["markets"][0]["dataTypes"][0]["historyFrom"].is_string());
}

#[tokio::test]
async fn limits_headers_and_429s_follow_the_wire_contract() {
    let emu = emulator_with(&frozen_clock(), PlanLimits::scale(2, None)).await;
    let url = format!("{}/api/v1/companies/MSFT", emu.base_url());
    let key = [("X-API-KEY", TEST_KEY)];
    let (s, h, _) = get(&url, &key).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(h["ratelimit-limit"], "2");
    assert_eq!(h["ratelimit-remaining"], "1");
    assert_eq!(h["ratelimit-reset"], "60");
    get(&url, &key).await;
    let (s, h, body) = get(&url, &key).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["code"], "rate_limited");
    assert_eq!(h["retry-after"], "60");
    assert_eq!(h["ratelimit-remaining"], "0");

    let free = emulator_with(&frozen_clock(), PlanLimits::free()).await;
    let (_, h, _) = get(&format!("{}/api/v1/indices", free.base_url()), &key).await;
    assert_eq!(h["x-quota-limit"], "250");
    assert_eq!(h["x-quota-remaining"], "249");
    assert_eq!(h["x-quota-window"], "day");
    assert_eq!(h["x-quota-reset"], "2026-11-26T00:00:00Z");
}

#[tokio::test]
async fn bad_parameters_and_unknown_ids_are_400_and_404() {
    let emu = emulator_with(&frozen_clock(), PlanLimits::build()).await;
    let key = [("X-API-KEY", TEST_KEY)];
    let base = emu.base_url();
    let (s, _, body) = get(&format!("{base}/api/v1/companies/MSFT/prices?range=2W"), &key).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().unwrap().contains("1M"));
    let (s, _, _) = get(&format!("{base}/api/v1/companies/NOPE/prices"), &key).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // A bare number is a CIK: 2330 is not TSMC, TW:2330 is.
    let (s, _, _) = get(&format!("{base}/api/v1/companies/2330"), &key).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _, body) = get(&format!("{base}/api/v1/companies/TW%3A2330"), &key).await;
    assert_eq!((s, body["cik"].as_str()), (StatusCode::OK, Some("TW:2330")));
    let (s, _, body) = get(&format!("{base}/api/v1/companies/789019"), &key).await;
    assert_eq!(body["cik"], "0000789019", "{s}");
}

#[tokio::test]
async fn prices_default_to_one_year_oldest_first_and_dividends_oldest_first() {
    let emu = emulator_with(&frozen_clock(), PlanLimits::build()).await;
    let key = [("X-API-KEY", TEST_KEY)];
    let base = emu.base_url();
    let (_, _, one_year) = get(&format!("{base}/api/v1/companies/AAPL/prices"), &key).await;
    let (_, _, explicit) = get(&format!("{base}/api/v1/companies/AAPL/prices?range=1Y"), &key).await;
    assert_eq!(one_year, explicit);
    let bars = one_year["bars"].as_array().unwrap();
    assert!((250..=262).contains(&bars.len()), "{}", bars.len());
    assert!(bars.windows(2).all(|w| w[0]["t"].as_i64() < w[1]["t"].as_i64()));
    let (_, _, div) = get(&format!("{base}/api/v1/companies/MSFT/dividends"), &key).await;
    let events = div["events"].as_array().unwrap();
    assert!(events[0]["changePct"].is_null());
    assert!(
        events
            .windows(2)
            .all(|w| w[0]["exDate"].as_str() < w[1]["exDate"].as_str())
    );
    assert_eq!(div["summary"]["count"].as_u64().unwrap() as usize, events.len());
}

#[tokio::test]
async fn macro_routes_serve_point_in_time_history_that_moves_with_the_clock() {
    let clock = frozen_clock();
    let emu = emulator_with(&clock, PlanLimits::build()).await;
    let key = [("X-API-KEY", TEST_KEY)];
    let base = emu.base_url();
    let (s, _, country) = get(&format!("{base}/api/v1/countries/US"), &key).await;
    assert_eq!(s, StatusCode::OK);
    let series_key = country["macroSeries"][0]["key"].as_str().unwrap().to_owned();
    for (url, status) in [
        (format!("{base}/api/v1/countries/us"), StatusCode::BAD_REQUEST),
        (format!("{base}/api/v1/countries/XX"), StatusCode::NOT_FOUND),
        (format!("{base}/api/v1/countries/US/series"), StatusCode::BAD_REQUEST),
        (
            format!("{base}/api/v1/countries/US/series?key=cpi-yoy"),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("{base}/api/v1/countries/US/series?key=NO_SUCH"),
            StatusCode::NOT_FOUND,
        ),
    ] {
        assert_eq!(get(&url, &key).await.0, status, "{url}");
    }
    let url = format!("{base}/api/v1/countries/US/series?key={series_key}");
    let (s, _, now) = get(&url, &key).await;
    assert_eq!(s, StatusCode::OK);
    for field in ["frequency", "description", "sourceName"] {
        assert!(now[field].is_string(), "{field}");
    }
    let points = now["history"].as_array().unwrap();
    let point = &points[points.len() - 1];
    assert!(point["period"].is_string() && point["value"].is_number() && point["vintage"].is_string());
    // A period with several vintages today is served with only its newest two years on.
    let mut per_period: HashMap<&str, usize> = HashMap::new();
    for p in points {
        *per_period.entry(p["period"].as_str().unwrap()).or_default() += 1;
    }
    let revised = per_period
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(p, _)| *p)
        .max()
        .unwrap()
        .to_owned();
    clock
        .as_sim()
        .unwrap()
        .advance(std::time::Duration::from_secs(800 * 86_400));
    let (_, _, later) = get(&url, &key).await;
    let kept = later["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["period"] == revised.as_str())
        .count();
    assert_eq!(kept, 1, "old vintages of {revised} are no longer served");
}

#[tokio::test]
async fn geo_routes_validate_layers() {
    let emu = emulator_with(&frozen_clock(), PlanLimits::build()).await;
    let key = [("X-API-KEY", TEST_KEY)];
    let base = emu.base_url();
    let (s, _, layers) = get(&format!("{base}/api/v1/geo/layers"), &key).await;
    assert_eq!(s, StatusCode::OK);
    let first = layers["layers"][0]["code"].as_str().unwrap().to_owned();
    assert!(layers["layers"][0]["reviewedAssets"].as_u64().unwrap() > 0);
    assert_eq!(
        get(&format!("{base}/api/v1/geo/countries"), &key).await.0,
        StatusCode::BAD_REQUEST
    );
    let bad = format!("{base}/api/v1/geo/countries?layers={first},nope");
    assert_eq!(get(&bad, &key).await.0, StatusCode::BAD_REQUEST);
    let (s, _, counts) = get(&format!("{base}/api/v1/geo/countries?layers={first}"), &key).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(counts["layers"][0], first.as_str());
    let row = &counts["countries"][0];
    assert!(row["country"].as_str().unwrap().len() == 2 && row["count"].as_u64().unwrap() > 0);
    assert_eq!(row["layer"], first.as_str());
}

#[tokio::test]
async fn company_document_routes_follow_the_wire_contract() {
    let emu = emulator_with(&frozen_clock(), PlanLimits::build()).await;
    let key = [("X-API-KEY", TEST_KEY)];
    let base = emu.base_url();

    let (s, _, reg) = get(&format!("{base}/api/v1/companies/AAPL/regulation"), &key).await;
    assert_eq!(s, StatusCode::OK);
    let strength = |b: &str| {
        ["named", "company_cited", "sector"]
            .iter()
            .position(|x| *x == b)
            .unwrap()
    };
    for action in reg["executiveActions"].as_array().unwrap() {
        let bases: Vec<usize> = action["links"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| strength(l["basis"].as_str().unwrap()))
            .collect();
        assert!(
            bases.windows(2).all(|w| w[0] < w[1]),
            "links strongest first: {bases:?}"
        );
    }
    assert_eq!(reg["coverage"]["pilot"], true);

    assert_eq!(
        get(&format!("{base}/api/v1/companies/MSFT/monthly-revenue"), &key)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    let (s, _, rev) = get(&format!("{base}/api/v1/companies/TW%3A2330/monthly-revenue"), &key).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(rev["months"][0]["month"], "2026-10", "newest month filed by 2026-11-25");
    assert!(rev["licence"].is_string());

    let (s, _, notes) = get(&format!("{base}/api/v1/companies/MSFT/filing-notes"), &key).await;
    assert_eq!(s, StatusCode::OK);
    let filings = notes["filings"].as_array().unwrap();
    assert!(
        filings
            .windows(2)
            .all(|w| w[0]["filedAt"].as_str() > w[1]["filedAt"].as_str()),
        "newest first"
    );
    let accession = filings[0]["accession"].as_str().unwrap();
    let section = filings[0]["sections"][0]["key"].as_str().unwrap();
    let chars = filings[0]["sections"][0]["chars"].as_u64().unwrap();
    let url = format!("{base}/api/v1/companies/MSFT/filing-notes/{accession}/{section}");
    let (s, _, text) = get(&url, &key).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(text["text"].as_str().unwrap().len() as u64, chars);
    assert_eq!(get(&url, &key).await.2, text, "section text never changes");
    let malformed = format!("{base}/api/v1/companies/MSFT/filing-notes/0000789019-26/{section}");
    assert_eq!(get(&malformed, &key).await.0, StatusCode::BAD_REQUEST);
    let missing = format!("{base}/api/v1/companies/MSFT/filing-notes/{accession}/no_such_section");
    assert_eq!(get(&missing, &key).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_8k_routes_follow_the_wire_contract() {
    let clock = frozen_clock();
    let emu = emulator_with(&clock, PlanLimits::build()).await;
    let key = [("X-API-KEY", TEST_KEY)];
    let base = emu.base_url();
    for bad in ["limit=0", "limit=501", "limit=x"] {
        let url = format!("{base}/api/v1/companies/AAPL/events?{bad}");
        assert_eq!(get(&url, &key).await.0, StatusCode::BAD_REQUEST, "{bad}");
    }
    let (s, _, all) = get(&format!("{base}/api/v1/companies/AAPL/events"), &key).await;
    assert_eq!(s, StatusCode::OK);
    let events = all["events"].as_array().unwrap();
    assert!(events.len() > 100, "whole history without limit: {}", events.len());
    assert!(
        events
            .windows(2)
            .all(|w| w[0]["acceptedAt"].as_str() >= w[1]["acceptedAt"].as_str()),
        "newest first"
    );
    let (_, _, two) = get(&format!("{base}/api/v1/companies/AAPL/events?limit=2"), &key).await;
    assert_eq!(two["events"].as_array().unwrap()[..], events[..2]);

    // Item text: a coded filing needs item=, lists its items when it is missing.
    let coded = events
        .iter()
        .find(|e| e["items"].as_array().unwrap().len() > 1)
        .unwrap();
    let accession = coded["accession"].as_str().unwrap();
    let url = format!("{base}/api/v1/companies/AAPL/events/{accession}");
    let (s, _, body) = get(&url, &key).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(body["items"], coded["items"]);
    let item = coded["items"][0].as_str().unwrap();
    let r = reqwest::Client::new()
        .get(format!("{url}?item={item}"))
        .header("X-API-KEY", TEST_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    assert!(r.text().await.unwrap().starts_with(&format!("Item {item}")));
    assert_eq!(get(&format!("{url}?item=9.99"), &key).await.0, StatusCode::NOT_FOUND);
    let malformed = format!("{base}/api/v1/companies/AAPL/events/0000320193-26");
    assert_eq!(get(&malformed, &key).await.0, StatusCode::BAD_REQUEST);
    if let Some(uncoded) = events.iter().find(|e| e["items"].as_array().unwrap().is_empty()) {
        let url = format!(
            "{base}/api/v1/companies/AAPL/events/{}",
            uncoded["accession"].as_str().unwrap()
        );
        let r = reqwest::Client::new()
            .get(url)
            .header("X-API-KEY", TEST_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "the uncoded item needs no item=");
    }

    // The wire: validation, counts, windows.
    for bad in ["sort=up", "limit=201", "offset=-1", "family=weather", "from=2026-13-01"] {
        assert_eq!(
            get(&format!("{base}/api/v1/events/wire?{bad}"), &key).await.0,
            StatusCode::BAD_REQUEST,
            "{bad}"
        );
    }
    let window = format!("{base}/api/v1/events/wire?from=2026-11-02&to=2026-11-04&sort=oldest&limit=200&counts=1");
    let (s, _, wire) = get(&window, &key).await;
    assert_eq!(s, StatusCode::OK);
    let rows = wire["events"].as_array().unwrap();
    assert_eq!(wire["total"].as_u64().unwrap() as usize, rows.len());
    assert!(
        rows.iter()
            .all(|e| ("2026-11-02".."2026-11-05").contains(&e["filingDate"].as_str().unwrap()))
    );
    assert!(
        rows.windows(2)
            .all(|w| w[0]["acceptedAt"].as_str() <= w[1]["acceptedAt"].as_str()),
        "oldest first"
    );
    let tally: u64 = wire["counts"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(tally as usize, rows.len());
    assert!(rows[0]["cik"].is_string() && rows[0]["name"].is_string());

    // New filings arrive at the head: plain offset paging repeats rows, and the
    // newest filing's headline is gated, then appears.
    let page = |offset: usize| format!("{base}/api/v1/events/wire?limit=5&offset={offset}");
    let (_, _, first) = get(&page(0), &key).await;
    clock
        .as_sim()
        .unwrap()
        .advance(std::time::Duration::from_secs(3 * 3600));
    let (_, _, second) = get(&page(5), &key).await;
    let seen: Vec<&Value> = first["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["accession"])
        .collect();
    assert!(
        second["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| seen.contains(&&e["accession"])),
        "offset paging over a moving head repeats rows"
    );
    assert!(second["total"].as_u64() > first["total"].as_u64());
    let (_, _, latest) = get(&format!("{base}/api/v1/events/latest"), &key).await;
    let latest = latest["events"].as_array().unwrap();
    assert_eq!(latest.len(), 30);
    assert!(
        latest[0]["headline"].is_null(),
        "a filing this minute is not past the gate yet"
    );
    let accession = latest[0]["accession"].clone();
    clock
        .as_sim()
        .unwrap()
        .advance(std::time::Duration::from_secs(6 * 3600));
    let (_, _, later) = get(&format!("{base}/api/v1/events/latest?limit=100"), &key).await;
    let same = later["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["accession"] == accession)
        .unwrap();
    assert!(same["headline"].is_string(), "the headline passed the gate later");
    assert_eq!(
        get(&format!("{base}/api/v1/events/latest?limit=101"), &key).await.0,
        StatusCode::BAD_REQUEST
    );
}

fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn the_news_feed_follows_every_cursor_rule() {
    let clock = frozen_clock();
    let emu = emulator_with(&clock, PlanLimits::build()).await;
    let key = [("X-API-KEY", TEST_KEY)];
    let feed = format!("{}/api/v1/news/feed", emu.base_url());
    for bad in [
        "limit=0",
        "limit=201",
        "after=42",
        "changedSince=2026-11-25T00:00:00Z",
        "minImportance=101",
        "flash=yes",
    ] {
        assert_eq!(
            get(&format!("{feed}?{bad}"), &key).await.0,
            StatusCode::BAD_REQUEST,
            "{bad}"
        );
    }

    // No cursor: newest first; `before` pages back without a gap or an overlap.
    let (s, _, newest) = get(&feed, &key).await;
    assert_eq!(s, StatusCode::OK);
    let first = ids(&newest);
    assert_eq!(first.len(), 100);
    assert!(first.windows(2).all(|w| w[0] > w[1]));
    assert_eq!(newest["latestId"], first[0].as_str());
    let cursor = newest["nextCursor"].as_str().unwrap();
    let (_, _, older) = get(&format!("{feed}?before={cursor}&limit=50"), &key).await;
    let second = ids(&older);
    let n = |id: &str| id[2..].parse::<u64>().unwrap();
    assert_eq!(n(&second[0]) + 1, n(first.last().unwrap()), "contiguous");
    assert!(newest["serverTime"].is_string());

    // Forward polling while items keep arriving: every id exactly once, in order.
    let mut latest = newest["latestId"].as_str().unwrap().to_owned();
    let mut seen: Vec<u64> = vec![n(&latest)];
    let mut rewritten = Vec::new();
    let mut since = newest["serverTime"].as_str().unwrap().to_owned();
    for _ in 0..12 {
        clock.as_sim().unwrap().advance(std::time::Duration::from_secs(20 * 60));
        loop {
            let url = format!("{feed}?after={latest}&changedSince={since}&limit=7");
            let (_, _, page) = get(&url, &key).await;
            for item in page["items"].as_array().unwrap() {
                if item["rewritten"] == true {
                    assert!(n(item["id"].as_str().unwrap()) <= n(&latest));
                    assert!(item["headline"].as_str().unwrap().ends_with("(updated)"));
                    rewritten.push(item["id"].as_str().unwrap().to_owned());
                } else {
                    seen.push(n(item["id"].as_str().unwrap()));
                }
            }
            latest = page["latestId"].as_str().unwrap().to_owned();
            since = page["serverTime"].as_str().unwrap().to_owned();
            if page["hasMore"] == false {
                break;
            }
        }
    }
    assert!(seen.windows(2).all(|w| w[1] == w[0] + 1), "no item skipped or repeated");
    assert!(seen.len() > 300, "{}", seen.len());
    assert!(!rewritten.is_empty(), "rewrites arrive through changedSince");
    let mut unique = rewritten.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), rewritten.len(), "each rewrite is reported once");

    // Withheld fields are absent, never empty.
    for item in newest["items"].as_array().unwrap() {
        let licence = item["source"]["licenceClass"].as_str().unwrap();
        assert_eq!(item.get("snippet").is_some(), licence != "headline_only", "{item}");
        assert_eq!(item.get("body").is_some(), licence == "full_text", "{item}");
        assert!(item.as_object().unwrap().values().all(|v| v != ""), "{item}");
    }

    // Company news includes items tagged to a predecessor in the lineage.
    let (s, _, meta) = get(
        &format!("{}/api/v1/companies/META/news?limit=200", emu.base_url()),
        &key,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let ciks: Vec<&str> = meta["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["ciks"][0].as_str().unwrap())
        .collect();
    assert!(ciks.contains(&"0001326800") && ciks.contains(&"0001326801"), "{ciks:?}");

    // One item with its storyline; topics and sources.
    let (s, _, one) = get(&format!("{}/api/v1/news/items/{}", emu.base_url(), first[3]), &key).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        one["storyline"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["storylineId"] == one["item"]["storylineId"])
    );
    let missing = format!("{}/api/v1/news/items/n_9999999999", emu.base_url());
    assert_eq!(get(&missing, &key).await.0, StatusCode::NOT_FOUND);
    let (_, _, sources) = get(&format!("{}/api/v1/news/sources", emu.base_url()), &key).await;
    assert!(
        sources["sources"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["count24h"].as_u64().unwrap() > 0)
    );
    let (_, _, topics) = get(&format!("{}/api/v1/news/topics", emu.base_url()), &key).await;
    assert!(
        topics["topics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["parent"].is_null())
    );
}

#[tokio::test]
async fn news_search_and_top() {
    let emu = emulator_with(&frozen_clock(), PlanLimits::build()).await;
    let key = [("X-API-KEY", TEST_KEY)];
    let base = emu.base_url();
    assert_eq!(
        get(&format!("{base}/api/v1/news/search"), &key).await.0,
        StatusCode::BAD_REQUEST
    );
    let (s, _, found) = get(&format!("{base}/api/v1/news/search?q=microsoft&limit=20"), &key).await;
    assert_eq!(s, StatusCode::OK);
    let items = found["items"].as_array().unwrap();
    assert_eq!(items.len(), 20);
    assert!(
        items
            .iter()
            .all(|i| i["headline"].as_str().unwrap().to_lowercase().contains("microsoft"))
    );
    assert_eq!(
        get(&format!("{base}/api/v1/news/top?window=1h"), &key).await.0,
        StatusCode::BAD_REQUEST
    );
    let (s, _, top) = get(&format!("{base}/api/v1/news/top"), &key).await;
    assert_eq!((s, top["window"].as_str()), (StatusCode::OK, Some("24h")));
    let items = top["items"].as_array().unwrap();
    assert_eq!(items.len(), 30);
    let importance: Vec<u64> = items.iter().map(|i| i["importance"].as_u64().unwrap()).collect();
    assert!(importance.windows(2).all(|w| w[0] >= w[1]), "ranked by importance");
    let mut stories: Vec<&str> = items.iter().map(|i| i["storylineId"].as_str().unwrap()).collect();
    stories.sort();
    stories.dedup();
    assert_eq!(stories.len(), 30, "one item per storyline");
}

#[tokio::test]
async fn the_stream_sends_items_frames_and_pings_then_closes() {
    let clock = frozen_clock();
    let config = fdsync_emulator::EmulatorConfig {
        clock: clock.clone(),
        accounts: vec![fdsync_emulator::Account::new(
            "t",
            PlanLimits::build(),
            vec![TEST_KEY.into()],
        )],
        stream: fdsync_emulator::StreamTiming {
            ping: std::time::Duration::from_millis(100),
            close_after: std::time::Duration::from_millis(1500),
            poll: std::time::Duration::from_millis(20),
        },
        ..Default::default()
    };
    let emu = fdsync_emulator::spawn(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let key = [("X-API-KEY", TEST_KEY)];
    let (_, _, head) = get(&format!("{}/api/v1/news/feed?limit=1", emu.base_url()), &key).await;
    let after = head["latestId"].as_str().unwrap().to_owned();
    let bad = format!("{}/api/v1/news/stream?after=oops", emu.base_url());
    assert_eq!(get(&bad, &key).await.0, StatusCode::BAD_REQUEST);

    let response = reqwest::Client::new()
        .get(format!("{}/api/v1/news/stream?after={after}", emu.base_url()))
        .header("X-API-KEY", TEST_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    // Ten simulated minutes of news arrive while the stream is open.
    clock.as_sim().unwrap().advance(std::time::Duration::from_secs(600));
    let mut text = String::new();
    let mut response = response;
    while let Some(chunk) = response.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        text.contains(": ping"),
        "pings are sent: {}",
        &text[..text.len().min(400)]
    );
    let mut streamed: Vec<String> = Vec::new();
    for frame in text.split("\n\n").filter(|f| f.starts_with("event: items")) {
        let data = frame.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        let page: Value = serde_json::from_str(data).unwrap();
        let fresh = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["rewritten"] != true);
        streamed.extend(fresh.map(|i| i["id"].as_str().unwrap().to_owned()));
    }
    let (_, _, expected) = get(
        &format!("{}/api/v1/news/feed?after={after}&limit=200", emu.base_url()),
        &key,
    )
    .await;
    assert!(!streamed.is_empty());
    assert_eq!(streamed, ids(&expected), "every new item once, in order");
}

/// Every route of spec section 4: 200 with a key and both header forms on it,
/// 401 without one (public routes excepted), 404 for an unknown company, and
/// the 429 forms, so a route added without its gate or headers fails here.
#[tokio::test]
async fn every_route_answers_with_its_statuses_and_headers() {
    let mut config = crate::util::emulator_config(&frozen_clock(), PlanLimits::build());
    config.header_form = fdsync_emulator::HeaderForm::Both;
    let emu = crate::util::spawn(config).await;
    let key = [("X-API-KEY", TEST_KEY)];
    let base = emu.base_url();

    // Ids that exist, taken from the routes that list them.
    let (_, _, events) = get(&format!("{base}/api/v1/companies/AAPL/events"), &key).await;
    let single = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["items"].as_array().unwrap().len() == 1)
        .unwrap();
    let event_text = format!(
        "/api/v1/companies/AAPL/events/{}?item={}",
        single["accession"].as_str().unwrap(),
        single["items"][0].as_str().unwrap()
    );
    let (_, _, notes) = get(&format!("{base}/api/v1/companies/MSFT/filing-notes"), &key).await;
    let section_text = format!(
        "/api/v1/companies/MSFT/filing-notes/{}/{}",
        notes["filings"][0]["accession"].as_str().unwrap(),
        notes["filings"][0]["sections"][0]["key"].as_str().unwrap()
    );
    let (_, _, feed) = get(&format!("{base}/api/v1/news/feed?limit=1"), &key).await;
    let news_item = format!("/api/v1/news/items/{}", feed["items"][0]["id"].as_str().unwrap());
    let (_, _, country) = get(&format!("{base}/api/v1/countries/US"), &key).await;
    let series = format!(
        "/api/v1/countries/US/series?key={}",
        country["macroSeries"][0]["key"].as_str().unwrap()
    );
    let (_, _, layers) = get(&format!("{base}/api/v1/geo/layers"), &key).await;
    let geo = format!(
        "/api/v1/geo/countries?layers={}",
        layers["layers"][0]["code"].as_str().unwrap()
    );

    let keyed: Vec<String> = [
        "/api/v1/companies/AAPL",
        "/api/v1/companies/AAPL/prices?range=1M",
        "/api/v1/companies/AAPL/dividends",
        "/api/v1/companies/AAPL/regulation",
        "/api/v1/companies/TW%3A2330/monthly-revenue",
        "/api/v1/companies/MSFT/filing-notes",
        &section_text,
        "/api/v1/companies/AAPL/events?limit=3",
        &event_text,
        "/api/v1/events/wire?limit=3&counts=1",
        "/api/v1/events/latest?limit=3",
        "/api/v1/news/feed?limit=3",
        "/api/v1/companies/META/news?limit=3",
        &news_item,
        "/api/v1/news/search?q=results&limit=3",
        "/api/v1/news/top?window=6h",
        "/api/v1/news/topics",
        "/api/v1/news/sources",
        "/api/v1/indices",
        "/api/v1/countries/US",
        &series,
        "/api/v1/geo/layers",
        &geo,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let http = reqwest::Client::new();
    for route in &keyed {
        let url = format!("{base}{route}");
        let r = http.get(&url).header("X-API-KEY", TEST_KEY).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{route}");
        let h = r.headers();
        for name in [
            "ratelimit-limit",
            "ratelimit-remaining",
            "ratelimit-reset",
            "ratelimit-policy",
            "ratelimit",
            "x-quota-limit",
            "x-quota-remaining",
            "x-quota-window",
            "x-quota-reset",
        ] {
            assert!(h.contains_key(name), "{route}: no {name}");
        }
        assert_eq!(h["ratelimit-policy"], "\"minute\";q=300;w=60", "{route}");
        assert_eq!(h["x-quota-window"], "month", "{route}");
        let content_type = h["content-type"].to_str().unwrap().to_owned();
        let expected = if route.contains("/events/0") {
            "text/plain"
        } else {
            "application/json"
        };
        assert!(content_type.starts_with(expected), "{route}: {content_type}");

        let (s, h, body) = get(&url, &[]).await;
        assert_eq!(
            (s, body["code"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("unauthenticated")),
            "{route}"
        );
        assert!(body["error"].is_string(), "{route}: error body");
        assert!(
            !h.contains_key("x-quota-remaining"),
            "{route}: a refused caller learns no quota"
        );
    }
    // The stream is keyed too.
    assert_eq!(
        get(&format!("{base}/api/v1/news/stream"), &[]).await.0,
        StatusCode::UNAUTHORIZED
    );

    // Every per-company route: 404 for an unknown company, with the error body.
    for route in [
        "",
        "/prices",
        "/dividends",
        "/regulation",
        "/monthly-revenue",
        "/filing-notes",
        "/events",
        "/news",
    ] {
        let (s, _, body) = get(&format!("{base}/api/v1/companies/NOPE{route}"), &key).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{route}");
        assert!(body["error"].as_str().unwrap().contains("NOPE"), "{route}: {body}");
    }
    // Unknown ids below a company, and unknown routes.
    for route in [
        "/api/v1/news/items/n_9999999999",
        "/api/v1/countries/ZZ",
        "/api/v1/countries/US/series?key=NO_SUCH_SERIES",
        "/api/v1/no-such-route",
    ] {
        assert_eq!(
            get(&format!("{base}{route}"), &key).await.0,
            StatusCode::NOT_FOUND,
            "{route}"
        );
    }
    // Malformed parameters: 400 with a message naming the value.
    for (route, named) in [
        ("/api/v1/companies/AAPL/prices?range=2W", "2W"),
        ("/api/v1/news/feed?limit=0", "limit"),
        ("/api/v1/news/feed?minImportance=101", "minImportance"),
        ("/api/v1/news/search", "q"),
        ("/api/v1/news/top?window=1h", "1h"),
        ("/api/v1/events/latest?limit=101", "limit"),
        ("/api/v1/countries/US/series?key=cpi-yoy", "cpi-yoy"),
        ("/api/v1/countries/usa", "usa"),
        ("/api/v1/geo/countries", "layers"),
        ("/api/v1/geo/countries?layers=nope", "nope"),
    ] {
        let (s, _, body) = get(&format!("{base}{route}"), &key).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{route}");
        let message = body["error"].as_str().unwrap_or_default();
        assert!(message.contains(named), "{route}: {message:?} does not name {named}");
    }
    // Public routes need no key and still carry the per-minute headers.
    for route in [
        "/health",
        "/api/v1/landing/coverage",
        "/.well-known/oauth-protected-resource/api/mcp",
    ] {
        let (s, h, _) = get(&format!("{base}{route}"), &[]).await;
        assert_eq!(s, StatusCode::OK, "{route}");
        assert!(
            h.contains_key("ratelimit-policy") && h.contains_key("ratelimit-limit"),
            "{route}"
        );
    }
}

/// Same seed and clock, same bytes; another seed, another world.
#[tokio::test]
async fn the_world_is_determined_by_its_seed_and_clock() {
    let clock = frozen_clock();
    let seeded = |seed: u64| {
        let mut config = crate::util::emulator_config(&clock, PlanLimits::build());
        config.seed = seed;
        config.generated_companies = 5000;
        crate::util::spawn(config)
    };
    let (a, b, other) = (seeded(7).await, seeded(7).await, seeded(8).await);
    let http = reqwest::Client::new();
    let body = |base: String, route: &'static str| {
        let http = http.clone();
        async move {
            let r = http
                .get(format!("{base}{route}"))
                .header("X-API-KEY", TEST_KEY)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{route}");
            r.bytes().await.unwrap()
        }
    };
    for route in [
        "/api/v1/companies/S4999",
        "/api/v1/companies/S4999/prices?range=ALL",
        "/api/v1/companies/AAPL/dividends",
        "/api/v1/events/wire?limit=200",
        "/api/v1/news/feed?limit=200",
        "/api/v1/countries/US/series?key=CPI_YOY",
    ] {
        let first = body(a.base_url(), route).await;
        assert_eq!(first, body(b.base_url(), route).await, "{route}");
        // Identities and macro definitions are fixed; the generated data is not.
        if route.contains("prices") || route.contains("wire") || route.contains("feed") {
            assert_ne!(first, body(other.base_url(), route).await, "{route}: the seed matters");
        }
    }
}

/// Bodies are gzipped for a caller that accepts it, and the stream is not.
#[tokio::test]
async fn responses_are_compressed_when_the_caller_accepts_it() {
    let emu = emulator_with(&frozen_clock(), PlanLimits::build()).await;
    let raw = reqwest::Client::builder().no_gzip().build().unwrap();
    let url = format!("{}/api/v1/companies/MSFT/prices?range=ALL", emu.base_url());
    let plain = raw.get(&url).header("X-API-KEY", TEST_KEY).send().await.unwrap();
    assert!(plain.headers().get("content-encoding").is_none());
    let plain_len = plain.bytes().await.unwrap().len();
    let gzipped = raw
        .get(&url)
        .header("X-API-KEY", TEST_KEY)
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(gzipped.headers()["content-encoding"], "gzip");
    assert!(
        gzipped.headers().contains_key("ratelimit-limit"),
        "limit headers survive compression"
    );
    let gzipped_len = gzipped.bytes().await.unwrap().len();
    // About 2.8x at the emulator's level 2; the exact ratio depends on flate2's backend.
    assert!(gzipped_len * 2 < plain_len, "{gzipped_len} vs {plain_len}");

    let stream = raw
        .get(format!("{}/api/v1/news/stream", emu.base_url()))
        .header("X-API-KEY", TEST_KEY)
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert!(
        stream.headers().get("content-encoding").is_none(),
        "SSE frames are never held back"
    );
}
