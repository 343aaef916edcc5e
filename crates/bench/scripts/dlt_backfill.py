"""The issue-33 comparison's other side: dlt mirroring the routes fdsync's
backfill bench reads (each company's payload, the news tape back to the horizon
that holds N items, each company's whole price history), into DuckDB with dlt's
parquet loader, as one process.

    python3 -m venv /tmp/dltenv && /tmp/dltenv/bin/pip install "dlt[duckdb,parquet]==1.31.*"
    /tmp/dltenv/bin/python benches/scripts/dlt_backfill.py \
        --base-url http://127.0.0.1:PORT --companies 2000 --items 1000000 \
        --warehouse /tmp/dlt.duckdb [--append]

Against `fdsync emulator --speed 0 --start 2026-11-25T23:00:00Z
--key pk_live_bench_unlimited_0001=scale:100000000`, as `fdsync-bench
backfill` starts it. Rows are merged on each table's key (a company's cik, an
item's id, a bar's company and time; dlt's default merge strategy), or
appended with `--append`. It prints the rows loaded per table; time and peak
memory are measured from outside (`/usr/bin/time -v`).
"""

import argparse
import datetime
import math
import os
import shutil

import dlt
import requests

# The bench's key, frozen start, tape spacing and page size, as
# src/bin/fdsync/bench/measure/ has them, so both sides read the same pages.
KEY = "pk_live_bench_unlimited_0001"
START = datetime.datetime(2026, 11, 25, 23, 0, tzinfo=datetime.timezone.utc)
SECONDS_PER_ITEM = 45
PAGE_LIMIT = 200


def companies(n):
    return [f"S{i:04d}" for i in range(n)]


def resources(base_url, n_companies, items, disposition):
    session = requests.Session()
    session.headers["X-API-KEY"] = KEY

    def get(path, **params):
        response = session.get(base_url + path, params=params, timeout=60)
        response.raise_for_status()
        return response.json()

    @dlt.resource(name="companies", primary_key="cik", write_disposition=disposition)
    def company_payloads():
        for symbol in companies(n_companies):
            yield get(f"/api/v1/companies/{symbol}")

    @dlt.resource(name="news_items", primary_key="id", write_disposition=disposition)
    def news_items():
        days = max(1, math.ceil(items * SECONDS_PER_ITEM / 86400))
        horizon = START - datetime.timedelta(days=days)
        before = None
        while True:
            params = {"limit": PAGE_LIMIT}
            if before:
                params["before"] = before
            page = get("/api/v1/news/feed", **params)
            page_items = page.get("items") or []
            yield page_items
            seen = [
                datetime.datetime.fromisoformat(i["firstSeenAt"])
                for i in page_items
                if i.get("firstSeenAt")
            ]
            before = page.get("nextCursor")
            if not page_items or (seen and min(seen) < horizon) or not before:
                break

    @dlt.resource(
        name="prices_daily", primary_key=("company_key", "t"), write_disposition=disposition
    )
    def prices_daily():
        for symbol in companies(n_companies):
            page = get(f"/api/v1/companies/{symbol}/prices", range="ALL")
            bars = page.get("bars") or []
            served_symbol = page.get("symbol")
            for bar in bars:
                bar["company_key"] = symbol
                bar["symbol"] = served_symbol
            yield bars

    return company_payloads, news_items, prices_daily


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--companies", type=int, required=True)
    parser.add_argument("--items", type=int, required=True)
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--append", action="store_true")
    args = parser.parse_args()

    pipelines_dir = args.warehouse + ".dlt"
    shutil.rmtree(pipelines_dir, ignore_errors=True)
    if os.path.exists(args.warehouse):
        os.remove(args.warehouse)
    pipeline = dlt.pipeline(
        pipeline_name="fdsync_bench",
        pipelines_dir=pipelines_dir,
        destination=dlt.destinations.duckdb(args.warehouse),
        dataset_name="mirror",
    )
    disposition = "append" if args.append else "merge"
    info = pipeline.run(
        resources(args.base_url.rstrip("/"), args.companies, args.items, disposition),
        loader_file_format="parquet",
    )
    info.raise_on_failed_jobs()
    counts = pipeline.last_trace.last_normalize_info.row_counts
    for table in ("companies", "news_items", "prices_daily"):
        print(f"{table}: {counts.get(table, 0)}")


if __name__ == "__main__":
    main()
