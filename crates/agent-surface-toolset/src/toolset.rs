//! [`Toolset`]: one consumer's view of a registry as tools for an in-process agent loop.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use agent_surface_core::{InvokeResult, Retry};
use agent_surface_policy::Consumer;
use agent_surface_registry::{CorrelationId, FnProgress, InvokeOptions, InvokeRequest, Progress, Registry, Snapshot};
use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::calls::{ParseError, ToolCall, parse_scoped};
use crate::definitions::tool_definitions;
use crate::provider::Provider;
use crate::recovery::{FollowedStep, Invoker, RecoveryConfig, RecoveryDriver, RecoveryHost, RelayToModel, Stop};
use crate::results::{ResultFormat, encode_result, reply_messages};

/// How a [`Toolset`] behaves. Build it with struct update syntax over `Default`.
#[derive(Clone)]
pub struct ToolsetConfig {
    /// How results are written (the one-line rendering is off by default).
    pub results: ResultFormat,
    /// The recovery loop's bounds.
    pub recovery: RecoveryConfig,
    /// Approvals and verification (default: [`RelayToModel`], which hands both to the model).
    pub host: Arc<dyn RecoveryHost>,
    /// A namespace for invocation ids, e.g. a conversation id (see [`crate::invocation_id`]).
    pub id_namespace: Option<String>,
    /// Receives the progress reports of running calls (`Ctx::progress` in a handler), each with
    /// the tool call it belongs to; `None` drops them. Called on the handler's task: queue the
    /// report (e.g. into a channel to a UI) rather than block.
    pub progress: Option<ProgressCallback>,
}

/// The toolset's progress callback: the tool call and one report of its progress.
pub type ProgressCallback = Arc<dyn Fn(&ToolCall, Progress) + Send + Sync>;

impl Default for ToolsetConfig {
    fn default() -> ToolsetConfig {
        ToolsetConfig {
            results: ResultFormat::default(),
            recovery: RecoveryConfig::default(),
            host: Arc::new(RelayToModel),
            id_namespace: None,
            progress: None,
        }
    }
}

impl fmt::Debug for ToolsetConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolsetConfig")
            .field("results", &self.results)
            .field("recovery", &self.recovery)
            .field("id_namespace", &self.id_namespace)
            .field("progress", &self.progress.is_some())
            .finish_non_exhaustive()
    }
}

/// One answered tool call.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ToolOutcome {
    /// The call.
    pub call: ToolCall,
    /// Its final result, as the registry answered it (an error's message worded for the whole
    /// request; [`ToolOutcome::item`] carries it worded for the model).
    pub result: InvokeResult,
    /// How many requests the recovery loop sent (0 when the call could not become a request).
    pub attempts: u32,
    /// Why the loop stopped.
    pub stop: Stop,
    /// The last request sent (`None` when the call could not become a request).
    pub request: Option<InvokeRequest>,
    /// The result in the provider's format (see [`crate::encode_result`]).
    pub item: Value,
    /// The correlation id of the last request sent for the call — the id the operator log
    /// records that call under (the invocation id when it had one); `None` when the call could
    /// not become a request. A repair step's call is not the call's: its id is in
    /// [`ToolOutcome::repaired`]'s results. The host shows it where a person may need to quote it.
    pub correlation_id: Option<CorrelationId>,
    /// The repair-plan steps the recovery loop followed itself (a host that opted in through
    /// `RecoveryHost::repair_step`), with the calls it made and their results. The answer the
    /// model reads ([`ToolOutcome::item`]) still carries its plan as the server sent it: a host
    /// that follows steps tells the model which it took (and what they returned), so that the
    /// model does not take them again.
    pub repaired: Vec<FollowedStep>,
}

/// One answered model turn.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Turn {
    /// Each call's outcome, in the order of the calls.
    pub outcomes: Vec<ToolOutcome>,
    /// The messages to append to the conversation (see [`crate::reply_messages`]).
    pub messages: Vec<Value>,
    /// Whether the tool list must be re-listed ([`Toolset::tools`]) before the model's next step.
    pub relist: bool,
}

struct State {
    /// The snapshot the model's tool list was made from.
    listed: Option<Snapshot>,
    /// Whether the tool list must be re-listed before the model's next step.
    stale: bool,
    /// Model turns parsed so far (scopes Gemini's derived call ids).
    turns: u64,
}

/// A registry's capabilities as tools for one consumer's agent loop.
///
/// The loop:
///
/// 1. `toolset.tools(provider)` before each model request: the `tools` member, re-listed when the
///    surface changed in a way the toolset noticed ([`Toolset::is_stale`]);
/// 2. `toolset.handle(provider, &response)` for each model response: its tool calls run
///    concurrently through the [recovery loop](crate::recovery), and [`Turn::messages`] answer them
///    in order.
///
/// Calls carry the staleness tokens (`surfaceId`, `version`, and the tool's `toolVersion`) of the
/// snapshot the model's tool list was made from, so a destructive call planned against an outdated
/// list, and any call of a tool whose definition changed since, is `STALE_CAPABILITY`.
/// After `CAPABILITY_NOT_FOUND`, `STALE_CAPABILITY`, `COMPONENT_UNMOUNTED` (or any `after-refresh`
/// error, or a refresh by the loop), the tool list is marked stale.
///
/// **Cancellation** ends what is in progress, not the toolset: [`Toolset::cancel`] (or cancelling
/// the token [`Toolset::cancellation`] returns) ends the calls and waits running at that moment,
/// and the calls of later turns run under a fresh token.
pub struct Toolset {
    registry: Registry,
    consumer: Consumer,
    config: ToolsetConfig,
    driver: RecoveryDriver,
    /// The token of the calls in progress; replaced by a fresh one once cancelled (see
    /// [`Toolset::cancel`]).
    cancellation: Mutex<CancellationToken>,
    /// 16 random hexadecimal digits in the ids derived for Gemini calls (see
    /// [`Toolset::parse_calls`]).
    nonce: String,
    state: Mutex<State>,
}

impl fmt::Debug for Toolset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Toolset")
            .field("consumer", &self.consumer.key())
            .field("config", &self.config)
            .field("stale", &self.is_stale())
            .finish_non_exhaustive()
    }
}

impl Toolset {
    /// A toolset over `registry` for `consumer`; the recovery loop waits on the registry's clock.
    pub fn new(registry: Registry, consumer: Consumer, config: ToolsetConfig) -> Toolset {
        let driver = RecoveryDriver::new(config.recovery, registry.config().clock.clone(), config.host.clone());
        Toolset {
            registry,
            consumer,
            config,
            driver,
            cancellation: Mutex::new(CancellationToken::new()),
            nonce: agent_surface_core::hex::Hex(&agent_surface_core::id::random_bytes()[..8]).to_string(),
            state: Mutex::new(State { listed: None, stale: true, turns: 0 }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The consumer the toolset calls as.
    pub fn consumer(&self) -> &Consumer {
        &self.consumer
    }

    /// The configuration.
    pub fn config(&self) -> &ToolsetConfig {
        &self.config
    }

    /// The token of the calls in progress: cancelling it ends every call and wait running under
    /// it (they end with `CANCELLED`).
    ///
    /// A cancellation is scoped to what is in progress: the next [`Toolset::handle`] or
    /// [`Toolset::call`] that finds this token cancelled runs under a fresh one, so the toolset
    /// serves later turns (and a model that repeats a cancelled call gets it run). Asked for
    /// after a cancellation, it is that fresh token already (a stop button wired before the next
    /// turn reaches that turn). A clone kept from before a cancellation no longer reaches later
    /// calls: take the token when it is needed, or call [`Toolset::cancel`].
    pub fn cancellation(&self) -> CancellationToken {
        self.turn_cancellation()
    }

    /// Cancels every call and wait in progress (they end with `CANCELLED`) and gives the calls
    /// that start afterwards a fresh token: the toolset stays usable for later turns.
    pub fn cancel(&self) {
        let fresh = CancellationToken::new();
        let old = std::mem::replace(&mut *self.cancellation.lock().unwrap_or_else(PoisonError::into_inner), fresh);
        old.cancel();
    }

    /// The token for a turn that starts now: the current one, or a fresh one when it was
    /// cancelled (a cancellation ends what was in progress, never later turns).
    fn turn_cancellation(&self) -> CancellationToken {
        let mut current = self.cancellation.lock().unwrap_or_else(PoisonError::into_inner);
        if current.is_cancelled() {
            *current = CancellationToken::new();
        }
        current.clone()
    }

    /// Whether the tool list must be re-listed before the model's next step (also true before the
    /// first listing).
    pub fn is_stale(&self) -> bool {
        self.state().stale
    }

    /// Marks the tool list stale (e.g. when the host knows the surface changed).
    pub fn mark_stale(&self) {
        self.state().stale = true;
    }

    /// The snapshot the current tool list was made from.
    pub fn listed(&self) -> Option<Snapshot> {
        self.state().listed.clone()
    }

    /// The snapshot for the model's next step: the listed one, or a fresh one when the list is
    /// stale (which then becomes the listed one).
    pub async fn snapshot(&self) -> Snapshot {
        {
            let state = self.state();
            if let (false, Some(listed)) = (state.stale, &state.listed) {
                return listed.clone();
            }
        }
        let snapshot = self.registry.snapshot(&self.consumer).await;
        let mut state = self.state();
        state.listed = Some(snapshot.clone());
        state.stale = false;
        snapshot
    }

    /// The request's `tools` member for `provider` (see [`crate::tool_definitions`]), re-listed
    /// if stale.
    pub async fn tools(&self, provider: Provider) -> Value {
        tool_definitions(provider, &self.snapshot().await)
    }

    /// The tool calls of one model response (see [`crate::parse_tool_calls`]).
    ///
    /// A Gemini call that has no `id`, in a response without a `responseId`, gets
    /// `turn{t}-{nonce}.{n}`: `t` counts the turns this toolset parsed, `nonce` is 16 random
    /// hexadecimal digits drawn once per toolset. Without the nonce, two toolsets of one consumer
    /// (one per request of a conversation, say) would derive the same ids, and the registry would
    /// replay one's call to the other instead of running it.
    pub fn parse_calls(&self, provider: Provider, response: &Value) -> Result<Vec<ToolCall>, ParseError> {
        let turn = {
            let mut state = self.state();
            state.turns += 1;
            state.turns
        };
        parse_scoped(provider, response, &format!("turn{turn}-{}", self.nonce))
    }

    /// The invoke request for a call, carrying the listed snapshot's staleness tokens (the surface
    /// token and the tool's version as listed), or the
    /// result that answers it without a request (unknown tool name, malformed arguments).
    pub fn request_for(&self, call: &ToolCall) -> Result<InvokeRequest, InvokeResult> {
        let request = call.to_request(self.config.id_namespace.as_deref())?;
        Ok(match &self.state().listed {
            Some(listed) => {
                let mut request = request.with_surface(listed.surface_id.clone(), listed.version);
                // The version of the tool as the model's list showed it: a call planned on a
                // definition that changed since is `STALE_CAPABILITY`, whatever its effect.
                request.tool_version = listed.capability(&request.capability).and_then(|c| c.tool_version.clone());
                request
            }
            None => request,
        })
    }

    /// Runs one call through the recovery loop and encodes its result.
    ///
    /// **Two-phase confirmation.** A model cannot send a confirmation id: its tool calls carry
    /// only a name and arguments. When a call ends with `CONFIRMATION_REQUIRED` (relayed to the
    /// model by the default [`RelayToModel`] host) and the model later repeats the *same* call
    /// (same capability, same input up to key order), the confirmation engine presents the
    /// confirmation it relayed to this consumer (`spec/authority-and-confirmation.md`, "Presented
    /// on repeat"; remembered in its store, so on any replica sharing the store; a custom gate gets
    /// the registry's own memory, `RegistryConfig::relayed_confirmations`): until the user decides, the repeat answers the
    /// same `CONFIRMATION_REQUIRED`; once approved, the call runs; once denied, the model gets
    /// `CONFIRMATION_INVALID`; once expired, a fresh confirmation is asked for. The toolset adds
    /// nothing to this: it is the same mechanism on every transport.
    ///
    /// The call runs under the toolset's token ([`Toolset::cancellation`]), a fresh one if the
    /// last was cancelled.
    pub async fn call(&self, call: &ToolCall) -> ToolOutcome {
        self.call_under(call, &self.turn_cancellation()).await
    }

    async fn call_under(&self, call: &ToolCall, cancel: &CancellationToken) -> ToolOutcome {
        let mut correlation_id = None;
        let (result, attempts, stop, refreshed, request, repaired) = match self.request_for(call) {
            Ok(request) => {
                let invoker = ToolsetInvoker { toolset: self, call, cancel, sent: Mutex::new(Vec::new()) };
                let r = self.driver.run(&invoker, request, cancel).await;
                // The last of the call's own requests, not a repair step's call.
                let sent = invoker.sent.into_inner().unwrap_or_else(PoisonError::into_inner);
                correlation_id = sent.into_iter().rev().find(|(id, _)| *id == r.request.invocation_id).map(|(_, c)| c);
                (r.result, r.attempts, r.stop, r.refreshed, Some(r.request), r.repaired)
            }
            Err(result) => (result, 0, Stop::ReturnedToCaller, false, None, Vec::new()),
        };
        let relist = result.error_payload().is_some_and(|p| p.retry() == Retry::AfterRefresh);
        if refreshed || relist {
            self.mark_stale();
        }
        let item = encode_result(call, &result, &self.config.results);
        ToolOutcome { call: call.clone(), result, attempts, stop, request, item, correlation_id, repaired }
    }

    /// Answers one model response: parses its tool calls, runs them concurrently, and returns
    /// their outcomes and the reply messages in call order.
    ///
    /// The turn's calls share one token ([`Toolset::cancellation`], a fresh one if the last was
    /// cancelled): a cancellation during the turn ends all of them.
    pub async fn handle(&self, provider: Provider, response: &Value) -> Result<Turn, ParseError> {
        let calls = self.parse_calls(provider, response)?;
        let cancel = self.turn_cancellation();
        let outcomes = futures_util::future::join_all(calls.iter().map(|c| self.call_under(c, &cancel))).await;
        let messages = reply_messages(provider, outcomes.iter().map(|o| o.item.clone()).collect());
        Ok(Turn { outcomes, messages, relist: self.is_stale() })
    }
}

/// The toolset's [`Invoker`] for one tool call: its consumer, cancellation and progress callback,
/// and the correlation id of the last request it sent.
struct ToolsetInvoker<'a> {
    toolset: &'a Toolset,
    call: &'a ToolCall,
    /// The token of the call's turn.
    cancel: &'a CancellationToken,
    /// Each request sent, by invocation id, with its correlation id, in order.
    sent: Mutex<Vec<(Option<String>, CorrelationId)>>,
}

impl Invoker for ToolsetInvoker<'_> {
    fn invoke<'a>(&'a self, request: InvokeRequest) -> BoxFuture<'a, InvokeResult> {
        let mut options = InvokeOptions::new(self.toolset.consumer.clone())
            .with_cancellation(self.cancel.clone())
            .with_transport("toolset");
        if let Some(callback) = &self.toolset.config.progress {
            let (callback, call) = (callback.clone(), self.call.clone());
            options = options.with_progress(Arc::new(FnProgress::new(move |p: Progress| callback(&call, p))));
        }
        Box::pin(async move {
            let id = request.invocation_id.clone();
            let invocation = self.toolset.registry.invoke_detailed(request, options).await;
            self.sent.lock().unwrap_or_else(PoisonError::into_inner).push((id, invocation.correlation_id));
            invocation.result
        })
    }

    fn snapshot(&self) -> BoxFuture<'_, Snapshot> {
        Box::pin(self.toolset.registry.snapshot(&self.toolset.consumer))
    }
}
