//! One schema, every consumer: the same schemas go to registration, input validation, bound-input
//! validation, output validation, the toolset's OpenAI, Anthropic and Gemini tool definitions and
//! MCP's `tools/list`, and every consumer must give the same answer about them — which instances
//! are valid (`format` included), what a `$ref` (percent-encoded, `~0`/`~1`-escaped, nested,
//! recursive) resolves to, and what each field's type is. What Gemini is sent may lose a
//! constraint (reported), never refuse a valid instance.
//!
//! Each fixture is an object schema with one field `v` (and root `$defs`); its instances are values
//! of `v`. Closing (`additionalProperties: false` added to input schemas only) is the one
//! deliberate difference between input and output, so no instance carries an unlisted member.

use agent_surface_core::{Effect, ErrorCode, InvokeResult};
use agent_surface_policy::Consumer;
use agent_surface_registry::schema::{PortableSchema, SchemaLimits, resolve_ref, visit_subschemas};
use agent_surface_registry::{
    Binding, CapabilityDescriptor, Ctx, InvokeOptions, InvokeRequest, Mount, Registry, RegistryConfig,
};
use agent_surface_toolset::{
    GeminiParameters, Provider, gemini_parameters, openai_strict_eligible, tool_definition, without_dialect,
};
use serde_json::{Value, json};

/// A schema for the field `v`, the member of Gemini's function declaration that carries it and
/// the type Gemini must give `v` (in `parameters`' upper-case spelling), and instances of `v` with
/// whether they are valid.
struct Fixture {
    name: &'static str,
    schema: Value,
    gemini: (&'static str, Option<&'static str>),
    instances: Vec<(Value, bool)>,
}

/// Gemini's `parameters`, typed throughout.
const PARAMETERS: &str = "parameters";
/// Gemini's `parametersJsonSchema`: for what `parameters` cannot type (a recursive type, any value).
const JSON_SCHEMA: &str = "parametersJsonSchema";

fn fixtures() -> Vec<Fixture> {
    let object = |v: Value, defs: Value| json!({"type": "object", "properties": {"v": v}, "$defs": defs});
    vec![
        Fixture {
            name: "percent_encoded_ref",
            schema: object(
                json!({"$ref": "#/$defs/Date%20time"}),
                json!({"Date time": {"type": "string", "format": "date-time"}}),
            ),
            gemini: (PARAMETERS, Some("STRING")),
            instances: vec![(json!("2024-01-02T03:04:05Z"), true), (json!("yesterday"), false), (json!(5), false)],
        },
        Fixture {
            name: "escaped_ref",
            schema: object(json!({"$ref": "#/$defs/a~1b~0c"}), json!({"a/b~c": {"type": "integer", "minimum": 1}})),
            gemini: (PARAMETERS, Some("INTEGER")),
            instances: vec![(json!(3), true), (json!(0), false), (json!("3"), false)],
        },
        Fixture {
            name: "nested_defs",
            schema: object(
                json!({"$ref": "#/$defs/Outer"}),
                json!({
                    "Outer": {"type": "object", "properties": {"inner": {"$ref": "#/$defs/In%6Eer"}}, "required": ["inner"]},
                    "Inner": {"type": "string", "format": "email"}
                }),
            ),
            gemini: (PARAMETERS, Some("OBJECT")),
            instances: vec![
                (json!({"inner": "a@example.com"}), true),
                (json!({"inner": "not an address"}), false),
                (json!({}), false),
            ],
        },
        Fixture {
            name: "recursive_definition",
            schema: object(
                json!({"$ref": "#/$defs/Node"}),
                json!({"Node": {"type": "object", "properties": {
                    "value": {"type": "integer"},
                    "next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}
                }, "required": ["value"]}}),
            ),
            gemini: (JSON_SCHEMA, Some("OBJECT")),
            instances: vec![
                (json!({"value": 1, "next": {"value": 2, "next": null}}), true),
                (json!({"value": 1, "next": {"next": null}}), false),
            ],
        },
        Fixture {
            name: "recursive_root",
            schema: object(json!({"$ref": "#"}), json!({})),
            gemini: (JSON_SCHEMA, Some("OBJECT")),
            instances: vec![(json!({}), true), (json!({"v": {"v": {}}}), true), (json!({"v": 5}), false)],
        },
        Fixture {
            name: "format",
            schema: object(json!({"type": "string", "format": "email"}), json!({})),
            gemini: (PARAMETERS, Some("STRING")),
            instances: vec![(json!("a@example.com"), true), (json!("not an address"), false)],
        },
        Fixture {
            name: "boolean_subschemas",
            schema: object(json!({"type": "object", "properties": {"any": true, "never": false}}), json!({})),
            gemini: (JSON_SCHEMA, Some("OBJECT")),
            instances: vec![(json!({"any": [1, "x"]}), true), (json!({"never": 1}), false)],
        },
    ]
}

/// Defines, per fixture, a capability taking the schema as input (`NAME_input`), one whose `v`
/// is bound from the consumer key (`NAME_bound`) and one returning its input under the schema
/// as output (`NAME_output`), and mounts one instance (keep the [`Mount`]).
fn registry() -> (Registry, Mount) {
    let registry = Registry::new(RegistryConfig::default());
    registry
        .define("schemas", |t| {
            for f in fixtures() {
                let echo = |_ctx: Ctx, input: Value| async move { Ok(input) };
                t.capability(&format!("{}_input", f.name), "Takes the schema as input.")
                    .effect(Effect::Read)
                    .raw_handler(f.schema.clone(), None, echo);
                t.capability(&format!("{}_bound", f.name), "Binds `v` from the consumer.")
                    .effect(Effect::Read)
                    .bind("v", Binding::from_consumer(|c| serde_json::from_str(c.key()).ok()))
                    .raw_handler(f.schema.clone(), None, echo);
                t.capability(&format!("{}_output", f.name), "Returns its input under the schema.")
                    .effect(Effect::Read)
                    .raw_handler(json!({"type": "object"}), Some(f.schema.clone()), echo);
            }
        })
        .expect("every fixture registers");
    let mount = registry.mount("schemas", "main").expect("mounts");
    (registry, mount)
}

/// Whether the call succeeded; a failure must be the consumer's rejection code.
#[track_caller]
fn accepted(result: &InvokeResult, rejection: ErrorCode, what: &str) -> bool {
    match result {
        InvokeResult::Ok { .. } => true,
        InvokeResult::Error { error, .. } => {
            assert_eq!(error.code(), rejection, "{what}: {error:?}");
            false
        }
        other => panic!("{what}: {other:?}"),
    }
}

#[tokio::test]
async fn validators_agree_on_every_instance() {
    let (registry, _mount) = registry();
    for f in fixtures() {
        PortableSchema::check(f.name, &f.schema, SchemaLimits::default()).expect("portable");
        for (instance, valid) in &f.instances {
            let what = format!("{} with v = {instance}", f.name);
            let call = |name: String, input: Value, key: String| {
                let request = InvokeRequest::new(format!("schemas.{name}"), input);
                registry.invoke(request, InvokeOptions::new(Consumer::anonymous(key)))
            };
            let input = call(format!("{}_input", f.name), json!({"v": instance}), "c".into()).await;
            let bound = call(format!("{}_bound", f.name), json!({}), instance.to_string()).await;
            let output = call(format!("{}_output", f.name), json!({"v": instance}), "c".into()).await;
            let answers = [
                accepted(&input, ErrorCode::InvalidInput, &format!("input: {what}")),
                accepted(&bound, ErrorCode::PreconditionFailed, &format!("bound input: {what}")),
                accepted(&output, ErrorCode::ExecutionFailed, &format!("output: {what}")),
            ];
            assert_eq!(answers, [*valid; 3], "input, bound input, output: {what}");
        }
    }
}

/// The type the registry's resolver finds for `v` in an advertised schema, in Gemini's spelling.
fn resolved_type(schema: &Value) -> Option<String> {
    let mut v = &schema["properties"]["v"];
    while let Some(reference) = v.get("$ref").and_then(Value::as_str) {
        v = resolve_ref(schema, reference).expect("the registry resolved it at registration");
    }
    v.get("type").and_then(Value::as_str).map(str::to_uppercase)
}

/// Asserts that every node of a schema Gemini is sent is typed ([`gemini_untyped`]): Gemini
/// refuses the whole request otherwise.
#[track_caller]
fn assert_typed_throughout(schema: &Value, name: &str) {
    if let Some(untyped) = agent_surface_testing::gemini_untyped(schema) {
        panic!("{name}: untyped for Gemini at {untyped}");
    }
}

#[tokio::test]
async fn adapters_agree_on_every_schema() {
    let (registry, _mount) = registry();
    let snapshot = registry.snapshot(&Consumer::anonymous("c")).await;
    let find = |name: String| -> &CapabilityDescriptor {
        snapshot.capabilities.iter().find(|c| c.name == format!("schemas.{name}")).expect("listed")
    };
    for f in fixtures() {
        let input = find(format!("{}_input", f.name));
        let advertised = &input.input_schema;

        // Every `$ref` of what is advertised resolves with the one resolver.
        visit_subschemas(advertised, |node, at| match node.get("$ref").and_then(Value::as_str) {
            Some(reference) if resolve_ref(advertised, reference).is_none() => Err(at.pointer.to_owned()),
            _ => Ok(()),
        })
        .unwrap_or_else(|at| panic!("{}: unresolved $ref at {at}", f.name));

        // OpenAI (both APIs) and Anthropic send the advertised schema as it is.
        let parameters = without_dialect(advertised);
        let chat = tool_definition(Provider::OpenAiChat, input);
        assert_eq!(chat["function"]["parameters"], parameters, "{}", f.name);
        assert_eq!(tool_definition(Provider::OpenAiResponses, input)["parameters"], parameters, "{}", f.name);
        assert_eq!(tool_definition(Provider::Anthropic, input)["input_schema"], parameters, "{}", f.name);
        // Strict mode may refuse a schema, but never for a reference the registry resolved.
        if let Err(reason) = openai_strict_eligible(advertised) {
            assert!(!reason.contains("$ref"), "{}: {reason}", f.name);
        }
        assert_eq!(chat["function"].get("strict").is_some(), openai_strict_eligible(advertised).is_ok());

        // Gemini gets the schema in one member, typed throughout, and gives `v` the type the
        // resolver finds: nothing is silently untyped.
        let gemini = tool_definition(Provider::Gemini, input);
        let sent = gemini_parameters(advertised).expect("has parameters");
        let (member, gemini_type) = f.gemini;
        assert_eq!(sent.member(), member, "{}", f.name);
        let other = if member == PARAMETERS { JSON_SCHEMA } else { PARAMETERS };
        assert_eq!((gemini.get(member), gemini.get(other)), (Some(sent.schema()), None), "{}", f.name);
        assert_typed_throughout(sent.schema(), f.name);
        let sent_type = sent.schema()["properties"]["v"].get("type").and_then(Value::as_str).map(str::to_uppercase);
        assert_eq!(sent_type.as_deref(), gemini_type, "{}", f.name);
        assert_eq!(sent_type, resolved_type(advertised), "{}", f.name);

        // MCP lists the same input schema, and the output schema as declared.
        let tool = agent_surface_mcp::tools::tool(input);
        assert_eq!(Value::Object((*tool.input_schema).clone()), *advertised, "{}", f.name);
        let output = find(format!("{}_output", f.name));
        assert_eq!(output.output_schema.as_ref(), Some(&f.schema), "{}", f.name);
        let tool = agent_surface_mcp::tools::tool(output);
        let listed = tool.output_schema.map(|s| Value::Object((*s).clone()));
        assert_eq!(listed.as_ref(), Some(&f.schema), "{}", f.name);
    }
}

/// What Gemini is sent as `parametersJsonSchema` is a JSON Schema the registry can validate with:
/// it accepts every instance the capability's own schema accepts (it may accept more, where a
/// reported loss widened it), so the model is never told a valid value is invalid.
#[tokio::test]
async fn gemini_json_schema_accepts_every_valid_instance() {
    let (registry, _mount) = registry();
    let snapshot = registry.snapshot(&Consumer::anonymous("c")).await;
    let sent = Registry::new(RegistryConfig::default());
    sent.define("gemini", |t| {
        for f in fixtures() {
            let name = format!("schemas.{}_input", f.name);
            let input = snapshot.capabilities.iter().find(|c| c.name == name).expect("listed");
            if let Some(GeminiParameters::JsonSchema(schema)) = gemini_parameters(&input.input_schema) {
                let echo = |_ctx: Ctx, input: Value| async move { Ok(input) };
                t.capability(f.name, "Takes what Gemini is sent.").effect(Effect::Read).raw_handler(schema, None, echo);
            }
        }
    })
    .expect("what Gemini is sent registers");
    let _mount = sent.mount("gemini", "main").expect("mounts");
    for f in fixtures().into_iter().filter(|f| f.gemini.0 == JSON_SCHEMA) {
        for (instance, _) in f.instances.iter().filter(|(_, valid)| *valid) {
            let request = InvokeRequest::new(format!("gemini.{}", f.name), json!({"v": instance}));
            let result = sent.invoke(request, InvokeOptions::new(Consumer::anonymous("c"))).await;
            assert!(matches!(result, InvokeResult::Ok { .. }), "{} with v = {instance}: {result:?}", f.name);
        }
    }
}
