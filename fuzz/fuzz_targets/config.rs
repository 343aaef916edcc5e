//! Any bytes as the config file: a config, or an error naming the file.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let text = String::from_utf8_lossy(input);
    let path = std::path::Path::new("fuzz.toml");
    if let Err(e) = fdsync_core::config::Config::from_toml(&text, path, std::iter::empty()) {
        assert!(e.to_string().contains("fuzz.toml"), "{e}");
    }
});
