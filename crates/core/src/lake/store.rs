//! Where the lake lives: a local folder or an object-store URL, opened with
//! credentials from the environment and the machine (never from the config).

use std::sync::{Arc, Once};

use deltalake_core::logstore::{LogStore, LogStoreFactory, StorageConfig, default_logstore, logstore_factories};
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as StorePath;
use url::Url;

use super::LakeError;

/// The lake's root: every table is a Delta table in a folder below it.
#[derive(Clone)]
pub struct LakeRoot {
    /// The root as a URL without a trailing slash (`file:///…`, `s3://bucket/prefix`).
    pub url: Url,
    /// The store the URL's scheme names, at the bucket (or file system) root.
    pub store: Arc<dyn ObjectStore>,
    /// The root's path inside `store`.
    pub path: StorePath,
}

impl std::fmt::Debug for LakeRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LakeRoot")
            .field("url", &self.url.as_str())
            .finish_non_exhaustive()
    }
}

impl LakeRoot {
    /// Opens `parquet_dir`: a path (relative to the working directory) or a
    /// `file://`, `s3://`, `gs://` or `az://` URL.
    ///
    /// Credentials and endpoints come from the usual environment variables
    /// (`AWS_*`, `GOOGLE_*`, `AZURE_*`) and from instance metadata, web identity
    /// or managed identity where the platform offers them.
    ///
    /// # Errors
    /// When the location is malformed, uses another scheme, or the store's
    /// client cannot be configured from the environment.
    pub fn open(parquet_dir: &str) -> Result<LakeRoot, LakeError> {
        Self::open_with_env(parquet_dir, std::env::vars())
    }

    /// Opens `parquet_dir` as [`open`](Self::open) does, with `env` standing
    /// in for the process environment.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with_env(
        parquet_dir: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<LakeRoot, LakeError> {
        let env: Vec<(String, String)> = env.into_iter().collect();
        let bad = |message: String| LakeError::Location {
            location: parquet_dir.to_owned(),
            message,
        };
        crate::config::check_lake_location(parquet_dir).map_err(&bad)?;
        let url = match Url::parse(parquet_dir) {
            Ok(url) if url.scheme().len() > 1 => url,
            // A bare path, or a Windows drive letter parsed as a scheme.
            _ => {
                let path = std::path::absolute(parquet_dir).map_err(|e| bad(e.to_string()))?;
                Url::from_directory_path(&path).map_err(|()| bad("not an absolute path".into()))?
            }
        };
        let mut url = url;
        let trimmed = url.path().trim_end_matches('/').to_owned();
        url.set_path(&trimmed);
        let store: Arc<dyn ObjectStore> = match url.scheme() {
            "file" => {
                let dir = url.to_file_path().map_err(|()| bad("not a local path".into()))?;
                std::fs::create_dir_all(&dir).map_err(|e| bad(format!("creating {}: {e}", dir.display())))?;
                Arc::new(LocalFileSystem::new())
            }
            "s3" | "s3a" => Arc::new(
                configure(&env, "AWS_", AmazonS3Builder::new(), AmazonS3Builder::with_config)
                    .with_url(url.as_str())
                    .build()
                    .map_err(|e| bad(format!("configuring S3 from the environment (AWS_*): {e}")))?,
            ),
            "gs" => Arc::new(
                configure(
                    &env,
                    "GOOGLE_",
                    GoogleCloudStorageBuilder::new(),
                    GoogleCloudStorageBuilder::with_config,
                )
                .with_url(url.as_str())
                .build()
                .map_err(|e| {
                    bad(format!(
                        "configuring Google Cloud Storage from the environment (GOOGLE_*): {e}"
                    ))
                })?,
            ),
            "az" | "abfs" | "abfss" => Arc::new(
                configure(
                    &env,
                    "AZURE_",
                    MicrosoftAzureBuilder::new(),
                    MicrosoftAzureBuilder::with_config,
                )
                .with_url(url.as_str())
                .build()
                .map_err(|e| {
                    bad(format!(
                        "configuring Azure Blob Storage from the environment (AZURE_*): {e}"
                    ))
                })?,
            ),
            other => {
                return Err(bad(format!(
                    "unsupported scheme {other}://; use a local path, file://, s3://, gs:// or az://"
                )));
            }
        };
        // For the cloud schemes the bucket or container is the URL's host and
        // the store is already at it; the path is the prefix inside.
        let path = StorePath::from_url_path(url.path()).map_err(|e| bad(e.to_string()))?;
        register_log_stores();
        Ok(LakeRoot { url, store, path })
    }

    /// The URL of a table's folder.
    pub fn table_url(&self, table: &str) -> Url {
        let mut url = self.url.clone();
        url.set_path(&format!("{}/{table}", url.path().trim_end_matches('/')));
        url
    }

    /// A table's folder inside [`store`](Self::store).
    pub fn table_path(&self, table: &str) -> StorePath {
        self.path.clone().join(table)
    }
}

/// `builder` with every `prefix` variable of `env` it knows as an option
/// (by its lower-case name, as the builders' `from_env` reads them).
fn configure<B, K: std::str::FromStr>(
    env: &[(String, String)],
    prefix: &str,
    builder: B,
    set: impl Fn(B, K, String) -> B,
) -> B {
    env.iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .filter_map(|(k, v)| Some((k.to_ascii_lowercase().parse::<K>().ok()?, v.clone())))
        .fold(builder, |b, (k, v)| set(b, k, v))
}

/// delta-rs commits a log entry with a create-if-absent put, which object_store
/// offers on every store we open (S3 through `If-None-Match`); its own cloud
/// crates would add a DynamoDB lock client we do not need. Registering the
/// default log store for the cloud schemes lets a table use our store.
fn register_log_stores() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for scheme in ["s3://", "s3a://", "gs://", "az://", "abfs://", "abfss://"] {
            let scheme = Url::parse(scheme).expect("scheme URL");
            logstore_factories().insert(scheme, Arc::new(ConditionalPutLogStore));
        }
    });
}

#[derive(Debug)]
struct ConditionalPutLogStore;

impl LogStoreFactory for ConditionalPutLogStore {
    fn with_options(
        &self,
        prefixed_store: deltalake_core::logstore::ObjectStoreRef,
        root_store: deltalake_core::logstore::ObjectStoreRef,
        location: &Url,
        options: &StorageConfig,
    ) -> deltalake_core::DeltaResult<Arc<dyn LogStore>> {
        Ok(default_logstore(prefixed_store, root_store, location, options))
    }
}
