//! scylla-cdc-oracle: what ScyllaDB's Rust CDC library (scylla-cdc 0.7.0) delivers from one table's
//! CDC log between two times, one JSON object a line on stdout.
//!
//! ```text
//! scylla-cdc-oracle --host 127.0.0.1:9042 --metadata-keyspace K --keyspace KS --table T \
//!                   --start-ms MS --end-ms MS
//! ```
//!
//! `--metadata-keyspace` is the session's keyspace (`USE`): the build rewrote the crate's ScyllaDB
//! metadata tables (`system_distributed.cdc_generation_timestamps`, `system.cdc_streams`, ...) to
//! unqualified names, so they are looked up where the stand-in writer put them.
//!
//! Each line is one `CDCRow` as the crate's consumer API exposes it: `stream_id` (hex), `time`
//! (the timeuuid), `batch_seq_no`, `end_of_batch`, `operation` (its name and code), `is_expiration`,
//! `ttl`, `values` (every base-table column of the log, null when null), `deleted` (the
//! `is_value_deleted` flag of every deletable column) and `deleted_elements` (of every collection
//! or user-type column), plus `consumer`: which of the crate's consumers got it (one per stream
//! group of a generation). Values are JSON: numbers, strings, booleans; blobs and varints as
//! `0x` hex; decimals as `{"unscaled": hex, "scale": n}`; timestamps as epoch milliseconds; lists,
//! sets, vectors and tuples as arrays; maps as arrays of `[key, value]` pairs (keys need not be
//! text); user types as objects of their fields.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use scylla::client::session_builder::SessionBuilder;
use scylla::value::CqlValue;
use scylla_cdc::consumer::{CDCRow, Consumer, ConsumerFactory};
use scylla_cdc::log_reader::CDCLogReaderBuilder;
use serde_json::{json, Map, Value};

struct Args {
    host: String,
    metadata_keyspace: String,
    keyspace: String,
    table: String,
    start_ms: u64,
    end_ms: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut found = std::collections::HashMap::new();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        found.insert(flag, value);
    }
    let mut take = |flag: &str| found.remove(flag).ok_or_else(|| format!("missing {flag}"));
    let milliseconds = |flag: &str, text: String| {
        text.parse::<u64>().map_err(|_| format!("{flag} wants epoch milliseconds, got {text:?}"))
    };
    let args = Args {
        host: take("--host")?,
        metadata_keyspace: take("--metadata-keyspace")?,
        keyspace: take("--keyspace")?,
        table: take("--table")?,
        start_ms: milliseconds("--start-ms", take("--start-ms")?)?,
        end_ms: milliseconds("--end-ms", take("--end-ms")?)?,
    };
    match found.keys().next() {
        Some(unknown) => Err(format!("unknown option {unknown}")),
        None => Ok(args),
    }
}

fn hex(bytes: &[u8]) -> String {
    let digits: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("0x{digits}")
}

fn value_json(value: &CqlValue) -> Value {
    match value {
        CqlValue::Ascii(s) | CqlValue::Text(s) => json!(s),
        CqlValue::Boolean(b) => json!(b),
        CqlValue::Blob(bytes) => json!(hex(bytes)),
        CqlValue::Counter(c) => json!(c.0),
        CqlValue::Decimal(d) => {
            let (unscaled, scale) = d.as_signed_be_bytes_slice_and_exponent();
            json!({"unscaled": hex(unscaled), "scale": scale})
        }
        CqlValue::Date(d) => json!({"days_since_epoch": i64::from(d.0) - (1_i64 << 31)}),
        CqlValue::Double(f) => float_json(*f),
        CqlValue::Float(f) => float_json(f64::from(*f)),
        CqlValue::Duration(d) => json!({"months": d.months, "days": d.days, "nanoseconds": d.nanoseconds}),
        CqlValue::Empty => json!({"empty": true}),
        CqlValue::Int(i) => json!(i),
        CqlValue::BigInt(i) => json!(i),
        CqlValue::SmallInt(i) => json!(i),
        CqlValue::TinyInt(i) => json!(i),
        CqlValue::Timestamp(t) => json!(t.0),
        CqlValue::Time(t) => json!({"nanoseconds_since_midnight": t.0}),
        CqlValue::Inet(ip) => json!(ip.to_string()),
        CqlValue::Timeuuid(u) => json!(u.to_string()),
        CqlValue::Uuid(u) => json!(u.to_string()),
        CqlValue::Varint(v) => json!(hex(v.as_signed_bytes_be_slice())),
        CqlValue::List(items) | CqlValue::Set(items) | CqlValue::Vector(items) => {
            Value::Array(items.iter().map(value_json).collect())
        }
        CqlValue::Map(pairs) => {
            Value::Array(pairs.iter().map(|(k, v)| json!([value_json(k), value_json(v)])).collect())
        }
        CqlValue::Tuple(items) => Value::Array(items.iter().map(optional_json).collect()),
        CqlValue::UserDefinedType { fields, .. } => {
            Value::Object(fields.iter().map(|(name, v)| (name.clone(), optional_json(v))).collect())
        }
        // CqlValue is non-exhaustive: a type the driver adds later is said so, not dropped.
        other => json!({"unsupported": format!("{other:?}")}),
    }
}

fn float_json(f: f64) -> Value {
    if f.is_finite() {
        json!(f)
    } else {
        json!(f.to_string()) // NaN, inf, -inf: JSON has no number for them
    }
}

fn optional_json(value: &Option<CqlValue>) -> Value {
    value.as_ref().map_or(Value::Null, value_json)
}

fn row_json(row: &CDCRow<'_>, consumer: usize) -> Value {
    let mut names: Vec<&str> = row.get_non_cdc_column_names().collect();
    names.sort_unstable();
    let mut values = Map::new();
    let mut deleted = Map::new();
    let mut deleted_elements = Map::new();
    for name in names {
        values.insert(name.to_string(), optional_json(row.get_value(name)));
        if row.column_deletable(name) {
            deleted.insert(name.to_string(), json!(row.is_value_deleted(name)));
        }
        if row.collection_exists(name) {
            let elements = row.get_deleted_elements(name).iter().map(value_json).collect();
            deleted_elements.insert(name.to_string(), Value::Array(elements));
        }
    }
    json!({
        "consumer": consumer,
        "stream_id": row.stream_id.to_string(),
        "time": row.time.to_string(),
        "batch_seq_no": row.batch_seq_no,
        "end_of_batch": row.end_of_batch,
        "operation": row.operation.to_string(),
        "operation_code": row.operation.clone() as i8,
        "is_expiration": row.is_expiration,
        "ttl": row.ttl,
        "values": values,
        "deleted": deleted,
        "deleted_elements": deleted_elements,
    })
}

struct JsonLinesConsumer {
    id: usize,
}

#[async_trait]
impl Consumer for JsonLinesConsumer {
    async fn consume_cdc(&mut self, data: CDCRow<'_>) -> anyhow::Result<()> {
        // println! holds stdout's lock for the whole line: consumers run concurrently.
        println!("{}", row_json(&data, self.id));
        Ok(())
    }
}

struct JsonLinesConsumerFactory {
    created: AtomicUsize,
}

#[async_trait]
impl ConsumerFactory for JsonLinesConsumerFactory {
    async fn new_consumer(&self) -> Box<dyn Consumer> {
        Box::new(JsonLinesConsumer { id: self.created.fetch_add(1, Ordering::SeqCst) })
    }
}

async fn read_log(args: Args) -> anyhow::Result<()> {
    let session = SessionBuilder::new()
        .known_node(&args.host)
        .use_keyspace(&args.metadata_keyspace, true)
        .build()
        .await?;
    let factory = Arc::new(JsonLinesConsumerFactory { created: AtomicUsize::new(0) });
    let (_reader, handle) = CDCLogReaderBuilder::new()
        .session(Arc::new(session))
        .keyspace(&args.keyspace)
        .table_name(&args.table)
        .start_timestamp(Duration::from_millis(args.start_ms))
        .end_timestamp(Duration::from_millis(args.end_ms))
        // The caller runs this once the writes it asks about are complete: nothing to wait for.
        .safety_interval(Duration::ZERO)
        .sleep_interval(Duration::from_millis(10))
        .consumer_factory(factory)
        .build()
        .await?;
    handle.await
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("scylla-cdc-oracle: {message}");
            return ExitCode::from(2);
        }
    };
    match read_log(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("scylla-cdc-oracle: {error:#}");
            ExitCode::FAILURE
        }
    }
}
