//! Gemini's function declarations for inputs its `parameters` member cannot type: any value
//! (`serde_json::Value`, `Option<Value>`), a map (`HashMap<String, Value>`) and a recursive type.
//! Gemini refuses a whole request when one node of one tool's `parameters` has no type, so such a
//! schema goes as `parametersJsonSchema`, typed throughout, the value the model sends reaches the
//! handler as it is, and only what is really cut is reported.

use std::collections::HashMap;

use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_policy::Consumer;
use agent_surface_registry::{Mount, Registry, RegistryConfig, Snapshot};
use agent_surface_toolset::{LossKind, Provider, Toolset, ToolsetConfig, lossy_conversions, tool_definitions};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::support::assert_gemini_tools_typed;

/// An annotation on a record: fields whose schemas have no type.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Annotate {
    /// The annotation, any JSON value.
    payload: Value,
    /// Free attributes.
    attributes: HashMap<String, Value>,
    /// A note, any JSON value, or nothing.
    note: Option<Value>,
    /// The record's category tree.
    tree: Category,
}

/// One category.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Category {
    /// Its name.
    name: String,
    /// Its subcategories.
    children: Vec<Category>,
}

/// A registry with `records.annotate` taking [`Annotate`] and answering it back, its mount, and
/// its anonymous snapshot.
fn annotate() -> (Registry, Mount, Snapshot) {
    let registry = Registry::new(RegistryConfig::default());
    registry
        .define("records", |t| {
            t.capability("annotate", "Annotate a record.")
                .effect(Effect::Write)
                .handle(|input: Annotate| async move { Ok::<_, AgentSurfaceError>(input) });
        })
        .expect("defines");
    let mounted = registry.mount("records", "main").expect("mounts");
    let snapshot = futures_util::FutureExt::now_or_never(registry.snapshot(&Consumer::anonymous("c")))
        .expect("no authority policy: ready at once");
    (registry, mounted, snapshot)
}

/// Any value: every JSON type, as `parametersJsonSchema` spells it.
fn any() -> Value {
    json!([{"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "object"}, {"type": "array"},
           {"type": "null"}])
}

#[test]
fn typeless_fields_go_as_parameters_json_schema_typed_throughout() {
    let (_registry, _mounted, snapshot) = annotate();
    let tools = tool_definitions(Provider::Gemini, &snapshot);
    assert_eq!(
        tools,
        json!([{"functionDeclarations": [{
            "name": "records-annotate",
            "description": "Annotate a record.",
            "parametersJsonSchema": {
                "title": "Annotate",
                "description": "An annotation on a record: fields whose schemas have no type.",
                "type": "object",
                "properties": {
                    "payload": {"description": "The annotation, any JSON value.", "anyOf": any()},
                    "attributes": {"description": "Free attributes.", "type": "object", "additionalProperties": true},
                    "note": {"description": "A note, any JSON value, or nothing.", "anyOf": any()},
                    "tree": {
                        "description": "The record's category tree.",
                        "type": "object",
                        "properties": {
                            "name": {"description": "Its name.", "type": "string"},
                            "children": {
                                "description": "Its subcategories.",
                                "type": "array",
                                // Cut at the recursion: its type and description.
                                "items": {"description": "One category.", "type": "object"}
                            }
                        },
                        "required": ["name", "children"],
                        "additionalProperties": false
                    }
                },
                "required": ["payload", "attributes", "tree"],
                "additionalProperties": false
            }
        }]}]),
        "{tools:#}"
    );
    assert_gemini_tools_typed(&tools);
}

#[test]
fn only_the_recursion_cut_is_reported() {
    let (_registry, _mounted, snapshot) = annotate();
    let lost: Vec<(String, LossKind)> =
        lossy_conversions(&snapshot, Provider::Gemini).into_iter().map(|l| (l.pointer, l.kind)).collect();
    let cut = LossKind::RecursionCut { reference: "#/$defs/Category".into(), depth: 1 };
    assert_eq!(lost, [("/properties/tree/properties/children/items".to_string(), cut)]);
}

/// A typed schema keeps `parameters`, typed throughout, next to a declaration that needs
/// `parametersJsonSchema` in the same request.
#[test]
fn typed_schemas_keep_parameters_beside_them() {
    /// A count.
    #[derive(Deserialize, JsonSchema)]
    #[expect(dead_code, reason = "read through its schema only")]
    struct Count {
        /// How many.
        n: u32,
        /// Which ones.
        of: Option<Vec<String>>,
    }
    let (registry, _mounted, _) = annotate();
    registry
        .define("counts", |t| {
            t.capability("add", "Add.")
                .effect(Effect::Write)
                .handle(|_: Count| async move { Ok::<_, AgentSurfaceError>(json!({})) });
        })
        .expect("defines");
    let _counts = registry.mount("counts", "main").expect("mounts");
    let snapshot = futures_util::FutureExt::now_or_never(registry.snapshot(&Consumer::anonymous("c"))).expect("ready");
    let tools = tool_definitions(Provider::Gemini, &snapshot);
    assert_eq!(
        tools[0]["functionDeclarations"][0],
        json!({"name": "counts-add", "description": "Add.", "parameters": {
            "title": "Count",
            "description": "A count.",
            "type": "OBJECT",
            "properties": {
                "n": {"description": "How many.", "type": "INTEGER", "minimum": 0, "maximum": 4294967295_u64},
                "of": {"description": "Which ones.", "type": "ARRAY", "items": {"type": "STRING"}, "nullable": true}
            },
            "required": ["n"]
        }}),
        "{tools:#}"
    );
    assert!(tools[0]["functionDeclarations"][1].get("parametersJsonSchema").is_some(), "{tools:#}");
    assert_gemini_tools_typed(&tools);
}

/// The model's arguments come back in `functionCall.args` whichever member declared them; any
/// value, the map and the tree reach the handler exactly as the model sent them.
#[tokio::test]
async fn a_gemini_call_reaches_the_handler_as_sent() {
    let (registry, _mounted, _) = annotate();
    let toolset = Toolset::new(registry, Consumer::anonymous("conversation-1"), ToolsetConfig::default());
    assert_gemini_tools_typed(&toolset.tools(Provider::Gemini).await);
    let args = json!({
        "payload": {"nested": [1, "two", null, {"three": 3.5}]},
        "attributes": {"color": "red", "sizes": [1, 2], "none": null},
        "note": null,
        "tree": {"name": "root", "children": [{"name": "leaf", "children": []}]}
    });
    let response = json!({"responseId": "r-1", "candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "records-annotate", "args": args}}
    ]}}]});
    let turn = toolset.handle(Provider::Gemini, &response).await.expect("parses");
    let part = &turn.messages[0]["parts"][0]["functionResponse"];
    assert_eq!(part["name"], "records-annotate");
    assert_eq!(part["response"]["output"], args, "{:#}", turn.messages[0]);
}
