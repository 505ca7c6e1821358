//! Per-tool versions: listed with every capability, derived from the definition only, checked on
//! every call that names one, whatever the effect.

use std::sync::Arc;

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Phase};
use agent_surface_policy::{AuthorityDecision, AuthorityPolicy, CallInfo, Consumer, PolicyError};
use agent_surface_registry::{Ctx, Registry, RegistryConfig, TypeBuilder};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::support::{assert_produced, call, consumer};

/// `notes.read` (read) and `notes.erase` (destructive), `notes.erase`'s input schema given.
fn notes(erase_schema: Value) -> impl FnOnce(&mut TypeBuilder<'_>) {
    move |t| {
        t.capability("read", "Read the notes.").effect(Effect::Read).idempotent().raw_handler(
            json!({"type": "object"}),
            None,
            |_: Ctx, _| async move { Ok(json!({"notes": []})) },
        );
        t.capability("erase", "Erase a note.").effect(Effect::Destructive).raw_handler(
            erase_schema,
            None,
            |_: Ctx, v| async move { Ok::<_, AgentSurfaceError>(v) },
        );
    }
}

fn id_schema(kind: &str) -> Value {
    json!({"type": "object", "properties": {"id": {"type": kind}}})
}

async fn versions(r: &Registry) -> (String, String) {
    let s = r.snapshot(&Consumer::anonymous("c")).await;
    let v = |n: &str| s.capability(n).unwrap().tool_version.clone().expect("listed with a version");
    (v("notes.read"), v("notes.erase"))
}

#[tokio::test]
async fn a_changed_definition_makes_the_listed_version_stale_for_every_effect() {
    let r = Registry::new(RegistryConfig::default());
    r.define("notes", notes(id_schema("string"))).unwrap();
    let mounted = r.mount("notes", "main").unwrap();
    let (read_v1, erase_v1) = versions(&r).await;
    assert_eq!(read_v1.len(), 20);
    assert_ne!(read_v1, erase_v1);

    // The live versions run.
    for (name, v) in [("notes.read", &read_v1), ("notes.erase", &erase_v1)] {
        let ok = r.invoke(call(name, json!({})).with_tool_version(v.clone()), consumer("c")).await;
        assert!(ok.is_ok(), "{name}: {ok:?}");
    }

    // Remount with a new schema for `erase`.
    drop(mounted);
    r.redefine("notes", notes(id_schema("integer"))).unwrap();
    let _mounted = r.mount("notes", "main").unwrap();
    let (read_v2, erase_v2) = versions(&r).await;
    assert_eq!(read_v2, read_v1, "an unchanged definition keeps its version across a remount");
    assert_ne!(erase_v2, erase_v1);

    // The old version is stale, with the live one in the details; the surface token is not
    // sent, so the tool version alone decides.
    let inv = r.invoke_detailed(call("notes.erase", json!({"id": 7})).with_tool_version(erase_v1), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::StaleCapability, Phase::Resolve);
    assert_eq!(
        Value::Object(p.details().unwrap().clone()),
        json!({"reason": "tool-version-mismatch", "liveToolVersion": erase_v2})
    );
    // A read is checked too (the surface version binds destructive and external effects only).
    let inv =
        r.invoke_detailed(call("notes.read", json!({})).with_tool_version("0123456789abcdef0123"), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::StaleCapability, Phase::Resolve);
    assert_eq!(p.details().unwrap()["liveToolVersion"], json!(read_v2));

    // The new version runs, and so does a call naming none.
    let ok = r.invoke(call("notes.erase", json!({"id": 7})).with_tool_version(erase_v2), consumer("c")).await;
    assert!(ok.is_ok(), "{ok:?}");
    let ok = r.invoke(call("notes.erase", json!({"id": 7})), consumer("c")).await;
    assert!(ok.is_ok(), "{ok:?}");
}

#[tokio::test]
async fn versions_are_the_same_in_every_process_that_defines_the_tool_alike() {
    let (a, b) = (Registry::new(RegistryConfig::default()), Registry::new(RegistryConfig::default()));
    for r in [&a, &b] {
        r.define("notes", notes(id_schema("string"))).unwrap();
    }
    let (_ma, _mb) = (a.mount("notes", "main").unwrap(), b.mount("notes", "other").unwrap());
    assert_ne!(a.surface_id(), b.surface_id());
    assert_eq!(versions(&a).await, versions(&b).await);
    // A version listed by one replica runs on the other.
    let (_, erase) = versions(&a).await;
    let ok = b.invoke(call("notes.erase", json!({"id": "x"})).with_tool_version(erase), consumer("c")).await;
    assert!(ok.is_ok(), "{ok:?}");
}

#[tokio::test]
async fn a_second_instance_changes_no_version() {
    let r = Registry::new(RegistryConfig::default());
    r.define("notes", notes(id_schema("string"))).unwrap();
    let _a = r.mount("notes", "a").unwrap();
    let before = versions(&r).await;
    let _b = r.mount("notes", "b").unwrap();
    let s = r.snapshot(&Consumer::anonymous("c")).await;
    assert!(s.capability("notes.erase").unwrap().input_schema["properties"].get("_instance").is_some());
    assert_eq!(versions(&r).await, before, "the target argument is not part of the version");
}

#[tokio::test]
async fn a_redefinition_is_checked_and_a_failed_one_changes_nothing() {
    let r = Registry::new(RegistryConfig::default());
    let err = r.redefine("notes", notes(id_schema("string"))).unwrap_err();
    assert!(err.problem().contains("not defined"), "{err}");
    r.define("notes", notes(id_schema("string"))).unwrap();
    let _m = r.mount("notes", "main").unwrap();
    let before = versions(&r).await;
    let err = r.redefine("notes", |t| {
        t.capability("read", "").raw_handler(json!({"type": "object"}), None, |_: Ctx, v| async move { Ok(v) });
    });
    assert!(err.is_err(), "an empty description is refused");
    assert_eq!(versions(&r).await, before);
    // A capability left out is gone.
    r.redefine("notes", |t| {
        t.capability("read", "Read the notes.").effect(Effect::Read).idempotent().raw_handler(
            json!({"type": "object"}),
            None,
            |_: Ctx, _| async move { Ok(json!({"notes": []})) },
        );
    })
    .unwrap();
    let inv = r.invoke_detailed(call("notes.erase", json!({})), consumer("c")).await;
    assert_produced(&inv, ErrorCode::CapabilityNotFound, Phase::Resolve);
}

/// Hides every capability from everyone.
struct HideAll;

impl AuthorityPolicy for HideAll {
    fn name(&self) -> &str {
        "hide-all"
    }

    fn decide<'a>(&'a self, _call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>> {
        Box::pin(std::future::ready(Ok(AuthorityDecision::Hide)))
    }
}

#[tokio::test]
async fn a_hidden_capability_does_not_tell_its_version() {
    let r = Registry::new(RegistryConfig { authority: Some(Arc::new(HideAll)), ..Default::default() });
    r.define("notes", notes(id_schema("string"))).unwrap();
    let _m = r.mount("notes", "main").unwrap();
    let inv = r.invoke_detailed(call("notes.read", json!({})).with_tool_version("stale"), consumer("c")).await;
    assert_produced(&inv, ErrorCode::CapabilityNotFound, Phase::Authority);
}

/// The serialized request and descriptor spell the version as the wire table says (serde cannot
/// read the constant, so this pins the two together).
#[tokio::test]
async fn the_json_members_are_the_wire_tables() {
    use agent_surface_core::tool_version::wire;
    let request = serde_json::to_value(call("notes.read", json!({})).with_tool_version("v")).unwrap();
    assert_eq!(request[wire::HTTP_MEMBER], "v");
    let r = Registry::new(RegistryConfig::default());
    r.define("notes", notes(id_schema("string"))).unwrap();
    let _m = r.mount("notes", "main").unwrap();
    let listed = serde_json::to_value(r.snapshot(&Consumer::anonymous("c")).await).unwrap();
    let (_, erase) = versions(&r).await;
    assert_eq!(listed["capabilities"][0][wire::HTTP_MEMBER], json!(erase));
    let inv = r.invoke_detailed(call("notes.erase", json!({})).with_tool_version("old"), consumer("c")).await;
    let p = assert_produced(&inv, ErrorCode::StaleCapability, Phase::Resolve);
    assert_eq!(p.details().unwrap()[wire::LIVE_DETAIL], json!(erase));
}
