//! JSON helpers: canonical serialization (RFC 8785 style) for fingerprints and hashes.
//!
//! Two JSON texts that mean the same value must hash the same, so idempotency fingerprints and
//! confirmation hashes are computed over the *canonical* form of a value rather than over whatever
//! bytes a client sent. The canonical form is the JSON Canonicalization Scheme of
//! [RFC 8785](https://www.rfc-editor.org/rfc/rfc8785) (JCS):
//!
//! - no whitespace;
//! - object members sorted by their keys, compared as sequences of UTF-16 code units;
//! - strings escaped as ECMAScript's `JSON.stringify` does: only `"`, `\` and the control
//!   characters below U+0020, with `\b \t \n \f \r` where they exist and `\u00XX` (lowercase hex)
//!   otherwise; non-ASCII characters and `/` are written as they are;
//! - floating-point numbers written as ECMAScript's `Number::toString` writes them (shortest
//!   round-trip digits, `1e+21`, `1e-7`, `0.000001`, `-0` as `0`).
//!
//! **One deliberate deviation:** an integer that fits `i64` or `u64` is written exactly, as its
//! decimal digits. JCS reads every number as an IEEE 754 double, so it would round integers beyond
//! ±2^53 (`9007199254740993` becomes `9007199254740992`). A fingerprint must never merge two
//! distinct inputs, so this crate keeps them exact. For every integer of magnitude up to 2^53 the
//! output is identical to JCS (`1.0` and `1` both canonicalize to `1`).
//!
//! # Examples
//!
//! ```
//! use agent_surface_core::json::canonical_json;
//! use serde_json::json;
//!
//! let value = json!({"b": [1.0, 1e21, 0.000001], "a": "é\n", "c": null});
//! assert_eq!(canonical_json(&value), r#"{"a":"é\n","b":[1,1e+21,0.000001],"c":null}"#);
//! ```

use serde_json::{Map, Number, Value};

/// The canonical JSON text of `value` (see the [module docs](self)).
///
/// ```
/// use agent_surface_core::json::canonical_json;
/// use serde_json::json;
///
/// assert_eq!(canonical_json(&json!({"z": 1, "a": [true, -0.0]})), r#"{"a":[true,0],"z":1}"#);
/// ```
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    // Every byte written is either ASCII punctuation/digits or a copy of a `str`'s UTF-8 bytes.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Appends the canonical JSON text of `value` to `out` as UTF-8 (see the [module docs](self)).
///
/// The walk is iterative, so values of any depth are written without exhausting the stack.
///
/// ```
/// use agent_surface_core::json::write_canonical;
/// use serde_json::json;
///
/// let mut out = b"prefix:".to_vec();
/// write_canonical(&json!({"\u{20ac}": 1, "\r": 2}), &mut out);
/// assert_eq!(out, "prefix:{\"\\r\":2,\"\u{20ac}\":1}".as_bytes());
/// ```
pub fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    // Sized for a small object (its members' three steps each) without growing; a larger value
    // grows it as it goes.
    let mut stack = Vec::with_capacity(16);
    stack.push(Work::Value(value));
    while let Some(work) = stack.pop() {
        match work {
            Work::Byte(b) => out.push(b),
            Work::Key(key) => {
                write_string(key, out);
                out.push(b':');
            }
            Work::Value(Value::Null) => out.extend_from_slice(b"null"),
            Work::Value(Value::Bool(true)) => out.extend_from_slice(b"true"),
            Work::Value(Value::Bool(false)) => out.extend_from_slice(b"false"),
            Work::Value(Value::Number(n)) => write_number(n, out),
            Work::Value(Value::String(s)) => write_string(s, out),
            Work::Value(Value::Array(items)) => {
                out.push(b'[');
                stack.push(Work::Byte(b']'));
                for (i, item) in items.iter().enumerate().rev() {
                    stack.push(Work::Value(item));
                    if i > 0 {
                        stack.push(Work::Byte(b','));
                    }
                }
            }
            Work::Value(Value::Object(members)) => {
                out.push(b'{');
                stack.push(Work::Byte(b'}'));
                // A map of serde_json's iterates in UTF-8 byte order, which is JCS order but for
                // rare keys (see `utf16_order`): only then are the members sorted into a list.
                let in_order = members.keys().zip(members.keys().skip(1)).all(|(a, b)| utf16_order(a, b).is_lt());
                if in_order {
                    for (i, (key, item)) in members.iter().enumerate().rev() {
                        push_member(&mut stack, i, key, item);
                    }
                } else {
                    for (i, (key, item)) in sorted_members(members).into_iter().enumerate().rev() {
                        push_member(&mut stack, i, key, item);
                    }
                }
            }
        }
    }
}

/// Queues the `i`th member of an object (`key`: `item`), the walk's stack being popped from the
/// end.
fn push_member<'a>(stack: &mut Vec<Work<'a>>, i: usize, key: &'a str, item: &'a Value) {
    stack.push(Work::Value(item));
    stack.push(Work::Key(key));
    if i > 0 {
        stack.push(Work::Byte(b','));
    }
}

/// One pending step of the iterative walk.
enum Work<'a> {
    Value(&'a Value),
    Key(&'a str),
    Byte(u8),
}

/// The members of an object in JCS order: keys compared as UTF-16 code unit sequences.
fn sorted_members(members: &Map<String, Value>) -> Vec<(&str, &Value)> {
    let mut sorted: Vec<(&str, &Value)> = members.iter().map(|(k, v)| (k.as_str(), v)).collect();
    sorted.sort_by(|(a, _), (b, _)| utf16_order(a, b));
    sorted
}

/// `a` and `b` compared as UTF-16 code unit sequences, without encoding them when their UTF-8
/// bytes already decide. UTF-8 byte order is code point order, which UTF-16 order differs from
/// only between a character at U+E000..=U+FFFF (lead byte `0xEE` or `0xEF`) and one beyond
/// U+FFFF (lead byte `0xF0` and up, a surrogate pair in UTF-16): only where the first differing
/// bytes are both from that range is the comparison done in UTF-16.
fn utf16_order(a: &str, b: &str) -> std::cmp::Ordering {
    match a.bytes().zip(b.bytes()).find(|(x, y)| x != y) {
        None => a.len().cmp(&b.len()),
        Some((x, y)) if x >= 0xEE && y >= 0xEE => a.encode_utf16().cmp(b.encode_utf16()),
        Some((x, y)) => x.cmp(&y),
    }
}

/// A JSON string literal as `JSON.stringify` writes it.
fn write_string(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0c => b"\\f",
            b'\r' => b"\\r",
            0x00..=0x1f => &[b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]],
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escape);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// A number: exact integers when it is one, ECMAScript `Number::toString` otherwise.
fn write_number(n: &Number, out: &mut Vec<u8>) {
    use std::io::Write as _;
    // Written in place (writing to a `Vec` cannot fail), not through a `String` per number.
    if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(f) = n.as_f64() {
        write_f64(f, out);
    } else {
        // Unreachable with serde_json's number representations; `null` is what `JSON.stringify`
        // writes for a number it cannot represent.
        out.extend_from_slice(b"null");
    }
}

/// An `f64` as ECMAScript's `Number::toString(x)` writes it (ECMA-262 §6.1.6.1.20), which is what
/// RFC 8785 §3.2.2.3 requires.
///
/// The digits come from `ryu`: the fewest significant digits that read back as the same double,
/// the closest such digits to the exact value, and the even one on a tie — exactly the `k` and `s`
/// of the ECMAScript algorithm. (Rust's own `{:e}` rounds such ties up, so
/// `1424953923781206.25` would come out as `…206.3` instead of ECMAScript's `…206.2`.) Non-finite
/// values, which a `serde_json::Value` cannot hold, are written as `null`, as `JSON.stringify` does.
fn write_f64(x: f64, out: &mut Vec<u8>) {
    if !x.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    if x == 0.0 {
        // Both +0 and -0.
        out.push(b'0');
        return;
    }
    if x < 0.0 {
        out.push(b'-');
    }
    let mut buffer = ryu::Buffer::new();
    let (digits, n) = decimal_digits(buffer.format_finite(x.abs()));
    let k = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    let digits = digits.as_slice();
    if k <= n && n <= 21 {
        // Integer: the digits, then n - k zeros.
        out.extend_from_slice(digits);
        out.extend(std::iter::repeat_n(b'0', usize::try_from(n - k).unwrap_or(0)));
    } else if 0 < n && n <= 21 {
        // Fraction with an integer part: the point goes after the first n digits.
        let (int, frac) = digits.split_at(usize::try_from(n).unwrap_or(0));
        out.extend_from_slice(int);
        out.push(b'.');
        out.extend_from_slice(frac);
    } else if -6 < n && n <= 0 {
        // Small fraction: "0." then -n zeros then the digits.
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', usize::try_from(-n).unwrap_or(0)));
        out.extend_from_slice(digits);
    } else {
        // Exponential: d[.ddd]e±(n-1).
        let (first, rest) = digits.split_at(1);
        out.extend_from_slice(first);
        if !rest.is_empty() {
            out.push(b'.');
            out.extend_from_slice(rest);
        }
        let e = n - 1;
        out.extend_from_slice(if e < 0 { b"e-" } else { b"e+" });
        let _ = std::io::Write::write_fmt(out, format_args!("{}", e.unsigned_abs()));
    }
}

/// Splits `ryu`'s rendering of a positive finite double (`1.5e-7`, `5e-324`, `123.0`, `0.001`,
/// `1e21`) into its significant digits `s` (no leading or trailing zeros) and the ECMAScript
/// exponent `n`, so that the value is `0.s × 10^n`.
fn decimal_digits(text: &str) -> (Vec<u8>, i64) {
    let (mantissa, exponent) = text.split_once(['e', 'E']).unwrap_or((text, "0"));
    let exponent: i64 = exponent.parse().unwrap_or(0);
    let int_len = i64::try_from(mantissa.find('.').unwrap_or(mantissa.len())).unwrap_or(0);
    let mut digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    let leading = digits.iter().take_while(|&&d| d == b'0').count();
    digits.drain(..leading);
    while digits.last() == Some(&b'0') {
        digits.pop();
    }
    (digits, int_len + exponent - i64::try_from(leading).unwrap_or(0))
}

/// Bytes of a message per JSON value it may hold: a frame limit of `N` bytes admits at most
/// `N / BYTES_PER_VALUE` values (see [`too_many_values`]).
pub const BYTES_PER_VALUE: usize = 16;

/// Whether the JSON text `bytes` holds more than `max` values, counted without parsing it.
///
/// Parsed into a `serde_json::Value`, every value costs tens of bytes however short its text
/// (`[0,0,0,…]` spends 2 bytes of text per value): a message of many tiny values grows far
/// beyond its size. Adapters call this before parsing a message, with `max` derived from their
/// size limit (`limit / BYTES_PER_VALUE`), so that what a message becomes in memory stays a small
/// multiple of what it is on the wire. The count is an upper bound — the containers and the
/// separators outside strings, plus one — and text that is not JSON is counted all the same
/// (the parser refuses it next).
///
/// ```
/// use agent_surface_core::json::too_many_values;
/// assert!(!too_many_values(br#"{"a": [1, 2, 3], "b": "x,y,z"}"#, 10));
/// assert!(too_many_values(b"[0,0,0,0,0,0,0,0,0,0,0,0]", 10));
/// assert!(!too_many_values(br#""[[[[[[[[[[[[[[[[""#, 10), "inside a string nothing counts");
/// ```
pub fn too_many_values(bytes: &[u8], max: usize) -> bool {
    // The count starts at one and grows by at most one a byte: text shorter than `max` bytes
    // cannot exceed it, and is not scanned (almost every message is far below its limit).
    bytes.len() >= max && scan(bytes, max)
}

/// [`too_many_values`]' count, whatever the text's length.
fn scan(bytes: &[u8], max: usize) -> bool {
    let mut count: usize = 1;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' | b',' => {
                count += 1;
                if count > max {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[track_caller]
    fn check(value: Value, expected: &str) {
        assert_eq!(canonical_json(&value), expected);
    }

    #[track_caller]
    fn check_f64(bits: u64, expected: &str) {
        let x = f64::from_bits(bits);
        let mut out = Vec::new();
        write_f64(x, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), expected, "bits {bits:#018x} ({x:e})");
    }

    /// RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical text.
    #[test]
    fn rfc8785_number_vectors() {
        check_f64(0x0000_0000_0000_0000, "0");
        check_f64(0x8000_0000_0000_0000, "0");
        check_f64(0x0000_0000_0000_0001, "5e-324");
        check_f64(0x8000_0000_0000_0001, "-5e-324");
        check_f64(0x7fef_ffff_ffff_ffff, "1.7976931348623157e+308");
        check_f64(0xffef_ffff_ffff_ffff, "-1.7976931348623157e+308");
        check_f64(0x4340_0000_0000_0000, "9007199254740992");
        check_f64(0xc340_0000_0000_0000, "-9007199254740992");
        check_f64(0x4430_0000_0000_0000, "295147905179352830000");
        check_f64(0x44b5_2d02_c7e1_4af5, "9.999999999999997e+22");
        check_f64(0x44b5_2d02_c7e1_4af6, "1e+23");
        check_f64(0x44b5_2d02_c7e1_4af7, "1.0000000000000001e+23");
        check_f64(0x444b_1ae4_d6e2_ef4e, "999999999999999700000");
        check_f64(0x444b_1ae4_d6e2_ef4f, "999999999999999900000");
        check_f64(0x444b_1ae4_d6e2_ef50, "1e+21");
        check_f64(0x3eb0_c6f7_a0b5_ed8c, "9.999999999999997e-7");
        check_f64(0x3eb0_c6f7_a0b5_ed8d, "0.000001");
        check_f64(0x41b3_de43_5555_5553, "333333333.3333332");
        check_f64(0x41b3_de43_5555_5554, "333333333.33333325");
        check_f64(0x41b3_de43_5555_5555, "333333333.3333333");
        check_f64(0x41b3_de43_5555_5556, "333333333.3333334");
        check_f64(0x41b3_de43_5555_5557, "333333333.33333343");
        check_f64(0xbecb_f647_612f_3696, "-0.0000033333333333333333");
        check_f64(0x4314_3ff3_c1cb_0959, "1424953923781206.2");
        // Non-finite values cannot be in a `Value`; they fall back to `null` like `JSON.stringify`.
        check_f64(0x7fff_ffff_ffff_ffff, "null");
        check_f64(0x7ff0_0000_0000_0000, "null");
    }

    #[test]
    fn ecmascript_number_forms() {
        check(json!(1e21), "1e+21");
        check(json!(1e20), "100000000000000000000");
        check(json!(1e-7), "1e-7");
        check(json!(1.5e-7), "1.5e-7");
        check(json!(0.000001), "0.000001");
        check(json!(0.1), "0.1");
        check(json!(-0.0), "0");
        check(json!(1.0), "1");
        check(json!(-1.5), "-1.5");
        check(json!(123456789012345680000.0), "123456789012345680000");
        check(json!(4.35), "4.35");
        check(json!(0.002), "0.002");
        check(json!(1e-6), "0.000001");
        check(json!(12.0e-7), "0.0000012");
        check(json!(1.2345e300), "1.2345e+300");
    }

    #[test]
    fn integers_stay_exact() {
        check(json!(0), "0");
        check(json!(-1), "-1");
        check(json!(9_007_199_254_740_993_u64), "9007199254740993");
        check(json!(u64::MAX), "18446744073709551615");
        check(json!(i64::MIN), "-9223372036854775808");
    }

    #[test]
    fn string_escapes() {
        check(json!("\u{0}\u{1}\u{1f}\u{7f}"), "\"\\u0000\\u0001\\u001f\u{7f}\"");
        check(json!("a\"b\\c/d"), r#""a\"b\\c/d""#);
        check(json!("\u{8}\t\n\u{c}\r\u{b}"), r#""\b\t\n\f\r\u000b""#);
        check(json!("€$\u{f}\nA'B\"\\\\\"/"), r#""€$\u000f\nA'B\"\\\\\"/""#);
        check(json!("é😀\u{2028}"), "\"é😀\u{2028}\"");
    }

    /// RFC 8785 §3.2.3: keys are sorted by UTF-16 code units, which puts U+1F600 (surrogates
    /// D83D DE00) before U+FB33, unlike a sort by code point or UTF-8 bytes.
    #[test]
    fn rfc8785_key_order() {
        let value = json!({
            "\u{20ac}": "Euro Sign",
            "\r": "Carriage Return",
            "\u{fb33}": "Hebrew Letter Dalet With Dagesh",
            "1": "One",
            "\u{1f600}": "Emoji: Grinning Face",
            "\u{80}": "Control",
            "\u{f6}": "Latin Small Letter O With Diaeresis"
        });
        let expected = concat!(
            "{\"\\r\":\"Carriage Return\",",
            "\"1\":\"One\",",
            "\"\u{80}\":\"Control\",",
            "\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",",
            "\"\u{20ac}\":\"Euro Sign\",",
            "\"\u{1f600}\":\"Emoji: Grinning Face\",",
            "\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}",
        );
        check(value, expected);
    }

    /// RFC 8785 §3.2.4's example input and its canonical output.
    #[test]
    fn rfc8785_example() {
        let input: Value = serde_json::from_str(
            r#"{
              "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
              "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
              "literals": [null, true, false]
            }"#,
        )
        .unwrap();
        check(
            input,
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#,
        );
    }

    #[test]
    fn nesting_and_whitespace() {
        check(json!({}), "{}");
        check(json!([]), "[]");
        check(json!({"a": {"c": [], "b": {}}, "": [null, [1, [2]]]}), r#"{"":[null,[1,[2]]],"a":{"b":{},"c":[]}}"#);
    }

    #[test]
    fn deep_values_do_not_overflow() {
        let mut value = json!(1);
        for _ in 0..10_000 {
            value = Value::Array(vec![value]);
        }
        let text = canonical_json(&value);
        assert_eq!(text.len(), 20_001);
        // Dismantle iteratively: serde_json's drop is recursive.
        let mut current = value;
        while let Value::Array(mut items) = current {
            current = items.pop().unwrap_or(Value::Null);
        }
    }

    #[test]
    fn text_shorter_than_the_limit_is_never_too_many() {
        // Every byte a separator: the count reaches the length plus one.
        assert!(!too_many_values(b",,,", 4), "3 bytes hold at most 4 values");
        assert!(too_many_values(b",,,,", 4), "4 bytes may hold 5");
        assert!(too_many_values(b"[]", 1));
    }

    proptest::proptest! {
        /// Skipping the scan of text shorter than the limit changes no answer.
        #[test]
        fn too_many_values_is_the_full_count(
            bytes in proptest::collection::vec(proptest::sample::select(b"[{,\\\"a ".to_vec()), 0..40),
            max in 0usize..48,
        ) {
            proptest::prop_assert_eq!(too_many_values(&bytes, max), scan(&bytes, max));
        }

        /// The canonical text of a finite double reads back as the same double, with as few
        /// significant digits as Rust's own shortest formatting.
        #[test]
        fn f64_round_trips_with_shortest_digits(bits in proptest::num::u64::ANY) {
            let x = f64::from_bits(bits);
            proptest::prop_assume!(x.is_finite());
            let mut out = Vec::new();
            write_f64(x, &mut out);
            let text = String::from_utf8(out).unwrap();
            let back: f64 = text.parse().unwrap();
            proptest::prop_assert_eq!(back, if x == 0.0 { 0.0 } else { x });
            if x != 0.0 {
                let mut buffer = ryu::Buffer::new();
                let ours = decimal_digits(buffer.format_finite(x.abs())).0.len();
                let std = decimal_digits(&format!("{:e}", x.abs())).0.len();
                proptest::prop_assert_eq!(ours, std, "{}", text);
            }
        }

        /// The byte-wise shortcut orders keys as UTF-16 does, also where the two orders differ
        /// (characters at U+E000..=U+FFFF against ones beyond U+FFFF) and where one key is a
        /// prefix of the other.
        #[test]
        fn keys_are_ordered_as_utf16(
            a in "[a\\u{7f}\\u{e9}\\u{d7ff}\\u{e000}\\u{ffff}\\u{10000}\\u{1f600}]{0,4}",
            b in "[a\\u{7f}\\u{e9}\\u{d7ff}\\u{e000}\\u{ffff}\\u{10000}\\u{1f600}]{0,4}",
        ) {
            proptest::prop_assert_eq!(utf16_order(&a, &b), a.encode_utf16().cmp(b.encode_utf16()), "{:?} {:?}", a, b);
        }

        /// An object's members come out in UTF-16 order whether the map's own order already is
        /// that order (written as it iterates) or not (sorted first).
        #[test]
        fn members_are_written_in_utf16_order(
            keys in proptest::collection::btree_set("[a\\u{e9}\\u{e000}\\u{ffff}\\u{10000}\\u{1f600}]{0,3}", 0..6),
        ) {
            let mut sorted: Vec<&String> = keys.iter().collect();
            sorted.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            let expected: Vec<String> = sorted.iter().map(|k| format!("{}:1", canonical_json(&Value::String((*k).clone())))).collect();
            let object: Map<String, Value> = keys.iter().map(|k| (k.clone(), Value::from(1))).collect();
            proptest::prop_assert_eq!(canonical_json(&Value::Object(object)), format!("{{{}}}", expected.join(",")));
        }
    }
}
