//! Declares the feed modules and writes the feed registry, so that a route
//! family is added by adding its file under `src/feeds/`.
//!
//! A file there that declares `pub static NAME: Feed = Feed {` is a feed
//! module: it becomes `feeds::<file>`, and each such static joins
//! `feeds::FEEDS`, files in name order, statics in the order written.
//! `cargo fmt` does not follow generated module declarations, so
//! `layout::the_files_build_scripts_declare_are_formatted` checks these files.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let feeds_dir = Path::new(&dir).join("src/feeds");
    println!("cargo::rerun-if-changed={}", feeds_dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&feeds_dir)
        .expect("src/feeds is readable")
        .map(|entry| entry.expect("src/feeds is readable").path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs") && !path.ends_with("mod.rs"))
        .collect();
    files.sort();

    let (mut modules, mut registry) = (String::new(), String::new());
    for path in &files {
        let text = std::fs::read_to_string(path).expect("a feed file is readable");
        let mut statics = Vec::new();
        for line in text.lines().filter(|l| l.contains("static ") && l.contains(": Feed")) {
            match line
                .strip_prefix("pub static ")
                .and_then(|l| l.strip_suffix(": Feed = Feed {"))
            {
                Some(name) => statics.push(name),
                None => panic!(
                    "{}: write a feed as `pub static NAME: Feed = Feed {{` at the start of a line, \
                     so that the build lists it in FEEDS: {line:?}",
                    path.display()
                ),
            }
        }
        if statics.is_empty() {
            continue;
        }
        let module = path.file_stem().and_then(|s| s.to_str()).expect("a UTF-8 file name");
        writeln!(modules, "#[path = {:?}]\npub mod {module};", path.display().to_string()).unwrap();
        for name in statics {
            writeln!(registry, "    &{module}::{name},").unwrap();
        }
    }
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("feeds.rs");
    let code = format!(
        "{modules}\n/// Every feed fdsync reads: each `pub static ...: Feed` of the files under\n\
         /// `src/feeds/` (build.rs), files in name order.\npub static FEEDS: &[&Feed] = &[\n{registry}];\n"
    );
    std::fs::write(&out, code).expect("OUT_DIR is writable");
}
