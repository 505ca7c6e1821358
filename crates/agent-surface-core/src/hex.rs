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
