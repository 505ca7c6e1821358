//! A small registry served over an in-memory pipe, and an `rmcp` client talking to it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, Effect, InvokeResult, SafeText};
use agent_surface_mcp::confirm::{ConfirmationAnswer, ConfirmationResolver, ResolveError};
use agent_surface_mcp::{McpConfig, McpServer, codec};
use agent_surface_policy::Consumer;
use agent_surface_registry::{Ctx, Mount, Registry, RegistryConfig};
use agent_surface_testing::RecordingGate;
use futures_util::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, Implementation, MetaObject, RequestMetaObject,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService, ServiceError};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
pub(crate) struct Echo {
    pub text: String,
}

#[derive(Serialize, JsonSchema)]
pub(crate) struct Echoed {
    pub text: String,
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct Nothing {}

/// Counts handler runs.
#[derive(Default)]
pub(crate) struct Runs(pub AtomicUsize);

/// The gate for `store.delete`: two-phase, each confirmation waiting for an answer.
fn gate() -> RecordingGate {
    RecordingGate::new(|call| call.capability == "store.delete")
        .summary(|_| SafeText::from("Delete everything in the store."))
        .valid_for(Duration::from_secs(60))
        .waiting_for_answers()
}

/// The adapter's resolver: answers go to the gate (the MCP crate's trait, on the kit's gate).
pub(crate) struct Resolver(pub Arc<RecordingGate>);

impl ConfirmationResolver for Resolver {
    fn resolve<'a>(
        &'a self,
        confirmation_id: &'a str,
        _requester: &'a Consumer,
        answer: ConfirmationAnswer,
    ) -> BoxFuture<'a, Result<(), ResolveError>> {
        let r = self.0.answer(confirmation_id, answer == ConfirmationAnswer::Approved);
        Box::pin(std::future::ready(r.map_err(|e| ResolveError(e.to_string()))))
    }
}

/// The test surface.
pub(crate) struct Fixture {
    pub registry: Registry,
    pub runs: Arc<Runs>,
    pub gate: Arc<RecordingGate>,
    pub _mounts: Vec<Mount>,
}

pub(crate) fn fixture() -> Fixture {
    let gate = Arc::new(gate());
    let registry = Registry::new(RegistryConfig { confirmation: Some(gate.clone()), ..Default::default() });
    let runs = Arc::new(Runs::default());
    registry.provide(runs.clone());
    registry
        .define("store", |t| {
            t.capability("echo", "Echo a text back.").effect(Effect::Read).idempotent().handler(
                |ctx: Ctx, i: Echo| async move {
                    ctx.state::<Arc<Runs>>().0.fetch_add(1, Ordering::SeqCst);
                    if i.text == "fail" {
                        return Err(AgentSurfaceError::precondition_failed("The text must not be `fail`."));
                    }
                    Ok::<_, AgentSurfaceError>(Echoed { text: i.text })
                },
            );
            t.capability("count", "Count a call (no output schema).").effect(Effect::Write).raw_handler(
                json!({"type": "object", "properties": {}}),
                None,
                |ctx: Ctx, _i: Value| async move {
                    let n = ctx.state::<Arc<Runs>>().0.fetch_add(1, Ordering::SeqCst) + 1;
                    Ok::<_, AgentSurfaceError>(json!({"runs": n}))
                },
            );
            t.capability("slow", "Wait until cancelled.").effect(Effect::Read).idempotent().handler(
                |ctx: Ctx, _i: Nothing| async move {
                    // Work tied to the handler's token notices the cancellation.
                    let token = ctx.cancellation().clone();
                    let runs = ctx.state::<Arc<Runs>>().clone();
                    tokio::spawn(async move {
                        token.cancelled().await;
                        runs.0.fetch_add(100, Ordering::SeqCst);
                    });
                    std::future::pending::<()>().await;
                    Ok::<_, AgentSurfaceError>(json!({}))
                },
            );
            t.capability("delete", "Delete everything.").effect(Effect::Destructive).handler(
                |ctx: Ctx, _i: Nothing| async move {
                    ctx.state::<Arc<Runs>>().0.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, AgentSurfaceError>(json!({"deleted": true}))
                },
            );
            t.capability("send", "Send a mail.")
                .effect(Effect::External)
                .handler(|_ctx: Ctx, _i: Nothing| async move { Ok::<_, AgentSurfaceError>(json!({"sent": true})) });
        })
        .unwrap();
    let mounts = vec![registry.mount("store", "main").unwrap()];
    Fixture { registry, runs, gate, _mounts: mounts }
}

/// The test client: optional elicitation answers, counts list-changed notifications.
pub(crate) struct TestClient {
    pub elicitation: bool,
    pub answers: Mutex<VecDeque<ElicitationAction>>,
    pub list_changed: Arc<AtomicUsize>,
    pub elicited: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        if self.elicitation {
            caps.elicitation = Some(ElicitationCapability::new());
        }
        ClientConfig::new(caps, Implementation::new("it", "0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.elicited.lock().unwrap().push(message);
        }
        let action = self.answers.lock().unwrap().pop_front().unwrap_or(ElicitationAction::Cancel);
        Ok(ElicitResult::new(action))
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.fetch_add(1, Ordering::SeqCst);
    }
}

pub(crate) type Client = RunningService<RoleClient, TestClient>;

pub(crate) struct Connected {
    pub client: Client,
    pub list_changed: Arc<AtomicUsize>,
    pub elicited: Arc<Mutex<Vec<String>>>,
}

/// Serves `registry` with `config` over an in-memory pipe and connects a client.
pub(crate) async fn connect(
    registry: &Registry,
    config: McpConfig,
    answers: Option<Vec<ElicitationAction>>,
) -> Connected {
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let (read, write) = tokio::io::split(server_io);
    let max = config.max_message_bytes;
    let server = McpServer::new(registry.clone(), config);
    tokio::spawn(agent_surface_mcp::serve_io(server, read, write, max));
    let list_changed = Arc::new(AtomicUsize::new(0));
    let elicited = Arc::new(Mutex::new(Vec::new()));
    let handler = TestClient {
        elicitation: answers.is_some(),
        answers: Mutex::new(answers.unwrap_or_default().into()),
        list_changed: list_changed.clone(),
        elicited: elicited.clone(),
    };
    let client = handler.serve(client_io).await.unwrap();
    Connected { client, list_changed, elicited }
}

pub(crate) fn params(tool: &str, args: Value, meta: Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(tool.to_string());
    if let Value::Object(a) = args {
        p = p.with_arguments(a);
    }
    if let Value::Object(m) = meta {
        p.meta = Some(RequestMetaObject(MetaObject(m)));
    }
    p
}

pub(crate) async fn call_raw(
    client: &Client,
    tool: &str,
    args: Value,
    meta: Value,
) -> Result<CallToolResult, ServiceError> {
    client.call_tool(params(tool, args, meta)).await
}

pub(crate) async fn call(client: &Client, tool: &str, args: Value, meta: Value) -> InvokeResult {
    let raw = call_raw(client, tool, args, meta).await.unwrap();
    codec::decode(&raw).unwrap()
}

/// Polls `f` until it holds or a second passes.
pub(crate) async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..100 {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// `notes.read` (read) and `notes.erase` (destructive, input `{id: kind}`): defined, then
/// redefined with another `kind` to change a definition under a listed version.
pub(crate) fn notes(kind: &str) -> impl FnOnce(&mut agent_surface_registry::TypeBuilder<'_>) + use<> {
    let schema = json!({"type": "object", "properties": {"id": {"type": kind}}});
    move |t| {
        t.capability("read", "Read the notes.").effect(Effect::Read).idempotent().raw_handler(
            json!({"type": "object"}),
            None,
            |_: Ctx, _| async move { Ok::<_, AgentSurfaceError>(json!({"notes": []})) },
        );
        t.capability("erase", "Erase a note.").effect(Effect::Destructive).raw_handler(
            schema,
            None,
            |_: Ctx, v| async move { Ok::<_, AgentSurfaceError>(v) },
        );
    }
}

/// The `agent-surface/toolVersion` of `tool` in a tool list.
pub(crate) fn tool_version(tools: &[rmcp::model::Tool], tool: &str) -> String {
    let t = tools.iter().find(|t| t.name == tool).unwrap_or_else(|| panic!("{tool} is listed"));
    let m = t.meta.as_ref().expect("the tool has _meta");
    m.get(agent_surface_mcp::meta::TOOL_VERSION).and_then(Value::as_str).expect("a version").to_string()
}
