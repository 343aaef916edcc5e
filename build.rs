//! Lays out the fdsync binary so that a process maps little of its code.
//!
//! The kernel maps a binary's code in windows around each page a process
//! touches, and startup alone touches a page or two of hundreds of DuckDB's
//! translation units and of fdsync's crates. The linker places the functions
//! a run executes together, so those windows overlap: DuckDB's, named in
//! `link/symbol-order.txt`, at the start of `.text`, and fdsync's Rust ones,
//! matched by the hash-free patterns of `link/rust-order.ld`, just before it.
//! Both hold across builds of one commit; a test checks them against the
//! DuckDB pin and the built binary.
//!
//! A static binary's relative relocations are packed where the glibc it links
//! reads them, so that starting a process reads kilobytes of them, not MiB.

use std::path::Path;
use std::process::Command;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let order = Path::new(&dir).join("link/symbol-order.txt");
    let rust_order = Path::new(&dir).join("link/rust-order.ld");
    println!("cargo:rerun-if-changed={}", order.display());
    println!("cargo:rerun-if-changed={}", rust_order.display());
    println!("cargo:rerun-if-env-changed=FDSYNC_LINK_LAYOUT");
    // Only the shipped build (.cargo/release.toml) sets the layout: "all" or
    // "c" (DuckDB's functions alone). rust-lld, which reads both files, is the
    // default linker on this target only; GNU ld rejects the first.
    let layout = std::env::var("FDSYNC_LINK_LAYOUT").unwrap_or_default();
    let lld_by_default = std::env::var("TARGET").is_ok_and(|t| t == "x86_64-unknown-linux-gnu");
    if lld_by_default && matches!(layout.as_str(), "all" | "c") {
        if order.is_file() {
            println!(
                "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
                order.display()
            );
            // Functions a DuckDB build inlined or left out are expected, not worth a warning each.
            println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
        }
        // A script that ends in INSERT adds its output section to the linker's
        // default layout instead of replacing it.
        if layout == "all" && rust_order.is_file() {
            println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", rust_order.display());
        }
    }
    // A static binary relocates itself with the code of the glibc it links,
    // which reads packed relocations from 2.36 on; it then needs nothing of
    // the glibc where it runs. A dynamic one would need 2.36 there.
    let static_crt = std::env::var("CARGO_CFG_TARGET_FEATURE").is_ok_and(|f| f.split(',').any(|f| f == "crt-static"));
    let native = std::env::var("HOST").ok() == std::env::var("TARGET").ok();
    if static_crt && native && host_glibc().is_some_and(|version| version >= (2, 36)) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// The build host's glibc version, from `getconf GNU_LIBC_VERSION` ("glibc 2.36").
fn host_glibc() -> Option<(u32, u32)> {
    let out = Command::new("getconf").arg("GNU_LIBC_VERSION").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let (major, minor) = text.trim().strip_prefix("glibc ")?.split_once('.')?;
    let minor = minor.split(|c: char| !c.is_ascii_digit()).next()?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}
