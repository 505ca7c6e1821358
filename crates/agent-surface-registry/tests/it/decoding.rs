//! What an agent is told when its input passes the schema but not the handler's type: never that
//! it breaks the schema, always where the value is. (Found by a newcomer: a `u64` sent
//! `18446744073709551616` was told "The input does not match the schema", with no path.)

use agent_surface_core::details::InputIssue;
use agent_surface_core::{AgentSurfaceError, ErrorCode, Phase};
use agent_surface_registry::{Binding, Ctx, Instance, Registry, RegistryConfig};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use crate::support::*;

#[derive(Deserialize, JsonSchema)]
#[expect(dead_code, reason = "decoded, never read")]
struct Order {
    quantity: u32,
    total: u64,
    offset: i32,
    lines: Vec<Line>,
    #[serde(default)]
    note: Option<Note>,
    #[serde(default)]
    discount: Option<u32>,
}

#[derive(Deserialize, JsonSchema)]
#[expect(dead_code, reason = "decoded, never read")]
struct Line {
    sku: String,
    count: u16,
}

/// A type whose own decoding refuses what its schema allows (an author's check in
/// `Deserialize`): its message quotes the value, and must not reach the agent.
#[derive(JsonSchema)]
struct Note(#[expect(dead_code, reason = "decoded, never read")] String);

impl<'de> Deserialize<'de> for Note {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.contains("secret") {
            return Err(serde::de::Error::custom(format!("note {s:?} refused by db.notes_check")));
        }
        Ok(Note(s))
    }
}

fn registry() -> Registry {
    let r = Registry::new(RegistryConfig::default());
    r.define("shop", |t| {
        t.capability("order", "Place an order.")
            .handler(|_c: Ctx, _o: Order| async { Ok::<_, AgentSurfaceError>(json!({})) })
    })
    .unwrap();
    r
}

fn order(changes: Value) -> Value {
    let mut o = json!({"quantity": 1, "total": 10, "offset": 0, "lines": [{"sku": "a", "count": 1}]});
    o.as_object_mut().unwrap().extend(changes.as_object().unwrap().clone());
    o
}

async fn refused(r: &Registry, input: Value) -> (agent_surface_core::ErrorPayload, Vec<InputIssue>) {
    let inv = r.invoke_detailed(call("shop.order", input), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::InvalidInput, Phase::Input);
    let issues = serde_json::from_value(p.details().unwrap()["issues"].clone()).unwrap();
    (p, issues)
}

/// The schema states the range of every integer type, so a value the type cannot hold is a
/// schema violation at its path, and the tool's schema tells the agent the bound beforehand.
#[tokio::test]
async fn an_integer_too_wide_for_its_type_breaks_the_stated_schema() {
    let r = registry();
    let _m = r.mount("shop", "main").unwrap();
    let snapshot = r.snapshot(&agent_surface_policy::Consumer::anonymous("c")).await;
    let schema = snapshot.capabilities.iter().find(|c| c.name == "shop.order").unwrap().input_schema.clone();
    assert_eq!(schema["properties"]["quantity"]["maximum"], json!(u32::MAX), "{schema}");
    assert_eq!(schema["properties"]["quantity"]["minimum"], json!(0));
    assert_eq!(schema["properties"]["total"]["maximum"], json!(u64::MAX));
    assert_eq!(schema["properties"]["offset"]["minimum"], json!(i32::MIN));
    assert_eq!(schema["properties"]["discount"]["maximum"], json!(u32::MAX), "an optional integer too");
    for (input, path) in [
        (json!({"quantity": 5_000_000_000_u64}), "/quantity"),
        (json!({"total": 1.8446744073709552e19}), "/total"),
        (json!({"offset": -3_000_000_000_i64}), "/offset"),
        (json!({"lines": [{"sku": "a", "count": 70_000}]}), "/lines/0/count"),
        (json!({"discount": 4_294_967_296_u64}), "/discount"),
    ] {
        let (p, issues) = refused(&r, order(input.clone())).await;
        assert_eq!(p.detail("reason"), None, "{input}: a plain schema violation");
        assert_eq!(issues.len(), 1, "{input}: {issues:?}");
        assert_eq!(issues[0].path, path, "{input}");
        assert!(p.message().contains(path), "{}", p.message());
    }
}

/// A value the schema allows and the type refuses: `reason: undecodable`, the path of the value,
/// words that quote nothing of it, and a message that does not claim the schema was broken.
#[tokio::test]
async fn a_value_the_schema_allows_and_the_type_refuses_is_named_by_its_path() {
    let r = registry();
    let _m = r.mount("shop", "main").unwrap();
    // JSON Schema counts 5.0 as an integer; serde does not decode it as one.
    let (p, issues) =
        refused(&r, order(json!({"lines": [{"sku": "a", "count": 1}, {"sku": "b", "count": 2.0}]}))).await;
    assert_eq!(p.detail("reason"), Some(&json!("undecodable")));
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0].path, "/lines/1/count");
    assert!(issues[0].message.contains("without a fraction"), "{:?}", issues[0]);
    assert!(p.message().contains("/lines/1/count"), "{}", p.message());
    assert!(!p.message().contains("does not match the schema"), "{}", p.message());

    let (p, issues) = refused(&r, order(json!({"note": "my secret plan"}))).await;
    assert_eq!(p.detail("reason"), Some(&json!("undecodable")));
    assert_eq!(issues[0].path, "/note");
    let shown = p.to_json().to_string();
    assert!(!shown.contains("secret") && !shown.contains("notes_check"), "{shown}");

    // The same input with a note the type takes is served.
    let ok = r.invoke(call("shop.order", order(json!({"note": "gift"}))), consumer("c")).await;
    assert!(ok.is_ok(), "{ok:?}");
}

#[derive(Deserialize, JsonSchema)]
#[expect(dead_code, reason = "decoded, never read")]
struct Tagged {
    label: String,
    shelf: u8,
}

/// A bound field whose value does not decode is the runtime's failure, not the agent's.
#[tokio::test]
async fn a_bound_value_that_does_not_decode_is_a_binding_failure() {
    let r = Registry::new(RegistryConfig::default());
    r.define("store", |t| {
        t.capability("tag", "Tag a shelf.")
            .bind("shelf", Binding::from_consumer(|_| Some(json!(2.0))))
            .handler(|_c: Ctx, _t: Tagged| async { Ok::<_, AgentSurfaceError>(json!({})) })
    })
    .unwrap();
    let _m = r.mount_with("store", "main", Instance::new()).unwrap();
    let inv = r.invoke_detailed(call("store.tag", json!({"label": "x"})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::PreconditionFailed, Phase::Input);
    assert_eq!(p.detail("reason"), Some(&json!("binding-failed")));
}

#[derive(Deserialize, JsonSchema)]
#[expect(dead_code, reason = "decoded, never read")]
struct Login {
    user: String,
    creds: Creds,
    #[serde(default)]
    limits: std::collections::BTreeMap<String, u32>,
}

#[derive(Deserialize, JsonSchema)]
#[expect(dead_code, reason = "decoded, never read")]
struct Creds {
    pin: u32,
}

#[derive(Deserialize, JsonSchema)]
#[expect(dead_code, reason = "decoded, never read")]
struct Flat {
    label: String,
    #[serde(flatten)]
    rest: Rest,
}

#[derive(Deserialize, JsonSchema)]
#[expect(dead_code, reason = "decoded, never read")]
struct Rest {
    count: u32,
}

/// What the issue shows: below a sensitive field, the field alone (as for a schema violation);
/// a member name with `~` or `/` escaped in the pointer; an exponent is no integer either; a type
/// that buffers its input (`#[serde(flatten)]`) loses the path, and the issue says so of the input
/// as a whole rather than name a field that is not the cause.
#[tokio::test]
async fn the_issue_withholds_a_sensitive_value_and_escapes_its_pointer() {
    let r = Registry::new(RegistryConfig::default());
    r.define("auth", |t| {
        t.capability("login", "Sign in.")
            .sensitive(&["creds"])
            .handler(|_c: Ctx, _l: Login| async { Ok::<_, AgentSurfaceError>(json!({})) });
        t.capability("flat", "Flattened input.")
            .handler(|_c: Ctx, _f: Flat| async { Ok::<_, AgentSurfaceError>(json!({})) })
    })
    .unwrap();
    let _m = r.mount("auth", "main").unwrap();
    let login = |input: Value| {
        let r = r.clone();
        async move {
            let inv = r.invoke_detailed(call("auth.login", input), consumer("c")).await;
            let p = assert_produced(&inv, ErrorCode::InvalidInput, Phase::Input);
            let issues: Vec<InputIssue> = serde_json::from_value(p.details().unwrap()["issues"].clone()).unwrap();
            (p, issues)
        }
    };

    let (p, issues) = login(json!({"user": "u", "creds": {"pin": 1234.0}})).await;
    assert_eq!(p.detail("reason"), Some(&json!("undecodable")));
    assert_eq!(issues[0].path, "/creds", "{issues:?}");
    assert!(issues[0].message.contains("withheld"), "{issues:?}");
    assert!(!p.to_json().to_string().contains("pin"), "{}", p.to_json());

    let (_, issues) = login(json!({"user": "u", "creds": {"pin": 1}, "limits": {"a/b~c": 2e0}})).await;
    assert_eq!(issues[0].path, "/limits/a~1b~0c", "{issues:?}");
    assert!(issues[0].message.contains("without a fraction"), "{issues:?}");

    let inv = r.invoke_detailed(call("auth.flat", json!({"label": "x", "count": 3.0})), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::InvalidInput, Phase::Input);
    assert_eq!(p.detail("reason"), Some(&json!("undecodable")));
    let issues: Vec<InputIssue> = serde_json::from_value(p.details().unwrap()["issues"].clone()).unwrap();
    assert_eq!(issues[0].path, "", "{issues:?}");
    assert!(issues[0].message.contains("as a whole"), "{issues:?}");
}
