//! `fdsync-bench symbol-order`: the C and C++ functions (DuckDB's, mostly)
//! of the shipped fdsync binary that a small backfill, its no-change run and
//! `fdsync status` execute, each process run under callgrind, written for the
//! linker (build.rs) to place together. Exact names, which change only with
//! the DuckDB pin; Rust functions are left out, since their names change with
//! every build.
//!
//! Sorted by name so that writing the list again shows as a readable diff;
//! the order within it does not matter, only that the functions sit together.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use super::backfill::{bench_environment, config_for, pipelines_for};
use super::{EmulatorProcess, failure, fresh_dir};

/// Large enough that every stage of a backfill runs (news pages and their
/// revisions, price loads over several commit groups, the merges of a
/// no-change run), small enough for callgrind's fiftyfold slowdown.
const COMPANIES: u64 = 20;
const ITEMS: u64 = 5_000;

/// Runs the three processes under callgrind against an emulator of its own
/// and writes the C and C++ functions they executed to `target`.
///
/// # Errors
/// When valgrind is missing, a run fails, or a file cannot be written.
pub fn symbol_order(config: &fdsync_core::config::Config, target: &Path, out: &mut impl Write) -> anyhow::Result<()> {
    let this = super::fdsync_binary().canonicalize()?;
    let emulator = EmulatorProcess::start()?;
    let dir = fresh_dir("symbol-order")?;
    let pipelines = pipelines_for(config, &dir, ITEMS)?;
    let config_file = dir.join("fdsync.toml");
    std::fs::write(
        &config_file,
        config_for(&emulator.base_url, &dir.join("warehouse.duckdb"), &pipelines, COMPANIES),
    )?;
    let sync: &[&str] = &["sync", "--once", "--all"];
    let runs = [("backfill", sync), ("no-change run", sync), ("status", &["status"])];
    let mut functions = BTreeSet::new();
    for (i, (what, args)) in runs.into_iter().enumerate() {
        let profile = dir.join(format!("callgrind.{i}"));
        let log = dir.join(format!("callgrind.{i}.stderr"));
        let mut command = Command::new("valgrind");
        command
            // DuckDB's executor spins while its workers run; valgrind's default
            // lock lets the spinning thread keep the CPU, so `status` never ends.
            .args(["--tool=callgrind", "--demangle=no", "--fair-sched=yes"])
            .arg(format!("--callgrind-out-file={}", profile.display()))
            .arg(&this)
            .arg("--quiet")
            .arg("--config")
            .arg(&config_file)
            .args(args);
        bench_environment(&mut command, None);
        let status = command
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .status()
            .map_err(|e| {
                failure(format!(
                    "cannot start valgrind ({e}): install it, such as `apt-get install valgrind`"
                ))
            })?;
        if !status.success() {
            return Err(failure(format!(
                "the {what} under callgrind failed ({status}): see {}",
                log.display()
            )));
        }
        let executed = executed_functions(BufReader::new(std::fs::File::open(&profile)?), &this)?;
        let before = functions.len();
        functions.extend(executed.into_iter().filter(|name| !is_rust(name)));
        writeln!(
            out,
            "{what}: {} new C and C++ functions of fdsync executed",
            functions.len() - before
        )?;
    }
    let mut text = format!(
        "# DuckDB's functions that a small backfill, its no-change run and `fdsync\n\
         # status` execute, which the linker places together at the start of .text\n\
         # (build.rs), so that a process maps little of DuckDB's code. C and C++ names\n\
         # only: they change with the bundled DuckDB, not with fdsync's code.\n\
         # duckdb = {}\n",
        pinned_duckdb()
    );
    for f in &functions {
        text.push_str(f);
        text.push('\n');
    }
    std::fs::write(target, text).map_err(|e| failure(format!("cannot write {}: {e}", target.display())))?;
    writeln!(out, "{} functions written to {}", functions.len(), target.display())?;
    Ok(())
}

/// Whether `symbol` is a Rust function's name: v0 (`_R...`), or legacy,
/// which ends in its crate's hash (`17h` and 16 hex digits, then `E`).
fn is_rust(symbol: &str) -> bool {
    symbol.starts_with("_R")
        || symbol
            .strip_suffix('E')
            .and_then(|s| s.len().checked_sub(19).map(|at| &s[at..]))
            .is_some_and(|tail| tail.starts_with("17h") && tail[3..].bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The DuckDB version the workspace's `Cargo.lock` pins.
fn pinned_duckdb() -> &'static str {
    include_str!("../../../../Cargo.lock")
        .split("[[package]]")
        .find(|p| p.contains("\nname = \"duckdb\"\n"))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = ")))
        .map_or("unknown", |v| v.trim_matches('"'))
}

/// The mangled names of the functions of `object` that a callgrind profile
/// saw executed.
///
/// Callgrind names each object (`ob=`) and function (`fn=`) once and refers
/// to it by number afterwards, also from the lines that name a callee
/// (`cob=`, `cfn=`); a function's cost lines follow the `ob=` of its object.
fn executed_functions(profile: impl BufRead, object: &Path) -> anyhow::Result<BTreeSet<String>> {
    let mut objects: HashMap<String, bool> = HashMap::new();
    let mut names: HashMap<String, String> = HashMap::new();
    let mut in_object = false;
    let mut executed = BTreeSet::new();
    for line in profile.lines() {
        let line = line?;
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if !matches!(key, "ob" | "cob" | "fn" | "cfn") {
            continue;
        }
        // "(7) /path" defines number 7, "(7)" refers to it; without string
        // compression the name stands alone.
        let (id, name) = match value.strip_prefix('(').and_then(|v| v.split_once(')')) {
            Some((id, rest)) => (id.to_owned(), rest.trim()),
            None => (value.to_owned(), value),
        };
        if key.ends_with("ob") {
            if !name.is_empty() {
                let ours = Path::new(name).canonicalize().is_ok_and(|p| p == object);
                objects.insert(id.clone(), ours);
            }
            if key == "ob" {
                in_object = objects.get(&id).copied().unwrap_or(false);
            }
            continue;
        }
        if !name.is_empty() {
            names.insert(id.clone(), name.to_owned());
        }
        if key == "fn" && in_object {
            let Some(name) = names.get(&id) else { continue };
            // `'2` marks a second context of one function; an address or
            // "(below main)" is code without a symbol to order.
            let name = name.rsplit_once('\'').map_or(name.as_str(), |(base, n)| {
                if n.bytes().all(|b| b.is_ascii_digit()) {
                    base
                } else {
                    name
                }
            });
            if !name.starts_with("0x") && !name.starts_with('(') {
                executed.insert(name.to_owned());
            }
        }
    }
    Ok(executed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_names_in_either_mangling_are_told_from_cpp_ones() {
        assert!(is_rust("_RNvNtNtCsjrHSEGnQ3l9_3std2io5stdio"));
        assert!(is_rust("_ZN6fdsync4main17h0123456789abcdefE"));
        assert!(!is_rust("_ZN6duckdb8Database4OpenEv"));
    }

    #[test]
    fn functions_of_the_object_only_by_number_and_name() {
        let dir = tempfile::tempdir().unwrap();
        let ours = dir.path().join("fdsync");
        std::fs::write(&ours, b"").unwrap();
        let ours = ours.canonicalize().unwrap();
        let profile = format!(
            "version: 1\ncreator: callgrind-3.19.0\n\
             ob=(1) /usr/lib/libc.so.6\nfn=(1) memcpy\n0 5\n\
             ob=(2) {ours}\nfn=(2) _ZN6duckdb8Database4OpenEv\n0 3\n\
             cob=(1)\ncfn=(1)\ncalls=1 0\n0 5\n\
             cfn=(3) _ZN6fdsync4main17h0123456789abcdefE'2\ncalls=1 0\n0 2\n\
             fn=(3)\n0 2\n\
             fn=(4) 0x00000000017d5db0\n0 1\n\
             fn=(5) (below main)\n0 1\n\
             ob=(1)\nfn=(6) strlen\n0 1\n\
             ob=(2)\nfn=(7) _ZN6duckdb9Allocator4Free'x\n0 1\n",
            ours = ours.display()
        );
        let executed = executed_functions(profile.as_bytes(), &ours).unwrap();
        assert_eq!(
            executed.into_iter().collect::<Vec<_>>(),
            [
                "_ZN6duckdb8Database4OpenEv",
                "_ZN6duckdb9Allocator4Free'x",
                "_ZN6fdsync4main17h0123456789abcdefE",
            ],
            "memcpy, strlen (another object), the address and (below main) are left out",
        );
    }
}
