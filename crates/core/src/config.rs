//! The operator's configuration: `config/fdsync.toml` plus `FDSYNC_<SECTION>__<KEY>`
//! environment overrides, validated into plain values before anything runs.

use std::path::{Path, PathBuf};

use serde::Deserialize;

mod credential;
mod locate;
mod validate;

pub use credential::{Credential, KEY_PREFIX};
pub use locate::{ConfigSource, SHIPPED_CONFIG};
pub use validate::check_lake_location;

/// Everything that can be wrong with the configuration. Each message names the
/// file, key or variable at fault and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source} (pass --config PATH or create it from config/fdsync.toml)")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path} is not valid: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("API key missing: set the environment variable {var} (or upstream.api_key_file) to your pk_live_ key")]
    KeyMissing { var: String },
    #[error(
        "API key from {source_name} is malformed: keys start with pk_live_ (check for a stray prefix, quote or newline)"
    )]
    KeyMalformed { source_name: String },
    #[error("cannot read API key file {path}: {source}")]
    KeyFile { path: PathBuf, source: std::io::Error },
    #[error(
        "upstream.credential = \"oauth\" needs upstream.access_token_file: the file your token helper keeps fresh with the OAuth access token"
    )]
    TokenFileMissing,
    #[error("cannot read the access token file {path}: {source} (is the token helper running?)")]
    TokenFile { path: PathBuf, source: std::io::Error },
    #[error("access token from {source_name} is malformed: {why}")]
    TokenMalformed { source_name: String, why: String },
    #[error("pipeline file {path}: {message}")]
    Pipeline { path: PathBuf, message: String },
}

/// `[upstream]`: where the service is and how to authenticate.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Base address of the service, without the `/api/v1` prefix.
    pub base_url: String,
    /// Name of the environment variable holding the API key.
    #[serde(default = "default_key_env")]
    pub api_key_env: String,
    /// A file holding the API key (a mounted Kubernetes secret); wins over the variable.
    pub api_key_file: Option<PathBuf>,
    /// What authenticates the data routes: `api_key` (`pk_live_`, sent as
    /// X-API-KEY) or `oauth` (an access token from `access_token_file`,
    /// sent as `Authorization: Bearer`).
    #[serde(default)]
    pub credential: CredentialKind,
    /// With `credential = "oauth"`: the file an outside token helper keeps
    /// fresh; read again whenever it changes.
    pub access_token_file: Option<PathBuf>,
    /// Plan hint used for pacing until the service's headers say otherwise.
    pub plan: Option<Plan>,
    /// Seconds before one request attempt is abandoned.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// Attempts per request on retriable failures (5xx, resets, timeouts, 429 rate_limited).
    #[serde(default = "default_attempts")]
    pub max_attempts: usize,
    /// Requests in flight at once (per-company fan-out); all share one rate budget.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Keep sending once the plan's quota is spent, paid from prepaid credits.
    /// Off by default: past the quota fdsync stops (exit 75) rather than spend money.
    #[serde(default)]
    pub use_credits: bool,
    /// The most one response may hold once decoded, in MiB; a larger one
    /// fails its request (the run goes on). The largest real page is about 1 MiB.
    #[serde(default = "default_max_body_mb")]
    pub max_body_mb: u64,
    /// The most one live-stream frame may hold, in MiB; a larger one drops
    /// the connection, which resumes from the last commit.
    #[serde(default = "default_max_frame_mb")]
    pub max_frame_mb: u64,
    /// Allows a plain `http://` base URL to a host other than this machine:
    /// the key would cross the network readable by anyone on the path.
    #[serde(default)]
    pub allow_plain_http: bool,
}

fn default_max_body_mb() -> u64 {
    64
}
fn default_max_frame_mb() -> u64 {
    16
}

fn default_key_env() -> String {
    "FDSYNC_API_KEY".into()
}
fn default_timeout() -> u64 {
    30
}
fn default_attempts() -> usize {
    6
}
fn default_concurrency() -> usize {
    4
}

/// What kind of credential authenticates the data routes (spec section 5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    #[default]
    ApiKey,
    Oauth,
}

impl UpstreamConfig {
    /// The file the credential is read from, and read again when it
    /// changes: the token file under OAuth, else the key file if any.
    pub fn credential_file(&self) -> Option<&Path> {
        match self.credential {
            CredentialKind::ApiKey => self.api_key_file.as_deref(),
            CredentialKind::Oauth => self.access_token_file.as_deref(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Plan {
    Free,
    Build,
    Scale,
}

impl Plan {
    /// Published per-minute limit, where the plan has a fixed one.
    pub fn per_minute(self) -> Option<u32> {
        match self {
            Plan::Free => Some(30),
            Plan::Build => Some(300),
            Plan::Scale => None,
        }
    }
}

/// `[warehouse]`: where rows land.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarehouseConfig {
    /// The embedded DuckDB database file.
    pub duckdb: PathBuf,
    /// Optional lake: every table also published as a Delta Lake table of
    /// Parquet files under this local path or `file://`, `s3://`, `gs://` or
    /// `az://` URL (credentials from the environment). See docs/lake.md.
    pub parquet_dir: Option<String>,
    /// Also keep, for readers of plain Parquet folders (BI tools without a
    /// Delta reader), `_current/<table>` in the lake: a link switched
    /// atomically after each publish to a folder of exactly the table's live
    /// files. Needs a lake on a local or mounted file system (docs/lake.md).
    #[serde(default)]
    pub parquet_snapshots: bool,
    /// Milliseconds without a write after which the writer closes the database
    /// file, so that readers can open it (DuckDB lets one process write or
    /// many read). 0 keeps it open for as long as fdsync runs.
    #[serde(default = "default_release_ms")]
    pub release_when_idle_ms: u64,
    /// DuckDB's memory limit for the writer, in MiB: beyond it DuckDB spills
    /// to a temp folder beside the database instead of growing. Below 32 DuckDB
    /// ran out of memory updating news items and events another route had
    /// stored; docs/operations.md says what the process peaks at.
    #[serde(default = "default_memory_limit_mb")]
    pub memory_limit_mb: u64,
    /// DuckDB's worker threads for the writer. Its statements are small
    /// merges, for which one thread is faster than several.
    #[serde(default = "default_duckdb_threads")]
    pub duckdb_threads: u64,
    /// The DuckDB storage format a new warehouse file is written in: "v1.2.0"
    /// (the default) opens in every DuckDB from 1.2, the oldest whose format
    /// has what the warehouse uses, as BI tools, drivers and dbt-duckdb
    /// bundle; "latest" is the bundled DuckDB's own, which only DuckDB 2.0
    /// reads. Fixed when the file is created (docs/warehouse.md, "Readers").
    #[serde(default = "default_storage_version")]
    pub storage_version: String,
    /// A read-only copy of the warehouse, replaced whole after each run, for
    /// readers that must never hold up a sync (BI tools, dbt, notebooks).
    #[serde(default)]
    pub reader_copy: Option<PathBuf>,
}

/// `[warehouse] storage_version` when unset.
pub const DEFAULT_STORAGE_VERSION: &str = "v1.2.0";

fn default_storage_version() -> String {
    DEFAULT_STORAGE_VERSION.into()
}

fn default_release_ms() -> u64 {
    1000
}

/// The least `[warehouse] memory_limit_mb`: below it DuckDB ran out of
/// memory updating news items and events that other routes had stored,
/// whose scan and rewrite of every column need about 20 MiB beside what a
/// held transaction keeps.
pub const MIN_MEMORY_LIMIT_MB: u64 = 32;

/// `[warehouse] memory_limit_mb` when unset: what deploy/ sizes its limits for.
pub const DEFAULT_MEMORY_LIMIT_MB: u64 = 64;

/// `[warehouse] duckdb_threads` when unset: the writer is one thread.
pub const DEFAULT_DUCKDB_THREADS: u64 = 1;

fn default_memory_limit_mb() -> u64 {
    DEFAULT_MEMORY_LIMIT_MB
}

fn default_duckdb_threads() -> u64 {
    DEFAULT_DUCKDB_THREADS
}

/// `[daemon]`: what `fdsync daemon` runs beside the schedules.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    /// Where `/metrics` (Prometheus) and `/healthz` are served; "off" serves neither.
    #[serde(default = "default_metrics_addr")]
    pub metrics_addr: String,
    /// Keep the live news stream connected (pipelines with `params.stream_route`):
    /// `true`, `false`, or `"auto"`, which connects it only when the plan's
    /// quota carries its connections beside the schedules (else they poll).
    #[serde(default)]
    pub stream: StreamMode,
    /// `/healthz` reports unhealthy when nothing was committed for this many
    /// seconds (since the start, before the first commit); 0 never does.
    /// Set it above the longest gap between the schedules' firings.
    #[serde(default = "default_stale_after")]
    pub stale_after_secs: u64,
    /// Requests a day spent re-reading stored companies, oldest verified
    /// first, to find and repair what the service changed (`fdsync verify`); 0: none.
    #[serde(default = "default_verify_requests")]
    pub verify_requests: u64,
    /// While the live stream commits between scheduled runs (which publish
    /// after each run), the lake is published at most this often, in
    /// seconds, and once at a stop. `fdsync stream` does the same.
    #[serde(default = "default_stream_publish_secs")]
    pub stream_publish_secs: u64,
}

fn default_stream_publish_secs() -> u64 {
    300
}

fn default_stale_after() -> u64 {
    86_400
}

/// A day's verification on the Free plan's 250 requests: 2% of them.
pub const DEFAULT_VERIFY_REQUESTS: u64 = 5;

fn default_verify_requests() -> u64 {
    DEFAULT_VERIFY_REQUESTS
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            metrics_addr: default_metrics_addr(),
            stream: StreamMode::Auto,
            stale_after_secs: default_stale_after(),
            verify_requests: default_verify_requests(),
            stream_publish_secs: default_stream_publish_secs(),
        }
    }
}

impl DaemonConfig {
    /// The metrics address, `None` when turned off.
    ///
    /// # Errors
    /// When it is neither "off" nor a socket address, with what to write instead.
    pub fn metrics_socket(&self) -> Result<Option<std::net::SocketAddr>, String> {
        match self.metrics_addr.trim() {
            "" | "off" => Ok(None),
            text => text.parse().map(Some).map_err(|_| {
                format!("daemon.metrics_addr = {text:?}: expected an address like \"127.0.0.1:9464\", or \"off\"")
            }),
        }
    }
}

fn default_metrics_addr() -> String {
    "127.0.0.1:9464".into()
}

/// `daemon.stream`: whether the daemon keeps the live stream connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamMode {
    /// Connected when the quota carries it (`fdsync plan` says which).
    #[default]
    Auto,
    On,
    Off,
}

impl<'de> Deserialize<'de> for StreamMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(StreamMode::On),
            Raw::Bool(false) => Ok(StreamMode::Off),
            Raw::Text(t) if t == "auto" => Ok(StreamMode::Auto),
            Raw::Text(t) => Err(serde::de::Error::custom(format!(
                "daemon.stream = {t:?}: expected true, false or \"auto\""
            ))),
        }
    }
}

/// `[universe]`: what to mirror.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UniverseConfig {
    /// Company identifiers: tickers, CIKs (padded or not) or platform keys like `TW:2330`.
    #[serde(default)]
    pub companies: Vec<String>,
    #[serde(default)]
    pub countries: Vec<String>,
    #[serde(default)]
    pub geo_layers: Vec<String>,
}

/// `[pipelines]`: which declarative pipeline files to load.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelinesConfig {
    #[serde(default = "default_pipelines_dir")]
    pub dir: PathBuf,
    /// Names to run; default every file in `dir`.
    pub enabled: Option<Vec<String>>,
    /// The share of the quota the configuration may plan to spend (0-1):
    /// `schedule = "auto"` intervals and `daemon.stream = "auto"` keep to it.
    #[serde(default = "default_quota_share")]
    pub quota_share: f64,
    /// Minutes between the `sync --once` runs of a timer or CronJob: `auto`
    /// intervals are whole multiples of it, and `fdsync plan` forecasts it.
    pub timer_minutes: Option<u32>,
}

fn default_quota_share() -> f64 {
    0.9
}

impl Default for PipelinesConfig {
    fn default() -> Self {
        PipelinesConfig {
            dir: default_pipelines_dir(),
            enabled: None,
            quota_share: default_quota_share(),
            timer_minutes: None,
        }
    }
}

fn default_pipelines_dir() -> PathBuf {
    "pipelines".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub upstream: UpstreamConfig,
    pub warehouse: WarehouseConfig,
    #[serde(default)]
    pub universe: UniverseConfig,
    #[serde(default)]
    pub pipelines: PipelinesConfig,
    #[serde(default)]
    pub news: NewsFilters,
    #[serde(default)]
    pub daemon: DaemonConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default)]
    pub alerts: AlertsConfig,
}

/// `[metrics]`: the series the daemon serves at `/metrics`, for runs that
/// end (`sync --once` from a timer or CronJob).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// After each `sync --once`, write them here for node exporter's textfile
    /// collector (`.../textfile_collector/fdsync.prom`), replaced atomically.
    pub textfile: Option<PathBuf>,
}

/// `[alerts]`: where a run's failure, shortfall, quota wall or new drift is
/// POSTed as JSON, at most once per pipeline and cause a UTC day.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsConfig {
    /// The receiver's URL (a Slack or Teams incoming webhook, Alertmanager's
    /// adapter, your own); it may carry a token, so it is never logged.
    pub webhook: Option<String>,
}

/// `[news]`: filters every news request carries (feed, company news, stream).
/// Changing them later applies from the next request on; items already
/// stored stay, and the backfill is not redone.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewsFilters {
    #[serde(default)]
    pub tickers: Vec<String>,
    #[serde(default)]
    pub topics: Vec<String>,
    #[serde(default)]
    pub sources: Vec<String>,
    #[serde(default)]
    pub exclude_sources: Vec<String>,
    #[serde(default)]
    pub exclude_forms: Vec<String>,
    /// Items tagged with these companies (CIKs or platform keys), sent as `cik`.
    #[serde(default)]
    pub ciks: Vec<String>,
    /// A text query over headline and snippet, sent as `q`.
    pub q: Option<String>,
    /// Saved searches: each its own tape of `/news/search` (with the other
    /// filters here, its own `q`) into `news_search_hits`.
    #[serde(default)]
    pub searches: Vec<String>,
    /// Flash headlines only.
    #[serde(default)]
    pub flash: bool,
    /// 0 to 100.
    pub min_importance: Option<u8>,
    /// How a filter with several values goes on the wire.
    #[serde(default)]
    pub list_form: ListForm,
}

/// How a news filter with several values is sent: the specification does
/// not show it, the wire contract chose comma lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListForm {
    /// `tickers=AAPL,MSFT`.
    #[default]
    Comma,
    /// `tickers=AAPL&tickers=MSFT`.
    Repeated,
}

impl NewsFilters {
    /// Whether a filter with several values is sent as one comma list: a
    /// service that reads repeated parameters takes it for one value, and
    /// the tape it serves is empty.
    pub fn sends_comma_lists(&self) -> bool {
        self.list_form == ListForm::Comma
            && [
                &self.tickers,
                &self.topics,
                &self.sources,
                &self.exclude_sources,
                &self.exclude_forms,
                &self.ciks,
            ]
            .iter()
            .any(|values| values.len() > 1)
    }

    /// The filters as query parameters (`&name=value...`), empty when none are set.
    pub fn query(&self) -> String {
        self.query_with(self.q.as_deref())
    }

    /// A saved search's query: the filters, with the search's text as `q`.
    pub fn search_query(&self, search: &str) -> String {
        self.query_with(Some(search))
    }

    fn query_with(&self, text: Option<&str>) -> String {
        let mut q = String::new();
        for (name, values) in [
            ("tickers", &self.tickers),
            ("topics", &self.topics),
            ("sources", &self.sources),
            ("excludeSources", &self.exclude_sources),
            ("excludeForms", &self.exclude_forms),
            ("cik", &self.ciks),
        ] {
            if !values.is_empty() {
                let encoded: Vec<String> = values.iter().map(|v| crate::wire::encode(v.trim())).collect();
                match self.list_form {
                    ListForm::Comma => q.push_str(&format!("&{name}={}", encoded.join(","))),
                    ListForm::Repeated => {
                        for value in encoded {
                            q.push_str(&format!("&{name}={value}"));
                        }
                    }
                }
            }
        }
        if let Some(text) = text.map(str::trim).filter(|t| !t.is_empty()) {
            q.push_str(&format!("&q={}", crate::wire::encode(text)));
        }
        if self.flash {
            q.push_str("&flash=1");
        }
        if let Some(n) = self.min_importance {
            q.push_str(&format!("&minImportance={n}"));
        }
        q
    }
}

const ENV_PREFIX: &str = "FDSYNC_";

impl Config {
    /// Reads `path` and applies `FDSYNC_<SECTION>__<KEY>` overrides from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::from_toml(&text, path, std::env::vars())
    }

    /// Parses `text` (named `path` in errors) with the given environment overrides.
    pub fn from_toml(
        text: &str,
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        };
        let mut doc: toml::Table = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let reads = |doc: &toml::Table| toml::Value::Table(doc.clone()).try_into::<Config>();
        // Whether what is applied so far reads: then a variable that breaks
        // it is named, not the file (which may lack a key a variable gives).
        let mut reads_so_far = reads(&doc).is_ok();
        for (var, value) in env {
            let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let Some((section, key)) = rest.split_once("__") else {
                continue;
            };
            let (section, key) = (section.to_ascii_lowercase(), key.to_ascii_lowercase());
            let table = doc
                .entry(section.clone())
                .or_insert_with(|| toml::Value::Table(Default::default()))
                .as_table_mut()
                .ok_or_else(|| ConfigError::Env {
                    var: var.clone(),
                    message: format!("[{section}] is not a table in {}", path.display()),
                })?;
            table.insert(key.clone(), env_value(&value));
            if reads_so_far && let Err(e) = reads(&doc) {
                return Err(ConfigError::Env {
                    var,
                    message: format!("{value:?} does not fit [{section}] {key}: {}", e.message().trim()),
                });
            }
            reads_so_far = reads_so_far || reads(&doc).is_ok();
        }
        let config: Config = toml::Value::Table(doc)
            .try_into()
            .map_err(|e: toml::de::Error| invalid(e.to_string()))?;
        config.validate(path)?;
        Ok(config)
    }

    /// Reads the credential: under OAuth the access token from
    /// `access_token_file`, else the API key from `api_key_file` or the
    /// variable `api_key_env`.
    pub fn credential(&self) -> Result<Credential, ConfigError> {
        if self.upstream.credential == CredentialKind::Oauth {
            let file = self
                .upstream
                .access_token_file
                .as_ref()
                .ok_or(ConfigError::TokenFileMissing)?;
            let text = std::fs::read_to_string(file).map_err(|source| ConfigError::TokenFile {
                path: file.clone(),
                source,
            })?;
            return Credential::access_token(text.trim(), &format!("file {}", file.display()));
        }
        if let Some(file) = &self.upstream.api_key_file {
            let text = std::fs::read_to_string(file).map_err(|source| ConfigError::KeyFile {
                path: file.clone(),
                source,
            })?;
            return Credential::parse(text.trim(), &format!("file {}", file.display()));
        }
        let var = &self.upstream.api_key_env;
        match std::env::var(var) {
            Ok(value) if !value.trim().is_empty() => Credential::parse(value.trim(), &format!("variable {var}")),
            _ => Err(ConfigError::KeyMissing { var: var.clone() }),
        }
    }
}

/// An override value is TOML when it parses as one (`["A","B"]`, `30`, `true`), else a string.
fn env_value(raw: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()))
}

/// The write-ahead log DuckDB keeps beside `database` while changes are not
/// yet written into the file itself. Here, below the sink, because the
/// configuration's check of the reader copy needs it as the sink does.
pub fn wal_path(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push(".wal");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[upstream]
base_url = "http://127.0.0.1:8080"
[warehouse]
duckdb = "data/fdsync.duckdb"
[universe]
companies = ["AAPL"]
"#;

    /// OAuth without a token file is refused with the key to set.
    #[test]
    fn oauth_without_a_token_file_is_refused() {
        let text = BASE.replace("[warehouse]", "credential = \"oauth\"\n[warehouse]");
        let err = Config::from_toml(&text, Path::new("t.toml"), std::iter::empty()).unwrap_err();
        assert!(err.to_string().contains("upstream.access_token_file"), "{err}");
    }

    /// `cik` goes as the other multi-value filters do, `q` encoded once.
    #[test]
    fn the_news_filters_carry_cik_and_q() {
        let text = BASE.to_owned() + "[news]\nciks = [\"0000789019\", \"TW:2330\"]\nq = \"chip export\"\n";
        let config = Config::from_toml(&text, Path::new("t.toml"), std::iter::empty()).unwrap();
        assert_eq!(config.news.query(), "&cik=0000789019,TW%3A2330&q=chip+export");
        assert!(config.news.sends_comma_lists());
        assert_eq!(
            config.news.search_query("export controls"),
            "&cik=0000789019,TW%3A2330&q=export+controls"
        );
    }

    /// A saved search that is blank, padded or named twice is refused by name.
    #[test]
    fn saved_searches_are_distinct_texts() {
        for (searches, says) in [
            (r#"["tariffs", ""]"#, "\"\""),
            (r#"[" tariffs"]"#, "\" tariffs\""),
            (r#"["tariffs", "tariffs"]"#, "twice"),
        ] {
            let text = BASE.to_owned() + "[news]\nsearches = " + searches + "\n";
            let err = Config::from_toml(&text, Path::new("t.toml"), std::iter::empty()).unwrap_err();
            assert!(
                err.to_string().contains("news.searches") && err.to_string().contains(says),
                "{err}"
            );
        }
    }

    #[test]
    fn a_reader_copy_that_is_the_warehouse_or_its_log_is_refused_by_name() {
        for bad in [
            "data/fdsync.duckdb",
            "./data/fdsync.duckdb",
            "data/fdsync.duckdb.wal",
            "",
        ] {
            let text = BASE.replace("[universe]", &format!("reader_copy = {bad:?}\n[universe]"));
            let e = Config::from_toml(&text, Path::new("t.toml"), std::iter::empty()).unwrap_err();
            assert!(e.to_string().contains("warehouse.reader_copy"), "{bad}: {e}");
        }
        let text = BASE.replace("[universe]", "reader_copy = \"data/fdsync.read.duckdb\"\n[universe]");
        let config = Config::from_toml(&text, Path::new("t.toml"), std::iter::empty()).unwrap();
        assert_eq!(
            config.warehouse.reader_copy,
            Some(PathBuf::from("data/fdsync.read.duckdb"))
        );
    }

    #[test]
    fn env_overrides_take_typed_values() {
        let env = [
            (
                "FDSYNC_UPSTREAM__BASE_URL".to_string(),
                "http://127.0.0.1:9999".to_string(),
            ),
            (
                "FDSYNC_UNIVERSE__COMPANIES".to_string(),
                r#"["MSFT","TW:2330"]"#.to_string(),
            ),
            ("FDSYNC_API_KEY".to_string(), "pk_live_x".to_string()),
        ];
        let config = Config::from_toml(BASE, Path::new("t.toml"), env).unwrap();
        assert_eq!(config.upstream.base_url, "http://127.0.0.1:9999");
        assert_eq!(config.universe.companies, ["MSFT", "TW:2330"]);
    }

    #[test]
    fn an_override_that_does_not_fit_names_the_variable_and_the_type() {
        let env = [("FDSYNC_WAREHOUSE__MEMORY_LIMIT_MB".to_string(), "lots".to_string())];
        let err = Config::from_toml(BASE, Path::new("t.toml"), env)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("FDSYNC_WAREHOUSE__MEMORY_LIMIT_MB")
                && err.contains("expected u64")
                && !err.contains("t.toml"),
            "{err}"
        );
    }

    #[test]
    fn unknown_keys_are_named() {
        let env = [("FDSYNC_UPSTREAM__BASEURL".to_string(), "x".to_string())];
        let err = Config::from_toml(BASE, Path::new("t.toml"), env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("baseurl"), "{err}");
    }

    #[test]
    fn a_memory_limit_below_the_least_is_refused_with_the_least() {
        let at = |mb: u64| {
            let env = [("FDSYNC_WAREHOUSE__MEMORY_LIMIT_MB".to_string(), mb.to_string())];
            Config::from_toml(BASE, Path::new("t.toml"), env)
        };
        let err = at(MIN_MEMORY_LIMIT_MB - 1).unwrap_err().to_string();
        assert!(
            err.contains("warehouse.memory_limit_mb = 31") && err.contains("use 32 or more"),
            "{err}"
        );
        assert_eq!(
            at(MIN_MEMORY_LIMIT_MB).unwrap().warehouse.memory_limit_mb,
            MIN_MEMORY_LIMIT_MB
        );
    }
}
