//! Registration-time checks: every defect is a `DefinitionError` with its code, and nothing of a
//! defective type is registered.

use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, DefinitionErrorCode as Code, Effect};
use agent_surface_registry::{Binding, CapabilityBuilder, Ctx, Registry, RegistryConfig, TypeBuilder};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};

/// Finishes `c` with a handler that echoes its input, over the empty object schema.
fn echo(c: CapabilityBuilder<'_, '_>) {
    c.raw_handler(json!({"type": "object"}), None, |_c, v| async move { Ok(v) });
}

fn noop(t: &mut TypeBuilder<'_>, id: &str) {
    echo(t.capability(id, "Do nothing."));
}

#[track_caller]
fn check(type_id: &str, build: impl FnOnce(&mut TypeBuilder<'_>), expected: Code) {
    let r = Registry::new(RegistryConfig::default());
    let err = r.define(type_id, build).expect_err("definition must be rejected");
    assert_eq!(err.code(), expected, "{err}");
    assert_eq!(r.capability_count(), 0, "nothing of a rejected type is registered");
}

#[test]
fn invalid_ids() {
    check("Orders", |t| noop(t, "cancel"), Code::InvalidId);
    check("orders", |t| noop(t, "Cancel"), Code::InvalidId);
    check("orders", |t| noop(t, "can-cel"), Code::InvalidId);
    check("orders", |t| noop(t, "a.b"), Code::InvalidId);
    check("orders", |t| noop(t, ""), Code::InvalidId);
    check("orders", |t| noop(t, &"x".repeat(40)), Code::InvalidId);
    check(&"o".repeat(25), |t| noop(t, "x"), Code::InvalidId);
}

#[test]
fn invalid_definitions() {
    check("orders", |t| echo(t.capability("x", "   ")), Code::InvalidDefinition);
    check("orders", |t| echo(t.capability("x", "Do x.").meta(json!([1, 2]))), Code::InvalidDefinition);
    check(
        "orders",
        |t| {
            let _ = t.capability("x", "Never finished.");
        },
        Code::InvalidDefinition,
    );
    check(
        "orders",
        |t| {
            t.raw(
                json!({"name": "x", "description": "Do x.", "inputSchema": {"type": "object"}, "colour": "red"}),
                |_c, v| async move { Ok(v) },
            )
        },
        Code::InvalidDefinition,
    );
    check(
        "orders",
        |t| {
            t.capability("x", "Do x.").bind("missing", Binding::from_consumer(|_| None)).raw_handler(
                json!({"type": "object", "properties": {"a": {"type": "string"}}}),
                None,
                |_c, v| async move { Ok(v) },
            )
        },
        Code::InvalidDefinition,
    );
}

#[test]
fn unsupported_schemas() {
    let schema = |s: Value| {
        move |t: &mut TypeBuilder<'_>| t.capability("x", "Do x.").raw_handler(s, None, |_c, v| async move { Ok(v) })
    };
    check("orders", schema(json!({"type": "string"})), Code::UnsupportedSchema);
    check("orders", schema(json!({"type": "object", "allOf": [{"type": "object"}]})), Code::UnsupportedSchema);
    check(
        "orders",
        schema(json!({"type": "object", "properties": {"a": {"not": {"type": "string"}}}})),
        Code::UnsupportedSchema,
    );
    check(
        "orders",
        schema(json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}})),
        Code::UnsupportedSchema,
    );
    let mut deep = json!({"type": "string"});
    for _ in 0..40 {
        deep = json!({"type": "object", "properties": {"a": deep}});
    }
    check("orders", schema(deep), Code::UnsupportedSchema);
    let huge: serde_json::Map<String, Value> =
        (0..5000).map(|i| (format!("field_{i}"), json!({"type": "string", "description": "x".repeat(20)}))).collect();
    check("orders", schema(json!({"type": "object", "properties": huge})), Code::UnsupportedSchema);
}

struct NoExecutor;
impl agent_surface_registry::Executor for NoExecutor {
    fn execute(&self, _ctx: Ctx, _cap: &str, input: Value) -> BoxFuture<'static, Result<Value, AgentSurfaceError>> {
        Box::pin(async move { Ok(input) })
    }
}

#[test]
fn plane_violations() {
    check("view", |t| echo(t.capability("x", "Delete it.").view().effect(Effect::Destructive)), Code::PlaneViolation);
    check("view", |t| echo(t.capability("x", "Mail it.").view().effect(Effect::External)), Code::PlaneViolation);
    check(
        "view",
        |t| {
            t.capability("x", "Bound view.").view().bind("a", Binding::from_consumer(|_| None)).raw_handler(
                json!({"type": "object", "properties": {"a": {"type": "string"}}}),
                None,
                |_c, v| async move { Ok(v) },
            )
        },
        Code::PlaneViolation,
    );
    check(
        "proc",
        |t| t.capability("x", "Run remotely.").raw_procedure("payments", json!({"type": "object"}), None),
        Code::PlaneViolation,
    );
    // With the executor registered first, the same procedure is fine.
    let r = Registry::new(RegistryConfig::default());
    r.register_executor("payments", NoExecutor);
    r.define("proc", |t| t.capability("x", "Run remotely.").raw_procedure("payments", json!({"type": "object"}), None))
        .unwrap();
}

#[test]
fn duplicates_and_limits() {
    check(
        "orders",
        |t| {
            noop(t, "x");
            noop(t, "x");
        },
        Code::DuplicateCapability,
    );
    let r = Registry::new(RegistryConfig::default());
    r.define("orders", |t| noop(t, "x")).unwrap();
    assert_eq!(r.define("orders", |t| noop(t, "y")).unwrap_err().code(), Code::DuplicateCapability);

    check("orders", |t| echo(t.capability("x", &"d".repeat(2000))), Code::LimitExceeded);
    check(
        "orders",
        |t| echo(t.capability("x", "Do x.").meta(json!({"blob": "m".repeat(10_000)}))),
        Code::LimitExceeded,
    );
    check(
        "orders",
        |t| echo(t.capability("x", "Do x.").time_budget(Duration::from_secs(3600 * 24))),
        Code::LimitExceeded,
    );
    check(
        "orders",
        |t| {
            for i in 0..300 {
                noop(t, &format!("c{i}"));
            }
        },
        Code::LimitExceeded,
    );
}

#[test]
fn mounting_checks_instance_ids_and_types() {
    let r = Registry::new(RegistryConfig::default());
    r.define("orders", |t| noop(t, "x")).unwrap();
    assert_eq!(r.mount("orders", "bad id").unwrap_err().code(), Code::InvalidId);
    assert_eq!(r.mount("orders", "").unwrap_err().code(), Code::InvalidId);
    assert_eq!(r.mount("nothing", "a").unwrap_err().code(), Code::InvalidDefinition);
    assert!(r.mount("orders", "tenant-1:cart.v2").unwrap().is_live());
}
