//! Whether a configuration can run: every value in range, every path and
//! URL usable, before anything is sent or written.

use std::path::Path;

use super::{Config, ConfigError, CredentialKind, DEFAULT_MEMORY_LIMIT_MB, MIN_MEMORY_LIMIT_MB, wal_path};

/// The URL schemes a lake may be at.
const LAKE_SCHEMES: &[&str] = &["file", "s3", "s3a", "gs", "az", "abfs", "abfss"];

impl Config {
    pub(super) fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        };
        let base = url::Url::parse(&self.upstream.base_url).map_err(|e| {
            invalid(format!(
                "upstream.base_url {:?}: {e} (expected e.g. http://127.0.0.1:8080)",
                self.upstream.base_url
            ))
        })?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(invalid(format!(
                "upstream.base_url must be http or https, got {}",
                base.scheme()
            )));
        }
        let loopback = match base.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
            None => false,
        };
        if base.scheme() == "http" && !loopback && !self.upstream.allow_plain_http {
            return Err(invalid(format!(
                "upstream.base_url {:?} is plain http to another machine: the API key would cross the network unencrypted. Use https, or set upstream.allow_plain_http = true if the link is private",
                self.upstream.base_url
            )));
        }
        if !(1..=4096).contains(&self.upstream.max_body_mb) || !(1..=4096).contains(&self.upstream.max_frame_mb) {
            return Err(invalid(format!(
                "upstream.max_body_mb = {}, upstream.max_frame_mb = {}: use 1 to 4096 (MiB)",
                self.upstream.max_body_mb, self.upstream.max_frame_mb
            )));
        }
        if base.path().trim_end_matches('/').ends_with("/api/v1") {
            return Err(invalid(
                "upstream.base_url must not include /api/v1: fdsync adds it".into(),
            ));
        }
        if let Some(dir) = &self.warehouse.parquet_dir {
            check_lake_location(dir)
                .map_err(|message| invalid(format!("warehouse.parquet_dir = {dir:?}: {message}")))?;
        }
        if let Some(copy) = &self.warehouse.reader_copy {
            check_reader_copy(copy, &self.warehouse.duckdb).map_err(|message| {
                invalid(format!(
                    "warehouse.reader_copy = {:?}: {message}",
                    copy.display().to_string()
                ))
            })?;
        }
        if self.warehouse.parquet_snapshots {
            match self.warehouse.parquet_dir.as_deref().map(url::Url::parse) {
                None => {
                    return Err(invalid(
                        "warehouse.parquet_snapshots needs warehouse.parquet_dir: the snapshots are kept in the lake"
                            .into(),
                    ));
                }
                Some(Ok(url)) if url.scheme().len() > 1 && url.scheme() != "file" => {
                    return Err(invalid(format!(
                        "warehouse.parquet_snapshots needs a lake on a local or mounted file system, not {}://: \
                         object stores have no atomic switch; their readers should use the Delta log (docs/lake.md)",
                        url.scheme()
                    )));
                }
                Some(_) => {}
            }
        }
        self.daemon.metrics_socket().map_err(invalid)?;
        if let Some(hook) = &self.alerts.webhook {
            match url::Url::parse(hook) {
                Ok(url) if matches!(url.scheme(), "http" | "https") => {}
                // The URL may hold a token: name the key, not the value.
                _ => {
                    return Err(invalid(
                        "alerts.webhook: not an http(s) URL (expected e.g. https://hooks.example.com/T000/B000)".into(),
                    ));
                }
            }
        }
        if self.warehouse.memory_limit_mb < MIN_MEMORY_LIMIT_MB {
            return Err(invalid(format!(
                "warehouse.memory_limit_mb = {}: use {MIN_MEMORY_LIMIT_MB} or more; below it DuckDB runs out of \
                 memory updating stored news items and events (the default is {DEFAULT_MEMORY_LIMIT_MB})",
                self.warehouse.memory_limit_mb
            )));
        }
        if !(self.pipelines.quota_share > 0.0 && self.pipelines.quota_share <= 1.0) {
            return Err(invalid(format!(
                "pipelines.quota_share = {}: use a share above 0 and at most 1 (0.9 plans 90% of the quota)",
                self.pipelines.quota_share
            )));
        }
        if self.pipelines.timer_minutes.is_some_and(|m| !(1..=1440).contains(&m)) {
            return Err(invalid(
                "pipelines.timer_minutes: use 1 to 1440, the minutes between `sync --once` runs".into(),
            ));
        }
        if self.upstream.credential == CredentialKind::Oauth && self.upstream.access_token_file.is_none() {
            return Err(ConfigError::TokenFileMissing);
        }
        if self.upstream.max_attempts == 0 {
            return Err(invalid("upstream.max_attempts must be at least 1".into()));
        }
        if !(1..=64).contains(&self.upstream.concurrency) {
            return Err(invalid(format!(
                "upstream.concurrency = {}: use 1 to 64 (requests in flight share one rate budget anyway)",
                self.upstream.concurrency
            )));
        }
        if let Some(n) = self.news.min_importance
            && n > 100
        {
            return Err(invalid(format!("news.min_importance = {n}: use 0 to 100")));
        }
        for (i, search) in self.news.searches.iter().enumerate() {
            // A search's text is its tape's checkpoint and its rows' key.
            if search.trim().is_empty() || search.trim() != search {
                return Err(invalid(format!(
                    "news.searches has {search:?}: a search is a text without leading or trailing spaces"
                )));
            }
            if self.news.searches[..i].contains(search) {
                return Err(invalid(format!("news.searches names {search:?} twice")));
            }
        }
        for id in &self.universe.companies {
            if id.trim().is_empty() || id.contains('/') {
                return Err(invalid(format!("universe.companies has an invalid identifier {id:?}")));
            }
        }
        Ok(())
    }
}

/// Whether `copy` can be the reader copy of the warehouse at `warehouse`.
fn check_reader_copy(copy: &Path, warehouse: &Path) -> Result<(), String> {
    if copy.as_os_str().is_empty() || copy.file_name().is_none() {
        return Err("name a file, for example \"data/fdsync.read.duckdb\"".into());
    }
    let same = |a: &Path, b: &Path| {
        a == b || matches!((std::path::absolute(a), std::path::absolute(b)), (Ok(a), Ok(b)) if a == b)
    };
    if same(copy, warehouse) {
        return Err("it is the warehouse itself ([warehouse] duckdb); name another file".into());
    }
    if same(copy, &wal_path(warehouse)) || same(&wal_path(copy), warehouse) {
        return Err("it would overwrite the warehouse's own files; name another file".into());
    }
    Ok(())
}

/// Whether `parquet_dir` names a place the lake can be, without connecting.
///
/// # Errors
/// What is wrong with it, for the configuration error.
pub fn check_lake_location(parquet_dir: &str) -> Result<(), String> {
    if parquet_dir.trim().is_empty() {
        return Err("empty; give a folder or a file://, s3://, gs:// or az:// URL".into());
    }
    match url::Url::parse(parquet_dir) {
        Ok(url) if url.scheme().len() > 1 && !LAKE_SCHEMES.contains(&url.scheme()) => Err(format!(
            "unsupported scheme {}://; use a local path, file://, s3://, gs:// or az://",
            url.scheme()
        )),
        Ok(url) if url.scheme() != "file" && url.host_str().unwrap_or("").is_empty() => Err(format!(
            "{}:// needs a bucket or container, as in {}://bucket/prefix",
            url.scheme(),
            url.scheme()
        )),
        _ => Ok(()),
    }
}
