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

/// A short, whitespace-normalized text free of control and invisible format characters, which the
/// application vouches for.
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
    /// The text is whitespace-normalized, stripped of control and invisible format characters
    /// (general category `Cf`: bidi controls, zero-width and tag characters) and capped at
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

/// Collapses runs of whitespace to one space, drops control characters (`Cc`) and invisible
/// format characters ([`is_invisible`]), trims, and caps the result at `max_chars` characters (the
/// last one being `…` when the text was cut).
///
/// The result is in *normalized form*: `normalize(normalize(t, n), n) == normalize(t, n)`. Parsing
/// accepts agent-facing text only in that form ([`is_normalized`]).
pub(crate) fn normalize(text: &str, max_chars: usize) -> String {
    if max_chars == 0 {
        // Not even the `…` fits.
        return String::new();
    }
    let mut out = String::with_capacity(text.len().min(max_chars.saturating_mul(4)));
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

/// The text normalized like [`normalize`] but without a cap: only whitespace, control and
/// invisible characters change (normalization never lengthens a text, so nothing is cut).
pub(crate) fn clean(text: &str) -> String {
    normalize(text, text.chars().count())
}

/// Whether `text` is already in normalized form for the cap `max_chars`, i.e. `normalize(text,
/// max_chars) == text`: no control or invisible format characters, no whitespace but single inner
/// spaces, and at most `max_chars` characters.
pub(crate) fn is_normalized(text: &str, max_chars: usize) -> bool {
    text.chars().count() <= max_chars && clean(text) == text
}

/// Characters that render as nothing and can hide text from a reviewer or smuggle it to a model:
/// every format character (general category `Cf`: bidi overrides and isolates, zero-width
/// characters, the soft hyphen, interlinear annotation marks, the Unicode tag characters of "ASCII
/// smuggling") and every other default-ignorable code point (the combining grapheme joiner,
/// variation selectors, Hangul fillers, Mongolian free variation selectors, the U+E0000 block).
/// Enumerated (Unicode 15.1/16.0) because `std` has no property tables.
pub(crate) const INVISIBLE_RANGES: &[(char, char)] = &[
    ('\u{00AD}', '\u{00AD}'),
    ('\u{034F}', '\u{034F}'),
    ('\u{0600}', '\u{0605}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{06DD}', '\u{06DD}'),
    ('\u{070F}', '\u{070F}'),
    ('\u{0890}', '\u{0891}'),
    ('\u{08E2}', '\u{08E2}'),
    ('\u{115F}', '\u{1160}'),
    ('\u{17B4}', '\u{17B5}'),
    ('\u{180B}', '\u{180F}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2060}', '\u{206F}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{FE00}', '\u{FE0F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFA0}', '\u{FFA0}'),
    ('\u{FFF0}', '\u{FFFB}'),
    ('\u{110BD}', '\u{110BD}'),
    ('\u{110CD}', '\u{110CD}'),
    ('\u{13430}', '\u{1343F}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0000}', '\u{E0FFF}'),
];

/// Whether `ch` renders as nothing: a format character (general category `Cf`: bidi overrides
/// and isolates, zero-width characters, the soft hyphen, the tag characters of "ASCII smuggling")
/// or another default-ignorable code point (the combining grapheme joiner, variation selectors,
/// Hangul fillers, the U+E0000 block), as enumerated for Unicode 15.1/16.0.
///
/// It is the project's one list of such characters: [`SafeText`] drops them from every message an
/// agent reads, and the policy crate's principal comparison ignores them when it reads two names.
/// Control characters are not in it (`char::is_control` tells those).
///
/// ```
/// use agent_surface_core::is_invisible;
/// assert!(is_invisible('\u{200B}')); // a zero-width space
/// assert!(is_invisible('\u{E0041}')); // a tag character
/// assert!(!is_invisible('a'));
/// assert!(!is_invisible('\u{7}')); // a control character, not a format character
/// ```
pub fn is_invisible(ch: char) -> bool {
    // Every listed code point is at or above U+00AD: plain ASCII text takes the fast path.
    ch >= '\u{00AD}' && INVISIBLE_RANGES.iter().any(|&(lo, hi)| (lo..=hi).contains(&ch))
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
        // Format characters (Cf), including the tag characters of "ASCII smuggling".
        check("a\u{E0041}\u{E0042}b\u{E007F}", 10, "ab");
        check("a\u{00AD}b\u{061C}c\u{180E}d\u{FFF9}\u{FFFA}\u{FFFB}e", 10, "abcde");
        check("x\u{2028}y\u{85}z", 10, "x y z");
        // Other default-ignorables: the combining grapheme joiner, a variation selector, a Hangul
        // filler.
        check("a\u{034F}b\u{FE0F}c\u{3164}d", 10, "abcd");
    }

    /// The general category Cf code points and the other default-ignorable code points of
    /// Unicode 15.1/16.0, listed independently of `INVISIBLE_RANGES`: every one of them is dropped,
    /// and its neighbours outside the list are kept.
    const CF: &[(u32, u32)] = &[
        (0x00AD, 0x00AD),
        (0x034F, 0x034F),
        (0x0600, 0x0605),
        (0x061C, 0x061C),
        (0x06DD, 0x06DD),
        (0x070F, 0x070F),
        (0x0890, 0x0891),
        (0x08E2, 0x08E2),
        (0x115F, 0x1160),
        (0x17B4, 0x17B5),
        (0x180B, 0x180F),
        (0x200B, 0x200F),
        (0x202A, 0x202E),
        (0x2060, 0x206F),
        (0x3164, 0x3164),
        (0xFE00, 0xFE0F),
        (0xFEFF, 0xFEFF),
        (0xFFA0, 0xFFA0),
        (0xFFF0, 0xFFFB),
        (0x110BD, 0x110BD),
        (0x110CD, 0x110CD),
        (0x13430, 0x1343F),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        (0xE0000, 0xE0FFF),
    ];

    #[test]
    fn every_format_character_is_dropped() {
        let in_cf = |c: u32| CF.iter().any(|&(lo, hi)| (lo..=hi).contains(&c));
        let mut dropped = 0;
        for &(lo, hi) in CF {
            for c in lo..=hi {
                let ch = char::from_u32(c).unwrap();
                assert!(is_invisible(ch), "U+{c:04X} is Cf");
                assert_eq!(SafeText::trusted(format!("a{ch}b")).as_str(), "ab", "U+{c:04X}");
                dropped += 1;
            }
        }
        assert_eq!(dropped, 4206);
        // Nothing outside the list counts as invisible (the filter is exactly the list).
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            assert_eq!(is_invisible(c), in_cf(c as u32), "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn normalized_form() {
        for (text, max) in [("a b", 3), ("abc…", 4), ("", 0)] {
            assert!(is_normalized(text, max), "{text:?}");
        }
        for (text, max) in
            [(" a", 9), ("a ", 9), ("a  b", 9), ("a\tb", 9), ("a\u{202E}b", 9), ("a\u{0}", 9), ("abcd", 3)]
        {
            assert!(!is_normalized(text, max), "{text:?}");
        }
        let nasty = "  x\u{E0041}\n\n y\u{7}\u{2067} z ".repeat(20);
        for max in [0, 1, 2, 5, 50, 500] {
            let once = normalize(&nasty, max);
            assert!(is_normalized(&once, max), "{once:?}");
            assert_eq!(normalize(&once, max), once);
        }
    }
}
