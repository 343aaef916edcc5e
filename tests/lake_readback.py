"""Reads fdsync's lake back with two engines and compares it with the warehouse.

Usage: lake_readback.py ENDPOINT BUCKET PREFIX EXPECTED_DIR WORK_DIR

ENDPOINT/BUCKET/PREFIX name the lake on an S3-compatible server; EXPECTED_DIR
holds <table>/rows.parquet per table, exported from the DuckDB warehouse (the
ground truth). Every object under the prefix is fetched over the S3 API into
WORK_DIR, then each table is read as its Delta log says, by each engine on its
own: the engine replays the log (JSON commits, in version order) to find the
live files, then reads those Parquet files with their hive partition folders.

Neither engine's Delta connector is used: Spark's is a Maven artifact and
DuckDB's a downloaded extension, and this machine reaches neither registry.
Replaying the log is what those connectors do first; the files they would
then read are the ones read here.

Prints one JSON line per table and exits 1 if any engine disagrees with the
warehouse: a row missing or extra (as a multiset, so duplicates count), or a
key seen twice.
"""

import json
import os
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


def duckdb_live_files(con, table_dir):
    commits = log_versions(table_dir)
    listed = ", ".join(f"'{c}'" for c in commits)
    rows = con.execute(
        f"""
        WITH actions AS (
            SELECT regexp_extract(filename, '(\\d+)\\.json$', 1)::BIGINT AS version,
                   "add".path AS added, "remove".path AS removed
            FROM read_json([{listed}], filename = true, format = 'newline_delimited',
                           columns = {{'add': 'STRUCT(path VARCHAR)', 'remove': 'STRUCT(path VARCHAR)'}})
        ),
        last_action AS (
            SELECT coalesce(added, removed) AS path, arg_max(added IS NOT NULL, version) AS live
            FROM actions WHERE coalesce(added, removed) IS NOT NULL GROUP BY 1
        )
        SELECT path FROM last_action WHERE live ORDER BY path
        """
    ).fetchall()
    return [os.path.join(table_dir, r[0]) for r in rows]


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


def main():
    endpoint, bucket, prefix, expected_dir, work = sys.argv[1:6]
    lake = os.path.join(work, "lake")
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
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    failed = False
    for table in sorted(os.listdir(expected_dir)):
        expected_file = os.path.join(expected_dir, table, "rows.parquet")
        table_dir = os.path.join(lake, table)
        key = KEYS[table]
        expected_rows = con.execute(f"SELECT count(*) FROM read_parquet('{expected_file}')").fetchone()[0]
        result = {"table": table, "warehouse_rows": expected_rows}
        if not os.path.isdir(table_dir):
            result["error"] = "no lake table"
            failed |= expected_rows > 0
            print(json.dumps(result), flush=True)
            continue
        expected_cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{expected_file}')").fetchall()]
        col_list = ", ".join(f'"{c}"' for c in expected_cols)

        # DuckDB
        files = duckdb_live_files(con, table_dir)
        if files:
            listed = ", ".join(f"'{f}'" for f in files)
            lake_sql = f"SELECT {col_list} FROM read_parquet([{listed}], hive_partitioning = true, union_by_name = true)"
        else:
            lake_sql = f"SELECT {col_list} FROM read_parquet('{expected_file}') WHERE false"
        truth = f"SELECT {col_list} FROM read_parquet('{expected_file}')"
        missing = con.execute(f"SELECT count(*) FROM ({truth} EXCEPT ALL {lake_sql})").fetchone()[0]
        extra = con.execute(f"SELECT count(*) FROM ({lake_sql} EXCEPT ALL {truth})").fetchone()[0]
        rows = con.execute(f"SELECT count(*) FROM ({lake_sql})").fetchone()[0]
        dupes = 0
        if key:
            keys = ", ".join(f'"{k}"' for k in key)
            dupes = con.execute(f"SELECT count(*) FROM (SELECT {keys} FROM ({lake_sql}) GROUP BY ALL HAVING count(*) > 1)").fetchone()[0]
        result["duckdb"] = {"rows": rows, "missing": missing, "extra": extra, "duplicate_keys": dupes, "files": len(files)}
        failed |= bool(missing or extra or dupes)

        # Spark
        files = spark_live_files(spark, table_dir)
        truth_df = spark.read.parquet(expected_file).select(*expected_cols)
        if files:
            lake_df = spark.read.option("basePath", table_dir).option("mergeSchema", "true").parquet(*files).select(*expected_cols)
        else:
            lake_df = truth_df.limit(0)
        missing = truth_df.exceptAll(lake_df).count()
        extra = lake_df.exceptAll(truth_df).count()
        rows = lake_df.count()
        dupes = lake_df.groupBy(*key).count().where("count > 1").count() if key else 0
        result["spark"] = {"rows": rows, "missing": missing, "extra": extra, "duplicate_keys": dupes, "files": len(files)}
        failed |= bool(missing or extra or dupes)
        print(json.dumps(result), flush=True)
    spark.stop()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
