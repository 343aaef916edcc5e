//! The key file: read again whenever it changes, and waited for after a 401,
//! because a rotated Kubernetes Secret changes the file under a running process.

use std::time::Duration;

use super::{Client, KEY_FILE_WAIT};
use crate::config::ApiKey;

impl Client {
    /// Reads the key file again if it changed since it was last read;
    /// whether it now holds another valid key (then it is used). A file that
    /// does not hold a valid key leaves the current one in use.
    pub(super) fn refresh_key(&self) -> bool {
        let Some(file) = &self.inner.key_file else { return false };
        let Ok(meta) = std::fs::metadata(file) else {
            return false;
        };
        let stamp = (meta.modified().unwrap_or(std::time::UNIX_EPOCH), meta.len());
        {
            let mut read = self.inner.key_file_read.lock().unwrap_or_else(|e| e.into_inner());
            if *read == Some(stamp) {
                return false;
            }
            *read = Some(stamp);
        }
        let fresh = match std::fs::read_to_string(file).map(|text| ApiKey::parse(text.trim(), "key file")) {
            Ok(Ok(key)) => key,
            Ok(Err(e)) => {
                tracing::warn!(message = "The key file changed but holds no valid key; the current key stays in use.", file = %file.display(), error = %e);
                return false;
            }
            Err(e) => {
                tracing::warn!(message = "The key file changed but cannot be read; the current key stays in use.", file = %file.display(), error = %e);
                return false;
            }
        };
        let mut key = self.inner.key.write().unwrap_or_else(|e| e.into_inner());
        if key.as_ref() == Some(&fresh) {
            return false;
        }
        tracing::info!(message = "The key file changed; using the new key.", file = %file.display());
        *key = Some(fresh);
        true
    }

    /// After a 401: waits, with backoff, up to [`KEY_FILE_WAIT`] for the key
    /// file to hold another valid key; whether it did. Without a key file, at once false.
    pub(super) async fn await_new_key(&self) -> bool {
        if self.inner.key_file.is_none() {
            return false;
        }
        let clock = &self.inner.clock;
        let deadline = clock.now() + chrono::Duration::from_std(KEY_FILE_WAIT).unwrap_or_default();
        let mut delay = Duration::from_secs(1);
        loop {
            if self.refresh_key() {
                return true;
            }
            if clock.now() >= deadline {
                return false;
            }
            tracing::info!(
                message = "The service refused the API key; waiting for the key file to change.",
                wait_s = delay.as_secs()
            );
            clock.sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(16));
        }
    }
}
