//! What every incoming JSON-RPC message is checked for before `rmcp` parses it, on both
//! transports: more JSON values than its size allows, a member name repeated in one object
//! (`serde_json` would silently keep the last one, where the HTTP binding refuses the message),
//! and a method name too long to echo.

use std::fmt;

use agent_surface_core::json::{BYTES_PER_VALUE, too_many_values};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The longest method name a message may have; a longer one cannot name a method, and is not
/// echoed in the answer.
pub(crate) const MAX_METHOD_BYTES: usize = 128;

/// Why a message is refused before it is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// More values than one per [`BYTES_PER_VALUE`] bytes of the size limit (the number is the
    /// most allowed).
    TooManyValues(usize),
    /// An object repeats a member name.
    DuplicateMember,
    /// The method name is longer than [`MAX_METHOD_BYTES`].
    MethodTooLong,
    /// Not JSON (syntax, encoding, nesting past the parser's limit).
    NotJson,
}

/// Checks one message of at most `max_bytes` bytes.
pub(crate) fn screen(bytes: &[u8], max_bytes: usize) -> Result<(), Refusal> {
    let max_values = max_bytes / BYTES_PER_VALUE;
    if too_many_values(bytes, max_values) {
        return Err(Refusal::TooManyValues(max_values));
    }
    let mut found = Found::default();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    if (Walk { found: &mut found, top: true }).deserialize(&mut de).is_err() || de.end().is_err() {
        return Err(Refusal::NotJson);
    }
    if found.duplicate {
        return Err(Refusal::DuplicateMember);
    }
    if found.long_method {
        return Err(Refusal::MethodTooLong);
    }
    Ok(())
}

#[derive(Default)]
struct Found {
    duplicate: bool,
    long_method: bool,
}

/// Walks a JSON value without building it, noting repeated member names and, at the top, a long
/// `method`.
struct Walk<'f> {
    found: &'f mut Found,
    top: bool,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Walk { found: &mut *self.found, top: false })?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Objects in messages are small: a vector beats a hash set.
        let mut names: Vec<String> = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            if self.top && name == "method" {
                let method: String = map.next_value()?;
                self.found.long_method |= method.len() > MAX_METHOD_BYTES;
            } else if self.top && name != "params" {
                map.next_value::<IgnoredAny>()?;
            } else {
                map.next_value_seed(Walk { found: &mut *self.found, top: false })?;
            }
            if names.contains(&name) {
                self.found.duplicate = true;
            } else {
                names.push(name);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn screens() {
        assert_eq!(screen(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, 4096), Ok(()));
        assert_eq!(
            screen(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}"#, 4096),
            Err(Refusal::DuplicateMember)
        );
        assert_eq!(screen(br#"{"id":1,"id":2,"method":"ping","jsonrpc":"2.0"}"#, 4096), Err(Refusal::DuplicateMember));
        let long = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{}"}}"#, "m".repeat(200));
        assert_eq!(screen(long.as_bytes(), 4096), Err(Refusal::MethodTooLong));
        assert_eq!(screen(b"[0,0,0,0,0,0,0,0,0,0]", 64), Err(Refusal::TooManyValues(4)));
        assert_eq!(screen(b"not json", 4096), Err(Refusal::NotJson));
        assert_eq!(screen(br#"{"a":1} x"#, 4096), Err(Refusal::NotJson));
        // A repeated name inside a string or in sibling objects is not a repetition.
        assert_eq!(screen(br#"{"a":{"x":1},"b":{"x":2},"c":"\"a\":1"}"#, 4096), Ok(()));
    }
}
