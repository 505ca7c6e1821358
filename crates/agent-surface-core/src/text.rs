//! Agent-safe text: the only strings that may enter an agent-facing message.
//!
//! Agent-facing messages are rendered from templates ([`crate::message`]). A template may take a
//! fragment of text from the application — a disabled capability's reason, a precondition's
//! explanation, a confirmation summary — but only as a [`SafeText`], which is built either from a
//! `&'static str` (text written in the source code) or through [`SafeText::trusted`], whose name
//! records the author's decision that the text was composed by the application and not copied
//! from an error, a request or a downstream response. There is no `From<String>`: an unknown
//! error's `Display` cannot become agent-facing text by accident.

use std::borrow::Cow;
use std::fmt;

/// The most characters a [`SafeText`] fragment keeps.
pub const MAX_FRAGMENT_CHARS: usize = 200;

/// A short, whitespace-normalized, control-character-free text that the application vouches for.
///
/// ```
/// use agent_surface_core::SafeText;
///
/// let reason = SafeText::from("Sign the terms of service first.");
/// assert_eq!(reason.as_str(), "Sign the terms of service first.");
///
/// // Whitespace is normalized and control characters dropped.
/// let t = SafeText::trusted(format!("Order {}\n  is\tlocked.", 42));
/// assert_eq!(t.as_str(), "Order 42 is locked.");
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SafeText(Cow<'static, str>);

impl SafeText {
    /// Text composed by the application (not copied from an error, a request, or a response).
    ///
    /// The text is whitespace-normalized, stripped of control characters and capped at
    /// [`MAX_FRAGMENT_CHARS`] characters (with a trailing `…` when cut).
    pub fn trusted(text: impl Into<String>) -> SafeText {
        SafeText(Cow::Owned(normalize(&text.into(), MAX_FRAGMENT_CHARS)))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the text is empty after normalization.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&'static str> for SafeText {
    fn from(text: &'static str) -> SafeText {
        let normalized = normalize(text, MAX_FRAGMENT_CHARS);
        if normalized == text { SafeText(Cow::Borrowed(text)) } else { SafeText(Cow::Owned(normalized)) }
    }
}

impl fmt::Debug for SafeText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for SafeText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Collapses runs of whitespace to one space, drops control characters, trims, and caps the
/// result at `max_chars` characters (the last one being `…` when the text was cut).
pub(crate) fn normalize(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars * 4));
    let mut pending_space = false;
    let mut count = 0usize;
    let mut cut = false;
    for ch in text.chars() {
        if ch.is_whitespace() {
            pending_space = !out.is_empty();
            continue;
        }
        if ch.is_control() || is_invisible(ch) {
            continue;
        }
        let needed = if pending_space { 2 } else { 1 };
        if count + needed > max_chars {
            cut = true;
            break;
        }
        if pending_space {
            out.push(' ');
            count += 1;
            pending_space = false;
        }
        out.push(ch);
        count += 1;
    }
    if cut {
        while count + 1 > max_chars {
            if out.pop().is_none() {
                break;
            }
            count -= 1;
        }
        let trimmed = out.trim_end().len();
        out.truncate(trimmed);
        out.push('…');
    }
    out
}

/// Format characters that render as nothing and can hide text from a reviewer (bidi overrides,
/// zero-width characters).
fn is_invisible(ch: char) -> bool {
    matches!(ch, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(input: &str, max: usize, expected: &str) {
        let got = normalize(input, max);
        assert_eq!(got, expected);
        assert!(got.chars().count() <= max, "{got:?} is longer than {max}");
    }

    #[test]
    fn normalizes() {
        check("  a \n\t b  ", 10, "a b");
        check("a\u{0}b\u{7}c", 10, "abc");
        check("a\u{202E}b", 10, "ab");
        check("abcdefghij", 10, "abcdefghij");
        check("abcdefghijk", 10, "abcdefghi…");
        check("abcd efghij klm", 10, "abcd efgh…");
        check("abcd      ef", 6, "abcd…");
        check("abcd      e", 6, "abcd e");
        check("", 10, "");
        check("ééééé", 3, "éé…");
    }
}
