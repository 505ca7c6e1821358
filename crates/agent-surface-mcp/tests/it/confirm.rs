//! `CONFIRMATION_REQUIRED`: wait mode through elicitation, two-phase otherwise.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use agent_surface_core::details::ConfirmationRequiredDetails;
use agent_surface_core::{ErrorCode, Retry};
use agent_surface_mcp::McpConfig;
use rmcp::model::ElicitationAction;
use serde_json::json;

use crate::support::{call, connect, fixture};

fn with_resolver(f: &crate::support::Fixture) -> McpConfig {
    McpConfig { confirmations: Some(f.gate.clone() as Arc<_>), ..Default::default() }
}

#[tokio::test]
async fn an_accepted_elicitation_approves_and_the_call_proceeds() {
    let f = fixture();
    let c = connect(&f.registry, with_resolver(&f), Some(vec![ElicitationAction::Accept])).await;
    let r = call(&c.client, "store-delete", json!({}), json!({"agent-surface/invocationId": "inv-d"})).await;
    assert_eq!(r.output(), Some(&json!({"deleted": true})));
    assert_eq!(r.invocation_id(), Some("inv-d"));
    assert_eq!(f.runs.0.load(Ordering::SeqCst), 1);
    let asked = c.elicited.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert!(asked[0].contains("Delete everything in the store."), "{asked:?}");
    c.client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_declined_or_cancelled_elicitation_is_a_denial_the_model_must_respect() {
    for answer in [ElicitationAction::Decline, ElicitationAction::Cancel] {
        let f = fixture();
        let c = connect(&f.registry, with_resolver(&f), Some(vec![answer.clone()])).await;
        let r = call(&c.client, "store-delete", json!({}), json!({})).await;
        let p = r.error_payload().unwrap();
        assert_eq!((p.code(), p.retry()), (ErrorCode::ConfirmationInvalid, Retry::No), "{answer:?}");
        assert_eq!(p.detail("reason"), Some(&json!("denied")));
        assert_eq!(f.runs.0.load(Ordering::SeqCst), 0);
        c.client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn without_elicitation_the_confirmation_goes_to_the_model() {
    let f = fixture();
    // The client cannot elicit.
    let c = connect(&f.registry, with_resolver(&f), None).await;
    let r = call(&c.client, "store-delete", json!({}), json!({})).await;
    let p = r.error_payload().unwrap();
    assert_eq!((p.code(), p.retry()), (ErrorCode::ConfirmationRequired, Retry::WithConfirmation));
    let details: ConfirmationRequiredDetails = p.details_as().unwrap();
    c.client.cancel().await.unwrap();

    // No resolver configured: two-phase even with a client that could elicit.
    let c = connect(&f.registry, McpConfig::default(), Some(vec![ElicitationAction::Accept])).await;
    let r = call(&c.client, "store-delete", json!({}), json!({})).await;
    assert_eq!(r.code(), Some(ErrorCode::ConfirmationRequired));
    assert!(c.elicited.lock().unwrap().is_empty());

    // The host approves out of band; the model retries with the id.
    f.gate.pending.lock().unwrap().insert(details.confirmation_id.clone(), Some(true));
    let r =
        call(&c.client, "store-delete", json!({}), json!({"agent-surface/confirmationId": details.confirmation_id}))
            .await;
    assert!(r.is_ok());
    c.client.cancel().await.unwrap();
}

/// The shipped `ConfirmationEngine` behind elicitation (`EngineResolver`): the requester, who
/// may not approve through the engine's API, approves in person at the client; an accepted
/// elicitation runs the call once, a declined one is a denial.
#[tokio::test]
async fn the_confirmation_engine_takes_in_person_answers_through_elicitation() {
    use agent_surface_core::{AgentSurfaceError, Effect};
    use agent_surface_mcp::confirm::EngineResolver;
    use agent_surface_policy::{ConfirmationConfig, ConfirmationEngine, Identity};
    use agent_surface_registry::{Ctx, Registry, RegistryConfig};

    use crate::support::Nothing;

    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig::default()));
    let registry = Registry::new(RegistryConfig { confirmation: Some(engine.clone()), ..Default::default() });
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = runs.clone();
    registry
        .define("vault", |t| {
            t.capability("wipe", "Wipe the vault.")
                .effect(Effect::Destructive)
                .confirm(|_: &Nothing| "Wipe the vault.")
                .handler(move |_c: Ctx, _i: Nothing| {
                    let seen = seen.clone();
                    async move {
                        seen.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, AgentSurfaceError>(json!({"wiped": true}))
                    }
                });
        })
        .unwrap();
    let _m = registry.mount("vault", "main").unwrap();
    let config = McpConfig {
        confirmations: Some(Arc::new(EngineResolver::new(engine.clone()))),
        identity: Some(Identity::new("alice")),
        ..Default::default()
    };
    let answers = vec![ElicitationAction::Accept, ElicitationAction::Decline];
    let c = connect(&registry, config, Some(answers)).await;

    let r = call(&c.client, "vault-wipe", json!({}), json!({"agent-surface/invocationId": "w-1"})).await;
    assert_eq!(r.output(), Some(&json!({"wiped": true})), "{r:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let r = call(&c.client, "vault-wipe", json!({}), json!({})).await;
    let p = r.error_payload().unwrap();
    assert_eq!((p.code(), p.detail("reason")), (ErrorCode::ConfirmationInvalid, Some(&json!("denied"))));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(c.elicited.lock().unwrap().len(), 2);
    c.client.cancel().await.unwrap();
}

/// Legacy era, a client that cannot elicit: once a person approves the relayed confirmation,
/// the model's repetition of the same call (it cannot send the id) presents it and runs once.
#[tokio::test]
async fn an_approved_confirmation_is_presented_when_the_model_repeats_the_call() {
    let f = fixture();
    let c = connect(&f.registry, McpConfig::default(), None).await;
    let r = call(&c.client, "store-delete", json!({}), json!({})).await;
    let details: ConfirmationRequiredDetails = r.error_payload().unwrap().details_as().unwrap();
    f.gate.pending.lock().unwrap().insert(details.confirmation_id.clone(), Some(true));
    let r = call(&c.client, "store-delete", json!({}), json!({})).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(f.runs.0.load(Ordering::SeqCst), 1);
    // Single use: the next request is a new confirmation.
    let r = call(&c.client, "store-delete", json!({}), json!({})).await;
    let next: ConfirmationRequiredDetails = r.error_payload().unwrap().details_as().unwrap();
    assert_ne!(next.confirmation_id, details.confirmation_id);
    c.client.cancel().await.unwrap();
}
