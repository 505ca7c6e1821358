//! Input schemas in each provider's dialect.
//!
//! The registry advertises draft 2020-12 schemas in its portable subset
//! ([`agent_surface_registry::schema`]): `$defs`/`$ref`, `anyOf`/`oneOf`, type arrays, the usual
//! limits and annotations. OpenAI and Anthropic take them as they are (minus `$schema`); OpenAI's
//! strict mode takes only a stricter subset ([`openai_strict_eligible`]); Gemini takes either an
//! OpenAPI 3.0 subset in which every node has a type (`parameters`, [`gemini_schema`]) or a JSON
//! Schema (`parametersJsonSchema`), and [`gemini_parameters`] picks the one that carries the
//! schema best and rewrites it.
//!
//! Neither walks schemas by hand: the strict check is a visit of
//! [`agent_surface_registry::schema::visit_subschemas`], the Gemini conversion `schemars`
//! transforms (inline `$ref`s, then rewrite each subschema bottom-up into one dialect or the
//! other), and every `$ref` is read by the registry's one resolver
//! ([`agent_surface_registry::schema::resolve_ref`]), so a reference the registry accepted
//! resolves here too.

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

/// The deepest nesting strict mode accepts, counted in subschema levels (a property, an `items`, an
/// `anyOf` member each add one; a definition counts from itself).
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

/// Where a Gemini function declaration carries its parameters, and the schema it carries.
///
/// Gemini's `FunctionDeclaration` takes the parameters in one of two mutually exclusive members:
/// `parameters`, an OpenAPI 3.0 `Schema` in which every node must have a `type` (Gemini refuses
/// the whole request otherwise, every tool with it), or `parametersJsonSchema`, a JSON Schema.
/// [`gemini_parameters`] sends `parameters` whenever it carries the input schema as well as
/// `parametersJsonSchema` would, and `parametersJsonSchema` for the rest: a schema with a node
/// that has no type in `parameters` (any value, a map, an object with no declared properties, a
/// recursive type cut at its recursion) or a map whose value type `parameters` would drop.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GeminiParameters {
    /// `parameters`: Gemini's OpenAPI 3.0 `Schema` (upper-case types, `nullable`), every node
    /// with a `type` (or an `anyOf` of typed members).
    Schema(Value),
    /// `parametersJsonSchema`: a JSON Schema of the keywords Gemini documents, every node with a
    /// `type` (or an `anyOf` of typed members); "any value" is spelled as the `anyOf` of every
    /// JSON type, so it is the same set of values.
    JsonSchema(Value),
}

impl GeminiParameters {
    /// The member of the function declaration that carries the schema: `"parameters"` or
    /// `"parametersJsonSchema"`.
    pub const fn member(&self) -> &'static str {
        match self {
            GeminiParameters::Schema(_) => "parameters",
            GeminiParameters::JsonSchema(_) => "parametersJsonSchema",
        }
    }

    /// The schema.
    pub const fn schema(&self) -> &Value {
        match self {
            GeminiParameters::Schema(schema) | GeminiParameters::JsonSchema(schema) => schema,
        }
    }

    /// The schema, owned.
    pub fn into_schema(self) -> Value {
        match self {
            GeminiParameters::Schema(schema) | GeminiParameters::JsonSchema(schema) => schema,
        }
    }
}

/// The parameters of Gemini's function declaration for an input schema, or `None` when the
/// function takes no parameters (a root without properties; Gemini rejects an `OBJECT` with no
/// properties, and an absent member means "no parameters").
///
/// Both forms start alike: `$ref` is inlined from `$defs` / `definitions`, read by the registry's
/// resolver ([`agent_surface_registry::schema::resolve_ref`]: percent-encoded and
/// `~0`/`~1`-escaped names resolve as the registry's validators resolve them; a keyword beside
/// the `$ref` wins over its target's, except `properties` and `required`, which add up); a
/// recursive reference, one nested deeper than 8 expansions, or one that does not resolve is cut,
/// keeping its target's `type` and description only; `$schema`, `$id`, `$defs` and `definitions`
/// are dropped. Then:
///
/// - **`parameters`** ([`GeminiParameters::Schema`], as [`gemini_schema`] describes) when every
///   node of the conversion has a type and no map loses its value type;
/// - **`parametersJsonSchema`** ([`GeminiParameters::JsonSchema`]) otherwise. It keeps the
///   keywords Gemini documents for its JSON Schema members or defines in its `Schema` object:
///   `type` (`"null"` included; a single type with `"null"` stays a type array, several become
///   `anyOf`), `properties`, `required`, `additionalProperties` (a map keeps its value type),
///   `items`, `anyOf` (`oneOf` becomes `anyOf`), `enum` of strings or of numbers (`const` becomes
///   a one-value `enum`; other values are listed in the description), `title`, `description`,
///   `default`, the length, size and range limits, and the formats [`gemini_schema`] keeps. A node
///   with no type (`true`, `{}`, a cut reference without a typed target) becomes the `anyOf` of
///   every JSON type: the same set of values, so the value the model sends reaches the handler as
///   it is, and every node has a type. `false` members are left out (`items: false` becomes
///   `maxItems: 0`).
///
/// What either form loses ([`LossKind`]: a cut reference, `exclusiveMinimum`/`exclusiveMaximum`/
/// `multipleOf`/`uniqueItems`, a string format other than `date-time`) is reported by
/// [`crate::lossy_conversions`] and warned about by the tool definitions; the registry still
/// validates every call against the whole schema.
///
/// ```
/// use agent_surface_toolset::{GeminiParameters, gemini_parameters};
/// use serde_json::json;
///
/// // Typed throughout: `parameters`.
/// let typed = json!({"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]});
/// assert_eq!(gemini_parameters(&typed), Some(GeminiParameters::Schema(json!({
///     "type": "OBJECT", "properties": {"sku": {"type": "STRING"}}, "required": ["sku"]
/// }))));
///
/// // Any value (a `serde_json::Value` field) and a map: `parametersJsonSchema`.
/// let open = json!({"type": "object", "properties": {
///     "payload": true,
///     "weights": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}
/// }});
/// let any = json!([{"type": "string"}, {"type": "number"}, {"type": "boolean"},
///                  {"type": "object"}, {"type": "array"}, {"type": "null"}]);
/// let parameters = gemini_parameters(&open).unwrap();
/// assert_eq!(parameters.member(), "parametersJsonSchema");
/// assert_eq!(parameters.schema(), &json!({"type": "object", "properties": {
///     "payload": {"anyOf": any},
///     "weights": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}
/// }}));
///
/// // No parameters: no member.
/// assert_eq!(gemini_parameters(&json!({"type": "object", "properties": {}})), None);
/// ```
pub fn gemini_parameters(schema: &Value) -> Option<GeminiParameters> {
    gemini_conversion(schema).0
}

/// The `parameters` member of Gemini's function declaration for an input schema: the schema
/// converted to the OpenAPI 3.0 subset of Gemini's `Schema` object, every node typed. `None` when
/// the declaration has no `parameters` member: the function takes no parameters, or its schema
/// goes as `parametersJsonSchema` because `parameters` cannot carry it ([`gemini_parameters`]
/// answers which).
///
/// The conversion, after the `$ref`s are inlined ([`gemini_parameters`]):
///
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
///   `uniqueItems`, `readOnly`, `writeOnly`, `deprecated`, `x-…` and anything else are dropped.
///
/// A node left without a type (any value, an object with no properties left, a cut reference),
/// or a map whose value type would be dropped, sends the whole schema as `parametersJsonSchema`
/// instead: Gemini requires a type on every node of `parameters` and refuses the whole request
/// otherwise.
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
///
/// // A `serde_json::Value` field has no type in `parameters`: the schema goes as
/// // `parametersJsonSchema`, and there is no `parameters` member.
/// assert_eq!(gemini_schema(&json!({"type": "object", "properties": {"payload": {}}})), None);
/// ```
pub fn gemini_schema(schema: &Value) -> Option<Value> {
    match gemini_parameters(schema)? {
        GeminiParameters::Schema(schema) => Some(schema),
        GeminiParameters::JsonSchema(_) => None,
    }
}

/// The two dialects of Gemini's function parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    /// `parameters`: the OpenAPI 3.0 subset ([`to_gemini`]).
    OpenApi,
    /// `parametersJsonSchema` ([`to_gemini_json`]).
    JsonSchema,
}

/// [`gemini_parameters`], with what the chosen form loses: each loss with the JSON Pointer of its
/// subschema in the input schema, `$ref`s followed (the path of the value it describes, so
/// `/properties/tree/properties/children/items`, not `/$defs/Node/…`).
///
/// The losses are read from the schema with its `$ref`s inlined (cuts marked by [`InlineRefs`]),
/// before [`to_gemini`] or [`to_gemini_json`] rewrites it, by the registry's walk
/// ([`visit_subschemas`]).
pub(crate) fn gemini_conversion(schema: &Value) -> (Option<GeminiParameters>, Vec<(String, LossKind)>) {
    let mut work = schema.clone();
    if let Some(root) = work.as_object_mut() {
        // Inlined where they are used; resolved against the original document.
        root.remove("$defs");
        root.remove("definitions");
    }
    let Ok(tree) = <&mut Schema>::try_from(&mut work) else { return (None, Vec::new()) };
    InlineRefs { root: schema, expanding: Vec::new() }.transform(tree);
    let openapi_losses = dialect_losses(&work, Dialect::OpenApi);
    if !has_parameters(&work) {
        return (None, openapi_losses);
    }
    let mut openapi = work.clone();
    if let Ok(tree) = <&mut Schema>::try_from(&mut openapi) {
        to_gemini(tree);
    }
    let drops_map_types =
        openapi_losses.iter().any(|(_, kind)| matches!(kind, LossKind::MapValueType | LossKind::UntypedObject));
    if openapi_typed(&openapi) && !drops_map_types {
        return (Some(GeminiParameters::Schema(openapi)), openapi_losses);
    }
    let json_losses = dialect_losses(&work, Dialect::JsonSchema);
    if let Ok(tree) = <&mut Schema>::try_from(&mut work) {
        to_gemini_json(tree);
    }
    (Some(GeminiParameters::JsonSchema(work)), json_losses)
}

/// What `dialect` loses of a schema with its `$ref`s inlined, in the walk's order.
fn dialect_losses(inlined: &Value, dialect: Dialect) -> Vec<(String, LossKind)> {
    let mut losses = Vec::new();
    let mut dropped: Vec<String> = Vec::new();
    let _ = visit_subschemas(inlined, |node, at| {
        // Below a dropped map value type, everything is already reported as lost.
        if !dropped.iter().any(|d| at.pointer.starts_with(d.as_str())) {
            gemini_losses(node, at.pointer, dialect, &mut losses, &mut dropped);
        }
        Ok::<(), std::convert::Infallible>(())
    });
    losses
}

/// Whether a function with this input schema (its `$ref`s inlined) takes parameters: the root is
/// an object schema with properties, or a map (`additionalProperties: <schema>`). An open object
/// with nothing declared says "no parameters" as well as an absent member does.
fn has_parameters(inlined: &Value) -> bool {
    let Some(root) = inlined.as_object() else { return false };
    let object = match root.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => false,
    };
    let properties = root.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty());
    let map = root.get("additionalProperties").is_some_and(Value::is_object);
    object && (properties || map)
}

/// Whether every node of a converted `parameters` schema has a `type`, or an `anyOf` whose members
/// all have one, and every `ARRAY` its `items`: what Gemini requires of `parameters`.
fn openapi_typed(node: &Value) -> bool {
    let Some(obj) = node.as_object() else { return false };
    let members = match obj.get("anyOf") {
        None => None,
        Some(Value::Array(members)) if !members.is_empty() => Some(members),
        Some(_) => return false,
    };
    let typed = match obj.get("type") {
        Some(Value::String(t)) => t != "ARRAY" || obj.contains_key("items"),
        Some(_) => false,
        None => members.is_some(),
    };
    typed
        && members.is_none_or(|m| m.iter().all(openapi_typed))
        && obj.get("properties").and_then(Value::as_object).is_none_or(|p| p.values().all(openapi_typed))
        && obj.get("items").is_none_or(openapi_typed)
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

/// What `dialect` will lose of one subschema (its `$ref`s inlined) at `pointer`. A map whose
/// value type `parameters` drops adds its `additionalProperties` to `dropped`.
fn gemini_losses(
    node: &Value,
    pointer: &str,
    dialect: Dialect,
    losses: &mut Vec<(String, LossKind)>,
    dropped: &mut Vec<String>,
) {
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
    // `parametersJsonSchema` keeps maps and open objects as they are.
    match obj.get("additionalProperties") {
        _ if dialect == Dialect::JsonSchema => {}
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

/// Replaces each `$ref` by its target's keywords (the referring schema's own keywords win, but
/// `properties` and `required` are joined), then goes on into the result. A reference already being expanded on this path (recursion), one
/// [`GEMINI_MAX_REF_DEPTH`] expansions deep, or one that does not resolve is cut: the schema
/// keeps its own keywords, and takes its target's `type` and description where it has none.
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
                        if matches!(keyword.as_str(), "$defs" | "definitions" | "$schema" | "$id") {
                            continue;
                        }
                        match (map.get_mut(keyword), value) {
                            // Both hold: their properties and requirements add up, so the
                            // target's `additionalProperties` still sees the referring schema's
                            // properties (keeping only one side would refuse a valid member).
                            (Some(Value::Object(own)), Value::Object(theirs)) if keyword == "properties" => {
                                for (name, property) in theirs {
                                    own.entry(name.clone()).or_insert_with(|| property.clone());
                                }
                            }
                            (Some(Value::Array(own)), Value::Array(theirs)) if keyword == "required" => {
                                for name in theirs {
                                    if !own.contains(name) {
                                        own.push(name.clone());
                                    }
                                }
                            }
                            (Some(_), _) => {}
                            (None, _) => {
                                map.insert(keyword.clone(), value.clone());
                            }
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
                    for keyword in ["type", "description"] {
                        if !map.contains_key(keyword)
                            && let Some(value) = target.as_ref().and_then(|(_, t)| t.get(keyword))
                        {
                            map.insert(keyword.into(), value.clone());
                        }
                    }
                }
            }
        }
        transform_subschemas(self, schema);
        self.expanding.truncate(depth);
    }
}

/// Rewrites a schema (with its `$ref`s inlined) into Gemini's OpenAPI dialect (`parameters`),
/// subschemas first.
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

/// The types a schema declares apart from `null`, as written and in order (names Gemini lacks and
/// repeats included, non-strings left out), and whether it declares `null`. Read alike for both
/// dialects; what each makes of them is its own.
fn declared_types(obj: &Map<String, Value>) -> (Vec<&str>, bool) {
    let declared: Vec<&str> = match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let nullable = declared.contains(&"null");
    (declared.into_iter().filter(|t| *t != "null").collect(), nullable)
}

/// The values a schema enumerates, `null` taken out, and whether `null` was among them: its
/// `const` as a one-value enumeration, else its `enum`; `None` when it has neither (or an `enum`
/// that is not an array).
fn enum_values(obj: &Map<String, Value>) -> Option<(Vec<Value>, bool)> {
    let mut values = match obj.get("const") {
        Some(c) => vec![c.clone()],
        None => obj.get("enum").and_then(Value::as_array).cloned()?,
    };
    let null = values.iter().any(Value::is_null);
    values.retain(|v| !v.is_null());
    Some((values, null))
}

/// Copies the [`GEMINI_KEEP`] keywords a schema has into `out`, as they are.
fn copy_kept(obj: &Map<String, Value>, out: &mut Map<String, Value>) {
    for key in GEMINI_KEEP {
        if let Some(v) = obj.get(*key) {
            out.insert((*key).into(), v.clone());
        }
    }
}

/// The names in a schema's `required` that are among `properties` (the members its dialect
/// sends), in their order, or `None` when there are none.
fn required_among(obj: &Map<String, Value>, properties: &Map<String, Value>) -> Option<Value> {
    let required = obj.get("required")?.as_array()?;
    let kept: Vec<Value> =
        required.iter().filter(|r| r.as_str().is_some_and(|r| properties.contains_key(r))).cloned().collect();
    (!kept.is_empty()).then_some(Value::Array(kept))
}

/// One schema in Gemini's dialect; its subschemas (`properties`, `items`, `anyOf`/`oneOf`
/// members) are already converted, its `$ref`s already inlined.
fn gemini_node(node: &Value) -> Map<String, Value> {
    let Some(obj) = node.as_object() else { return Map::new() };
    let mut out = Map::new();

    // Types.
    let (declared, mut nullable) = declared_types(obj);
    let types: Vec<&'static str> = declared.iter().filter_map(|t| gemini_type(t)).collect();
    match types.as_slice() {
        [] => {}
        [one] => {
            out.insert("type".into(), json!(one));
        }
        many => {
            out.insert("anyOf".into(), Value::Array(many.iter().map(|t| json!({"type": t})).collect()));
        }
    }

    copy_kept(obj, &mut out);
    if let Some(first) = obj.get("examples").and_then(Value::as_array).and_then(|e| e.first()) {
        out.insert("example".into(), first.clone());
    }

    // Enumerations. `type` and `enum` both hold: null is allowed where each allows it.
    if let Some((values, null)) = enum_values(obj) {
        nullable = null && (nullable || declared.is_empty());
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
        if let Some(required) = required_among(obj, properties) {
            out.insert("required".into(), required);
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

// ---- Gemini: parametersJsonSchema ----------------------------------------------------------------

/// Every JSON type, each once (`integer` is a `number`): an `anyOf` of them is "any value".
const ANY_TYPES: &[&str] = &["string", "number", "boolean", "object", "array", "null"];

/// "Any value" as a typed schema: the `anyOf` of every JSON type.
fn any_value() -> Map<String, Value> {
    let members = ANY_TYPES.iter().map(|t| json!({"type": t})).collect();
    Map::from_iter([("anyOf".to_string(), Value::Array(members))])
}

/// Whether a converted schema is [`any_value`], annotations aside.
fn is_any_value(node: &Map<String, Value>) -> bool {
    node.get("anyOf") == any_value().get("anyOf")
        && node.keys().all(|k| matches!(k.as_str(), "anyOf" | "title" | "description" | "default"))
}

/// A converted subschema, or [`any_value`] where the member was `true`.
fn converted_or_any(value: &Value) -> Value {
    if value.is_object() { value.clone() } else { Value::Object(any_value()) }
}

/// Rewrites a schema (with its `$ref`s inlined) into the JSON Schema of `parametersJsonSchema`,
/// subschemas first. Boolean subschemas are left to their parent ([`gemini_json_node`]).
fn to_gemini_json(schema: &mut Schema) {
    transform_subschemas(&mut to_gemini_json, schema);
    if schema.as_object().is_some() {
        *schema = Schema::from(gemini_json_node(schema.as_value()));
    }
}

/// One schema for `parametersJsonSchema`; its subschemas are already converted (booleans left as
/// they are), its `$ref`s already inlined. Every node it returns has a `type`, or an `anyOf` of
/// members that have one: a node without a type becomes [`any_value`].
fn gemini_json_node(node: &Value) -> Map<String, Value> {
    let Some(obj) = node.as_object() else { return any_value() };
    let mut out = Map::new();

    // Types (`null` apart). `nullable` is an annotation the registry's validators do not read,
    // so it allows no null here either.
    let (declared, mut nullable) = declared_types(obj);
    let mut types: Vec<&str> = Vec::new();
    for t in &declared {
        if gemini_type(t).is_some() && !types.contains(t) {
            types.push(t);
        }
    }
    let mut only_null = nullable && declared.is_empty();

    copy_kept(obj, &mut out);

    // Enumerations: strings or numbers; other values are listed in the description.
    let mut enumeration: Option<Value> = None;
    if let Some((values, null)) = enum_values(obj) {
        // `type` and `enum` both hold: null is allowed where each allows it.
        nullable = null && (nullable || declared.is_empty());
        only_null = nullable && values.is_empty() && types.is_empty();
        let strings = values.iter().all(Value::is_string);
        let numbers = values.iter().all(Value::is_number);
        if !values.is_empty() && (strings || numbers) {
            if types.is_empty() {
                let integers = values.iter().all(|v| v.is_i64() || v.is_u64());
                types.push(if strings {
                    "string"
                } else if integers {
                    "integer"
                } else {
                    "number"
                });
            }
            enumeration = Some(Value::Array(values));
        } else if !values.is_empty() {
            if types.is_empty() && values.iter().all(Value::is_boolean) {
                types.push("boolean");
            }
            append_description(&mut out, &format!("Allowed values: {}.", list_values(&values)));
        }
    }

    // Object members; a `false` property is left out (the model has no reason to send it).
    if let Some(properties) = obj.get("properties").and_then(Value::as_object) {
        let kept: Map<String, Value> = properties
            .iter()
            .filter(|(_, v)| **v != Value::Bool(false))
            .map(|(k, v)| (k.clone(), converted_or_any(v)))
            .collect();
        if let Some(required) = required_among(obj, &kept) {
            out.insert("required".into(), required);
        }
        out.insert("properties".into(), Value::Object(kept));
    }
    match obj.get("additionalProperties") {
        Some(Value::Object(value)) => {
            out.insert("additionalProperties".into(), Value::Object(value.clone()));
        }
        Some(Value::Bool(open)) => {
            out.insert("additionalProperties".into(), Value::Bool(*open));
        }
        _ => {}
    }
    match obj.get("items") {
        Some(Value::Bool(false)) => {
            out.insert("maxItems".into(), json!(0));
        }
        Some(items) => {
            out.insert("items".into(), converted_or_any(items));
        }
        None => {}
    }

    // Alternatives: `oneOf` is read as `anyOf`; a member that is any value makes the whole
    // alternative any value.
    let mut members: Vec<Value> = Vec::new();
    let mut open = false;
    for member in ["anyOf", "oneOf"].iter().filter_map(|k| obj.get(*k)).filter_map(Value::as_array).flatten() {
        match member {
            Value::Bool(false) => {}
            Value::Object(m) if !is_any_value(m) => members.push(member.clone()),
            _ => open = true,
        }
    }
    if open {
        members.clear();
    }

    if types.is_empty() && members.is_empty() {
        if only_null {
            out.insert("type".into(), json!("null"));
        } else {
            out.extend(any_value());
        }
        return out;
    }

    // Formats Gemini defines, for the one type the value has.
    if let Some(format) = obj.get("format").and_then(Value::as_str)
        && let [one] = types.as_slice()
        && gemini_format_ok(gemini_type(one), format)
    {
        out.insert("format".into(), json!(format));
    }

    if members.is_empty() {
        match (types.as_slice(), nullable, enumeration) {
            ([one], false, enumeration) => {
                out.insert("type".into(), json!(one));
                if let Some(values) = enumeration {
                    out.insert("enum".into(), values);
                }
            }
            ([one], true, None) => {
                out.insert("type".into(), json!([one, "null"]));
            }
            // Several types, or an enumeration that is also nullable: one member per type.
            (many, _, enumeration) => {
                members = many
                    .iter()
                    .map(|t| {
                        let mut member = Map::from_iter([("type".to_string(), json!(t))]);
                        if let Some(values) = &enumeration {
                            member.insert("enum".into(), values.clone());
                        }
                        Value::Object(member)
                    })
                    .collect();
            }
        }
    } else if !types.is_empty() {
        // `type` and `anyOf` both hold.
        let mut all = types.clone();
        if nullable {
            all.push("null");
        }
        out.insert("type".into(), if let [one] = all.as_slice() { json!(one) } else { json!(all) });
        if let Some(mut values) = enumeration {
            // The values held apart from null, which the type allows: listed again with them.
            if let (true, Value::Array(values)) = (nullable, &mut values) {
                values.push(Value::Null);
            }
            out.insert("enum".into(), values);
        }
    }
    if !members.is_empty() {
        let null = json!({"type": "null"});
        if nullable && !members.contains(&null) {
            members.push(null);
        }
        out.insert("anyOf".into(), Value::Array(members));
    }
    out
}

// ---- Losses -----------------------------------------------------------------------------------

/// What a conversion loses at one place of a schema.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossKind {
    /// A map's value type: an object with `additionalProperties: <schema>` (a `HashMap<String,
    /// T>`) is sent without it, so the model does not know what the values are. Gemini's
    /// `parameters` would lose it; such a schema goes as `parametersJsonSchema`, which keeps it,
    /// so Gemini's definitions no longer report it ([`crate::gemini_parameters`]).
    MapValueType,
    /// A recursive type, cut where it refers to itself: below, the value is sent with its type
    /// and description only (any value when its definition has no `type`).
    RecursionCut {
        /// The `$ref` that was not followed again.
        reference: String,
        /// How many `$ref`s had been followed on the path to the cut.
        depth: usize,
    },
    /// A chain of `$ref`s deeper than the conversion follows, cut: below, the value is sent
    /// with its type and description only.
    DepthCut {
        /// The `$ref` that was not followed.
        reference: String,
        /// How many `$ref`s had been followed on the path to the cut.
        depth: usize,
    },
    /// A `$ref` that does not resolve, sent as any value (the registry refuses such schemas, so
    /// only a schema from elsewhere has one).
    UnresolvedRef {
        /// The reference.
        reference: String,
    },
    /// An object with no declared properties (not the root), sent untyped: the model does not
    /// know it must be an object. Gemini's `parameters` would lose it; such a schema goes as
    /// `parametersJsonSchema`, which keeps it, so Gemini's definitions no longer report it.
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
                write!(f, "the recursive type {reference} is cut after {depth} `$ref`s (sent with its type only)")
            }
            LossKind::DepthCut { reference, depth } => {
                write!(f, "{reference} is past the {depth} `$ref`s followed, cut (sent with its type only)")
            }
            LossKind::UnresolvedRef { reference } => write!(f, "{reference} does not resolve and is sent as any value"),
            LossKind::UntypedObject => f.write_str("an object with no declared properties is sent untyped"),
            LossKind::Keyword { keyword } => write!(f, "`{keyword}` is dropped"),
            LossKind::Format { format } => write!(f, "format `{format}` is dropped"),
        }
    }
}
