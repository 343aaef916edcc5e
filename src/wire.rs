//! The upstream service's error body (`../shared/spec/wire-contract.md`) and
//! how a value is put in a path or query, shared by the client and the
//! emulator. Each feed's payload shapes are in
//! its module under [`crate::feeds`]: record types the emulator serializes and
//! the client reads leniently (optional fields are `Option`, unknown fields
//! are ignored there and kept whole in the `raw` column), and page envelopes
//! that borrow each record as a `RawValue`, so the text as served reaches
//! the warehouse unchanged and one bad record can be quarantined alone.

use serde::{Deserialize, Serialize};

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
            .map_err(|_| format!("{s:?} is neither a date (YYYY-MM-DD) nor an RFC 3339 timestamp"))
    }

    /// An RFC 3339 timestamp in any offset, or a date (midnight UTC).
    pub fn parse_timestamp(s: &str) -> Result<DateTime<Utc>, String> {
        DateTime::parse_from_rfc3339(s)
            .map(|t| t.to_utc())
            .or_else(|_| NaiveDate::parse_from_str(s, "%Y-%m-%d").map(|d| d.and_time(NaiveTime::MIN).and_utc()))
            .map_err(|_| format!("{s:?} is neither an RFC 3339 timestamp nor a date (YYYY-MM-DD)"))
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

    #[cfg(test)]
    mod tests {
        use super::*;

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
        }
    }
}
