//! Capability definitions: the builders, and the checks that run once, at registration.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::repair::Repair;
use agent_surface_core::tool_version::{ConfirmationGate, ToolDefinition};
use agent_surface_core::{AgentSurfaceError, DefinitionError, DefinitionErrorCode as Code, Effect, Retry, SafeText};
use agent_surface_policy::Consumer;
use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ctx::Ctx;
use crate::handler::{ErasedHandler, ErasedPrecondition, ErasedVerify, Unmet, Verification};
use crate::id;
use crate::schema::{self, CheckedInputSchema, PortableSchema, SchemaLimits};
use crate::validate::InputValidator;

/// Where a capability runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Plane {
    /// Handled in-process by the instance that registered it; may change only that instance's
    /// local state, so its effect is `read` or `write`.
    View,
    /// A server-side operation, run by its handler or by a named [`Executor`]; may bind input
    /// fields from the consumer or the instance.
    Procedure,
}

/// Runs procedures on behalf of the registry (e.g. by calling a backend service).
///
/// Registered by name with [`crate::Registry::register_executor`] *before* the capabilities that
/// use it are defined; a procedure naming an executor the registry does not have is a
/// `PLANE_VIOLATION`.
pub trait Executor: Send + Sync + 'static {
    /// Runs `capability` with the validated, bound `input`.
    fn execute(&self, ctx: Ctx, capability: &str, input: Value)
    -> BoxFuture<'static, Result<Value, AgentSurfaceError>>;
}

/// Where the value of a bound input field comes from. Bound fields are filled by the runtime,
/// never chosen by the agent: they are absent from the advertised input schema, and an agent that
/// sends one gets `INVALID_INPUT` with `lockedFields`.
///
/// A binding that yields `None` (or panics) fails the call with
/// `PRECONDITION_FAILED {reason: binding-failed}`.
#[derive(Clone)]
pub struct Binding(Arc<BindingFn>);

/// A binding's evaluation: from the consumer and the instance state to the field's value.
type BindingFn = dyn Fn(&Consumer, Option<&(dyn std::any::Any + Send + Sync)>) -> Option<Value> + Send + Sync;

impl Binding {
    /// A value taken from the consumer (e.g. the signed-in user's subject).
    pub fn from_consumer(f: impl Fn(&Consumer) -> Option<Value> + Send + Sync + 'static) -> Binding {
        Binding(Arc::new(move |c, _| f(c)))
    }

    /// A value taken from the target instance's state of type `S`.
    pub fn from_instance<S: std::any::Any + Send + Sync>(
        f: impl Fn(&S) -> Option<Value> + Send + Sync + 'static,
    ) -> Binding {
        Binding(Arc::new(move |_, state| state.and_then(|s| s.downcast_ref::<S>()).and_then(&f)))
    }

    pub(crate) fn eval(&self, consumer: &Consumer, state: Option<&(dyn std::any::Any + Send + Sync)>) -> Option<Value> {
        (self.0)(consumer, state)
    }
}

impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Binding")
    }
}

/// Size caps checked at registration.
#[derive(Clone, Copy, Debug)]
pub struct DefinitionLimits {
    /// The longest description, in characters.
    pub max_description_chars: usize,
    /// The largest `meta` object, serialized, in bytes.
    pub max_meta_bytes: usize,
    /// The most capabilities one type may declare.
    pub max_capabilities_per_type: usize,
    /// The longest time budget a capability may declare.
    pub max_time_budget: Duration,
    /// Nesting depth and size caps of input and output schemas.
    pub max_schema_depth: usize,
    /// The largest schema, serialized, in bytes.
    pub max_schema_bytes: usize,
}

impl Default for DefinitionLimits {
    fn default() -> Self {
        DefinitionLimits {
            max_description_chars: 1024,
            max_meta_bytes: 4096,
            max_capabilities_per_type: 256,
            max_time_budget: Duration::from_secs(15 * 60),
            max_schema_depth: 16,
            max_schema_bytes: 64 * 1024,
        }
    }
}

/// A checked, compiled capability.
pub(crate) struct CapabilityDef {
    pub(crate) name: Arc<str>,
    pub(crate) tool_name: String,
    pub(crate) type_id: Arc<str>,
    pub(crate) description: String,
    /// The tool's version, computed once from the definition
    /// ([`agent_surface_core::tool_version::ToolDefinition`]).
    pub(crate) tool_version: Arc<str>,
    pub(crate) effect: Effect,
    pub(crate) idempotent: bool,
    /// Strict audit for this capability (see `CapabilityBuilder::strict_audit`).
    pub(crate) strict_audit: bool,
    /// Runs long enough that adapters that can should answer it as a task.
    pub(crate) long_running: bool,
    pub(crate) time_budget: Option<Duration>,
    pub(crate) plane: Plane,
    pub(crate) input: CheckedInputSchema,
    pub(crate) validator: InputValidator,
    /// Validates the input after bindings filled it (only for capabilities with bindings): a
    /// bound value that breaks the schema is a binding failure, not the agent's fault.
    pub(crate) bound_validator: Option<jsonschema::Validator>,
    pub(crate) output_schema: Option<PortableSchema>,
    pub(crate) output_validator: Option<jsonschema::Validator>,
    pub(crate) bindings: Vec<(String, Binding)>,
    pub(crate) precondition: Option<ErasedPrecondition>,
    /// The static repair plan attached to the author's `PRECONDITION_FAILED` (checked).
    pub(crate) precondition_repair: Option<Repair>,
    /// The declared confirmation gate, if any.
    pub(crate) confirm: Option<ErasedConfirm>,
    /// The natural idempotency key, if any ([`CapabilityBuilder::idempotency_key`]).
    pub(crate) natural_key: Option<ErasedKey>,
    /// The ask step: questions to the client before the call runs.
    pub(crate) ask: Option<crate::handler::ErasedAsk>,
    /// The post-condition check, if any.
    pub(crate) verify: Option<ErasedVerify>,
    pub(crate) handler: ErasedHandler,
    /// What the extractors of the handler and of an asynchronous precondition need, each with
    /// who takes it (for the definition error), checked at mount.
    pub(crate) requirements: Vec<(crate::extract::Requirement, &'static str)>,
    pub(crate) meta: Option<Value>,
}

impl CapabilityDef {
    /// The hooks' view of a call of this capability by `consumer` (no instance yet; the call
    /// adds the one it runs against): the one place that view is made, for discovery and for
    /// every phase that asks a hook.
    pub(crate) fn call_info<'a>(
        &'a self,
        consumer: &'a agent_surface_policy::Consumer,
    ) -> agent_surface_policy::CallInfo<'a> {
        agent_surface_policy::CallInfo::new(consumer, &self.name, &self.type_id, self.effect, self.idempotent)
    }
}

/// The summary function of a declared confirmation gate, over the decoded input: `None` when the
/// input is not of the declared type (never, once the definition is checked), `Some(None)` when
/// this input needs no confirmation ([`CapabilityBuilder::confirm_if`]).
type SummaryFn = dyn Fn(&(dyn std::any::Any + Send)) -> Option<Option<SafeText>> + Send + Sync;

/// A declared confirmation gate: renders the summary the approver sees from the decoded input.
#[derive(Clone)]
pub(crate) struct ErasedConfirm {
    pub(crate) summary: Arc<SummaryFn>,
    /// Whether the gate holds for some inputs only ([`CapabilityBuilder::confirm_if`]): then it is
    /// asked also for a call that carries evidence, to know whether the call is gated at all.
    pub(crate) conditional: bool,
    pub(crate) input_type: std::any::TypeId,
}

impl ErasedConfirm {
    fn typed<I, S, F>(f: F) -> ErasedConfirm
    where
        I: Send + 'static,
        S: std::fmt::Display,
        F: Fn(&I) -> S + Send + Sync + 'static,
    {
        let summary = move |input: &(dyn std::any::Any + Send)| {
            input.downcast_ref::<I>().map(|i| Some(SafeText::trusted(f(i).to_string())))
        };
        ErasedConfirm { summary: Arc::new(summary), conditional: false, input_type: std::any::TypeId::of::<I>() }
    }

    fn conditional<I, S, F>(f: F) -> ErasedConfirm
    where
        I: Send + 'static,
        S: std::fmt::Display,
        F: Fn(&I) -> Option<S> + Send + Sync + 'static,
    {
        let summary = move |input: &(dyn std::any::Any + Send)| {
            input.downcast_ref::<I>().map(|i| f(i).map(|s| SafeText::trusted(s.to_string())))
        };
        ErasedConfirm { summary: Arc::new(summary), conditional: true, input_type: std::any::TypeId::of::<I>() }
    }
}

/// The function of a natural idempotency key, over the decoded input: `None` when the input is
/// not of the declared type (never, once the definition is checked).
type KeyFn = dyn Fn(&(dyn std::any::Any + Send)) -> Option<String> + Send + Sync;

/// Whom the calls that share a natural idempotency key span ([`CapabilityBuilder::idempotency_key`]).
///
/// Closed on purpose for now: a key spans the capability or one principal's calls of it; a
/// tenant's scope is a principal's claim, which the key function can read through a binding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyScope {
    /// Every caller of the capability: the first call with a key runs, every other call with
    /// the same key (from whoever the authority policy admits) is answered with its result.
    #[default]
    Capability,
    /// One principal's calls of the capability (`Consumer::principal`): two users calling with
    /// the same key are two operations.
    Principal,
}

/// A declared natural idempotency key.
#[derive(Clone)]
pub(crate) struct ErasedKey {
    pub(crate) key: Arc<KeyFn>,
    pub(crate) scope: KeyScope,
    pub(crate) input_type: std::any::TypeId,
}

/// What the builders need from the registry.
pub(crate) struct BuildEnv<'a> {
    pub(crate) executors: &'a HashMap<String, Arc<dyn Executor>>,
    pub(crate) limits: DefinitionLimits,
}

/// Declares the capabilities of one capability type; handed to the closure of
/// [`crate::Registry::define`].
pub struct TypeBuilder<'a> {
    type_id: String,
    env: BuildEnv<'a>,
    done: Vec<Result<CapabilityDef, DefinitionError>>,
    started: Vec<String>,
}

impl<'a> TypeBuilder<'a> {
    pub(crate) fn new(type_id: &str, env: BuildEnv<'a>) -> TypeBuilder<'a> {
        TypeBuilder { type_id: type_id.to_string(), env, done: Vec::new(), started: Vec::new() }
    }

    /// Starts a capability with its id (e.g. `cancel`) and a description for the model.
    /// Finish it with [`CapabilityBuilder::handler`] (or another finishing method).
    pub fn capability(&mut self, id: &str, description: &str) -> CapabilityBuilder<'_, 'a> {
        self.started.push(id.to_string());
        CapabilityBuilder {
            ty: self,
            id: id.to_string(),
            description: description.to_string(),
            effect: Effect::Write,
            idempotent: false,
            strict_audit: false,
            long_running: false,
            time_budget: None,
            plane: Plane::Procedure,
            bindings: Vec::new(),
            sensitive: Vec::new(),
            meta: None,
            precondition: None,
            precondition_repair: None,
            confirm: None,
            natural_key: None,
            ask: None,
            verify: None,
            requirements: Vec::new(),
            precondition_requirements: Vec::new(),
            error: None,
        }
    }

    /// Adds a capability from its JSON definition (for bridging other systems), with a handler
    /// over raw JSON values. Unknown members of the definition are an `INVALID_DEFINITION`.
    ///
    /// The definition's members: `name`, `description`, `inputSchema`, and optionally
    /// `outputSchema`, `effect`, `idempotent`, `timeBudgetMs`, `plane`, `sensitive`, `meta`.
    pub fn raw<F, Fut>(&mut self, definition: Value, handler: F)
    where
        F: Fn(Ctx, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, AgentSurfaceError>> + Send + 'static,
    {
        let location = format!("{}.?", self.type_id);
        let raw: RawDefinition = match serde_json::from_value(definition) {
            Ok(raw) => raw,
            Err(e) => {
                self.done.push(Err(DefinitionError::new(Code::InvalidDefinition, location, e.to_string())));
                return;
            }
        };
        let mut b = self.capability(&raw.name, &raw.description);
        b.effect = raw.effect.unwrap_or(Effect::Write);
        b.idempotent = raw.idempotent.unwrap_or(false);
        b.time_budget = raw.time_budget_ms.map(Duration::from_millis);
        b.plane = raw.plane.unwrap_or(Plane::Procedure);
        b.sensitive = raw.sensitive.unwrap_or_default();
        b.meta = raw.meta;
        let output = raw.output_schema.filter(|s| !schema::is_trivial(s));
        b.finish(raw.input_schema, output, ErasedHandler::raw(handler));
    }

    pub(crate) fn finish(self) -> Result<Vec<CapabilityDef>, DefinitionError> {
        id::check_type_id(&self.type_id)?;
        let mut defs = Vec::with_capacity(self.done.len());
        let mut seen = HashSet::new();
        for d in self.done {
            let d = d?;
            if !seen.insert(d.name.clone()) {
                return Err(DefinitionError::new(
                    Code::DuplicateCapability,
                    d.name.to_string(),
                    "two capabilities of this type have the same id",
                ));
            }
            defs.push(d);
        }
        if self.started.len() != defs.len() {
            let finished: HashSet<&str> = defs.iter().map(|d| &d.name[self.type_id.len() + 1..]).collect();
            let missing = self.started.iter().find(|s| !finished.contains(s.as_str())).cloned().unwrap_or_default();
            return Err(DefinitionError::new(
                Code::InvalidDefinition,
                format!("{}.{missing}", self.type_id),
                "the capability was started but never given a handler, procedure or executor",
            ));
        }
        if defs.len() > self.env.limits.max_capabilities_per_type {
            return Err(DefinitionError::new(
                Code::LimitExceeded,
                self.type_id.clone(),
                format!("more than {} capabilities in one type", self.env.limits.max_capabilities_per_type),
            ));
        }
        Ok(defs)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawDefinition {
    name: String,
    description: String,
    input_schema: Value,
    #[serde(default)]
    output_schema: Option<Value>,
    #[serde(default)]
    effect: Option<Effect>,
    #[serde(default)]
    idempotent: Option<bool>,
    #[serde(default)]
    time_budget_ms: Option<u64>,
    #[serde(default)]
    plane: Option<Plane>,
    #[serde(default)]
    sensitive: Option<Vec<String>>,
    #[serde(default)]
    meta: Option<Value>,
}

/// Declares one capability; finished by [`CapabilityBuilder::handler`],
/// [`CapabilityBuilder::raw_handler`], [`CapabilityBuilder::procedure`] or
/// [`CapabilityBuilder::raw_procedure`].
#[must_use = "a capability is added only when a handler, procedure or executor finishes it"]
pub struct CapabilityBuilder<'t, 'a> {
    ty: &'t mut TypeBuilder<'a>,
    id: String,
    description: String,
    effect: Effect,
    idempotent: bool,
    strict_audit: bool,
    long_running: bool,
    time_budget: Option<Duration>,
    plane: Plane,
    bindings: Vec<(String, Binding)>,
    sensitive: Vec<String>,
    meta: Option<Value>,
    precondition: Option<ErasedPrecondition>,
    precondition_repair: Option<Repair>,
    confirm: Option<ErasedConfirm>,
    natural_key: Option<ErasedKey>,
    ask: Option<crate::handler::ErasedAsk>,
    verify: Option<ErasedVerify>,
    requirements: Vec<crate::extract::Requirement>,
    /// What the extractors of a `precondition_async` check need, checked at mount with the
    /// handler's.
    precondition_requirements: Vec<crate::extract::Requirement>,
    error: Option<DefinitionError>,
}

impl CapabilityBuilder<'_, '_> {
    fn location(&self) -> String {
        format!("{}.{}", self.ty.type_id, self.id)
    }

    /// The declared side effect (default: `write`).
    pub fn effect(mut self, effect: Effect) -> Self {
        self.effect = effect;
        self
    }

    /// Declares that repeating the call with the same input has no further effect; a `TIMEOUT`
    /// of an idempotent capability may be retried.
    pub fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// Requires strict audit for this capability (as `AuditConfig::strict` does for all): a call
    /// runs only once the audit trail has recorded that it starts; when the event cannot be
    /// written (or the registry has no `RegistryConfig::audit`), the call does not run and is
    /// answered `EXECUTION_FAILED {reason: audit-unavailable, transient: true}` (`after-delay`).
    /// Has no effect on a `read` capability, whose calls are not audited.
    pub fn strict_audit(mut self) -> Self {
        self.strict_audit = true;
        self
    }

    /// Declares that a call may run long (seconds to minutes): adapters that can answer before it
    /// finishes do — over MCP, a client that negotiates the tasks extension gets a task once the
    /// handler starts, and asks for the outcome later. Nothing else changes: the same pipeline,
    /// time budget (set one that fits with [`time_budget`](Self::time_budget)) and result.
    pub fn long_running(mut self) -> Self {
        self.long_running = true;
        self
    }

    /// The time budget of one call (default: the registry's; a caller's
    /// [`InvokeOptions::time_budget`](crate::InvokeOptions::time_budget) overrides both): how long
    /// its handler may run. Its [`precondition_async`](Self::precondition_async) check and its
    /// [`verify`](Self::verify) check are each bounded by the same length, counted apart, so a call
    /// whose three parts all run long takes up to three times the budget.
    pub fn time_budget(mut self, budget: Duration) -> Self {
        self.time_budget = Some(budget);
        self
    }

    /// Makes this a view action: handled in-process by the registering instance, effect `read`
    /// or `write` only, no bindings.
    pub fn view(mut self) -> Self {
        self.plane = Plane::View;
        self
    }

    /// Binds a top-level input field: the runtime fills it, the agent may not send it.
    pub fn bind(mut self, field: &str, binding: Binding) -> Self {
        self.bindings.push((field.to_string(), binding));
        self
    }

    /// Marks top-level input fields as sensitive: their values are never echoed or logged.
    pub fn sensitive(mut self, fields: &[&str]) -> Self {
        self.sensitive.extend(fields.iter().map(|f| f.to_string()));
        self
    }

    /// Attaches author metadata (a JSON object, shown in discovery).
    pub fn meta(mut self, meta: impl Serialize) -> Self {
        match serde_json::to_value(meta) {
            Ok(v) => self.meta = Some(v),
            Err(e) => {
                self.error = Some(DefinitionError::new(Code::InvalidDefinition, self.location(), format!("meta: {e}")))
            }
        }
        self
    }

    /// A precondition over the decoded input, checked in the input phase (before rate limits,
    /// confirmation and the handler). `I` must be the handler's input type. A capability has one
    /// precondition: a second ([`precondition`](Self::precondition) or
    /// [`precondition_async`](Self::precondition_async)) is an `INVALID_DEFINITION`.
    ///
    /// The check answers at once, from what the process holds; one that must ask a database or
    /// another service is [`precondition_async`](Self::precondition_async). It takes extractors
    /// as a [`handle`](Self::handle) handler does ([`State<T>`](crate::State),
    /// [`InstanceState<S>`](crate::InstanceState), [`Caller`](crate::Caller), [`Ctx`] by value),
    /// whose needs are checked at mount with the handler's, then the decoded input by reference
    /// (the shapes: [`SyncPrecondition`](crate::SyncPrecondition)). The context by reference
    /// (`|ctx: &Ctx, i: &In|`) is a shape too; what it reads through `ctx.state::<T>()` is not
    /// checked at mount — a missing `T` panics at call time, `EXECUTION_FAILED {reason:
    /// handler-error}` —, so read state through `State<T>`. A check that panics is that same
    /// fault, `notProcessed: true`, the cause on the operator channel only.
    ///
    /// ```
    /// use agent_surface_core::AgentSurfaceError;
    /// use agent_surface_registry::{Registry, RegistryConfig, State, Unmet};
    /// use schemars::JsonSchema;
    /// use serde::Deserialize;
    ///
    /// /// What the service holds in memory: the orders that have shipped.
    /// struct Shipped(Vec<String>);
    ///
    /// #[derive(Deserialize, JsonSchema)]
    /// struct Cancel { order: String }
    ///
    /// let registry = Registry::new(RegistryConfig::default());
    /// registry.define("orders", |t| {
    ///     t.capability("cancel", "Cancel an order that has not shipped.")
    ///         .precondition(|State(shipped): State<Shipped>, i: &Cancel| {
    ///             if shipped.0.contains(&i.order) {
    ///                 Err(Unmet::new("Shipped orders cannot be cancelled.").reason("order-shipped"))
    ///             } else {
    ///                 Ok(())
    ///             }
    ///         })
    ///         .handle(|i: Cancel| async move { Ok::<_, AgentSurfaceError>(i.order) })
    /// })?;
    /// // The check reads `Shipped`: until the registry is given it, mounting is refused.
    /// assert!(registry.mount("orders", "main").is_err());
    /// registry.provide(Shipped(vec!["o-1".into()]));
    /// let _mount = registry.mount("orders", "main")?;
    /// # Ok::<_, agent_surface_core::DefinitionError>(())
    /// ```
    pub fn precondition<Args, I, P>(mut self, check: P) -> Self
    where
        I: Send + 'static,
        P: crate::extract::SyncPrecondition<Args, I>,
    {
        if self.precondition.is_none() {
            self.precondition_requirements = P::requirements();
        }
        self.set_precondition(crate::extract::erase_sync_precondition(check))
    }

    /// [`precondition`](Self::precondition) for a check that awaits: a database lookup, another
    /// service. It runs at the same point of the input phase — before the rate limit, the
    /// confirmation and the handler — so that a call that can only fail is answered
    /// `PRECONDITION_FAILED` before anyone is asked to approve it or a unit of quota is spent.
    ///
    /// `check` takes extractors, as a [`handle`](Self::handle) handler does ([`State<T>`](crate::State),
    /// [`InstanceState<S>`](crate::InstanceState), [`Caller`](crate::Caller), [`Ctx`] by value), whose
    /// needs are checked at mount with the handler's, then the decoded input by reference; it
    /// returns a future that owns what it needs (`'static`: move the extractors into it and clone
    /// the input's fields it reads, as the example does). The future runs under the call's time budget (the capability's
    /// [`time_budget`](Self::time_budget), else the registry's default; the handler then has a
    /// budget of its own), with its panics caught: a check that panics is `EXECUTION_FAILED
    /// {reason: handler-error}`, one that does not answer within the budget `EXECUTION_FAILED
    /// {reason: transport, transient: true}` (retry `after-delay`: a service behind the check did
    /// not answer), both `notProcessed: true`, the cause on the operator channel only.
    ///
    /// ```
    /// use std::collections::HashSet;
    ///
    /// use agent_surface_core::{AgentSurfaceError, Effect};
    /// use agent_surface_registry::{Registry, RegistryConfig, State, Unmet};
    /// use schemars::JsonSchema;
    /// use serde::Deserialize;
    /// use tokio::sync::RwLock;
    ///
    /// /// Stands for a database: its lookups are awaited.
    /// #[derive(Default)]
    /// struct Orders(RwLock<HashSet<String>>);
    ///
    /// impl Orders {
    ///     async fn exists(&self, id: &str) -> bool {
    ///         self.0.read().await.contains(id)
    ///     }
    /// }
    ///
    /// #[derive(Deserialize, JsonSchema)]
    /// struct Cancel { order: String }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let registry = Registry::new(RegistryConfig::default());
    /// registry.define("orders", |t| {
    ///     t.capability("cancel", "Cancel an order.")
    ///         .effect(Effect::Destructive)
    ///         .precondition_async(|State(orders): State<Orders>, i: &Cancel| {
    ///             let id = i.order.clone();
    ///             async move {
    ///                 if orders.exists(&id).await {
    ///                     Ok(())
    ///                 } else {
    ///                     Err(Unmet::new("There is no such order.").reason("unknown-order"))
    ///                 }
    ///             }
    ///         })
    ///         .handle(|i: Cancel| async move { Ok::<_, AgentSurfaceError>(i.order) })
    /// })?;
    /// // The check reads `Orders`: until the registry is given them, mounting is refused.
    /// assert!(registry.mount("orders", "main").is_err());
    /// registry.provide(Orders::default());
    /// let _mount = registry.mount("orders", "main")?;
    ///
    /// let request = agent_surface_registry::InvokeRequest::new("orders.cancel", serde_json::json!({"order": "o-1"}));
    /// let options = agent_surface_registry::InvokeOptions::new(agent_surface_policy::Consumer::anonymous("doc"));
    /// let answer = registry.invoke(request, options).await;
    /// assert_eq!(answer.code(), Some(agent_surface_core::ErrorCode::PreconditionFailed));
    /// assert!(answer.error_payload().unwrap().not_processed());
    /// # Ok::<_, agent_surface_core::DefinitionError>(())
    /// # }).unwrap();
    /// ```
    pub fn precondition_async<Args, I, P>(mut self, check: P) -> Self
    where
        I: Send + 'static,
        P: crate::extract::Precondition<Args, I>,
    {
        if self.precondition.is_none() {
            self.precondition_requirements = P::requirements();
        }
        self.set_precondition(crate::extract::erase_precondition(check))
    }

    /// Keeps `precondition` unless the capability already has one: a second would silently drop
    /// a check its author wrote.
    fn set_precondition(mut self, precondition: ErasedPrecondition) -> Self {
        if self.precondition.is_some() {
            if self.error.is_none() {
                let message = "a capability has one precondition; check both conditions in one";
                self.error = Some(DefinitionError::new(Code::InvalidDefinition, self.location(), message));
            }
        } else {
            self.precondition = Some(precondition);
        }
        self
    }

    /// Questions to the client before the call runs ([`crate::questions`]): `ask` gets the
    /// decoded input and the answers the call carries, and returns the questions still open —
    /// none, and the call goes on; an [`Unmet`] ends it with `PRECONDITION_FAILED` (e.g. when
    /// the person declined). Checked in the input phase after the precondition; `I` must be the
    /// handler's input type, which then reads the answers through [`Ctx::answers`].
    ///
    /// ```
    /// use agent_surface_core::{AgentSurfaceError, Effect};
    /// use agent_surface_registry::{Ctx, Question, Registry, RegistryConfig, Unmet};
    /// use serde_json::{Value, json};
    ///
    /// let registry = Registry::new(RegistryConfig::default());
    /// registry.define("greeter", |t| {
    ///     t.capability("greet", "Greet the user by name.")
    ///         .effect(Effect::Read)
    ///         .ask(|_ctx: &Ctx, _input: &Value, answers: &agent_surface_registry::Answers| {
    ///             if answers.declined("user_name") {
    ///                 return Err(Unmet::new("The user did not give a name.").reason("declined"));
    ///             }
    ///             Ok(match answers.form("user_name") {
    ///                 Some(_) => vec![],
    ///                 None => vec![Question::form("user_name", "What is your name?", json!({
    ///                     "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]
    ///                 }))],
    ///             })
    ///         })
    ///         .raw_handler(json!({"type": "object"}), None, |ctx: Ctx, _input: Value| async move {
    ///             let name = ctx.answers().form("user_name").and_then(|f| f["name"].as_str()).unwrap_or("").to_string();
    ///             Ok::<_, AgentSurfaceError>(json!({"greeting": format!("Hello, {name}!")}))
    ///         })
    /// })?;
    /// # Ok::<_, agent_surface_core::DefinitionError>(())
    /// ```
    pub fn ask<I, F>(mut self, ask: F) -> Self
    where
        I: Send + 'static,
        F: Fn(&Ctx, &I, &crate::questions::Answers) -> Result<Vec<crate::questions::Question>, Unmet>
            + Send
            + Sync
            + 'static,
    {
        self.ask = Some(crate::handler::ErasedAsk::typed(ask));
        self
    }

    /// A static repair plan for this capability's `PRECONDITION_FAILED` (the author's unmet
    /// preconditions; not `binding-failed`): attached, and rendered as a "Next action:" sentence,
    /// unless the [`Unmet`] carries a plan of its own ([`Unmet::repair`]).
    ///
    /// The plan is checked at registration: over its bounds (more than 5 steps or 8 fields per
    /// list, an instruction or name that had to be cut) it is a `LIMIT_EXCEEDED`; malformed, or
    /// contradicting retry `with-changes` (a `stop` or `reconcile` step), an `INVALID_DEFINITION`.
    ///
    /// ```
    /// use agent_surface_core::repair::{Repair, RepairAction, RepairStep};
    /// use agent_surface_registry::{Ctx, Registry, RegistryConfig, Unmet};
    /// use schemars::JsonSchema;
    /// use serde::Deserialize;
    ///
    /// #[derive(Deserialize, JsonSchema)]
    /// struct Book { slot: String }
    ///
    /// let registry = Registry::new(RegistryConfig::default());
    /// registry.define("slots", |t| {
    ///     t.capability("book", "Book a slot.")
    ///         .precondition(|_: &Ctx, i: &Book| if i.slot == "taken" { Err(Unmet::new("The slot is taken.")) } else { Ok(()) })
    ///         .repair_on_precondition(
    ///             Repair::plan([
    ///                 RepairStep::new(RepairAction::CallTool, "List the free slots.").tool("slots-list"),
    ///                 RepairStep::new(RepairAction::ChangeInput, "Pick a free slot."),
    ///             ])
    ///             .update(&["slot"]),
    ///         )
    ///         .handler(|_: Ctx, i: Book| async move { Ok::<_, agent_surface_core::AgentSurfaceError>(i.slot) })
    /// })?;
    /// # Ok::<_, agent_surface_core::DefinitionError>(())
    /// ```
    pub fn repair_on_precondition(mut self, repair: Repair) -> Self {
        self.precondition_repair = Some(repair);
        self
    }

    /// A post-condition check that runs after the handler succeeded and before output
    /// validation, over the (re-decoded) input and the JSON output. `I` must be the handler's
    /// input type.
    ///
    /// [`Verification::NotVerified`] fails the call with `EXECUTION_FAILED {reason:
    /// verification-failed}`; [`Verification::Unknown`], an error, a panic or running past the
    /// capability's time budget fail it with `EXECUTION_FAILED {reason: outcome-unknown}` and a
    /// repair plan that says to read the current state, then ask the user. Both have retry `no`
    /// and are recorded for the idempotency window, so a repeat (same invocation id, same
    /// request) is answered from the record without running the handler again.
    ///
    /// ```
    /// use agent_surface_core::AgentSurfaceError;
    /// use agent_surface_registry::{Ctx, Registry, RegistryConfig, Verification};
    /// use schemars::JsonSchema;
    /// use serde::Deserialize;
    ///
    /// #[derive(Deserialize, JsonSchema)]
    /// struct Pay { amount: u32 }
    ///
    /// let registry = Registry::new(RegistryConfig::default());
    /// registry.define("payments", |t| {
    ///     t.capability("send", "Send a payment.")
    ///         .verify(|_: Ctx, i: Pay, out: serde_json::Value| async move {
    ///             Ok::<_, AgentSurfaceError>(Verification::from(out["sent"] == i.amount))
    ///         })
    ///         .handler(|_: Ctx, i: Pay| async move { Ok::<_, AgentSurfaceError>(serde_json::json!({"sent": i.amount})) })
    /// })?;
    /// # Ok::<_, agent_surface_core::DefinitionError>(())
    /// ```
    pub fn verify<I, F, Fut>(mut self, check: F) -> Self
    where
        I: Send + 'static,
        F: Fn(Ctx, I, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Verification, AgentSurfaceError>> + Send + 'static,
    {
        self.verify = Some(ErasedVerify::typed(check));
        self
    }

    /// Gates the capability behind a person's approval: every call needs confirmation evidence
    /// from the registry's confirmation engine (`RegistryConfig::confirmation`) before its
    /// handler runs. `summary` renders, from the validated input, the one sentence the approver
    /// sees (and the `summary` of `CONFIRMATION_REQUIRED`). `I` must be the handler's input type.
    ///
    /// The summary is agent-facing text the application composes: it is whitespace-normalized,
    /// stripped of control characters and capped at 200 characters, as
    /// [`SafeText::trusted`] does. Quote input values in it (that is what the approver must
    /// see), but never an error's or a downstream service's text. A summary function that panics
    /// fails the call with `EXECUTION_FAILED` in the confirmation phase; the handler does not
    /// run. A gated capability in a registry without a confirmation engine never runs either.
    ///
    /// ```
    /// use agent_surface_core::{AgentSurfaceError, Effect};
    /// use agent_surface_registry::{Ctx, Registry, RegistryConfig};
    /// use schemars::JsonSchema;
    /// use serde::Deserialize;
    ///
    /// #[derive(Deserialize, JsonSchema)]
    /// struct CancelOrder { order_id: String }
    ///
    /// let registry = Registry::new(RegistryConfig::default());
    /// registry.define("orders", |t| {
    ///     t.capability("cancel", "Cancel an order that has not shipped yet.")
    ///         .effect(Effect::Destructive)
    ///         .confirm(|i: &CancelOrder| format!("Cancel order {}.", i.order_id))
    ///         .handler(|_ctx: Ctx, i: CancelOrder| async move {
    ///             Ok::<_, AgentSurfaceError>(serde_json::json!({"cancelled": i.order_id}))
    ///         })
    /// })?;
    /// # Ok::<_, agent_surface_core::DefinitionError>(())
    /// ```
    pub fn confirm<I, S, F>(mut self, summary: F) -> Self
    where
        I: Send + 'static,
        S: std::fmt::Display,
        F: Fn(&I) -> S + Send + Sync + 'static,
    {
        self.confirm = Some(ErasedConfirm::typed(summary));
        self
    }

    /// Declares a **natural idempotency key**: calls whose input gives the same key are one
    /// operation, whatever the client sends — also a plain MCP client that sends no invocation
    /// id, another session, another transport, or another replica sharing the idempotency
    /// store. The first call with a key runs; a call with the same key and the same input joins
    /// it while it runs and is answered with its stored result after (for the idempotency
    /// window); a call with the same key and another input is `INVOCATION_CONFLICT` (e.g. a
    /// second refund of one order for another amount). `I` must be the handler's input type.
    ///
    /// The key spans every caller of the capability ([`KeyScope::Capability`]; see
    /// [`idempotency_key_per_principal`](Self::idempotency_key_per_principal) for one user's
    /// calls). Because it spans callers, it is admitted after authority and input validation:
    /// a caller the authority policy refuses gets its refusal, never the stored result. It comes
    /// before the author's precondition, the questions, the rate limit and the confirmation, so
    /// that a repeat of an operation that ran is answered with its result rather than refused by
    /// a precondition its own first run made false, charged a unit of budget, or asked to be
    /// approved again. What counts as "the same input" is the validated input with bound fields
    /// filled, on the same instance.
    ///
    /// A call that stops before its handler started (an unmet precondition, a refused quota or
    /// approval) leaves the key free, and so does an answer that tells the agent to make the same
    /// call again (`TIMEOUT`, `CANCELLED`, a transient failure) where repeating it is harmless:
    /// the handler did not start, or the capability is idempotent or read-only. A write that is
    /// not idempotent keeps even a transient failure once its handler started, since the handler
    /// may have had its effect first: declare `idempotent()` a write whose repetition is safe.
    ///
    /// The function runs on every call; keep it cheap and deterministic. A key function that
    /// panics fails the call closed (`EXECUTION_FAILED`); a key longer than 128 bytes is stored
    /// by its SHA-256.
    ///
    /// ```
    /// use agent_surface_core::{AgentSurfaceError, Effect};
    /// use agent_surface_registry::{Ctx, Registry, RegistryConfig};
    /// use schemars::JsonSchema;
    /// use serde::Deserialize;
    ///
    /// #[derive(Deserialize, JsonSchema)]
    /// struct IssueRefund { order_id: String, amount_cents: u64 }
    ///
    /// let registry = Registry::new(RegistryConfig::default());
    /// registry.define("refunds", |t| {
    ///     t.capability("issue", "Refund an order, once.")
    ///         .effect(Effect::External)
    ///         .idempotency_key(|i: &IssueRefund| i.order_id.clone()) // one refund per order
    ///         .handler(|_ctx: Ctx, i: IssueRefund| async move {
    ///             Ok::<_, AgentSurfaceError>(serde_json::json!({"refunded": i.amount_cents}))
    ///         })
    /// })?;
    /// # Ok::<_, agent_surface_core::DefinitionError>(())
    /// ```
    pub fn idempotency_key<I, K, F>(self, key: F) -> Self
    where
        I: Send + 'static,
        K: std::fmt::Display,
        F: Fn(&I) -> K + Send + Sync + 'static,
    {
        self.natural_key_in(KeyScope::Capability, key)
    }

    /// As [`idempotency_key`](Self::idempotency_key), with the key spanning one principal's
    /// calls only ([`KeyScope::Principal`]): the same key from two users is two operations.
    pub fn idempotency_key_per_principal<I, K, F>(self, key: F) -> Self
    where
        I: Send + 'static,
        K: std::fmt::Display,
        F: Fn(&I) -> K + Send + Sync + 'static,
    {
        self.natural_key_in(KeyScope::Principal, key)
    }

    fn natural_key_in<I, K, F>(mut self, scope: KeyScope, key: F) -> Self
    where
        I: Send + 'static,
        K: std::fmt::Display,
        F: Fn(&I) -> K + Send + Sync + 'static,
    {
        let erased = move |input: &(dyn std::any::Any + Send)| input.downcast_ref::<I>().map(|i| key(i).to_string());
        self.natural_key = Some(ErasedKey { key: Arc::new(erased), scope, input_type: std::any::TypeId::of::<I>() });
        self
    }

    /// As [`confirm`](Self::confirm), for the inputs that need it: `when` returns the summary
    /// the approver sees for an input that needs a person's approval, and `None` for one that
    /// does not (which then runs as if the capability declared no gate; a global confirmation
    /// policy may still gate it). Typed like `confirm`: a rule such as "a refund over 100 EUR
    /// needs approval" reads the input's fields, so a misspelled field is a compile error, not a
    /// gate that opens for every amount. `I` must be the handler's input type.
    ///
    /// The rule runs on the validated input of every call, also of one that presents evidence
    /// (to know whether it is gated at all); keep it cheap and free of side effects. A rule that
    /// panics fails the call in the confirmation phase; the handler does not run.
    ///
    /// ```
    /// use agent_surface_core::{AgentSurfaceError, Effect};
    /// use agent_surface_registry::{Ctx, Registry, RegistryConfig};
    /// use schemars::JsonSchema;
    /// use serde::Deserialize;
    ///
    /// #[derive(Deserialize, JsonSchema)]
    /// struct IssueRefund { order_id: String, amount_cents: u64 }
    ///
    /// let registry = Registry::new(RegistryConfig::default());
    /// registry.define("refunds", |t| {
    ///     t.capability("issue", "Refund an order, in part or in full.")
    ///         .effect(Effect::External)
    ///         // Over 100 EUR needs a person's approval; smaller refunds run at once.
    ///         .confirm_if(|i: &IssueRefund| {
    ///             (i.amount_cents > 10_000)
    ///                 .then(|| format!("Refund {:.2} EUR on order {}.", i.amount_cents as f64 / 100.0, i.order_id))
    ///         })
    ///         .handler(|_ctx: Ctx, i: IssueRefund| async move {
    ///             Ok::<_, AgentSurfaceError>(serde_json::json!({"refunded": i.amount_cents}))
    ///         })
    /// })?;
    /// # Ok::<_, agent_surface_core::DefinitionError>(())
    /// ```
    pub fn confirm_if<I, S, F>(mut self, when: F) -> Self
    where
        I: Send + 'static,
        S: std::fmt::Display,
        F: Fn(&I) -> Option<S> + Send + Sync + 'static,
    {
        self.confirm = Some(ErasedConfirm::conditional(when));
        self
    }

    /// Finishes with a typed handler; the input and output schemas come from `I` and `O`.
    pub fn handler<I, O, F, Fut>(self, f: F)
    where
        I: DeserializeOwned + JsonSchema + Send + 'static,
        O: Serialize + JsonSchema + Send + 'static,
        F: Fn(Ctx, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, AgentSurfaceError>> + Send + 'static,
    {
        let input = object_schema_for::<I>();
        let output = Some(schema::schema_for::<O>()).filter(|s| !schema::is_trivial(s));
        self.finish(input, output, ErasedHandler::typed(f));
    }

    /// Finishes with a handler that takes [extractors](crate::extract) — [`State<T>`](crate::State),
    /// [`InstanceState<S>`](crate::InstanceState), [`Caller`](crate::Caller), [`Ctx`], up to four
    /// of them — and then its input; the schemas come from `I` and `O`. What the extractors need
    /// is checked at mount: a missing [`Registry::provide`](crate::Registry::provide) is a
    /// definition error there, not a failure of every call.
    ///
    /// ```
    /// use agent_surface_core::AgentSurfaceError;
    /// use agent_surface_registry::{Caller, Registry, RegistryConfig, State};
    /// use schemars::JsonSchema;
    /// use serde::Deserialize;
    ///
    /// struct Greeting(String);
    ///
    /// #[derive(Deserialize, JsonSchema)]
    /// struct Hello { name: String }
    ///
    /// let registry = Registry::new(RegistryConfig::default());
    /// registry.provide(Greeting("Hello".into()));
    /// registry.define("greeter", |t| {
    ///     t.capability("hello", "Greet someone.").handle(|State(g): State<Greeting>, i: Hello| async move {
    ///         Ok::<_, AgentSurfaceError>(format!("{}, {}!", g.0, i.name))
    ///     })
    /// })?;
    /// let _greeter = registry.mount("greeter", "main")?;
    /// # Ok::<_, agent_surface_core::DefinitionError>(())
    /// ```
    pub fn handle<Args, I, O, H>(mut self, handler: H)
    where
        H: crate::extract::Handler<Args, I, O>,
        I: DeserializeOwned + JsonSchema + Send + 'static,
        O: Serialize + JsonSchema + Send + 'static,
    {
        self.requirements = H::requirements();
        let handler = Arc::new(handler);
        let call = move |ctx: Ctx, input: I| {
            let call = handler.call(&ctx, input);
            async move {
                match call {
                    Some(future) => future.await,
                    // Ruled out by the mount check; fail the call rather than panic.
                    None => Err(AgentSurfaceError::internal(std::io::Error::other(
                        "a handler's extractor found nothing to extract",
                    ))),
                }
            }
        };
        let input = object_schema_for::<I>();
        let output = Some(schema::schema_for::<O>()).filter(|s| !schema::is_trivial(s));
        self.finish(input, output, ErasedHandler::typed(call));
    }

    /// Finishes with a handler over raw JSON values and explicit schemas.
    pub fn raw_handler<F, Fut>(self, input_schema: Value, output_schema: Option<Value>, f: F)
    where
        F: Fn(Ctx, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, AgentSurfaceError>> + Send + 'static,
    {
        let output = output_schema.filter(|s| !schema::is_trivial(s));
        self.finish(input_schema, output, ErasedHandler::raw(f));
    }

    /// Finishes as a procedure run by the named executor; the schemas come from `I` and `O`.
    pub fn procedure<I: JsonSchema, O: JsonSchema>(self, executor: &str) {
        let input = object_schema_for::<I>();
        let output = Some(schema::schema_for::<O>()).filter(|s| !schema::is_trivial(s));
        self.raw_procedure(executor, input, output);
    }

    /// Finishes as a procedure run by the named executor, with explicit schemas.
    pub fn raw_procedure(mut self, executor: &str, input_schema: Value, output_schema: Option<Value>) {
        self.plane = Plane::Procedure;
        let Some(exec) = self.ty.env.executors.get(executor).cloned() else {
            self.error.get_or_insert(DefinitionError::new(
                Code::PlaneViolation,
                self.location(),
                format!("procedure names executor `{executor}`, which the registry does not have"),
            ));
            self.finish(input_schema, output_schema, ErasedHandler::raw(|_, v| async move { Ok(v) }));
            return;
        };
        let name: Arc<str> = Arc::from(self.location());
        let handler = ErasedHandler::raw(move |ctx, input| exec.execute(ctx, &name, input));
        let output = output_schema.filter(|s| !schema::is_trivial(s));
        self.finish(input_schema, output, handler);
    }

    fn finish(self, input_schema: Value, output_schema: Option<Value>, handler: ErasedHandler) {
        let result = self.check(input_schema, output_schema, handler);
        self.ty.done.push(result);
    }

    fn check(
        &self,
        input_schema: Value,
        output_schema: Option<Value>,
        handler: ErasedHandler,
    ) -> Result<CapabilityDef, DefinitionError> {
        let location = self.location();
        id::check_type_id(&self.ty.type_id)?;
        id::check_capability_id(&self.ty.type_id, &self.id)?;
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let limits = self.ty.env.limits;
        if self.description.trim().is_empty() {
            return Err(DefinitionError::new(Code::InvalidDefinition, location, "the description is empty"));
        }
        if self.description.chars().count() > limits.max_description_chars {
            return Err(DefinitionError::new(
                Code::LimitExceeded,
                location,
                format!("the description is longer than {} characters", limits.max_description_chars),
            ));
        }
        if let Some(meta) = &self.meta {
            if !meta.is_object() {
                return Err(DefinitionError::new(Code::InvalidDefinition, location, "meta must be a JSON object"));
            }
            let size = serde_json::to_vec(meta).map(|v| v.len()).unwrap_or(usize::MAX);
            if size > limits.max_meta_bytes {
                return Err(DefinitionError::new(
                    Code::LimitExceeded,
                    location,
                    format!("meta is {size} bytes, over the {}-byte cap", limits.max_meta_bytes),
                ));
            }
        }
        if let Some(budget) = self.time_budget
            && (budget.is_zero() || budget > limits.max_time_budget)
        {
            return Err(DefinitionError::new(
                Code::LimitExceeded,
                location,
                format!("the time budget must be between 1 ms and {:?}", limits.max_time_budget),
            ));
        }
        if self.plane == Plane::View {
            if self.effect.requires_fresh_surface() {
                return Err(DefinitionError::new(
                    Code::PlaneViolation,
                    location,
                    format!(
                        "a view action may only change its instance's state, but declares effect `{}`",
                        self.effect
                    ),
                ));
            }
            if !self.bindings.is_empty() {
                return Err(DefinitionError::new(
                    Code::PlaneViolation,
                    location,
                    "a view action cannot bind input fields; bindings belong to procedures",
                ));
            }
        }
        if let Some(p) = &self.precondition
            && p.input_type != handler.input_type
        {
            return Err(DefinitionError::new(
                Code::InvalidDefinition,
                location,
                "the precondition's input type differs from the handler's",
            ));
        }
        if let Some(c) = &self.confirm
            && c.input_type != handler.input_type
        {
            return Err(DefinitionError::new(
                Code::InvalidDefinition,
                location,
                "the confirmation summary's input type differs from the handler's",
            ));
        }
        if let Some(k) = &self.natural_key
            && k.input_type != handler.input_type
        {
            return Err(DefinitionError::new(
                Code::InvalidDefinition,
                location,
                "the idempotency key function's input type differs from the handler's; take `&I`, where `I` is the handler's input",
            ));
        }
        if let Some(a) = &self.ask
            && a.input_type != handler.input_type
        {
            return Err(DefinitionError::new(
                Code::InvalidDefinition,
                location,
                "the ask step's input type differs from the handler's",
            ));
        }
        if let Some(v) = &self.verify
            && v.input_type != handler.input_type
        {
            return Err(DefinitionError::new(
                Code::InvalidDefinition,
                location,
                "the verification's input type differs from the handler's",
            ));
        }
        if let Some(plan) = &self.precondition_repair {
            plan.check_static().map_err(|e| {
                let code = if e.is_limit() { Code::LimitExceeded } else { Code::InvalidDefinition };
                DefinitionError::new(code, location.clone(), format!("repair_on_precondition: {e}"))
            })?;
            plan.check_retry(Retry::WithChanges).map_err(|e| {
                DefinitionError::new(Code::InvalidDefinition, location.clone(), format!("repair_on_precondition: {e}"))
            })?;
        }
        let schema_limits = SchemaLimits { max_depth: limits.max_schema_depth, max_bytes: limits.max_schema_bytes };
        let bound: Vec<String> = self.bindings.iter().map(|(f, _)| f.clone()).collect();
        let mut seen = HashSet::new();
        if let Some(dup) = bound.iter().find(|b| !seen.insert(b.as_str())) {
            return Err(DefinitionError::new(
                Code::InvalidDefinition,
                location,
                format!("field `{dup}` is bound twice"),
            ));
        }
        let closed = schema::close_objects(input_schema);
        let input = schema::check_input_schema(&location, &closed, &bound, &self.sensitive, schema_limits)?;
        let validator = InputValidator::new(&location, &input.advertised, input.sensitive.clone())?;
        // Input, bound input and output are compiled alike (`schema::compile`): formats asserted.
        let bound_validator =
            if bound.is_empty() { None } else { Some(schema::compile(&location, "input", &input.full)?) };
        let (output_schema, output_validator) = match output_schema {
            None => (None, None),
            Some(s) => {
                let s = schema::check_output_schema(&location, &s, schema_limits)?;
                let v = schema::compile(&location, "output", &s)?;
                (Some(s), Some(v))
            }
        };
        let name = id::capability_name(&self.ty.type_id, &self.id);
        let tool_name = id::tool_name(&name).unwrap_or_else(|| name.replace('.', "-"));
        let description = self.description.trim().to_string();
        let tool_version = ToolDefinition {
            name: &name,
            description: &description,
            input_schema: input.advertised.as_value(),
            output_schema: output_schema.as_ref().map(PortableSchema::as_value),
            effect: self.effect,
            idempotent: self.idempotent,
            long_running: self.long_running,
            plane: match self.plane {
                Plane::View => "view",
                Plane::Procedure => "procedure",
            },
            confirmation: match &self.confirm {
                None => ConfirmationGate::None,
                Some(c) if c.conditional => ConfirmationGate::Conditional,
                Some(_) => ConfirmationGate::Always,
            },
            meta: self.meta.as_ref(),
        }
        .version();
        Ok(CapabilityDef {
            name: Arc::from(name),
            tool_name,
            type_id: Arc::from(self.ty.type_id.as_str()),
            description,
            tool_version: Arc::from(tool_version),
            effect: self.effect,
            idempotent: self.idempotent,
            strict_audit: self.strict_audit,
            long_running: self.long_running,
            time_budget: self.time_budget,
            plane: self.plane,
            input,
            validator,
            bound_validator,
            output_schema,
            output_validator,
            bindings: self.bindings.clone(),
            precondition: self.precondition.clone(),
            precondition_repair: self.precondition_repair.clone(),
            confirm: self.confirm.clone(),
            natural_key: self.natural_key.clone(),
            ask: self.ask.clone(),
            verify: self.verify.clone(),
            handler,
            requirements: (self.requirements.iter().map(|r| (*r, "the handler")))
                .chain(self.precondition_requirements.iter().map(|r| (*r, "the precondition")))
                .collect(),
            meta: self.meta.clone(),
        })
    }
}

/// The input schema of `I`; an unconstrained type (`serde_json::Value`) accepts any object,
/// since a tool's input is always a JSON object.
fn object_schema_for<I: JsonSchema>() -> Value {
    let s = schema::schema_for::<I>();
    if schema::is_trivial(&s) { serde_json::json!({"type": "object"}) } else { s }
}
