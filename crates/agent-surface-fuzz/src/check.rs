//! The invariants several drivers assert: payloads and results round-trip, messages are in the
//! library's normalized form, and the input marker never reaches agent-facing text.

use agent_surface_core::message::{MAX_MESSAGE_CHARS, Sends};
use agent_surface_core::{ErrorPayload, InvokeResult, SafeText};
use serde_json::Value;

use crate::SECRET_MARKER;

/// `payload` serializes (wire text and JSON value) and parses back equal, byte for byte, and its
/// message is normalized; so does its wording for a model ([`ErrorPayload::worded_for`]), which
/// keeps everything but the message.
#[track_caller]
pub(crate) fn payload_round_trips(payload: &ErrorPayload) {
    one_payload_round_trips(payload);
    let worded = payload.worded_for(Sends::Arguments);
    assert_eq!(
        (worded.code(), worded.retry(), worded.details(), worded.repair()),
        (payload.code(), payload.retry(), payload.details(), payload.repair()),
        "wording for a model changed more than the message"
    );
    one_payload_round_trips(&worded);
}

#[track_caller]
fn one_payload_round_trips(payload: &ErrorPayload) {
    let text = payload.to_wire_text();
    let back: ErrorPayload =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("a payload does not parse back ({e}): {text}"));
    assert_eq!(&back, payload, "the payload changed on a round trip through {text}");
    assert_eq!(back.to_wire_text(), text, "the payload's wire text changed on a round trip");
    let back: ErrorPayload = serde_json::from_value(payload.to_json())
        .unwrap_or_else(|e| panic!("a payload does not parse back from its JSON value ({e}): {text}"));
    assert_eq!(&back, payload, "the payload changed on a round trip through its JSON value");
    message_is_normalized(payload.message());
}

/// `result` serializes and parses back equal; its error payload, if any, round-trips.
#[track_caller]
pub(crate) fn result_round_trips(result: &InvokeResult) {
    let text = serde_json::to_string(result).unwrap_or_else(|e| panic!("a result does not serialize: {e}"));
    let back: InvokeResult =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("a result does not parse back ({e}): {text}"));
    assert_eq!(&back, result, "the result changed on a round trip through {text}");
    if let Some(payload) = result.error_payload() {
        payload_round_trips(payload);
    }
}

/// `message` is what the library renders: 1 to [`MAX_MESSAGE_CHARS`] characters, words separated
/// by single spaces, and each word unchanged by the library's own normalization
/// ([`SafeText::trusted`]: no whitespace, control or invisible format characters).
#[track_caller]
pub(crate) fn message_is_normalized(message: &str) {
    let chars = message.chars().count();
    assert!((1..=MAX_MESSAGE_CHARS).contains(&chars), "a message has {chars} characters: {message:?}");
    for word in message.split(' ') {
        assert!(!word.is_empty(), "a message has a leading, trailing or doubled space: {message:?}");
        // Pieces well under the fragment cap, so that `trusted` never cuts.
        let word: Vec<char> = word.chars().collect();
        for piece in word.chunks(100) {
            let piece: String = piece.iter().collect();
            assert_eq!(SafeText::trusted(piece.as_str()).as_str(), piece, "a message is not normalized: {message:?}");
        }
    }
}

/// Whether any object key in `value`, at any depth, contains [`SECRET_MARKER`].
pub(crate) fn marker_in_keys(value: &Value) -> bool {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                if map.keys().any(|k| k.contains(SECRET_MARKER)) {
                    return true;
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    false
}

/// The marker reaches `payload` only when `keys_carry_marker`, since issue paths name the
/// input's keys but never its values (no template or fixture text contains it); and even then,
/// the message quotes it only inside a short plain JSON Pointer (what the library's quoting
/// rule lets into a message).
#[track_caller]
pub(crate) fn no_marker_leak(payload: &ErrorPayload, keys_carry_marker: bool) {
    if !keys_carry_marker {
        let text = payload.to_wire_text();
        assert!(!text.contains(SECRET_MARKER), "an input value reached a payload: {text}");
        return;
    }
    for word in payload.message().split(' ').filter(|w| w.contains(SECRET_MARKER)) {
        let pointer = word.strip_suffix([',', '.']).unwrap_or(word);
        let plain = pointer.len() <= 64
            && pointer.starts_with('/')
            && pointer.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'-' | b'.' | b'~'));
        assert!(plain, "input text reached a message other than as a plain path: {payload:?}");
    }
}
