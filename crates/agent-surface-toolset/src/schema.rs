//! Input schemas in each provider's dialect.
//!
//! The registry advertises draft 2020-12 schemas in its portable subset
//! ([`agent_surface_registry::schema`]): `$defs`/`$ref`, `anyOf`/`oneOf`, type arrays, the usual
//! limits and annotations. OpenAI and Anthropic take them as they are (minus `$schema`); OpenAI's
//! strict mode takes only a stricter subset ([`openai_strict_eligible`]); Gemini takes an OpenAPI
//! 3.0 subset, so [`gemini_schema`] rewrites them.
//!
//! Neither walks schemas by hand: the strict check is a visit of
//! [`agent_surface_registry::schema::visit_subschemas`], the Gemini conversion two `schemars`
//! transforms (inline `$ref`s, then rewrite each subschema bottom-up), and every `$ref` is read by
//! the registry's one resolver ([`agent_surface_registry::schema::resolve_ref`]), so a reference
//! the registry accepted resolves here too.

use std::fmt;

use agent_surface_registry::schema::{SubschemaAt, escape_pointer_segment, ref_pointer, resolve_ref, visit_subschemas};
use schemars::Schema;
use schemars::transform::{Transform, transform_subschemas};
use serde_json::{Map, Value, json};

/// The schema with the root `$schema` member removed: every provider knows the dialect, and
/// Gemini rejects the member.
pub fn without_dialect(schema: &Value) -> Value {
    let mut out = schema.clone();
    if let Some(root) = out.as_object_mut() {
        root.remove("$schema");
    }
    out
}

// ---- OpenAI strict mode ---------------------------------------------------------------------

/// Keywords OpenAI strict mode accepts (Structured Outputs, "Supported schemas").
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "description",
    "title",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
];

/// String formats OpenAI strict mode accepts.
const STRICT_FORMATS: &[&str] = &["date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"];

/// The deepest object nesting strict mode accepts.
const STRICT_MAX_DEPTH: usize = 10;
/// The most object properties strict mode accepts in one schema.
const STRICT_MAX_PROPERTIES: usize = 5000;
/// The most enum values strict mode accepts in one schema.
const STRICT_MAX_ENUM_VALUES: usize = 1000;

/// Why a schema cannot be sent with `strict: true`, or `Ok` if it can.
///
/// A schema qualifies when the root is an object schema (not `anyOf`); every object schema,
/// including those in `$defs`, lists all its properties in `required` and has
/// `additionalProperties: false`; it uses only the keywords strict mode supports (no `oneOf`,
/// `default`, `minLength`, `uniqueItems`, `nullable`, `x-…`, …) and only its string formats; and it
/// stays within 10 levels of nesting, 5000 properties and 1000 enum values.
///
/// ```
/// use agent_surface_toolset::openai_strict_eligible;
/// use serde_json::json;
///
/// let strict = json!({
///     "type": "object",
///     "properties": {"city": {"type": "string"}, "unit": {"type": ["string", "null"], "enum": ["c", "f", null]}},
///     "required": ["city", "unit"],
///     "additionalProperties": false
/// });
/// assert!(openai_strict_eligible(&strict).is_ok());
///
/// let optional = json!({"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": false});
/// assert_eq!(openai_strict_eligible(&optional).unwrap_err(), "at #: property `city` is not required");
/// ```
pub fn openai_strict_eligible(schema: &Value) -> Result<(), String> {
    let schema = without_dialect(schema);
    let Some(root) = schema.as_object() else { return Err("at #: the root is not an object schema".into()) };
    if root.get("type").and_then(Value::as_str) != Some("object") || root.contains_key("anyOf") {
        return Err("at #: the root must be `\"type\": \"object\"` and not `anyOf`".into());
    }
    for key in ["$defs", "definitions"] {
        if root.get(key).is_some_and(|defs| !defs.is_object()) {
            return Err(format!("at #/{key}: not an object"));
        }
    }
    let mut budget = StrictBudget { properties: 0, enum_values: 0 };
    visit_subschemas(&schema, |node, at| strict_node(&schema, node, at, &mut budget))
}

/// What strict mode allows in one request, counted over the whole schema.
struct StrictBudget {
    /// Object properties so far.
    properties: usize,
    /// Enum values so far.
    enum_values: usize,
}

/// Checks one subschema for strict mode (the walk is the registry's).
fn strict_node(root: &Value, node: &Value, at: SubschemaAt<'_>, budget: &mut StrictBudget) -> Result<(), String> {
    if at.keyword == "additionalProperties" {
        // Its parent requires `false`.
        return Ok(());
    }
    let here = format!("#{}", at.pointer);
    let here = here.as_str();
    // Definitions count their nesting from themselves, as the root does.
    let in_definition = at.pointer.starts_with("/$defs/") || at.pointer.starts_with("/definitions/");
    let depth = if in_definition { at.depth - 1 } else { at.depth };
    let Some(obj) = node.as_object() else { return Err(format!("at {here}: boolean schemas are not supported")) };
    if depth > STRICT_MAX_DEPTH {
        return Err(format!("at {here}: nested deeper than {STRICT_MAX_DEPTH} levels"));
    }
    let allowed =
        |key: &str| STRICT_KEYWORDS.contains(&key) || (at.depth == 0 && matches!(key, "$defs" | "definitions"));
    if let Some(key) = obj.keys().find(|k| !allowed(k)) {
        return Err(format!("at {here}: keyword `{key}` is not supported"));
    }
    if let Some(format) = obj.get("format")
        && !format.as_str().is_some_and(|f| STRICT_FORMATS.contains(&f))
    {
        return Err(format!("at {here}: format {format} is not supported"));
    }
    if let Some(values) = obj.get("enum") {
        budget.enum_values += values.as_array().map_or(0, Vec::len);
        if budget.enum_values > STRICT_MAX_ENUM_VALUES {
            return Err(format!("at {here}: more than {STRICT_MAX_ENUM_VALUES} enum values"));
        }
    }
    let types: Vec<&str> = match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if types.contains(&"object") || obj.contains_key("properties") {
        let empty = Map::new();
        let properties = match obj.get("properties") {
            Some(Value::Object(p)) => p,
            Some(_) => return Err(format!("at {here}: `properties` is not an object")),
            None => &empty,
        };
        if obj.get("additionalProperties") != Some(&Value::Bool(false)) {
            return Err(format!("at {here}: `additionalProperties` is not `false`"));
        }
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map_or_else(Vec::new, |r| r.iter().filter_map(Value::as_str).collect());
        if let Some(name) = properties.keys().find(|k| !required.contains(&k.as_str())) {
            return Err(format!("at {here}: property `{name}` is not required"));
        }
        budget.properties += properties.len();
        if budget.properties > STRICT_MAX_PROPERTIES {
            return Err(format!("at {here}: more than {STRICT_MAX_PROPERTIES} properties"));
        }
        if let Some(name) = properties.iter().find(|(_, p)| !is_schema(p)).map(|(name, _)| name) {
            return Err(format!("at {here}/properties/{}: not a schema", escape_pointer_segment(name)));
        }
    } else if obj.contains_key("additionalProperties") {
        return Err(format!("at {here}: `additionalProperties` outside an object schema"));
    }
    if obj.get("items").is_some_and(|items| !items.is_object()) {
        return Err(format!("at {here}/items: boolean schemas are not supported"));
    }
    if let Some(any_of) = obj.get("anyOf") {
        let Some(members) = any_of.as_array() else { return Err(format!("at {here}: `anyOf` is not an array")) };
        if let Some(i) = members.iter().position(|m| !is_schema(m)) {
            return Err(format!("at {here}/anyOf/{i}: not a schema"));
        }
    }
    if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
        // `#`, or one of the root's definitions, and it must resolve.
        let local =
            ref_pointer(r).is_some_and(|p| p.is_empty() || p.starts_with("/$defs/") || p.starts_with("/definitions/"));
        if !local || resolve_ref(root, r).is_none() {
            return Err(format!("at {here}: `$ref` {r} is not a local definition"));
        }
    }
    Ok(())
}

/// Whether `value` can be a schema: an object or a boolean.
fn is_schema(value: &Value) -> bool {
    matches!(value, Value::Object(_) | Value::Bool(_))
}

// ---- Gemini -----------------------------------------------------------------------------------

/// How many `$ref`s one path may expand before the rest is cut off (recursion, or a very deep
/// chain of definitions).
const GEMINI_MAX_REF_DEPTH: usize = 8;

/// Keywords copied to Gemini unchanged.
const GEMINI_KEEP: &[&str] = &[
    "title",
    "description",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "minProperties",
    "maxProperties",
    "default",
];

/// An input schema converted to the OpenAPI 3.0 subset Gemini's `FunctionDeclaration.parameters`
/// accepts, or `None` when the function takes no parameters (Gemini rejects an `OBJECT` with no
/// properties; an absent `parameters` means "no parameters").
///
/// The conversion:
///
/// - `$ref` is inlined from `$defs` / `definitions`, read by the registry's resolver
///   ([`agent_surface_registry::schema::resolve_ref`]: percent-encoded and `~0`/`~1`-escaped names
///   resolve as the registry's validators resolve them); a recursive reference, one nested deeper
///   than 8 expansions, or one that does not resolve becomes an untyped schema keeping its
///   description; `$schema`, `$id`, `$defs` and `definitions` are dropped;
/// - `type` becomes Gemini's upper-case enum; a type array with `"null"` becomes the type plus
///   `nullable: true`; several non-null types become `anyOf`;
/// - `oneOf` becomes `anyOf`; a `{"type": "null"}` member becomes `nullable: true`; a single
///   remaining member is merged into its parent; members that are all string constants collapse
///   into one `enum`;
/// - `enum` and `const` of strings become `{"type": "STRING", "format": "enum", "enum": [...]}`;
///   other values are listed in the description instead;
/// - `format` is kept only where Gemini defines it (`enum`, `date-time` for strings; `float`,
///   `double` for numbers; `int32`, `int64` for integers);
/// - `examples` becomes `example` (the first one);
/// - `additionalProperties`, `exclusiveMinimum`/`exclusiveMaximum`, `multipleOf`,
///   `uniqueItems`, `readOnly`, `writeOnly`, `deprecated`, `x-…` and anything else are dropped;
///   an object with no properties left is sent untyped.
///
/// Nothing is lost that matters for correctness: the registry validates the call against the
/// original schema and answers `INVALID_INPUT` with the issues. What the model no longer sees
/// (a map's value type, a recursive type below its recursion, …) is reported, not silently
/// changed: [`crate::lossy_conversions`] lists it, and the tool definitions warn about it.
///
/// ```
/// use agent_surface_toolset::gemini_schema;
/// use serde_json::json;
///
/// let schema = json!({
///     "$schema": "https://json-schema.org/draft/2020-12/schema",
///     "type": "object",
///     "properties": {
///         "line": {"$ref": "#/$defs/Line"},
///         "note": {"type": ["string", "null"]}
///     },
///     "required": ["line"],
///     "additionalProperties": false,
///     "$defs": {"Line": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}}
/// });
/// assert_eq!(gemini_schema(&schema), Some(json!({
///     "type": "OBJECT",
///     "properties": {
///         "line": {"type": "OBJECT", "properties": {"sku": {"type": "STRING"}}, "required": ["sku"]},
///         "note": {"type": "STRING", "nullable": true}
///     },
///     "required": ["line"]
/// })));
/// ```
pub fn gemini_schema(schema: &Value) -> Option<Value> {
    gemini_conversion(schema).0
}

/// [`gemini_schema`], with what the conversion loses: each loss with the JSON Pointer of its
/// subschema in the input schema, `$ref`s followed (the path of the value it describes, so
/// `/properties/tree/properties/children/items`, not `/$defs/Node/…`).
///
/// The losses are read from the schema with its `$ref`s inlined (cuts marked by [`InlineRefs`]),
/// before [`to_gemini`] rewrites it, by the registry's walk ([`visit_subschemas`]).
pub(crate) fn gemini_conversion(schema: &Value) -> (Option<Value>, Vec<(String, LossKind)>) {
    let mut work = schema.clone();
    if let Some(root) = work.as_object_mut() {
        // Inlined where they are used; resolved against the original document.
        root.remove("$defs");
        root.remove("definitions");
    }
    let Ok(tree) = <&mut Schema>::try_from(&mut work) else { return (None, Vec::new()) };
    InlineRefs { root: schema, expanding: Vec::new() }.transform(tree);
    let mut losses = Vec::new();
    let mut dropped: Vec<String> = Vec::new();
    let _ = visit_subschemas(&work, |node, at| {
        // Below a dropped map value type, everything is already reported as lost.
        if !dropped.iter().any(|d| at.pointer.starts_with(d.as_str())) {
            gemini_losses(node, at.pointer, &mut losses, &mut dropped);
        }
        Ok::<(), std::convert::Infallible>(())
    });
    let Ok(tree) = <&mut Schema>::try_from(&mut work) else { return (None, losses) };
    to_gemini(tree);
    let empty_root = work.get("type").and_then(Value::as_str) != Some("OBJECT")
        || work.get("properties").and_then(Value::as_object).is_none_or(Map::is_empty);
    (if empty_root { None } else { Some(work) }, losses)
}

/// The member [`InlineRefs`] leaves where it cut a `$ref` off, read by [`gemini_losses`] and
/// dropped by [`gemini_node`] (which copies only the keywords Gemini knows).
const CUT_MARK: &str = "x-agent-surface-gemini-cut";

/// Integer and number formats that only say the value's width: the bounds `schemars` writes
/// with them (`minimum: 0` for unsigned types) are kept, and the registry checks the rest.
const WIDTH_FORMATS: &[&str] = &[
    "int", "int8", "int16", "int32", "int64", "int128", "uint", "uint8", "uint16", "uint32", "uint64", "uint128",
    "float", "double",
];

/// Keywords Gemini has no equivalent for that constrain which values are valid.
const GEMINI_DROPPED_CONSTRAINTS: &[&str] = &["exclusiveMinimum", "exclusiveMaximum", "multipleOf", "uniqueItems"];

/// What [`gemini_node`] will lose of one subschema (its `$ref`s inlined) at `pointer`. A map
/// whose value type is dropped adds its `additionalProperties` to `dropped`.
fn gemini_losses(node: &Value, pointer: &str, losses: &mut Vec<(String, LossKind)>, dropped: &mut Vec<String>) {
    let Some(obj) = node.as_object() else { return };
    let mut lose = |kind: LossKind| losses.push((pointer.to_string(), kind));
    if let Some(cut) = obj.get(CUT_MARK) {
        let depth = cut.get("depth").and_then(Value::as_u64).map_or(0, |d| d as usize);
        let reference = cut.get("ref").and_then(Value::as_str).unwrap_or_default().to_string();
        lose(match cut.get("why").and_then(Value::as_str) {
            Some("recursion") => LossKind::RecursionCut { reference, depth },
            Some("depth") => LossKind::DepthCut { reference, depth },
            _ => LossKind::UnresolvedRef { reference },
        });
    }
    let types: Vec<&str> = match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect(),
        _ => Vec::new(),
    };
    let no_properties = obj.get("properties").and_then(Value::as_object).is_none_or(Map::is_empty);
    match obj.get("additionalProperties") {
        Some(Value::Object(value)) if value.keys().any(|k| !matches!(k.as_str(), "title" | "description")) => {
            lose(LossKind::MapValueType);
            dropped.push(format!("{pointer}/additionalProperties"));
        }
        Some(Value::Bool(false)) => {}
        // An open object with nothing declared (at the root: no parameters, which is what it
        // tells the model anyway).
        _ if types.contains(&"object") && no_properties && !pointer.is_empty() => lose(LossKind::UntypedObject),
        _ => {}
    }
    for keyword in GEMINI_DROPPED_CONSTRAINTS {
        if obj.get(*keyword).is_some_and(|v| v != &Value::Bool(false)) {
            lose(LossKind::Keyword { keyword: (*keyword).to_string() });
        }
    }
    if let Some(format) = obj.get("format").and_then(Value::as_str) {
        let gemini = match types.as_slice() {
            [one] => gemini_type(one),
            _ => None,
        };
        let width = matches!(gemini, Some("INTEGER" | "NUMBER")) && WIDTH_FORMATS.contains(&format);
        if !gemini_format_ok(gemini, format) && !width {
            lose(LossKind::Format { format: format.to_string() });
        }
    }
}

/// Replaces each `$ref` by its target's keywords (the referring schema's own keywords win), then
/// goes on into the result. A reference already being expanded on this path (recursion), one
/// [`GEMINI_MAX_REF_DEPTH`] expansions deep, or one that does not resolve is cut: the schema
/// stays untyped and keeps its description, or its target's.
struct InlineRefs<'a> {
    /// The original document, which `$ref`s are resolved against.
    root: &'a Value,
    /// The targets (decoded JSON Pointers) expanded on the current path.
    expanding: Vec<String>,
}

impl Transform for InlineRefs<'_> {
    fn transform(&mut self, schema: &mut Schema) {
        let depth = self.expanding.len();
        while let Some(map) = schema.as_object_mut()
            && let Some(Value::String(reference)) = map.remove("$ref")
        {
            let target = ref_pointer(&reference).and_then(|p| Some((p.to_string(), self.root.pointer(&p)?)));
            match target {
                Some((pointer, target))
                    if !self.expanding.contains(&pointer) && self.expanding.len() < GEMINI_MAX_REF_DEPTH =>
                {
                    self.expanding.push(pointer);
                    for (keyword, value) in target.as_object().into_iter().flatten() {
                        if !matches!(keyword.as_str(), "$defs" | "definitions" | "$schema" | "$id") {
                            map.entry(keyword.clone()).or_insert_with(|| value.clone());
                        }
                    }
                }
                target => {
                    let why = match &target {
                        None => "unresolved",
                        Some((pointer, _)) if self.expanding.contains(pointer) => "recursion",
                        Some(_) => "depth",
                    };
                    let cut = json!({"why": why, "ref": reference, "depth": self.expanding.len()});
                    map.insert(CUT_MARK.into(), cut);
                    if !map.contains_key("description")
                        && let Some(description) = target.and_then(|(_, t)| t.get("description"))
                    {
                        map.insert("description".into(), description.clone());
                    }
                }
            }
        }
        transform_subschemas(self, schema);
        self.expanding.truncate(depth);
    }
}

/// Rewrites a schema (with its `$ref`s inlined) into Gemini's dialect, subschemas first.
fn to_gemini(schema: &mut Schema) {
    transform_subschemas(&mut to_gemini, schema);
    *schema = Schema::from(gemini_node(schema.as_value()));
}

/// A converted subschema, or an untyped one where the member was not a schema.
fn converted_or_untyped(value: &Value) -> Value {
    if value.is_object() { value.clone() } else { Value::Object(Map::new()) }
}

/// Gemini's name for a JSON type (`null` has none: it becomes `nullable`).
fn gemini_type(t: &str) -> Option<&'static str> {
    Some(match t {
        "string" => "STRING",
        "number" => "NUMBER",
        "integer" => "INTEGER",
        "boolean" => "BOOLEAN",
        "array" => "ARRAY",
        "object" => "OBJECT",
        _ => return None,
    })
}

/// Whether Gemini defines `format` for its type.
fn gemini_format_ok(gemini_type: Option<&str>, format: &str) -> bool {
    matches!(
        (gemini_type, format),
        (Some("STRING"), "enum" | "date-time")
            | (Some("NUMBER"), "float" | "double")
            | (Some("INTEGER"), "int32" | "int64")
    )
}

/// Appends a sentence to the description.
fn append_description(out: &mut Map<String, Value>, extra: &str) {
    let text = match out.get("description").and_then(Value::as_str) {
        Some(d) if !d.is_empty() => format!("{d} {extra}"),
        _ => extra.to_string(),
    };
    out.insert("description".into(), Value::String(text));
}

/// Values as a comma-separated list of JSON.
fn list_values(values: &[Value]) -> String {
    values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
}

/// One schema in Gemini's dialect; its subschemas (`properties`, `items`, `anyOf`/`oneOf`
/// members) are already converted, its `$ref`s already inlined.
fn gemini_node(node: &Value) -> Map<String, Value> {
    let Some(obj) = node.as_object() else { return Map::new() };
    let mut out = Map::new();

    // Types.
    let mut nullable = false;
    let mut types: Vec<&'static str> = Vec::new();
    match obj.get("type") {
        Some(Value::String(t)) if t == "null" => nullable = true,
        Some(Value::String(t)) => types.extend(gemini_type(t)),
        Some(Value::Array(ts)) => {
            for t in ts.iter().filter_map(Value::as_str) {
                if t == "null" {
                    nullable = true;
                } else {
                    types.extend(gemini_type(t));
                }
            }
        }
        _ => {}
    }
    match types.as_slice() {
        [] => {}
        [one] => {
            out.insert("type".into(), json!(one));
        }
        many => {
            out.insert("anyOf".into(), Value::Array(many.iter().map(|t| json!({"type": t})).collect()));
        }
    }

    for key in GEMINI_KEEP {
        if let Some(v) = obj.get(*key) {
            out.insert((*key).into(), v.clone());
        }
    }
    if let Some(first) = obj.get("examples").and_then(Value::as_array).and_then(|e| e.first()) {
        out.insert("example".into(), first.clone());
    }

    // Enumerations.
    let mut values: Option<Vec<Value>> = obj.get("enum").and_then(Value::as_array).cloned();
    if let Some(c) = obj.get("const") {
        values = Some(vec![c.clone()]);
    }
    if let Some(mut values) = values {
        if values.iter().any(Value::is_null) {
            nullable = true;
            values.retain(|v| !v.is_null());
        }
        if !values.is_empty() && values.iter().all(Value::is_string) {
            out.insert("type".into(), json!("STRING"));
            out.insert("format".into(), json!("enum"));
            out.insert("enum".into(), Value::Array(values));
        } else if !values.is_empty() {
            append_description(&mut out, &format!("Allowed values: {}.", list_values(&values)));
        }
    }

    // Object members.
    if let Some(properties) = obj.get("properties").and_then(Value::as_object) {
        let converted: Map<String, Value> =
            properties.iter().map(|(k, v)| (k.clone(), converted_or_untyped(v))).collect();
        out.insert("properties".into(), Value::Object(converted));
        if let Some(required) = obj.get("required").and_then(Value::as_array) {
            let kept: Vec<Value> =
                required.iter().filter(|r| r.as_str().is_some_and(|r| properties.contains_key(r))).cloned().collect();
            if !kept.is_empty() {
                out.insert("required".into(), Value::Array(kept));
            }
        }
    }
    if let Some(items) = obj.get("items") {
        out.insert("items".into(), converted_or_untyped(items));
    }

    // Alternatives.
    let members: Vec<&Value> =
        ["anyOf", "oneOf"].iter().filter_map(|k| obj.get(*k)).filter_map(Value::as_array).flatten().collect();
    if !members.is_empty() {
        let mut converted: Vec<Map<String, Value>> = Vec::new();
        for m in members {
            match m {
                // A `{"type": "null"}` member, converted.
                Value::Object(m) if m.len() == 1 && m.get("nullable") == Some(&Value::Bool(true)) => nullable = true,
                Value::Object(m) => converted.push(m.clone()),
                _ => converted.push(Map::new()),
            }
        }
        merge_alternatives(&mut out, converted, &mut nullable);
    }

    // Formats Gemini defines, for the type it ends up with.
    if let Some(format) = obj.get("format").and_then(Value::as_str)
        && !out.contains_key("format")
        && gemini_format_ok(out.get("type").and_then(Value::as_str), format)
    {
        out.insert("format".into(), json!(format));
    }
    if nullable {
        out.insert("nullable".into(), json!(true));
    }
    // An object with nothing declared: Gemini rejects `OBJECT` without properties.
    if out.get("type").and_then(Value::as_str) == Some("OBJECT")
        && out.get("properties").and_then(Value::as_object).is_none_or(Map::is_empty)
    {
        out.remove("type");
        out.remove("properties");
        out.remove("required");
    }
    out
}

/// Folds converted `anyOf`/`oneOf` members into `out`.
fn merge_alternatives(out: &mut Map<String, Value>, mut members: Vec<Map<String, Value>>, nullable: &mut bool) {
    if members.is_empty() {
        return;
    }
    if members.len() == 1 {
        let only = members.remove(0);
        for (k, v) in only {
            if k == "nullable" {
                *nullable |= v == Value::Bool(true);
            } else if k == "description" && out.contains_key("description") {
                continue;
            } else {
                out.insert(k, v);
            }
        }
        return;
    }
    // Documented string constants (how `schemars` writes enums with doc comments): one enum.
    let all_string_enums = members.iter().all(|m| {
        m.get("format").and_then(Value::as_str) == Some("enum")
            && m.get("properties").is_none()
            && m.get("anyOf").is_none()
    });
    if all_string_enums {
        let mut values = Vec::new();
        let mut notes = Vec::new();
        for m in &members {
            let these = m.get("enum").and_then(Value::as_array).cloned().unwrap_or_default();
            if let Some(d) = m.get("description").and_then(Value::as_str) {
                notes.push(format!("{}: {d}", list_values(&these)));
            }
            values.extend(these);
        }
        out.insert("type".into(), json!("STRING"));
        out.insert("format".into(), json!("enum"));
        out.insert("enum".into(), Value::Array(values));
        if !notes.is_empty() {
            append_description(out, &notes.join("; "));
        }
        return;
    }
    out.insert("anyOf".into(), Value::Array(members.into_iter().map(Value::Object).collect()));
}

// ---- Losses -----------------------------------------------------------------------------------

/// What a conversion loses at one place of a schema.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossKind {
    /// A map's value type: an object with `additionalProperties: <schema>` (a `HashMap<String,
    /// T>`) is sent without it, so the model does not know what the values are.
    MapValueType,
    /// A recursive type, cut where it refers to itself: below, the value is sent untyped (with
    /// the description only).
    RecursionCut {
        /// The `$ref` that was not followed again.
        reference: String,
        /// How many `$ref`s had been followed on the path to the cut.
        depth: usize,
    },
    /// A chain of `$ref`s deeper than the conversion follows, cut: below, the value is sent
    /// untyped.
    DepthCut {
        /// The `$ref` that was not followed.
        reference: String,
        /// How many `$ref`s had been followed on the path to the cut.
        depth: usize,
    },
    /// A `$ref` that does not resolve, sent untyped (the registry refuses such schemas, so only
    /// a schema from elsewhere has one).
    UnresolvedRef {
        /// The reference.
        reference: String,
    },
    /// An object with no declared properties (not the root), sent untyped: the model does not
    /// know it must be an object.
    UntypedObject,
    /// A constraint keyword the dialect lacks (`exclusiveMinimum`, `exclusiveMaximum`,
    /// `multipleOf`, `uniqueItems`), dropped.
    Keyword {
        /// The keyword.
        keyword: String,
    },
    /// A string format the dialect does not define (`uuid`, `email`, `date`, …), dropped.
    /// Integer and number width formats (`uint64`, `double`, …) are not losses: their bounds
    /// are kept.
    Format {
        /// The format.
        format: String,
    },
}

impl fmt::Display for LossKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossKind::MapValueType => f.write_str("the map's value type (`additionalProperties`) is dropped"),
            LossKind::RecursionCut { reference, depth } => {
                write!(f, "the recursive type {reference} is cut after {depth} `$ref`s and sent untyped")
            }
            LossKind::DepthCut { reference, depth } => {
                write!(f, "{reference} is past the {depth} `$ref`s followed, cut and sent untyped")
            }
            LossKind::UnresolvedRef { reference } => write!(f, "{reference} does not resolve and is sent untyped"),
            LossKind::UntypedObject => f.write_str("an object with no declared properties is sent untyped"),
            LossKind::Keyword { keyword } => write!(f, "`{keyword}` is dropped"),
            LossKind::Format { format } => write!(f, "format `{format}` is dropped"),
        }
    }
}
