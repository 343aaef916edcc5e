//! Lays out the fdsync binary so that a process maps little of DuckDB's code.
//!
//! The kernel maps a binary's code in windows around each page a process
//! touches, and DuckDB's startup touches a page or two of hundreds of
//! translation units. The linker places the DuckDB functions named in
//! `link/symbol-order.txt` first, so those windows overlap. The list names C
//! and C++ functions only, which change with the bundled DuckDB and nothing
//! else; a test checks it against the pin and the built binary.

use std::path::Path;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let order = Path::new(&dir).join("link/symbol-order.txt");
    println!("cargo:rerun-if-changed={}", order.display());
    println!("cargo:rerun-if-env-changed=FDSYNC_SYMBOL_ORDER");
    // rust-lld, which reads the option, is the default linker on this target
    // only; GNU ld rejects it. `FDSYNC_SYMBOL_ORDER=off` turns it off for a
    // build that chooses another linker.
    let lld_by_default = std::env::var("TARGET").is_ok_and(|t| t == "x86_64-unknown-linux-gnu");
    let wanted = std::env::var("FDSYNC_SYMBOL_ORDER").map_or(true, |v| v != "off");
    if lld_by_default && wanted && order.is_file() {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        // Functions a DuckDB build inlined or left out are expected, not worth a warning each.
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}
