//! `CONFIRMATION_REQUIRED`: wait mode through elicitation, two-phase otherwise.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use agent_surface_core::details::ConfirmationRequiredDetails;
use agent_surface_core::{ErrorCode, Retry};
use agent_surface_mcp::McpConfig;
use rmcp::model::ElicitationAction;
use serde_json::json;

use crate::support::{Resolver, call, connect, fixture};

fn with_resolver(f: &crate::support::Fixture) -> McpConfig {
    McpConfig { confirmations: Some(Arc::new(Resolver(f.gate.clone()))), ..Default::default() }
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
    // The client repeats its request as it sent it (it never learnt the confirmation's id):
    // answered from the record, neither refused as another request nor asked or run again.
    let again = call(&c.client, "store-delete", json!({}), json!({"agent-surface/invocationId": "inv-d"})).await;
    assert_eq!(again.output(), Some(&json!({"deleted": true})), "{again:?}");
    assert_eq!(f.runs.0.load(Ordering::SeqCst), 1);
    assert_eq!(c.elicited.lock().unwrap().len(), 1);
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
        // Nothing ran, and the payload says so, as the registry's refusals at the gate do.
        assert!(p.not_processed(), "{answer:?}");
        assert_eq!(f.runs.0.load(Ordering::SeqCst), 0);
        c.client.cancel().await.unwrap();
    }
}

/// Legacy era, as the modern one: a person who declines a prompt whose confirmation was used
/// meanwhile (an approver at the page, then the same call presenting it) is told `consumed` —
/// the action ran — not `denied`.
#[tokio::test]
async fn a_decline_after_the_approval_was_used_is_told_consumed() {
    use agent_surface_mcp::confirm::{ConfirmationAnswer, ConfirmationResolver, ResolveError};
    use agent_surface_policy::Consumer;
    use agent_surface_policy::confirmation::ConfirmationState;
    use futures_util::future::BoxFuture;

    /// A resolver whose confirmations were all used before the person answered.
    struct Used;
    impl ConfirmationResolver for Used {
        fn resolve<'a>(
            &'a self,
            _: &'a str,
            _: &'a Consumer,
            _: ConfirmationAnswer,
        ) -> BoxFuture<'a, Result<(), ResolveError>> {
            Box::pin(std::future::ready(Err(ResolveError("already consumed".into()))))
        }
        fn state<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Option<ConfirmationState>> {
            let consumed = ConfirmationState::Consumed { approved_by: "bob".into() };
            Box::pin(std::future::ready(Some(consumed)))
        }
    }
    let f = fixture();
    let config = McpConfig { confirmations: Some(Arc::new(Used)), ..Default::default() };
    let c = connect(&f.registry, config, Some(vec![ElicitationAction::Decline])).await;
    let r = call(&c.client, "store-delete", json!({}), json!({})).await;
    let p = r.error_payload().unwrap();
    assert_eq!((p.code(), p.detail("reason")), (ErrorCode::ConfirmationInvalid, Some(&json!("consumed"))), "{p:?}");
    c.client.cancel().await.unwrap();
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
    f.gate.answer(&details.confirmation_id, true).expect("pending");
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
    use agent_surface_mcp::confirm::EngineResolver;
    use agent_surface_policy::Identity;

    let url_mode::Env { engine, registry, runs, _mount } = url_mode::env(None);
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
    // Its repeat as the client sent it is replayed (not INVOCATION_CONFLICT, whose advice to
    // call again would have asked and run the write a second time).
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

/// Legacy era: a quorum that asks for a role does not count the person's approval in person, so
/// a client that can elicit in form mode gets no `elicitation/create` (the engine would refuse
/// the answer); the model gets `CONFIRMATION_REQUIRED`, on the repeat too, and an approver of
/// the role approves it out of band. The default quorum is still asked (control).
#[tokio::test]
async fn a_confirmation_whose_quorum_asks_for_a_role_is_not_asked_in_person() {
    use agent_surface_mcp::confirm::EngineResolver;
    use agent_surface_policy::{Identity, Quorum, Scope};

    for (quorum, asked) in [(Quorum::of(1).with_role("finance"), false), (Quorum::of(1), true)] {
        let url_mode::Env { engine, registry, runs, _mount } =
            url_mode::env_where(None, vec![(Scope::capability("vault.wipe"), quorum)]);
        let config = McpConfig {
            confirmations: Some(Arc::new(EngineResolver::new(engine.clone()))),
            identity: Some(Identity::new("alice")),
            ..Default::default()
        };
        let c = connect(&registry, config, Some(vec![ElicitationAction::Accept])).await;
        let r = call(&c.client, "vault-wipe", json!({}), json!({})).await;
        if asked {
            assert_eq!(r.output(), Some(&json!({"wiped": true})), "{r:?}");
            assert_eq!(c.elicited.lock().unwrap().len(), 1);
            c.client.cancel().await.unwrap();
            continue;
        }
        let p = r.error_payload().unwrap();
        assert_eq!((p.code(), p.retry()), (ErrorCode::ConfirmationRequired, Retry::WithConfirmation));
        let r = call(&c.client, "vault-wipe", json!({}), json!({})).await;
        assert_eq!(r.code(), Some(ErrorCode::ConfirmationRequired), "{r:?}");
        assert!(c.elicited.lock().unwrap().is_empty(), "asked: {:?}", c.elicited.lock().unwrap());
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        let details: ConfirmationRequiredDetails = r.error_payload().unwrap().details_as().unwrap();
        let officer = Identity::new("fiona").with_role("finance");
        engine.approve(&details.confirmation_id, &officer).await.unwrap();
        let meta = json!({"agent-surface/confirmationId": details.confirmation_id});
        let r = call(&c.client, "vault-wipe", json!({}), meta).await;
        assert_eq!(r.output(), Some(&json!({"wiped": true})), "{r:?}");
        c.client.cancel().await.unwrap();
    }
}

/// Legacy era, a client that cannot elicit: once a person approves the relayed confirmation,
/// the model's repetition of the same call (it cannot send the id) presents it and runs once.
#[tokio::test]
async fn an_approved_confirmation_is_presented_when_the_model_repeats_the_call() {
    let f = fixture();
    let c = connect(&f.registry, McpConfig::default(), None).await;
    let r = call(&c.client, "store-delete", json!({}), json!({})).await;
    let details: ConfirmationRequiredDetails = r.error_payload().unwrap().details_as().unwrap();
    f.gate.answer(&details.confirmation_id, true).expect("pending");
    let r = call(&c.client, "store-delete", json!({}), json!({})).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(f.runs.0.load(Ordering::SeqCst), 1);
    // Single use: the next request is a new confirmation.
    let r = call(&c.client, "store-delete", json!({}), json!({})).await;
    let next: ConfirmationRequiredDetails = r.error_payload().unwrap().details_as().unwrap();
    assert_ne!(next.confirmation_id, details.confirmation_id);
    c.client.cancel().await.unwrap();
}

/// URL-mode elicitation (legacy era): the client sends the person to the confirmation's approval
/// page, where someone else decides.
mod url_mode {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, InvokeResult};
    use agent_surface_mcp::confirm::EngineResolver;
    use agent_surface_mcp::{McpConfig, McpServer, codec};
    use agent_surface_policy::{ConfirmationConfig, ConfirmationEngine, Identity, Quorum, Scope};
    use agent_surface_registry::{Ctx, Registry, RegistryConfig};
    use rmcp::model::{
        ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
        FormElicitationCapability, Implementation, UrlElicitationCapability,
    };
    use rmcp::service::{RequestContext, RunningService};
    use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
    use serde_json::{Value, json};

    use crate::support::{Nothing, params};

    const BASE: &str = "https://shop.example/inbox/c";

    /// What the person does at the page before the client answers.
    #[derive(Clone, Copy)]
    enum AtThePage {
        /// A manager approves there, then the client answers `accept`.
        ManagerApproves,
        /// Nobody decides yet; the client answers `accept`.
        Nothing,
        /// The person declines to open the page.
        Decline,
    }

    struct UrlClient {
        form: bool,
        engine: Arc<ConfirmationEngine>,
        plan: Mutex<Vec<AtThePage>>,
        /// (mode, message, url, elicitation id) of every elicitation.
        asked: Asked,
    }

    impl ClientHandler for UrlClient {
        fn get_info(&self) -> ClientConfig {
            let mut elicitation = ElicitationCapability::new().with_url(UrlElicitationCapability::new());
            if self.form {
                elicitation = elicitation.with_form(FormElicitationCapability::new());
            }
            let mut caps = ClientCapabilities::default();
            caps.elicitation = Some(elicitation);
            ClientConfig::new(caps, Implementation::new("url-client", "0"))
        }

        async fn create_elicitation(
            &self,
            request: ElicitRequestParams,
            _context: RequestContext<RoleClient>,
        ) -> Result<ElicitResult, ErrorData> {
            let ElicitRequestParams::UrlElicitationParams { message, url, elicitation_id, .. } = request else {
                self.asked.lock().unwrap().push(("form".into(), String::new(), String::new(), String::new()));
                return Ok(ElicitResult::new(ElicitationAction::Accept));
            };
            self.asked.lock().unwrap().push(("url".into(), message, url.clone(), elicitation_id));
            let step = self.plan.lock().unwrap().remove(0);
            let id = url.strip_prefix(&format!("{BASE}/")).unwrap_or_default().to_string();
            Ok(ElicitResult::new(match step {
                AtThePage::ManagerApproves => {
                    self.engine.approve(&id, &Identity::new("manager")).await.unwrap();
                    ElicitationAction::Accept
                }
                AtThePage::Nothing => ElicitationAction::Accept,
                AtThePage::Decline => ElicitationAction::Decline,
            }))
        }
    }

    /// A registry with one destructive capability, `vault.wipe`, gated by the shipped engine (with
    /// `base` as its approval base URL), and how often it ran.
    pub(super) struct Env {
        pub(super) engine: Arc<ConfirmationEngine>,
        pub(super) registry: Registry,
        pub(super) runs: Arc<AtomicUsize>,
        pub(super) _mount: agent_surface_registry::Mount,
    }

    pub(super) fn env(base: Option<&str>) -> Env {
        env_where(base, Vec::new())
    }

    /// The same, with the engine's `quorums`.
    pub(super) fn env_where(base: Option<&str>, quorums: Vec<(Scope, Quorum)>) -> Env {
        let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig {
            approval_base_url: base.map(str::to_string),
            quorums,
            ..Default::default()
        }));
        let registry = Registry::new(RegistryConfig { confirmation: Some(engine.clone()), ..Default::default() });
        let runs = Arc::new(AtomicUsize::new(0));
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
        let mount = registry.mount("vault", "main").unwrap();
        Env { engine, registry, runs, _mount: mount }
    }

    type Asked = Arc<Mutex<Vec<(String, String, String, String)>>>;

    async fn connect(env: &Env, form: bool, plan: Vec<AtThePage>) -> (RunningService<RoleClient, UrlClient>, Asked) {
        let config = McpConfig {
            confirmations: Some(Arc::new(EngineResolver::new(env.engine.clone()))),
            identity: Some(Identity::new("alice")),
            ..Default::default()
        };
        let (client_io, server_io) = tokio::io::duplex(1 << 20);
        let (read, write) = tokio::io::split(server_io);
        let max = config.max_message_bytes;
        tokio::spawn(agent_surface_mcp::serve_io(McpServer::new(env.registry.clone(), config), read, write, max));
        let asked = Arc::new(Mutex::new(Vec::new()));
        let handler = UrlClient { form, engine: env.engine.clone(), plan: Mutex::new(plan), asked: asked.clone() };
        (handler.serve(client_io).await.unwrap(), asked)
    }

    async fn wipe(client: &RunningService<RoleClient, UrlClient>) -> InvokeResult {
        let raw = client.call_tool(params("vault-wipe", json!({}), json!({}))).await.unwrap();
        codec::decode(&raw).unwrap()
    }

    /// The client sends the person to the page; a manager approves there; the call runs once.
    /// Preferred over a form (an in-person approval) when the client can do both.
    #[tokio::test]
    async fn the_person_is_sent_to_the_approval_page_and_the_call_runs_once_approved() {
        for form in [false, true] {
            let env = env(Some(BASE));
            let (client, asked) = connect(&env, form, vec![AtThePage::ManagerApproves]).await;
            let r = wipe(&client).await;
            assert_eq!(r.output(), Some(&json!({"wiped": true})), "{r:?}");
            assert_eq!(env.runs.load(Ordering::SeqCst), 1);
            let asked = asked.lock().unwrap().clone();
            assert_eq!(asked.len(), 1, "{asked:?}");
            let (mode, message, url, elicitation_id) = &asked[0];
            assert_eq!(mode, "url");
            assert_eq!(url, &format!("{BASE}/{elicitation_id}"), "the elicitation id is the confirmation's");
            assert!(message.contains("Wipe the vault.") && message.contains("approval page"), "{message}");
            // The person asked is the requester, who cannot decide at the page: they pass it on.
            assert!(message.contains("someone who may approve it") && !message.contains("to approve it,"), "{message}");
            client.cancel().await.unwrap();
        }
    }

    /// Nobody decided yet: the model gets the two-phase result with the approval URL; once a
    /// manager approved, the model's plain repeat runs once (no elicitation needed then). A
    /// declined page is no denial: the two-phase result again.
    #[tokio::test]
    async fn without_a_decision_yet_the_model_gets_the_approval_url_and_its_repeat_runs_later() {
        let env = env(Some(BASE));
        let (client, asked) = connect(&env, false, vec![AtThePage::Nothing, AtThePage::Decline]).await;
        let r = wipe(&client).await;
        let p = r.error_payload().unwrap();
        assert_eq!(p.code(), ErrorCode::ConfirmationRequired);
        let id = p.detail("confirmationId").and_then(Value::as_str).unwrap().to_string();
        assert_eq!(p.detail("approvalUrl"), Some(&json!(format!("{BASE}/{id}"))));
        assert!(p.message().contains("approval page in details.approvalUrl"), "{}", p.message());
        let r = wipe(&client).await;
        assert_eq!(r.code(), Some(ErrorCode::ConfirmationRequired), "a declined page leaves it pending");
        assert_eq!(r.error_payload().unwrap().detail("confirmationId"), Some(&json!(id)));
        assert_eq!(asked.lock().unwrap().len(), 2);

        env.engine.approve(&id, &Identity::new("manager")).await.unwrap();
        let r = wipe(&client).await;
        assert_eq!(r.output(), Some(&json!({"wiped": true})), "{r:?}");
        assert_eq!(env.runs.load(Ordering::SeqCst), 1);
        assert_eq!(asked.lock().unwrap().len(), 2, "an approved call asks nobody");
        client.cancel().await.unwrap();
    }

    /// Without an approval page, a URL-only client gets the two-phase result and no elicitation.
    #[tokio::test]
    async fn without_an_approval_page_there_is_no_url_elicitation() {
        let env = env(None);
        let (client, asked) = connect(&env, false, vec![]).await;
        let r = wipe(&client).await;
        let p = r.error_payload().unwrap();
        assert_eq!(p.code(), ErrorCode::ConfirmationRequired);
        assert_eq!(p.detail("approvalUrl"), None);
        assert!(asked.lock().unwrap().is_empty());
        client.cancel().await.unwrap();
    }
}

/// An elicitation the adapter stops waiting for is withdrawn: the client gets
/// `notifications/cancelled` naming the `elicitation/create` request, so its prompt closes rather
/// than taking an answer that goes nowhere.
mod withdrawn {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use agent_surface_core::ErrorCode;
    use agent_surface_mcp::{McpConfig, McpServer, codec};
    use rmcp::model::{
        CancelledNotificationParam, ClientCapabilities, ClientConfig, ClientRequest, ElicitRequestParams, ElicitResult,
        ElicitationAction, ElicitationCapability, Implementation, RequestId,
    };
    use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, RunningService};
    use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
    use serde_json::json;

    use crate::support::{Resolver, eventually, fixture, params};

    /// A client whose person takes a second to answer (or, `silent`, never does); it records the
    /// ids of the elicitations it was asked and of those withdrawn.
    #[derive(Default)]
    struct SlowPerson {
        asked: Arc<Mutex<Vec<RequestId>>>,
        withdrawn: Arc<Mutex<Vec<RequestId>>>,
        silent: bool,
    }

    impl ClientHandler for SlowPerson {
        fn get_info(&self) -> ClientConfig {
            let mut caps = ClientCapabilities::default();
            caps.elicitation = Some(ElicitationCapability::new());
            ClientConfig::new(caps, Implementation::new("slow-person", "0"))
        }

        async fn create_elicitation(
            &self,
            _request: ElicitRequestParams,
            context: RequestContext<RoleClient>,
        ) -> Result<ElicitResult, ErrorData> {
            self.asked.lock().unwrap().push(context.id);
            if self.silent {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(ElicitResult::new(ElicitationAction::Accept))
        }

        async fn on_cancelled(&self, params: CancelledNotificationParam, _context: NotificationContext<RoleClient>) {
            if let Some(id) = params.request_id {
                self.withdrawn.lock().unwrap().push(id);
            }
        }
    }

    type Asked = Arc<Mutex<Vec<RequestId>>>;

    async fn connect(
        timeout: Duration,
    ) -> (RunningService<RoleClient, SlowPerson>, Asked, Asked, crate::support::Fixture) {
        connect_to(timeout, SlowPerson::default()).await
    }

    async fn connect_to(
        timeout: Duration,
        person: SlowPerson,
    ) -> (RunningService<RoleClient, SlowPerson>, Asked, Asked, crate::support::Fixture) {
        let f = fixture();
        let config = McpConfig {
            confirmations: Some(Arc::new(Resolver(f.gate.clone()))),
            elicitation_timeout: timeout,
            ..Default::default()
        };
        let (client_io, server_io) = tokio::io::duplex(1 << 20);
        let (read, write) = tokio::io::split(server_io);
        let max = config.max_message_bytes;
        tokio::spawn(agent_surface_mcp::serve_io(McpServer::new(f.registry.clone(), config), read, write, max));
        let (asked, withdrawn) = (person.asked.clone(), person.withdrawn.clone());
        (person.serve(client_io).await.unwrap(), asked, withdrawn, f)
    }

    /// No answer within `elicitation_timeout`: the model gets `CONFIRMATION_REQUIRED`, and the
    /// client is told the elicitation is withdrawn.
    #[tokio::test]
    async fn an_elicitation_unanswered_in_time_is_withdrawn() {
        let (client, asked, withdrawn, f) = connect(Duration::from_millis(100)).await;
        let raw = client.call_tool(params("store-delete", json!({}), json!({}))).await.unwrap();
        assert_eq!(codec::decode(&raw).unwrap().code(), Some(ErrorCode::ConfirmationRequired));
        let asked = asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 1);
        assert!(eventually(|| withdrawn.lock().unwrap().contains(&asked[0])).await, "{:?}", withdrawn.lock().unwrap());
        assert_eq!(f.runs.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        client.cancel().await.unwrap();
    }

    /// The call cancelled while the person is asked: the elicitation is withdrawn too.
    #[tokio::test]
    async fn an_elicitation_of_a_cancelled_call_is_withdrawn() {
        let (client, asked, withdrawn, _f) = connect(Duration::from_secs(60)).await;
        let request = ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params(
            "store-delete",
            json!({}),
            json!({}),
        )));
        let call = client.peer().send_request_with_option(request, PeerRequestOptions::no_options()).await.unwrap();
        assert!(eventually(|| !asked.lock().unwrap().is_empty()).await, "the person is asked");
        call.cancel(Some("changed my mind".into())).await.unwrap();
        let id = asked.lock().unwrap()[0].clone();
        assert!(eventually(|| withdrawn.lock().unwrap().contains(&id)).await, "{:?}", withdrawn.lock().unwrap());
        client.cancel().await.unwrap();
    }

    /// The registry disposed (the server shutting down) while a person who does not answer is
    /// asked: the call is answered at once, `CANCELLED` with nothing run, rather than left to wait
    /// out the elicitation's timeout (by when the server is gone and the answer with it); the
    /// elicitation is withdrawn.
    #[tokio::test]
    async fn a_disposed_registry_answers_a_call_waiting_for_the_person() {
        let silent = SlowPerson { silent: true, ..SlowPerson::default() };
        let (client, asked, withdrawn, f) = connect_to(Duration::from_secs(60), silent).await;
        let call = tokio::spawn({
            let peer = client.peer().clone();
            async move { peer.call_tool(params("store-delete", json!({}), json!({}))).await }
        });
        assert!(eventually(|| !asked.lock().unwrap().is_empty()).await, "the person is asked");
        f.registry.dispose();
        let raw = tokio::time::timeout(Duration::from_secs(5), call).await.expect("answered at once").unwrap().unwrap();
        let payload = codec::decode(&raw).unwrap().error_payload().cloned().expect("an error");
        assert_eq!(payload.code(), ErrorCode::Cancelled);
        assert!(payload.not_processed(), "nothing ran");
        assert_eq!(f.runs.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        let id = asked.lock().unwrap()[0].clone();
        assert!(eventually(|| withdrawn.lock().unwrap().contains(&id)).await, "{:?}", withdrawn.lock().unwrap());
        client.cancel().await.unwrap();
    }
}

/// `EngineResolver` records an answer in person only for a confirmation of the requester's own
/// call: an answer naming another caller's confirmation (a forged approval round's state, say)
/// neither approves nor denies it, and the owner's own answer still counts.
#[tokio::test]
async fn an_answer_in_person_counts_only_for_the_requesters_own_confirmation() {
    use agent_surface_core::{Effect, SafeText};
    use agent_surface_mcp::confirm::{ConfirmationAnswer, ConfirmationResolver, EngineResolver};
    use agent_surface_policy::confirmation::ConfirmationState;
    use agent_surface_policy::{
        CallInfo, ConfirmationConfig, ConfirmationDecision, ConfirmationEngine, ConfirmationGate, Consumer, Identity,
    };

    let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig::default()));
    let alice = Consumer::signed_in(Identity::new("alice"));
    let mallory = Consumer::signed_in(Identity::new("mallory"));
    let summary = SafeText::from("Delete everything.");
    let call =
        CallInfo::new(&alice, "store.delete", "store", Effect::Destructive, false).with_declared_gate(Some(&summary));
    let ConfirmationDecision::Required { confirmation_id, .. } =
        engine.check(call, None, agent_surface_core::Timestamp::now()).await
    else {
        panic!("a confirmation is required")
    };
    let resolver = EngineResolver::new(engine.clone());
    for answer in [ConfirmationAnswer::Approved, ConfirmationAnswer::Denied] {
        let refused = resolver.resolve(&confirmation_id, &mallory, answer).await;
        assert!(refused.is_err(), "{answer:?}: {refused:?}");
        let state = engine.get(&confirmation_id).await.unwrap().map(|r| r.state);
        assert_eq!(state, Some(ConfirmationState::Pending), "{answer:?}");
    }
    resolver.resolve(&confirmation_id, &alice, ConfirmationAnswer::Approved).await.expect("her own");
    let state = engine.get(&confirmation_id).await.unwrap().map(|r| r.state);
    assert!(matches!(state, Some(ConfirmationState::Approved { .. })), "{state:?}");
}
