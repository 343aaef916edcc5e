//! Rust function names as the linker layout sees them. Shared by
//! `fdsync-bench symbol-order`, which writes the layout, and the layout test,
//! which checks it against a built binary (`#[path]` from tests/main.rs).

/// A Rust function's v0 name (`_R...`) as a linker section pattern that
/// every build of the same code matches, or None for another name. A v0 name
/// spells out a generic instance's types, and its only hashes are each
/// crate's disambiguator (`Cs<base 62>_`), which becomes `Cs*_`; back
/// references (`B<base 62>_`) are offsets into the name, which a
/// disambiguator of another length moves, so they become `B*_`.
pub fn rust_key(symbol: &str) -> Option<String> {
    let rest = symbol.strip_prefix("_R")?;
    let mut key = String::with_capacity(symbol.len());
    key.push_str("_R");
    let bytes = rest.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let tag = match (bytes[i], bytes.get(i + 1)) {
            (b'C', Some(b's')) => Some((2, 13)),
            (b'B', _) => Some((1, 4)),
            _ => None,
        };
        if let Some((len, most)) = tag {
            let digits = bytes[i + len..]
                .iter()
                .take_while(|b| b.is_ascii_alphanumeric())
                .count();
            if (1..=most).contains(&digits) && bytes.get(i + len + digits) == Some(&b'_') {
                key.push_str(&rest[i..i + len]);
                key.push_str("*_");
                i += len + digits + 1;
                continue;
            }
        }
        key.push(char::from(bytes[i]));
        i += 1;
    }
    Some(key)
}

/// Whether `symbol` is a Rust function's legacy name, which ends in its
/// crate's hash (`17h` and 16 hex digits, then `E`).
pub fn rust_hashed(symbol: &str) -> bool {
    symbol
        .strip_suffix('E')
        .and_then(|s| s.len().checked_sub(19).map(|at| &s[at..]))
        .is_some_and(|tail| tail.starts_with("17h") && tail[3..].bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rust_name_loses_its_hashes_and_a_cpp_name_is_none() {
        assert_eq!(
            rust_key("_RINvCsde91A1CxJYp_6ldtest9gamma_hothEB2_").as_deref(),
            Some("_RINvCs*_6ldtest9gamma_hothEB*_")
        );
        assert_eq!(
            rust_key("_RNvNtNtCsjrHSEGnQ3l9_3std2io5stdio").as_deref(),
            Some("_RNvNtNtCs*_3std2io5stdio")
        );
        assert_eq!(rust_key("_ZN6fdsync4main17h0123456789abcdefE"), None);
        assert_eq!(rust_key("_ZN6duckdb8Database4OpenEv"), None);
        assert!(rust_hashed("_ZN6fdsync4main17h0123456789abcdefE"));
        assert!(!rust_hashed("_ZN6duckdb8Database4OpenEv"));
    }
}
