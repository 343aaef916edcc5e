//! Arrow batches read by DuckDB as a table function, `INSERT ... SELECT`ed
//! into a table. DuckDB maps each vector of rows from Arrow itself, pointing
//! at the batch's buffers, where the appender copied every string twice: into
//! a data chunk on our side, then into its own buffer before appending.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use arrow::array::{Array, StructArray};
use arrow::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow::record_batch::RecordBatch;
use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab, to_duckdb_logical_type_for_field};
use duckdb::{Connection, ffi};

/// The table function's name, registered on the writer's connection.
pub(super) const ARROW_ROWS: &str = "_fdsync_arrow_rows";

type BoxError = Box<dyn std::error::Error>;

/// An in-memory DuckDB database (the warehouse file is attached to it) and a
/// second connection to it, ours. DuckDB's Arrow mapping needs a connection,
/// and the `duckdb` crate does not hand out its own.
pub(super) struct Instance {
    db: ffi::duckdb_database,
    mapper: ffi::duckdb_connection,
}

// SAFETY: the handles are DuckDB's, usable from any thread; the mapping
// connection is used only by the writer's statements, one at a time.
unsafe impl Send for Instance {}

impl Instance {
    pub(super) fn open_in_memory() -> Result<Instance, String> {
        let mut db = std::ptr::null_mut();
        let mut mapper = std::ptr::null_mut();
        let mut error = std::ptr::null_mut();
        // SAFETY: the path is a NUL-terminated string, every out-pointer valid;
        // an error message DuckDB returns is freed once.
        unsafe {
            if ffi::duckdb_open_ext(c":memory:".as_ptr(), &mut db, std::ptr::null_mut(), &mut error)
                != ffi::DuckDBSuccess
            {
                let message = if error.is_null() {
                    "opening DuckDB failed".to_owned()
                } else {
                    let message = CStr::from_ptr(error).to_string_lossy().into_owned();
                    ffi::duckdb_free(error.cast());
                    message
                };
                return Err(message);
            }
            if ffi::duckdb_connect(db, &mut mapper) != ffi::DuckDBSuccess {
                ffi::duckdb_close(&mut db);
                return Err("connecting to DuckDB failed".to_owned());
            }
        }
        Ok(Instance { db, mapper })
    }

    /// A connection of the `duckdb` crate to this database, which the
    /// database outlives: DuckDB keeps it open while a connection is.
    pub(super) fn connection(&self) -> Result<Connection, String> {
        // SAFETY: `db` is an open database.
        let conn = unsafe { Connection::open_from_raw(self.db) }.map_err(|e| e.to_string())?;
        conn.register_table_function::<ArrowRows>(ARROW_ROWS)
            .map_err(|e| format!("registering the Arrow scan: {e}"))?;
        Ok(conn)
    }

    /// Lends `batch` to [`ARROW_ROWS`] until the result drops; `json` says
    /// which of its columns hold JSON (a column past its end does not).
    pub(super) fn lend(&self, batch: RecordBatch, json: Vec<bool>) -> Result<Lent, String> {
        let mut arrow_schema = FFI_ArrowSchema::try_from(batch.schema().as_ref()).map_err(|e| e.to_string())?;
        let mut schema = std::ptr::null_mut();
        // SAFETY: the connection is open; the schema is read, not taken.
        let error = unsafe { ffi::duckdb_schema_from_arrow(self.mapper, (&raw mut arrow_schema).cast(), &mut schema) };
        if let Some(message) = error_message(error) {
            return Err(format!("mapping an Arrow schema: {message}"));
        }
        let lent = Arc::new(Lending {
            batch,
            json,
            schema,
            mapper: self.mapper,
        });
        let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        LENT.lock().unwrap_or_else(PoisonError::into_inner).insert(token, lent);
        Ok(Lent(token))
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: both handles came from `duckdb_open_ext`/`duckdb_connect`,
        // closed once. Connections still open keep the database open.
        unsafe {
            ffi::duckdb_disconnect(&mut self.mapper);
            ffi::duckdb_close(&mut self.db);
        }
    }
}

/// A batch lent to [`ARROW_ROWS`], by the token its argument names.
struct Lending {
    batch: RecordBatch,
    json: Vec<bool>,
    schema: ffi::duckdb_arrow_converted_schema,
    /// The [`Instance`]'s mapping connection, open while a [`Lent`] (which
    /// only the instance's owner makes and drops) is, and so while a
    /// statement reads it: nothing holds a lending longer.
    mapper: ffi::duckdb_connection,
}

// SAFETY: read only, by the statement of the [`Lent`] that lends it, on one thread at a time.
unsafe impl Send for Lending {}
unsafe impl Sync for Lending {}

impl Drop for Lending {
    fn drop(&mut self) {
        // SAFETY: made by `duckdb_schema_from_arrow`, destroyed once.
        unsafe { ffi::duckdb_destroy_arrow_converted_schema(&mut self.schema) }
    }
}

static LENT: LazyLock<Mutex<HashMap<u64, Arc<Lending>>>> = LazyLock::new(Default::default);
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// A batch [`ARROW_ROWS`] reads while this lives, by [`Lent::token`].
pub(super) struct Lent(u64);

impl Lent {
    pub(super) fn token(&self) -> u64 {
        self.0
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        LENT.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.0);
    }
}

/// A DuckDB error value as a message, destroyed; `None` when it holds no error.
fn error_message(mut error: ffi::duckdb_error_data) -> Option<String> {
    if error.is_null() {
        return None;
    }
    // SAFETY: `error` is a live error value, destroyed once here.
    unsafe {
        let message = ffi::duckdb_error_data_has_error(error).then(|| {
            CStr::from_ptr(ffi::duckdb_error_data_message(error))
                .to_string_lossy()
                .into_owned()
        });
        ffi::duckdb_destroy_error_data(&mut error);
        message
    }
}

/// One execution's scan of a lent batch. Holding the lending here rather than
/// in the bind data, which a cached prepared statement keeps, lets the batch
/// go once the statement has run.
struct Scanned {
    lent: Arc<Lending>,
    next_row: AtomicUsize,
}

/// The lending a token names.
fn lent(token: u64) -> Result<Arc<Lending>, String> {
    LENT.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&token)
        .cloned()
        .ok_or_else(|| format!("no Arrow batch is lent as {token}"))
}

/// The table function behind [`ARROW_ROWS`]: the rows of a [`Lent`] batch.
struct ArrowRows;

impl VTab for ArrowRows {
    /// The lending's token.
    type BindData = u64;
    type InitData = Scanned;

    fn bind(bind: &BindInfo) -> Result<u64, BoxError> {
        let token = bind.get_parameter(0).to_uint64();
        let lent = lent(token)?;
        for (i, field) in lent.batch.schema().fields().iter().enumerate() {
            let mut ty = to_duckdb_logical_type_for_field(field)?;
            if lent.json.get(i).copied().unwrap_or(false) {
                ty.set_alias("JSON");
            }
            bind.add_result_column(field.name(), ty);
        }
        Ok(token)
    }

    fn init(init: &InitInfo) -> Result<Scanned, BoxError> {
        init.set_max_threads(1);
        // SAFETY: the bind data is this function's, a token.
        let token = unsafe { *init.get_bind_data::<u64>() };
        Ok(Scanned {
            lent: lent(token)?,
            next_row: AtomicUsize::new(0),
        })
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Result<(), BoxError> {
        let scanned = func.get_init_data();
        let lent = &scanned.lent;
        let rows = lent.batch.num_rows();
        // SAFETY: a constant of the library.
        let vector = unsafe { ffi::duckdb_vector_size() } as usize;
        let from = scanned.next_row.fetch_add(vector, Ordering::Relaxed);
        if from >= rows {
            output.set_len(0);
            return Ok(());
        }
        let len = vector.min(rows - from);
        let data = StructArray::from(lent.batch.slice(from, len)).into_data();
        let mut array = FFI_ArrowArray::new(&data);
        let mut chunk = std::ptr::null_mut();
        // SAFETY: the mapping connection is open while the batch is lent;
        // DuckDB takes the array (it clears our release callback); the
        // converted schema lives as long as the lending.
        let error =
            unsafe { ffi::duckdb_data_chunk_from_arrow(lent.mapper, (&raw mut array).cast(), lent.schema, &mut chunk) };
        if let Some(message) = error_message(error) {
            return Err(format!("mapping an Arrow batch: {message}").into());
        }
        // SAFETY: `chunk` is a live chunk, destroyed once; the output points
        // at a vector of it only once it is checked to be of the output's type.
        let mismatch = unsafe {
            let mismatch = reference_all(chunk, output);
            ffi::duckdb_destroy_data_chunk(&mut chunk);
            mismatch
        };
        if let Some(mismatch) = mismatch {
            return Err(format!("mapping an Arrow batch: {mismatch}").into());
        }
        output.set_len(len);
        Ok(())
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::from(LogicalTypeId::UBigint)])
    }
}

/// Points each of `output`'s vectors at `chunk`'s; what did not match, if
/// anything did not, in which case `output` is left as it is from there.
///
/// # Safety
/// `chunk` is a live data chunk.
unsafe fn reference_all(chunk: ffi::duckdb_data_chunk, output: &DataChunkHandle) -> Option<String> {
    // SAFETY: the caller's; the output chunk is live while borrowed.
    unsafe {
        let columns = ffi::duckdb_data_chunk_get_column_count(chunk) as usize;
        if columns != output.num_columns() {
            return Some(format!("{columns} columns mapped for {}", output.num_columns()));
        }
        for i in 0..columns {
            let mapped = ffi::duckdb_data_chunk_get_vector(chunk, i as u64);
            let out = ffi::duckdb_data_chunk_get_vector(output.get_ptr(), i as u64);
            if !same_type(mapped, out) {
                return Some(format!("column {} mapped to another type", i + 1));
            }
            ffi::duckdb_vector_reference_vector(out, mapped);
        }
        None
    }
}

/// A logical type DuckDB handed over, destroyed on drop.
struct OwnedType(ffi::duckdb_logical_type);

impl Drop for OwnedType {
    fn drop(&mut self) {
        // SAFETY: handed over by DuckDB, destroyed once.
        unsafe { ffi::duckdb_destroy_logical_type(&mut self.0) }
    }
}

/// Whether two vectors hold the same type, a list's items included.
///
/// # Safety
/// Both vectors are live.
unsafe fn same_type(a: ffi::duckdb_vector, b: ffi::duckdb_vector) -> bool {
    // SAFETY: the caller's.
    unsafe {
        let a = OwnedType(ffi::duckdb_vector_get_column_type(a));
        let b = OwnedType(ffi::duckdb_vector_get_column_type(b));
        same_logical_type(&a, &b)
    }
}

fn same_logical_type(a: &OwnedType, b: &OwnedType) -> bool {
    // SAFETY: both types are live while borrowed.
    unsafe {
        let id = ffi::duckdb_get_type_id(a.0);
        if id != ffi::duckdb_get_type_id(b.0) {
            return false;
        }
        match id {
            ffi::DUCKDB_TYPE_DUCKDB_TYPE_LIST => {}
            // No batch has these; their children would need comparing too.
            ffi::DUCKDB_TYPE_DUCKDB_TYPE_STRUCT
            | ffi::DUCKDB_TYPE_DUCKDB_TYPE_MAP
            | ffi::DUCKDB_TYPE_DUCKDB_TYPE_ARRAY
            | ffi::DUCKDB_TYPE_DUCKDB_TYPE_UNION => return false,
            _ => return true,
        }
        let a = OwnedType(ffi::duckdb_list_type_child_type(a.0));
        let b = OwnedType(ffi::duckdb_list_type_child_type(b.0));
        same_logical_type(&a, &b)
    }
}
