//! Comparing principals by what a person sees, not by bytes.
//!
//! A rule such as "the requester may not approve their own request" compares two names. Compared
//! byte for byte, `"alice "`, `"Alice"`, `"al\u{200b}ice"`, `"alice\u{301}"` or `"аlice"` (with a
//! Cyrillic `а`) are all someone else, and the requester approves their own request under a name
//! that merely looks different. [`skeleton`] maps a name to a form in which such variants are
//! equal; [`same_principal`] compares two names by it.
//!
//! The skeleton is: compatibility decomposition (NFKD), with combining marks and invisible
//! (default-ignorable) characters removed, whitespace removed, lowercased, and letters of the
//! Cyrillic and Greek scripts that look like Latin letters (and the digit `0`) mapped to them,
//! with `i`, `l`, `1` and `|` folded into one. It is a guard against
//! look-alikes of the common kinds, not a full confusable check (Unicode TS #39): where the
//! identity provider gives stable ids, use those as subjects.

use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

/// The form in which two names a person would read as the same are equal.
///
/// ```
/// use agent_surface_policy::principal::{same_principal, skeleton};
/// assert_eq!(skeleton(" Alice "), "allce");
/// assert!(same_principal("alice", "ALICE"));
/// assert!(same_principal("alice", "al\u{200b}ice")); // a zero-width space
/// assert!(same_principal("alice", "ali\u{301}ce")); // a combining acute accent
/// assert!(same_principal("alice", "\u{430}lice")); // a Cyrillic а
/// assert!(same_principal("alice", "ａｌｉｃｅ")); // full-width letters
/// assert!(same_principal("alice", "aIice")); // a capital I for the l
/// assert!(!same_principal("alice", "alicia"));
/// ```
pub fn skeleton(name: &str) -> String {
    name.nfkd()
        .filter(|c| !is_combining_mark(*c) && !is_invisible(*c) && !c.is_whitespace())
        .flat_map(char::to_lowercase)
        .map(latin_look_alike)
        .collect()
}

/// Whether `a` and `b` name the same principal as a person reads them (see [`skeleton`]).
pub fn same_principal(a: &str, b: &str) -> bool {
    a == b || skeleton(a) == skeleton(b)
}

/// Characters that render as nothing: the format and default-ignorable code points of the
/// project's one list ([`agent_surface_core::is_invisible`], which `SafeText` also drops), and
/// control characters.
fn is_invisible(c: char) -> bool {
    agent_surface_core::is_invisible(c) || c.is_control()
}

/// The Latin letter a lowercase Cyrillic or Greek letter is read as, or the letter itself.
fn latin_look_alike(c: char) -> char {
    match c {
        'а' | 'α' => 'a',
        'в' | 'β' => 'b',
        'с' | 'ϲ' => 'c',
        'ԁ' => 'd',
        'е' | 'ё' | 'ε' => 'e',
        'һ' => 'h',
        // `l`, `i`, `1` and `|` pass for one another in many fonts (`I` lowercases to `i`): they
        // share one form. This makes the rule refuse more, never less.
        'і' | 'ї' | 'ι' | 'ı' | 'i' | 'l' | '1' | '|' | 'ӏ' | 'ǀ' => 'l',
        'ј' | 'ϳ' => 'j',
        'к' | 'κ' => 'k',
        'м' => 'm',
        'п' | 'η' => 'n',
        'о' | 'ο' | 'σ' => 'o',
        'р' | 'ρ' => 'p',
        'ԛ' => 'q',
        'ѕ' => 's',
        'т' | 'τ' => 't',
        'υ' => 'u',
        'ν' => 'v',
        'ԝ' | 'ω' => 'w',
        'х' | 'χ' => 'x',
        'у' | 'γ' => 'y',
        'ʐ' => 'z',
        '0' => 'o',
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every character the project's one list calls invisible is ignored when two names are
    /// compared: a name with one inside reads as the name without it.
    #[test]
    fn every_invisible_character_of_the_shared_list_is_ignored() {
        let mut checked = 0;
        for c in (0..=0x10FFFF_u32).filter_map(char::from_u32).filter(|&c| agent_surface_core::is_invisible(c)) {
            let name = format!("ali{c}ce");
            assert_eq!(skeleton(&name), "allce", "U+{:04X} changed the name", u32::from(c));
            assert!(same_principal("alice", &name), "U+{:04X}", u32::from(c));
            checked += 1;
        }
        assert!(checked > 4_000, "the list covers the U+E0000 block and more ({checked})");
    }

    /// Characters the principal comparison once missed (it kept its own, shorter list): Arabic
    /// number signs, the interlinear annotation marks and Egyptian hieroglyph format controls. With
    /// them a requester could approve their own request under a name that merely looks different.
    #[test]
    fn format_characters_once_missed_make_no_other_principal() {
        for c in ['\u{0600}', '\u{06DD}', '\u{070F}', '\u{0890}', '\u{08E2}', '\u{FFF9}', '\u{110BD}', '\u{13430}'] {
            assert!(same_principal("alice", &format!("al{c}ice")), "U+{:04X}", u32::from(c));
        }
    }

    #[test]
    fn control_characters_are_ignored_and_visible_ones_are_not() {
        assert!(same_principal("alice", "ali\u{7}ce"));
        assert!(!same_principal("alice", "alixce"));
        assert!(!same_principal("alice", "bob"));
    }
}
