//! The request body's JSON, read strictly: a member name repeated within one object (at any
//! depth) is reported, where `serde_json::Value` would silently keep the last one.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Why a body is not acceptable JSON.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Strict {
    /// Not JSON at all: syntax, truncation, nesting past serde_json's recursion limit, encoding.
    Malformed,
    /// Well-formed JSON, but some object has a member name twice.
    DuplicateMember,
    /// More values than one per `BYTES_PER_VALUE` bytes of the body limit; not parsed.
    TooManyValues,
}

/// Parses `bytes` as one JSON value. A syntax error anywhere wins over a repeated name (the whole
/// text is read before duplicates are reported). Nesting is bounded by serde_json's default
/// recursion limit, as with `serde_json::from_slice`.
pub(crate) fn parse(bytes: &[u8], max_values: usize) -> Result<Value, Strict> {
    if agent_surface_core::json::too_many_values(bytes, max_values) {
        return Err(Strict::TooManyValues);
    }
    let duplicate = Cell::new(false);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = Unique(&duplicate).deserialize(&mut de).map_err(|_| Strict::Malformed)?;
    de.end().map_err(|_| Strict::Malformed)?;
    if duplicate.get() { Err(Strict::DuplicateMember) } else { Ok(value) }
}

/// Builds a `Value`, setting the flag when an object repeats a member name.
#[derive(Clone, Copy)]
struct Unique<'a>(&'a Cell<bool>);

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // serde_json never yields a non-finite float from JSON text.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            let value = map.next_value_seed(self)?;
            if members.insert(name, value).is_some() {
                self.0.set(true);
            }
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_as_serde_json_does() {
        let text = r#"{"a":[1,-2,3.5,"x",true,null,{"b":{}}],"c":"\u00e9\"","d":18446744073709551615}"#;
        assert_eq!(parse(text.as_bytes(), 1_000), Ok(serde_json::from_str::<Value>(text).unwrap()));
    }

    #[test]
    fn repeated_names_are_reported_at_any_depth() {
        for text in [r#"{"a":1,"a":2}"#, r#"{"x":{"a":1,"b":2,"a":1}}"#, r#"[{"a":[{"k":1,"k":1}]}]"#] {
            assert_eq!(parse(text.as_bytes(), 1_000), Err(Strict::DuplicateMember), "{text}");
        }
        assert!(parse(br#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#, 1_000).is_ok());
    }

    #[test]
    fn malformed_wins_and_depth_is_bounded() {
        assert_eq!(parse(br#"{"a":1,"a":2"#, 1_000), Err(Strict::Malformed));
        assert_eq!(parse(br#"{"a":1} x"#, 1_000), Err(Strict::Malformed));
        assert_eq!(parse(format!("{}{}", "[".repeat(200), "]".repeat(200)).as_bytes(), 1_000), Err(Strict::Malformed));
        assert!(parse(format!("{}{}", "[".repeat(100), "]".repeat(100)).as_bytes(), 1_000).is_ok());
        // Many tiny values are refused before parsing.
        assert_eq!(parse(format!("[{}0]", "0,".repeat(2_000)).as_bytes(), 1_000), Err(Strict::TooManyValues));
        assert_eq!(parse(&[0xff, b'{'], 1_000), Err(Strict::Malformed));
    }
}
