//! The upstream service's error body (`../shared/spec/wire-contract.md`) and
//! how a value is put in a path or query, shared by the client and the
//! emulator. Each feed's payload shapes are in
//! its module under [`crate::feeds`]: record types the emulator serializes and
//! the client reads leniently (optional fields are `Option`, unknown fields
//! are ignored there and kept whole in the `raw` column), and page envelopes
//! that borrow each record as a `RawValue`, so the text as served reaches
//! the warehouse unchanged and one bad record can be quarantined alone.

use serde::{Deserialize, Serialize};

/// The warehouse's `company_key` for a `cik` as served: a numeric SEC CIK
/// zero-padded to the contract's ten digits (`789019` and `0000789019` are
/// one company), anything else (a platform key such as `TW:2330`) as it is.
pub fn company_key(cik: &str) -> String {
    let cik = cik.trim();
    if !cik.is_empty() && cik.len() <= 10 && cik.bytes().all(|b| b.is_ascii_digit()) {
        format!("{cik:0>10}")
    } else {
        cik.to_owned()
    }
}

/// Percent-encodes one path segment or query value.
pub fn encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Error body of every non-2xx JSON response.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sales_email: Option<String>,
    /// On a 400 for an 8-K filing with several coded items: the items it carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Vec<String>>,
}

/// Dates and timestamps read as the wire contract allows them, whichever
/// shape a service chose: `#[serde(deserialize_with = "...")]` on a field.
pub mod tolerant {
    use chrono::{DateTime, NaiveDate, NaiveTime, Utc};
    use serde::{Deserialize, Deserializer, de::Error};

    /// `YYYY-MM-DD`, or an RFC 3339 timestamp, whose date is taken as
    /// written (in its own offset: the day the service meant).
    pub fn parse_date(s: &str) -> Result<NaiveDate, String> {
        NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .or_else(|_| DateTime::parse_from_rfc3339(s).map(|t| t.date_naive()))
            .or_else(|_| without_offset(s).map(|t| t.date()).ok_or(()))
            .map_err(|_| format!("{s:?} is neither a date (YYYY-MM-DD) nor an RFC 3339 timestamp"))
    }

    /// An RFC 3339 timestamp in any offset, a date (midnight UTC), or a
    /// date and time without an offset, read as UTC (the wire contract's
    /// zone; `raw` keeps the text as served).
    pub fn parse_timestamp(s: &str) -> Result<DateTime<Utc>, String> {
        DateTime::parse_from_rfc3339(s)
            .map(|t| t.to_utc())
            .or_else(|_| NaiveDate::parse_from_str(s, "%Y-%m-%d").map(|d| d.and_time(NaiveTime::MIN).and_utc()))
            .or_else(|_| without_offset(s).map(|t| t.and_utc()).ok_or(()))
            .map_err(|()| format!("{s:?} is neither an RFC 3339 timestamp nor a date (YYYY-MM-DD)"))
    }

    /// `2026-11-25T14:03:07`, with a space for the `T` or a fraction of a second.
    fn without_offset(s: &str) -> Option<chrono::NaiveDateTime> {
        ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M"]
            .iter()
            .find_map(|format| chrono::NaiveDateTime::parse_from_str(s, format).ok())
    }

    pub fn timestamp<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        parse_timestamp(&String::deserialize(d)?).map_err(D::Error::custom)
    }

    pub fn date<'de, D: Deserializer<'de>>(d: D) -> Result<NaiveDate, D::Error> {
        parse_date(&String::deserialize(d)?).map_err(D::Error::custom)
    }

    pub fn option_date<'de, D: Deserializer<'de>>(d: D) -> Result<Option<NaiveDate>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|s| parse_date(&s).map_err(D::Error::custom))
            .transpose()
    }

    pub fn option_timestamp<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|s| parse_timestamp(&s).map_err(D::Error::custom))
            .transpose()
    }

    /// A whole number written as JSON allows it: `12`, `12.0`, `1.2e1`.
    struct WholeNumber;

    impl serde::de::Visitor<'_> for WholeNumber {
        type Value = i64;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a whole number (12, 12.0 or 1.2e1)")
        }

        fn visit_i64<E: Error>(self, v: i64) -> Result<i64, E> {
            Ok(v)
        }

        fn visit_u64<E: Error>(self, v: u64) -> Result<i64, E> {
            i64::try_from(v).map_err(|_| E::custom(format!("{v} is larger than a 64-bit integer")))
        }

        #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
        fn visit_f64<E: Error>(self, v: f64) -> Result<i64, E> {
            // Past 2^63 the cast saturates; the round trip catches it.
            if v.fract() == 0.0 && v.is_finite() && (v as i64) as f64 == v {
                Ok(v as i64)
            } else {
                Err(E::custom(format!(
                    "{v} is not a whole number (expected 12, 12.0 or 1.2e1)"
                )))
            }
        }
    }

    /// An integer field: any JSON number with a whole value.
    pub fn integer<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        d.deserialize_any(WholeNumber)
    }

    pub fn option_integer<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        struct Whole(i64);
        impl<'de> Deserialize<'de> for Whole {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Whole, D::Error> {
                integer(d).map(Whole)
            }
        }
        Ok(Option::<Whole>::deserialize(d)?.map(|w| w.0))
    }

    /// A count or offset: a whole number that is not negative.
    pub fn option_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        option_integer(d)?
            .map(|n| u64::try_from(n).map_err(|_| D::Error::custom(format!("{n} is negative (expected a count)"))))
            .transpose()
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn ciks_are_padded_to_ten_digits_and_platform_keys_kept() {
            assert_eq!(crate::wire::company_key("789019"), "0000789019");
            assert_eq!(crate::wire::company_key("0000789019"), "0000789019");
            assert_eq!(crate::wire::company_key(" 320193 "), "0000320193");
            assert_eq!(crate::wire::company_key("TW:2330"), "TW:2330");
            assert_eq!(crate::wire::company_key("12345678901"), "12345678901");
        }

        #[test]
        fn integers_take_every_json_number_with_a_whole_value() {
            #[derive(Deserialize)]
            struct T {
                #[serde(deserialize_with = "integer")]
                n: i64,
                #[serde(default, deserialize_with = "option_integer")]
                m: Option<i64>,
            }
            for (text, n) in [
                ("12", 12),
                ("12.0", 12),
                ("1.2e1", 12),
                ("-3E2", -300),
                ("123456789e0", 123_456_789),
            ] {
                let t: T = serde_json::from_str(&format!(r#"{{"n": {text}}}"#)).unwrap();
                assert_eq!((t.n, t.m), (n, None), "{text}");
            }
            let t: T = serde_json::from_str(r#"{"n": 1, "m": 4.0e0}"#).unwrap();
            assert_eq!(t.m, Some(4));
            let t: T = serde_json::from_str(r#"{"n": 1, "m": null}"#).unwrap();
            assert_eq!(t.m, None);
            for bad in ["1.5", "1e300", "\"12\"", "18446744073709551615"] {
                let e = serde_json::from_str::<T>(&format!(r#"{{"n": {bad}}}"#))
                    .err()
                    .unwrap()
                    .to_string();
                assert!(e.contains("whole number") || e.contains("larger than"), "{bad}: {e}");
            }
        }

        #[test]
        fn dates_and_timestamps_take_each_other_s_shape() {
            let day = NaiveDate::from_ymd_opt(2026, 11, 25).unwrap();
            assert_eq!(parse_date("2026-11-25"), Ok(day));
            assert_eq!(parse_date("2026-11-25T14:03:00Z"), Ok(day));
            assert_eq!(parse_date("2026-11-25T23:30:00-05:00"), Ok(day), "the day as written");
            assert!(parse_date("25/11/2026").unwrap_err().contains("25/11/2026"));
            let noon: DateTime<Utc> = "2026-11-25T12:00:00Z".parse().unwrap();
            assert_eq!(parse_timestamp("2026-11-25T12:00:00Z"), Ok(noon));
            assert_eq!(parse_timestamp("2026-11-25T07:00:00-05:00"), Ok(noon));
            assert_eq!(
                parse_timestamp("2026-11-25"),
                Ok("2026-11-25T00:00:00Z".parse().unwrap()),
                "midnight UTC"
            );
            for offsetless in ["2026-11-25T12:00:00", "2026-11-25 12:00:00.000", "2026-11-25T12:00"] {
                assert_eq!(parse_timestamp(offsetless), Ok(noon), "{offsetless} read as UTC");
                assert_eq!(parse_date(offsetless), Ok(day), "{offsetless}");
            }
            assert!(parse_timestamp("2026-11-25T25:00:00").is_err());
        }
    }
}
