//! What every incoming JSON-RPC message is checked for before `rmcp` parses it, on both
//! transports: more JSON values than its size allows, a member name repeated in one object
//! (`serde_json` would silently keep the last one, where the HTTP binding refuses the message),
//! and a method name too long to echo. A refusal is a [`ProtocolFault`], answered from its table.

use std::borrow::Cow;
use std::fmt;

use agent_surface_core::json::{BYTES_PER_VALUE, too_many_values};
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::fault::ProtocolFault;

/// The longest method name a message may have; a longer one cannot name a method, and is not
/// echoed in the answer.
pub(crate) const MAX_METHOD_BYTES: usize = 128;

/// What the screen learnt of a message.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Screened {
    /// The message's top-level `id`, when it is a usable JSON-RPC id (a string or an integer).
    pub(crate) id: Option<rmcp::model::RequestId>,
    /// Whether it has the shape of a request: a string `method`, a usable `id` and no top-level
    /// `result` or `error`. (A notification has no `id`; a batch is an array, never a request.)
    pub(crate) request: bool,
    /// Whether it is an `initialize` request.
    pub(crate) initialize: bool,
    /// Whether it has the shape of a `tools/call` request: the method `tools/call`, a usable `id`
    /// and no top-level `result` or `error` (which would make it no request). The stdio
    /// transport parses such a message as a `tools/call` directly (`stdio::parse`).
    pub(crate) tools_call: bool,
    /// For a response (`result` or `error`, no `method`), the usable id it names: one of the
    /// server's own requests (never answered under, see [`screen`]).
    pub(crate) answers: Option<rmcp::model::RequestId>,
}

/// Checks one message of at most `max_bytes` bytes. A refusal comes with the message's id when
/// the screen could read one, so that the answer reaches the request it refuses; never with the
/// id of a response (a message with `result` or `error` and no `method`), whose id is one of the
/// server's own requests: an error under it would read, to a client with a request of that id
/// pending, as that request's answer.
pub(crate) fn screen(
    bytes: &[u8],
    max_bytes: usize,
) -> Result<Screened, (ProtocolFault, Option<rmcp::model::RequestId>)> {
    let max_values = max_bytes / BYTES_PER_VALUE;
    if too_many_values(bytes, max_values) {
        return Err((ProtocolFault::TooManyValues(max_values), None));
    }
    // A batch (a top-level array) is refused whole; the first non-blank byte tells.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err((ProtocolFault::Batch, None));
    }
    // Checked as text once, whole: the parser then reads its strings without checking each (a
    // check per string cost more than this one).
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Err((ProtocolFault::NotJson, None));
    };
    let mut found = Found::default();
    let mut names = Vec::with_capacity(SMALL_OBJECT);
    let mut de = serde_json::Deserializer::from_str(text);
    let walk = Walk { found: &mut found, names: &mut names, top: true };
    if walk.deserialize(&mut de).is_err() || de.end().is_err() {
        return Err((ProtocolFault::NotJson, None));
    }
    let response = !found.method && found.result_or_error;
    let (id, answers) = if response { (None, found.id.take()) } else { (found.id.take(), None) };
    if found.duplicate {
        return Err((ProtocolFault::DuplicateMember, id));
    }
    if found.long_method {
        return Err((ProtocolFault::MethodTooLong, id));
    }
    let request = found.method && !found.result_or_error && id.is_some();
    Ok(Screened { id, request, initialize: found.initialize, tools_call: request && found.tools_call, answers })
}

/// The id a message refused by [`screen`] names when it is a response (`result` or `error`, no
/// `method`): one of the server's own requests, which the transport fails at once rather than
/// leave it waiting for an answer that came malformed. Walked again, without building the value,
/// only for a refused message.
pub(crate) fn response_id(bytes: &[u8]) -> Option<rmcp::model::RequestId> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut found = Found::default();
    let mut names = Vec::with_capacity(SMALL_OBJECT);
    let mut de = serde_json::Deserializer::from_str(text);
    Walk { found: &mut found, names: &mut names, top: true }.deserialize(&mut de).ok()?;
    found.id.filter(|_| !found.method && found.result_or_error)
}

#[derive(Default)]
struct Found {
    duplicate: bool,
    long_method: bool,
    method: bool,
    initialize: bool,
    tools_call: bool,
    result_or_error: bool,
    id: Option<rmcp::model::RequestId>,
}

/// Objects with more members than this track their names in a hash set (a vector is faster for
/// the small objects of almost every message, and quadratic for large ones).
const SMALL_OBJECT: usize = 16;

/// Walks a JSON value without building it, noting repeated member names and, at the top, a long
/// `method`.
struct Walk<'f, 'de> {
    found: &'f mut Found,
    /// The member names of the objects being walked, the innermost last: an object pushes its
    /// names above its parents' and takes them off when it ends, so that one buffer serves the
    /// whole message instead of one per object.
    names: &'f mut Vec<Name<'de>>,
    top: bool,
}

impl<'de> Walk<'_, 'de> {
    /// The walk of a value inside the one being walked.
    fn inner(&mut self) -> Walk<'_, 'de> {
        Walk { found: &mut *self.found, names: &mut *self.names, top: false }
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, 'de> {
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

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(self.inner())?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        // This object's names are `self.names[base..]` until it has more than `SMALL_OBJECT`.
        let base = self.names.len();
        let mut many: Option<std::collections::HashSet<Name<'de>>> = None;
        while let Some(name) = map.next_key::<Name<'de>>()? {
            if self.top && name.0 == "method" {
                // A method that is not a string is left to the parser, which answers it.
                if let Top::Text(method) = map.next_value::<Top<'de>>()? {
                    self.found.method = true;
                    self.found.long_method |=
                        method.len() > MAX_METHOD_BYTES || !method.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
                    self.found.initialize |= method == "initialize";
                    self.found.tools_call |= method == "tools/call";
                }
            } else if self.top && name.0 == "id" {
                self.found.id = match map.next_value::<Top<'de>>()? {
                    Top::Text(s) => Some(rmcp::model::NumberOrString::String(s.as_ref().into())),
                    Top::Integer(n) => Some(rmcp::model::NumberOrString::Number(n)),
                    Top::Other => None,
                };
            } else if self.top && name.0 != "params" {
                self.found.result_or_error |= name.0 == "result" || name.0 == "error";
                map.next_value::<IgnoredAny>()?;
            } else {
                map.next_value_seed(self.inner())?;
            }
            let repeated = match &mut many {
                Some(set) => !set.insert(name),
                None if self.names[base..].contains(&name) => true,
                None => {
                    self.names.push(name);
                    if self.names.len() - base > SMALL_OBJECT {
                        many = Some(self.names.drain(base..).collect());
                    }
                    false
                }
            };
            self.found.duplicate |= repeated;
        }
        self.names.truncate(base);
        Ok(())
    }
}

/// A member name, borrowed from the message unless it holds an escape (the screen reads every
/// name of every object; copying them all cost more than the rest of the walk).
#[derive(PartialEq, Eq, Hash)]
struct Name<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(TopVisitor).and_then(|top| match top {
            Top::Text(text) => Ok(Name(text)),
            _ => Err(serde::de::Error::custom("a member name is a string")),
        })
    }
}

/// A top-level `method` or `id` as far as the screen needs it: a string, an integer that fits
/// an `i64` (a usable JSON-RPC id, as `serde_json::Value::as_i64` reads it), or anything else.
enum Top<'de> {
    Text(Cow<'de, str>),
    Integer(i64),
    Other,
}

impl<'de> Deserialize<'de> for Top<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TopVisitor)
    }
}

struct TopVisitor;

impl<'de> Visitor<'de> for TopVisitor {
    type Value = Top<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Top<'de>, E> {
        Ok(Top::Text(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Top<'de>, E> {
        Ok(Top::Text(Cow::Owned(v.to_string())))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Top<'de>, E> {
        Ok(Top::Integer(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Top<'de>, E> {
        Ok(i64::try_from(v).map_or(Top::Other, Top::Integer))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Top<'de>, E> {
        Ok(Top::Other)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Top<'de>, E> {
        Ok(Top::Other)
    }

    fn visit_unit<E>(self) -> Result<Top<'de>, E> {
        Ok(Top::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Top::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top<'de>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Top::Other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rmcp::model::NumberOrString;

    #[test]
    fn screens() {
        let ok = |id: i64| Ok(Screened { id: Some(NumberOrString::Number(id)), ..Screened::default() });
        let request =
            |id: i64| Ok(Screened { id: Some(NumberOrString::Number(id)), request: true, ..Screened::default() });
        assert_eq!(screen(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, 4096), request(1));
        assert_eq!(
            screen(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}"#, 4096),
            Err((ProtocolFault::DuplicateMember, Some(NumberOrString::Number(1))))
        );
        assert!(matches!(
            screen(br#"{"id":1,"id":2,"method":"ping","jsonrpc":"2.0"}"#, 4096),
            Err((ProtocolFault::DuplicateMember, _))
        ));
        let long = format!(r#"{{"jsonrpc":"2.0","id":"x","method":"{}"}}"#, "m".repeat(200));
        assert_eq!(
            screen(long.as_bytes(), 4096),
            Err((ProtocolFault::MethodTooLong, Some(NumberOrString::String("x".into()))))
        );
        assert_eq!(screen(b"[0,0,0,0,0,0,0,0,0,0]", 64), Err((ProtocolFault::TooManyValues(4), None)));
        // A response is refused without its id, which names the server's request it answers.
        let response = br#"{"jsonrpc":"2.0","id":4,"result":{},"result":{}}"#;
        assert_eq!(screen(response, 4096), Err((ProtocolFault::DuplicateMember, None)));
        assert_eq!(response_id(response), Some(NumberOrString::Number(4)));
        assert_eq!(response_id(br#"{"jsonrpc":"2.0","id":4,"method":"ping","result":{}}"#), None);
        assert_eq!(response_id(br#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#), None);
        assert_eq!(response_id(br#"{"id":"e-1","error":{"code":"x"}}"#), Some(NumberOrString::String("e-1".into())));
        let answers = screen(br#"{"jsonrpc":"2.0","id":4,"result":{}}"#, 4096).unwrap();
        assert_eq!((answers.id, answers.answers), (None, Some(NumberOrString::Number(4))));
        // A batch is refused whole, with no parser text; a method with a bidi or control
        // character is not echoed.
        assert_eq!(screen(br#" [{"jsonrpc":"2.0","id":1,"method":"ping"}]"#, 4096), Err((ProtocolFault::Batch, None)));
        for method in ["tools/\u{202e}call", "ping\u{0}", "tools/\u{200b}list"] {
            let message = serde_json::json!({"jsonrpc": "2.0", "id": 9, "method": method}).to_string();
            assert_eq!(
                screen(message.as_bytes(), 4096),
                Err((ProtocolFault::MethodTooLong, Some(NumberOrString::Number(9)))),
                "{method:?}"
            );
        }
        assert_eq!(screen(b"not json", 4096), Err((ProtocolFault::NotJson, None)));
        assert_eq!(screen(br#"{"a":1} x"#, 4096), Err((ProtocolFault::NotJson, None)));
        // A repeated name inside a string or in sibling objects is not a repetition.
        assert_eq!(screen(br#"{"a":{"x":1},"b":{"x":2},"c":"\"a\":1"}"#, 4096), Ok(Screened::default()));
        // Each object's names are its own: a nested object's names never count for its parent,
        // nor its parent's for it, before or after it, and whether or not it has more than
        // `SMALL_OBJECT` names. (Of the top-level members only `params` is walked.)
        let repeats = |params: &str| {
            let message = format!(r#"{{"jsonrpc":"2.0","method":"m","params":{params}}}"#);
            match screen(message.as_bytes(), 1 << 16) {
                Ok(_) => false,
                Err((ProtocolFault::DuplicateMember, None)) => true,
                Err(other) => panic!("{other:?}"),
            }
        };
        assert!(!repeats(r#"{"a":{"a":1,"b":{"a":2,"b":3}},"b":{"b":[{"a":1,"b":2}]}}"#));
        assert!(!repeats(r#"{"p":{"x":1,"q":{"x":2,"y":3},"y":4},"q":0}"#));
        assert!(repeats(r#"{"a":{"x":1},"a":2}"#));
        assert!(repeats(r#"{"p":{"x":1,"q":{"z":2},"x":4}}"#));
        assert!(repeats(r#"{"p":{"x":1,"q":{"x":2,"x":3},"y":4}}"#));
        assert!(repeats(r#"{"p":[{"x":1},{"x":1,"x":2}]}"#));
        let wide: Vec<String> = (0..2 * SMALL_OBJECT).map(|i| format!(r#""k{i}":{{"k{i}":0}}"#)).collect();
        let wide = wide.join(",");
        assert!(!repeats(&format!(r#"{{"a":{{{wide}}},"k1":0,"b":{{"k1":{{{wide}}}}}}}"#)));
        assert!(repeats(&format!(r#"{{"a":{{{wide}}},"k1":0,"k1":1}}"#)));
        for repeated in ["k0", "k3", &format!("k{SMALL_OBJECT}"), &format!("k{}", 2 * SMALL_OBJECT - 1)] {
            assert!(repeats(&format!(r#"{{"a":{{{wide},"{repeated}":1}}}}"#)), "{repeated}");
        }
        assert!(repeats(&format!(r#"{{"a":{{{wide},"z":{{"y":1,"y":2}}}}}}"#)));
        // Names are compared as they decode: an escape spells the same name.
        assert!(repeats(r#"{"a":1,"\u0061":2}"#));
        assert!(repeats(r#"{"p":{"x\"y":1,"x\u0022y":2}}"#));
        assert!(!repeats(r#"{"a":1,"\u0041":2}"#));
        assert!(screen(br#"{"jsonrpc":"2.0","id":1,"\u006dethod":"tools/call"}"#, 4096).unwrap().tools_call);
        // A message that is not UTF-8 text is not JSON, wherever the bytes are.
        for bytes in [&b"{\"params\":{\"\xff\":1}}"[..], b"{\"id\":1,\"x\":\"\xc3\"}", b"\xef\xbb"] {
            assert_eq!(screen(bytes, 4096), Err((ProtocolFault::NotJson, None)), "{bytes:?}");
        }
        // A method that is not a string is left to the parser.
        assert_eq!(screen(br#"{"jsonrpc":"2.0","id":3,"method":7}"#, 4096), ok(3));
        assert!(screen(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#, 4096).unwrap().initialize);
        // A `tools/call` request, and what is not one: no id, an id that is no JSON-RPC id, a
        // `result` or an `error` beside the method.
        let call = |message: &str| screen(message.as_bytes(), 4096).unwrap().tools_call;
        assert!(call(r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"t"}}"#));
        assert!(!call(r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t"}}"#));
        assert!(!call(r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"t"}}"#));
        assert!(!call(r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"t"}}"#));
        assert!(!call(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","result":{}}"#));
        assert!(!call(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","error":{}}"#));
        assert!(!call(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#));
        // A request, and what is not one: a notification, a response (a batch is refused above).
        let request = |message: &str| screen(message.as_bytes(), 4096).unwrap().request;
        assert!(request(r#"{"jsonrpc":"2.0","id":"a","method":"tools/list"}"#));
        assert!(!request(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#));
        assert!(!request(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#));
    }

    /// A large object is checked in linear time (a vector of names would take minutes).
    #[test]
    fn a_large_object_is_screened_quickly() {
        let members: Vec<String> = (0..200_000).map(|i| format!("\"k{i}\":0")).collect();
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{{}}}}}"#, members.join(","));
        let started = std::time::Instant::now();
        assert!(screen(body.as_bytes(), 64 << 20).is_ok());
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        let repeated =
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{{},"k7":1}}}}"#, members.join(","));
        assert!(matches!(screen(repeated.as_bytes(), 64 << 20), Err((ProtocolFault::DuplicateMember, _))));
    }
}
