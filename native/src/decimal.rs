//! A CQL `decimal` held by the compiled core: `unscaled × 10^-scale`, exact, with its scale, as
//! Cassandra stores it (an int32 scale, then the unscaled number as big-endian two's complement).
//!
//! The reference (`cdcflow.sources.cql.cqltypes.decode_decimal`) makes a Python `Decimal` of every
//! value, and the converters then rewrite it (`cdcflow.wire_values`): Debezium's variable-scale
//! record, a double, or its plain text. Held here, a compact batch writes each form straight from
//! the scale and the unscaled number, and a `Decimal` is made only when Python asks for the value.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// Plain text longer than this is left to Python (a scale of -10^9 is a billion zeros to write).
const MAX_PLAIN_ZEROS: i64 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decimal {
    pub scale: i32,
    pub unscaled: i128,
}

static DECIMAL_CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

impl Decimal {
    /// A stored `decimal` value (at least its 4 scale bytes), or None when its unscaled number is
    /// wider than 128 bits (the reference decodes those).
    pub fn from_cql(raw: &[u8]) -> Option<Decimal> {
        if raw.len() < 4 || raw.len() > 4 + 16 {
            return None;
        }
        let scale = i32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
        let digits = &raw[4..];
        let mut unscaled: i128 = match digits.first() {
            Some(first) if first & 0x80 != 0 => -1,
            _ => 0,
        };
        for byte in digits {
            unscaled = (unscaled << 8) | *byte as i128;
        }
        Some(Decimal { scale, unscaled })
    }

    /// The unscaled number's shortest big-endian two's complement (Java's `BigInteger.toByteArray`,
    /// `cdcflow.wire_values.int_to_twos_complement`).
    pub fn write_unscaled(&self, out: &mut Vec<u8>) {
        let bytes = self.unscaled.to_be_bytes();
        let magnitude = if self.unscaled < 0 {
            !self.unscaled
        } else {
            self.unscaled
        };
        let bits = 128 - magnitude.leading_zeros() as usize;
        let length = bits / 8 + 1;
        out.extend_from_slice(&bytes[16 - length..]);
    }

    /// The digits of the unscaled number's magnitude.
    fn digits(&self) -> String {
        self.unscaled.unsigned_abs().to_string()
    }

    /// Whether the plain text is short enough to write here: a scale far from zero is zeros by
    /// the million, which Python writes (or refuses with a MemoryError) rather than the core.
    pub fn plain_fits(&self) -> bool {
        (self.scale as i64).abs() <= MAX_PLAIN_ZEROS
    }

    /// `format(value, "f")`: plain text, never an exponent (Java's `toPlainString`); a zero with
    /// a positive exponent is `0`, as Python's decimal writes it. Check [`Decimal::plain_fits`] first.
    pub fn write_plain(&self, out: &mut Vec<u8>) {
        let digits = self.digits();
        let scale = self.scale as i64;
        if self.unscaled < 0 {
            out.push(b'-');
        }
        if scale <= 0 {
            out.extend_from_slice(digits.as_bytes());
            if self.unscaled != 0 {
                out.extend(std::iter::repeat_n(b'0', (-scale) as usize));
            }
            return;
        }
        let point = digits.len() as i64 - scale; // digits before the decimal point
        if point <= 0 {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', (-point) as usize));
            out.extend_from_slice(digits.as_bytes());
        } else {
            let point = point as usize;
            out.extend_from_slice(&digits.as_bytes()[..point]);
            out.push(b'.');
            out.extend_from_slice(&digits.as_bytes()[point..]);
        }
    }

    /// `float(value)`: the double nearest the exact number (Rust's parser rounds correctly, as
    /// CPython's `float(str(value))` does).
    pub fn to_f64(self) -> f64 {
        format!("{}e{}", self.unscaled, -(self.scale as i64))
            .parse()
            .unwrap_or(f64::NAN)
    }

    /// The Python `Decimal` the reference decodes the value to: `Decimal(f"{unscaled}E{-scale}")`,
    /// exactly `cdcflow.wire_values.unscaled_to_decimal`.
    pub fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let class = DECIMAL_CLASS.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            Ok(py.import("decimal")?.getattr("Decimal")?.unbind())
        })?;
        class
            .bind(py)
            .call1((format!("{}E{}", self.unscaled, -(self.scale as i64)),))
    }
}

#[cfg(test)]
mod tests {
    use super::Decimal;

    fn plain(scale: i32, unscaled: i128) -> String {
        let mut out = Vec::new();
        Decimal { scale, unscaled }.write_plain(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn plain_text_is_pythons() {
        // Expected texts: Python's format(Decimal(f"{u}E{-s}"), "f").
        assert_eq!(plain(-3, 0), "0");
        assert_eq!(plain(-2, -5), "-500");
        assert_eq!(plain(5, 123), "0.00123");
        assert_eq!(plain(2, 0), "0.00");
        assert_eq!(plain(0, -123), "-123");
        assert_eq!(plain(30, -1), "-0.000000000000000000000000000001");
    }

    #[test]
    fn unscaled_bytes_are_the_shortest_twos_complement() {
        let bytes = |unscaled: i128| {
            let mut out = Vec::new();
            Decimal { scale: 0, unscaled }.write_unscaled(&mut out);
            out
        };
        assert_eq!(bytes(0), vec![0]);
        assert_eq!(bytes(127), vec![127]);
        assert_eq!(bytes(128), vec![0, 128]);
        assert_eq!(bytes(-1), vec![0xff]);
        assert_eq!(bytes(-128), vec![0x80]);
        assert_eq!(bytes(-129), vec![0xff, 0x7f]);
    }

    #[test]
    fn a_stored_decimal_is_an_int32_scale_then_big_endian_twos_complement() {
        // Cassandra's DecimalType: scale 2 (00 00 00 02), unscaled 0x3039 = 12345.
        assert_eq!(
            Decimal::from_cql(&[0, 0, 0, 2, 0x30, 0x39]),
            Some(Decimal {
                scale: 2,
                unscaled: 12345
            })
        );
        // A negative scale; a negative unscaled number is sign-extended (ff 00 = -256).
        assert_eq!(
            Decimal::from_cql(&[0xff, 0xff, 0xff, 0xfe, 0xff, 0x00]),
            Some(Decimal {
                scale: -2,
                unscaled: -256
            })
        );
        // Zero bytes of unscaled number is zero; 16 bytes is the widest held here.
        assert_eq!(
            Decimal::from_cql(&[0, 0, 0, 0]),
            Some(Decimal { scale: 0, unscaled: 0 })
        );
        let widest = [[0u8, 0, 0, 0].as_slice(), &[0x80], &[0u8; 15]].concat();
        assert_eq!(Decimal::from_cql(&widest).map(|d| d.unscaled), Some(i128::MIN));
        assert_eq!(
            Decimal::from_cql(&[0u8; 21]),
            None,
            "wider than 128 bits: the reference's"
        );
        assert_eq!(Decimal::from_cql(&[0, 0, 1]), None, "a scale cut short");
    }

    #[test]
    fn the_double_is_the_one_nearest_the_exact_number() {
        // float(Decimal("123.45")), float(Decimal("-1E+3")), float(Decimal("0.1")).
        let double = |scale, unscaled| Decimal { scale, unscaled }.to_f64();
        assert_eq!(double(2, 12345), 123.45);
        assert_eq!(double(-3, -1), -1000.0);
        assert_eq!(double(1, 1), 0.1);
        // 2^53 + 1 is not a double: it rounds to even, 2^53.
        assert_eq!(double(0, 9007199254740993), 9007199254740992.0);
    }
}
