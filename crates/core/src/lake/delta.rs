//! The Delta Lake side: a table's schema from [`crate::tables`], opening or
//! creating it, its live files by partition, and one commit per publish.

use std::collections::HashMap;

use deltalake_core::kernel::transaction::{CommitBuilder, CommitProperties, TableReference, TransactionError};
use deltalake_core::kernel::{Action, Add, ArrayType, DataType, LogicalFileView, Remove, StructField, Transaction};
use deltalake_core::protocol::{DeltaOperation, SaveMode};
use deltalake_core::{DeltaTable, DeltaTableBuilder, DeltaTableError};

use super::LakeError;
use super::store::LakeRoot;
use crate::sink::duckdb::COMMIT_SEQ;
use crate::tables::{ColType, TableDef};

fn delta_type(ty: ColType) -> DataType {
    match ty {
        ColType::Text | ColType::Json => DataType::STRING,
        ColType::Int => DataType::LONG,
        ColType::Float => DataType::DOUBLE,
        ColType::Bool => DataType::BOOLEAN,
        ColType::Date => DataType::DATE,
        ColType::Timestamp => DataType::TIMESTAMP,
        ColType::TextList => ArrayType::new(DataType::STRING, true).into(),
    }
}

/// The lake columns of `table`: its warehouse columns, the commit sequence,
/// then the partition column if it has one.
pub fn columns(table: &TableDef) -> Vec<StructField> {
    let mut fields: Vec<StructField> = table
        .all_columns()
        .map(|c| StructField::new(c.name, delta_type(c.ty), !table.key.contains(&c.name)))
        .collect();
    fields.push(StructField::new(COMMIT_SEQ, DataType::LONG, true));
    if let Some(part) = table.lake_partition {
        let ty = match part {
            crate::tables::LakePartition::Year(_) => DataType::INTEGER,
            crate::tables::LakePartition::Month(_) => DataType::STRING,
        };
        fields.push(StructField::new(part.column(), ty, true));
    }
    fields
}

pub fn delta_err(table: &TableDef, context: &'static str) -> impl FnOnce(DeltaTableError) -> LakeError + use<> {
    let name = table.name;
    move |source| LakeError::Delta {
        table: name.to_owned(),
        context,
        source: Box::new(source),
    }
}

/// Loads the table's newest version; `None` when the lake has no such table yet.
pub async fn open_existing(root: &LakeRoot, table: &TableDef) -> Result<Option<DeltaTable>, LakeError> {
    let url = root.table_url(table.name);
    // A local folder that is not there is no table (the kernel calls it an invalid location).
    if url.to_file_path().is_ok_and(|dir| !dir.exists()) {
        return Ok(None);
    }
    let builder = DeltaTableBuilder::from_url(url.clone())
        .map_err(delta_err(table, "locating the table"))?
        .with_storage_backend(root.store.clone(), url);
    let mut delta = builder.build().map_err(delta_err(table, "opening the table"))?;
    match delta.load().await {
        Ok(()) => Ok(Some(delta)),
        Err(DeltaTableError::NotATable(_)) => Ok(None),
        Err(e) => Err(delta_err(table, "reading the table's log")(e)),
    }
}

/// Loads the table's newest version, creating the table first if the lake has none.
pub async fn open(root: &LakeRoot, table: &TableDef) -> Result<DeltaTable, LakeError> {
    if let Some(delta) = open_existing(root, table).await? {
        return Ok(delta);
    }
    let url = root.table_url(table.name);
    if let Ok(dir) = url.to_file_path() {
        std::fs::create_dir_all(&dir).map_err(|e| LakeError::Store {
            table: table.name.to_owned(),
            context: "creating the folder",
            path: dir.display().to_string(),
            source: Box::new(e),
        })?;
    }
    let mut delta = DeltaTableBuilder::from_url(url.clone())
        .map_err(delta_err(table, "locating the table"))?
        .with_storage_backend(root.store.clone(), url)
        .build()
        .map_err(delta_err(table, "opening the table"))?;
    let partition_columns: Vec<&str> = table.lake_partition.iter().map(|p| p.column()).collect();
    // Another writer may create it at the same moment: then its table is ours too.
    delta
        .create()
        .with_table_name(table.name)
        .with_comment(format!(
            "fdsync warehouse table {} (see warehouse-contract.md)",
            table.name
        ))
        .with_columns(columns(table))
        .with_partition_columns(partition_columns)
        .with_save_mode(SaveMode::Ignore)
        .await
        .map_err(delta_err(table, "creating the table"))?;
    delta.load().await.map_err(delta_err(table, "reading the new table"))?;
    Ok(delta)
}

/// The last commit sequence `app_id` published into this table, if any.
pub async fn watermark(delta: &DeltaTable, table: &TableDef, app_id: &str) -> Result<Option<i64>, LakeError> {
    let state = delta.snapshot().map_err(delta_err(table, "reading the table state"))?;
    state
        .transaction_version(delta.log_store().as_ref(), app_id)
        .await
        .map_err(delta_err(table, "reading the publish watermark"))
}

/// A live data file of the table.
#[derive(Debug, Clone)]
pub struct LiveFile {
    /// Path relative to the table folder, as the log has it.
    pub path: String,
    /// The partition value (`None` for an unpartitioned table or a NULL value).
    pub partition: Option<String>,
    pub remove: Remove,
}

/// Every live file, with its partition value.
pub fn live_files(delta: &DeltaTable, table: &TableDef) -> Result<Vec<LiveFile>, LakeError> {
    let state = delta.snapshot().map_err(delta_err(table, "reading the table state"))?;
    let column = table.lake_partition.map(|p| p.column());
    Ok(state
        .log_data()
        .iter()
        .map(|f: LogicalFileView| LiveFile {
            path: f.path().into_owned(),
            partition: column.and_then(|c| f.partition_values_map().remove(c).flatten()),
            remove: f.remove_action(true),
        })
        .collect())
}

/// What one publish adds to a table.
#[derive(Debug)]
pub struct NewFile {
    pub path: String,
    pub partition: Option<String>,
    pub size: i64,
    pub rows: u64,
}

/// How a publish changes the table, for the log and for conflict checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Rows of keyless logs: new files only, which never conflict.
    BlindAppend,
    /// Keyed rows merged into the files they replace (or appended after
    /// checking the keys are new): conflicts with any concurrent data change,
    /// so a concurrent writer's rows are never lost or duplicated.
    Merge,
    /// The same rows in fewer files: readers' results do not change, and a
    /// concurrent publish that removed one of the files wins.
    Compact,
}

/// Commits removes and adds, with `app_id`'s new watermark when given, in one log entry.
///
/// # Errors
/// [`LakeError::Conflict`] when another writer changed the table meanwhile
/// (the caller publishes again from the newer version); other failures as
/// [`LakeError::Delta`].
pub async fn commit(
    delta: &DeltaTable,
    table: &TableDef,
    change: Change,
    removes: Vec<Remove>,
    adds: Vec<NewFile>,
    watermark: Option<(&str, i64)>,
) -> Result<u64, LakeError> {
    let data_change = change != Change::Compact;
    let now = chrono::Utc::now().timestamp_millis();
    let column = table.lake_partition.map(|p| p.column());
    let mut actions: Vec<Action> = removes
        .into_iter()
        .map(|mut r| {
            r.deletion_timestamp = Some(now);
            r.data_change = data_change;
            Action::Remove(r)
        })
        .collect();
    actions.extend(adds.into_iter().map(|f| {
        let partition_values: HashMap<String, Option<String>> = column
            .map(|c| (c.to_owned(), f.partition.clone()))
            .into_iter()
            .collect();
        Action::Add(Add {
            path: f.path,
            partition_values,
            size: f.size,
            modification_time: now,
            data_change,
            stats: Some(format!("{{\"numRecords\":{}}}", f.rows)),
            tags: None,
            deletion_vector: None,
            base_row_id: None,
            default_row_commit_version: None,
            clustering_provider: None,
        })
    }));
    let key = table.key.join(", ");
    let (operation, blind) = match change {
        Change::BlindAppend => (
            DeltaOperation::Write {
                mode: SaveMode::Append,
                partition_by: table.lake_partition.map(|p| vec![p.column().to_owned()]),
                predicate: None,
            },
            true,
        ),
        Change::Merge => (
            DeltaOperation::Merge {
                predicate: None,
                merge_predicate: Some(format!("same ({key})")),
                matched_predicates: Vec::new(),
                not_matched_predicates: Vec::new(),
                not_matched_by_source_predicates: Vec::new(),
            },
            false,
        ),
        Change::Compact => (
            DeltaOperation::Optimize {
                predicate: None,
                target_size: 0,
            },
            false,
        ),
    };
    let mut properties = CommitProperties::default().with_metadata([
        ("isBlindAppend".to_owned(), serde_json::Value::Bool(blind)),
        (
            "engineInfo".to_owned(),
            serde_json::Value::from(concat!("fdsync/", env!("CARGO_PKG_VERSION"))),
        ),
    ]);
    if let Some((app_id, upto)) = watermark {
        properties = properties.with_application_transaction(Transaction::new(app_id, upto));
    }
    let state = delta.snapshot().map_err(delta_err(table, "reading the table state"))?;
    let finished = CommitBuilder::from(properties)
        .with_actions(actions)
        .build(Some(state as &dyn TableReference), delta.log_store(), operation)
        .await;
    match finished {
        Ok(done) => Ok(done.version()),
        Err(DeltaTableError::Transaction {
            source: TransactionError::CommitConflict(conflict),
        }) => Err(LakeError::Conflict {
            table: table.name.to_owned(),
            message: conflict.to_string(),
        }),
        Err(e) => Err(delta_err(table, "committing")(e)),
    }
}
