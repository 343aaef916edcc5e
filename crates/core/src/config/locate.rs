//! Where the configuration comes from: the file given, else the first of a
//! search path that exists, else the one the binary carries.

use std::path::{Path, PathBuf};

use super::{Config, ConfigError};

/// The configuration the binary carries (the repository's
/// `config/fdsync.toml`): used when no file is found, and what `fdsync
/// init` writes out.
pub const SHIPPED_CONFIG: &str = include_str!("../../../../config/fdsync.toml");

/// Where a configuration was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// `--config` or `FDSYNC_CONFIG`.
    Given(PathBuf),
    /// The first file of [`Config::search_path`] that exists.
    Found(PathBuf),
    /// None exists: the shipped default, its paths relative to the working folder.
    BuiltIn,
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::Given(p) | ConfigSource::Found(p) => write!(f, "{}", p.display()),
            ConfigSource::BuiltIn => write!(f, "the built-in default (no file at {})", Config::search_path_text()),
        }
    }
}

impl Config {
    /// Where a configuration is looked for when none is given, in order:
    /// `./config/fdsync.toml`, the user's (`$XDG_CONFIG_HOME/fdsync/fdsync.toml`,
    /// else `~/.config/fdsync/fdsync.toml`), then `/etc/fdsync/fdsync.toml`.
    pub fn search_path() -> Vec<PathBuf> {
        let mut paths = vec![PathBuf::from("config/fdsync.toml")];
        let user = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|h| PathBuf::from(h).join(".config"))
            });
        if let Some(dir) = user {
            paths.push(dir.join("fdsync/fdsync.toml"));
        }
        paths.push(PathBuf::from("/etc/fdsync/fdsync.toml"));
        paths
    }

    fn search_path_text() -> String {
        Config::search_path()
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The configuration at `given` (which must exist), else at the first
    /// path of [`Config::search_path`] that exists, else the built-in one;
    /// `FDSYNC_<SECTION>__<KEY>` overrides apply to each.
    ///
    /// # Errors
    /// A given file that cannot be read, or a configuration that is not valid.
    pub fn locate(given: Option<&Path>) -> Result<(Config, ConfigSource), ConfigError> {
        if let Some(path) = given {
            return Ok((Config::load(path)?, ConfigSource::Given(path.to_owned())));
        }
        if let Some(path) = Config::search_path().into_iter().find(|p| p.is_file()) {
            return Ok((Config::load(&path)?, ConfigSource::Found(path)));
        }
        let config = Config::from_toml(SHIPPED_CONFIG, Path::new("(built-in config)"), std::env::vars())?;
        Ok((config, ConfigSource::BuiltIn))
    }
}
