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

/// Characters that render as nothing: format controls and the default-ignorable code points.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}'
        | '\u{FFF0}'..='\u{FFF8}' | '\u{1BCA0}'..='\u{1BCA3}' | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0000}'..='\u{E0FFF}')
        || c.is_control()
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
