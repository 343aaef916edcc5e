//! Declares the route family modules and merges their routes, so that a
//! family is added to the emulator by adding its file under `src/`.
//!
//! A file there with a line `pub(crate) fn routes(router: DataRouter) -> DataRouter {`
//! is a route family: it becomes `fdsync_emulator::<file>`, and its routes
//! join the data routes (behind the key, the limits and the fault layers),
//! files in name order. Other modules are declared in lib.rs. `cargo fmt`
//! does not follow generated module declarations, so
//! `layout::the_files_build_scripts_declare_are_formatted` checks these files.

use std::fmt::Write as _;
use std::path::Path;

const MARKER: &str = "pub(crate) fn routes(router: DataRouter) -> DataRouter {";

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let src = Path::new(&dir).join("src");
    println!("cargo::rerun-if-changed={}", src.display());
    let mut files: Vec<_> = std::fs::read_dir(&src)
        .expect("src is readable")
        .map(|entry| entry.expect("src is readable").path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs") && !path.ends_with("lib.rs"))
        .collect();
    files.sort();

    let (mut modules, mut routes) = (String::new(), String::new());
    for path in &files {
        let text = std::fs::read_to_string(path).expect("a source file is readable");
        if !text.lines().any(|l| l == MARKER) {
            continue;
        }
        let module = path.file_stem().and_then(|s| s.to_str()).expect("a UTF-8 file name");
        writeln!(modules, "#[path = {:?}]\npub mod {module};", path.display().to_string()).unwrap();
        writeln!(routes, "    {module}::routes,").unwrap();
    }
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("families.rs");
    let code = format!(
        "{modules}\n/// Each route family module's `routes` (build.rs), in file name order.\n\
         const FAMILIES: &[fn(DataRouter) -> DataRouter] = &[\n{routes}];\n"
    );
    std::fs::write(&out, code).expect("OUT_DIR is writable");
}
