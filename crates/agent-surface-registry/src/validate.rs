//! Input validation: a compiled JSON Schema validator whose failures become agent-safe
//! [`InputIssue`]s, and a cheap shape pre-check for hostile inputs.
//!
//! The pipeline runs, in order: [`check_shape`] (iterative, bounded), then
//! [`InputValidator::is_valid`] (the fast path), and only on failure [`InputValidator::issues`].
//!
//! **Invariant:** an issue never contains a value taken from the instance. Its `path` is the JSON
//! Pointer of the offending location (object keys and array indices only) and its `message` is
//! built here from the kind of failure and schema-side facts (types, numeric limits, format names,
//! required property names). Values listed by the schema (`enum`, `const`, `pattern`) are never
//! quoted either: the full schema also describes bound fields the agent never sees. Below a
//! sensitive top-level field even the keys are withheld: such issues point at the field itself.

use std::collections::BTreeSet;

use agent_surface_core::DefinitionError;
use agent_surface_core::details::InputIssue;
use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{JsonType, ValidationError, Validator};
use serde_json::Value;

use crate::measure::{Exceeded, measure};
use crate::schema::{self, PortableSchema, escape_pointer_segment};

/// The most issues reported for one input; the last one may summarise the rest.
pub(crate) const MAX_ISSUES: usize = 20;

/// Bounds for [`check_shape`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct InputLimits {
    /// The deepest nesting of arrays and objects accepted (the root container is level 1).
    pub(crate) max_depth: usize,
    /// The largest accepted input, in bytes of compact JSON.
    pub(crate) max_bytes: usize,
}

impl Default for InputLimits {
    /// 64 levels and 1 MiB.
    fn default() -> Self {
        InputLimits { max_depth: 64, max_bytes: 1024 * 1024 }
    }
}

/// Cheap pre-check before validation, iterative (no recursion), stops early: nesting deeper than
/// `max_depth` or an estimated serialized size over `max_bytes` → one issue at path `""` ("is
/// nested deeper than 64 levels" / "is larger than the 1048576-byte limit").
///
/// Validation and deserialization recurse, so they must only see inputs that passed this check.
pub(crate) fn check_shape(instance: &Value, limits: InputLimits) -> Result<(), InputIssue> {
    let message = match measure(instance, limits.max_depth, limits.max_bytes) {
        Ok(()) => return Ok(()),
        Err(Exceeded::Depth) => format!("is nested deeper than {} levels", limits.max_depth),
        Err(Exceeded::Size) => format!("is larger than the {}-byte limit", limits.max_bytes),
    };
    Err(InputIssue { path: String::new(), message })
}

/// A capability's input schema compiled once, with the names of its sensitive top-level fields.
#[derive(Clone, Debug)]
pub(crate) struct InputValidator {
    /// The compiled full input schema.
    validator: Validator,
    /// JSON Pointers (`/name`, escaped) of the sensitive top-level fields.
    sensitive: Vec<String>,
}

impl InputValidator {
    /// Compiles `schema` (the advertised input schema) with [`schema::compile`], the options
    /// every validator of the registry shares.
    ///
    /// A schema that does not compile (an invalid `pattern`, for instance) is `UNSUPPORTED_SCHEMA`
    /// at `location`.
    pub(crate) fn new(
        location: &str,
        schema: &PortableSchema,
        sensitive: Vec<String>,
    ) -> Result<InputValidator, DefinitionError> {
        let validator = schema::compile(location, "input", schema)?;
        let sensitive = sensitive.iter().map(|name| format!("/{}", escape_pointer_segment(name))).collect();
        Ok(InputValidator { validator, sensitive })
    }

    /// Whether `instance` conforms to the schema: the fast path, no allocation of errors.
    pub(crate) fn is_valid(&self, instance: &Value) -> bool {
        self.validator.is_valid(instance)
    }

    /// The agent-safe problems of an invalid `instance`: deduplicated, sorted by path then
    /// message, at most [`MAX_ISSUES`] (the last one then reads "and N more problems", at path
    /// `""`). Empty if `instance` is valid.
    ///
    /// Call only after [`check_shape`] accepted `instance`.
    pub(crate) fn issues(&self, instance: &Value) -> Vec<InputIssue> {
        let mut found = BTreeSet::new();
        for error in self.validator.iter_errors(instance) {
            self.collect(&error, &mut found);
        }
        if found.is_empty() && !self.validator.is_valid(instance) {
            found.insert((String::new(), "is not valid".to_owned()));
        }
        let total = found.len();
        let shown = if total > MAX_ISSUES { MAX_ISSUES - 1 } else { total };
        let mut issues: Vec<InputIssue> =
            found.into_iter().take(shown).map(|(path, message)| InputIssue { path, message }).collect();
        if total > shown {
            issues.push(InputIssue { path: String::new(), message: format!("and {} more problems", total - shown) });
        }
        issues
    }

    /// Turns one validation error into issues, added to `found`.
    fn collect(&self, error: &ValidationError<'_>, found: &mut BTreeSet<(String, String)>) {
        let path = error.instance_path().as_str();
        match error.kind() {
            ValidationErrorKind::AdditionalProperties { unexpected }
            | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
                // The names come from the agent: they go in the path, never in the message.
                for name in unexpected {
                    let path = format!("{path}/{}", escape_pointer_segment(name));
                    self.add(found, path, "is not allowed here".to_owned());
                }
            }
            ValidationErrorKind::Required { property } => match property {
                Value::String(name) => {
                    self.add(found, format!("{path}/{}", escape_pointer_segment(name)), "is required".to_owned());
                }
                _ => self.add(found, path.to_owned(), "is missing a required property".to_owned()),
            },
            ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
                match explain_alternatives(path, context) {
                    Alternatives::Branch(branch) => {
                        for error in branch {
                            self.collect(error, found);
                        }
                    }
                    Alternatives::Types(types) => self.add(found, path.to_owned(), type_message(types)),
                    Alternatives::Unclear => {
                        self.add(found, path.to_owned(), "must match one of the allowed shapes".to_owned());
                    }
                }
            }
            kind => self.add(found, path.to_owned(), message(kind)),
        }
    }

    /// Adds one issue, as [`InputValidator::shown`] shows it.
    fn add(&self, found: &mut BTreeSet<(String, String)>, path: String, message: String) {
        found.insert(self.shown(path, message));
    }

    /// An issue as the agent is shown it: below a sensitive top-level field it points at the field
    /// itself and says nothing more, since keys inside it are part of the secret.
    pub(crate) fn shown(&self, path: String, message: String) -> (String, String) {
        match self.sensitive_field(&path) {
            Some(field) if *field != path => {
                (field.clone(), "is not valid (details are withheld for a sensitive field)".to_owned())
            }
            _ => (path, message),
        }
    }

    /// Whether `pointer` is a sensitive top-level field or lies below one.
    pub(crate) fn is_sensitive(&self, pointer: &str) -> bool {
        self.sensitive_field(pointer).is_some()
    }

    /// The sensitive top-level field `pointer` is, or lies below.
    fn sensitive_field(&self, pointer: &str) -> Option<&String> {
        self.sensitive.iter().find(|field| {
            pointer.strip_prefix(field.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
    }
}

/// What to report for a failed `anyOf` / `oneOf`.
enum Alternatives<'e> {
    /// Exactly one alternative fits the instance's shape: report its errors.
    Branch(&'e [ValidationError<'static>]),
    /// Every alternative wants another type here: report the accepted types.
    Types(BTreeSet<JsonType>),
    /// Report a single generic issue.
    Unclear,
}

/// Picks the alternative the agent most likely meant: the only one that neither rejects the
/// value's type at `path` nor rejects a discriminator (`const` / `enum` on a direct property).
fn explain_alternatives<'e>(path: &str, branches: &'e [Vec<ValidationError<'static>>]) -> Alternatives<'e> {
    let mut fitting = branches.iter().filter(|branch| !branch.iter().any(|e| is_shape_mismatch(path, e)));
    if let (Some(only), None) = (fitting.next(), fitting.next()) {
        return Alternatives::Branch(only);
    }
    let mut types = BTreeSet::new();
    for branch in branches {
        let wanted = branch.iter().find_map(|e| match e.kind() {
            ValidationErrorKind::Type { kind } if e.instance_path().as_str() == path => Some(kind),
            _ => None,
        });
        match wanted {
            Some(TypeKind::Single(ty)) => {
                types.insert(*ty);
            }
            Some(TypeKind::Multiple(set)) => types.extend(set.iter()),
            None => return Alternatives::Unclear,
        }
    }
    if types.is_empty() { Alternatives::Unclear } else { Alternatives::Types(types) }
}

/// Whether `error` shows that its alternative does not describe the value at `path` at all.
fn is_shape_mismatch(path: &str, error: &ValidationError<'_>) -> bool {
    let at = error.instance_path().as_str();
    match error.kind() {
        ValidationErrorKind::Type { .. } | ValidationErrorKind::FalseSchema => at == path,
        ValidationErrorKind::Constant { .. } | ValidationErrorKind::Enum { .. } => {
            at.strip_prefix(path).and_then(|rest| rest.strip_prefix('/')).is_some_and(|key| !key.contains('/'))
        }
        _ => false,
    }
}

/// "must be of type string or null".
fn type_message(types: impl IntoIterator<Item = JsonType>) -> String {
    // Alternatives read better with `null` last.
    let (null, mut names): (Vec<_>, Vec<_>) =
        types.into_iter().map(JsonType::as_str).partition(|name| *name == JsonType::Null.as_str());
    names.extend(null);
    let list = match names.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    };
    format!("must be of type {list}")
}

/// The message for every other kind of failure: schema-side facts only.
fn message(kind: &ValidationErrorKind) -> String {
    use ValidationErrorKind as K;
    match kind {
        K::Type { kind: TypeKind::Single(ty) } => type_message([*ty]),
        K::Type { kind: TypeKind::Multiple(set) } => type_message(set.iter()),
        K::Enum { .. } => "must be one of the allowed values".to_owned(),
        K::Constant { .. } => "must be exactly the expected value".to_owned(),
        K::Minimum { limit } => format!("must be at least {limit}"),
        K::Maximum { limit } => format!("must be at most {limit}"),
        K::ExclusiveMinimum { limit } => format!("must be greater than {limit}"),
        K::ExclusiveMaximum { limit } => format!("must be less than {limit}"),
        K::MultipleOf { multiple_of } => format!("must be a multiple of {multiple_of}"),
        K::MinLength { limit } => format!("must be at least {limit} {} long", plural(*limit, "character")),
        K::MaxLength { limit } => format!("must be at most {limit} {} long", plural(*limit, "character")),
        K::MinItems { limit } => format!("must have at least {limit} {}", plural(*limit, "item")),
        K::MaxItems { limit } => format!("must have at most {limit} {}", plural(*limit, "item")),
        K::AdditionalItems { limit } => format!("must have at most {limit} {}", plural(*limit as u64, "item")),
        K::MinProperties { limit } => format!("must have at least {limit} {}", plural(*limit, "property")),
        K::MaxProperties { limit } => format!("must have at most {limit} {}", plural(*limit, "property")),
        K::UniqueItems => "must not contain duplicate items".to_owned(),
        K::Pattern { .. } => "must match the required pattern".to_owned(),
        K::BacktrackLimitExceeded { .. } | K::RegexEngineFailure { .. } => {
            "could not be checked against the required pattern".to_owned()
        }
        K::Format { format } => format!("must match the required format `{format}`"),
        K::FalseSchema => "is not allowed here".to_owned(),
        K::OneOfMultipleValid { .. } => "must match exactly one of the allowed shapes, but matches several".to_owned(),
        K::AnyOf { .. } | K::OneOfNotValid { .. } => "must match one of the allowed shapes".to_owned(),
        K::Not { .. } => "must not match the excluded shape".to_owned(),
        K::Contains => "must contain a matching item".to_owned(),
        K::PropertyNames { .. } => "has a property name that is not allowed".to_owned(),
        K::Required { .. } => "is missing a required property".to_owned(),
        K::AdditionalProperties { .. } | K::UnevaluatedProperties { .. } | K::UnevaluatedItems { .. } => {
            "contains something that is not allowed here".to_owned()
        }
        K::ContentEncoding { .. } | K::ContentMediaType { .. } | K::FromUtf8 { .. } => {
            "is not correctly encoded".to_owned()
        }
        // A custom keyword's message may quote the instance; none are registered anyway.
        K::Custom { .. } | K::Referencing(_) => "is not valid".to_owned(),
    }
}

/// `word` or its plural, for `n`.
fn plural(n: u64, word: &str) -> String {
    match (n, word) {
        (1, _) => word.to_owned(),
        (_, "property") => "properties".to_owned(),
        _ => format!("{word}s"),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// The schema most tests validate against.
    fn order_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 10},
                "qty": {"type": "integer", "minimum": 1, "maximum": 10},
                "price": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1000, "multipleOf": 0.01},
                "email": {"type": "string", "format": "email"},
                "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "color": {"enum": ["red", "green"]},
                "kind": {"const": "order"},
                "note": {"type": ["string", "null"]},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3, "uniqueItems": true},
                "meta": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a"],
                    "additionalProperties": false,
                    "minProperties": 1,
                    "maxProperties": 1,
                },
                "address": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}]},
                "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "payment": {"oneOf": [
                    {"type": "object", "properties": {"method": {"const": "card"}, "last4": {"type": "string"}},
                     "required": ["method", "last4"], "additionalProperties": false},
                    {"type": "object", "properties": {"method": {"const": "cash"}}, "required": ["method"],
                     "additionalProperties": false},
                ]},
                "nothing": false,
                "map": {"type": "object", "additionalProperties": {"type": "integer"}},
            },
            "required": ["name", "qty"],
            "additionalProperties": false,
            "$defs": {"Address": {"type": "object", "properties": {"street": {"type": "string"}}, "required": ["street"]}},
        })
    }

    /// Compiles `schema` with the `sensitive` top-level fields.
    fn validator(schema: &Value, sensitive: &[&str]) -> InputValidator {
        InputValidator::new(
            "orders.create",
            &PortableSchema::assume_checked(schema.clone()),
            sensitive.iter().map(|s| s.to_string()).collect(),
        )
        .unwrap()
    }

    /// Validates `input` against `schema`: `expected` lists the issues as `(path, message)`.
    #[track_caller]
    fn check(schema: &Value, input: Value, expected: &[(&str, &str)]) {
        let validator = validator(schema, &[]);
        let issues = validator.issues(&input);
        let actual: Vec<(&str, &str)> = issues.iter().map(|i| (i.path.as_str(), i.message.as_str())).collect();
        assert_eq!(actual, expected, "for {input}");
        assert_eq!(validator.is_valid(&input), expected.is_empty());
    }

    #[test]
    fn issues_table() {
        let s = &order_schema();
        let base = || json!({"name": "n", "qty": 1});
        let with = |key: &str, value: Value| {
            let mut input = base();
            input[key] = value;
            input
        };

        check(s, base(), &[]);
        check(s, json!({}), &[("/name", "is required"), ("/qty", "is required")]);
        check(s, json!("hello"), &[("", "must be of type object")]);
        check(s, json!([1, 2]), &[("", "must be of type object")]);
        check(s, json!(null), &[("", "must be of type object")]);
        check(
            s,
            json!({"name": 5, "qty": "7"}),
            &[("/name", "must be of type string"), ("/qty", "must be of type integer")],
        );
        check(
            s,
            json!({"name": "", "qty": 0}),
            &[("/name", "must be at least 1 character long"), ("/qty", "must be at least 1")],
        );
        check(
            s,
            json!({"name": "abcdefghijk", "qty": 11}),
            &[("/name", "must be at most 10 characters long"), ("/qty", "must be at most 10")],
        );
        check(s, json!({"name": "n", "qty": 1.5}), &[("/qty", "must be of type integer")]);
        check(s, with("price", json!(0)), &[("/price", "must be greater than 0")]);
        check(s, with("price", json!(1000)), &[("/price", "must be less than 1000")]);
        check(s, with("price", json!(0.005)), &[("/price", "must be a multiple of 0.01")]);
        check(s, with("email", json!("not-an-address")), &[("/email", "must match the required format `email`")]);
        check(s, with("code", json!("abcd")), &[("/code", "must match the required pattern")]);
        check(s, with("color", json!("blue")), &[("/color", "must be one of the allowed values")]);
        check(s, with("kind", json!("invoice")), &[("/kind", "must be exactly the expected value")]);
        check(s, with("note", json!(5)), &[("/note", "must be of type string or null")]);
        check(s, with("tags", json!([])), &[("/tags", "must have at least 1 item")]);
        check(
            s,
            with("tags", json!(["a", "a", "b", "c"])),
            &[("/tags", "must have at most 3 items"), ("/tags", "must not contain duplicate items")],
        );
        check(
            s,
            with("tags", json!(["a", 1, true])),
            &[("/tags/1", "must be of type string"), ("/tags/2", "must be of type string")],
        );
        check(s, with("meta", json!({})), &[("/meta", "must have at least 1 property"), ("/meta/a", "is required")]);
        check(s, with("meta", json!({"a": 1, "b": 2})), &[("/meta", "must have at most 1 property")]);
        check(
            s,
            with("meta", json!({"a": 1, "secret-key": 2, "x/y~z": 3})),
            &[
                ("/meta", "must have at most 1 property"),
                ("/meta/secret-key", "is not allowed here"),
                ("/meta/x~1y~0z", "is not allowed here"),
            ],
        );
        check(
            s,
            json!({"name": "n", "qty": 1, "evil": 1, "": 2}),
            &[("/", "is not allowed here"), ("/evil", "is not allowed here")],
        );
        check(s, with("nothing", json!(1)), &[("/nothing", "is not allowed here")]);
        check(s, with("map", json!({"k": "v", "a~b": 1})), &[("/map/k", "must be of type integer")]);
        // `anyOf`: the alternative that fits the value's type is explained.
        check(s, with("address", json!(null)), &[]);
        check(s, with("address", json!({})), &[("/address/street", "is required")]);
        check(s, with("address", json!({"street": 5})), &[("/address/street", "must be of type string")]);
        check(s, with("address", json!("Main St")), &[("/address", "must be of type object or null")]);
        check(s, with("either", json!(true)), &[("/either", "must be of type integer or string")]);
        // `oneOf` with a discriminator: the alternative named by `method` is explained.
        check(s, with("payment", json!({"method": "card"})), &[("/payment/last4", "is required")]);
        check(s, with("payment", json!({"method": "cash", "tip": 1})), &[("/payment/tip", "is not allowed here")]);
        check(s, with("payment", json!({"method": "cheque"})), &[("/payment", "must match one of the allowed shapes")]);
        check(s, with("payment", json!([])), &[("/payment", "must be of type object")]);
    }

    #[test]
    fn issues_are_capped() {
        let s = &order_schema();
        let mut input = json!({"name": "n", "qty": 1});
        for i in 0..25 {
            input[format!("extra{i:02}")] = json!(i);
        }
        let issues = validator(s, &[]).issues(&input);
        assert_eq!(issues.len(), MAX_ISSUES);
        assert_eq!(issues[0], InputIssue { path: "/extra00".into(), message: "is not allowed here".into() });
        assert_eq!(issues[18].path, "/extra18");
        assert_eq!(issues[19], InputIssue { path: String::new(), message: "and 6 more problems".into() });

        // Exactly MAX_ISSUES problems are all shown.
        let mut input = json!({"name": "n", "qty": 1});
        for i in 0..MAX_ISSUES {
            input[format!("extra{i:02}")] = json!(i);
        }
        let issues = validator(s, &[]).issues(&input);
        assert_eq!(issues.len(), MAX_ISSUES);
        assert!(issues.iter().all(|i| i.message == "is not allowed here"));
    }

    #[test]
    fn sensitive_values_never_appear() {
        const PASSWORD: &str = "hunter2hunter2";
        const CARD: &str = "4111111111111111";
        const KEY: &str = "sk-live-0123456789";
        let schema = json!({
            "type": "object",
            "properties": {
                "password": {"type": "string", "writeOnly": true, "minLength": 20, "pattern": "^[a-z]+$",
                             "not_enum_but_x": null, "x-example": PASSWORD},
                "card": {"type": "string", "pattern": "^[0-9]{15}$", "maxLength": 15},
                "pin": {"enum": [PASSWORD, CARD, KEY], "format": "password"},
                "kind": {"const": CARD},
                "plan": {"enum": ["basic", PASSWORD, CARD]},
                "creds": {"type": "object", "properties": {"token": {"type": "string"}}, "required": ["token"],
                          "additionalProperties": false},
                "count": {"type": "integer"},
            },
            "additionalProperties": false,
        });
        let v = validator(&schema, &["password", "card", "pin", "creds"]);
        let inputs = [
            json!({"password": PASSWORD, "card": CARD, "pin": "0000", "kind": PASSWORD, "plan": KEY,
                   "creds": {KEY: PASSWORD}, "count": CARD}),
            json!({"password": 4111111111111111u64, "card": [CARD, PASSWORD], "pin": {"v": CARD},
                   "creds": {"token": KEY, "other": CARD}, "plan": {KEY: CARD}}),
            json!({"password": {"nested": [PASSWORD]}, "card": {KEY: CARD}, "kind": {"const": CARD}}),
            json!([PASSWORD, CARD, KEY]),
            json!(PASSWORD),
        ];
        for input in &inputs {
            let issues = v.issues(input);
            assert!(!issues.is_empty(), "{input}");
            for issue in &issues {
                for secret in [PASSWORD, CARD, KEY, "hunter", "411111", "sk-live", "0123456789"] {
                    assert!(!issue.path.contains(secret), "{secret:?} in {issue:?}");
                    assert!(!issue.message.contains(secret), "{secret:?} in {issue:?}");
                }
            }
        }
        // Paths into sensitive fields stop at the field; the message is schema-side.
        let issues = v.issues(&inputs[0]);
        let paths: Vec<_> = issues.iter().map(|i| (i.path.as_str(), i.message.as_str())).collect();
        assert!(paths.contains(&("/password", "must be at least 20 characters long")), "{paths:?}");
        assert!(paths.contains(&("/card", "must be at most 15 characters long")), "{paths:?}");
        assert!(paths.contains(&("/pin", "must be one of the allowed values")), "{paths:?}");
        assert!(paths.contains(&("/creds", "is not valid (details are withheld for a sensitive field)")), "{paths:?}");
        assert!(paths.contains(&("/count", "must be of type integer")), "{paths:?}");
    }

    #[test]
    fn hostile_inputs() {
        let s = &order_schema();
        let v = validator(s, &[]);

        // 10k elements of the wrong type: capped, nothing echoed.
        let input = json!({"name": "n", "qty": 1, "tags": vec![json!(1234567); 10_000]});
        check_shape(&input, InputLimits::default()).unwrap();
        let issues = v.issues(&input);
        assert_eq!(issues.len(), MAX_ISSUES);
        assert!(issues.iter().all(|i| !i.message.contains("1234567")));
        assert_eq!(issues[0], InputIssue { path: "/tags".into(), message: "must have at most 3 items".into() });
        // 10 000 type errors, `maxItems` and `uniqueItems`, minus the 19 shown.
        assert_eq!(issues.last().unwrap().message, "and 9983 more problems");

        // A huge string: the message gives the limit, not the value.
        let huge = "Z".repeat(500_000);
        let input = json!({"name": huge, "qty": 1});
        check_shape(&input, InputLimits::default()).unwrap();
        let issues = v.issues(&input);
        assert_eq!(issues, [InputIssue { path: "/name".into(), message: "must be at most 10 characters long".into() }]);

        // Over the size limit.
        let input = json!({"name": "Z".repeat(2 * 1024 * 1024), "qty": 1});
        let issue = check_shape(&input, InputLimits::default()).unwrap_err();
        assert_eq!(issue, InputIssue { path: String::new(), message: "is larger than the 1048576-byte limit".into() });

        // 1000 levels: rejected by the shape check; validation does not descend into it either.
        // Built by hand: `json!` would serialize (recursively) every interpolated value.
        let mut deep = json!("ZZZZ");
        for _ in 0..1000 {
            deep = Value::Object([("a".to_owned(), Value::Array(vec![deep]))].into_iter().collect());
        }
        let issue = check_shape(&deep, InputLimits::default()).unwrap_err();
        assert_eq!(issue, InputIssue { path: String::new(), message: "is nested deeper than 64 levels".into() });
        let mut input = json!({"name": "n", "qty": 1});
        input["meta"] = deep;
        assert!(check_shape(&input, InputLimits::default()).is_err());
        let issues = v.issues(&input);
        assert!(issues.iter().all(|i| !i.message.contains("ZZZZ")));
    }

    /// Drops a deeply nested array chain without recursion.
    fn drop_deep(mut value: Value) {
        while let Value::Array(mut items) = value {
            match items.pop() {
                Some(inner) => value = inner,
                None => break,
            }
        }
    }

    #[test]
    fn check_shape_does_not_recurse() {
        // Deep enough that any recursion per level would overflow a test thread's stack.
        let mut deep = json!(0);
        for _ in 0..200_000 {
            deep = Value::Array(vec![deep]);
        }
        let issue = check_shape(&deep, InputLimits { max_depth: usize::MAX, max_bytes: usize::MAX });
        assert_eq!(issue, Ok(()));
        assert_eq!(measure(&deep, 199_999, usize::MAX), Err(Exceeded::Depth));
        assert_eq!(measure(&deep, 200_000, usize::MAX), Ok(()));
        drop_deep(deep);
    }

    #[test]
    fn shape_limits_are_exact() {
        let limits = InputLimits { max_depth: 2, max_bytes: 1024 };
        assert!(check_shape(&json!([[1]]), limits).is_ok());
        assert!(check_shape(&json!({"a": {"b": 1}}), limits).is_ok());
        assert!(check_shape(&json!({"a": {"b": []}}), limits).is_err());
        assert!(check_shape(&json!([[[]]]), limits).is_err());
        assert!(check_shape(&json!(1), InputLimits { max_depth: 0, max_bytes: 10 }).is_ok());
        assert!(check_shape(&json!([]), InputLimits { max_depth: 0, max_bytes: 10 }).is_err());

        let value =
            json!({"a": [1, -2.5, 1e300, null, true, false, "q\"\\\n\u{1}é"], "": {}, "k\t": 12345678901234u64});
        let exact = serde_json::to_vec(&value).unwrap().len();
        assert_eq!(measure(&value, 10, exact), Ok(()));
        assert_eq!(measure(&value, 10, exact - 1), Err(Exceeded::Size));
        // An object of scalars takes a shorter path (an upper bound first); exact all the same.
        let flat = json!({"q\"\\\n\u{1}é": "x\u{2}\"", "n": -12.5, "t": true, "f": false, "z": null, "": ""});
        let exact = serde_json::to_vec(&flat).unwrap().len();
        assert_eq!(measure(&flat, 10, exact), Ok(()));
        assert_eq!(measure(&flat, 10, exact - 1), Err(Exceeded::Size));
    }

    #[test]
    fn compile_errors_are_unsupported_schema() {
        let err = InputValidator::new(
            "orders.create",
            &PortableSchema::assume_checked(json!({"type": "object", "properties": {"a": {"pattern": "("}}})),
            vec![],
        )
        .unwrap_err();
        assert_eq!(err.code(), agent_surface_core::DefinitionErrorCode::UnsupportedSchema);
        assert_eq!(err.location(), "orders.create");
        assert!(err.problem().starts_with("the input schema does not compile"), "{err}");
    }

    #[test]
    fn nothing_is_fetched() {
        let err = InputValidator::new(
            "t.c",
            &PortableSchema::assume_checked(json!({"$ref": "https://example.com/schema.json"})),
            vec![],
        )
        .unwrap_err();
        assert_eq!(err.code(), agent_surface_core::DefinitionErrorCode::UnsupportedSchema);
    }

    /// Every string in `value`: (object keys, string values).
    fn strings(value: &Value, keys: &mut Vec<String>, values: &mut Vec<String>) {
        match value {
            Value::String(s) => values.push(s.clone()),
            Value::Array(items) => items.iter().for_each(|v| strings(v, keys, values)),
            Value::Object(map) => {
                for (k, v) in map {
                    keys.push(k.clone());
                    strings(v, keys, values);
                }
            }
            _ => {}
        }
    }

    /// Random JSON whose strings cannot collide with the issue vocabulary (which is lowercase).
    fn arb_json() -> impl Strategy<Value = Value> {
        let text = "[A-Z0-9~/%#@ ]{0,12}";
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            text.prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 64, 8, move |inner| {
            let key = prop_oneof![
                3 => prop::sample::select(vec![
                    "name", "qty", "price", "email", "code", "color", "kind", "note", "tags", "meta", "a", "b",
                    "address", "street", "either", "payment", "method", "last4", "nothing", "map", "secret",
                ])
                .prop_map(str::to_owned),
                1 => text.prop_map(String::from),
            ];
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(key, inner, 0..8).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Whether `path` is a JSON Pointer: empty, or `/`-separated segments where `~` is followed
    /// by `0` or `1`.
    fn is_pointer(path: &str) -> bool {
        (path.is_empty() || path.starts_with('/'))
            && path.split('~').skip(1).all(|rest| rest.starts_with('0') || rest.starts_with('1'))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn issues_never_echo_instance_strings(input in arb_json()) {
            let mut schema = order_schema();
            schema["properties"]["secret"] = json!({"type": "object", "writeOnly": true,
                "properties": {"a": {"enum": [1, 2]}}, "additionalProperties": false});
            let schema_text = schema.to_string();
            let v = validator(&schema, &["secret"]);
            let issues = v.issues(&input);
            prop_assert_eq!(v.is_valid(&input), issues.is_empty());
            prop_assert!(issues.len() <= MAX_ISSUES);

            let (mut keys, mut values) = (Vec::new(), Vec::new());
            strings(&input, &mut keys, &mut values);
            let foreign = |s: &String| s.chars().count() >= 4 && !schema_text.contains(s.as_str());
            for issue in &issues {
                prop_assert!(is_pointer(&issue.path), "{:?}", issue);
                for s in keys.iter().chain(&values).filter(|s| foreign(s)) {
                    prop_assert!(!issue.message.contains(s.as_str()), "{:?} echoed in {:?}", s, issue);
                }
                // A path holds the input's keys as JSON Pointer segments (`~` written `~0`, `/` `~1`):
                // a value equal to part of an escaped key is that key, not the value, in the path.
                let in_a_key = |s: &str| {
                    keys.iter().any(|k| k.contains(s) || k.replace('~', "~0").replace('/', "~1").contains(s))
                };
                for s in values.iter().filter(|s| foreign(s) && !in_a_key(s.as_str())) {
                    prop_assert!(!issue.path.contains(s.as_str()), "value {:?} in path of {:?}", s, issue);
                }
                if issue.path.starts_with("/secret/") {
                    prop_assert!(false, "path inside a sensitive field: {:?}", issue);
                }
            }
            // Sorted by path then message, without duplicates (the summary, if any, comes last).
            let listed: Vec<_> = issues.iter().filter(|i| !i.message.ends_with("more problems")).collect();
            prop_assert!(listed.windows(2).all(|w| (&w[0].path, &w[0].message) < (&w[1].path, &w[1].message)));
        }
    }
}
