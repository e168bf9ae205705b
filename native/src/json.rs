//! JSON text exactly as `cdcflow.jsontext.compact_json` writes it (CPython's C encoder with
//! `ensure_ascii=False`, `separators=(",", ":")`, keys in their order, `default=json_default`):
//! Kafka Connect JSON payloads and the spark engine's row images.
//!
//! Floats are written as `float.__repr__` writes them (the shortest text that reads back the
//! same double), ints as `int.__repr__`, strings with the C encoder's escapes; anything JSON has
//! no type for goes through `default` (bytes as base64, sets as lists, else `str()`).

use pyo3::exceptions::{PyRecursionError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::batch::Datum;
use crate::commitlog::values::write_uuid_text;

const MAX_DEPTH: usize = 512;

#[pyclass(frozen, module = "cdcflow._native")]
pub struct JsonEncoder {
    default: Py<PyAny>,
}

/// The shortest decimal digits that read back as `value` (finite, positive), ties to even as
/// CPython's dtoa breaks them, and where the decimal point goes: `value = 0.DIGITS × 10^decpt`.
fn shortest_digits(value: f64) -> (Vec<u8>, i32) {
    let mut buffer = ryu::Buffer::new();
    let text = buffer.format_finite(value).as_bytes(); // "1.5e-7", "123.0", "1e16", "0.001"
    let (mantissa, exponent) = match text.iter().position(|b| *b == b'e') {
        Some(at) => (
            &text[..at],
            std::str::from_utf8(&text[at + 1..])
                .ok()
                .and_then(|e| e.parse().ok())
                .unwrap_or(0),
        ),
        None => (text, 0i32),
    };
    let point = mantissa.iter().position(|b| *b == b'.').unwrap_or(mantissa.len());
    let mut digits: Vec<u8> = mantissa.iter().copied().filter(|b| *b != b'.').collect();
    let mut decpt = point as i32 + exponent;
    let leading = digits.iter().take_while(|b| **b == b'0').count();
    digits.drain(..leading.min(digits.len().saturating_sub(1)));
    decpt -= leading as i32;
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits.pop();
    }
    if digits == [b'0'] {
        decpt = 1;
    }
    (digits, decpt)
}

/// `float.__repr__` of a finite double: the shortest round-trip digits, in fixed notation when the
/// decimal point falls within 16 digits of them, else as `d.ddde+XX`.
pub fn float_repr(out: &mut Vec<u8>, value: f64) {
    if value.is_sign_negative() {
        out.push(b'-');
    }
    let (digits, decpt) = shortest_digits(value.abs());
    if decpt <= -4 || decpt > 16 {
        let exponent = decpt - 1;
        out.push(digits[0]);
        if digits.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.extend_from_slice(format!("e{}{:02}", if exponent < 0 { '-' } else { '+' }, exponent.abs()).as_bytes());
    } else if decpt <= 0 {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', (-decpt) as usize));
        out.extend_from_slice(&digits);
    } else if decpt as usize >= digits.len() {
        out.extend_from_slice(&digits);
        out.extend(std::iter::repeat_n(b'0', decpt as usize - digits.len()));
        out.extend_from_slice(b".0");
    } else {
        out.extend_from_slice(&digits[..decpt as usize]);
        out.push(b'.');
        out.extend_from_slice(&digits[decpt as usize..]);
    }
}

pub fn write_float(out: &mut Vec<u8>, value: f64) {
    if value.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if value.is_infinite() {
        out.extend_from_slice(if value > 0.0 { b"Infinity" } else { b"-Infinity" });
    } else {
        float_repr(out, value);
    }
}

/// `base64.b64encode(data)` (the standard alphabet, padded), as `json_default` writes bytes.
pub fn write_base64(out: &mut Vec<u8>, data: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in data.chunks(3) {
        let bits =
            (chunk[0] as u32) << 16 | (*chunk.get(1).unwrap_or(&0) as u32) << 8 | *chunk.get(2).unwrap_or(&0) as u32;
        out.push(ALPHABET[(bits >> 18) as usize & 63]);
        out.push(ALPHABET[(bits >> 12) as usize & 63]);
        out.push(if chunk.len() > 1 {
            ALPHABET[(bits >> 6) as usize & 63]
        } else {
            b'='
        });
        out.push(if chunk.len() > 2 {
            ALPHABET[bits as usize & 63]
        } else {
            b'='
        });
    }
}

/// A scalar as `compact_json` writes the Python value it stands for (ints as `int.__repr__`, floats
/// as `float.__repr__`, text quoted).
pub fn write_scalar(out: &mut Vec<u8>, datum: Datum<'_>) {
    match datum {
        Datum::Null => out.extend_from_slice(b"null"),
        Datum::Bool(true) => out.extend_from_slice(b"true"),
        Datum::Bool(false) => out.extend_from_slice(b"false"),
        Datum::Long(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Datum::Double(x) => write_float(out, x),
        Datum::Text(text) => write_text(out, text.as_bytes()),
        Datum::Uuid(bytes) => {
            out.push(b'"');
            write_uuid_text(out, bytes);
            out.push(b'"');
        }
        // json_default's form of a Decimal (callers keep very long ones for Python: plain_fits).
        Datum::Decimal(decimal) => {
            out.push(b'"');
            decimal.write_plain(out);
            out.push(b'"');
        }
    }
}

/// A string as the C encoder quotes it without ensure_ascii: `"`, `\` and control characters escaped.
fn write_str(out: &mut Vec<u8>, text: &Bound<'_, PyString>) -> PyResult<()> {
    let mut size: ffi::Py_ssize_t = 0;
    // SAFETY: a str; its UTF-8 form is cached in the object and valid while it lives. NULL: a
    // lone surrogate, which the text could not be encoded as UTF-8 with either.
    let data = unsafe { ffi::PyUnicode_AsUTF8AndSize(text.as_ptr(), &mut size) };
    if data.is_null() {
        return Err(PyErr::fetch(text.py()));
    }
    let bytes = unsafe { std::slice::from_raw_parts(data as *const u8, size as usize) };
    write_text(out, bytes);
    Ok(())
}

/// UTF-8 text quoted as the C encoder quotes it without ensure_ascii: `"`, `\` and control
/// characters escaped, everything else as it is.
pub fn write_text(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    if !bytes.iter().any(|&b| b == b'"' || b == b'\\' || b < 0x20) {
        out.extend_from_slice(bytes); // most text: nothing to escape
        out.push(b'"');
        return;
    }
    let mut start = 0;
    for (index, byte) in bytes.iter().enumerate() {
        let escaped: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..index]);
        if escaped.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(byte >> 4) as usize]);
            out.push(HEX[(byte & 0xF) as usize]);
        } else {
            out.extend_from_slice(escaped);
        }
        start = index + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn write_int(out: &mut Vec<u8>, value: &Bound<'_, PyAny>) -> PyResult<()> {
    let mut overflow: std::os::raw::c_int = 0;
    // SAFETY: an int (checked by the caller); -1 with overflow set means it does not fit 64 bits.
    let small = unsafe { ffi::PyLong_AsLongLongAndOverflow(value.as_ptr(), &mut overflow) };
    if overflow == 0 && !(small == -1 && PyErr::occurred(value.py())) {
        out.extend_from_slice(small.to_string().as_bytes());
        return Ok(());
    }
    // int.__repr__, even for a subclass (what the C encoder writes).
    let text = unsafe {
        let repr = (*std::ptr::addr_of_mut!(ffi::PyLong_Type))
            .tp_repr
            .expect("int has a repr")(value.as_ptr());
        Bound::from_owned_ptr_or_err(value.py(), repr)?
    };
    out.extend_from_slice(text.cast::<PyString>()?.to_str()?.as_bytes());
    Ok(())
}

impl JsonEncoder {
    fn write(&self, py: Python<'_>, out: &mut Vec<u8>, value: &Bound<'_, PyAny>, depth: usize) -> PyResult<()> {
        if depth > MAX_DEPTH {
            return Err(PyRecursionError::new_err(
                "maximum recursion depth exceeded while encoding a JSON object",
            ));
        }
        if value.is_none() {
            out.extend_from_slice(b"null");
        } else if let Ok(text) = value.cast::<PyString>() {
            write_str(out, text)?;
        } else if let Ok(flag) = value.cast::<PyBool>() {
            out.extend_from_slice(if flag.is_true() { b"true" } else { b"false" });
        } else if value.cast::<PyInt>().is_ok() {
            write_int(out, value)?;
        } else if let Ok(float) = value.cast::<PyFloat>() {
            write_float(out, float.value());
        } else if let Ok(list) = value.cast::<PyList>() {
            out.push(b'[');
            for (index, item) in list.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                self.write(py, out, &item, depth + 1)?;
            }
            out.push(b']');
        } else if let Ok(tuple) = value.cast::<PyTuple>() {
            out.push(b'[');
            for (index, item) in tuple.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                self.write(py, out, &item, depth + 1)?;
            }
            out.push(b']');
        } else if let Ok(dict) = value.cast::<PyDict>() {
            out.push(b'{');
            let mut first = true;
            for (key, item) in dict.iter() {
                if !first {
                    out.push(b',');
                }
                first = false;
                self.write_key(out, &key)?;
                out.push(b':');
                self.write(py, out, &item, depth + 1)?;
            }
            out.push(b'}');
        } else {
            let replaced = self.default.bind(py).call1((value,))?;
            self.write(py, out, &replaced, depth + 1)?;
        }
        Ok(())
    }

    fn write_key(&self, out: &mut Vec<u8>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Ok(text) = key.cast::<PyString>() {
            return write_str(out, text);
        }
        let mut text = Vec::new();
        if let Ok(float) = key.cast::<PyFloat>() {
            write_float(&mut text, float.value());
        } else if let Ok(flag) = key.cast::<PyBool>() {
            text.extend_from_slice(if flag.is_true() { b"true" } else { b"false" });
        } else if key.is_none() {
            text.extend_from_slice(b"null");
        } else if key.cast::<PyInt>().is_ok() {
            write_int(&mut text, key)?;
        } else {
            let kind = key.get_type().name()?;
            return Err(PyTypeError::new_err(format!(
                "keys must be str, int, float, bool or None, not {kind}"
            )));
        }
        out.push(b'"');
        out.extend_from_slice(&text);
        out.push(b'"');
        Ok(())
    }
}

impl JsonEncoder {
    /// `value` as `compact_json` writes it, appended to `out`.
    pub fn write_value(&self, py: Python<'_>, out: &mut Vec<u8>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.write(py, out, value, 0)
    }
}

#[pymethods]
impl JsonEncoder {
    /// ``default(value)`` replaces what JSON has no type for (cdcflow's ``json_default``).
    #[new]
    fn new(default: Py<PyAny>) -> Self {
        JsonEncoder { default }
    }

    /// ``compact_json(value)``.
    fn dumps<'py>(&self, py: Python<'py>, value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyString>> {
        let mut out = Vec::with_capacity(256);
        self.write(py, &mut out, value, 0)?;
        // The encoder writes UTF-8 copied from str objects and ASCII of its own.
        Ok(PyString::new(
            py,
            std::str::from_utf8(&out).map_err(|e| PyTypeError::new_err(e.to_string()))?,
        ))
    }

    /// ``{"schema":<schema>,"payload":<payload>}`` as UTF-8 bytes (Kafka Connect's JSON with
    /// schemas), or the payload alone when ``schema`` is None.
    #[pyo3(signature = (payload, schema = None))]
    fn envelope<'py>(
        &self,
        py: Python<'py>,
        payload: &Bound<'py, PyAny>,
        schema: Option<&str>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let mut out = Vec::with_capacity(512);
        if let Some(schema) = schema {
            out.extend_from_slice(b"{\"schema\":");
            out.extend_from_slice(schema.as_bytes());
            out.extend_from_slice(b",\"payload\":");
            self.write(py, &mut out, payload, 0)?;
            out.push(b'}');
        } else {
            self.write(py, &mut out, payload, 0)?;
        }
        Ok(PyBytes::new(py, &out))
    }
}

/// ``repr(value)`` of a float, as the JSON encoder writes it (exposed for tests).
#[pyfunction]
pub fn float_text(value: f64) -> String {
    let mut out = Vec::new();
    write_float(&mut out, value);
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    //! Expected texts: RFC 8259 (what must be escaped: `"`, `\` and U+0000 to U+001F), Python's
    //! `json.dumps(value, ensure_ascii=False, separators=(",", ":"))` and `repr(float)` written out
    //! by hand, RFC 4648's base64 test vectors.
    use super::{write_base64, write_float, write_scalar, write_text, JsonEncoder};
    use crate::batch::Datum;
    use crate::decimal::Decimal;
    use pyo3::prelude::*;

    fn text(bytes: &[u8]) -> String {
        let mut out = Vec::new();
        write_text(&mut out, bytes);
        String::from_utf8(out).unwrap()
    }

    fn float(value: f64) -> String {
        let mut out = Vec::new();
        write_float(&mut out, value);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_escape_quote_backslash_and_control_characters_only() {
        assert_eq!(text(b"plain"), r#""plain""#);
        assert_eq!(text(b"a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(text(b"\n\r\t\x08\x0c"), r#""\n\r\t\b\f""#);
        // Other controls as \u00XX with lowercase hex; DEL and non-ASCII as they are.
        assert_eq!(text(b"\x00\x1f\x7f"), "\"\\u0000\\u001f\x7f\"");
        assert_eq!(text("é€😀".as_bytes()), "\"é€😀\"");
        assert_eq!(text(b"x\ny"), r#""x\ny""#);
    }

    #[test]
    fn floats_are_written_as_pythons_repr() {
        let cases = [
            (0.1, "0.1"),
            (100.0, "100.0"),
            (1.5, "1.5"),
            (-0.0, "-0.0"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1e22, "1e+22"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (2.5e-5, "2.5e-05"),
            (1.0 / 3.0, "0.3333333333333333"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
        ];
        for (value, expected) in cases {
            assert_eq!(float(value), expected, "repr({value:e})");
        }
    }

    #[test]
    fn non_finite_floats_are_javascript_names_as_json_dumps_writes_them() {
        assert_eq!(float(f64::NAN), "NaN");
        assert_eq!(float(f64::INFINITY), "Infinity");
        assert_eq!(float(f64::NEG_INFINITY), "-Infinity");
    }

    #[test]
    fn base64_is_rfc_4648s() {
        let encode = |data: &[u8]| {
            let mut out = Vec::new();
            write_base64(&mut out, data);
            String::from_utf8(out).unwrap()
        };
        let vectors: [(&[u8], &str); 8] = [
            (b"", ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"fooba", "Zm9vYmE="),
            (b"foobar", "Zm9vYmFy"),
            (&[0xfb, 0xff], "+/8="),
        ];
        for (data, expected) in vectors {
            assert_eq!(encode(data), expected);
        }
    }

    #[test]
    fn scalars_held_by_the_core_are_written_as_their_python_values() {
        let scalar = |datum: Datum<'_>| {
            let mut out = Vec::new();
            write_scalar(&mut out, datum);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(scalar(Datum::Null), "null");
        assert_eq!(scalar(Datum::Bool(false)), "false");
        assert_eq!(scalar(Datum::Long(i64::MIN)), "-9223372036854775808");
        assert_eq!(scalar(Datum::Double(2.0)), "2.0");
        assert_eq!(scalar(Datum::Text("tab\there")), r#""tab\there""#);
        let uuid = [
            0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00,
        ];
        assert_eq!(scalar(Datum::Uuid(&uuid)), r#""123e4567-e89b-12d3-a456-426614174000""#);
        // json_default writes a Decimal as str(): plain text here.
        let decimal = Decimal {
            scale: 3,
            unscaled: -1500,
        };
        assert_eq!(scalar(Datum::Decimal(decimal)), r#""-1.500""#);
    }

    #[test]
    fn python_values_are_written_as_compact_json_dumps_writes_them() {
        Python::attach(|py| {
            let builtins = py.import("builtins").unwrap();
            let encoder = JsonEncoder {
                default: builtins.getattr("repr").unwrap().unbind(),
            };
            let dumps = |source: &std::ffi::CStr| {
                let value = py.eval(source, None, None).unwrap();
                let mut out = Vec::new();
                encoder.write_value(py, &mut out, &value).unwrap();
                String::from_utf8(out).unwrap()
            };
            assert_eq!(
                dumps(c"{'k': [1, True, None, 2**70, 1.0, 'x'], 1: False, 2.5: 0, None: 1}"),
                r#"{"k":[1,true,null,1180591620717411303424,1.0,"x"],"1":false,"2.5":0,"null":1}"#
            );
            // A tuple is an array; what JSON has no type for goes through default (repr here).
            assert_eq!(dumps(c"((), complex(1, 2))"), r#"[[],"(1+2j)"]"#);
            assert_eq!(dumps(c"-2**63 - 1"), "-9223372036854775809");
        });
    }
}
