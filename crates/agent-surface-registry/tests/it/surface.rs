//! Discovery, versions, mounts and tombstones.

use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_policy::Consumer;
use agent_surface_registry::{Ctx, DuplicateInstance, Instance, MountRejection, Registry, RegistryConfig};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn snapshot_lists_mounted_capabilities_with_their_descriptors() {
    let (r, m) = echo_registry(RegistryConfig::default());
    let snap = r.snapshot(&Consumer::anonymous("c")).await;
    assert_eq!(snap.surface_id, r.surface_id());
    assert_eq!(snap.version, r.version());
    let d = snap.capability("demo.echo").expect("listed");
    assert_eq!(d.tool_name, "demo-echo");
    assert_eq!(d.effect, Effect::Read);
    assert!(d.idempotent && d.enabled);
    assert_eq!(d.instances.len(), 1);
    assert_eq!(d.instances[0].registration_id, m.registration_id().unwrap());
    assert_eq!(d.input_schema["properties"]["text"]["type"], "string");
    assert_eq!(d.input_schema["additionalProperties"], false);
    assert_eq!(d.output_schema.as_ref().unwrap()["properties"]["text"]["type"], "string");
    let json = serde_json::to_value(&snap).unwrap();
    assert!(json["capabilities"][0].get("toolName").is_some());
    drop(m);
    assert!(r.snapshot(&Consumer::anonymous("c")).await.capabilities.is_empty());
}

#[tokio::test]
async fn every_change_bumps_the_version_and_notifies() {
    let r = Registry::new(RegistryConfig::default());
    let mut rx = r.subscribe();
    let v0 = r.version();
    r.define("demo", |t| {
        t.capability("echo", "Echo.")
            .handler(|_c: Ctx, i: Echo| async move { Ok::<_, AgentSurfaceError>(Echoed { text: i.text }) })
    })
    .unwrap();
    let v1 = r.version();
    let m = r.mount("demo", "a").unwrap();
    let v2 = r.version();
    r.disable("demo.echo", "Paused.");
    let v3 = r.version();
    drop(m);
    let v4 = r.version();
    assert!(v0 < v1 && v1 < v2 && v2 < v3 && v3 < v4);
    assert!(rx.has_changed().unwrap());
    assert_eq!(*rx.borrow_and_update(), v4);
    assert!(!r.disable("demo.nothing", "x"));
}

#[tokio::test]
async fn duplicate_mount_under_reject_gives_a_dead_handle() {
    let (r, m) = echo_registry(RegistryConfig::default());
    let dup = r.mount("demo", "main").unwrap();
    assert!(!dup.is_live());
    assert_eq!(dup.rejection(), Some(MountRejection::Duplicate));
    drop(dup);
    assert!(m.is_live(), "dropping the dead handle leaves the live one alone");
    let snap = r.snapshot(&Consumer::anonymous("c")).await;
    assert_eq!(snap.capability("demo.echo").unwrap().instances.len(), 1);
}

#[tokio::test]
async fn replace_rule_issues_a_new_registration() {
    let (r, m) = echo_registry(RegistryConfig { duplicate_instance: DuplicateInstance::Replace, ..Default::default() });
    let m2 = r.mount_with("demo", "main", Instance::new().description("fresh")).unwrap();
    assert!(m2.is_live() && !m.is_live());
    drop(m);
    assert!(m2.is_live(), "dropping the replaced handle does not unmount the replacement");
}

#[tokio::test]
async fn tombstones_are_bounded() {
    let clock = clock();
    let r = Registry::new(RegistryConfig { max_tombstones: 10, ..config_with(&clock) });
    r.define("demo", |t| {
        t.capability("echo", "Echo.")
            .handler(|_c: Ctx, i: Echo| async move { Ok::<_, AgentSurfaceError>(Echoed { text: i.text }) })
    })
    .unwrap();
    for i in 0..100 {
        drop(r.mount("demo", &format!("i{i}")).unwrap());
    }
    assert_eq!(r.tombstone_count(), 10);
    clock.advance(Duration::from_secs(3600));
    assert_eq!(r.tombstone_count(), 0);
}

#[tokio::test]
async fn disposed_registry_rejects_mounts() {
    let (r, _m) = echo_registry(RegistryConfig::default());
    r.dispose();
    assert!(r.is_disposed());
    let m = r.mount("demo", "late").unwrap();
    assert_eq!(m.rejection(), Some(MountRejection::Disposed));
    let out = r.invoke(call("demo.echo", json!({"text": "x"})), consumer("c")).await;
    assert_eq!(out.code(), Some(agent_surface_core::ErrorCode::Cancelled));
}
