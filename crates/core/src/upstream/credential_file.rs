//! The credential file (an API key, or an OAuth access token): read again
//! whenever it changes, and waited for after a 401, because a rotated
//! Kubernetes Secret or a token helper changes the file under a running process.

use std::time::Duration;

use super::{CREDENTIAL_FILE_WAIT, Client, UpstreamError};
use crate::config::{Credential, CredentialKind};

impl Client {
    /// Reads the key file again if it changed since it was last read;
    /// whether it now holds another valid key (then it is used). A file that
    /// does not hold a valid key leaves the current one in use.
    pub(super) fn refresh_credential(&self) -> bool {
        let Some(file) = &self.inner.credential_file else {
            return false;
        };
        let Ok(meta) = std::fs::metadata(file) else {
            return false;
        };
        let stamp = (meta.modified().unwrap_or(std::time::UNIX_EPOCH), meta.len());
        {
            let mut read = self
                .inner
                .credential_file_read
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if *read == Some(stamp) {
                return false;
            }
            *read = Some(stamp);
        }
        let kind = self.inner.credential_kind;
        let source = match kind {
            CredentialKind::ApiKey => "key file",
            CredentialKind::Oauth => "access token file",
        };
        let fresh = match std::fs::read_to_string(file).map(|text| Credential::read(kind, text.trim(), source)) {
            Ok(Ok(key)) => key,
            Ok(Err(e)) => {
                tracing::warn!(message = "The credential file changed but holds no valid credential; the current one stays in use.", file = %file.display(), error = %e);
                return false;
            }
            Err(e) => {
                tracing::warn!(message = "The credential file changed but cannot be read; the current one stays in use.", file = %file.display(), error = %e);
                return false;
            }
        };
        let mut key = self.inner.key.write().unwrap_or_else(|e| e.into_inner());
        if key.as_ref() == Some(&fresh) {
            return false;
        }
        tracing::info!(message = "The credential file changed; using the new credential.", file = %file.display());
        *key = Some(fresh);
        true
    }

    /// After a 401: waits, with backoff, up to [`CREDENTIAL_FILE_WAIT`] for the key
    /// file to hold another valid key; whether it did. Without a key file, at once false.
    pub(super) async fn await_new_credential(&self) -> bool {
        if self.inner.credential_file.is_none() {
            return false;
        }
        let clock = &self.inner.clock;
        let deadline = clock.now() + chrono::Duration::from_std(CREDENTIAL_FILE_WAIT).unwrap_or_default();
        let mut delay = Duration::from_secs(1);
        loop {
            if self.refresh_credential() {
                return true;
            }
            if clock.now() >= deadline {
                return false;
            }
            tracing::info!(
                message = "The service refused the credential; waiting for its file to change.",
                wait_s = delay.as_secs()
            );
            clock.sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(16));
        }
    }

    /// Seconds an access token is still sent past its `exp`: the service's
    /// clock, not this machine's, decides.
    const EXPIRY_LEEWAY_S: i64 = 60;

    /// A 401 for an access token whose `exp` has passed by this client's
    /// clock (after the file was read again), so that a request the service
    /// must refuse is not sent.
    pub(super) fn expired_token(&self, route: &str) -> Option<UpstreamError> {
        let key = self.inner.key.read().unwrap_or_else(|e| e.into_inner());
        let expires_at = key.as_ref()?.expires_at()?;
        let now = self.inner.clock.now();
        (expires_at + chrono::Duration::seconds(Self::EXPIRY_LEEWAY_S) < now).then(|| UpstreamError::Unauthenticated {
            route: route.to_owned(),
            message: format!("it expired at {} (its exp claim)", expires_at.to_rfc3339()),
            credential: "OAuth access token",
            advice: self.token_advice(),
            sent: false,
        })
    }

    /// The error of a 401: for an access token, whether it had expired.
    pub(super) fn refused(&self, route: &str, message: String) -> UpstreamError {
        let key = self.inner.key.read().unwrap_or_else(|e| e.into_inner());
        let (credential, advice) = match key.as_ref() {
            Some(key) if key.kind() == CredentialKind::Oauth => {
                let now = self.inner.clock.now();
                let expiry = match key.expires_at() {
                    Some(at) if at <= now => format!("it expired at {} (its exp claim)", at.to_rfc3339()),
                    Some(at) => format!(
                        "it had not expired (its exp claim says {}), so it was revoked or is not for this service",
                        at.to_rfc3339()
                    ),
                    None => "the token is opaque, so whether it expired cannot be told here".to_owned(),
                };
                (key.describe(), format!("{expiry}; {}", self.token_advice()))
            }
            _ => ("API key", "check the key, or rotate it if it was revoked".to_owned()),
        };
        UpstreamError::Unauthenticated {
            route: route.to_owned(),
            message,
            credential,
            advice,
            sent: true,
        }
    }

    fn token_advice(&self) -> String {
        match &self.inner.credential_file {
            Some(file) => format!(
                "the token helper must keep {} fresh (fdsync reads it again whenever it changes)",
                file.display()
            ),
            None => "the token helper must keep upstream.access_token_file fresh".to_owned(),
        }
    }
}
