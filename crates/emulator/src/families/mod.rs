//! The route families. Each module adds its data routes and names the
//! families the quirks act on: the paths each answers and the record list its
//! bodies carry. A new family is one module here and a line in the crate's
//! `FAMILIES`.

use crate::*;

pub(crate) mod account;
pub(crate) mod companies;
pub(crate) mod events;
pub(crate) mod geo;
pub(crate) mod market;
pub(crate) mod news;

/// A family module: what it adds to the data router, and the names the
/// quirks give its routes.
pub(crate) struct Family {
    pub(crate) routes: fn(DataRouter) -> DataRouter,
    pub(crate) named: &'static [Named],
}

/// A route family as the quirks name it (`rename=prices`,
/// `unserved=events@COMPANY`).
#[derive(Debug)]
pub struct Named {
    pub name: &'static str,
    /// The paths it answers as they are routed; a `{..}` segment is any one segment.
    pub paths: &'static [&'static str],
    /// The record list its bodies carry, which `rename` and `null` act on.
    pub list: Option<&'static str>,
    /// The list inside each of those records, which `rename_inner` acts on.
    pub inner: Option<&'static str>,
}

impl Named {
    const fn other(name: &'static str, paths: &'static [&'static str]) -> Named {
        Named {
            name,
            paths,
            list: None,
            inner: None,
        }
    }

    const fn list(name: &'static str, paths: &'static [&'static str], list: &'static str) -> Named {
        Named {
            name,
            paths,
            list: Some(list),
            inner: None,
        }
    }

    const fn inner(self, inner: &'static str) -> Named {
        Named {
            inner: Some(inner),
            ..self
        }
    }

    /// Whether `path` is one of this family's routes.
    fn answers(&self, path: &str) -> bool {
        self.paths.iter().any(|pattern| {
            let (mut want, mut got) = (pattern.split('/'), path.split('/'));
            loop {
                match (want.next(), got.next()) {
                    (None, None) => return true,
                    (Some(w), Some(g)) if w == g || (w.starts_with('{') && !g.is_empty()) => {}
                    _ => return false,
                }
            }
        })
    }
}

/// Every named route family, in the order the crate lists its modules.
pub fn named() -> impl Iterator<Item = &'static Named> {
    FAMILIES.iter().flat_map(|f| f.named)
}

/// The named family a data path belongs to.
pub(crate) fn family_of(path: &str) -> Option<&'static Named> {
    named().find(|n| n.answers(path))
}

pub(crate) fn base_url(headers: &HeaderMap) -> String {
    let host = headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1");
    format!("http://{host}")
}

pub(crate) fn company_or_404(state: &AppState, id: &str) -> Result<world::CompanyProfile, ApiError> {
    state
        .world
        .resolve(id)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("unknown company '{id}'")))
}

pub(crate) fn bad_request(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, message)
}

/// An integer query parameter within `lo..=hi`, or `default` when absent.
pub(crate) fn int_param(
    query: &HashMap<String, String>,
    name: &str,
    lo: u64,
    hi: u64,
    default: Option<u64>,
) -> Result<Option<u64>, ApiError> {
    match query.get(name) {
        None => Ok(default),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
            _ => Err(bad_request(format!(
                "invalid {name} '{v}': an integer from {lo} to {hi}"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// The status and, for a 404, the body of `GET path` with the build key.
    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-KEY: {DEMO_BUILD_KEY}\r\nConnection: close\r\n\r\n"
        );
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut head = vec![0u8; 12];
        tcp.read_exact(&mut head).await.unwrap();
        let status: u16 = String::from_utf8_lossy(&head[9..12]).parse().unwrap();
        let mut rest = String::new();
        // Only a 404 is read to its end: a stream's body does not end.
        if status == 404 {
            tcp.read_to_string(&mut rest).await.unwrap();
        }
        (status, rest)
    }

    /// Each named path, its `{..}` segments filled in, is named by exactly
    /// one family and answered by a route of its own, not the fallback.
    #[tokio::test]
    async fn every_named_path_is_routed_and_named_once() {
        let running = crate::spawn(EmulatorConfig::default(), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        for family in named() {
            for pattern in family.paths {
                let path = pattern
                    .replace("{id}", "MSFT")
                    .replace("{iso}", "US")
                    .replace("{accession}", "0000789019-26-000001")
                    .replace("{section}", "revenue");
                let naming: Vec<&str> = named().filter(|n| n.answers(&path)).map(|n| n.name).collect();
                assert_eq!(naming, [family.name], "{path}");
                let (status, body) = get(running.addr, &path).await;
                assert!(
                    !body.contains("no such route"),
                    "{path} ({}) is not routed: {status} {body}",
                    family.name
                );
            }
        }
        assert_eq!(
            family_of("/api/v1/companies/MSFT/events/0000789019-26-000001").map(|n| n.name),
            Some("item_text")
        );
        assert!(family_of("/api/v1/nowhere").is_none());
        assert!(family_of("/api/v1/companies//events").is_none());
    }
}
