//! JSON Schema, owned in one place: the portable subset a capability's schemas must keep, the one
//! `$ref` resolver, the one JSON Pointer escape, the one subschema walk and the one compiler of
//! validators.
//!
//! # Overview
//!
//! Every part of agent-surface that reads a capability's schemas goes through this module, so that
//! they cannot disagree about what a schema means:
//!
//! - [`PortableSchema`] is what a capability's input or output schema is once registration
//!   checked it: in the portable subset (below), within [`SchemaLimits`], every `$ref` resolving.
//! - [`resolve_ref`] resolves a local `$ref` (a URI fragment: percent-decoded per RFC 3986, then
//!   a JSON Pointer per RFC 6901, looked up with [`Value::pointer`]); [`escape_pointer_segment`] and
//!   [`push_pointer_segment`] write JSON Pointers.
//! - [`visit_subschemas`] walks every subschema of a document with its JSON Pointer and depth;
//!   the walk is `schemars`' own ([`schemars::transform::transform_subschemas`]), so no keyword
//!   list of where subschemas live is kept here. Rewrites (closing objects, the provider dialects
//!   of the toolset) are [`schemars::transform::Transform`]s over the same walk.
//! - The registry compiles input, bound-input and output validators with one set of `jsonschema`
//!   options: formats asserted (unknown formats ignored), nothing fetched.
//!
//! # The portable subset
//!
//! A capability's schemas must be accepted by every consumer at once: MCP clients and the OpenAI,
//! Anthropic and Gemini tool APIs. The subset is what `schemars` emits for ordinary Rust types
//! (draft 2020-12) minus everything some consumer rejects or ignores:
//!
//! - at the root only: `$schema` (draft 2020-12, 2019-09 or 07), `$id`, `$defs`, `definitions`;
//! - `$ref` to `#` or to `#/$defs/Name` / `#/definitions/Name`, which must exist (recursive types
//!   are fine; the name may be percent-encoded and `~0`/`~1`-escaped);
//! - structure: `type`, `properties`, `required`, `additionalProperties`, `items` (a single
//!   schema), `enum`, `const`, `anyOf`, `oneOf`;
//! - limits: `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`,
//!   `minLength`, `maxLength`, `pattern`, `format`, `minItems`, `maxItems`, `uniqueItems`,
//!   `minProperties`, `maxProperties`;
//! - annotations: `title`, `description`, `default`, `examples`, `nullable`, `readOnly`,
//!   `writeOnly`, `deprecated`, and vendor extensions `x-…`.
//!
//! Anything else (`allOf`, `not`, `if`/`then`/`else`, `patternProperties`, `prefixItems`,
//! `unevaluated*`, `$dynamicRef`, a remote `$ref`, …) is `UNSUPPORTED_SCHEMA`, naming the keyword
//! and its JSON Pointer, as are schemas nested deeper than [`SchemaLimits::max_depth`] (counted
//! without following `$ref`; each definition is counted from the root) or larger than
//! [`SchemaLimits::max_bytes`]. Gemini's own restrictions (`anyOf`, `$ref`) are handled later by
//! the toolset adapter.
//!
//! # Examples
//!
//! ```
//! use agent_surface_registry::schema::{PortableSchema, SchemaLimits, escape_pointer_segment, resolve_ref};
//! use serde_json::json;
//!
//! let schema = json!({
//!     "type": "object",
//!     "properties": {"when": {"$ref": "#/$defs/Date%20time~1zone"}},
//!     "$defs": {"Date time/zone": {"type": "string", "format": "date-time"}}
//! });
//! let checked = PortableSchema::check("clock.set", &schema, SchemaLimits::default()).unwrap();
//! let target = resolve_ref(checked.as_value(), "#/$defs/Date%20time~1zone").unwrap();
//! assert_eq!(target["type"], "string");
//! assert_eq!(escape_pointer_segment("Date time/zone"), "Date time~1zone");
//!
//! let remote = json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}});
//! let err = PortableSchema::check("clock.set", &remote, SchemaLimits::default()).unwrap_err();
//! assert!(err.problem().contains("remote and other references"));
//! ```

use std::borrow::Cow;

use agent_surface_core::{DefinitionError, DefinitionErrorCode};
use schemars::Schema;
use schemars::transform::{RecursiveTransform, Transform, transform_subschemas};
use serde_json::{Map, Value};

use crate::measure::{Exceeded, measure};
use agent_surface_core::details::TARGET_ARGUMENT;

/// The deepest raw JSON nesting of a schema document (`serde_json`'s own parse limit), which
/// bounds the recursion of everything that later walks the document (`default`, `const`, … are
/// not subschemas and are not counted by [`SchemaLimits::max_depth`]).
const MAX_DOCUMENT_DEPTH: usize = 128;

/// The dialects a schema may declare with `$schema`.
const DIALECTS: [&str; 3] = [
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema",
];

/// The JSON types `type` may name.
const JSON_TYPES: [&str; 7] = ["null", "boolean", "object", "array", "number", "string", "integer"];

// ---- JSON Pointer and `$ref` -------------------------------------------------------------------

/// Escapes one JSON Pointer reference token (RFC 6901): `~` → `~0`, `/` → `~1`.
///
/// ```
/// use agent_surface_registry::schema::escape_pointer_segment;
/// assert_eq!(escape_pointer_segment("a/b~c"), "a~1b~0c");
/// assert_eq!(escape_pointer_segment("plain"), "plain");
/// ```
pub fn escape_pointer_segment(segment: &str) -> Cow<'_, str> {
    if segment.contains(['~', '/']) {
        Cow::Owned(segment.replace('~', "~0").replace('/', "~1"))
    } else {
        Cow::Borrowed(segment)
    }
}

/// Appends `/segment` to a JSON Pointer, the segment escaped by [`escape_pointer_segment`].
///
/// ```
/// use agent_surface_registry::schema::push_pointer_segment;
/// let mut pointer = String::from("/properties");
/// push_pointer_segment(&mut pointer, "a/b");
/// assert_eq!(pointer, "/properties/a~1b");
/// ```
pub fn push_pointer_segment(pointer: &mut String, segment: &str) {
    pointer.push('/');
    pointer.push_str(&escape_pointer_segment(segment));
}

/// The JSON Pointer a local `$ref` names: `""` for `#`, else the fragment after `#`,
/// percent-decoded (RFC 3986) and still `~`-escaped, as [`Value::pointer`] takes it.
///
/// `None` for a reference that is not a local fragment (`other.json#/…`, `https://…`), a
/// malformed percent-encoding, a fragment that is not UTF-8 once decoded, or a pointer that is
/// not RFC 6901 (not starting with `/`, or a `~` followed by anything but `0` or `1`).
///
/// ```
/// use agent_surface_registry::schema::ref_pointer;
/// assert_eq!(ref_pointer("#").as_deref(), Some(""));
/// assert_eq!(ref_pointer("#/$defs/A%20B~1C").as_deref(), Some("/$defs/A B~1C"));
/// assert_eq!(ref_pointer("#/$defs/A%2"), None);
/// assert_eq!(ref_pointer("other.json#/$defs/A"), None);
/// ```
pub fn ref_pointer(reference: &str) -> Option<Cow<'_, str>> {
    let fragment = reference.strip_prefix('#')?;
    let pointer = if fragment.contains('%') { Cow::Owned(percent_decode(fragment)?) } else { Cow::Borrowed(fragment) };
    let well_formed = (pointer.is_empty() || pointer.starts_with('/'))
        && pointer.split('~').skip(1).all(|rest| rest.starts_with(['0', '1']));
    well_formed.then_some(pointer)
}

/// Resolves a local `$ref` against the document `root`: [`ref_pointer`], then
/// [`Value::pointer`] (which undoes `~1` and `~0`). `None` if the reference is not local or
/// leads nowhere.
///
/// This is the only `$ref` resolver of agent-surface: the registry's checks, its sensitive-field
/// detection and the toolset's provider conversions all use it, and it reads references as the
/// validators (`jsonschema`) do.
///
/// ```
/// use agent_surface_registry::schema::resolve_ref;
/// use serde_json::json;
///
/// let root = json!({"$defs": {"a/b c": {"type": "string"}}, "type": "object"});
/// assert_eq!(resolve_ref(&root, "#/$defs/a~1b%20c"), Some(&json!({"type": "string"})));
/// assert_eq!(resolve_ref(&root, "#"), Some(&root));
/// assert_eq!(resolve_ref(&root, "#/$defs/missing"), None);
/// ```
pub fn resolve_ref<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    root.pointer(&ref_pointer(reference)?)
}

/// Percent-decodes `text` (RFC 3986) with the `percent-encoding` crate; `None` for a malformed
/// escape (which that crate would keep as it is) or bytes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let well_formed = bytes.iter().enumerate().filter(|(_, b)| **b == b'%').all(|(i, _)| {
        bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit) && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
    });
    if !well_formed {
        return None;
    }
    percent_encoding::percent_decode_str(text).decode_utf8().ok().map(std::borrow::Cow::into_owned)
}

// ---- The subschema walk ------------------------------------------------------------------------

/// Where [`visit_subschemas`] found a subschema.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct SubschemaAt<'a> {
    /// Its JSON Pointer in the document (`""` for the root).
    pub pointer: &'a str,
    /// How many subschemas down it is: the root is 0, `/properties/a` and `/$defs/A` are 1.
    pub depth: usize,
    /// The keyword of its parent that holds it (`properties`, `items`, `anyOf`, `$defs`, …);
    /// `""` for the root.
    pub keyword: &'a str,
}

/// Calls `visit` on `schema` and on each of its subschemas (objects and booleans), parents before
/// children, each with its [`SubschemaAt`]; stops at the first `Err`, which it returns. `$ref`
/// is not followed.
///
/// Which keywords hold subschemas is `schemars`' knowledge
/// ([`schemars::transform::transform_subschemas`]: `properties`, `$defs`, `items`, `anyOf`,
/// `allOf`, `not`, `if`, …). Values that are not schemas (a number under `properties`) are not
/// visited. The walk recurses once per level: give it documents whose nesting is bounded (every
/// [`PortableSchema`] is).
///
/// ```
/// use agent_surface_registry::schema::visit_subschemas;
/// use serde_json::json;
///
/// let schema = json!({"type": "object", "properties": {"a/b": {"type": "array", "items": true}}});
/// let mut seen = Vec::new();
/// visit_subschemas(&schema, |_, at| {
///     seen.push((at.pointer.to_owned(), at.depth, at.keyword.to_owned()));
///     Ok::<(), ()>(())
/// })
/// .unwrap();
/// assert_eq!(seen, [
///     (String::new(), 0, String::new()),
///     ("/properties/a~1b".to_owned(), 1, "properties".to_owned()),
///     ("/properties/a~1b/items".to_owned(), 2, "items".to_owned()),
/// ]);
/// ```
pub fn visit_subschemas<E>(
    schema: &Value,
    mut visit: impl FnMut(&Value, SubschemaAt<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let Ok(root) = <&Schema>::try_from(schema) else { return Ok(()) };
    let mut walk = Located { visit: &mut visit, pointer: String::new(), levels: Vec::new(), failed: None };
    // `schemars` walks `&mut Schema`; the walk changes nothing, so it runs on a copy.
    walk.transform(&mut root.clone());
    walk.failed.map_or(Ok(()), Err)
}

/// One member of a schema object, two levels deep at most: where a subschema may sit.
struct Member {
    /// The member's address, to recognise it when `schemars` hands it to the walk.
    at: *const Value,
    /// Its pointer below the parent (`/properties/a`).
    suffix: String,
    /// The parent's keyword that holds it.
    keyword: String,
}

/// The [`Transform`] behind [`visit_subschemas`]: it learns each subschema's location by finding
/// its address among its parent's members.
struct Located<'v, F, E> {
    /// The caller's visit.
    visit: &'v mut F,
    /// The pointer of the schema being visited.
    pointer: String,
    /// The members of each open ancestor, innermost last.
    levels: Vec<Vec<Member>>,
    /// The first error.
    failed: Option<E>,
}

impl<F, E> Transform for Located<'_, F, E>
where
    F: FnMut(&Value, SubschemaAt<'_>) -> Result<(), E>,
{
    fn transform(&mut self, schema: &mut Schema) {
        if self.failed.is_some() {
            return;
        }
        let mark = self.pointer.len();
        let address: *const Value = schema.as_value();
        let member = self.levels.last().and_then(|members| members.iter().find(|m| std::ptr::eq(m.at, address)));
        let keyword = match member {
            Some(member) => {
                self.pointer.push_str(&member.suffix);
                member.keyword.clone()
            }
            None => String::new(),
        };
        let at = SubschemaAt { pointer: &self.pointer, depth: self.levels.len(), keyword: &keyword };
        if let Err(e) = (self.visit)(schema.as_value(), at) {
            self.failed = Some(e);
            return;
        }
        self.levels.push(members(schema.as_value()));
        transform_subschemas(self, schema);
        self.levels.pop();
        self.pointer.truncate(mark);
    }
}

/// The members of a schema object and of its array and object members, with their pointers.
fn members(schema: &Value) -> Vec<Member> {
    let mut found = Vec::new();
    for (keyword, value) in schema.as_object().into_iter().flatten() {
        let mut suffix = String::new();
        push_pointer_segment(&mut suffix, keyword);
        let member = |suffix: String, value: &Value| Member { at: value, suffix, keyword: keyword.clone() };
        match value {
            Value::Array(items) => {
                found.extend(items.iter().enumerate().map(|(i, item)| member(format!("{suffix}/{i}"), item)));
            }
            Value::Object(map) => found.extend(map.iter().map(|(name, item)| {
                let mut suffix = suffix.clone();
                push_pointer_segment(&mut suffix, name);
                member(suffix, item)
            })),
            _ => {}
        }
        found.push(member(suffix, value));
    }
    found
}

// ---- The checked schema ------------------------------------------------------------------------

/// Bounds on a capability's schemas.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct SchemaLimits {
    /// The deepest nesting of subschemas, the root being level 0; `$ref` is not followed.
    pub max_depth: usize,
    /// The largest schema, in bytes of compact JSON.
    pub max_bytes: usize,
}

impl SchemaLimits {
    /// Limits of `max_depth` levels and `max_bytes` bytes.
    pub const fn new(max_depth: usize, max_bytes: usize) -> SchemaLimits {
        SchemaLimits { max_depth, max_bytes }
    }
}

impl Default for SchemaLimits {
    /// 16 levels and 64 KiB (the registry's [`crate::DefinitionLimits`] defaults).
    fn default() -> Self {
        SchemaLimits { max_depth: 16, max_bytes: 64 * 1024 }
    }
}

/// A JSON Schema that passed the registration checks: in the portable subset (see the
/// [module docs](self)), within its [`SchemaLimits`], every `$ref` local and resolving.
///
/// A capability's input and output schemas are `PortableSchema`s; so is what the registry
/// advertises for them (the input schema without its bound fields).
#[derive(Clone, Debug, PartialEq)]
pub struct PortableSchema(Value);

impl PortableSchema {
    /// Checks `schema` against the portable subset and `limits`; a failure is
    /// `UNSUPPORTED_SCHEMA` at `location` naming the keyword and its JSON Pointer.
    pub fn check(location: &str, schema: &Value, limits: SchemaLimits) -> Result<PortableSchema, DefinitionError> {
        check_subset(location, schema, limits)?;
        Ok(PortableSchema(schema.clone()))
    }

    /// `schema` taken as checked, for tests of what comes after the check.
    #[cfg(test)]
    pub(crate) fn assume_checked(schema: Value) -> PortableSchema {
        PortableSchema(schema)
    }

    /// The schema.
    pub fn as_value(&self) -> &Value {
        &self.0
    }

    /// The schema, owned.
    pub fn into_value(self) -> Value {
        self.0
    }

    /// Resolves a `$ref` of this schema ([`resolve_ref`] against its root).
    pub fn resolve(&self, reference: &str) -> Option<&Value> {
        resolve_ref(&self.0, reference)
    }

    /// Whether the root is an object schema (a literal `"type": "object"`), as a tool's input must
    /// be and as MCP requires of an output schema.
    pub fn is_object_schema(&self) -> bool {
        is_object_schema(&self.0)
    }
}

impl From<PortableSchema> for Value {
    fn from(schema: PortableSchema) -> Value {
        schema.0
    }
}

/// Whether `schema`'s root is an object schema: a literal `"type": "object"` (a type array, an
/// `anyOf` or a `$ref` at the root do not count). A tool's input schema must be one; MCP lists an
/// output schema only if it is one.
///
/// ```
/// use agent_surface_registry::schema::is_object_schema;
/// use serde_json::json;
/// assert!(is_object_schema(&json!({"type": "object", "properties": {}})));
/// assert!(!is_object_schema(&json!({"type": ["object", "null"]})));
/// assert!(!is_object_schema(&json!(true)));
/// ```
pub fn is_object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// An input schema that passed [`check_input_schema`].
#[derive(Clone, Debug)]
pub(crate) struct CheckedInputSchema {
    /// The full schema (what the handler receives, bound fields included), used for validation
    /// after binding.
    pub(crate) full: PortableSchema,
    /// What consumers see: `full` without the bound properties (removed from `properties` and
    /// `required`).
    pub(crate) advertised: PortableSchema,
    /// Top-level property names whose values are sensitive (never echoed): those with
    /// `writeOnly: true`, `format: "password"`, or `x-sensitive: true`, plus the author-declared
    /// ones. Sorted, without duplicates.
    pub(crate) sensitive: Vec<String>,
}

/// Checks a capability's input schema: it must be in the portable subset, within `limits`, and
/// an object schema (literal `"type": "object"` at the root). `bound` (filled by the runtime) and
/// `sensitive` (declared by the author) must name top-level properties, else
/// `INVALID_DEFINITION`.
pub(crate) fn check_input_schema(
    location: &str,
    schema: &Value,
    bound: &[String],
    sensitive: &[String],
    limits: SchemaLimits,
) -> Result<CheckedInputSchema, DefinitionError> {
    let full = PortableSchema::check(location, schema, limits)?;
    let Some(root) = schema.as_object().filter(|_| full.is_object_schema()) else {
        return Err(unsupported(
            location,
            "tool input must be a JSON object (`\"type\": \"object\"` at the root): wrap it in a struct \
             (a `String`, a `Vec`, an enum or a map becomes one named field of the struct)",
        ));
    };
    let properties = root.get("properties").and_then(Value::as_object);
    if properties.is_some_and(|p| p.contains_key(TARGET_ARGUMENT)) {
        return Err(DefinitionError::new(
            DefinitionErrorCode::InvalidDefinition,
            location,
            format!("`{TARGET_ARGUMENT}` is reserved for the call's target; rename this property"),
        ));
    }
    let is_property = |name: &String| properties.is_some_and(|p| p.contains_key(name));
    for (what, names) in [("bound", bound), ("sensitive", sensitive)] {
        if let Some(name) = names.iter().find(|name| !is_property(name)) {
            let mut problem = format!("{what} field `{name}` is not a property of the input schema");
            let known = properties.into_iter().flat_map(|p| p.keys().map(String::as_str));
            if let Some(closest) = crate::id::closest(name, known) {
                problem.push_str(&format!("; did you mean `{closest}`?"));
            }
            return Err(DefinitionError::new(DefinitionErrorCode::InvalidDefinition, location, problem));
        }
    }

    let mut sensitive_names = sensitive.to_vec();
    for (name, property) in properties.into_iter().flatten() {
        if is_marked_sensitive(schema, property) {
            sensitive_names.push(name.clone());
        }
    }
    sensitive_names.sort();
    sensitive_names.dedup();

    let mut advertised = schema.clone();
    if let Some(root) = advertised.as_object_mut() {
        remove_bound(root, bound);
    }
    // Removing top-level properties keeps a schema portable: it only shrinks.
    Ok(CheckedInputSchema { full, advertised: PortableSchema(advertised), sensitive: sensitive_names })
}

/// The most instance ids listed in the reserved target argument's `enum`; with more, it is a
/// plain string, and the ids are in `AMBIGUOUS_INSTANCE`'s details.
pub const MAX_TARGET_ENUM: usize = 64;

/// The most characters of instance descriptions in the target argument's description.
const MAX_TARGET_DESCRIPTION_CHARS: usize = 600;

/// `schema` (an advertised input schema: an object schema) with the optional reserved
/// [`TARGET_ARGUMENT`]: a string, one of `instances` (`(instance id, description)`, in
/// instance-id order), described for the model. Discovery adds it when several instances visible
/// to the consumer can handle a capability.
pub(crate) fn with_target_argument(schema: &Value, instances: &[(&str, Option<&str>)]) -> Value {
    let mut out = schema.clone();
    let Some(root) = out.as_object_mut() else { return out };
    let mut description = String::from(
        "The instance to run this call on: several can handle it, so name one of the listed instance ids.",
    );
    let mut listed = Vec::new();
    for (id, about) in instances {
        if let Some(about) = about {
            listed.push(format!("{id}: {about}"));
        }
    }
    if !listed.is_empty() {
        description.push_str(" Instances: ");
        let all = listed.join("; ");
        description.extend(all.chars().take(MAX_TARGET_DESCRIPTION_CHARS));
        if all.chars().count() > MAX_TARGET_DESCRIPTION_CHARS {
            description.push('…');
        }
    }
    let mut argument = Map::new();
    argument.insert("type".into(), Value::String("string".into()));
    if instances.len() <= MAX_TARGET_ENUM {
        argument.insert("enum".into(), instances.iter().map(|(id, _)| Value::String((*id).to_string())).collect());
    }
    argument.insert("description".into(), Value::String(description));
    let properties = root.entry("properties").or_insert_with(|| Value::Object(Map::new()));
    if let Some(properties) = properties.as_object_mut() {
        properties.insert(TARGET_ARGUMENT.to_string(), Value::Object(argument));
    }
    out
}

/// Checks a capability's output schema: any schema of the portable subset within `limits` (the
/// root need not be an object).
pub(crate) fn check_output_schema(
    location: &str,
    schema: &Value,
    limits: SchemaLimits,
) -> Result<PortableSchema, DefinitionError> {
    PortableSchema::check(location, schema, limits)
}

/// Compiles a validator for a checked schema: the one set of `jsonschema` options for input,
/// bound-input and output validation. The dialect is the schema's `$schema` (2020-12 without
/// one); formats are asserted (unknown formats are ignored); nothing is fetched.
///
/// A schema that does not compile (an invalid `pattern`, for instance) is `UNSUPPORTED_SCHEMA`
/// at `location`, "the `what` schema does not compile: …".
pub(crate) fn compile(
    location: &str,
    what: &str,
    schema: &PortableSchema,
) -> Result<jsonschema::Validator, DefinitionError> {
    jsonschema::options()
        .offline()
        .should_validate_formats(true)
        .build(schema.as_value())
        .map_err(|e| unsupported(location, format!("the {what} schema does not compile: {e}")))
}

/// Whether `schema` constrains nothing: `true`, `{}`, or only `$schema`, `title` and
/// `description`. A trivial output schema means "no output schema".
pub(crate) fn is_trivial(schema: &Value) -> bool {
    match schema {
        Value::Bool(b) => *b,
        Value::Object(map) => map.keys().all(|k| matches!(k.as_str(), "$schema" | "title" | "description")),
        _ => false,
    }
}

/// The draft 2020-12 schema `schemars` derives for `T`, with the range of every integer type
/// stated ([`state_integer_ranges`]).
pub(crate) fn schema_for<T: schemars::JsonSchema>() -> Value {
    let mut schema = schemars::generate::SchemaSettings::draft2020_12().into_generator().into_root_schema_for::<T>();
    RecursiveTransform(state_integer_ranges).transform(&mut schema);
    schema.to_value()
}

/// Adds the range an integer type can hold to its schema where `schemars` leaves it out (it
/// states it for 8- and 16-bit integers, not for wider ones): `minimum` and `maximum` of a
/// schema of `type: integer` (or a list of types with it) and the `format` `schemars` gives a
/// Rust integer type, each unless the schema has one. Without them an agent can send
/// `5000000000` for a `u32` that the schema allows and the type cannot hold, and learn of it only
/// as a value that failed to decode; with them the schema says so, and validation names the
/// field and its bound. A 128-bit type holds what a JSON number decoded by `serde_json` can be:
/// an `i64` or a `u64`.
pub(crate) fn state_integer_ranges(schema: &mut Schema) {
    let Some(map) = schema.as_object_mut() else { return };
    // `integer`, or a list with it (`Option<u32>` is `["integer", "null"]`: the bounds say nothing
    // of `null`).
    let integer = match map.get("type") {
        Some(Value::String(t)) => t == "integer",
        Some(Value::Array(types)) => types.iter().any(|t| t == "integer"),
        _ => false,
    };
    if !integer {
        return;
    }
    let (min, max): (Value, Value) = match map.get("format").and_then(Value::as_str) {
        Some("int32") => (i32::MIN.into(), i32::MAX.into()),
        Some("uint32") => (0.into(), u32::MAX.into()),
        Some("int64") => (i64::MIN.into(), i64::MAX.into()),
        Some("int128") => (i64::MIN.into(), u64::MAX.into()),
        Some("uint64" | "uint128") => (0.into(), u64::MAX.into()),
        Some("int") => (isize::MIN.into(), isize::MAX.into()),
        Some("uint") => (0.into(), usize::MAX.into()),
        _ => return,
    };
    if !map.contains_key("minimum") && !map.contains_key("exclusiveMinimum") {
        map.insert("minimum".into(), min);
    }
    if !map.contains_key("maximum") && !map.contains_key("exclusiveMaximum") {
        map.insert("maximum".into(), max);
    }
}

/// Closes every object schema that lists `properties` but says nothing about other members
/// (`additionalProperties: false`), so that a misspelled optional field is an `INVALID_INPUT`
/// instead of being silently dropped. An explicit `additionalProperties` is kept. Reaches every
/// subschema `schemars` knows of.
pub(crate) fn close_objects(mut schema: Value) -> Value {
    if let Ok(root) = <&mut Schema>::try_from(&mut schema) {
        RecursiveTransform(|s: &mut Schema| {
            if let Some(map) = s.as_object_mut()
                && map.contains_key("properties")
                && !map.contains_key("additionalProperties")
            {
                map.insert("additionalProperties".into(), Value::Bool(false));
            }
        })
        .transform(root);
    }
    schema
}

/// Size, depth and keyword checks shared by input and output schemas.
fn check_subset(location: &str, schema: &Value, limits: SchemaLimits) -> Result<(), DefinitionError> {
    match measure(schema, MAX_DOCUMENT_DEPTH, limits.max_bytes) {
        Ok(()) => {}
        Err(Exceeded::Size) => {
            return Err(unsupported(location, format!("schema is too large (over {} bytes)", limits.max_bytes)));
        }
        Err(Exceeded::Depth) => {
            return Err(unsupported(
                location,
                format!("schema document nests JSON deeper than {MAX_DOCUMENT_DEPTH} levels"),
            ));
        }
    }
    if !is_schema(schema) {
        return Err(unsupported(location, "`` is not a schema (expected an object or a boolean)"));
    }
    let checker = Checker { location, root: schema, max_depth: limits.max_depth };
    visit_subschemas(schema, |node, at| checker.node(node, at))
}

/// Whether `value` can be a schema: an object or a boolean.
fn is_schema(value: &Value) -> bool {
    matches!(value, Value::Object(_) | Value::Bool(_))
}

/// The portable-subset check of one subschema at a time (the walk is [`visit_subschemas`]).
struct Checker<'a> {
    /// Where errors are reported.
    location: &'a str,
    /// The document root, for resolving `$ref`.
    root: &'a Value,
    /// [`SchemaLimits::max_depth`].
    max_depth: usize,
}

impl Checker<'_> {
    /// Checks the keywords of the subschema `at`; its subschemas are visited next.
    fn node(&self, schema: &Value, at: SubschemaAt<'_>) -> Result<(), DefinitionError> {
        if at.depth > self.max_depth {
            return Err(
                self.error(format!("schema is nested deeper than {} levels at `{}`", self.max_depth, at.pointer))
            );
        }
        let Value::Object(map) = schema else { return Ok(()) };
        let mut pointer = at.pointer.to_owned();
        for (keyword, value) in map {
            let mark = pointer.len();
            push_pointer_segment(&mut pointer, keyword);
            self.keyword(keyword, value, &pointer, at.depth)?;
            pointer.truncate(mark);
        }
        Ok(())
    }

    /// Checks one keyword; `pointer` points at it.
    fn keyword(&self, keyword: &str, value: &Value, pointer: &str, depth: usize) -> Result<(), DefinitionError> {
        let shape_ok = match keyword {
            "$schema" => {
                self.root_only(keyword, pointer, depth)?;
                let Some(uri) = value.as_str() else { return Err(self.shape(keyword, pointer, "a string")) };
                if !DIALECTS.contains(&uri.strip_suffix('#').unwrap_or(uri)) {
                    return Err(self.error(format!(
                        "`$schema` at `{pointer}` must be draft 2020-12, 2019-09 or 07 (one of {})",
                        DIALECTS.join(", ")
                    )));
                }
                true
            }
            "$id" => {
                self.root_only(keyword, pointer, depth)?;
                value.is_string()
            }
            "$defs" | "definitions" => {
                self.root_only(keyword, pointer, depth)?;
                let Some(definitions) = value.as_object() else {
                    return Err(self.shape(keyword, pointer, "an object"));
                };
                // Each definition is counted from the root; `$ref` is never followed.
                self.all_schemas(definitions.iter().map(|(name, s)| (Cow::Borrowed(name.as_str()), s)), pointer)?;
                true
            }
            "$ref" => {
                let Some(reference) = value.as_str() else { return Err(self.shape(keyword, pointer, "a string")) };
                self.reference(reference, pointer)?;
                true
            }
            "type" => match value {
                Value::String(name) => JSON_TYPES.contains(&name.as_str()),
                Value::Array(names) => {
                    !names.is_empty()
                        && names.iter().all(|n| n.as_str().is_some_and(|n| JSON_TYPES.contains(&n)))
                        && names.iter().enumerate().all(|(i, n)| !names[..i].contains(n))
                }
                _ => false,
            },
            "properties" => {
                let Some(properties) = value.as_object() else {
                    return Err(self.shape(keyword, pointer, "an object"));
                };
                self.all_schemas(properties.iter().map(|(name, s)| (Cow::Borrowed(name.as_str()), s)), pointer)?;
                true
            }
            "required" => value.as_array().is_some_and(|names| names.iter().all(Value::is_string)),
            "additionalProperties" | "items" => {
                if keyword == "items" && value.is_array() {
                    return Err(self.error(format!(
                        "`items` at `{pointer}` is an array (tuple form), which is not in the portable schema \
                         subset: {}",
                        outside_hint("prefixItems")
                    )));
                }
                if !is_schema(value) {
                    return Err(self.not_a_schema(pointer));
                }
                true
            }
            "anyOf" | "oneOf" => {
                let Some(alternatives) = value.as_array().filter(|a| !a.is_empty()) else {
                    return Err(self.shape(keyword, pointer, "a non-empty array of schemas"));
                };
                self.all_schemas(
                    alternatives.iter().enumerate().map(|(i, s)| (Cow::Owned(i.to_string()), s)),
                    pointer,
                )?;
                true
            }
            "enum" => value.is_array(),
            "const" | "default" | "examples" => true,
            "title" | "description" | "format" | "pattern" => value.is_string(),
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => value.is_number(),
            "multipleOf" => value.as_f64().is_some_and(|m| m > 0.0),
            "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties" | "maxProperties" => {
                value.is_u64() || value.as_f64().is_some_and(|n| n >= 0.0 && n.fract() == 0.0)
            }
            "uniqueItems" | "nullable" | "readOnly" | "writeOnly" | "deprecated" => value.is_boolean(),
            extension if extension.starts_with("x-") => true,
            other => {
                return Err(self.error(format!(
                    "`{other}` at `{pointer}` is not in the portable schema subset: {}",
                    outside_hint(other)
                )));
            }
        };
        if shape_ok { Ok(()) } else { Err(self.shape(keyword, pointer, expected_shape(keyword))) }
    }

    /// Requires each member (name or index, value) under `pointer` to be a schema; the walk
    /// visits them next.
    fn all_schemas<'v>(
        &self,
        members: impl Iterator<Item = (Cow<'v, str>, &'v Value)>,
        pointer: &str,
    ) -> Result<(), DefinitionError> {
        for (name, member) in members {
            if !is_schema(member) {
                let mut at = pointer.to_owned();
                push_pointer_segment(&mut at, &name);
                return Err(self.not_a_schema(&at));
            }
        }
        Ok(())
    }

    /// Checks that a `$ref` is local (`#`, `#/$defs/Name`, `#/definitions/Name`) and resolves.
    fn reference(&self, reference: &str, pointer: &str) -> Result<(), DefinitionError> {
        if reference == "#" {
            return Ok(());
        }
        let form = || {
            self.error(format!(
                "`$ref` at `{pointer}` must be `#` or point to `#/$defs/Name` or `#/definitions/Name` \
                 (remote and other references are not in the portable schema subset; see {SUBSET_DOC})"
            ))
        };
        let unresolved =
            || self.error(format!("`$ref` at `{pointer}` does not resolve to a definition in this schema"));
        if !reference.starts_with("#/") {
            return Err(form());
        }
        let Some(target) = ref_pointer(reference) else { return Err(unresolved()) };
        let mut segments = target.split('/').skip(1);
        let definition = matches!(
            (segments.next(), segments.next(), segments.next()),
            (Some("$defs" | "definitions"), Some(name), None) if !name.is_empty()
        );
        if !definition {
            return Err(form());
        }
        match self.root.pointer(&target) {
            Some(_) => Ok(()),
            None => Err(unresolved()),
        }
    }

    /// Rejects a root-only keyword below the root.
    fn root_only(&self, keyword: &str, pointer: &str, depth: usize) -> Result<(), DefinitionError> {
        if depth == 0 {
            Ok(())
        } else {
            Err(self.error(format!("`{keyword}` at `{pointer}` is allowed only at the schema root")))
        }
    }

    /// A keyword whose value has the wrong shape.
    fn shape(&self, keyword: &str, pointer: &str, expected: &str) -> DefinitionError {
        self.error(format!("`{keyword}` at `{pointer}` must be {expected}"))
    }

    /// A value where a schema must be.
    fn not_a_schema(&self, pointer: &str) -> DefinitionError {
        self.error(format!("`{pointer}` is not a schema (expected an object or a boolean)"))
    }

    /// An `UNSUPPORTED_SCHEMA` error at this check's location.
    fn error(&self, problem: String) -> DefinitionError {
        unsupported(self.location, problem)
    }
}

/// Where the portable subset is listed, named by every refusal of a construct outside it.
const SUBSET_DOC: &str = "spec/invocation.md#32-the-portable-schema-subset";

/// How to fix a schema that uses `keyword`, outside the portable subset: the Rust construct that
/// usually produces it and what to write instead, then where the subset is listed.
fn outside_hint(keyword: &str) -> String {
    let fix = match keyword {
        "patternProperties" | "propertyNames" => {
            "a map with non-string keys (`HashMap<u32, _>`, an enum key); use string keys (`HashMap<String, _>`)"
        }
        "prefixItems" => "a tuple; use a struct with named fields, or a `Vec` of one type",
        "allOf" => "often `#[serde(flatten)]`; write the fields out in one struct",
        "not" | "if" | "then" | "else" | "dependentSchemas" | "dependentRequired" | "dependencies" => {
            "a conditional schema; check the condition in the handler or a precondition instead"
        }
        "unevaluatedProperties" | "unevaluatedItems" => {
            "use `additionalProperties: false` (the registry closes object schemas itself)"
        }
        "contains" | "minContains" | "maxContains" => "check the array's contents in a precondition instead",
        _ => "remove it or express it with the keywords the subset allows",
    };
    format!("{fix} (the subset: {SUBSET_DOC})")
}

/// What a keyword's value must be, for error messages.
fn expected_shape(keyword: &str) -> &'static str {
    match keyword {
        "$id" | "title" | "description" | "format" | "pattern" => "a string",
        "type" => "one of the seven JSON types, or a non-empty array of distinct ones",
        "required" => "an array of property names",
        "enum" => "an array",
        "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => "a number",
        "multipleOf" => "a number greater than 0",
        "uniqueItems" | "nullable" | "readOnly" | "writeOnly" | "deprecated" => "a boolean",
        _ => "a non-negative integer",
    }
}

/// An `UNSUPPORTED_SCHEMA` error.
fn unsupported(location: &str, problem: impl Into<String>) -> DefinitionError {
    DefinitionError::new(DefinitionErrorCode::UnsupportedSchema, location, problem)
}

/// Whether a top-level property schema marks its value as sensitive: `writeOnly: true`,
/// `format: "password"` or `x-sensitive: true`, on the property itself or on the schemas its
/// `$ref`s lead to.
fn is_marked_sensitive(root: &Value, property: &Value) -> bool {
    let mut current = property;
    // A `$ref` chain can loop; a chain longer than the number of definitions has looped.
    let definitions: usize =
        ["$defs", "definitions"].iter().filter_map(|c| root.get(*c)?.as_object()).map(Map::len).sum();
    for _ in 0..=definitions {
        let Some(map) = current.as_object() else { return false };
        let marked = map.get("writeOnly") == Some(&Value::Bool(true))
            || map.get("format").and_then(Value::as_str) == Some("password")
            || map.get("x-sensitive") == Some(&Value::Bool(true));
        if marked {
            return true;
        }
        match map.get("$ref").and_then(Value::as_str).and_then(|reference| resolve_ref(root, reference)) {
            Some(next) => current = next,
            None => return false,
        }
    }
    false
}

/// Removes the `bound` properties from the root's `properties` and `required` (dropping a
/// `required` that this emptied).
fn remove_bound(root: &mut Map<String, Value>, bound: &[String]) {
    if let Some(Value::Object(properties)) = root.get_mut("properties") {
        for name in bound {
            properties.remove(name);
        }
    }
    if let Some(Value::Array(required)) = root.get_mut("required") {
        let before = required.len();
        required.retain(|name| !name.as_str().is_some_and(|name| bound.iter().any(|b| b == name)));
        if required.is_empty() && before > 0 {
            root.remove("required");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use schemars::JsonSchema;
    use serde_json::json;

    use super::*;

    /// A nested struct.
    #[derive(JsonSchema)]
    #[allow(dead_code, reason = "only its schema is used")]
    struct Address {
        /// The street.
        street: String,
        zip: Option<String>,
    }

    /// Unit variants.
    #[derive(JsonSchema)]
    #[allow(dead_code, reason = "only its schema is used")]
    enum Status {
        Open,
        Closed,
    }

    /// Variants with data, externally tagged.
    #[derive(JsonSchema)]
    #[allow(dead_code, reason = "only its schema is used")]
    enum Payment {
        Card { last4: String },
        Cash,
        Voucher(String),
    }

    /// Variants with data, internally tagged.
    #[derive(JsonSchema)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    #[allow(dead_code, reason = "only its schema is used")]
    enum Shipping {
        Pickup,
        Courier { address: Address, express: bool },
    }

    /// Recursive through a definition.
    #[derive(JsonSchema)]
    #[allow(dead_code, reason = "only its schema is used")]
    struct Node {
        value: i64,
        next: Option<Box<Node>>,
    }

    /// Recursive at the root (`$ref: "#"`).
    #[derive(JsonSchema)]
    #[allow(dead_code, reason = "only its schema is used")]
    struct Tree {
        name: String,
        children: Vec<Tree>,
    }

    /// A typical capability input.
    #[derive(JsonSchema)]
    #[allow(dead_code, reason = "only its schema is used")]
    struct OrderInput {
        order_id: u32,
        note: Option<String>,
        tags: Vec<String>,
        address: Address,
        billing: Option<Address>,
        status: Status,
        payment: Payment,
        shipping: Shipping,
        chain: Option<Box<Node>>,
        tree: Tree,
        counts: HashMap<String, i64>,
        sorted: BTreeMap<String, Vec<u8>>,
        amount: f64,
        flag: bool,
        #[schemars(range(min = 1, max = 10), length(max = 5))]
        limited: Vec<u16>,
        #[schemars(email)]
        email: String,
        #[schemars(extend("writeOnly" = true))]
        secret: String,
        anything: serde_json::Value,
    }

    /// Checks `schema` as an input schema, which must pass.
    fn ok_input(schema: &Value) -> CheckedInputSchema {
        check_input_schema("t.c", schema, &[], &[], SchemaLimits::default())
            .unwrap_or_else(|e| panic!("{e}\n{}", serde_json::to_string_pretty(schema).unwrap()))
    }

    #[test]
    fn schemars_types_are_in_the_subset() {
        let limits = SchemaLimits::default();
        ok_input(&schema_for::<Address>());
        ok_input(&schema_for::<Node>());
        ok_input(&schema_for::<Tree>());
        ok_input(&schema_for::<OrderInput>());
        for output in [
            schema_for::<Status>(),
            schema_for::<Payment>(),
            schema_for::<Shipping>(),
            schema_for::<Option<Address>>(),
            schema_for::<Vec<Tree>>(),
            schema_for::<String>(),
            schema_for::<()>(),
            schema_for::<serde_json::Value>(),
        ] {
            let checked = check_output_schema("t.c", &output, limits).unwrap_or_else(|e| panic!("{e}: {output}"));
            assert_eq!(checked.as_value(), &output);
        }
    }

    #[test]
    fn recursive_root_uses_a_root_reference() {
        let tree = schema_for::<Tree>();
        assert_eq!(tree["properties"]["children"]["items"]["$ref"], "#");
        let node = schema_for::<Node>();
        assert_eq!(node["properties"]["next"]["anyOf"][0]["$ref"], "#");
        let input = schema_for::<OrderInput>();
        assert_eq!(input["properties"]["chain"]["anyOf"][0]["$ref"], "#/$defs/Node");
        assert_eq!(input["$defs"]["Node"]["properties"]["next"]["anyOf"][0]["$ref"], "#/$defs/Node");
    }

    #[test]
    fn sensitive_fields_are_found() {
        let checked = ok_input(&schema_for::<OrderInput>());
        assert_eq!(checked.sensitive, ["secret"]);

        let schema = json!({
            "type": "object",
            "properties": {
                "password": {"type": "string", "format": "password"},
                "token": {"type": "string", "x-sensitive": true},
                "pin": {"$ref": "#/$defs/Pin"},
                "code": {"$ref": "#/$defs/Sec%72et"},
                "card": {"type": "string"},
                "loop": {"$ref": "#/$defs/A"},
                "plain": {"type": "string", "writeOnly": false},
            },
            "$defs": {
                "Pin": {"$ref": "#/$defs/Secret"},
                "Secret": {"type": "string", "writeOnly": true},
                "A": {"$ref": "#/$defs/B"},
                "B": {"$ref": "#/$defs/A"},
            },
        });
        let checked =
            check_input_schema("t.c", &schema, &[], &["card".into(), "token".into()], SchemaLimits::default()).unwrap();
        assert_eq!(checked.sensitive, ["card", "code", "password", "pin", "token"]);
    }

    #[test]
    fn bound_fields_are_hidden_from_consumers() {
        let schema = json!({
            "type": "object",
            "properties": {"tenant": {"type": "string"}, "order": {"type": "integer"}, "user": {"type": "string"}},
            "required": ["tenant", "order"],
            "additionalProperties": false,
        });
        let checked =
            check_input_schema("t.c", &schema, &["tenant".into(), "user".into()], &[], SchemaLimits::default())
                .unwrap();
        assert_eq!(checked.full.as_value(), &schema);
        assert_eq!(
            checked.advertised.as_value(),
            &json!({
                "type": "object",
                "properties": {"order": {"type": "integer"}},
                "required": ["order"],
                "additionalProperties": false,
            })
        );

        let checked =
            check_input_schema("t.c", &schema, &["tenant".into(), "order".into()], &[], SchemaLimits::default())
                .unwrap();
        assert_eq!(checked.advertised.as_value().get("required"), None, "an emptied `required` is dropped");

        let empty_required = json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": []});
        let checked = check_input_schema("t.c", &empty_required, &[], &[], SchemaLimits::default()).unwrap();
        assert_eq!(checked.advertised.as_value(), &empty_required, "nothing bound, nothing changed");
    }

    #[test]
    fn bound_and_sensitive_names_must_be_properties() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let err = check_input_schema("t.c", &schema, &["b".into()], &[], SchemaLimits::default()).unwrap_err();
        assert_eq!(err.code(), DefinitionErrorCode::InvalidDefinition);
        assert_eq!(err.location(), "t.c");
        assert_eq!(err.problem(), "bound field `b` is not a property of the input schema; did you mean `a`?");

        let err = check_input_schema("t.c", &schema, &[], &["c".into()], SchemaLimits::default()).unwrap_err();
        assert_eq!(err.code(), DefinitionErrorCode::InvalidDefinition);
        assert_eq!(err.problem(), "sensitive field `c` is not a property of the input schema; did you mean `a`?");

        let no_properties = json!({"type": "object"});
        let err = check_input_schema("t.c", &no_properties, &["a".into()], &[], SchemaLimits::default()).unwrap_err();
        assert_eq!(err.code(), DefinitionErrorCode::InvalidDefinition);
    }

    /// Checks `schema` as an input schema: `expected` is `"ok"` or a fragment of the
    /// `UNSUPPORTED_SCHEMA` problem.
    #[track_caller]
    fn check(schema: Value, expected: &str) {
        match check_input_schema("orders.cancel", &schema, &[], &[], SchemaLimits::default()) {
            Ok(_) => assert_eq!(expected, "ok", "accepted: {schema}"),
            Err(e) => {
                assert_ne!(expected, "ok", "rejected: {e}");
                assert_eq!(e.code(), DefinitionErrorCode::UnsupportedSchema, "{e}");
                assert_eq!(e.location(), "orders.cancel");
                assert!(e.problem().contains(expected), "problem {:?} lacks {expected:?}", e.problem());
            }
        }
    }

    /// An object schema with one property `a` whose schema is `a`.
    fn with_property(a: Value) -> Value {
        json!({"type": "object", "properties": {"a": a}})
    }

    #[test]
    fn subset_table() {
        check(json!({"type": "object"}), "ok");
        check(json!({"type": "object", "x-vendor": {"anything": [1, 2]}, "properties": {"a": true, "b": false}}), "ok");
        check(
            with_property(json!({
                "type": ["string", "null"], "minLength": 1, "maxLength": 5, "pattern": "^a", "format": "email",
                "enum": ["a", null], "const": "a", "default": "a", "examples": ["a"], "title": "A",
                "description": "d", "nullable": true, "readOnly": false, "writeOnly": false, "deprecated": false,
            })),
            "ok",
        );
        check(
            with_property(json!({
                "type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1.5, "exclusiveMinimum": -1,
                "exclusiveMaximum": 2, "multipleOf": 0.5}, "minItems": 0, "maxItems": 3, "uniqueItems": true,
            })),
            "ok",
        );
        check(
            with_property(json!({
                "type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1, "maxProperties": 2,
                "required": [],
            })),
            "ok",
        );
        check(json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}), "ok");
        check(json!({"$id": "https://example.com/s", "type": "object"}), "ok");
        check(
            json!({"type": "object", "properties": {"a": {"$ref": "#/definitions/A~1B%20C"}},
                   "definitions": {"A/B C": {"type": "string"}}}),
            "ok",
        );

        check(json!({"type": "object", "allOf": [{}]}), "`allOf` at `/allOf` is not in the portable schema subset");
        check(with_property(json!({"not": {}})), "`not` at `/properties/a/not`");
        check(with_property(json!({"if": {}, "then": {}})), "`if` at `/properties/a/if`");
        check(
            json!({"type": "object", "patternProperties": {"^x": {}}}),
            "`patternProperties` at `/patternProperties`",
        );
        check(json!({"type": "object", "dependentSchemas": {}}), "`dependentSchemas`");
        check(json!({"type": "object", "unevaluatedProperties": false}), "`unevaluatedProperties`");
        check(with_property(json!({"$dynamicRef": "#meta"})), "`$dynamicRef`");
        check(with_property(json!({"prefixItems": [{}]})), "`prefixItems`");
        check(with_property(json!({"items": [{}]})), "`items` at `/properties/a/items` is an array (tuple form)");
        check(with_property(json!({"contains": {}})), "`contains`");
        check(with_property(json!({"$comment": "x"})), "`$comment`");
        check(with_property(json!({"propertyNames": {}})), "`propertyNames`");
        check(with_property(json!({"y-vendor": 1})), "`y-vendor`");
        check(
            json!({"type": "object", "properties": {"a/b~": {"allOf": []}}}),
            "`allOf` at `/properties/a~1b~0/allOf`",
        );
        check(with_property(json!({"anyOf": [{"type": "string"}, {"allOf": []}]})), "`/properties/a/anyOf/1/allOf`");

        check(
            with_property(json!({"$ref": "https://example.com/schema.json"})),
            "`$ref` at `/properties/a/$ref` must be",
        );
        check(with_property(json!({"$ref": "other.json#/$defs/A"})), "remote and other references");
        check(with_property(json!({"$ref": "#/properties/b"})), "remote and other references");
        check(with_property(json!({"$ref": "#/$defs/A/properties/x"})), "remote and other references");
        check(with_property(json!({"$ref": "#/$defs/Missing"})), "does not resolve");
        check(with_property(json!({"$ref": "#/$defs/A%2"})), "does not resolve");
        check(
            json!({"type": "object", "properties": {"a": {"$ref": "#/definitions/A"}}, "$defs": {"A": {}}}),
            "does not resolve",
        );
        check(
            with_property(json!({"$defs": {"A": {}}})),
            "`$defs` at `/properties/a/$defs` is allowed only at the schema root",
        );
        check(with_property(json!({"$id": "x"})), "`$id` at `/properties/a/$id` is allowed only at the schema root");
        check(json!({"$schema": "https://example.com/my-meta", "type": "object"}), "`$schema` at `/$schema` must be");
        check(json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}), "`$schema`");

        check(with_property(json!({"type": "float"})), "`type` at `/properties/a/type` must be one of the seven");
        check(with_property(json!({"type": []})), "`type`");
        check(with_property(json!({"type": ["string", "string"]})), "`type`");
        check(
            with_property(json!({"minLength": -1})),
            "`minLength` at `/properties/a/minLength` must be a non-negative",
        );
        check(with_property(json!({"maxItems": 1.5})), "`maxItems`");
        check(with_property(json!({"multipleOf": 0})), "`multipleOf` at `/properties/a/multipleOf` must be a number");
        check(with_property(json!({"minimum": "1"})), "`minimum`");
        check(with_property(json!({"required": "a"})), "`required`");
        check(with_property(json!({"enum": "a"})), "`enum`");
        check(with_property(json!({"uniqueItems": "yes"})), "`uniqueItems`");
        check(with_property(json!({"anyOf": []})), "`anyOf` at `/properties/a/anyOf` must be a non-empty array");
        check(json!({"type": "object", "properties": []}), "`properties` at `/properties` must be an object");
        check(with_property(json!(5)), "`/properties/a` is not a schema");
        check(with_property(json!(null)), "`/properties/a` is not a schema");
    }

    #[test]
    fn input_root_must_be_an_object_schema() {
        let message = "tool input must be a JSON object";
        check(json!({"type": "string"}), message);
        check(json!({"type": ["object", "null"]}), message);
        check(json!({"properties": {}}), message);
        check(json!({"$ref": "#/$defs/A", "$defs": {"A": {"type": "object"}}}), message);
        check(json!(true), message);
        check(json!({"anyOf": [{"type": "object"}]}), message);
        // Non-schemas are rejected first, by the subset check.
        check(json!([]), "is not a schema");
    }

    /// `levels` nested object properties below the root.
    fn nested(levels: usize) -> Value {
        let mut schema = json!({"type": "string"});
        for _ in 0..levels {
            schema = json!({"type": "object", "properties": {"a": schema}});
        }
        schema
    }

    #[test]
    fn depth_and_size_limits() {
        check(nested(16), "ok");
        check(nested(17), "schema is nested deeper than 16 levels at `/properties/a/properties/a");
        // Definitions are counted from the root, references are not followed.
        let mut deep_definition = nested(16);
        deep_definition["$defs"] = json!({"D": nested(15)});
        check(deep_definition.clone(), "ok");
        deep_definition["$defs"] = json!({"D": nested(16)});
        check(deep_definition, "nested deeper than 16 levels at `/$defs/D/");

        let shallow = SchemaLimits { max_depth: 2, max_bytes: 1000 };
        let err = check_input_schema("t.c", &nested(3), &[], &[], shallow).unwrap_err();
        assert!(err.problem().contains("nested deeper than 2 levels"), "{err}");

        let big = with_property(json!({"description": "x".repeat(64 * 1024)}));
        check(big, "schema is too large (over 65536 bytes)");
        let small = SchemaLimits { max_depth: 16, max_bytes: 100 };
        let err = check_output_schema("t.c", &json!({"description": "x".repeat(200)}), small).unwrap_err();
        assert_eq!(err.code(), DefinitionErrorCode::UnsupportedSchema);
        assert!(err.problem().contains("too large"));

        // A `const` nested absurdly deep (no subschemas involved) is rejected without recursion.
        let mut deep = json!(1);
        for _ in 0..200 {
            deep = json!([deep]);
        }
        check(with_property(json!({"const": deep})), "deeper than 128 levels");
    }

    #[test]
    fn reference_cycles_terminate() {
        let schema = json!({
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/A"}, "r": {"$ref": "#"}},
            "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "null"}]}},
        });
        check(schema, "ok");
    }

    #[test]
    fn tuples_are_not_portable() {
        let err = check_output_schema("t.c", &schema_for::<(u8, String)>(), SchemaLimits::default()).unwrap_err();
        assert_eq!(
            err.problem(),
            "`prefixItems` at `/prefixItems` is not in the portable schema subset: a tuple; use a struct with \
             named fields, or a `Vec` of one type (the subset: spec/invocation.md#32-the-portable-schema-subset)"
        );
    }

    #[test]
    fn output_schemas() {
        let limits = SchemaLimits::default();
        assert_eq!(
            check_output_schema("t.c", &json!({"type": "string"}), limits).unwrap().into_value(),
            json!({"type": "string"})
        );
        assert!(check_output_schema("t.c", &json!(true), limits).is_ok());
        let err = check_output_schema("t.c", &json!({"type": "array", "prefixItems": []}), limits).unwrap_err();
        assert_eq!(err.code(), DefinitionErrorCode::UnsupportedSchema);
        assert!(
            err.problem().starts_with("`prefixItems` at `/prefixItems` is not in the portable schema subset: a tuple")
        );
    }

    #[test]
    fn trivial_schemas() {
        assert!(is_trivial(&json!(true)));
        assert!(is_trivial(&json!({})));
        assert!(is_trivial(&json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "AnyValue"})));
        assert!(is_trivial(&json!({"description": "anything"})));
        assert!(is_trivial(&schema_for::<serde_json::Value>()));
        assert!(!is_trivial(&json!(false)));
        assert!(!is_trivial(&json!({"type": "null"})));
        assert!(!is_trivial(&schema_for::<()>()));
        assert!(!is_trivial(&json!({"x-kind": "a"})));
        assert!(!is_trivial(&json!(null)));
    }
}

#[cfg(test)]
mod hints {
    use std::collections::BTreeMap;

    use schemars::JsonSchema;
    use serde_json::json;

    use super::*;

    /// The refusal of `schema` as a capability input names what to do about it.
    #[track_caller]
    fn check(schema: Value, expected: &str) {
        let err = check_input_schema("t.c", &schema, &[], &[], SchemaLimits::default()).unwrap_err();
        assert_eq!(err.code(), DefinitionErrorCode::UnsupportedSchema);
        assert_eq!(err.problem(), expected, "{schema}");
    }

    #[derive(JsonSchema)]
    #[expect(dead_code, reason = "only its schema is used")]
    struct Counts {
        by_id: BTreeMap<u32, String>,
    }

    #[test]
    fn refusals_name_the_fix() {
        check(
            schema_for::<String>(),
            "tool input must be a JSON object (`\"type\": \"object\"` at the root): wrap it in a struct \
             (a `String`, a `Vec`, an enum or a map becomes one named field of the struct)",
        );
        check(
            schema_for::<Counts>(),
            "`patternProperties` at `/properties/by_id/patternProperties` is not in the portable schema subset: a map with \
             non-string keys (`HashMap<u32, _>`, an enum key); use string keys (`HashMap<String, _>`) \
             (the subset: spec/invocation.md#32-the-portable-schema-subset)",
        );
        check(
            json!({"type": "object", "allOf": [{"type": "object"}]}),
            "`allOf` at `/allOf` is not in the portable schema subset: often `#[serde(flatten)]`; write the fields \
             out in one struct (the subset: spec/invocation.md#32-the-portable-schema-subset)",
        );
        check(
            json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}),
            "`$ref` at `/properties/a/$ref` must be `#` or point to `#/$defs/Name` or `#/definitions/Name` \
             (remote and other references are not in the portable schema subset; \
             see spec/invocation.md#32-the-portable-schema-subset)",
        );
    }
}
