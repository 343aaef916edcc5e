//! Lays out the fdsync binary's code so that what a run executes sits
//! together.
//!
//! The kernel maps a binary's code in windows around each page a process
//! touches, so startup code spread over DuckDB's 80 MiB of `.text` made
//! every process resident in about 40 MiB of it. The linker places the
//! functions named in `src/bin/fdsync/symbol-order.txt` (written by `fdsync
//! bench symbol-order`) first, and those windows mostly overlap
//! (BENCHMARKS.md, "Fifteenth session").

use std::path::Path;

fn main() {
    let order = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("src/bin/fdsync/symbol-order.txt");
    println!("cargo:rerun-if-changed={}", order.display());
    println!("cargo:rerun-if-env-changed=FDSYNC_SYMBOL_ORDER");
    // rust-lld, which reads the file, is the default linker on this target
    // only; GNU ld and gold reject the option. `FDSYNC_SYMBOL_ORDER=off`
    // turns it off for a build that chooses another linker.
    let lld_by_default = std::env::var("TARGET").is_ok_and(|t| t == "x86_64-unknown-linux-gnu");
    let wanted = std::env::var("FDSYNC_SYMBOL_ORDER").map_or(true, |v| v != "off");
    if lld_by_default && wanted && order.is_file() {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        // Functions of another build's list that this one lacks (renamed,
        // inlined) are expected, not worth a warning each.
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}
