//! A tape page on its way to the writer, kept as its compressed body until
//! the commit side maps it: the pages ahead of the writer take a tenth of
//! the memory their rows would.

use crate::records::Rows;

/// What mapping a page's items needs besides the page: its rows so far
/// (the route, the time it was fetched, the tape's seen keys) and its reader.
pub(super) struct Mapping {
    pub(super) rows: Rows,
    pub(super) read: crate::feeds::ReadTape,
    /// The tape's key for its reader ([`crate::feeds::ReadTape`]).
    pub(super) key: Option<String>,
    pub(super) items: usize,
}

/// A tape page waiting for the commit side, its JSON kept lz4-compressed.
/// Its rows would take about ten times the bytes; packed, more pages fit in
/// the room ahead of the writer, so fetching goes on while DuckDB writes.
pub(super) struct PackedPage {
    pub(super) packed: Vec<u8>,
    mapping: Mapping,
}

impl PackedPage {
    pub(super) fn pack(body: &[u8], mapping: Mapping) -> PackedPage {
        let mut packed = lz4_flex::compress_prepend_size(body);
        // lz4_flex leaves room for the worst case, larger than the page.
        packed.shrink_to_fit();
        PackedPage { packed, mapping }
    }

    pub(super) fn packed_bytes(&self) -> usize {
        self.packed.len()
    }

    /// The items the page delivered, as its head counted them.
    pub(super) fn items(&self) -> usize {
        self.mapping.items
    }

    /// The page's rows. A page that fails to map, having been read once
    /// already, goes to quarantine whole rather than being lost.
    pub(super) fn unpack(self) -> Rows {
        let Mapping {
            mut rows, read, key, ..
        } = self.mapping;
        let body = lz4_flex::decompress_size_prepended(&self.packed).expect("fdsync's own lz4 of a page decompresses");
        if let Err(e) = read(&mut rows, &body, key.as_deref()) {
            rows.quarantine(&String::from_utf8_lossy(&body), format!("tape page: {e}"));
        }
        rows
    }
}
