//! The tools beyond Rust that some tests need: the Python packages of
//! `tests/requirements.txt` in `tests/.venv` (which `sh tests/run` makes),
//! Java for Spark, Node for Azurite, root for tmpfs mounts and `chattr`,
//! rustfmt, and the shipped build of the binary (`cargo dist`).
//!
//! A test whose tool is missing says so in one line on the terminal, naming
//! how to get it, and passes without running; with `FDSYNC_TESTS_NEED_ALL=1`
//! (as `.ci/run` sets) a missing tool fails the test instead, so CI never
//! skips silently.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::util::repo;

/// A tool some tests need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `tests/.venv` with every package of `tests/requirements.txt`.
    Python,
    /// Java 17 or newer on `PATH`, for Spark.
    Java,
    /// Node 18 or newer, and Azurite in `tests/node_modules`.
    Node,
    /// Root, to mount a small tmpfs, set `chattr +i` and chroot.
    Root,
    /// rustfmt, to check the files `cargo fmt` does not reach.
    Rustfmt,
    /// The shipped build (`cargo dist`), named by `FDSYNC_RELEASE_BINARY`.
    ReleaseBinary,
}

impl Tool {
    /// Why the tool is not usable here and how to get it, or `None` when it is.
    fn missing(self) -> Option<&'static str> {
        static FOUND: [OnceLock<bool>; 6] = [const { OnceLock::new() }; 6];
        let found = *FOUND[self as usize].get_or_init(|| self.found());
        (!found).then_some(match self {
            Tool::Python => {
                "the Python tools are not in tests/.venv: `sh tests/run` makes it (Debian and Ubuntu need `apt install python3-venv` first)"
            }
            Tool::Java => {
                "Java 17 or newer is not on PATH (Spark needs it): `apt install openjdk-17-jre-headless`, or `brew install openjdk@17` on macOS"
            }
            Tool::Node => {
                "Node 18 or newer with Azurite is missing: install Node (`apt install nodejs npm`, `brew install node`), then `sh tests/run` installs Azurite"
            }
            Tool::Root => {
                "root is needed to mount a small tmpfs, set chattr +i or chroot: run the tests as root, or in a container (`sudo -E sh tests/run`)"
            }
            Tool::Rustfmt => "rustfmt is not on PATH: `rustup component add rustfmt`",
            Tool::ReleaseBinary => {
                "FDSYNC_RELEASE_BINARY names no file: `cargo dist`, then FDSYNC_RELEASE_BINARY=$CARGO_TARGET_DIR/<host>/release/fdsync (as .ci/run does)"
            }
        })
    }

    fn found(self) -> bool {
        match self {
            Tool::Python => Command::new(venv_bin("python3"))
                .args([
                    "-c",
                    "import moto, pyspark, duckdb, boto3, pyarrow, azure.storage.blob, dbt.version",
                ])
                .output()
                .is_ok_and(|o| o.status.success()),
            Tool::Java => major_version("java", &["-version"], "version \"").is_some_and(|v| v >= 17),
            Tool::Node => {
                repo().join("tests/node_modules/.bin/azurite-blob").exists()
                    && major_version("node", &["--version"], "v").is_some_and(|v| v >= 18)
            }
            Tool::Root => Command::new("id")
                .arg("-u")
                .output()
                .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "0"),
            Tool::Rustfmt => Command::new("rustfmt")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success()),
            Tool::ReleaseBinary => release_binary().is_file(),
        }
    }
}

/// The shipped build of `fdsync` (`.cargo/release.toml`), which `.ci/run`
/// builds with `cargo dist` and names in `FDSYNC_RELEASE_BINARY`.
pub fn release_binary() -> PathBuf {
    std::env::var_os("FDSYNC_RELEASE_BINARY")
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// The major version `program args` prints (on stdout or stderr) right after `marker`.
fn major_version(program: &str, args: &[&str], marker: &str) -> Option<u32> {
    let out = Command::new(program).args(args).output().ok()?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let after = &said[said.find(marker)? + marker.len()..];
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A program of the tests' Python environment (`python3`, `dbt`, `moto_server`).
pub fn venv_bin(name: &str) -> PathBuf {
    repo().join("tests/.venv/bin").join(name)
}

/// The first of `tools` that is missing, said in one line; `None` when all
/// are here. Under `FDSYNC_TESTS_NEED_ALL=1` a missing tool panics instead.
pub fn missing(tools: &[Tool]) -> Option<&'static str> {
    said_missing(None, tools)
}

/// [`missing`], for one `part` of a test that runs on without it: the line
/// says that only that part was skipped.
pub fn missing_for(part: &str, tools: &[Tool]) -> Option<&'static str> {
    said_missing(Some(part), tools)
}

fn said_missing(part: Option<&str>, tools: &[Tool]) -> Option<&'static str> {
    let why = tools.iter().find_map(|t| t.missing())?;
    assert!(
        std::env::var_os("FDSYNC_TESTS_NEED_ALL").is_none_or(|v| v != "1"),
        "FDSYNC_TESTS_NEED_ALL=1 and {why}"
    );
    // Straight to the terminal: the test harness captures only print macros,
    // and a skip must be seen.
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let skipped = match part {
        Some(part) => format!("skipped part of {test} ({part})"),
        None => format!("skipped {test}"),
    };
    let _ = writeln!(std::io::stderr().lock(), "{skipped}: {why}");
    Some(why)
}

/// Returns from the test, saying why, unless every tool named is here.
macro_rules! needs {
    ($($tool:ident),+) => {
        if $crate::tools::missing(&[$($crate::tools::Tool::$tool),+]).is_some() {
            return;
        }
    };
}
pub(crate) use needs;
