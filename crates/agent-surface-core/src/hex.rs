//! Hexadecimal text of bytes — the one encoder and decoder behind fingerprints, stored ids,
//! correlation and task ids, trace contexts, form tokens and asset names.
//!
//! Encoding is always lower case. Decoding comes in two strictnesses: [`decode`] and
//! [`decode_into`] accept either case (ids people copy and paste), [`decode_lower_into`] only
//! lower case (formats that define their hex as lower case, such as W3C `traceparent`).

use std::fmt;

/// The sixteen lower-case digits, indexed by nibble.
const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Bytes shown as lower-case hexadecimal, two digits each, without allocating.
///
/// ```
/// use agent_surface_core::hex::Hex;
/// assert_eq!(Hex(&[0x00, 0xab, 0x7f]).to_string(), "00ab7f");
/// assert_eq!(format!("c-{}", Hex(&[1, 2])), "c-0102");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Hex<'a>(pub &'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A stack buffer per 32 bytes: one `write_str` each instead of a formatted write per byte.
        let mut buf = [0u8; 64];
        for chunk in self.0.chunks(32) {
            f.write_str(encode_into(chunk, &mut buf[..2 * chunk.len()]))?;
        }
        Ok(())
    }
}

/// `bytes` as lower-case hexadecimal written into `out`, which must be exactly twice as long;
/// the digits written, as text. For fixed-size ids on hot paths: no allocation, no formatting
/// machinery.
///
/// # Panics
///
/// When `out.len() != 2 * bytes.len()` (a programming error, never an input's doing).
///
/// ```
/// let mut buf = [0u8; 6];
/// assert_eq!(agent_surface_core::hex::encode_into(&[0x00, 0xab, 0x7f], &mut buf), "00ab7f");
/// ```
pub fn encode_into<'a>(bytes: &[u8], out: &'a mut [u8]) -> &'a str {
    assert_eq!(out.len(), 2 * bytes.len(), "hex::encode_into: the output must be twice the input's length");
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0xf)];
    }
    // Only ASCII digits were written.
    std::str::from_utf8(out).unwrap_or_default()
}

/// The value of one hexadecimal digit; upper case only when `upper` is accepted.
const fn digit(d: u8, upper: bool) -> Option<u8> {
    match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        b'A'..=b'F' if upper => Some(d - b'A' + 10),
        _ => None,
    }
}

fn decode_digits(digits: &[u8], out: &mut [u8], upper: bool) -> Option<()> {
    if digits.len() != 2 * out.len() {
        return None;
    }
    for (b, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *b = digit(pair[0], upper)? << 4 | digit(pair[1], upper)?;
    }
    Some(())
}

/// The bytes written as hexadecimal digits (either case) in `digits`, decoded into `out`;
/// `None` when `digits` is not exactly twice as long as `out` or holds a character that is not
/// a hexadecimal digit (then `out`'s content is unspecified).
///
/// ```
/// use agent_surface_core::hex::decode_into;
/// let mut out = [0u8; 2];
/// assert_eq!(decode_into(b"aB7f", &mut out), Some(()));
/// assert_eq!(out, [0xab, 0x7f]);
/// assert_eq!(decode_into(b"ab7", &mut out), None);
/// assert_eq!(decode_into(b"ab7g", &mut out), None);
/// ```
#[must_use]
pub fn decode_into(digits: &[u8], out: &mut [u8]) -> Option<()> {
    decode_digits(digits, out, true)
}

/// As [`decode_into`], accepting lower-case digits only (an upper-case `A`–`F` is refused).
///
/// ```
/// use agent_surface_core::hex::decode_lower_into;
/// let mut out = [0u8; 1];
/// assert_eq!(decode_lower_into(b"ff", &mut out), Some(()));
/// assert_eq!(decode_lower_into(b"fF", &mut out), None);
/// ```
#[must_use]
pub fn decode_lower_into(digits: &[u8], out: &mut [u8]) -> Option<()> {
    decode_digits(digits, out, false)
}

/// The `N` bytes written as `2 × N` hexadecimal digits (either case) in `text`; `None` for any
/// other length or a character that is not a hexadecimal digit.
///
/// ```
/// use agent_surface_core::hex::{Hex, decode};
/// assert_eq!(decode::<3>("00aB7f"), Some([0x00, 0xab, 0x7f]));
/// assert_eq!(decode::<2>("00ab7f"), None);
/// assert_eq!(decode::<1>("g0"), None);
/// assert_eq!(decode::<2>(&Hex(&[9, 250]).to_string()), Some([9, 250]));
/// ```
#[must_use]
pub fn decode<const N: usize>(text: &str) -> Option<[u8; N]> {
    let mut bytes = [0u8; N];
    decode_into(text.as_bytes(), &mut bytes)?;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips_and_matches_the_formatter() {
        let all: Vec<u8> = (0..=255).collect();
        let text = Hex(&all).to_string();
        let expected: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(text, expected);
        let mut buf = vec![0u8; 512];
        assert_eq!(encode_into(&all, &mut buf), expected);
        let mut back = vec![0u8; 256];
        assert_eq!(decode_into(text.as_bytes(), &mut back), Some(()));
        assert_eq!(back, all);
        assert_eq!(decode_lower_into(text.as_bytes(), &mut back), Some(()));
        assert_eq!(decode_into(text.to_ascii_uppercase().as_bytes(), &mut back), Some(()));
        assert_eq!(back, all);
        assert_eq!(decode_lower_into(text.to_ascii_uppercase().as_bytes(), &mut back), None);
    }

    #[test]
    fn empty_input_is_empty_output() {
        assert_eq!(Hex(&[]).to_string(), "");
        assert_eq!(encode_into(&[], &mut []), "");
        assert_eq!(decode_into(b"", &mut []), Some(()));
        assert_eq!(decode::<0>(""), Some([]));
    }

    #[test]
    fn malformed_digits_are_refused_without_panicking() {
        let mut out = [0u8; 2];
        for bad in [
            &b""[..],
            b"abc",
            b"abcde",
            b"0g00",
            b"00 0",
            b"+1ff",
            b"-1ff",
            b"0x1f",
            "é0".as_bytes(),
            b"\xff\xff\xff\xff",
            b"%41%",
        ] {
            assert_eq!(decode_into(bad, &mut out), None, "{bad:?}");
            assert_eq!(decode_lower_into(bad, &mut out), None, "{bad:?}");
        }
        assert_eq!(decode::<2>("ab\u{0}d"), None);
        assert_eq!(decode::<1>("é"), None);
    }

    #[test]
    fn long_input_crosses_the_display_buffer() {
        let bytes: Vec<u8> = (0..100u8).collect();
        let text = Hex(&bytes).to_string();
        assert_eq!(text.len(), 200);
        let mut back = [0u8; 100];
        assert_eq!(decode_into(text.as_bytes(), &mut back), Some(()));
        assert_eq!(&back[..], &bytes[..]);
    }

    #[test]
    #[should_panic(expected = "twice the input")]
    fn encode_into_a_wrong_sized_buffer_is_a_programming_error() {
        let _ = encode_into(&[1, 2], &mut [0u8; 3]);
    }
}
