//! The lake on a real S3-compatible server (moto's, started on loopback):
//! published from the warehouse, merged as data changes, survives kill -9
//! mid-publish, and read back by Spark and by DuckDB as exactly the rows the
//! warehouse holds.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fdsync_core::feeds::catalogue;
use fdsync_core::lake::Lake;
use fdsync_core::sink::SinkHandle;
use fdsync_emulator::PlanLimits;

use crate::util::{Harness, TEST_KEY, repo};

/// moto's S3 server on a free loopback port, stopped when dropped.
pub(crate) struct S3Server {
    child: std::process::Child,
    endpoint: String,
}

impl S3Server {
    pub(crate) async fn start() -> S3Server {
        let port = free_port();
        let child = std::process::Command::new(crate::tools::venv_bin("moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server is needed (`sh tests/run` installs it in tests/.venv)");
        let endpoint = format!("http://127.0.0.1:{port}");
        let server = S3Server { child, endpoint };
        let http = reqwest::Client::new();
        let started = Instant::now();
        while http.get(&server.endpoint).send().await.is_err() {
            assert!(started.elapsed() < Duration::from_secs(30), "moto_server did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    }

    /// What fdsync reads from its environment to reach this server.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", self.endpoint.as_str()),
            ("AWS_ALLOW_HTTP", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    pub(crate) async fn create_bucket(&self, bucket: &str) {
        let status = reqwest::Client::new()
            .put(format!("{}/{bucket}", self.endpoint))
            .send()
            .await
            .unwrap()
            .status();
        assert!(status.is_success(), "creating bucket {bucket}: {status}");
    }

    /// Every object key under `prefix`.
    async fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut url = format!("{}/{bucket}?list-type=2&prefix={prefix}", self.endpoint);
            if let Some(t) = &token {
                url.push_str(&format!(
                    "&continuation-token={}",
                    url::form_urlencoded::byte_serialize(t.as_bytes()).collect::<String>()
                ));
            }
            let body = reqwest::get(&url).await.unwrap().text().await.unwrap();
            keys.extend(xml_values(&body, "Key"));
            token = xml_values(&body, "NextContinuationToken").into_iter().next();
            if token.is_none() {
                return keys;
            }
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Azurite, Azure Blob Storage's emulator (npm, `tests/package.json`), on a
/// free loopback port with a container `lake`; stopped when dropped.
struct AzureServer {
    child: std::process::Child,
    port: u16,
}

/// Azurite's well-known development account (documented, not a secret).
const AZURITE_ACCOUNT: &str = "devstoreaccount1";
const AZURITE_KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

impl AzureServer {
    async fn start() -> AzureServer {
        // A port found free can be taken before Azurite binds it, and a busy
        // machine can take many seconds to start Node: a server that exits is
        // tried again on another port, and its own words are kept for the failure.
        let azurite = repo().join("tests/node_modules/.bin/azurite-blob");
        let mut said = String::new();
        for _attempt in 0..3 {
            let port = free_port();
            let log = tempfile::NamedTempFile::new().unwrap();
            let child = std::process::Command::new(&azurite)
                .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
                .args(["--inMemoryPersistence", "--skipApiVersionCheck"])
                .stdout(log.reopen().unwrap())
                .stderr(log.reopen().unwrap())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "{}: {e} (npm ci --prefix tests installs Azurite; .ci/run does)",
                        azurite.display()
                    )
                });
            let mut server = AzureServer { child, port };
            let started = Instant::now();
            let up = loop {
                if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                    break true;
                }
                if server.child.try_wait().unwrap().is_some() {
                    break false;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(180),
                    "Azurite did not listen on port {port} within 180 s: {}",
                    std::fs::read_to_string(log.path()).unwrap_or_default()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            if up {
                return server.with_container().await;
            }
            said = std::fs::read_to_string(log.path()).unwrap_or_default();
        }
        panic!("Azurite exited three times before listening; it said: {said}");
    }

    /// The server with an empty container `lake`.
    async fn with_container(self) -> AzureServer {
        // Creating a container needs a signed request: the Azure SDK signs it.
        let made = std::process::Command::new(crate::tools::venv_bin("python3"))
            .args([
                "-c",
                "import sys; from azure.storage.blob import BlobServiceClient as C; \
                 C.from_connection_string(sys.argv[1]).create_container('lake')",
                &self.connection_string(),
            ])
            .output()
            .expect("python3 with azure-storage-blob (tests/requirements.txt)");
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
        self
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/{AZURITE_ACCOUNT}", self.port)
    }

    fn connection_string(&self) -> String {
        format!(
            "DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};BlobEndpoint={};",
            self.endpoint()
        )
    }

    /// What fdsync reads from its environment to reach this server: a storage
    /// account at a custom endpoint, as for any Azure-compatible store.
    fn env(&self) -> Vec<(String, String)> {
        [
            ("AZURE_STORAGE_ACCOUNT_NAME", AZURITE_ACCOUNT.to_owned()),
            ("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY.to_owned()),
            ("AZURE_STORAGE_ENDPOINT", self.endpoint()),
            ("AZURE_ALLOW_HTTP", "true".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

impl Drop for AzureServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn xml_values(body: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    body.split(&open)
        .skip(1)
        .filter_map(|rest| rest.split(&close).next().map(str::to_owned))
        .collect()
}

/// Exports every warehouse table to `dir/<table>/rows.parquet`, as the lake holds
/// it (JSON as text): the ground truth the engines are compared with.
async fn export_truth(sink: &SinkHandle, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let dir = dir.to_owned();
    sink.call(move |s| {
        for table in catalogue() {
            let cols: Vec<String> = table
                .all_columns()
                .map(|c| match c.ty {
                    fdsync_core::tables::ColType::Json => format!("CAST(\"{0}\" AS VARCHAR) AS \"{0}\"", c.name),
                    _ => format!("\"{}\"", c.name),
                })
                .chain(std::iter::once("_commit_seq".to_owned()))
                .collect();
            // In a folder per table: Spark skips files whose names start with `_`.
            let folder = dir.join(table.name);
            std::fs::create_dir_all(&folder).unwrap();
            let file = folder.join("rows.parquet");
            s.connection()
                .execute_batch(&format!(
                    "COPY (SELECT {} FROM \"{}\") TO '{}' (FORMAT parquet)",
                    cols.join(", "),
                    table.name,
                    file.display()
                ))
                .unwrap();
        }
    })
    .await
    .unwrap();
}

/// Runs the Spark and DuckDB read-back; returns its per-table results.
fn read_back(s3: &S3Server, prefix: &str, truth: &Path, work: &Path) -> BTreeMap<String, serde_json::Value> {
    read_back_with(&s3.endpoint, prefix, &[truth], work, &[])
}

/// The read-back of the lake `prefix` in bucket (or container) `lake` at
/// `endpoint`, against several warehouses' rows together, with the script's
/// `LAKE_*` options (engines, tables).
fn read_back_with(
    endpoint: &str,
    prefix: &str,
    truths: &[&Path],
    work: &Path,
    options: &[(&str, &str)],
) -> BTreeMap<String, serde_json::Value> {
    let keys: BTreeMap<&str, &[&str]> = catalogue().map(|t| (t.name, t.key)).collect();
    let truths: Vec<String> = truths.iter().map(|p| p.display().to_string()).collect();
    let out = std::process::Command::new(crate::tools::venv_bin("python3"))
        .arg(repo().join("tests/lake_readback.py"))
        .args([endpoint, "lake", prefix])
        .arg(truths.join(","))
        .arg(work)
        .env("LAKE_KEYS", serde_json::to_string(&keys).unwrap())
        .envs(options.iter().copied())
        .output()
        .expect("tests/.venv with pyspark, duckdb and boto3 (`sh tests/run` makes it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    let results: BTreeMap<String, serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| (v["table"].as_str().unwrap_or_default().to_owned(), v))
        .collect();
    assert!(
        out.status.success(),
        "the engines disagree with the warehouse:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    results
}

fn rows(results: &BTreeMap<String, serde_json::Value>, table: &str, engine: &str) -> u64 {
    results[table][engine]["rows"].as_u64().unwrap_or_default()
}

/// moto's server with an empty bucket `lake`, and a harness over three
/// companies (one Taiwanese, for monthly revenue) and two countries.
async fn s3_and_harness() -> (S3Server, Harness) {
    let s3 = S3Server::start().await;
    s3.create_bucket("lake").await;
    let mut h = Harness::new(PlanLimits::build(), &["AAPL", "MSFT", "TW:2330"]).await;
    h.restart(|c| c.universe.countries = vec!["US".into(), "TW".into()])
        .await;
    (s3, h)
}

const PIPELINES: &[&str] = &[
    "companies",
    "prices",
    "dividends",
    "macro",
    "news",
    "news_sources",
    "events_wire",
    "regulation",
    "monthly_revenue",
    "news_topics",
    "indices",
    "coverage",
    "geo",
];

/// Two syncs a simulated day apart, each published: the second merges
/// restated and new rows into the partitions they belong to. Spark and DuckDB
/// then read every table, and each gets exactly the warehouse's rows.
#[tokio::test]
async fn spark_and_duckdb_read_exactly_the_warehouse_rows_from_the_lake_on_s3() {
    crate::tools::needs!(Python, Java);
    let (s3, h) = s3_and_harness().await;
    let work = tempfile::tempdir().unwrap();
    let lake = Lake::open_with_env("s3://lake/wh", work.path().join("scratch"), s3.env()).unwrap();
    let pipelines = h.only(PIPELINES);

    let (_, result) = h.syncer.run_once(&pipelines).await;
    result.unwrap();
    let first = lake.publish(&h.syncer.sink).await.unwrap();
    let published = |report: &fdsync_core::lake::PublishReport, table: &str| {
        report.tables.iter().find(|t| t.table == table).cloned()
    };
    let news = published(&first, "news_items").expect("news published");
    assert!(
        news.rows > 0 && news.files_added > 0 && news.files_removed == 0,
        "{news:?}"
    );

    h.clock.as_sim().unwrap().advance(Duration::from_secs(26 * 3600));
    let (_, result) = h.syncer.run_once(&pipelines).await;
    result.unwrap();
    let second = lake.publish(&h.syncer.sink).await.unwrap();
    let prices = published(&second, "prices_daily").expect("a day later, prices changed");
    assert!(
        prices.files_removed > 0,
        "the touched year's file was rewritten: {prices:?}"
    );
    assert_eq!(
        published(&second, "macro_series").map(|t| t.rows),
        None,
        "an unchanged table is not published again"
    );
    let third = lake.publish(&h.syncer.sink).await.unwrap();
    assert!(third.tables.is_empty(), "nothing new, nothing published: {third:?}");

    // Each publish of an append-only table added a file per partition touched:
    // compaction leaves one per partition; vacuum then deletes every file no
    // version keeps (retention 0 here; the CLI insists on at least an hour).
    let compacted = lake.compact(2).await.unwrap();
    let revisions = compacted
        .iter()
        .find(|t| t.table == "news_headline_revisions")
        .expect("compacted");
    assert!(revisions.files_removed > revisions.files_added, "{revisions:?}");
    assert!(lake.compact(2).await.unwrap().is_empty(), "one file per partition left");
    let vacuumed = lake.vacuum(chrono::Duration::zero(), false).await.unwrap();
    let deleted: usize = vacuumed.iter().map(|t| t.files.len()).sum();
    assert!(
        deleted >= revisions.files_removed + prices.files_removed,
        "{vacuumed:?}"
    );

    export_truth(&h.syncer.sink, &work.path().join("truth")).await;
    let results = read_back(&s3, "wh", &work.path().join("truth"), work.path());
    for table in [
        "news_items",
        "prices_daily",
        "macro_observations",
        "events",
        "_sync_runs",
    ] {
        let truth = h.int(&format!("SELECT count(*) FROM \"{table}\"")).await as u64;
        assert!(truth > 0, "{table} has rows");
        assert_eq!(rows(&results, table, "spark"), truth, "{table} read by Spark");
        assert_eq!(rows(&results, table, "duckdb"), truth, "{table} read by DuckDB");
    }
}

/// `fdsync lake publish` killed with SIGKILL in the middle of publishing
/// (some tables committed, others not), then run again: every engine reads
/// exactly the warehouse, and no data file is left that the log does not list.
#[tokio::test]
async fn a_publish_killed_mid_write_then_rerun_leaves_exactly_the_warehouse_and_no_orphans() {
    crate::tools::needs!(Python, Java);
    let (s3, h) = s3_and_harness().await;
    let (_, result) = h.syncer.run_once(&h.only(PIPELINES)).await;
    result.unwrap();
    let work = tempfile::tempdir().unwrap();
    let truth = work.path().join("truth");
    let warehouse = h.syncer.config.warehouse.duckdb.clone();
    h.syncer.sink.close().await;

    let config = work.path().join("fdsync.toml");
    let text = crate::util::config_text("http://127.0.0.1:9", &warehouse, &["AAPL"])
        .replace("[warehouse]\n", "[warehouse]\nparquet_dir = \"s3://lake/crash\"\n");
    std::fs::write(&config, text).unwrap();
    let publish = || {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_fdsync"));
        cmd.arg("--config")
            .arg(&config)
            .args(["lake", "publish"])
            .env("FDSYNC_TEST_KEY_UNSET", TEST_KEY)
            .envs(s3.env())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    };

    let mut victim = publish().spawn().unwrap();
    // Killed once the first table's rows are committed and before the last's.
    let started = Instant::now();
    loop {
        let keys = s3.keys("lake", "crash/").await;
        if keys.iter().any(|k| k.ends_with("_delta_log/00000000000000000001.json")) {
            break;
        }
        assert!(
            victim.try_wait().unwrap().is_none(),
            "the publish finished before it could be killed"
        );
        assert!(started.elapsed() < Duration::from_secs(60), "no table was committed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    victim.start_kill().unwrap();
    let status = victim.wait().await.unwrap();
    assert_eq!(status.code(), None, "killed by a signal");
    let committed = || async {
        s3.keys("lake", "crash/")
            .await
            .iter()
            .filter(|k| k.ends_with("_delta_log/00000000000000000001.json"))
            .count()
    };
    let committed_before = committed().await;

    let rerun = publish().output().await.unwrap();
    assert!(rerun.status.success(), "{}", String::from_utf8_lossy(&rerun.stderr));
    assert!(committed().await > committed_before, "the kill landed mid-publish");
    // The truth is the warehouse as it is now (the publish recorded its writer id there).
    let sink = SinkHandle::open_duckdb(warehouse.clone()).await.unwrap();
    export_truth(&sink, &truth).await;
    sink.close().await;
    let results = read_back(&s3, "crash", &truth, work.path());
    let truth_rows = |table: &str| results[table]["warehouse_rows"].as_u64().unwrap();
    for table in ["news_items", "prices_daily", "macro_observations"] {
        assert!(truth_rows(table) > 0);
        assert_eq!(
            rows(&results, table, "spark"),
            truth_rows(table),
            "{table} read by Spark"
        );
        assert_eq!(
            rows(&results, table, "duckdb"),
            truth_rows(table),
            "{table} read by DuckDB"
        );
    }
    // Every data file in the bucket is live: a file uploaded before the kill
    // was overwritten by the rerun's file of the same name.
    let data_files = s3
        .keys("lake", "crash/")
        .await
        .into_iter()
        .filter(|k| k.ends_with(".parquet") && !k.contains("_delta_log"))
        .count();
    let live: u64 = results
        .values()
        .map(|r| r["duckdb"]["files"].as_u64().unwrap_or_default())
        .sum();
    assert_eq!(data_files as u64, live, "orphaned data files");
    let scratch = Lake::scratch_beside(&warehouse);
    let left: Vec<_> = std::fs::read_dir(&scratch)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "temporary files left in {}: {left:?}",
        scratch.display()
    );
}

/// Two instances, each with its own warehouse and its own share of the
/// universe, publish into one lake at the same moment. Every table they both
/// write is created once and committed by both (a commit that meets the
/// other's is published again; the test prints which), and
/// DuckDB's Delta connector reads each instance's rows exactly once.
#[tokio::test]
async fn two_instances_publishing_into_one_lake_at_once_lose_and_repeat_nothing() {
    crate::tools::needs!(Python);
    let s3 = S3Server::start().await;
    s3.create_bucket("lake").await;
    let first = Harness::new(PlanLimits::build(), &["AAPL"]).await;
    let second = Harness::new(PlanLimits::build(), &["MSFT", "TW:2330"]).await;
    // News and its sources belong to the first instance alone (docs/lake.md).
    let (_, result) = first
        .syncer
        .run_once(&first.only(&["companies", "prices", "dividends", "news", "news_sources"]))
        .await;
    result.unwrap();
    let (_, result) = second
        .syncer
        .run_once(&second.only(&["companies", "prices", "dividends"]))
        .await;
    result.unwrap();

    let work = tempfile::tempdir().unwrap();
    let lake_of = |name: &str| Lake::open_with_env("s3://lake/shared", work.path().join(name), s3.env()).unwrap();
    let (lake_a, lake_b) = (lake_of("scratch-a"), lake_of("scratch-b"));
    let (a, b) = tokio::join!(lake_a.publish(&first.syncer.sink), lake_b.publish(&second.syncer.sink));
    let (a, b) = (a.unwrap(), b.unwrap());
    let retried: Vec<_> = a
        .tables
        .iter()
        .chain(&b.tables)
        .filter(|t| t.attempts > 1)
        .map(|t| (t.table, t.attempts))
        .collect();
    eprintln!("tables published again after another writer's commit: {retried:?}");

    let truth_a = work.path().join("truth-a");
    let truth_b = work.path().join("truth-b");
    export_truth(&first.syncer.sink, &truth_a).await;
    export_truth(&second.syncer.sink, &truth_b).await;
    // Checkpoints and quota are per instance and keyed alike in both; the
    // tables compared are those whose keys each instance owns, and the logs.
    let results = read_back_with(
        &s3.endpoint,
        "shared",
        &[&truth_a, &truth_b],
        work.path(),
        &[
            ("LAKE_ENGINES", "duckdb"),
            (
                "LAKE_TABLES",
                "companies,prices_daily,dividends,news_items,news_sources,_sync_runs,_sync_requests",
            ),
        ],
    );
    for table in ["companies", "prices_daily", "dividends", "_sync_runs"] {
        let a = first.int(&format!("SELECT count(*) FROM \"{table}\"")).await as u64;
        let b = second.int(&format!("SELECT count(*) FROM \"{table}\"")).await as u64;
        assert!(a > 0 && b > 0, "{table}: both instances hold rows");
        assert_eq!(
            rows(&results, table, "duckdb"),
            a + b,
            "{table} holds both instances' rows"
        );
    }
}

/// The same lake on Azure Blob Storage (Azurite, on loopback): published,
/// merged a simulated day later, and read back by DuckDB's Delta connector
/// from the container as exactly the warehouse's rows.
#[tokio::test]
async fn the_lake_on_azure_blob_storage_reads_back_exactly_the_warehouse() {
    crate::tools::needs!(Python, Node);
    let azure = AzureServer::start().await;
    let h = Harness::new(PlanLimits::build(), &["AAPL", "MSFT"]).await;
    let work = tempfile::tempdir().unwrap();
    let lake = Lake::open_with_env("az://lake/wh", work.path().join("scratch"), azure.env()).unwrap();
    let pipelines = h.only(&["companies", "prices", "dividends", "news"]);
    for day in 0..2 {
        if day > 0 {
            h.clock.as_sim().unwrap().advance(Duration::from_secs(26 * 3600));
        }
        let (_, result) = h.syncer.run_once(&pipelines).await;
        result.unwrap();
        let report = lake.publish(&h.syncer.sink).await.unwrap();
        assert!(
            report.tables.iter().any(|t| t.table == "prices_daily"),
            "day {day}: prices published: {report:?}"
        );
    }
    export_truth(&h.syncer.sink, &work.path().join("truth")).await;
    let results = read_back_with(
        &format!("azure:{}", azure.connection_string()),
        "wh",
        &[&work.path().join("truth")],
        work.path(),
        &[("LAKE_ENGINES", "duckdb")],
    );
    for table in ["prices_daily", "dividends", "news_items", "_sync_runs"] {
        let truth = h.int(&format!("SELECT count(*) FROM \"{table}\"")).await as u64;
        assert!(truth > 0, "{table} has rows");
        assert_eq!(rows(&results, table, "duckdb"), truth, "{table} read by DuckDB");
    }
}

/// A plain Parquet reader: reads the dataset at argv[1] until the file
/// argv[2] exists, then once more, printing the digest of each read's rows
/// (as a multiset) and, last, `final <digest>`. A file gone between listing
/// and reading (a pruned snapshot) is read again, counted as a retry.
const PLAIN_READER: &str = r#"
import hashlib, os, sys
import pyarrow.dataset as ds
COLUMNS = ["company_key", "date", "close", "volume"]
def digest(path):
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table(columns=COLUMNS)
    rows = sorted(zip(*[table.column(c).to_pylist() for c in COLUMNS]))
    return hashlib.sha256(repr(rows).encode()).hexdigest()
def read(path):
    while True:
        try:
            return digest(path)
        except FileNotFoundError:
            print("retry", flush=True)
if sys.argv[1] == "--digest":
    for path in sys.argv[2:]:
        print(path, digest(path))
    sys.exit(0)
while not os.path.exists(sys.argv[2]):
    print(read(sys.argv[1]), flush=True)
print("final", read(sys.argv[1]), flush=True)
"#;

/// With `parquet_snapshots`, a reader of plain Parquet folders (pyarrow's
/// dataset, no Delta log) pointed at `_current/<table>` sees the
/// warehouse's rows as a multiset at every moment: while publishes rewrite
/// partitions, every read is the warehouse as of one publish, and after the
/// last, the last. Read the same way, the table's own folder counts the
/// superseded files too, which is what the snapshots are for.
#[tokio::test]
async fn plain_parquet_readers_see_the_warehouse_during_and_after_publishes() {
    crate::tools::needs!(Python);
    let h = Harness::new(PlanLimits::build(), &["MSFT", "AAPL", "TW:2330"]).await;
    let work = tempfile::tempdir().unwrap();
    let lake_dir = work.path().join("lake");
    let lake = Lake::open(&lake_dir.display().to_string(), work.path().join("scratch"))
        .unwrap()
        .with_snapshots(true)
        .unwrap();
    let pipelines = h.only(&["companies", "prices"]);
    let states = work.path().join("states");
    std::fs::create_dir_all(&states).unwrap();
    let sink = h.syncer.sink.clone();
    let export = |n: usize| {
        let copy = format!(
            "COPY (SELECT company_key, date, close, volume FROM prices_daily) TO '{}' (FORMAT parquet)",
            states.join(format!("{n}.parquet")).display()
        );
        let sink = sink.clone();
        async move {
            sink.call(move |s| s.connection().execute_batch(&copy))
                .await
                .unwrap()
                .unwrap()
        }
    };
    let (_, result) = h.syncer.run_once(&pipelines).await;
    result.unwrap();
    lake.publish(&h.syncer.sink).await.unwrap();
    export(0).await;

    let current = fdsync_core::lake::snapshot::current(&lake_dir, "prices_daily");
    let stop = work.path().join("stop");
    let reader = std::process::Command::new(crate::tools::venv_bin("python3"))
        .args(["-c", PLAIN_READER])
        .arg(&current)
        .arg(&stop)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 with pyarrow (tests/requirements.txt)");
    let mut rewritten = 0;
    for n in 1..=4 {
        h.clock.as_sim().unwrap().advance(Duration::from_secs(26 * 3600));
        let (_, result) = h.syncer.run_once(&pipelines).await;
        result.unwrap();
        let report = lake.publish(&h.syncer.sink).await.unwrap();
        rewritten += report
            .tables
            .iter()
            .filter(|t| t.table == "prices_daily")
            .map(|t| t.files_removed)
            .sum::<usize>();
        export(n).await;
    }
    std::fs::write(&stop, "").unwrap();
    let out = reader.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(rewritten > 0, "the publishes rewrote partitions");

    let digests = std::process::Command::new(crate::tools::venv_bin("python3"))
        .args(["-c", PLAIN_READER, "--digest"])
        .args((0..=4).map(|n| states.join(format!("{n}.parquet"))))
        .arg(lake_dir.join("prices_daily"))
        .output()
        .unwrap();
    let digests = String::from_utf8_lossy(&digests.stdout).into_owned();
    let digests: Vec<&str> = digests.lines().map(|l| l.split(' ').nth(1).unwrap()).collect();
    let (table_folder, states) = digests.split_last().unwrap();
    let reads: Vec<&str> = said
        .lines()
        .filter(|l| *l != "retry" && !l.starts_with("final"))
        .collect();
    assert!(!reads.is_empty(), "the reader read while publishing: {said}");
    for read in &reads {
        assert!(states.contains(read), "a read saw no published state: {read}\n{said}");
    }
    println!(
        "plain reader: {} reads during 4 publishes that rewrote {rewritten} files, each one published state; {} retries",
        reads.len(),
        said.lines().filter(|l| *l == "retry").count()
    );
    let last = said.lines().last().unwrap();
    assert_eq!(
        last,
        format!("final {}", states[4]),
        "after the publishes: the warehouse"
    );
    assert_ne!(
        *table_folder, states[4],
        "the table's own folder, read plainly, holds superseded files"
    );
}
