//! Lays out the fdsync binary so that a process maps little of it.
//!
//! The kernel maps a binary's code in windows around each page a process
//! touches, so startup code spread over DuckDB's 80 MiB of `.text` made
//! every process resident in about 40 MiB of it. The linker places the
//! functions named in `src/bin/fdsync/symbol-order.txt` (written by `fdsync
//! bench symbol-order`) first, and those windows mostly overlap. And the
//! loader reads a position-independent binary's relocations whole at start:
//! packed, they take kilobytes instead of 4.5 MiB (BENCHMARKS.md, "Fifteenth
//! session").

use std::path::Path;
use std::process::Command;

fn main() {
    let order = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("src/bin/fdsync/symbol-order.txt");
    println!("cargo:rerun-if-changed={}", order.display());
    println!("cargo:rerun-if-env-changed=FDSYNC_SYMBOL_ORDER");
    // rust-lld, which reads both options, is the default linker on this
    // target only; GNU ld and gold reject the first. `FDSYNC_SYMBOL_ORDER=off`
    // turns both off for a build that chooses another linker.
    let target = std::env::var("TARGET").unwrap_or_default();
    let lld_by_default = target == "x86_64-unknown-linux-gnu";
    let wanted = std::env::var("FDSYNC_SYMBOL_ORDER").map_or(true, |v| v != "off");
    if !(lld_by_default && wanted) {
        return;
    }
    if order.is_file() {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        // Functions of another build's list that this one lacks (renamed,
        // inlined) are expected, not worth a warning each.
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
    // glibc reads packed relocations from 2.36 on, so a binary with them
    // needs it where it runs: only where the host building it has it.
    let native = std::env::var("HOST").is_ok_and(|host| host == target);
    if native && host_glibc().is_some_and(|version| version >= (2, 36)) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// The host's glibc version, from `getconf GNU_LIBC_VERSION` ("glibc 2.36").
fn host_glibc() -> Option<(u32, u32)> {
    let out = Command::new("getconf").arg("GNU_LIBC_VERSION").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let (major, minor) = text.trim().strip_prefix("glibc ")?.split_once('.')?;
    let minor = minor.split(|c: char| !c.is_ascii_digit()).next()?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}
