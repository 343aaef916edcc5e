//! The upstream credential: an API key or an OAuth access token, read and
//! checked before anything is sent, and never printed.

use std::fmt;

use serde::Deserialize;

use super::{ConfigError, CredentialKind};

/// An upstream credential: an API key or an OAuth access token. It cannot be
/// printed: `Debug` and `Display` redact it, and the only way to the secret
/// is [`Credential::header`], used when building a request.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    secret: String,
    kind: CredentialKind,
}

pub const KEY_PREFIX: &str = "pk_live_";

/// The claims of a JWT-shaped access token that fdsync reads. An opaque
/// token has none, and a JWT's signature is the service's to check.
#[derive(Debug, Default, Deserialize)]
struct TokenClaims {
    exp: Option<i64>,
    sub: Option<String>,
    token_use: Option<String>,
}

impl TokenClaims {
    /// The payload of `header.payload.signature`, if the token has that shape.
    fn of(token: &str) -> Option<TokenClaims> {
        use base64::Engine as _;
        let mut parts = token.split('.');
        let (Some(_), Some(payload), Some(_), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return None;
        };
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload.trim_end_matches('='))
            .ok()?;
        serde_json::from_slice(&json).ok()
    }
}

impl Credential {
    /// An API key: `pk_live_` and more, printable ASCII.
    pub fn parse(value: &str, source_name: &str) -> Result<Credential, ConfigError> {
        let well_formed = value.starts_with(KEY_PREFIX)
            && value.len() > KEY_PREFIX.len()
            && value.bytes().all(|b| b.is_ascii_graphic());
        if well_formed {
            Ok(Credential {
                secret: value.to_owned(),
                kind: CredentialKind::ApiKey,
            })
        } else {
            Err(ConfigError::KeyMalformed {
                source_name: source_name.to_owned(),
            })
        }
    }

    /// An OAuth access token: any printable ASCII without spaces, of any
    /// shape, except the ID token of a terminal session, which the service
    /// does not take for programmatic use (spec section 5).
    pub fn access_token(value: &str, source_name: &str) -> Result<Credential, ConfigError> {
        let malformed = |why: &str| ConfigError::TokenMalformed {
            source_name: source_name.to_owned(),
            why: why.to_owned(),
        };
        if value.is_empty() {
            return Err(malformed("it is empty (has the token helper written it yet?)"));
        }
        if !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(malformed(
                "it holds spaces or characters a header cannot carry (check the token helper's output: one token, one line)",
            ));
        }
        if value.starts_with(KEY_PREFIX) {
            return Err(malformed(
                "it is an API key (pk_live_): set upstream.credential = \"api_key\" and name the file in upstream.api_key_file",
            ));
        }
        if TokenClaims::of(value).and_then(|c| c.token_use).as_deref() == Some("id") {
            return Err(malformed(
                "it is the ID token of a signed-in session (token_use=id), which the service does not accept for programmatic use; have the token helper write the OAuth access token",
            ));
        }
        Ok(Credential {
            secret: value.to_owned(),
            kind: CredentialKind::Oauth,
        })
    }

    /// Reads `value` as the `kind` of credential.
    pub fn read(kind: CredentialKind, value: &str, source_name: &str) -> Result<Credential, ConfigError> {
        match kind {
            CredentialKind::ApiKey => Credential::parse(value, source_name),
            CredentialKind::Oauth => Credential::access_token(value, source_name),
        }
    }

    /// `text` with every occurrence of the secret cut out: for what leaves
    /// the process other than the request header (an alert's body).
    pub fn redact(&self, text: &str) -> String {
        if self.secret.is_empty() {
            return text.to_owned();
        }
        text.replace(&self.secret, "[credential]")
    }

    pub fn kind(&self) -> CredentialKind {
        self.kind
    }

    /// The header that carries the credential and its value: an API key as
    /// X-API-KEY, a token as a bearer.
    pub fn header(&self) -> (&'static str, String) {
        match self.kind {
            CredentialKind::ApiKey => ("X-API-KEY", self.secret.clone()),
            CredentialKind::Oauth => ("Authorization", format!("Bearer {}", self.secret)),
        }
    }

    /// When a JWT-shaped access token expires (its `exp` claim); `None` for
    /// an API key or an opaque token.
    pub fn expires_at(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        if self.kind != CredentialKind::Oauth {
            return None;
        }
        chrono::DateTime::from_timestamp(TokenClaims::of(&self.secret)?.exp?, 0)
    }

    /// What the credential is, for messages: "API key" or "OAuth access token".
    pub fn describe(&self) -> &'static str {
        match self.kind {
            CredentialKind::ApiKey => "API key",
            CredentialKind::Oauth => "OAuth access token",
        }
    }

    /// A stable, one-way identifier of the account behind the credential,
    /// for the quota ledger: the ledger must not mix two accounts' windows,
    /// and must not hold the secret. A token is renewed hourly, so it is
    /// known by its subject where it names one.
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let identity = match (self.kind, TokenClaims::of(&self.secret).and_then(|c| c.sub)) {
            (CredentialKind::Oauth, Some(sub)) => format!("oauth-sub:{sub}"),
            _ => self.secret.clone(),
        };
        let digest = Sha256::digest(format!("fdsync-quota-ledger:{identity}"));
        hex::encode(&digest[..8])
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credential({self})")
    }
}

impl fmt::Display for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            CredentialKind::ApiKey => f.write_str("pk_live_…redacted"),
            CredentialKind::Oauth => f.write_str("access token …redacted"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What fdsync refuses to send as an access token, before any request:
    /// an API key under `credential = "oauth"`, the ID token of a terminal
    /// session, text a header cannot carry.
    #[test]
    fn a_token_that_is_not_an_access_token_is_refused_with_what_to_do() {
        use base64::Engine as _;
        let refused = |value: &str| Credential::access_token(value, "file t").unwrap_err().to_string();
        assert!(refused("pk_live_abc").contains("upstream.credential = \"api_key\""));
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let id_token = format!(
            "{}.{}.sig",
            b64(r#"{"alg":"RS256"}"#),
            b64(r#"{"token_use":"id","exp":1}"#)
        );
        assert!(refused(&id_token).contains("ID token"), "{}", refused(&id_token));
        assert!(refused("").contains("empty"));
        assert!(refused("two words").contains("one token, one line"));
        let access = format!(
            "{}.{}.sig",
            b64(r#"{"alg":"RS256"}"#),
            b64(r#"{"token_use":"access","exp":1800000000,"sub":"team"}"#)
        );
        let token = Credential::access_token(&access, "file t").unwrap();
        assert_eq!(token.expires_at().map(|t| t.timestamp()), Some(1_800_000_000));
        assert_eq!(token.header().0, "Authorization");
        assert!(!format!("{token:?} {token}").contains("sig"), "redacted");
        let opaque = Credential::access_token("at_0123456789", "file t").unwrap();
        assert_eq!(opaque.expires_at(), None);
    }

    #[test]
    fn key_is_redacted_and_validated() {
        let key = Credential::parse("pk_live_secret123", "test").unwrap();
        assert!(!format!("{key:?} {key}").contains("secret123"));
        assert!(Credential::parse("sk_live_secret123", "test").is_err());
        assert!(Credential::parse("pk_live_", "test").is_err());
    }
}
