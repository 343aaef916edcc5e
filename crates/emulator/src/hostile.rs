//! Hostile behaviours the emulator can switch on: what a broken or
//! compromised upstream may send, so the tests can hold fdsync to its bounds.
//! Off by default; `fdsync emulator --hostile SPEC` or `PUT /admin/hostile`.

use super::*;

/// What the data routes do wrong, each on or off.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hostile {
    /// Every data route answers `302 Found` to this URL.
    pub redirect_to: Option<String>,
    /// Limit and quota headers no service would send: a window reset 10^13 s
    /// away with nothing left in it, a quota reset in the year 9999, counts at
    /// the largest integers.
    pub absurd_headers: bool,
    /// The news feed says more follows without moving its cursors, and the
    /// events wire serves its first page whatever the offset.
    pub stuck_cursors: bool,
    /// The indices route answers a gzip body that decodes to gigabytes.
    pub huge_body: bool,
    /// The news stream opens a frame that never ends.
    pub endless_frame: bool,
}

impl Hostile {
    /// `redirect=URL,absurd_headers,stuck_cursors,huge_body,endless_frame`, any of them.
    pub fn parse(spec: &str) -> Result<Hostile, String> {
        let mut h = Hostile::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.split_once('=') {
                Some(("redirect", url)) => h.redirect_to = Some(url.to_owned()),
                None if part == "absurd_headers" => h.absurd_headers = true,
                None if part == "stuck_cursors" => h.stuck_cursors = true,
                None if part == "huge_body" => h.huge_body = true,
                None if part == "endless_frame" => h.endless_frame = true,
                _ => {
                    return Err(format!(
                        "{part:?}: use redirect=URL, absurd_headers, stuck_cursors, huge_body or endless_frame"
                    ));
                }
            }
        }
        Ok(h)
    }
}

/// Decoded size of the huge body, past any limit a client should have.
const HUGE_BODY_BYTES: u64 = 8 << 30;

/// Applies the switched-on behaviours around a data route (outside its
/// limits, so that headers set there are overwritten).
pub(super) async fn hostile(State(state): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let h = state.hostile.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if h == Hostile::default() {
        return next.run(req).await;
    }
    let path = req.uri().path().to_owned();
    let query: HashMap<String, String> = req
        .uri()
        .query()
        .map(|q| url::form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    // Answered here, before the limits: counted here.
    let own = if let Some(to) = &h.redirect_to {
        Some((StatusCode::FOUND, [(axum::http::header::LOCATION, to.clone())]).into_response())
    } else if h.huge_body && path == "/api/v1/indices" {
        Some(gzip_bomb())
    } else if h.endless_frame && path == "/api/v1/news/stream" {
        Some(endless_frame())
    } else {
        None
    };
    if let Some(response) = own {
        gate::record_status(&state, response.status());
        return response;
    }
    if h.stuck_cursors && path == "/api/v1/events/wire" {
        let mut asked = query.clone();
        asked.insert("offset".into(), "0".into());
        let rewritten: String = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(asked.iter())
            .finish();
        if let Ok(uri) = format!("{path}?{rewritten}").parse() {
            *req.uri_mut() = uri;
        }
    }
    let mut response = next.run(req).await;
    if h.stuck_cursors && response.status().is_success() {
        response = gate::rewrite_json(response, |page| {
            if path == "/api/v1/news/feed" {
                if let Some(after) = query.get("after") {
                    page["latestId"] = json!(after);
                    page["hasMore"] = json!(true);
                }
                if let Some(before) = query.get("before") {
                    page["nextCursor"] = json!(before);
                    page["hasMore"] = json!(true);
                }
            }
            if path == "/api/v1/events/wire" {
                page["total"] = json!(1_000_000_000u64);
            }
        })
        .await;
    }
    if h.absurd_headers {
        let headers = response.headers_mut();
        for (name, value) in [
            ("ratelimit-limit", "4294967295"),
            ("ratelimit-remaining", "0"),
            ("ratelimit-reset", "10000000000000"),
            ("ratelimit-policy", "\"minute\";q=4294967295;w=10000000000000"),
            ("ratelimit", "\"minute\";r=0;t=10000000000000"),
            ("x-quota-limit", "18446744073709551615"),
            ("x-quota-remaining", "18446744073709551615"),
            ("x-quota-window", "month"),
            ("x-quota-reset", "9999-12-31T23:59:59Z"),
            ("x-credits-remaining-usd", "1e308"),
            ("retry-after", "99999999999999"),
        ] {
            headers.insert(HeaderName::from_static(name), HeaderValue::from_static(value));
        }
    }
    response
}

/// `{"indices":[` and then spaces, gzipped as it is sent: a few MiB on the
/// wire for gigabytes decoded. Generated only as fast as it is read.
fn gzip_bomb() -> Response {
    use std::io::Write;
    let blank = vec![b' '; 1 << 20];
    let encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let chunks = futures::stream::unfold((encoder, 0u64), move |(mut encoder, written)| {
        let blank = blank.clone();
        async move {
            if written >= HUGE_BODY_BYTES {
                return None;
            }
            let input: &[u8] = if written == 0 { b"{\"indices\":[" } else { &blank };
            encoder.write_all(input).ok()?;
            encoder.flush().ok()?;
            let out = std::mem::take(encoder.get_mut());
            Some((
                Ok::<_, std::io::Error>(bytes::Bytes::from(out)),
                (encoder, written + input.len() as u64),
            ))
        }
    });
    let mut response = Response::new(axum::body::Body::from_stream(chunks));
    let headers = response.headers_mut();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(axum::http::header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    response
}

/// An `items` frame whose data line never ends.
fn endless_frame() -> Response {
    let blank = bytes::Bytes::from(vec![b' '; 1 << 16]);
    use futures::StreamExt;
    let start = futures::stream::once(async {
        Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"event: items\ndata: {\"items\":["))
    });
    let rest = futures::stream::repeat_with(move || Ok(blank.clone())).take((HUGE_BODY_BYTES >> 16) as usize);
    let mut response = Response::new(axum::body::Body::from_stream(start.chain(rest)));
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}
