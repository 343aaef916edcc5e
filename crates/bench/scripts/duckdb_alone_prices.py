"""DuckDB alone, loading price bars in the pattern of fdsync's sink: 10
companies' 5,000 bars a statement, `INSERT ... ON CONFLICT` into a table of
the same columns with its primary key, at a small memory limit, one thread
(the merge's SET list is shorter than the sink's; the rows are generated in
SQL, not parsed from responses). Prints RSS and
`duckdb_memory()` every 400 companies.

    pip install duckdb==2.0.0   # the version fdsync bundles
    python3 benches/scripts/duckdb_alone_prices.py pk 2000 48MiB
    python3 benches/scripts/duckdb_alone_prices.py plain 2000 48MiB   # no key
"""
import duckdb, sys, os, time
pk = sys.argv[1] == "pk"
companies = int(sys.argv[2])
limit = sys.argv[3] if len(sys.argv) > 3 else "48MiB"
path = os.path.join(os.environ.get('TMPDIR', '/tmp'), f'duckdb_alone_{sys.argv[1]}.duckdb')
for f in (path, path + ".wal"):
    if os.path.exists(f): os.remove(f)
con = duckdb.connect(path)
con.execute(f"SET memory_limit='{limit}'; SET threads=1")
key = ", PRIMARY KEY (company_key, date)" if pk else ""
con.execute(f"""CREATE TABLE prices (company_key VARCHAR NOT NULL, date DATE NOT NULL, symbol VARCHAR, t_ms BIGINT,
 open DOUBLE, high DOUBLE, low DOUBLE, close DOUBLE, volume BIGINT, raw JSON, _fetched_at TIMESTAMP, _run_id VARCHAR, _route VARCHAR, _commit_seq BIGINT{key})""")
def rss():
    d = {}
    for l in open("/proc/self/status"):
        k, v = l.split(":", 1)
        if k in ("VmRSS", "VmHWM", "RssAnon"): d[k] = int(v.split()[0]) // 1024
    return d
t0 = time.time()
for g in range(0, companies, 10):
    con.execute(f"""CREATE OR REPLACE TEMP TABLE s AS SELECT 'S'||lpad(c::VARCHAR,4,'0') company_key, DATE '2000-01-01' + i::INT date,
      'S'||lpad(c::VARCHAR,4,'0') symbol, i*86400000 t_ms, 1.0+i open, 2.0+i high, 0.5+i low, 1.5+i close, i*100 volume,
      '{{"t":' || i || ',"o":1.0,"h":2.0,"l":0.5,"c":1.5,"v":100}}' raw, now()::TIMESTAMP _fetched_at, 'run-1' _run_id, '/v1/prices' _route
      FROM range({g}, {g}+10) t(c), range(5000) u(i)""")
    if pk:
        con.execute("""INSERT INTO prices AS t SELECT *, 1 FROM (SELECT * FROM s QUALIFY row_number() OVER (PARTITION BY company_key, date ORDER BY rowid DESC) = 1) s
          ON CONFLICT (company_key, date) DO UPDATE SET close = excluded.close, raw = excluded.raw WHERE NOT (excluded.close IS NOT DISTINCT FROM t.close)""")
    else:
        con.execute("INSERT INTO prices SELECT *, 1 FROM s")
    if (g // 10) % 40 == 39:
        mem = con.execute("SELECT tag, round(memory_usage_bytes/1048576,1) FROM duckdb_memory() WHERE memory_usage_bytes > 0 ORDER BY 2 DESC").fetchall()
        print(g + 10, round(time.time() - t0, 1), rss(), mem, flush=True)
print(con.execute("select count(*) from prices").fetchone(), rss())
