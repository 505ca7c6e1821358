//! The id grammar and the mapping between capability names and tool names.
//!
//! A capability is addressed by its **capability name** `{type}.{capability}` (used in invoke
//! requests and snapshots) and, towards providers and MCP, by its **tool name**
//! `{type}-{capability}`. Type and capability ids match `^[a-z][a-z0-9_]*$`, contain no `__` and
//! do not end with `_`; a type id has at most [`MAX_TYPE_ID`] characters and a capability id at
//! most [`MAX_CAPABILITY_ID`], so a tool name has at most 64 characters. That single grammar fits
//! every consumer at once:
//!
//! | consumer | tool name rule |
//! |---|---|
//! | MCP | 1–128 characters of `[A-Za-z0-9_.-]` |
//! | OpenAI, Anthropic | `^[a-zA-Z0-9_-]{1,64}$` |
//! | Gemini | starts with a letter or `_`; `[a-zA-Z0-9_.:-]`; at most 64 characters |
//!
//! Ids contain neither `.` nor `-`, so both names split at exactly one place and the mapping is
//! reversible.
//!
//! An instance id (`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`) names a live instance of a type; it is
//! never part of a tool name.
//!
//! ```
//! use agent_surface_registry::id;
//!
//! let name = id::capability_name("orders", "cancel");
//! assert_eq!(name, "orders.cancel");
//! assert_eq!(id::tool_name(&name).as_deref(), Some("orders-cancel"));
//! assert_eq!(id::capability_from_tool_name("orders-cancel").as_deref(), Some("orders.cancel"));
//! assert_eq!(id::split_capability_name("orders.cancel"), Some(("orders", "cancel")));
//! ```

use agent_surface_core::{DefinitionError, DefinitionErrorCode};

/// The longest type id, in characters.
pub const MAX_TYPE_ID: usize = 24;

/// The longest capability id, in characters (`MAX_TYPE_ID + 1 + MAX_CAPABILITY_ID == 64`).
pub const MAX_CAPABILITY_ID: usize = 39;

/// The longest instance id, in characters.
pub const MAX_INSTANCE_ID: usize = 128;

/// Ids longer than this are shortened when they are quoted in a [`DefinitionError`] location.
const SHOWN_ID_CHARS: usize = 160;

/// Checks a type id against the id grammar.
///
/// On failure the error's code is `INVALID_ID`, its location is the id and its problem names the
/// rule that is broken.
///
/// ```
/// use agent_surface_core::DefinitionErrorCode;
/// use agent_surface_registry::id::check_type_id;
///
/// assert!(check_type_id("orders").is_ok());
/// let err = check_type_id("Orders").unwrap_err();
/// assert_eq!(err.code(), DefinitionErrorCode::InvalidId);
/// assert_eq!(err.location(), "Orders");
/// assert_eq!(err.problem(), "a type id must start with a lowercase ASCII letter");
/// ```
pub fn check_type_id(id: &str) -> Result<(), DefinitionError> {
    match id_problem(id, MAX_TYPE_ID) {
        None => Ok(()),
        Some(problem) => Err(invalid_id(shown(id), format!("a type id {problem}"))),
    }
}

/// Checks a capability id of type `type_id` against the id grammar.
///
/// On failure the error's code is `INVALID_ID` and its location is `{type_id}.{id}`.
///
/// ```
/// use agent_surface_registry::id::check_capability_id;
///
/// assert!(check_capability_id("orders", "cancel").is_ok());
/// let err = check_capability_id("orders", "cancel_").unwrap_err();
/// assert_eq!(err.location(), "orders.cancel_");
/// assert_eq!(err.problem(), "a capability id must not end with `_`");
/// ```
pub fn check_capability_id(type_id: &str, id: &str) -> Result<(), DefinitionError> {
    match id_problem(id, MAX_CAPABILITY_ID) {
        None => Ok(()),
        Some(problem) => {
            Err(invalid_id(format!("{}.{}", shown(type_id), shown(id)), format!("a capability id {problem}")))
        }
    }
}

/// Checks an instance id of type `type_id`: `^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`.
///
/// On failure the error's code is `INVALID_ID` and its location is `{type_id}/{id}`.
///
/// ```
/// use agent_surface_registry::id::check_instance_id;
///
/// assert!(check_instance_id("orders", "eu-west:42").is_ok());
/// let err = check_instance_id("orders", "_42").unwrap_err();
/// assert_eq!(err.location(), "orders/_42");
/// assert_eq!(err.problem(), "an instance id must start with an ASCII letter or digit");
/// ```
pub fn check_instance_id(type_id: &str, id: &str) -> Result<(), DefinitionError> {
    let problem = if id.is_empty() {
        Some("is empty".to_owned())
    } else if id.chars().count() > MAX_INSTANCE_ID {
        Some(format!("is longer than {MAX_INSTANCE_ID} characters"))
    } else if !id.as_bytes()[0].is_ascii_alphanumeric() {
        Some("must start with an ASCII letter or digit".to_owned())
    } else if !id.bytes().all(is_instance_byte) {
        Some("may contain only ASCII letters, digits, `_`, `.`, `:` and `-`".to_owned())
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(problem) => {
            Err(invalid_id(format!("{}/{}", shown(type_id), shown(id)), format!("an instance id {problem}")))
        }
    }
}

/// The canonical capability name `{type_id}.{capability_id}`, used in invoke requests.
///
/// The ids are not checked; pass ids that passed [`check_type_id`] and [`check_capability_id`].
///
/// ```
/// assert_eq!(agent_surface_registry::id::capability_name("orders", "cancel"), "orders.cancel");
/// ```
pub fn capability_name(type_id: &str, capability_id: &str) -> String {
    joined(type_id, '.', capability_id)
}

/// `a`, `separator`, `b` in one string of the right size (each call of the MCP adapter names its
/// capability this way, and `format!` cost several times as much).
fn joined(a: &str, separator: char, b: &str) -> String {
    let mut s = String::with_capacity(a.len() + separator.len_utf8() + b.len());
    s.push_str(a);
    s.push(separator);
    s.push_str(b);
    s
}

/// The tool name for a capability name: `orders.cancel` becomes `orders-cancel`.
///
/// `None` if `capability_name` is not a valid capability name.
///
/// ```
/// use agent_surface_registry::id::tool_name;
///
/// assert_eq!(tool_name("orders.cancel").as_deref(), Some("orders-cancel"));
/// assert_eq!(tool_name("orders.bulk_cancel").as_deref(), Some("orders-bulk_cancel"));
/// assert_eq!(tool_name("orders-cancel"), None);
/// assert_eq!(tool_name("orders.Cancel"), None);
/// ```
pub fn tool_name(capability_name: &str) -> Option<String> {
    let (type_id, capability_id) = split_capability_name(capability_name)?;
    Some(joined(type_id, '-', capability_id))
}

/// The capability name for a tool name, the inverse of [`tool_name`]: `orders-cancel` becomes
/// `orders.cancel`.
///
/// `None` if `tool_name` is not a valid tool name.
///
/// ```
/// use agent_surface_registry::id::{capability_from_tool_name, tool_name};
///
/// assert_eq!(capability_from_tool_name("orders-cancel").as_deref(), Some("orders.cancel"));
/// assert_eq!(capability_from_tool_name("orders.cancel"), None);
/// assert_eq!(capability_from_tool_name("orders-cancel-now"), None);
///
/// let name = "billing.refund_order";
/// assert_eq!(capability_from_tool_name(&tool_name(name).unwrap()).as_deref(), Some(name));
/// ```
pub fn capability_from_tool_name(tool_name: &str) -> Option<String> {
    let (type_id, capability_id) = split_valid(tool_name, '-')?;
    Some(capability_name(type_id, capability_id))
}

/// Splits a valid capability name into its type id and capability id.
///
/// `None` if `name` is not a valid capability name.
///
/// ```
/// use agent_surface_registry::id::split_capability_name;
///
/// assert_eq!(split_capability_name("orders.cancel"), Some(("orders", "cancel")));
/// assert_eq!(split_capability_name("orders.cancel.now"), None);
/// assert_eq!(split_capability_name("orders"), None);
/// ```
pub fn split_capability_name(name: &str) -> Option<(&str, &str)> {
    split_valid(name, '.')
}

/// Where each spelling of one capability's name is used, as a Markdown table: the capability
/// name is the one canonical spelling, and every other is derived from it by a function of this
/// module. `docs/names.md` shows this table for `tickets` / `create`; a test renders it from
/// this function and fails when the page differs.
///
/// Panics never; ids that break the grammar are shown as they are (with `-` for a tool name
/// that cannot be derived).
///
/// ```
/// let table = agent_surface_registry::id::names_table("tickets", "create");
/// assert!(table.contains("| `tickets.create` |"));
/// assert!(table.contains("| `tickets-create` |"));
/// ```
pub fn names_table(type_id: &str, capability_id: &str) -> String {
    let name = capability_name(type_id, capability_id);
    let tool = tool_name(&name).map_or_else(|| "-".to_owned(), |t| format!("`{t}`"));
    let name = format!("`{name}`");
    let rows: [(&str, String, &str); 8] = [
        (
            "the definition: `registry.define(TYPE, ..)`, `t.capability(ID, ..)`",
            format!("`{type_id}`, `{capability_id}`"),
            "the type id and the capability id (`check_type_id`, `check_capability_id`)",
        ),
        (
            "**the capability name**: invoke requests (`InvokeRequest::new`), snapshots (`name`), the HTTP binding's `POST /invoke` body (`capability`), the operator log",
            name.clone(),
            "`id::capability_name(type, id)`: the one canonical spelling",
        ),
        ("authority policies: `Policies::for_capability`", name.clone(), "the capability name"),
        (
            "rate budgets: `capability_quotas`, `consumer_quotas` (`Scope::capability`)",
            name.clone(),
            "the capability name",
        ),
        ("confirmation rules: `FnConfirmationPolicy::for_capability`", name.clone(), "the capability name"),
        ("MCP: `tools/list`, `tools/call` (`name`)", tool.clone(), "`id::tool_name(capability name)`"),
        ("MCP: a tool's `_meta` `agent-surface/capability`", name, "the capability name"),
        (
            "embedded toolset: OpenAI, Anthropic and Gemini tool definitions and calls",
            tool,
            "`id::tool_name(capability name)`",
        ),
    ];
    let mut table = String::from("| where | spelling | derived by |\n|---|---|---|\n");
    for (place, spelling, how) in rows {
        table.push_str(&format!("| {place} | {spelling} | {how} |\n"));
    }
    table
}

/// The candidate closest to `name` by edit distance (insertions, deletions, substitutions and
/// transpositions of adjacent characters, each counting one), the first in order on a tie;
/// `None` without candidates. For "did you mean" hints in definition errors.
pub(crate) fn closest<'c>(name: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    let mut best: Option<(usize, &'c str)> = None;
    for candidate in candidates {
        let d = edit_distance(name, candidate);
        if best.is_none_or(|(bd, bc)| d < bd || (d == bd && candidate < bc)) {
            best = Some((d, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// The optimal string alignment distance between `a` and `b`, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // Three rows of the dynamic-programming table: two back (for transpositions), one back, this one.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut last: Vec<usize> = (0..=b.len()).collect();
    let mut row: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        row[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (last[j] + 1).min(row[j - 1] + 1).min(last[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            row[j] = d;
        }
        std::mem::swap(&mut before, &mut last);
        std::mem::swap(&mut last, &mut row);
    }
    last[b.len()]
}

/// Splits `name` at its only `separator` into a valid type id and a valid capability id.
fn split_valid(name: &str, separator: char) -> Option<(&str, &str)> {
    // Neither id contains `.` or `-`, so the first separator is the only valid split.
    let (type_id, capability_id) = name.split_once(separator)?;
    let valid = id_problem(type_id, MAX_TYPE_ID).is_none() && id_problem(capability_id, MAX_CAPABILITY_ID).is_none();
    valid.then_some((type_id, capability_id))
}

/// The first rule of the type/capability id grammar that `id` breaks, if any.
fn id_problem(id: &str, max: usize) -> Option<String> {
    if id.is_empty() {
        Some("is empty".to_owned())
    } else if id.chars().count() > max {
        Some(format!("is longer than {max} characters"))
    } else if !id.as_bytes()[0].is_ascii_lowercase() {
        Some("must start with a lowercase ASCII letter".to_owned())
    } else if !id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
        Some("may contain only lowercase ASCII letters, digits and `_`".to_owned())
    } else if id.contains("__") {
        Some("must not contain `__`".to_owned())
    } else if id.ends_with('_') {
        Some("must not end with `_`".to_owned())
    } else {
        None
    }
}

/// Whether `b` may appear in an instance id.
fn is_instance_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-')
}

/// An `INVALID_ID` error.
fn invalid_id(location: String, problem: String) -> DefinitionError {
    DefinitionError::new(DefinitionErrorCode::InvalidId, location, problem)
}

/// `id` as quoted in a location: shortened if it is very long.
fn shown(id: &str) -> String {
    match id.char_indices().nth(SHOWN_ID_CHARS) {
        None => id.to_owned(),
        Some((end, _)) => format!("{}…", &id[..end]),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Checks `check_type_id` and `check_capability_id` on `input`: `expected` is `"ok"` or the
    /// problem without the "a type id" / "a capability id" prefix.
    #[track_caller]
    fn check(input: &str, expected: &str) {
        let as_type = check_type_id(input);
        let as_capability = check_capability_id("orders", input);
        match (as_type, as_capability) {
            (Ok(()), Ok(())) => assert_eq!(expected, "ok", "{input:?} was accepted"),
            (Err(t), Err(c)) => {
                assert_eq!(t.code(), DefinitionErrorCode::InvalidId);
                assert_eq!(c.code(), DefinitionErrorCode::InvalidId);
                assert_eq!(t.problem(), format!("a type id {expected}"), "for {input:?}");
                assert_eq!(c.problem(), format!("a capability id {expected}"), "for {input:?}");
                assert_eq!(t.location(), input);
                assert_eq!(c.location(), format!("orders.{input}"));
            }
            (t, c) => panic!("{input:?}: type id {t:?}, capability id {c:?}"),
        }
    }

    #[test]
    fn closest_names_the_nearest_candidate() {
        #[track_caller]
        fn check(name: &str, candidates: &[&str], expected: Option<&str>) {
            assert_eq!(closest(name, candidates.iter().copied()), expected, "closest to {name:?}");
        }
        let names = ["tickets.create", "tickets.list", "orders.cancel"];
        check("ticket.create", &names, Some("tickets.create"));
        check("tickets-create", &names, Some("tickets.create"));
        check("tickets.craete", &names, Some("tickets.create"));
        check("orders.cancle", &names, Some("orders.cancel"));
        check("tickets.lsit", &names, Some("tickets.list"));
        check("anything", &[], None);
        // Ties go to the first in order, whatever the candidates' order.
        check("ab", &["ac", "aa"], Some("aa"));
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("ca", "ac"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn id_grammar() {
        check("orders", "ok");
        check("a", "ok");
        check("order_items", "ok");
        check("v2", "ok");
        check("a1_b2_c3", "ok");
        check(&"a".repeat(24), "ok");

        check("", "is empty");
        check("Orders", "must start with a lowercase ASCII letter");
        check("1orders", "must start with a lowercase ASCII letter");
        check("_orders", "must start with a lowercase ASCII letter");
        check("orders.cancel", "may contain only lowercase ASCII letters, digits and `_`");
        check("orders-cancel", "may contain only lowercase ASCII letters, digits and `_`");
        check("ordErs", "may contain only lowercase ASCII letters, digits and `_`");
        check("ordérs", "may contain only lowercase ASCII letters, digits and `_`");
        check("order items", "may contain only lowercase ASCII letters, digits and `_`");
        check("order__items", "must not contain `__`");
        check("orders_", "must not end with `_`");
    }

    #[test]
    fn length_limits() {
        let max_type = "a".repeat(MAX_TYPE_ID);
        let max_capability = "b".repeat(MAX_CAPABILITY_ID);
        assert!(check_type_id(&max_type).is_ok());
        assert!(check_capability_id(&max_type, &max_capability).is_ok());
        assert_eq!(
            check_type_id(&"a".repeat(MAX_TYPE_ID + 1)).unwrap_err().problem(),
            "a type id is longer than 24 characters"
        );
        assert_eq!(
            check_capability_id("t", &"b".repeat(MAX_CAPABILITY_ID + 1)).unwrap_err().problem(),
            "a capability id is longer than 39 characters"
        );
        let tool = tool_name(&capability_name(&max_type, &max_capability)).unwrap();
        assert_eq!(tool.len(), 64);
        // Characters, not bytes: 24 non-ASCII characters are reported as a charset problem.
        assert_eq!(
            check_type_id(&"é".repeat(20)).unwrap_err().problem(),
            "a type id must start with a lowercase ASCII letter"
        );
    }

    #[test]
    fn long_ids_are_shortened_in_locations() {
        let long = "x".repeat(10_000);
        let err = check_type_id(&long).unwrap_err();
        assert!(err.location().chars().count() <= SHOWN_ID_CHARS + 1);
        assert!(err.location().ends_with('…'));
    }

    /// Checks `check_instance_id` on `input`: `expected` is `"ok"` or the problem.
    #[track_caller]
    fn check_instance(input: &str, expected: &str) {
        match check_instance_id("orders", input) {
            Ok(()) => assert_eq!(expected, "ok", "{input:?} was accepted"),
            Err(e) => {
                assert_eq!(e.code(), DefinitionErrorCode::InvalidId);
                assert_eq!(e.location(), format!("orders/{input}"));
                assert_eq!(e.problem(), format!("an instance id {expected}"), "for {input:?}");
            }
        }
    }

    #[test]
    fn instance_ids() {
        check_instance("42", "ok");
        check_instance("Order-42", "ok");
        check_instance("eu-west:orders.v2_1", "ok");
        check_instance(&"i".repeat(MAX_INSTANCE_ID), "ok");

        check_instance("", "is empty");
        check_instance(&"i".repeat(MAX_INSTANCE_ID + 1), "is longer than 128 characters");
        check_instance("-42", "must start with an ASCII letter or digit");
        check_instance(":42", "must start with an ASCII letter or digit");
        check_instance("order 42", "may contain only ASCII letters, digits, `_`, `.`, `:` and `-`");
        check_instance("order/42", "may contain only ASCII letters, digits, `_`, `.`, `:` and `-`");
        check_instance("ordér", "may contain only ASCII letters, digits, `_`, `.`, `:` and `-`");
    }

    #[test]
    fn mapping_rejects_invalid_names() {
        for name in ["", ".", "orders.", ".cancel", "orders", "orders.cancel.now", "Orders.cancel", "orders.can-cel"] {
            assert_eq!(tool_name(name), None, "{name:?}");
            assert_eq!(split_capability_name(name), None, "{name:?}");
        }
        for tool in ["", "-", "orders-", "-cancel", "orders", "orders-cancel-now", "orders_cancel", "orders.cancel"] {
            assert_eq!(capability_from_tool_name(tool), None, "{tool:?}");
        }
        let too_long_type = format!("{}.cancel", "a".repeat(MAX_TYPE_ID + 1));
        assert_eq!(tool_name(&too_long_type), None);
    }

    /// MCP: 1–128 characters of `[A-Za-z0-9_.-]`.
    fn mcp_accepts(name: &str) -> bool {
        (1..=128).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    }

    /// OpenAI and Anthropic: `^[a-zA-Z0-9_-]{1,64}$`.
    fn openai_anthropic_accept(name: &str) -> bool {
        (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b))
    }

    /// Gemini: starts with a letter or `_`; `[a-zA-Z0-9_.:-]`; at most 64 characters.
    fn gemini_accepts(name: &str) -> bool {
        let first_ok = name.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
        first_ok && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b))
    }

    /// The reference predicate for the type/capability id grammar.
    fn reference_valid(id: &str, max: usize) -> bool {
        let b = id.as_bytes();
        !b.is_empty()
            && b.len() <= max
            && b[0].is_ascii_lowercase()
            && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
            && !id.contains("__")
            && !id.ends_with('_')
    }

    /// Valid type/capability ids of at most `max` characters.
    fn valid_id(max: usize) -> impl Strategy<Value = String> {
        let pattern = format!("[a-z]([a-z0-9]|_[a-z0-9]){{0,{}}}", max - 1);
        proptest::string::string_regex(&pattern)
            .expect("valid regex")
            .prop_map(move |s| s.chars().take(max).collect::<String>().trim_end_matches('_').to_owned())
    }

    proptest! {
        #[test]
        fn tool_names_fit_every_provider_and_map_back(
            type_id in valid_id(MAX_TYPE_ID),
            capability_id in valid_id(MAX_CAPABILITY_ID),
        ) {
            prop_assert!(check_type_id(&type_id).is_ok(), "{type_id:?}");
            prop_assert!(check_capability_id(&type_id, &capability_id).is_ok(), "{capability_id:?}");
            let name = capability_name(&type_id, &capability_id);
            let tool = tool_name(&name).expect("valid capability name");
            prop_assert!(mcp_accepts(&tool), "MCP rejects {tool:?}");
            prop_assert!(openai_anthropic_accept(&tool), "OpenAI/Anthropic reject {tool:?}");
            prop_assert!(gemini_accepts(&tool), "Gemini rejects {tool:?}");
            prop_assert_eq!(capability_from_tool_name(&tool), Some(name.clone()));
            prop_assert_eq!(split_capability_name(&name), Some((type_id.as_str(), capability_id.as_str())));
        }

        #[test]
        fn grammar_matches_the_reference(id in "[a-z0-9_A-Z.é-]{0,42}") {
            prop_assert_eq!(check_type_id(&id).is_ok(), reference_valid(&id, MAX_TYPE_ID), "{:?}", id);
            prop_assert_eq!(check_capability_id("t", &id).is_ok(), reference_valid(&id, MAX_CAPABILITY_ID), "{:?}", id);
        }

        #[test]
        fn mapping_only_accepts_valid_names(name in "[a-z0-9_.-]{0,70}") {
            match tool_name(&name) {
                Some(tool) => {
                    prop_assert!(openai_anthropic_accept(&tool) && gemini_accepts(&tool) && mcp_accepts(&tool));
                    prop_assert_eq!(capability_from_tool_name(&tool), Some(name.clone()));
                }
                None => prop_assert!(split_capability_name(&name).is_none()),
            }
            if let Some(capability) = capability_from_tool_name(&name) {
                prop_assert_eq!(tool_name(&capability), Some(name.clone()));
            }
        }
    }
}
