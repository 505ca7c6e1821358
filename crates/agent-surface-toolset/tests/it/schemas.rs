//! Schema dialects: which schemas qualify for OpenAI strict mode, and what Gemini receives.

use agent_surface_toolset::{GeminiParameters, gemini_parameters, gemini_schema, openai_strict_eligible};
use schemars::JsonSchema;
use serde_json::{Value, json};

use crate::support::assert_typed_throughout;

#[track_caller]
fn strict(schema: Value, expected: Result<(), &str>) {
    assert_eq!(openai_strict_eligible(&schema), expected.map_err(str::to_string), "{schema:#}");
}

fn object(properties: Value, required: Value) -> Value {
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

#[test]
fn strict_mode_eligibility() {
    strict(object(json!({}), json!([])), Ok(()));
    strict(object(json!({"a": {"type": "string", "format": "date-time", "pattern": "^2"}}), json!(["a"])), Ok(()));
    strict(
        json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "T", "type": "object",
               "properties": {"n": {"anyOf": [{"$ref": "#/$defs/N"}, {"type": "null"}]}}, "required": ["n"],
               "additionalProperties": false,
               "$defs": {"N": object(json!({"next": {"$ref": "#/$defs/N"}}), json!(["next"]))}}),
        Ok(()),
    );
    strict(json!({"type": "object", "properties": {}}), Err("at #: `additionalProperties` is not `false`"));
    strict(
        json!({"anyOf": [{"type": "object"}]}),
        Err("at #: the root must be `\"type\": \"object\"` and not `anyOf`"),
    );
    strict(json!(true), Err("at #: the root is not an object schema"));
    strict(object(json!({"a": {"type": "string"}}), json!([])), Err("at #: property `a` is not required"));
    strict(
        object(json!({"a": {"type": "string", "minLength": 1}}), json!(["a"])),
        Err("at #/properties/a: keyword `minLength` is not supported"),
    );
    strict(
        object(json!({"a": {"type": "string", "default": "x"}}), json!(["a"])),
        Err("at #/properties/a: keyword `default` is not supported"),
    );
    strict(
        object(json!({"a": {"oneOf": [{"type": "string"}]}}), json!(["a"])),
        Err("at #/properties/a: keyword `oneOf` is not supported"),
    );
    strict(
        object(json!({"a": {"type": "integer", "format": "uint32"}}), json!(["a"])),
        Err("at #/properties/a: format \"uint32\" is not supported"),
    );
    strict(
        object(
            json!({"a": {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}}),
            json!(["a"]),
        ),
        Err("at #/properties/a: `additionalProperties` is not `false`"),
    );
    strict(
        json!({"type": "object", "properties": {}, "additionalProperties": false,
               "$defs": {"D": {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": false}}}),
        Err("at #/$defs/D: property `x` is not required"),
    );
    strict(
        object(json!({"m": {"type": "object", "additionalProperties": {"type": "string"}}}), json!(["m"])),
        Err("at #/properties/m: `additionalProperties` is not `false`"),
    );
    strict(
        object(json!({"a": {"type": "string", "x-sensitive": true}}), json!(["a"])),
        Err("at #/properties/a: keyword `x-sensitive` is not supported"),
    );
    // References resolve with the registry's resolver; names in pointers are escaped.
    strict(
        json!({"type": "object", "properties": {"a/b": {"$ref": "#/$defs/A%20B"}}, "required": ["a/b"],
               "additionalProperties": false, "$defs": {"A B": {"type": "string"}}}),
        Ok(()),
    );
    strict(
        object(json!({"a/b": {"$ref": "#/$defs/Missing"}}), json!(["a/b"])),
        Err("at #/properties/a~1b: `$ref` #/$defs/Missing is not a local definition"),
    );
    strict(
        object(json!({"a": {"$ref": "#/properties/b"}, "b": {"type": "string"}}), json!(["a", "b"])),
        Err("at #/properties/a: `$ref` #/properties/b is not a local definition"),
    );
    strict(
        object(json!({"a": {"type": "array", "items": true}}), json!(["a"])),
        Err("at #/properties/a/items: boolean schemas are not supported"),
    );
    // Nesting deeper than 10 levels.
    let mut deep = object(json!({"leaf": {"type": "string"}}), json!(["leaf"]));
    for _ in 0..11 {
        deep = object(json!({"d": deep}), json!(["d"]));
    }
    assert!(openai_strict_eligible(&deep).unwrap_err().contains("nested deeper than 10 levels"));
    // Too many enum values.
    let values: Vec<String> = (0..1001).map(|i| format!("v{i}")).collect();
    strict(
        object(json!({"e": {"type": "string", "enum": values}}), json!(["e"])),
        Err("at #/properties/e: more than 1000 enum values"),
    );
}

#[track_caller]
fn gemini(schema: Value, expected: Option<Value>) {
    assert_eq!(gemini_schema(&schema), expected, "{schema:#}");
    if let Some(parameters) = &expected {
        assert_eq!(gemini_parameters(&schema), Some(GeminiParameters::Schema(parameters.clone())));
        assert_typed_throughout(parameters, "#");
    }
}

/// `schema` goes as `parametersJsonSchema`, `expected`, typed throughout.
#[track_caller]
fn gemini_json(schema: Value, expected: Value) {
    assert_eq!(gemini_parameters(&schema), Some(GeminiParameters::JsonSchema(expected.clone())), "{schema:#}");
    assert_eq!(gemini_schema(&schema), None, "no `parameters` member: {schema:#}");
    assert_typed_throughout(&expected, "#");
}

/// Any value, in `parametersJsonSchema`: every JSON type.
fn any() -> Value {
    json!([{"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "object"}, {"type": "array"},
           {"type": "null"}])
}

#[test]
fn gemini_conversion() {
    // Types, nullability, formats.
    gemini(
        json!({"type": "object", "properties": {
            "s": {"type": ["string", "null"], "format": "date-time", "maxLength": 9},
            "u": {"type": "integer", "format": "uint32", "minimum": 0},
            "f": {"type": "number", "format": "double", "exclusiveMinimum": 0, "multipleOf": 0.5},
            "m": {"type": ["integer", "string"]},
            "x": {"type": "string", "format": "email", "readOnly": true, "x-sensitive": true}
        }, "required": ["u", "zzz"], "additionalProperties": false}),
        Some(json!({"type": "OBJECT", "properties": {
            "s": {"type": "STRING", "nullable": true, "format": "date-time", "maxLength": 9},
            "u": {"type": "INTEGER", "minimum": 0},
            "f": {"type": "NUMBER", "format": "double"},
            "m": {"anyOf": [{"type": "INTEGER"}, {"type": "STRING"}]},
            "x": {"type": "STRING"}
        }, "required": ["u"]})),
    );
    // Enums and constants; non-string values go to the description.
    gemini(
        json!({"type": "object", "properties": {
            "unit": {"type": "string", "enum": ["c", "f"], "description": "Unit."},
            "level": {"type": "integer", "enum": [1, 2, 3]},
            "kind": {"const": "fixed"},
            "maybe": {"enum": ["a", null]},
            "documented": {"oneOf": [
                {"type": "string", "const": "asc", "description": "Ascending."},
                {"type": "string", "const": "desc", "description": "Descending."}
            ], "description": "Sort order."}
        }}),
        Some(json!({"type": "OBJECT", "properties": {
            "unit": {"type": "STRING", "format": "enum", "enum": ["c", "f"], "description": "Unit."},
            "level": {"type": "INTEGER", "description": "Allowed values: 1, 2, 3."},
            "kind": {"type": "STRING", "format": "enum", "enum": ["fixed"]},
            "maybe": {"type": "STRING", "format": "enum", "enum": ["a"], "nullable": true},
            "documented": {"type": "STRING", "format": "enum", "enum": ["asc", "desc"],
                           "description": "Sort order. \"asc\": Ascending.; \"desc\": Descending."}
        }})),
    );
    // $ref inlining, anyOf with null, examples.
    gemini(
        json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "Order", "type": "object",
        "properties": {
            "line": {"anyOf": [{"$ref": "#/$defs/Line"}, {"type": "null"}], "description": "The line."},
            "note": {"type": "string", "examples": ["gift", "asap"]},
            "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]}
        },
        "$defs": {
            "Line": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}
        }}),
        Some(json!({"title": "Order", "type": "OBJECT", "properties": {
            "line": {"type": "OBJECT", "properties": {"sku": {"type": "STRING"}}, "required": ["sku"],
                     "nullable": true, "description": "The line."},
            "note": {"type": "STRING", "example": "gift"},
            "either": {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]}
        }})),
    );
    // Percent-encoded and `~`-escaped references resolve as the registry resolves them: the
    // field keeps its type.
    gemini(
        json!({"type": "object", "properties": {
            "when": {"$ref": "#/$defs/Date%20time"},
            "path": {"$ref": "#/$defs/a~1b~0c", "description": "Own."}
        }, "$defs": {
            "Date time": {"type": "string", "format": "date-time"},
            "a/b~c": {"type": "integer", "description": "Theirs."}
        }}),
        Some(json!({"type": "OBJECT", "properties": {
            "when": {"type": "STRING", "format": "date-time"},
            "path": {"type": "INTEGER", "description": "Own."}
        }})),
    );
    // No parameters: no member.
    gemini(json!({"type": "object", "properties": {}}), None);
    gemini(json!({"type": "object"}), None);
    gemini(json!({"type": "object", "additionalProperties": true}), None);
    gemini(json!({"type": "object", "properties": {}, "additionalProperties": false}), None);
    assert_eq!(gemini_parameters(&json!({"type": "object"})), None);
}

/// `type` and `enum` both hold, so null is allowed only where both allow it: a definition never
/// offers the model a null the registry refuses, nor refuses a null it accepts.
#[test]
fn gemini_null_is_allowed_where_type_and_enum_both_allow_it() {
    gemini(
        json!({"type": "object", "properties": {
            "typed_null": {"type": ["string", "null"], "enum": ["a", "b"]},
            "listed_null": {"type": "string", "enum": ["a", null]},
            "both": {"type": ["string", "null"], "enum": ["a", null]},
            "untyped": {"enum": ["a", null]}
        }}),
        Some(json!({"type": "OBJECT", "properties": {
            "typed_null": {"type": "STRING", "format": "enum", "enum": ["a", "b"]},
            "listed_null": {"type": "STRING", "format": "enum", "enum": ["a"]},
            "both": {"type": "STRING", "format": "enum", "enum": ["a"], "nullable": true},
            "untyped": {"type": "STRING", "format": "enum", "enum": ["a"], "nullable": true}
        }})),
    );
    gemini_json(
        json!({"type": "object", "properties": {
            "any": true,
            "typed_null": {"type": ["string", "null"], "enum": ["a", "b"]},
            "with_members": {"type": ["string", "null"], "enum": ["a", null],
                             "anyOf": [{"type": "string"}, {"type": "null"}]}
        }}),
        json!({"type": "object", "properties": {
            "any": {"anyOf": any()},
            "typed_null": {"type": "string", "enum": ["a", "b"]},
            "with_members": {"type": ["string", "null"], "enum": ["a", null],
                             "anyOf": [{"type": "string"}, {"type": "null"}]}
        }}),
    );
}

/// What `parameters` cannot type — any value, maps, open objects, arrays without `items`, cut
/// references — goes as `parametersJsonSchema`, typed throughout.
#[test]
fn gemini_json_schema_conversion() {
    gemini_json(
        json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "properties": {
            "tree": {"$ref": "#/$defs/Tree"},
            "tags": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Free tags."},
            "when": {"$ref": "#/$defs/Date%20time"},
            "broken": {"$ref": "#/$defs/Missing", "description": "Kept."},
            "any": true,
            "never": false,
            "empty": {},
            "list": {"type": "array", "items": true},
            "bare": {"type": "array"},
            "none": {"type": "array", "items": false},
            "maybe": {"type": ["integer", "null"], "format": "int64", "exclusiveMinimum": 0, "minimum": 1},
            "level": {"enum": [1, 2, null]},
            "unit": {"oneOf": [{"const": "c", "description": "Celsius."}, {"const": "f"}]},
            "flag": {"const": true},
            "either": {"type": ["string", "integer"]},
            "open": {"type": "object"},
            "nothing": {"type": "null"},
            "id": {"type": "string", "format": "uuid", "minLength": 36, "examples": ["0"], "x-sensitive": true,
                   "nullable": true}
        }, "required": ["tree", "never", "any"], "additionalProperties": false, "$defs": {
            "Tree": {"type": "object", "description": "A node.", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}
            }},
            "Date time": {"type": "string", "format": "date-time"}
        }}),
        json!({"type": "object", "properties": {
            "tree": {"type": "object", "description": "A node.", "properties": {
                "children": {"type": "array", "items": {"type": "object", "description": "A node."}}
            }},
            "tags": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Free tags."},
            "when": {"type": "string", "format": "date-time"},
            "broken": {"description": "Kept.", "anyOf": any()},
            "any": {"anyOf": any()},
            "empty": {"anyOf": any()},
            "list": {"type": "array", "items": {"anyOf": any()}},
            "bare": {"type": "array"},
            "none": {"type": "array", "maxItems": 0},
            "maybe": {"type": ["integer", "null"], "format": "int64", "minimum": 1},
            "level": {"anyOf": [{"type": "integer", "enum": [1, 2]}, {"type": "null"}]},
            "unit": {"anyOf": [{"type": "string", "enum": ["c"], "description": "Celsius."},
                               {"type": "string", "enum": ["f"]}]},
            "flag": {"type": "boolean", "description": "Allowed values: true."},
            "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "open": {"type": "object"},
            "nothing": {"type": "null"},
            "id": {"type": "string", "minLength": 36}
        }, "required": ["tree", "any"], "additionalProperties": false}),
    );
    // Recursion through an encoded reference is still recursion.
    gemini_json(
        json!({"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}, "$defs": {"N": {"type": "object",
            "properties": {"v": {"type": "integer"}, "next": {"$ref": "#/$defs/%4E"}}}}}),
        json!({"type": "object", "properties": {"n": {"type": "object", "properties": {
            "v": {"type": "integer"}, "next": {"type": "object"}}}}}),
    );
    // A map at the root is parameters.
    gemini_json(
        json!({"type": "object", "additionalProperties": {"type": "integer"}}),
        json!({"type": "object", "additionalProperties": {"type": "integer"}}),
    );
    // A map beside declared properties would lose its value type in `parameters`.
    gemini_json(
        json!({"type": "object", "properties": {"id": {"type": "string"}}, "additionalProperties": {"type": "integer"}}),
        json!({"type": "object", "properties": {"id": {"type": "string"}}, "additionalProperties": {"type": "integer"}}),
    );
    // A `$ref` beside properties of its own: both sets of properties and requirements hold, so the
    // target's `additionalProperties: false` refuses neither side's members.
    gemini_json(
        json!({"type": "object", "properties": {
            "v": {"$ref": "#/$defs/T", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
            "any": true
        }, "$defs": {"T": {"type": "object", "properties": {"y": {"type": "integer"}}, "required": ["y"],
                           "additionalProperties": false}}}),
        json!({"type": "object", "properties": {
            "v": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                  "required": ["x", "y"], "additionalProperties": false},
            "any": {"anyOf": any()}
        }}),
    );
}

/// A realistic schemars schema, as the registry advertises it.
#[allow(dead_code, reason = "only the schema is used")]
#[derive(JsonSchema)]
struct PlaceOrder {
    /// The lines to order.
    lines: Vec<Line>,
    /// Delivery speed.
    speed: Speed,
    /// A note for the courier.
    note: Option<String>,
    /// Gift wrapping.
    gift: Option<Gift>,
}

#[allow(dead_code, reason = "only the schema is used")]
#[derive(JsonSchema)]
struct Line {
    sku: String,
    quantity: u32,
}

#[allow(dead_code, reason = "only the schema is used")]
#[derive(JsonSchema)]
enum Speed {
    /// Two to three days.
    Standard,
    /// Next day.
    Express,
}

#[allow(dead_code, reason = "only the schema is used")]
#[derive(JsonSchema)]
struct Gift {
    message: String,
}

/// Keywords Gemini's Schema object defines (OpenAPI 3.0 subset).
const GEMINI_KEYWORDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
];

fn only_gemini_keywords(v: &Value, at: &str) {
    let Some(obj) = v.as_object() else { panic!("{at}: not an object") };
    for (k, sub) in obj {
        assert!(GEMINI_KEYWORDS.contains(&k.as_str()), "{at}: `{k}` is not a Gemini keyword");
        match k.as_str() {
            "properties" => sub
                .as_object()
                .unwrap()
                .iter()
                .for_each(|(p, s)| only_gemini_keywords(s, &format!("{at}/properties/{p}"))),
            "items" => only_gemini_keywords(sub, &format!("{at}/items")),
            "anyOf" => sub
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
                .for_each(|(i, s)| only_gemini_keywords(s, &format!("{at}/anyOf/{i}"))),
            "type" => assert!(
                ["STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT"].contains(&sub.as_str().unwrap()),
                "{at}: type {sub}"
            ),
            "enum" => assert!(sub.as_array().unwrap().iter().all(Value::is_string), "{at}: enum {sub}"),
            _ => {}
        }
    }
}

#[test]
fn a_schemars_schema_becomes_pure_gemini() {
    let settings = schemars::generate::SchemaSettings::draft2020_12();
    let schema = settings.into_generator().into_root_schema_for::<PlaceOrder>().to_value();
    assert!(openai_strict_eligible(&schema).is_err(), "optional fields are not required");
    let converted = gemini_schema(&schema).expect("has parameters");
    only_gemini_keywords(&converted, "#");
    assert_typed_throughout(&converted, "#");
    assert_eq!(converted["properties"]["speed"]["enum"], json!(["Standard", "Express"]));
    assert_eq!(converted["properties"]["gift"]["nullable"], json!(true));
    assert_eq!(converted["properties"]["gift"]["properties"]["message"]["type"], "STRING");
    assert_eq!(converted["properties"]["lines"]["items"]["properties"]["quantity"]["type"], "INTEGER");
    assert_eq!(
        converted["properties"]["note"],
        json!({"type": "STRING", "nullable": true, "description": "A note for the courier."})
    );
}
