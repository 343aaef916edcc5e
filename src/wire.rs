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
