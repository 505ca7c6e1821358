//! Handlers with typed extractors: what they need is checked at mount (a missing `provide` or an
//! instance without the state a handler takes is a definition error), and calls get the values.

use agent_surface_core::{AgentSurfaceError, DefinitionErrorCode};
use agent_surface_policy::{Consumer, Identity};
use agent_surface_registry::{Caller, Ctx, Instance, InstanceState, InvokeOptions, Registry, RegistryConfig, State};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::support::*;

struct Db {
    prefix: &'static str,
}

struct Board {
    name: &'static str,
}

#[derive(Deserialize, JsonSchema)]
struct NewTicket {
    title: String,
}

fn tickets() -> Registry {
    let registry = Registry::new(RegistryConfig::default());
    registry
        .define("tickets", |t| {
            t.capability("create", "Open a ticket.").handle(
                |State(db): State<Db>, InstanceState(board): InstanceState<Board>, caller: Caller, i: NewTicket| async move {
                    let who = caller.0.identity().map_or("anonymous".to_string(), |id| id.subject.clone());
                    Ok::<_, AgentSurfaceError>(json!(format!("{}:{}:{}:{}", db.prefix, board.name, who, i.title)))
                },
            );
            // The closure style keeps working next to it.
            t.capability("list", "List the tickets.")
                .handler(|ctx: Ctx, _: serde_json::Value| async move { Ok::<_, AgentSurfaceError>(json!(ctx.state::<Db>().prefix)) });
            // No extractor at all: only the input.
            t.capability("echo", "Echo a title.")
                .handle(|i: NewTicket| async move { Ok::<_, AgentSurfaceError>(i.title) });
        })
        .expect("tickets is valid");
    registry
}

#[test]
fn a_missing_provide_is_a_definition_error() {
    let registry = tickets();
    let err = registry.mount_with("tickets", "main", Instance::new().state(Board { name: "b" })).unwrap_err();
    assert_eq!(err.code(), DefinitionErrorCode::InvalidDefinition);
    assert_eq!(err.location(), "tickets.create");
    assert!(err.problem().contains("State<") && err.problem().contains("Registry::provide"), "{err}");
    assert!(registry.check_wiring().is_err(), "check_wiring finds it before any mount");
}

#[test]
fn an_instance_without_the_state_a_handler_takes_is_a_definition_error() {
    let registry = tickets();
    registry.provide(Db { prefix: "T" });
    registry.check_wiring().expect("the shared state is provided");
    let err = registry.mount("tickets", "main").unwrap_err();
    assert_eq!(err.location(), "tickets.create");
    assert!(err.problem().contains("InstanceState<") && err.problem().contains("`main`"), "{err}");
    let err = registry.mount_with("tickets", "other", Instance::new().state(7_u32)).unwrap_err();
    assert!(err.problem().contains("`other`"), "{err}");
}

#[tokio::test]
async fn extractors_hand_the_handler_what_it_takes() {
    let registry = tickets();
    registry.provide(Db { prefix: "T" });
    let _main =
        registry.mount_with("tickets", "main", Instance::new().state(Board { name: "support" })).expect("mounts");
    let alice = InvokeOptions::new(Consumer::authenticated("c-1", Identity::new("alice")));
    let created = registry.invoke(call("tickets.create", json!({"title": "printer"})), alice).await;
    assert_eq!(created.output(), Some(&json!("T:support:alice:printer")));
    let listed = registry.invoke(call("tickets.list", json!({})), consumer("c-2")).await;
    assert_eq!(listed.output(), Some(&json!("T")));
    let echoed = registry.invoke(call("tickets.echo", json!({"title": "x"})), consumer("c-2")).await;
    assert_eq!(echoed.output(), Some(&json!("x")));
}
