//! `GET {prefix}/openapi.json`: the document follows the live surface.

use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_http::{HttpConfig, router};
use agent_surface_registry::{Ctx, Registry, RegistryConfig};
use axum::body::Body;
use http::Request;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

async fn document(app: &axum::Router, path: &str) -> Value {
    let request = Request::builder().uri(path).header("host", "localhost").body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap()
}

fn listed(doc: &Value) -> Vec<String> {
    doc["components"]["schemas"]["InvokeRequest"]["discriminator"]["mapping"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_document_lists_every_mounted_capability_and_follows_mounts_and_unmounts() {
    let registry = Registry::new(RegistryConfig::default());
    registry
        .define("books", |t| {
            t.capability("find", "Find a book.").effect(Effect::Read).raw_handler(
                json!({"type": "object", "properties": {"by": {"$ref": "#/$defs/author"}}, "$defs": {"author": {"type": "string"}}}),
                Some(json!({"type": "object", "properties": {"title": {"type": "string"}}})),
                |_ctx: Ctx, _i: Value| async move { Ok::<_, AgentSurfaceError>(json!({"title": "Emma"})) },
            );
        })
        .unwrap();
    registry
        .define("lamps", |t| {
            t.capability("dim", "Dim a lamp.").effect(Effect::Write).long_running().raw_handler(
                json!({"type": "object"}),
                None,
                |_ctx: Ctx, _i: Value| async move { Ok::<_, AgentSurfaceError>(json!({})) },
            );
        })
        .unwrap();
    let books = registry.mount("books", "main").unwrap();
    let app = router(registry.clone(), HttpConfig::with_prefix("/api"));
    let doc = document(&app, "/api/openapi.json").await;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["servers"], json!([{"url": "/api"}]));
    assert_eq!(listed(&doc), ["books.find"]);
    let schemas = &doc["components"]["schemas"];
    // The input schema's own reference now points into its component.
    assert_eq!(
        schemas["capability.books.find.input"]["properties"]["by"]["$ref"],
        "#/components/schemas/capability.books.find.input/$defs/author"
    );
    assert_eq!(schemas["capability.books.find.output"]["properties"]["title"], json!({"type": "string"}));
    assert_eq!(schemas["capability.books.find.request"]["properties"]["capability"], json!({"const": "books.find"}));
    // The live tool version, as the capability lists it, is the example of its toolVersion.
    let snapshot = registry.snapshot(&agent_surface_policy::Consumer::anonymous("http-anonymous:default")).await;
    let live = snapshot.capability("books.find").and_then(|c| c.tool_version.clone()).unwrap();
    assert_eq!(schemas["capability.books.find.request"]["properties"]["toolVersion"]["examples"], json!([live]));

    // A mount adds a capability, an unmount removes it.
    let lamps = registry.mount("lamps", "hall").unwrap();
    let doc = document(&app, "/api/openapi.json").await;
    assert_eq!(listed(&doc), ["books.find", "lamps.dim"]);
    assert_eq!(doc["components"]["schemas"]["capability.lamps.dim.request"]["x-agent-surface-long-running"], true);
    drop(books);
    let doc = document(&app, "/api/openapi.json").await;
    assert_eq!(listed(&doc), ["lamps.dim"]);
    assert!(doc["components"]["schemas"].get("capability.books.find.input").is_none());
    drop(lamps);
    let doc = document(&app, "/api/openapi.json").await;
    assert_eq!(listed(&doc), Vec::<String>::new());
    assert_eq!(doc["components"]["schemas"]["InvokeRequest"]["properties"]["capability"], json!({"type": "string"}));

    // Nested, the servers entry names the path the binding was reached by.
    let nested = axum::Router::new().nest("/outer", router(registry.clone(), HttpConfig::default()));
    assert_eq!(document(&nested, "/outer/openapi.json").await["servers"], json!([{"url": "/outer"}]));
}
