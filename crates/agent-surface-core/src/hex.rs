//! Lower-case hexadecimal text of bytes — the one encoder behind fingerprints, stored ids,
//! correlation and task ids, and trace contexts.

use std::fmt;

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
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
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
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let value = |d: u8| char::from(d).to_digit(16).and_then(|v| u8::try_from(v).ok());
    let mut bytes = [0u8; N];
    for (b, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        *b = value(pair[0])? << 4 | value(pair[1])?;
    }
    Some(bytes)
}
