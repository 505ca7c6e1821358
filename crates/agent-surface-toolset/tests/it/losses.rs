//! What a provider's dialect loses of an input schema is reported ([`lossy_conversions`]) and
//! warned about once on the operator channel, never silently changed.

use std::collections::{BTreeSet, HashMap};

use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_policy::Consumer;
use agent_surface_registry::{Mount, Registry, RegistryConfig, Snapshot};
use agent_surface_toolset::{LossKind, Provider, Toolset, ToolsetConfig, lossy_conversions, tool_definition};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// A map from a SKU to its line.
#[derive(Deserialize, JsonSchema)]
#[expect(dead_code, reason = "read through its schema only")]
struct Restock {
    /// The quantity to order, per SKU.
    lines: HashMap<String, Quantity>,
}

/// How many of one SKU.
#[derive(Deserialize, JsonSchema)]
#[expect(dead_code, reason = "read through its schema only")]
struct Quantity {
    /// Units.
    units: u32,
}

/// A recursive type: a category and its subcategories.
#[derive(Deserialize, JsonSchema)]
#[expect(dead_code, reason = "read through its schema only")]
struct Tree {
    /// The root category.
    root: Category,
}

/// One category.
#[derive(Deserialize, JsonSchema)]
#[expect(dead_code, reason = "read through its schema only")]
struct Category {
    /// Its name.
    name: String,
    /// Its subcategories.
    children: Vec<Category>,
}

/// A schema every provider takes whole: strings, numbers, an enum, an option, a list.
#[derive(Deserialize, JsonSchema)]
#[expect(dead_code, reason = "read through its schema only")]
struct Order {
    /// The SKU.
    sku: String,
    /// How many.
    #[schemars(range(min = 1, max = 99))]
    quantity: u64,
    /// How fast.
    speed: Speed,
    /// A note for the courier.
    note: Option<String>,
    /// Gift tags.
    tags: Vec<String>,
}

/// Delivery speed.
#[derive(Deserialize, JsonSchema)]
enum Speed {
    /// In a few days.
    Standard,
    /// Tomorrow.
    Express,
}

/// A registry with one capability `shop.<name>` taking `I`, its mount, and its anonymous
/// snapshot.
fn snapshot_of<I: JsonSchema + for<'de> Deserialize<'de> + Send + 'static>(name: &str) -> (Registry, Mount, Snapshot) {
    let registry = Registry::new(RegistryConfig::default());
    registry
        .define("shop", |t| {
            t.capability(name, "Do it.")
                .effect(Effect::Write)
                .handle(|_: I| async move { Ok::<_, AgentSurfaceError>(json!({})) });
        })
        .expect("defines");
    let mounted = registry.mount("shop", "main").expect("mounts");
    let snapshot = futures_util::FutureExt::now_or_never(registry.snapshot(&Consumer::anonymous("lint")))
        .expect("no authority policy: ready at once");
    (registry, mounted, snapshot)
}

/// `I`'s losses for Gemini are `expected` (pointer, kind); every other provider loses nothing.
#[track_caller]
fn check<I: JsonSchema + for<'de> Deserialize<'de> + Send + 'static>(expected: &[(&str, LossKind)]) {
    let (_registry, _mounted, snapshot) = snapshot_of::<I>("act");
    for provider in Provider::ALL {
        let found: Vec<(String, LossKind)> =
            lossy_conversions(&snapshot, provider).into_iter().map(|l| (l.pointer, l.kind)).collect();
        let expected: Vec<(String, LossKind)> = match provider {
            Provider::Gemini => expected.iter().map(|(p, k)| (p.to_string(), k.clone())).collect(),
            _ => Vec::new(),
        };
        assert_eq!(found, expected, "{provider}: {:#}", snapshot.capabilities[0].input_schema);
    }
}

/// Gemini's `parameters` has no `additionalProperties`: a map goes as `parametersJsonSchema`,
/// which keeps its value type, so no provider loses it.
#[test]
fn a_map_keeps_its_value_type_for_every_provider() {
    check::<Restock>(&[]);
    let (_registry, _mounted, snapshot) = snapshot_of::<Restock>("act");
    let gemini = tool_definition(Provider::Gemini, &snapshot.capabilities[0]);
    assert!(gemini.get("parameters").is_none(), "{gemini:#}");
    let value = &gemini["parametersJsonSchema"]["properties"]["lines"]["additionalProperties"];
    assert_eq!(value["properties"]["units"]["type"], "integer", "{gemini:#}");
}

#[test]
fn a_recursive_type_is_cut_for_gemini_only() {
    let cut = LossKind::RecursionCut { reference: "#/$defs/Category".into(), depth: 1 };
    check::<Tree>(&[("/properties/root/properties/children/items", cut)]);
}

#[test]
fn a_clean_schema_loses_nothing() {
    check::<Order>(&[]);
}

/// Constraints and formats Gemini lacks are lost in either member: in `parameters` (typed
/// throughout) and in `parametersJsonSchema` (here for an open object beside them, which it keeps).
#[test]
fn constraints_and_formats_gemini_lacks_are_losses() {
    use agent_surface_toolset::gemini_parameters;
    let (_registry, _mounted, mut snapshot) = snapshot_of::<Order>("act");
    let properties = json!({
        "id": {"type": "string", "format": "uuid"},
        "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
        "step": {"type": "number", "multipleOf": 0.5, "exclusiveMinimum": 0},
        "size": {"type": "integer", "format": "uint64", "minimum": 0}
    });
    let expected = [
        "#/properties/id: format `uuid` is dropped",
        "#/properties/step: `exclusiveMinimum` is dropped",
        "#/properties/step: `multipleOf` is dropped",
        "#/properties/tags: `uniqueItems` is dropped",
    ];
    for (extra, member) in [(None, "parameters"), (Some(json!({"type": "object"})), "parametersJsonSchema")] {
        let mut properties = properties.clone();
        if let Some(extra) = extra {
            properties["extra"] = extra;
        }
        let schema = json!({"type": "object", "properties": properties, "additionalProperties": false});
        assert_eq!(gemini_parameters(&schema).map(|p| p.member()), Some(member));
        snapshot.capabilities[0].input_schema = schema;
        let found: BTreeSet<String> = lossy_conversions(&snapshot, Provider::Gemini)
            .iter()
            .map(|l| format!("#{}: {}", l.pointer, l.kind))
            .collect();
        assert_eq!(found, expected.into_iter().map(String::from).collect(), "{member}");
    }
}

/// The toolset warns once per capability and provider, naming both and the loss; a provider
/// that keeps the schema is not warned about.
#[test]
fn the_toolset_warns_once_per_capability_and_provider() {
    let (_, log) = agent_surface_testing::capture_operator_log(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (registry, _mounted, _) = snapshot_of::<Tree>("plant");
            let toolset = Toolset::new(registry, Consumer::anonymous("c-1"), ToolsetConfig::default());
            for provider in [Provider::Gemini, Provider::Gemini, Provider::Anthropic, Provider::OpenAiChat] {
                toolset.tools(provider).await;
            }
        })
    });
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("agent_surface::toolset")).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    let cut = "at #/properties/root/properties/children/items: the recursive type #/$defs/Category is cut";
    for part in ["WARN", "capability=shop.plant", "provider=gemini", cut] {
        assert!(warnings[0].contains(part), "{part} in {}", warnings[0]);
    }
}
