//! Kafka messages holding cdcflow's JSON change envelopes (the `json` converter without schemas),
//! turned straight into the spark engine's stream rows (`cdcflow.spark_engine.rows`): what the
//! `kafka` source's `decode_spark_row`, `infer_row_schema` and `record_to_row` give for each
//! message, without a Python object per value. Anything this path does not reproduce exactly (a
//! value that is not such an envelope, a number beyond 64 bits, a non-finite float, a duplicate
//! key, text that is not UTF-8) declines the whole batch, which the Python path then decodes
//! (and rejects what it must) as always.

use std::borrow::Cow;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::batch::Datum;
use crate::json::{write_scalar, write_text};

const MAX_DEPTH: usize = 64;

enum Json<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// Borrowed from the message where it has no escapes.
    Str(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    /// Members in their order (no key twice).
    Object(Vec<(Cow<'a, str>, Json<'a>)>),
}

/// Why this path declines a batch (never shown: the Python path gives the real answer).
struct Decline;

type Parsed<T> = Result<T, Decline>;

struct Parser<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    fn parse(text: &'a [u8]) -> Parsed<Json<'a>> {
        let mut parser = Parser { text, at: 0 };
        let value = parser.value(0)?;
        parser.space();
        if parser.at != text.len() {
            return Err(Decline);
        }
        Ok(value)
    }

    fn space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.text.get(self.at) {
            self.at += 1;
        }
    }

    fn literal(&mut self, word: &[u8], value: Json<'a>) -> Parsed<Json<'a>> {
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(Decline)
        }
    }

    fn value(&mut self, depth: usize) -> Parsed<Json<'a>> {
        if depth > MAX_DEPTH {
            return Err(Decline);
        }
        self.space();
        match self.text.get(self.at) {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => Ok(Json::Str(self.string()?)),
            Some(b't') => self.literal(b"true", Json::Bool(true)),
            Some(b'f') => self.literal(b"false", Json::Bool(false)),
            Some(b'n') => self.literal(b"null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(Decline), // NaN and Infinity, which Python reads, are left to Python
        }
    }

    fn object(&mut self, depth: usize) -> Parsed<Json<'a>> {
        self.at += 1;
        let mut members: Vec<(Cow<'a, str>, Json<'a>)> = Vec::new();
        self.space();
        if self.text.get(self.at) == Some(&b'}') {
            self.at += 1;
            return Ok(Json::Object(members));
        }
        loop {
            self.space();
            if self.text.get(self.at) != Some(&b'"') {
                return Err(Decline);
            }
            let key = self.string()?;
            if members.iter().any(|(k, _)| *k == key) {
                return Err(Decline);
            }
            self.space();
            if self.text.get(self.at) != Some(&b':') {
                return Err(Decline);
            }
            self.at += 1;
            let value = self.value(depth + 1)?;
            members.push((key, value));
            self.space();
            match self.text.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Json::Object(members));
                }
                _ => return Err(Decline),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Parsed<Json<'a>> {
        self.at += 1;
        let mut items = Vec::new();
        self.space();
        if self.text.get(self.at) == Some(&b']') {
            self.at += 1;
            return Ok(Json::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.space();
            match self.text.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(Decline),
            }
        }
    }

    fn hex4(&mut self) -> Parsed<u32> {
        let digits = self.text.get(self.at..self.at + 4).ok_or(Decline)?;
        let mut value = 0;
        for digit in digits {
            // Exactly four hex digits (from_str_radix would also take a sign).
            value = value << 4 | (*digit as char).to_digit(16).ok_or(Decline)?;
        }
        self.at += 4;
        Ok(value)
    }

    fn string(&mut self) -> Parsed<Cow<'a, str>> {
        self.at += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let start = self.at;
            let rest = &self.text[start..];
            self.at += rest
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .unwrap_or(rest.len());
            let run = &self.text[start..self.at];
            match self.text.get(self.at) {
                Some(b'"') if out.is_empty() => {
                    // No escape: the text as it is in the message.
                    self.at += 1;
                    return std::str::from_utf8(run).map(Cow::Borrowed).map_err(|_| Decline);
                }
                Some(b'"') => {
                    out.extend_from_slice(run);
                    self.at += 1;
                    return String::from_utf8(out).map(Cow::Owned).map_err(|_| Decline);
                }
                Some(b'\\') => {
                    out.extend_from_slice(run);
                    self.at += 1;
                    let escape = *self.text.get(self.at).ok_or(Decline)?;
                    self.at += 1;
                    let plain = match escape {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => {
                            let mut code = self.hex4()?;
                            if (0xD800..0xDC00).contains(&code) {
                                // A high surrogate makes a character only with the low one after it.
                                if self.text.get(self.at..self.at + 2) != Some(b"\\u") {
                                    return Err(Decline);
                                }
                                self.at += 2;
                                let low = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&low) {
                                    return Err(Decline);
                                }
                                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                            } else if (0xDC00..0xE000).contains(&code) {
                                return Err(Decline);
                            }
                            let character = char::from_u32(code).ok_or(Decline)?;
                            let mut buffer = [0u8; 4];
                            out.extend_from_slice(character.encode_utf8(&mut buffer).as_bytes());
                            continue;
                        }
                        _ => return Err(Decline),
                    };
                    out.push(plain);
                }
                _ => return Err(Decline), // a control character (strict JSON) or the end
            }
        }
    }

    fn number(&mut self) -> Parsed<Json<'a>> {
        let start = self.at;
        let digits = |parser: &mut Parser<'_>| {
            let from = parser.at;
            while parser.text.get(parser.at).is_some_and(u8::is_ascii_digit) {
                parser.at += 1;
            }
            parser.at - from
        };
        if self.text.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        let first = self.at;
        if digits(self) == 0 || (self.text[first] == b'0' && self.at - first > 1) {
            return Err(Decline);
        }
        let mut integral = true;
        if self.text.get(self.at) == Some(&b'.') {
            self.at += 1;
            integral = false;
            if digits(self) == 0 {
                return Err(Decline);
            }
        }
        if let Some(b'e' | b'E') = self.text.get(self.at) {
            self.at += 1;
            integral = false;
            if let Some(b'+' | b'-') = self.text.get(self.at) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return Err(Decline);
            }
        }
        let text = std::str::from_utf8(&self.text[start..self.at]).map_err(|_| Decline)?;
        if integral {
            // Python reads any size; beyond 64 bits the schema says varint: left to Python.
            return text.parse::<i64>().map(Json::Int).map_err(|_| Decline);
        }
        match text.parse::<f64>() {
            Ok(value) if value.is_finite() => Ok(Json::Float(value)),
            _ => Err(Decline),
        }
    }
}

impl<'a> Json<'a> {
    fn get(&self, name: &str) -> Option<&Json<'a>> {
        match self {
            Json::Object(members) => members.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    fn is_truthy_object(&self) -> bool {
        matches!(self, Json::Object(members) if !members.is_empty())
    }
}

/// A string as `json.dumps` writes it with `ensure_ascii=True`: only printable ASCII as it is.
pub(crate) fn write_ascii_text(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let unit = |out: &mut Vec<u8>, code: u32| {
        out.extend_from_slice(b"\\u");
        for shift in [12, 8, 4, 0] {
            out.push(HEX[((code >> shift) & 0xF) as usize]);
        }
    };
    out.push(b'"');
    for character in text.chars() {
        match character {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\u{08}' => out.extend_from_slice(b"\\b"),
            '\u{0c}' => out.extend_from_slice(b"\\f"),
            ' '..='~' => out.push(character as u8),
            _ => {
                let code = character as u32;
                if code >= 0x10000 {
                    let offset = code - 0x10000;
                    unit(out, 0xD800 | (offset >> 10));
                    unit(out, 0xDC00 | (offset & 0x3FF));
                } else {
                    unit(out, code);
                }
            }
        }
    }
    out.push(b'"');
}

/// `value` as `compact_json` writes it (keys in their order, UTF-8) or, with `canonical`, as
/// `canonical_json` does (keys sorted, ASCII); scalars as Python writes them either way.
fn write_json(out: &mut Vec<u8>, value: &Json, canonical: bool) {
    let text = |out: &mut Vec<u8>, text: &str| {
        if canonical {
            write_ascii_text(out, text)
        } else {
            write_text(out, text.as_bytes())
        }
    };
    match value {
        Json::Null => write_scalar(out, Datum::Null),
        Json::Bool(b) => write_scalar(out, Datum::Bool(*b)),
        Json::Int(n) => write_scalar(out, Datum::Long(*n)),
        Json::Float(x) => write_scalar(out, Datum::Double(*x)),
        Json::Str(value) => text(out, value),
        Json::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_json(out, item, canonical);
            }
            out.push(b']');
        }
        Json::Object(members) => {
            let mut ordered: Vec<&(Cow<'_, str>, Json<'_>)> = members.iter().collect();
            if canonical {
                ordered.sort_by(|a, b| a.0.cmp(&b.0)); // UTF-8 byte order is code point order
            }
            out.push(b'{');
            for (index, (key, item)) in ordered.into_iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                text(out, key);
                out.push(b':');
                write_json(out, item, canonical);
            }
            out.push(b'}');
        }
    }
}

/// `inferred_type`: the CQL type a schemaless value is written as.
fn inferred_type<'a>(value: &Json, untyped_null: &'a str) -> &'a str {
    match value {
        Json::Null => untyped_null,
        Json::Bool(_) => "boolean",
        Json::Int(_) => "bigint",
        Json::Float(_) => "double",
        Json::Str(_) | Json::Array(_) | Json::Object(_) => "text",
    }
}

/// `RowSchema.to_json()` of the schema `infer_row_schema` reads off an event's key and row.
fn write_inferred_schema(out: &mut Vec<u8>, namespace: &str, key: &Json, row: &Json, untyped_null: &str) {
    let columns = |out: &mut Vec<u8>, members: &Json, optional: bool| {
        out.push(b'[');
        if let Json::Object(members) = members {
            for (index, (name, value)) in members.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                out.push(b'[');
                write_ascii_text(out, name);
                out.push(b',');
                write_ascii_text(out, inferred_type(value, untyped_null));
                out.extend_from_slice(if optional { b",true]" } else { b",false]" });
            }
        }
        out.push(b']');
    };
    out.extend_from_slice(b"{\"namespace\":");
    write_ascii_text(out, namespace);
    out.extend_from_slice(b",\"version\":1,\"key\":");
    columns(out, key, false);
    out.extend_from_slice(b",\"value\":");
    columns(out, row, true);
    out.push(b'}');
}

/// A text field of the envelope's `source` block: absent means `default`; anything but a string
/// is left to Python.
fn source_text<'a>(source: &'a Json<'_>, name: &str, default: &'a str) -> Parsed<&'a str> {
    match source.get(name) {
        None => Ok(default),
        Some(Json::Str(text)) => Ok(text),
        Some(_) => Err(Decline),
    }
}

/// Arrow `string` column data: int32 offsets, UTF-8 bytes, and a validity bitmap when nullable.
#[derive(Default)]
struct TextColumn {
    offsets: Vec<i32>,
    data: Vec<u8>,
    valid: Vec<u8>,
    nulls: usize,
}

impl TextColumn {
    fn push_bit(&mut self, present: bool) {
        let row = self.offsets.len().saturating_sub(1);
        if row & 7 == 0 {
            self.valid.push(0);
        }
        if present {
            *self.valid.last_mut().unwrap_or(&mut 0) |= 1 << (row % 8);
        } else {
            self.nulls += 1;
        }
    }

    fn start(&mut self) {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
    }

    /// Appends what `write` writes as the next value.
    fn push_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> Parsed<()> {
        self.start();
        self.push_bit(true);
        write(&mut self.data);
        self.offsets.push(i32::try_from(self.data.len()).map_err(|_| Decline)?);
        Ok(())
    }

    fn push(&mut self, text: &str) -> Parsed<()> {
        self.push_with(|data| data.extend_from_slice(text.as_bytes()))
    }

    fn push_null(&mut self) {
        self.start();
        self.push_bit(false);
        self.offsets.push(*self.offsets.last().unwrap_or(&0));
    }

    fn into_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let offsets: Vec<u8> = if self.offsets.is_empty() {
            0i32.to_le_bytes().to_vec()
        } else {
            self.offsets.iter().flat_map(|o| o.to_le_bytes()).collect()
        };
        let valid = if self.nulls == 0 {
            py.None().into_bound(py)
        } else {
            PyBytes::new(py, &self.valid).into_any()
        };
        PyTuple::new(
            py,
            [
                PyBytes::new(py, &offsets).into_any(),
                PyBytes::new(py, &self.data).into_any(),
                valid,
                self.nulls.into_pyobject(py)?.into_any(),
            ],
        )
    }
}

/// The stream row columns this path fills, in `STREAM_COLUMNS` order (the others are constant:
/// kind `change`, no ddl, no headers, no pickled record).
#[derive(Default)]
struct Columns {
    op: TextColumn,
    destination: TextColumn,
    system: TextColumn,
    cluster: TextColumn,
    keyspace: TextColumn,
    table: TextColumn,
    partition: TextColumn,
    position: TextColumn,
    ts_us: Vec<i64>,
    snapshot: Vec<bool>,
    ts_ms: Vec<i64>,
    key: TextColumn,
    before: TextColumn,
    after: TextColumn,
    schema: TextColumn,
}

fn push_image(column: &mut TextColumn, value: Option<&Json<'_>>) -> Parsed<()> {
    match value {
        None | Some(Json::Null) => {
            column.push_null();
            Ok(())
        }
        Some(row @ Json::Object(_)) => column.push_with(|data| write_json(data, row, false)),
        Some(_) => Err(Decline),
    }
}

/// A message's change envelope, read: what a stream row holds of it.
struct Envelope<'m> {
    key: Json<'m>,
    value: Json<'m>,
    op: &'static str,
    /// `source.position` as canonical JSON text.
    position: Option<Vec<u8>>,
    ts_us: i64,
    snapshot: bool,
    ts_ms: i64,
}

impl<'m> Envelope<'m> {
    fn parse(key: Option<&'m [u8]>, value: &'m [u8]) -> Parsed<Self> {
        let key = match key {
            None => Json::Object(Vec::new()),
            Some(bytes) => Parser::parse(bytes)?,
        };
        let value = Parser::parse(value)?;
        if !matches!(key, Json::Object(_)) {
            return Err(Decline);
        }
        let (Some(op), Some(source)) = (value.get("op"), value.get("source")) else {
            return Err(Decline); // a bare row, not an envelope
        };
        let op = match op {
            Json::Str(text) => match text.as_ref() {
                "c" => "c",
                "u" => "u",
                "d" => "d",
                "r" => "r",
                _ => return Err(Decline),
            },
            _ => return Err(Decline),
        };
        if !matches!(source, Json::Object(_)) {
            return Err(Decline);
        }
        let position = match source.get("position") {
            Some(Json::Str(text)) => match Parser::parse(text.as_bytes())? {
                parsed @ Json::Object(_) => {
                    let mut canonical = Vec::new();
                    write_json(&mut canonical, &parsed, true);
                    Some(canonical)
                }
                _ => return Err(Decline),
            },
            Some(_) => return Err(Decline),
            None => None,
        };
        let ts_us = match source.get("ts_us") {
            None => 0,
            Some(Json::Int(n)) => *n,
            Some(_) => return Err(Decline),
        };
        let snapshot = match source.get("snapshot") {
            None => false,
            Some(Json::Bool(b)) => *b,
            Some(_) => return Err(Decline),
        };
        let ts_ms = match value.get("ts_ms") {
            Some(Json::Int(n)) if *n != 0 => *n,
            _ => return Err(Decline), // Python stamps the time it reads it: not reproducible here
        };
        Ok(Envelope {
            key,
            value,
            op,
            position,
            ts_us,
            snapshot,
            ts_ms,
        })
    }

    fn source(&self) -> &Json<'m> {
        self.value.get("source").unwrap_or(&Json::Null)
    }

    /// The row the schema is read off: `after`, else `before`, when it has columns.
    fn schema_row(&self) -> Option<&Json<'m>> {
        match (self.value.get("after"), self.value.get("before")) {
            (Some(after), _) if after.is_truthy_object() => Some(after),
            (_, Some(before)) if before.is_truthy_object() => Some(before),
            _ => None,
        }
    }

    /// The row image typed columns are read from: `coalesce(after, before, key)` of the images.
    fn image(&self) -> &Json<'m> {
        match (self.value.get("after"), self.value.get("before")) {
            (Some(after @ Json::Object(_)), _) => after,
            (_, Some(before @ Json::Object(_))) => before,
            _ => &self.key,
        }
    }

    /// Appends the envelope columns (`op` to `ts_ms`) and `namespace` for the schema.
    fn push_envelope(&self, columns: &mut Columns, topic: &str, partition: i64, offset: i64) -> Parsed<String> {
        let partition_id = format!("{topic}:{partition}");
        let source = self.source();
        let system = source_text(source, "connector", "kafka")?;
        let cluster = source_text(source, "name", "")?;
        let keyspace = source_text(source, "keyspace", "")?;
        let table = source_text(source, "table", "")?;
        let source_partition = source_text(source, "partition", &partition_id)?;
        columns.op.push(self.op)?;
        columns.destination.push(topic)?;
        columns.system.push(system)?;
        columns.cluster.push(cluster)?;
        columns.keyspace.push(keyspace)?;
        columns.table.push(table)?;
        columns.partition.push(source_partition)?;
        match &self.position {
            Some(canonical) => columns.position.push_with(|data| data.extend_from_slice(canonical))?,
            None => columns.position.push(&format!("{{\"offset\":{offset}}}"))?,
        }
        columns.ts_us.push(self.ts_us);
        columns.snapshot.push(self.snapshot);
        columns.ts_ms.push(self.ts_ms);
        Ok(format!("{cluster}.{keyspace}.{table}"))
    }

    fn write_schema(&self, out: &mut Vec<u8>, namespace: &str, untyped_null: &str) {
        let empty = Json::Object(Vec::new());
        write_inferred_schema(
            out,
            namespace,
            &self.key,
            self.schema_row().unwrap_or(&empty),
            untyped_null,
        );
    }
}

/// One message, appended to `columns` as a stream row; on Err the columns hold part of it (the
/// batch is dropped).
fn decode_one(
    columns: &mut Columns,
    topic: &str,
    partition: i64,
    offset: i64,
    key: Option<&[u8]>,
    value: &[u8],
    untyped_null: &str,
) -> Parsed<()> {
    let envelope = Envelope::parse(key, value)?;
    let namespace = envelope.push_envelope(columns, topic, partition, offset)?;
    columns.key.push_with(|data| write_json(data, &envelope.key, false))?;
    push_image(&mut columns.before, envelope.value.get("before"))?;
    push_image(&mut columns.after, envelope.value.get("after"))?;
    columns
        .schema
        .push_with(|data| envelope.write_schema(data, &namespace, untyped_null))
}

/// An Arrow array's buffers as Python gives them (`array.buffers()` and `array.offset`), held
/// for the call.
struct ArrowInput {
    validity: Option<PyBuffer<u8>>,
    offsets: Option<PyBuffer<u8>>,
    data: Option<PyBuffer<u8>>,
    offset: usize,
}

fn buffer_of(object: Option<&Bound<'_, PyAny>>) -> PyResult<Option<PyBuffer<u8>>> {
    match object {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => {
            let buffer = PyBuffer::<u8>::get(o)?;
            if !buffer.is_c_contiguous() {
                return Err(PyBufferError::new_err("an Arrow buffer that is not contiguous"));
            }
            Ok(Some(buffer))
        }
    }
}

fn bytes_of(buffer: &Option<PyBuffer<u8>>) -> &[u8] {
    match buffer {
        // SAFETY: the buffer is held (so valid) while `ArrowInput` lives; Arrow buffers are
        // immutable once built, and nothing writes them during the call.
        Some(b) => unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes()) },
        None => &[],
    }
}

impl ArrowInput {
    fn new(parts: &Bound<'_, PyTuple>) -> PyResult<Self> {
        // (validity, offsets or values, data or None, array offset)
        Ok(ArrowInput {
            validity: buffer_of(Some(&parts.get_item(0)?))?,
            offsets: buffer_of(Some(&parts.get_item(1)?))?,
            data: buffer_of(Some(&parts.get_item(2)?))?,
            offset: parts.get_item(3)?.extract()?,
        })
    }

    fn is_valid(&self, row: usize) -> bool {
        let bits = bytes_of(&self.validity);
        let at = self.offset + row;
        bits.is_empty() || bits.get(at / 8).is_some_and(|b| b & (1 << (at % 8)) != 0)
    }

    /// Row `row` of a binary or string array (int32 offsets), None when null.
    fn bytes(&self, row: usize) -> PyResult<Option<&[u8]>> {
        if !self.is_valid(row) {
            return Ok(None);
        }
        let offsets = bytes_of(&self.offsets);
        let at = (self.offset + row) * 4;
        let bound = |i: usize| -> PyResult<usize> {
            let raw: [u8; 4] = offsets
                .get(i..i + 4)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| PyValueError::new_err("Arrow offsets shorter than the array"))?;
            usize::try_from(i32::from_le_bytes(raw)).map_err(|_| PyValueError::new_err("a negative Arrow offset"))
        };
        let (start, end) = (bound(at)?, bound(at + 4)?);
        bytes_of(&self.data)
            .get(start..end)
            .map(Some)
            .ok_or_else(|| PyValueError::new_err("Arrow data shorter than its offsets"))
    }

    /// Row `row` of an int32 or int64 array (`width` bytes a value).
    fn integer(&self, row: usize, width: usize) -> PyResult<i64> {
        let values = bytes_of(&self.offsets);
        let at = (self.offset + row) * width;
        let raw = values
            .get(at..at + width)
            .ok_or_else(|| PyValueError::new_err("Arrow values shorter than the array"))?;
        Ok(match width {
            4 => i32::from_le_bytes(raw.try_into().unwrap_or_default()) as i64,
            _ => i64::from_le_bytes(raw.try_into().unwrap_or_default()),
        })
    }
}

fn bits_of(values: &[bool]) -> Vec<u8> {
    let mut bits = vec![0u8; values.len().div_ceil(8)];
    for (index, value) in values.iter().enumerate() {
        if *value {
            bits[index / 8] |= 1 << (index % 8);
        }
    }
    bits
}

fn longs_of(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The Kafka messages of a record batch, each given to `decode` (topic, partition, offset, key,
/// value), but those flagged to skip; false when one declined (or cannot be read this way).
/// `messages` is `(topic, partition, offset, key, value, skip)`: `topic`, `key` and `value`
/// string/binary arrays and `partition` (int32) and `offset` (int64) integer arrays, each as
/// `(validity, offsets or values, data or None, array offset)` of `array.buffers()`, and `skip`
/// a byte per row, 1 for a cdcflow tombstone (no change).
fn each_message(
    rows: usize,
    messages: &Bound<'_, PyTuple>,
    mut decode: impl FnMut(&str, i64, i64, Option<&[u8]>, &[u8]) -> Parsed<()>,
) -> PyResult<bool> {
    let input = |index: usize| -> PyResult<ArrowInput> { ArrowInput::new(messages.get_item(index)?.cast()?) };
    let (topics, partitions, offsets) = (input(0)?, input(1)?, input(2)?);
    let (keys, values) = (input(3)?, input(4)?);
    let skip_flags = messages.get_item(5)?;
    let skip: &[u8] = skip_flags.cast::<PyBytes>()?.as_bytes();
    if skip.len() != rows {
        return Err(PyValueError::new_err("a skip flag per row"));
    }
    for (row, skipped) in skip.iter().enumerate() {
        if *skipped != 0 {
            continue;
        }
        let Some(message) = values.bytes(row)? else {
            return Ok(false); // a null value that is no cdcflow tombstone: a bare delete
        };
        let Some(name) = topics.bytes(row)? else {
            return Ok(false);
        };
        let Ok(name) = std::str::from_utf8(name) else {
            return Ok(false);
        };
        let (number, at) = (partitions.integer(row, 4)?, offsets.integer(row, 8)?);
        if decode(name, number, at, keys.bytes(row)?, message).is_err() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The envelope columns `op` to `ts_ms` in `STREAM_COLUMNS` order, for Python.
fn envelope_items<'py>(py: Python<'py>, columns: Columns) -> PyResult<Vec<Bound<'py, PyAny>>> {
    Ok(vec![
        columns.op.into_py(py)?.into_any(),
        columns.destination.into_py(py)?.into_any(),
        columns.system.into_py(py)?.into_any(),
        columns.cluster.into_py(py)?.into_any(),
        columns.keyspace.into_py(py)?.into_any(),
        columns.table.into_py(py)?.into_any(),
        columns.partition.into_py(py)?.into_any(),
        columns.position.into_py(py)?.into_any(),
        PyBytes::new(py, &longs_of(&columns.ts_us)).into_any(),
        PyBytes::new(py, &bits_of(&columns.snapshot)).into_any(),
        PyBytes::new(py, &longs_of(&columns.ts_ms)).into_any(),
    ])
}

/// The stream rows of a record batch of Kafka messages (`each_message`), built as Arrow buffers.
/// Returns the columns `op` to `row_schema` in `STREAM_COLUMNS` order, each a string column as
/// `(offsets, data, validity or None, null count)` or the raw little-endian int64 / bit-packed
/// boolean values, then the row count, or None when any message is one this path does not
/// decode exactly as the Python path does.
#[pyfunction]
pub fn json_envelope_rows<'py>(
    py: Python<'py>,
    rows: usize,
    messages: &Bound<'py, PyTuple>,
    untyped_null: &str,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let mut columns = Columns::default();
    let decoded = each_message(rows, messages, |name, number, at, k, v| {
        decode_one(&mut columns, name, number, at, k, v, untyped_null)
    })?;
    if !decoded {
        return Ok(None);
    }
    let count = columns.ts_us.len();
    let (key, before, after, schema) = (
        std::mem::take(&mut columns.key),
        std::mem::take(&mut columns.before),
        std::mem::take(&mut columns.after),
        std::mem::take(&mut columns.schema),
    );
    let mut items = envelope_items(py, columns)?;
    for images in [key, before, after, schema] {
        items.push(images.into_py(py)?.into_any());
    }
    items.push(count.into_pyobject(py)?.into_any());
    Ok(Some(PyTuple::new(py, items)?))
}

/// A bit per row, set where the row has a value.
#[derive(Default)]
struct Validity {
    bits: Vec<u8>,
    rows: usize,
    nulls: usize,
}

impl Validity {
    fn push(&mut self, present: bool) {
        if self.rows & 7 == 0 {
            self.bits.push(0);
        }
        if present {
            if let Some(last) = self.bits.last_mut() {
                *last |= 1 << (self.rows % 8);
            }
        } else {
            self.nulls += 1;
        }
        self.rows += 1;
    }
}

/// A typed column's values (a null's slot holds zero).
enum TypedValues {
    /// Signed integers of `width` bytes, little-endian.
    Integer {
        width: usize,
        data: Vec<u8>,
    },
    Double(Vec<u8>),
    Boolean(Vec<bool>),
    Text(TextColumn),
}

/// One column of `typed_change_rows`, filled as Arrow's JSON reader fills it from the row
/// images (`pyarrow.json` with the column's type), declining wherever that reader refuses a
/// value: a value of another JSON type, an integer beyond the column's width.
struct TypedColumn {
    name: String,
    values: TypedValues,
    valid: Validity,
}

impl TypedColumn {
    fn new(name: String, arrow_type: &str) -> PyResult<Self> {
        let integer = |width| TypedValues::Integer {
            width,
            data: Vec::new(),
        };
        let values = match arrow_type {
            "int64" => integer(8),
            "int32" => integer(4),
            "int16" => integer(2),
            "int8" => integer(1),
            "float64" => TypedValues::Double(Vec::new()),
            "bool_" => TypedValues::Boolean(Vec::new()),
            "string" => TypedValues::Text(TextColumn::default()),
            other => return Err(PyValueError::new_err(format!("no typed column of Arrow type {other}"))),
        };
        Ok(TypedColumn {
            name,
            values,
            valid: Validity::default(),
        })
    }

    fn push(&mut self, value: Option<&Json<'_>>) -> Parsed<()> {
        let value = match value {
            None | Some(Json::Null) => None,
            Some(present) => Some(present),
        };
        match (&mut self.values, value) {
            (TypedValues::Text(column), None) => column.push_null(),
            (TypedValues::Text(column), Some(Json::Str(text))) => column.push(text)?,
            (TypedValues::Integer { width, data }, None) => data.extend(std::iter::repeat_n(0, *width)),
            (TypedValues::Integer { width, data }, Some(Json::Int(n))) => {
                let bits = (*width * 8) as u32;
                if bits < 64 && (*n < -(1i64 << (bits - 1)) || *n >= 1i64 << (bits - 1)) {
                    return Err(Decline);
                }
                data.extend_from_slice(&n.to_le_bytes()[..*width]);
            }
            (TypedValues::Double(data), None) => data.extend_from_slice(&0f64.to_le_bytes()),
            (TypedValues::Double(data), Some(Json::Float(x))) => data.extend_from_slice(&x.to_le_bytes()),
            // An integer's text read as a double: the nearest double, as `as` rounds.
            (TypedValues::Double(data), Some(Json::Int(n))) => data.extend_from_slice(&(*n as f64).to_le_bytes()),
            (TypedValues::Boolean(values), None) => values.push(false),
            (TypedValues::Boolean(values), Some(Json::Bool(b))) => values.push(*b),
            _ => return Err(Decline),
        }
        if !matches!(self.values, TypedValues::Text(_)) {
            self.valid.push(value.is_some());
        }
        Ok(())
    }

    /// `(values, validity or None, null count)`; a text column as `(offsets, data, validity or None, null count)`.
    fn into_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let values = match self.values {
            TypedValues::Text(column) => return Ok(column.into_py(py)?.into_any()),
            TypedValues::Integer { data, .. } | TypedValues::Double(data) => data,
            TypedValues::Boolean(values) => bits_of(&values),
        };
        let valid = if self.valid.nulls == 0 {
            py.None().into_bound(py)
        } else {
            PyBytes::new(py, &self.valid.bits).into_any()
        };
        Ok(PyTuple::new(
            py,
            [
                PyBytes::new(py, &values).into_any(),
                valid,
                self.valid.nulls.into_pyobject(py)?.into_any(),
            ],
        )?
        .into_any())
    }
}

/// `typed_change_rows` of the stream rows `json_envelope_rows` would build, without building
/// them: the envelope columns `op` to `ts_ms` (as there), then each of `columns` (`(name, Arrow
/// type)`) typed from the row image, then the row count. None (decline) when a message is not of
/// `destination` with one of `row_schemas`, a value is not one Arrow's JSON reader types exactly,
/// or `json_envelope_rows` would decline.
#[pyfunction]
pub fn json_envelope_typed_rows<'py>(
    py: Python<'py>,
    rows: usize,
    messages: &Bound<'py, PyTuple>,
    untyped_null: &str,
    destination: &str,
    row_schemas: Vec<String>,
    columns: Vec<(String, String)>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let known: std::collections::HashSet<Vec<u8>> = row_schemas.into_iter().map(String::into_bytes).collect();
    let mut typed = columns
        .into_iter()
        .map(|(name, arrow_type)| TypedColumn::new(name, &arrow_type))
        .collect::<PyResult<Vec<_>>>()?;
    let mut envelope_columns = Columns::default();
    let mut schema = Vec::new();
    let decoded = each_message(rows, messages, |name, number, at, k, v| {
        if name != destination {
            return Err(Decline);
        }
        let envelope = Envelope::parse(k, v)?;
        for side in ["before", "after"] {
            // Images json_envelope_rows declines (neither a row nor null) are declined here too.
            if !matches!(envelope.value.get(side), None | Some(Json::Null | Json::Object(_))) {
                return Err(Decline);
            }
        }
        let namespace = envelope.push_envelope(&mut envelope_columns, name, number, at)?;
        schema.clear();
        envelope.write_schema(&mut schema, &namespace, untyped_null);
        if !known.contains(&schema) {
            return Err(Decline);
        }
        let image = envelope.image();
        for column in typed.iter_mut() {
            column.push(image.get(&column.name))?;
        }
        Ok(())
    })?;
    if !decoded {
        return Ok(None);
    }
    let count = envelope_columns.ts_us.len();
    let mut items = envelope_items(py, envelope_columns)?;
    for column in typed {
        items.push(column.into_py(py)?);
    }
    items.push(count.into_pyobject(py)?.into_any());
    Ok(Some(PyTuple::new(py, items)?))
}
