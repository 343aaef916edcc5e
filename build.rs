//! Lays out the shipped fdsync binary so that a process maps little of its code.
//!
//! The kernel maps a binary's code in windows around each page a process
//! touches, and startup alone touches a page or two of hundreds of DuckDB's
//! translation units. The linker places the DuckDB functions a run executes,
//! named in `link/symbol-order.txt`, together at the start of `.text`, so
//! those windows overlap. The list holds across builds of one DuckDB pin; a
//! test checks it against the pin and the shipped binary.
//!
//! A static binary's relative relocations are packed where the glibc it links
//! reads them, so that starting a process reads kilobytes of them, not MiB.

use std::path::Path;
use std::process::Command;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let order = Path::new(&dir).join("link/symbol-order.txt");
    println!("cargo:rerun-if-changed={}", order.display());
    println!("cargo:rerun-if-env-changed=FDSYNC_LINK_LAYOUT");
    // Only the shipped build (.cargo/release.toml) sets the layout. rust-lld,
    // which reads the list, is the default linker on this target only; GNU
    // ld rejects the option.
    let wanted = std::env::var("FDSYNC_LINK_LAYOUT").is_ok_and(|v| v == "on");
    let lld_by_default = std::env::var("TARGET").is_ok_and(|t| t == "x86_64-unknown-linux-gnu");
    if wanted && lld_by_default && order.is_file() {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        // Functions a DuckDB build inlined or left out are expected, not worth a warning each.
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
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
