//! The workspace's shape: every feed with all a route family needs, the
//! generated docs current, and the product binary without the bench.

use std::collections::HashSet;

use fdsync_core::feeds::FEEDS;
use fdsync_emulator::{self as emulator, EmulatorConfig};

use crate::util::repo;

/// The `.rs` files directly in each of `dirs` (paths from the checkout), sorted.
fn rust_files(dirs: &[&str]) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = dirs
        .iter()
        .flat_map(|dir| std::fs::read_dir(repo().join(dir)).unwrap())
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    files
}

/// The feeds some test holds against the emulator's ground truth: each such
/// test's doc comment has a `/// Ground truth: a, b.` line. They live under
/// tests/ (a scenario across feeds) or in the feed's module.
fn ground_truth_feeds() -> HashSet<String> {
    let mut feeds = HashSet::new();
    for path in rust_files(&["tests", "crates/core/src/feeds"]) {
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            if let Some(names) = line.trim().strip_prefix("/// Ground truth: ") {
                feeds.extend(names.trim_end_matches('.').split(',').map(|n| n.trim().to_owned()));
            }
        }
    }
    feeds
}

/// A feed's route with its placeholders filled: a company, a filing, a
/// country and a layer the emulator may or may not hold, which is enough to
/// tell a route it serves from one it does not.
fn filled(route: &str) -> String {
    route
        .replace("{company}", "MSFT")
        .replace("{accession}", "0000789019-26-000001")
        .replace("{country}", "US")
        .replace("{layers}", "ports")
}

/// What docs/feeds.md lists for a new route family, checked for every feed:
/// the emulator serves its route, a pipeline file reads it, the lake's
/// partition table has each of its tables, and a test holds its tables
/// against the emulator's ground truth.
#[tokio::test]
async fn every_feed_has_an_emulator_route_a_pipeline_file_a_lake_row_and_a_ground_truth_test() {
    let running = emulator::spawn(
        EmulatorConfig::default(),
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let pipelines = fdsync_core::pipeline::load_dir(&repo().join("pipelines"), None).unwrap();
    let lake = std::fs::read_to_string(repo().join("docs/lake.md")).unwrap();
    let truth = ground_truth_feeds();
    let mut missing = Vec::new();
    for feed in FEEDS {
        let url = format!("{}{}", running.base_url(), filled(feed.route));
        let answer = http
            .get(&url)
            .header("X-API-KEY", emulator::DEMO_BUILD_KEY)
            .send()
            .await
            .unwrap();
        let status = answer.status();
        let body = answer.text().await.unwrap();
        if status == reqwest::StatusCode::NOT_FOUND && body.contains("no such route") {
            missing.push(format!("{}: no emulator route for {}", feed.name, feed.route));
        }
        if !pipelines.iter().any(|p| p.feed.name == feed.name) {
            missing.push(format!("{}: no file under pipelines/ reads it", feed.name));
        }
        for table in feed.tables {
            if !lake.contains(&format!("| {} |", table.name)) {
                missing.push(format!(
                    "{}: table {} has no row in docs/lake.md",
                    feed.name, table.name
                ));
            }
        }
        if !truth.contains(feed.name) {
            missing.push(format!(
                "{}: no test (under tests/ or in its feed module) says \"/// Ground truth: {}.\" in its doc comment",
                feed.name, feed.name
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "route families not complete (docs/feeds.md):\n{}",
        missing.join("\n")
    );
}

/// docs/lake.md's partition table is generated from the tables' declarations.
#[test]
fn the_lake_partition_table_is_generated_from_the_declarations() {
    let path = repo().join("docs/lake.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (start, end) = ("<!-- lake partitions -->\n", "<!-- end of lake partitions -->");
    let from = doc
        .find(start)
        .expect("docs/lake.md keeps the partition table's markers")
        + start.len();
    let to = doc.find(end).expect("docs/lake.md keeps the partition table's markers");
    let generated = fdsync_commands::schema::lake_partitions_markdown();
    if std::env::var_os("FDSYNC_BLESS").is_some() {
        std::fs::write(&path, format!("{}{generated}{}", &doc[..from], &doc[to..])).unwrap();
    } else {
        assert!(
            doc[from..to] == generated,
            "docs/lake.md's partition table is out of date: FDSYNC_BLESS=1 cargo test --release --test main layout::"
        );
    }
}

/// Every source file of the workspace is formatted: every module is declared
/// by a `mod` line, so `cargo fmt` reaches them all.
#[test]
fn every_source_file_is_formatted() {
    crate::tools::needs!(Rustfmt);
    let out = std::process::Command::new(env!("CARGO"))
        .args(["fmt", "--all", "--check"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "source files are not formatted: run `cargo fmt --all`\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The linker's layout list names DuckDB's functions, so it holds only for
/// the DuckDB it was written from. A stale list costs memory, not
/// correctness, so most of its names, not all, must be in the shipped binary.
#[test]
fn the_linker_layout_is_for_the_pinned_duckdb_and_this_build() {
    let lock = std::fs::read_to_string(repo().join("Cargo.lock")).unwrap();
    let pinned = lock
        .split("[[package]]")
        .find(|p| p.contains("\nname = \"duckdb\"\n"))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = ")))
        .map(|v| v.trim_matches('"').to_owned())
        .expect("Cargo.lock pins duckdb");
    let list = std::fs::read_to_string(repo().join("link/symbol-order.txt")).unwrap();
    let again = "write it again (`cargo dist && cargo dist-bench symbol-order`, needs valgrind)";
    let written_for = list
        .lines()
        .find_map(|l| l.strip_prefix("# duckdb = "))
        .expect("link/symbol-order.txt names the DuckDB it was written for");
    assert_eq!(
        written_for, pinned,
        "link/symbol-order.txt was written for DuckDB {written_for}, the build pins {pinned}: {again}"
    );
    let names: Vec<&str> = list.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect();
    // A Rust name, v0 (`_R`) or legacy (its crate's hash, `17h` and 16 hex
    // digits, before the final `E`), changes with every build.
    let rust = |n: &str| {
        n.starts_with("_R")
            || n.strip_suffix('E')
                .and_then(|s| s.len().checked_sub(19).map(|at| &s[at..]))
                .is_some_and(|t| t.starts_with("17h") && t[3..].bytes().all(|b| b.is_ascii_hexdigit()))
    };
    assert!(
        names.iter().all(|n| !rust(n)),
        "link/symbol-order.txt names Rust functions, whose names differ between builds: C and C++ names only"
    );
    // build.rs hands the list to the linker on x86_64 Linux only, in the shipped build.
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return;
    }
    crate::tools::needs!(ReleaseBinary);
    let nm = std::process::Command::new("nm")
        .args(["--defined-only", "--format=just-symbols"])
        .arg(crate::tools::release_binary())
        .output()
        .expect("nm (binutils) reads the binary's symbols");
    assert!(nm.status.success(), "{}", String::from_utf8_lossy(&nm.stderr));
    let symbols: HashSet<&str> = std::str::from_utf8(&nm.stdout).unwrap().lines().collect();
    let found = names.iter().filter(|n| symbols.contains(*n)).count();
    assert!(
        !names.is_empty() && found * 4 >= names.len() * 3,
        "only {found} of link/symbol-order.txt's {} functions are in the built binary: {again}",
        names.len()
    );
}

/// The product's commands are the operator's; the benchmarks are a crate
/// and a binary of their own.
#[test]
fn the_product_binary_has_no_bench_command() {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_fdsync"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("sync") && help.contains("emulator"), "{help}");
    assert!(!help.contains("bench"), "fdsync --help lists a bench command:\n{help}");
    let bench = std::process::Command::new(env!("CARGO_BIN_EXE_fdsync"))
        .args(["bench", "backfill"])
        .output()
        .unwrap();
    assert_eq!(bench.status.code(), Some(2), "fdsync bench is not a command");
}

/// The oldest glibc the release binary starts on (docs/operations.md,
/// "Where it runs"): Rust's own floor. The shipped build links glibc
/// statically (.cargo/release.toml), so in fact it needs none at all.
const GLIBC_FLOOR: (u32, u32) = (2, 17);

/// No symbol of the release binary needs a glibc newer than the floor, and it
/// loads no shared library, so a binary built on a new host starts on an old one.
#[test]
#[cfg(target_os = "linux")]
fn the_release_binary_needs_no_glibc_newer_than_the_floor() {
    crate::tools::needs!(ReleaseBinary);
    let binary = crate::tools::release_binary();
    let objdump = |flag: &str| {
        let out = std::process::Command::new("objdump")
            .arg(flag)
            .arg(&binary)
            .output()
            .expect("objdump (binutils) runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let table = objdump("-T");
    let mut newer: Vec<&str> = table
        .lines()
        .filter(|line| {
            line.split(['(', ')', ' '])
                .filter_map(|w| w.strip_prefix("GLIBC_"))
                .any(|v| {
                    let mut parts = v.split('.').map(|n| n.parse::<u32>().unwrap_or(0));
                    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) > GLIBC_FLOOR
                })
        })
        .collect();
    newer.truncate(10);
    assert!(
        newer.is_empty(),
        "symbols past glibc {GLIBC_FLOOR:?}:\n{}",
        newer.join("\n")
    );
    let headers = objdump("-p");
    let needed: Vec<&str> = headers
        .lines()
        .filter(|l| l.trim_start().starts_with("NEEDED"))
        .collect();
    assert!(
        needed.is_empty(),
        "the release binary loads shared libraries, so it needs the build host's glibc: {needed:?}\n\
         .cargo/release.toml links it statically; a RUSTFLAGS in the environment replaces those flags"
    );
    // Packed relocations in a dynamic binary would add GLIBC_ABI_DT_RELR here.
    assert!(
        !headers.contains("Version References"),
        "the release binary requires versions of a shared library:\n{headers}"
    );
}

/// Every quirk the emulator has is in the catalogue of open choices and
/// switched on by some test: a quirk no test drives holds fdsync to nothing.
#[test]
fn every_quirk_is_in_the_catalogue_and_driven_by_a_test() {
    let catalogue = std::fs::read_to_string(repo().join("docs/open-choices.md")).unwrap();
    let tests: String = rust_files(&["tests"])
        .iter()
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect();
    for name in fdsync_emulator::QUIRK_NAMES {
        assert!(
            catalogue.contains(&format!("`{name}")),
            "docs/open-choices.md names no quirk `{name}`"
        );
        let driven = [format!("\"{name}"), format!(",{name}"), format!("{name}=")]
            .iter()
            .any(|form| tests.contains(form.as_str()));
        assert!(driven, "no test under tests/ switches on the quirk {name}");
    }
}
