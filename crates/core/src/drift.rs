//! Drift: fields the service sends that no column holds. They stay in each
//! row's `raw`, but nobody would learn a column is missing, so the first
//! record of each kind in a response is read once more, noting every field
//! its row type ignored, for `_sync_unknown_fields`, `status` and `check`.

use serde::de::DeserializeOwned;

/// A field a record carried that its row type does not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownField {
    /// The route as a template (`/api/v1/companies/{id}/prices`): one row per
    /// route, not per company.
    pub route: String,
    /// The field's path in the record (`a.b` inside an object).
    pub field: String,
    /// The value as served, cut to [`EXAMPLE_CHARS`] characters.
    pub example: String,
}

/// How much of an example value is kept.
pub const EXAMPLE_CHARS: usize = 200;

/// The fields of `text` (one record) that reading it as `T` ignores, found
/// on `route`. Nothing when the record does not read: it is quarantined, or
/// read without its unusable fields, elsewhere.
pub fn unknown_fields<T: DeserializeOwned>(text: &str, route: &str) -> Vec<UnknownField> {
    let mut ignored = Vec::new();
    let read: Result<T, _> = serde_ignored::deserialize(&mut serde_json::Deserializer::from_str(text), |path| {
        ignored.push(path.to_string());
    });
    if read.is_err() || ignored.is_empty() {
        return Vec::new();
    }
    let record: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    let route = route_template(route);
    let mut found: Vec<UnknownField> = Vec::new();
    for path in ignored {
        let (field, value) = field_at(&record, &path);
        if found.iter().any(|f| f.field == field) {
            continue;
        }
        found.push(UnknownField {
            route: route.clone(),
            field,
            example: value.map(example).unwrap_or_default(),
        });
    }
    found
}

/// A field of an envelope (the body's own, around its record lists) that
/// reading it ignored, with its value as served whole (JSON text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeField {
    pub unknown: UnknownField,
    pub value: String,
}

/// The envelope fields of `body` at the `ignored` paths (as serde_ignored
/// names them), each named from the body's root (`$.ref`). The body is read
/// again only here, when the envelope carried something no reader reads.
pub fn envelope_fields(ignored: &[String], body: &[u8], route: &str) -> Vec<EnvelopeField> {
    let envelope: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let route = route_template(route);
    let mut found: Vec<EnvelopeField> = Vec::new();
    for path in ignored {
        let (field, value) = field_at(&envelope, path);
        let field = format!("$.{field}");
        if found.iter().any(|f| f.unknown.field == field) {
            continue;
        }
        let value = value.map(ToString::to_string).unwrap_or_default();
        found.push(EnvelopeField {
            unknown: UnknownField {
                route: route.clone(),
                field,
                example: value.chars().take(EXAMPLE_CHARS).collect(),
            },
            value,
        });
    }
    found
}

/// A path as serde_ignored names it (`items.0.note`), as a field (`items[].note`:
/// a list's elements are one field; `?` marks an optional's value, nothing in
/// the JSON), and the value there.
fn field_at<'v>(json: &'v serde_json::Value, path: &str) -> (String, Option<&'v serde_json::Value>) {
    let path: Vec<&str> = path.split('.').filter(|s| *s != "?").collect();
    let mut field = String::new();
    for segment in &path {
        if segment.parse::<usize>().is_ok() {
            field.push_str("[]");
        } else {
            if !field.is_empty() {
                field.push('.');
            }
            field.push_str(segment);
        }
    }
    let value = path.iter().try_fold(json, |at, name| match name.parse::<usize>() {
        Ok(i) => at.get(i),
        Err(_) => at.get(name),
    });
    (field, value)
}

fn example(value: &serde_json::Value) -> String {
    value.to_string().chars().take(EXAMPLE_CHARS).collect()
}

/// A request path as its route: the query dropped and each identifier (a
/// company, a country, an accession, a section, a news item) replaced by
/// its placeholder in the specification's spelling.
pub fn route_template(route: &str) -> String {
    let path = route.split(['?', '#']).next().unwrap_or_default();
    let segments: Vec<&str> = path.split('/').collect();
    let company = segments.iter().position(|s| *s == "companies");
    let named = |i: usize| -> Option<&'static str> {
        // `companies/{id}/<family>/{accession}/{section}`
        match company.map(|c| i.checked_sub(c)) {
            Some(Some(1)) => return Some("{id}"),
            Some(Some(3)) => return Some("{accession}"),
            Some(Some(4)) => return Some("{section}"),
            Some(Some(2)) => return None,
            _ => {}
        }
        match segments.get(i.checked_sub(1)?)? {
            &"countries" => Some("{iso}"),
            &"items" | &"series" => Some("{id}"),
            _ => None,
        }
    };
    (0..segments.len())
        .map(|i| named(i).unwrap_or(segments[i]))
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_templates_one_per_route_not_per_company() {
        for (path, route) in [
            (
                "/api/v1/companies/AAPL/prices?range=1M",
                "/api/v1/companies/{id}/prices",
            ),
            ("/api/v1/companies/TW%3A2330", "/api/v1/companies/{id}"),
            (
                "/api/v1/companies/MSFT/events/0000789019-26-000001",
                "/api/v1/companies/{id}/events/{accession}",
            ),
            (
                "/api/v1/companies/MSFT/filing-notes/0000789019-26-000001/item7",
                "/api/v1/companies/{id}/filing-notes/{accession}/{section}",
            ),
            ("/api/v1/countries/US/series", "/api/v1/countries/{iso}/series"),
            ("/api/v1/news/items/n-17", "/api/v1/news/items/{id}"),
            ("/api/v1/news/feed?cursor=abc", "/api/v1/news/feed"),
            ("/api/v1/geo/countries", "/api/v1/geo/countries"),
        ] {
            assert_eq!(route_template(path), route, "{path}");
        }
    }

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Bar {
        date: String,
        close: Option<f64>,
        nested: Option<Inner>,
        #[serde(default)]
        list: Vec<Inner>,
    }

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        a: i64,
    }

    #[test]
    fn each_ignored_field_is_named_with_an_example_and_a_known_record_has_none() {
        let found = unknown_fields::<Bar>(
            r#"{"date": "2026-01-02", "close": 1.5, "vwap": 1.25, "nested": {"a": 1, "b": "x"},
                "list": [{"a": 1, "c": true}, {"a": 2, "c": false}]}"#,
            "/api/v1/companies/AAPL/prices?range=1M",
        );
        let named: Vec<(&str, &str)> = found.iter().map(|f| (f.field.as_str(), f.example.as_str())).collect();
        assert_eq!(named, [("vwap", "1.25"), ("nested.b", "\"x\""), ("list[].c", "true")]);
        assert!(found.iter().all(|f| f.route == "/api/v1/companies/{id}/prices"));
        assert!(unknown_fields::<Bar>(r#"{"date": "2026-01-02", "close": null}"#, "/r").is_empty());
        assert!(
            unknown_fields::<Bar>(r#"{"close": 1}"#, "/r").is_empty(),
            "unreadable: not drift"
        );
    }
}
