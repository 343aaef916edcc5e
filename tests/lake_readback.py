"""Reads fdsync's lake back with two engines and compares it with the warehouse.

Usage: lake_readback.py ENDPOINT BUCKET PREFIX EXPECTED_DIRS WORK_DIR

ENDPOINT/BUCKET/PREFIX name the lake on an S3-compatible server, or on
Azurite when ENDPOINT is "azure:<connection string>" (BUCKET is then the
container, and only DuckDB reads); EXPECTED_DIRS
(comma-separated) each hold <table>/rows.parquet per table, exported from a
DuckDB warehouse: the ground truth is all of them together (several
warehouses publish into one lake). LAKE_KEYS maps each table to its key;
optional LAKE_TABLES (comma-separated) limits the tables compared, and
LAKE_ENGINES (default "duckdb,spark") the engines.

DuckDB reads each table with its own Delta connector, the `delta` extension
(`delta_scan`, built on delta-kernel-rs), straight from the S3 server through
an `s3` secret. The extension comes from PyPI (duckdb-extension-delta, the
signed binary DuckDB publishes), since this machine cannot reach
extensions.duckdb.org.

Spark reads without its connector: delta-spark and hadoop-aws are Maven
artifacts, and Maven is unreachable here. So every object under the prefix is
fetched over the S3 API into WORK_DIR, Spark replays each table's Delta log
itself (the JSON commits, in version order) to find the live files, and reads
those with its own Parquet reader and their hive partition folders. Replaying
the log is what the connector does first; the files it would then read are the
ones read here.

Prints one JSON line per table and exits 1 if any engine disagrees with the
warehouse: a row missing or extra (as a multiset, so duplicates count), or a
key seen twice.
"""

import json
import os
import re
import sys

import boto3
import duckdb

KEYS = json.loads(os.environ["LAKE_KEYS"])


def mirror(endpoint, bucket, prefix, into):
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    )
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
    for page in pages:
        for obj in page.get("Contents", []):
            target = os.path.join(into, obj["Key"][len(prefix) + 1 :])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            s3.download_file(bucket, obj["Key"], target)


def log_versions(table_dir):
    log = os.path.join(table_dir, "_delta_log")
    commits = sorted(f for f in os.listdir(log) if f.endswith(".json"))
    if any(f.endswith(".checkpoint.parquet") for f in os.listdir(log)):
        # Checkpoints come every 100 commits; these tests make far fewer.
        raise SystemExit(f"{table_dir}: a checkpoint appeared; replay it too")
    return [os.path.join(log, f) for f in commits]


def duckdb_with_delta(endpoint):
    """A DuckDB connection whose `delta_scan` reads the lake on the server at
    `endpoint`, and the URL scheme of that server's lakes."""
    from duckdb_extensions import import_extension

    azure = endpoint.startswith("azure:")
    store = "azure" if azure else "httpfs"
    for extension in (store, "delta"):
        import_extension(extension)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"LOAD {store}")
    con.execute("LOAD delta")
    if azure:
        connection_string = endpoint.split(":", 1)[1]
        # The delta extension hands Azurite's account to delta-kernel, whose
        # object store finds the emulator here (else at port 10000), not in
        # the connection string that DuckDB's own azure reads use.
        blob_endpoint = re.search(r"BlobEndpoint=(https?://[^/;]+)", connection_string).group(1)
        os.environ["AZURITE_BLOB_STORAGE_URL"] = blob_endpoint
        con.execute(f"CREATE SECRET lake (TYPE azure, CONNECTION_STRING '{connection_string}')")
        return con, "az"
    host = endpoint.split("://", 1)[1]
    con.execute(
        f"""CREATE SECRET lake (TYPE s3, PROVIDER config, KEY_ID 'test', SECRET 'test',
            REGION 'us-east-1', ENDPOINT '{host}', URL_STYLE 'path', USE_SSL false)"""
    )
    return con, "s3"


def spark_live_files(spark, table_dir):
    from pyspark.sql import functions as F

    commits = log_versions(table_dir)
    actions = spark.read.json(commits).withColumn(
        "version", F.regexp_extract(F.input_file_name(), r"(\d+)\.json$", 1).cast("long")
    )
    cols = actions.columns
    added = actions.where(F.col("add").isNotNull()).select(F.col("add.path").alias("path"), "version", F.lit(True).alias("live")) if "add" in cols else None
    removed = actions.where(F.col("remove").isNotNull()).select(F.col("remove.path").alias("path"), "version", F.lit(False).alias("live")) if "remove" in cols else None
    parts = [p for p in (added, removed) if p is not None]
    if not parts:
        return []
    every = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    last = every.groupBy("path").agg(F.max_by("live", "version").alias("live"))
    return sorted(os.path.join(table_dir, r.path) for r in last.where("live").collect())


def multiset_difference(truth_df, lake_df):
    """(missing, extra, lake rows) in one Spark job: each distinct row's count in
    the lake minus its count in the truth."""
    from pyspark.sql import functions as F

    both = truth_df.withColumn("_side", F.lit(-1)).unionByName(lake_df.withColumn("_side", F.lit(1)))
    per_row = both.groupBy(*truth_df.columns).agg(
        F.sum("_side").alias("diff"), F.sum(F.when(F.col("_side") == 1, 1).otherwise(0)).alias("in_lake")
    )
    totals = per_row.agg(
        F.sum(F.when(F.col("diff") < 0, -F.col("diff")).otherwise(0)).alias("missing"),
        F.sum(F.when(F.col("diff") > 0, F.col("diff")).otherwise(0)).alias("extra"),
        F.sum("in_lake").alias("rows"),
    ).first()
    return totals.missing or 0, totals.extra or 0, totals.rows or 0


def main():
    endpoint, bucket, prefix, expected_dirs, work = sys.argv[1:6]
    expected_dirs = expected_dirs.split(",")
    engines = os.environ.get("LAKE_ENGINES", "duckdb,spark").split(",")
    tables = sorted({t for d in expected_dirs for t in os.listdir(d)})
    if os.environ.get("LAKE_TABLES"):
        tables = [t for t in tables if t in os.environ["LAKE_TABLES"].split(",")]
    lake = os.path.join(work, "lake")
    spark = start_spark(lake, endpoint, bucket, prefix) if "spark" in engines else None
    con, scheme = duckdb_with_delta(endpoint)
    failed = False
    for table in tables:
        expected_files = [os.path.join(d, table, "rows.parquet") for d in expected_dirs]
        expected_files = [f for f in expected_files if os.path.exists(f)]
        result, table_failed = compare(con, spark, engines, table, expected_files, lake, f"{scheme}://{bucket}/{prefix}")
        failed |= table_failed
        print(json.dumps(result), flush=True)
    if spark is not None:
        spark.stop()
    sys.exit(1 if failed else 0)


def start_spark(lake, endpoint, bucket, prefix):
    mirror(endpoint, bucket, prefix, lake)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("fdsync-lake-readback")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # Tables of thousands of rows: 200 shuffle partitions would be 200 tasks each.
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def compare(con, spark, engines, table, expected_files, lake, lake_url):
    """One table's result line, and whether any engine disagreed."""
    key = KEYS[table]
    listed = ", ".join(f"'{f}'" for f in expected_files)
    truth = f"read_parquet([{listed}], union_by_name = true)"
    expected_rows = con.execute(f"SELECT count(*) FROM {truth}").fetchone()[0]
    result = {"table": table, "warehouse_rows": expected_rows}
    if con.execute(f"SELECT count(*) FROM glob('{lake_url}/{table}/_delta_log/*.json')").fetchone()[0] == 0:
        result["error"] = "no lake table"
        return result, expected_rows > 0
    expected_cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {truth}").fetchall()]
    col_list = ", ".join(f'"{c}"' for c in expected_cols)
    failed = False

    if "duckdb" in engines:
        # Through its Delta connector, from the object store itself.
        scan = f"delta_scan('{lake_url}/{table}'"
        lake_sql = f"SELECT {col_list} FROM {scan})"
        truth_sql = f"SELECT {col_list} FROM {truth}"
        files = con.execute(f"SELECT count(DISTINCT filename) FROM {scan}, filename = true)").fetchone()[0]
        missing = con.execute(f"SELECT count(*) FROM ({truth_sql} EXCEPT ALL {lake_sql})").fetchone()[0]
        extra = con.execute(f"SELECT count(*) FROM ({lake_sql} EXCEPT ALL {truth_sql})").fetchone()[0]
        rows = con.execute(f"SELECT count(*) FROM ({lake_sql})").fetchone()[0]
        dupes = 0
        if key:
            keys = ", ".join(f'"{k}"' for k in key)
            dupes = con.execute(f"SELECT count(*) FROM (SELECT {keys} FROM ({lake_sql}) GROUP BY ALL HAVING count(*) > 1)").fetchone()[0]
        result["duckdb"] = {"rows": rows, "missing": missing, "extra": extra, "duplicate_keys": dupes, "files": files}
        failed |= bool(missing or extra or dupes)

    if "spark" in engines:
        table_dir = os.path.join(lake, table)
        files = spark_live_files(spark, table_dir)
        truth_df = spark.read.option("mergeSchema", "true").parquet(*expected_files).select(*expected_cols)
        if files:
            lake_df = spark.read.option("basePath", table_dir).option("mergeSchema", "true").parquet(*files).select(*expected_cols)
        else:
            lake_df = truth_df.limit(0)
        missing, extra, rows = multiset_difference(truth_df, lake_df)
        dupes = lake_df.groupBy(*key).count().where("count > 1").count() if key else 0
        result["spark"] = {"rows": rows, "missing": missing, "extra": extra, "duplicate_keys": dupes, "files": len(files)}
        failed |= bool(missing or extra or dupes)
    return result, failed


if __name__ == "__main__":
    main()
