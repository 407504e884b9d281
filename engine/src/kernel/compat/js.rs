//! `JSON.stringify` of parsed values: numbers printed as JavaScript prints them (`Number`'s
//! `toString`), in the compact or the 2-space pretty layout; and the other number and value
//! coercions the scripts rely on (`String(x)`, `toFixed(2)`, `Number(text)`, `${value}`).
//!
//! serde_json prints a float the Rust way (`1.0`, `-0.0`, `1e21`, `1e17`) where JavaScript writes
//! `1`, `0`, `1e+21` and `100000000000000000`, and keeps integers beyond 2^53 exact where
//! JavaScript, which reads every number as a double, does not. Does not read or write files.

use std::io;

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter};
use serde_json::Value;

/// The largest integer a double holds exactly (`Number.MAX_SAFE_INTEGER`).
const SAFE_INTEGER_MAX: u64 = 9_007_199_254_740_991;
/// `Number.prototype.toString` writes plain digits below 10^21, exponent notation from there.
const PLAIN_DIGITS_MAX: i32 = 21;
/// ... and plain `0.000…` digits above 10^-7.
const PLAIN_FRACTION_ZEROS_MAX: i32 = 6;

/// `String(x)` of a finite double, as ECMAScript's Number::toString specifies it (shortest
/// round-trip digits; `-0` prints `0`).
#[must_use]
pub(crate) fn number_text(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits, `d[.ddd]e<exp>`.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exp: i32 = exp.parse().unwrap_or(0);
    let k = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    // The value is 0.<digits> × 10^n.
    let n = exp + 1;
    let sign = if x < 0.0 { "-" } else { "" };
    let zeros = |count: i32| "0".repeat(usize::try_from(count).unwrap_or(0));
    let body = if k <= n && n <= PLAIN_DIGITS_MAX {
        format!("{digits}{}", zeros(n - k))
    } else if 0 < n && n <= PLAIN_DIGITS_MAX {
        let (int, frac) = digits.split_at(usize::try_from(n).unwrap_or(0));
        format!("{int}.{frac}")
    } else if -PLAIN_FRACTION_ZEROS_MAX < n && n <= 0 {
        format!("0.{}{digits}", zeros(-n))
    } else {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let e = n - 1;
        format!("{first}{dot}e{}{}", if e >= 0 { "+" } else { "-" }, e.abs())
    };
    format!("{sign}{body}")
}

/// A serde_json formatter that prints numbers as JavaScript does, around `F` for the layout.
struct Js<F>(F);

impl<F: Formatter> Formatter for Js<F> {
    fn write_f64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        writer.write_all(number_text(value).as_bytes())
    }

    fn write_u64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: u64) -> io::Result<()> {
        if value <= SAFE_INTEGER_MAX {
            return self.0.write_u64(writer, value);
        }
        #[expect(clippy::cast_precision_loss, reason = "JavaScript reads it as a double too")]
        let as_double = value as f64;
        self.write_f64(writer, as_double)
    }

    fn write_i64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: i64) -> io::Result<()> {
        if value.unsigned_abs() <= SAFE_INTEGER_MAX {
            return self.0.write_i64(writer, value);
        }
        #[expect(clippy::cast_precision_loss, reason = "JavaScript reads it as a double too")]
        let as_double = value as f64;
        self.write_f64(writer, as_double)
    }

    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_array(writer)
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array(writer)
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(writer, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array_value(writer)
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object(writer)
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object(writer)
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(writer, first)
    }

    fn end_object_key<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_key(writer)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object_value(writer)
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_value(writer)
    }
}

fn write<F: Formatter>(value: &Value, formatter: F) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Js(formatter));
    // Serialising a Value into memory cannot fail; an empty text would be refused downstream.
    if value.serialize(&mut ser).is_err() {
        return String::new();
    }
    String::from_utf8(out).unwrap_or_default()
}

/// `JSON.stringify(value, null, 2)`.
#[must_use]
pub(crate) fn pretty(value: &Value) -> String {
    write(value, PrettyFormatter::with_indent(b"  "))
}

/// `JSON.stringify(value)`.
#[must_use]
pub(crate) fn compact(value: &Value) -> String {
    write(value, CompactFormatter)
}

/// `Math.round(x * 10^digits) / 10^digits` as a JSON number, integral values without `.0`
/// (as `JSON.stringify` writes them).
pub(crate) fn js_round(x: f64, digits: i32) -> Value {
    let scale = 10f64.powi(digits);
    js_number(math_round(x * scale) / scale)
}

/// `Math.round`: the nearest integer, halves toward +∞. Not `floor(x + 0.5)`, whose addition
/// rounds (0.49999999999999994 + 0.5 is 1.0).
pub(crate) fn math_round(x: f64) -> f64 {
    let floor = x.floor();
    if x - floor >= 0.5 {
        floor + 1.0
    } else {
        floor
    }
}

/// A JSON number as JavaScript prints it: an integral value has no fraction.
pub(crate) fn js_number(x: f64) -> Value {
    const SAFE_INTEGER_MAX: f64 = 9_007_199_254_740_991.0;
    if x.fract() == 0.0 && x.abs() <= SAFE_INTEGER_MAX {
        #[expect(clippy::cast_possible_truncation, reason = "integral and within 2^53")]
        return Value::from(x as i64);
    }
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// `String(x)` for any double (`NaN`, `Infinity` included).
#[must_use]
pub(crate) fn number_string(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        }
    } else {
        number_text(x)
    }
}

/// `x.toFixed(2)`: halves round up in magnitude (Rust's formatting rounds them to even).
#[must_use]
pub(crate) fn to_fixed_2(x: f64) -> String {
    if !x.is_finite() {
        return number_string(x);
    }
    let magnitude = x.abs();
    let tie = (magnitude * 8.0).fract() == 0.0 && (magnitude * 100.0).fract() == 0.5;
    let text = format!("{:.2}", if tie { magnitude + 0.001 } else { magnitude });
    if x < 0.0 && text.bytes().any(|b| b.is_ascii_digit() && b != b'0') {
        format!("-{text}")
    } else {
        text
    }
}

/// `Number(text)` for the forms a timeout takes: decimal (with sign, fraction, exponent),
/// `0x`/`0o`/`0b`, `Infinity`; an empty or blank text is 0; anything else `NaN`.
#[must_use]
pub(crate) fn parse_number(text: &str) -> f64 {
    let t = super::js_trim(text);
    if t.is_empty() {
        return 0.0;
    }
    for (prefix, radix) in [("0x", 16), ("0X", 16), ("0o", 8), ("0O", 8), ("0b", 2), ("0B", 2)] {
        if let Some(digits) = t.strip_prefix(prefix) {
            #[expect(clippy::cast_precision_loss, reason = "JavaScript reads it as a double too")]
            return u64::from_str_radix(digits, radix).map_or(f64::NAN, |n| n as f64);
        }
    }
    let body = t.trim_start_matches(['+', '-']);
    if body == "Infinity" && t.len() - body.len() <= 1 {
        return if t.starts_with('-') { f64::NEG_INFINITY } else { f64::INFINITY };
    }
    let decimal = t.len() - body.len() <= 1
        && !body.is_empty()
        && body.bytes().all(|b| b.is_ascii_digit() || b".eE+-".contains(&b))
        && body.bytes().next().is_some_and(|b| b.is_ascii_digit() || b == b'.');
    if decimal {
        t.parse::<f64>().unwrap_or(f64::NAN)
    } else {
        f64::NAN
    }
}

/// `${value}` of a JSON value, as a template literal prints it (a string bare, `null`, an
/// object or array as its JSON).
#[must_use]
pub(crate) fn value_string(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        other => compact(other),
    }
}

/// JavaScript truthiness of a JSON value (`if (value)`): false for `null`, `false`, `0` and
/// `""`, true for everything else (a serde_json number is never NaN).
pub(crate) fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(set) => *set,
        Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
        Value::String(text) => !text.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_javascript_prints_them() {
        // Expected texts from node: JSON.stringify(JSON.parse(input)).
        let cases = [
            ("1.0", "1"),
            ("-0", "0"),
            ("-0.0", "0"),
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("1e17", "100000000000000000"),
            ("1e-7", "1e-7"),
            ("0.000001", "0.000001"),
            ("1.5e300", "1.5e+300"),
            ("5e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("12345678901234567890", "12345678901234567000"),
            ("-12345678901234567", "-12345678901234568"),
            ("9007199254740991", "9007199254740991"),
            ("41.2731", "41.2731"),
            ("0.30000000000000004", "0.30000000000000004"),
            ("123e-20", "1.23e-18"),
            ("-1.5", "-1.5"),
            ("100", "100"),
            ("1E2", "100"),
        ];
        for (input, expected) in cases {
            let value: Value = serde_json::from_str(input).unwrap();
            assert_eq!(compact(&value), expected, "{input}");
        }
    }

    #[test]
    fn layouts_are_json_stringify_s() {
        let value: Value =
            serde_json::from_str(r#"{"a":{},"b":[],"c":[1.0,{"d":null}],"e":"\u001f"}"#).unwrap();
        assert_eq!(compact(&value), r#"{"a":{},"b":[],"c":[1,{"d":null}],"e":"\u001f"}"#);
        assert_eq!(
            pretty(&value),
            "{\n  \"a\": {},\n  \"b\": [],\n  \"c\": [\n    1,\n    {\n      \"d\": null\n    }\n  \
             ],\n  \"e\": \"\\u001f\"\n}"
        );
    }
}
