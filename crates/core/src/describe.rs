//! Each table's and column's description in one line, from the table
//! declarations' doc comments: what every warehouse fdsync opens stores as
//! `COMMENT ON`, and what `fdsync schema` prints.

use crate::feeds::catalogue;
use crate::tables::TableDef;

/// What `column` of `table` holds.
pub fn column_doc(table: &TableDef, column: &str) -> String {
    table
        .all_columns()
        .find(|c| c.name == column)
        .map(|c| one_line(c.doc))
        .filter(|doc| !doc.is_empty())
        .unwrap_or_else(|| format!("`{column}`: not described yet."))
}

/// A doc comment's lines as one line.
fn one_line(doc: &str) -> String {
    doc.lines()
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
        .trim()
        .to_owned()
}

/// What `table` holds: its declaration's doc comment.
pub fn table_doc(table: &TableDef) -> String {
    let doc = one_line(table.doc);
    if doc.is_empty() {
        format!("The `{}` table.", table.name)
    } else {
        doc
    }
}

/// Every table's and column's description, as the warehouse stores them
/// (`COMMENT ON`): `(table, column or None for the table, text)`.
pub fn comments() -> Vec<(&'static str, Option<&'static str>, String)> {
    let mut out = Vec::new();
    for t in catalogue() {
        out.push((t.name, None, table_doc(t)));
        // A versions table's other columns are its table's, described there;
        // repeating them would be hundreds of ALTERs at a warehouse's first open.
        let own = |c: &&crate::tables::Column| {
            t.versions_of.is_none() || crate::tables::VERSION_COLUMNS.iter().any(|v| v.name == c.name)
        };
        for c in t.all_columns().filter(own) {
            out.push((t.name, Some(c.name), column_doc(t, c.name)));
        }
    }
    out
}

/// One `COMMENT ON` statement of [`comments`].
pub fn comment_statement(table: &str, column: Option<&str>, text: &str) -> String {
    let text = text.replace('\'', "''");
    match column {
        Some(c) => format!("COMMENT ON COLUMN \"{table}\".\"{c}\" IS '{text}';"),
        None => format!("COMMENT ON TABLE \"{table}\" IS '{text}';"),
    }
}

/// Every statement of [`comments`]: what every warehouse fdsync opens
/// carries, for another DuckDB (or a copy) to apply.
pub fn comment_sql() -> String {
    comments()
        .into_iter()
        .map(|(table, column, text)| comment_statement(table, column, &text) + "\n")
        .collect()
}
