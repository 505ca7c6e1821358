//! [`Registry`]: definitions, live registrations, availability, discovery and disposal.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::Duration;

use agent_surface_core::{DefinitionError, DefinitionErrorCode as Code, SafeText};
use agent_surface_policy::{
    AuditConfig, AuthorityPolicy, Clock, ConfirmationGate, IdempotencyStore, MemoryIdempotencyStore, RateLimiter,
    SystemClock,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::ctx::StateMap;
use crate::define::{BuildEnv, DefinitionLimits, Executor, TypeBuilder};
use crate::id;
use crate::live::{Registration, State, Tombstone, TypeState};
use crate::wiring::Wiring;

/// What happens when an instance is mounted under a `(type, instanceId)` that is already live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DuplicateInstance {
    /// Keep the live one; the new mount gets a dead handle and an operator event.
    #[default]
    Reject,
    /// Replace the live one: it is tombstoned (calls naming it get `STALE_CAPABILITY` with the
    /// new `liveRegistrationId`) and the new mount gets a fresh registration id.
    Replace,
}

/// The registry's configuration. Build it with struct update syntax over `Default`.
///
/// ```
/// use agent_surface_registry::RegistryConfig;
/// use std::time::Duration;
/// let config = RegistryConfig { default_time_budget: Duration::from_secs(5), ..Default::default() };
/// # let _ = config;
/// ```
#[derive(Clone)]
pub struct RegistryConfig {
    /// The source of time for windows, expiries, budgets and tombstone lifetimes.
    pub clock: Arc<dyn Clock>,
    /// Where idempotency records live.
    pub idempotency: Arc<dyn IdempotencyStore>,
    /// How long a terminal result stays stored for its `(consumerKey, invocationId)`.
    pub idempotency_window: Duration,
    /// How long an unmounted registration is remembered (for `COMPONENT_UNMOUNTED`).
    pub tombstone_ttl: Duration,
    /// The most tombstones kept at once (oldest forgotten first).
    pub max_tombstones: usize,
    /// The time budget of a call when the capability declares none.
    pub default_time_budget: Duration,
    /// The largest output, serialized, in bytes (`EXECUTION_FAILED {reason: output-too-large}`).
    pub max_output_bytes: usize,
    /// The largest input, serialized, in bytes.
    pub max_input_bytes: usize,
    /// The deepest input nesting.
    pub max_input_depth: usize,
    /// Registration-time caps.
    pub definition_limits: DefinitionLimits,
    /// The rule for duplicate `(type, instanceId)` mounts.
    pub duplicate_instance: DuplicateInstance,
    /// Authority policy (phase 4 and discovery); `None` allows everything. Usually a
    /// [`Policies`](agent_surface_policy::Policies) engine built with the same clock.
    pub authority: Option<Arc<dyn AuthorityPolicy>>,
    /// The longest the authority policy may take for one decision, on `clock`; past it the call
    /// is denied (fail closed). A backstop for the whole policy: a `Policies` engine also bounds
    /// each of its policies.
    pub authority_budget: Duration,
    /// Rate limiter (phase 6); `None` never limits. Usually a
    /// [`MemoryRateLimiter`](agent_surface_policy::MemoryRateLimiter).
    pub rate_limiter: Option<Arc<dyn RateLimiter>>,
    /// Confirmation gate (phase 7); `None` never asks. Usually a
    /// [`ConfirmationEngine`](agent_surface_policy::ConfirmationEngine) the host also keeps, to
    /// approve and deny. Without one, a capability that declares a gate (`.confirm(…)`) never
    /// runs.
    pub confirmation: Option<Arc<dyn ConfirmationGate>>,
    /// The longest one idempotency store operation (admission, settlement) may take, on
    /// `clock`. An admission past it fails closed: the call does not run and is answered
    /// `EXECUTION_FAILED {reason: store-unavailable, transient}` (`after-delay`, sent again under
    /// the same invocation id); a settlement past it
    /// counts as a store failure.
    pub store_budget: Duration,
    /// The longest the confirmation gate may take for one call, on `clock`; past it the call does
    /// not run and is answered as for a failed store (transient, `after-delay`). A gate that waits
    /// for a person (`ConfirmationMode::Wait`) needs its wait within this. The engine also bounds
    /// each of its store operations (`ConfirmationConfig::store_budget`).
    pub confirmation_budget: Duration,
    /// Whether the pipeline records its metrics through the `metrics` facade (on by default: a call
    /// made while no recorder is installed costs a few nanoseconds more, and records nothing; with
    /// one, the handles are registered once and reused). See [`crate::telemetry`]. Needs this
    /// crate's `metrics` feature (on by default): without it nothing is recorded, whatever this says.
    pub metrics: bool,
    /// The audit trail of executions: every call of a capability with an effect (not `read`)
    /// records `execution.started` before its handler runs and `execution.finished` with its
    /// code after (see `agent_surface_policy::AuditSink`); `None`: no trail (a capability that
    /// asks for strict audit then never runs). Give the confirmation engine the same sink for
    /// the confirmation events.
    pub audit: Option<AuditConfig>,
    /// The most confirmation ids the registry remembers for callers that cannot send them back
    /// (a model repeating a call it was told needs approval; see `spec/authority-and-confirmation.md`,
    /// "Presented on repeat"), for a confirmation gate that does not remember them itself (a
    /// custom `ConfirmationGate`; the `ConfirmationEngine` keeps them in its store, see
    /// `ConfirmationConfig::present_on_repeat`). Each id is at most 256 bytes; the oldest is
    /// forgotten first; `0` turns this memory off.
    pub relayed_confirmations: usize,
    /// The types the application defines after its first mount (on demand, by a plugin, behind
    /// a flag) whose names the hooks already target. The wiring check of every mount skips the
    /// names under such a type until it is defined; its definition checks them (a misspelled
    /// `tickets.crate` is then a definition error naming `tickets.create`); and
    /// [`Registry::check_wiring`] reports a declared type that is still not defined. A name under
    /// a type that is not declared here must exist at every mount, as before. Empty by default.
    ///
    /// ```
    /// use agent_surface_core::DefinitionErrorCode;
    /// use agent_surface_policy::{AllowAll, Policies, RequireRole};
    /// use agent_surface_registry::{Ctx, Registry, RegistryConfig};
    /// use std::sync::Arc;
    ///
    /// // `tickets` is defined later, and its policy misspells `tickets.create`.
    /// let policies = Policies::default_deny()
    ///     .for_type("orders", AllowAll)
    ///     .for_capability("tickets.crate", RequireRole::new("agent"));
    /// let registry = Registry::new(RegistryConfig {
    ///     authority: Some(Arc::new(policies)),
    ///     late_types: vec!["tickets".into()],
    ///     ..Default::default()
    /// });
    /// let echo = |_: Ctx, v: serde_json::Value| async move { Ok(v) };
    /// registry.define("orders", |t| {
    ///     t.capability("list", "List the orders.").raw_handler(serde_json::json!({"type": "object"}), None, echo)
    /// })?;
    /// // Mounting `orders` does not wait for `tickets`…
    /// let _orders = registry.mount("orders", "main")?;
    /// // …but start-up is not over until it is defined.
    /// let err = registry.check_wiring().unwrap_err();
    /// assert_eq!((err.code(), err.location()), (DefinitionErrorCode::InvalidDefinition, "tickets"));
    ///
    /// // Its definition checks the names under it.
    /// let err = registry
    ///     .define("tickets", |t| {
    ///         t.capability("create", "Open a ticket.").raw_handler(serde_json::json!({"type": "object"}), None, echo)
    ///     })
    ///     .unwrap_err();
    /// assert_eq!(err.location(), "tickets.crate");
    /// assert!(err.problem().ends_with("did you mean `tickets.create`?"), "{}", err.problem());
    /// # Ok::<_, agent_surface_core::DefinitionError>(())
    /// ```
    pub late_types: Vec<String>,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            clock: Arc::new(SystemClock),
            idempotency: Arc::new(MemoryIdempotencyStore::default()),
            idempotency_window: Duration::from_secs(10 * 60),
            tombstone_ttl: Duration::from_secs(5 * 60),
            max_tombstones: 10_000,
            default_time_budget: Duration::from_secs(30),
            max_output_bytes: 1024 * 1024,
            max_input_bytes: 1024 * 1024,
            max_input_depth: 64,
            definition_limits: DefinitionLimits::default(),
            duplicate_instance: DuplicateInstance::Reject,
            authority: None,
            authority_budget: Duration::from_secs(5),
            rate_limiter: None,
            confirmation: None,
            store_budget: Duration::from_secs(5),
            confirmation_budget: Duration::from_secs(5 * 60),
            metrics: true,
            audit: None,
            relayed_confirmations: 4096,
            late_types: Vec::new(),
        }
    }
}

impl std::fmt::Debug for RegistryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryConfig")
            .field("clock", &self.clock)
            .field("idempotency", &self.idempotency)
            .field("idempotency_window", &self.idempotency_window)
            .field("tombstone_ttl", &self.tombstone_ttl)
            .field("default_time_budget", &self.default_time_budget)
            .field("duplicate_instance", &self.duplicate_instance)
            .field("store_budget", &self.store_budget)
            .field("confirmation_budget", &self.confirmation_budget)
            .field("metrics", &self.metrics)
            .field("audit", &self.audit)
            .field("relayed_confirmations", &self.relayed_confirmations)
            .field("late_types", &self.late_types)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pub(crate) config: RegistryConfig,
    pub(crate) surface_id: Arc<str>,
    state: RwLock<State>,
    version_tx: watch::Sender<u64>,
    pub(crate) disposed: CancellationToken,
    next_registration: AtomicU64,
    shared: RwLock<Arc<StateMap>>,
    executors: RwLock<HashMap<String, Arc<dyn Executor>>>,
    /// The types and capabilities the hooks name, checked at definition and assembly.
    wiring: Wiring,
    /// Confirmation ids relayed to callers, presented when they repeat the call (phase 7), for a
    /// gate that does not remember them itself.
    pub(crate) relayed: crate::relayed::Relayed,
    /// The metric handles, registered once per recorder, transport and capability.
    pub(crate) metrics: crate::telemetry::Handles,
    /// How many times a capability was disabled, counted under the state's write lock: a call
    /// that read it at phase 3 learns, with one load at phase 8's gate, whether it must look
    /// again (`pipeline::may_start`).
    pub(crate) disables: AtomicU64,
}

impl Inner {
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn shared(&self) -> Arc<StateMap> {
        self.shared.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn publish(&self, version: u64) {
        self.version_tx.send_replace(version);
    }

    fn unmount(&self, registration_id: &Arc<str>) {
        let now = self.config.clock.now();
        let version = {
            let mut state = self.write();
            let Some(reg) = state.registrations.remove(registration_id) else { return };
            if let Some(t) = state.types.get_mut(&reg.type_id) {
                t.instances.remove(&reg.instance_id);
            }
            state.tombstones.insert(
                Tombstone {
                    type_id: reg.type_id.clone(),
                    instance_id: reg.instance_id.clone(),
                    registration_id: reg.registration_id.clone(),
                    created_at: now,
                    expires_at: now.saturating_add(self.config.tombstone_ttl),
                    replaced_by: None,
                },
                self.config.max_tombstones,
                now,
            );
            reg.unmounted.cancel();
            tracing::debug!(
                target: "agent_surface::registry",
                type_id = %reg.type_id, instance_id = %reg.instance_id, registration_id = %reg.registration_id,
                "unmounted"
            );
            state.touch(&reg.type_id)
        };
        self.publish(version);
    }
}

/// A registry of capability types, their live instances, and the invocation pipeline.
///
/// Cheap to clone (a handle to shared state).
///
/// ```
/// use agent_surface_registry::{Registry, RegistryConfig, InvokeRequest, InvokeOptions, Ctx};
/// use agent_surface_core::AgentSurfaceError;
/// use agent_surface_policy::Consumer;
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Add { a: i64, b: i64 }
/// #[derive(Serialize, JsonSchema)]
/// struct Sum { sum: i64 }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let registry = Registry::new(RegistryConfig::default());
/// registry.define("calc", |t| {
///     t.capability("add", "Add two integers.")
///         .effect(agent_surface_core::Effect::Read)
///         .idempotent()
///         .handler(|_ctx: Ctx, i: Add| async move { Ok::<_, AgentSurfaceError>(Sum { sum: i.a + i.b }) })
/// })?;
/// let _mounted = registry.mount("calc", "default")?;
///
/// let request = InvokeRequest::new("calc.add", serde_json::json!({"a": 2, "b": 3}));
/// let result = registry.invoke(request, InvokeOptions::new(Consumer::anonymous("session-1"))).await;
/// assert_eq!(result.output(), Some(&serde_json::json!({"sum": 5})));
/// # Ok::<_, agent_surface_core::DefinitionError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct Registry {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("surface_id", &self.inner.surface_id)
            .field("version", &self.version())
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// A new, empty registry with a fresh surface id.
    ///
    /// The types and capabilities its hooks name (`Policies::for_capability`, quotas, scoped
    /// confirmation rules; see [`agent_surface_policy::Scope`]) are read now and checked later:
    /// those of a type when it is defined, all of them on every mount but those under a type
    /// declared in [`RegistryConfig::late_types`] that is not defined yet (see
    /// [`Registry::check_wiring`]).
    pub fn new(config: RegistryConfig) -> Registry {
        let (version_tx, _) = watch::channel(0);
        let wiring = Wiring::of(
            config.authority.as_deref(),
            config.rate_limiter.as_deref(),
            config.confirmation.as_deref(),
            &config.late_types,
        );
        let relayed = crate::relayed::Relayed::new(config.relayed_confirmations);
        for warning in wiring_warnings(&config) {
            // Kept for a log installed later when nothing records it now (`Serve` says it then).
            agent_surface_policy::wiring::warn(&warning.to_string());
        }
        Registry {
            inner: Arc::new(Inner {
                wiring,
                relayed,
                config,
                surface_id: Arc::from(new_surface_id()),
                state: RwLock::new(State::default()),
                version_tx,
                disposed: CancellationToken::new(),
                next_registration: AtomicU64::new(1),
                shared: RwLock::new(Arc::new(HashMap::new())),
                executors: RwLock::new(HashMap::new()),
                metrics: crate::telemetry::Handles::default(),
                disables: AtomicU64::new(0),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RegistryConfig {
        &self.inner.config
    }

    /// Wiring whose guarantees do not hold: state that some parts share between replicas and
    /// others keep per process, parts on other clocks or audit trails, a binary that aborts on a
    /// panic (see [`WiringWarning`](crate::WiringWarning)). [`Registry::new`] logs each at WARN
    /// (`agent_surface::wiring`), or keeps it for a log installed later when no subscriber
    /// records it yet ([`agent_surface_policy::wiring`]: `Serve`, in `agent-surface`, says it
    /// when it starts).
    ///
    /// ```
    /// use agent_surface_registry::{Registry, RegistryConfig};
    /// // Everything in memory: consistent for one process.
    /// assert!(Registry::new(RegistryConfig::default()).wiring_warnings().is_empty());
    /// ```
    pub fn wiring_warnings(&self) -> Vec<crate::WiringWarning> {
        wiring_warnings(&self.inner.config)
    }

    /// This registry's surface id (new for every registry, i.e. every process or page load).
    pub fn surface_id(&self) -> &str {
        &self.inner.surface_id
    }

    /// The current surface version; it increases on every change.
    pub fn version(&self) -> u64 {
        self.inner.read().version
    }

    /// A receiver that sees every new surface version (the MCP adapter turns it into
    /// `notifications/tools/list_changed`).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.version_tx.subscribe()
    }

    /// Makes `value` available to every handler as `ctx.state::<T>()` and as the
    /// [`State<T>`](crate::State) extractor (which mounts require: see [`Registry::check_wiring`]).
    pub fn provide<T: Any + Send + Sync>(&self, value: T) {
        let mut shared = self.inner.shared.write().unwrap_or_else(PoisonError::into_inner);
        let mut map: StateMap = (**shared).clone();
        map.insert(TypeId::of::<T>(), Arc::new(value));
        *shared = Arc::new(map);
    }

    /// Registers an executor for procedures, under `name`. Register executors before defining
    /// the capabilities that name them.
    pub fn register_executor(&self, name: &str, executor: impl Executor) {
        self.inner
            .executors
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_string(), Arc::new(executor));
    }

    /// Defines a capability type and its capabilities. Every check runs here, once; a defect is
    /// a [`DefinitionError`] and nothing of the type is registered.
    ///
    /// Among the checks: every capability of this type that the registry's hooks name must be
    /// one it defines (`INVALID_DEFINITION`, with the closest name it does define).
    pub fn define(&self, type_id: &str, build: impl FnOnce(&mut TypeBuilder<'_>)) -> Result<(), DefinitionError> {
        let executors = self.inner.executors.read().unwrap_or_else(PoisonError::into_inner).clone();
        let env = BuildEnv { executors: &executors, limits: self.inner.config.definition_limits };
        let mut builder = TypeBuilder::new(type_id, env);
        build(&mut builder);
        let defs = builder.finish()?;
        self.inner.wiring.check_type(type_id, defs.iter().map(|d| &*d.name))?;
        let version = {
            let mut state = self.inner.write();
            if state.types.contains_key(type_id) {
                return Err(DefinitionError::new(
                    Code::DuplicateCapability,
                    type_id,
                    "this capability type is already defined",
                ));
            }
            let mut ty = TypeState::default();
            for d in defs {
                ty.capabilities.push(d.name.clone());
                state.capabilities.insert(d.name.clone(), Arc::new(d));
            }
            state.types.insert(Arc::from(type_id), ty);
            state.touch(type_id)
        };
        self.inner.publish(version);
        Ok(())
    }

    /// Replaces the definition of a type already defined, keeping its live instances: what a
    /// deployment that changes a tool without a restart does (a plugin reloaded, a schema
    /// migrated). The new definition is checked as [`Registry::define`] checks one, and against
    /// every live instance as a mount would check it (the state its extractors take); a defect is
    /// a [`DefinitionError`] and the old definition stays.
    ///
    /// Capabilities the new definition leaves out are gone (their disabled marks too); the others
    /// are replaced. A call already past resolution finishes under the definition it resolved
    /// to; a later call meets the new one. Each capability's tool version follows its new
    /// definition ([`agent_surface_core::tool_version`]): a call that names the version listed
    /// before a change is `STALE_CAPABILITY {reason: tool-version-mismatch}` with the live
    /// version, and a definition redefined identically keeps its version.
    ///
    /// ```
    /// use agent_surface_registry::{Ctx, InvokeOptions, InvokeRequest, Registry, RegistryConfig};
    /// use agent_surface_policy::Consumer;
    /// use serde_json::json;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let registry = Registry::new(RegistryConfig::default());
    /// let define = |schema: serde_json::Value| {
    ///     move |t: &mut agent_surface_registry::TypeBuilder<'_>| {
    ///         t.capability("open", "Open a ticket.").raw_handler(schema, None, |_: Ctx, v| async move { Ok(v) });
    ///     }
    /// };
    /// registry.define("tickets", define(json!({"type": "object"})))?;
    /// let _mounted = registry.mount("tickets", "main")?;
    /// let consumer = Consumer::anonymous("c");
    /// let before = registry.snapshot(&consumer).await.capabilities[0].tool_version.clone().unwrap();
    ///
    /// registry.redefine("tickets", define(json!({"type": "object", "properties": {"title": {"type": "string"}}})))?;
    /// let after = registry.snapshot(&consumer).await.capabilities[0].tool_version.clone().unwrap();
    /// assert_ne!(before, after);
    ///
    /// let old = InvokeRequest::new("tickets.open", json!({})).with_tool_version(before);
    /// let result = registry.invoke(old, InvokeOptions::new(consumer.clone())).await;
    /// let details = result.error_payload().unwrap().details().unwrap();
    /// assert_eq!(details["reason"], "tool-version-mismatch");
    /// assert_eq!(details["liveToolVersion"], after.as_str());
    /// # Ok::<_, agent_surface_core::DefinitionError>(())
    /// # }).unwrap();
    /// ```
    pub fn redefine(&self, type_id: &str, build: impl FnOnce(&mut TypeBuilder<'_>)) -> Result<(), DefinitionError> {
        let executors = self.inner.executors.read().unwrap_or_else(PoisonError::into_inner).clone();
        let env = BuildEnv { executors: &executors, limits: self.inner.config.definition_limits };
        let mut builder = TypeBuilder::new(type_id, env);
        build(&mut builder);
        let defs = builder.finish()?;
        self.inner.wiring.check_type(type_id, defs.iter().map(|d| &*d.name))?;
        let shared = self.inner.shared();
        let version = {
            let mut state = self.inner.write();
            let Some(ty) = state.types.get(type_id) else {
                return Err(DefinitionError::new(
                    Code::InvalidDefinition,
                    type_id,
                    "cannot redefine a type that is not defined; define it first",
                ));
            };
            for def in &defs {
                for live in ty.instances.values() {
                    let target = Some((&*live.instance_id, live.state.as_deref()));
                    crate::wiring::check_requirements(&def.name, &def.requirements, &shared, target)?;
                }
            }
            let old = std::mem::take(&mut state.types.get_mut(type_id).expect("checked above").capabilities);
            let kept: std::collections::HashSet<&str> = defs.iter().map(|d| &*d.name).collect();
            for name in old.iter().filter(|n| !kept.contains(&***n)) {
                state.disabled.remove(name);
            }
            for name in &old {
                state.capabilities.remove(name);
            }
            let mut names = Vec::with_capacity(defs.len());
            for d in defs {
                names.push(d.name.clone());
                state.capabilities.insert(d.name.clone(), Arc::new(d));
            }
            state.types.get_mut(type_id).expect("checked above").capabilities = names;
            state.touch(type_id)
        };
        self.inner.publish(version);
        Ok(())
    }

    /// Checks that every type and capability the registry's hooks name is defined, and that the
    /// registry provides the state every [`State<T>`](crate::State) extractor takes — what every
    /// mount checks first (a mount also checks its instance's state against the
    /// [`InstanceState<S>`](crate::InstanceState) extractors of the type). Call it once the types
    /// are defined to find a misspelled name at start-up, before anything is mounted.
    ///
    /// It also checks that every type declared in [`RegistryConfig::late_types`] is defined
    /// (mounts do not: they skip the names under a declared type until its definition checks
    /// them). Call it again at the end of start-up, once the late types are defined: a declared
    /// type that is still missing is an `INVALID_DEFINITION` at its name, whose problem says which
    /// hooks name it and the closest defined type.
    ///
    /// An unknown name is an `INVALID_DEFINITION` at that name, whose problem names the closest
    /// defined one:
    ///
    /// ```
    /// use agent_surface_core::DefinitionErrorCode;
    /// use agent_surface_policy::{Policies, RequireRole};
    /// use agent_surface_registry::{Ctx, Registry, RegistryConfig};
    /// use std::sync::Arc;
    ///
    /// let policies = Policies::new().for_capability("ticket.create", RequireRole::new("agent"));
    /// let registry = Registry::new(RegistryConfig { authority: Some(Arc::new(policies)), ..Default::default() });
    /// registry.define("tickets", |t| {
    ///     t.capability("create", "Open a ticket.")
    ///         .raw_handler(serde_json::json!({"type": "object"}), None, |_: Ctx, v| async move { Ok(v) })
    /// })?;
    /// let err = registry.check_wiring().unwrap_err();
    /// assert_eq!(err.code(), DefinitionErrorCode::InvalidDefinition);
    /// assert_eq!(err.location(), "ticket.create");
    /// assert!(err.problem().ends_with("did you mean `tickets.create`?"), "{}", err.problem());
    /// assert!(registry.mount("tickets", "main").is_err(), "nothing is mounted while the wiring is wrong");
    /// # Ok::<_, agent_surface_core::DefinitionError>(())
    /// ```
    pub fn check_wiring(&self) -> Result<(), DefinitionError> {
        self.check_assembly()?;
        let state = self.inner.read();
        self.inner.wiring.check_late(&|t| state.types.contains_key(t), state.types.keys().map(|t| &**t))
    }

    /// What every mount checks first: [`Registry::check_wiring`] but for the types declared late
    /// that are not defined yet.
    fn check_assembly(&self) -> Result<(), DefinitionError> {
        let shared = self.inner.shared();
        let state = self.inner.read();
        self.inner.wiring.check_all(
            &|t| state.types.contains_key(t),
            &|c| state.capabilities.contains_key(c),
            state.types.keys().map(|t| &**t),
            state.capabilities.keys().map(|c| &**c),
        )?;
        let check = |def: &&Arc<crate::define::CapabilityDef>| {
            crate::wiring::check_requirements(&def.name, &def.requirements, &shared, None)
        };
        if state.capabilities.values().all(|def| check(&def).is_ok()) {
            return Ok(());
        }
        // Report the first failure in name order, whatever the map's order.
        let mut defs: Vec<_> = state.capabilities.values().collect();
        defs.sort_by(|a, b| a.name.cmp(&b.name));
        defs.iter().try_for_each(check)
    }

    /// Mounts an instance of `type_id` with no state; see [`Registry::mount_with`].
    #[must_use = "dropping a Mount unmounts the instance at once; bind it (`let _mounted = ...`) for as long as it should stay callable"]
    pub fn mount(&self, type_id: &str, instance_id: &str) -> Result<Mount, DefinitionError> {
        self.mount_with(type_id, instance_id, Instance::new())
    }

    /// Mounts a live instance of a defined type and returns its handle; dropping the handle (or
    /// [`Mount::unmount`]) unmounts it and leaves a tombstone.
    ///
    /// A duplicate `(type, instanceId)` follows [`RegistryConfig::duplicate_instance`]: under
    /// `Reject` the result is a dead handle ([`Mount::is_live`] is false) and an operator event,
    /// never an error or a panic. An undefined type or an invalid instance id is a programmer
    /// error (`INVALID_DEFINITION` / `INVALID_ID`), and so is a hook that names a type or a
    /// capability that is not defined ([`Registry::check_wiring`]; names under a type declared in
    /// [`RegistryConfig::late_types`] wait for its definition): nothing is served while the
    /// wiring is wrong.
    #[must_use = "dropping a Mount unmounts the instance at once; bind it (`let _mounted = ...`) for as long as it should stay callable"]
    pub fn mount_with(&self, type_id: &str, instance_id: &str, instance: Instance) -> Result<Mount, DefinitionError> {
        id::check_instance_id(type_id, instance_id)?;
        self.check_assembly()?;
        {
            let shared = self.inner.shared();
            let state = self.inner.read();
            let names = state.types.get(type_id).map(|t| t.capabilities.as_slice()).unwrap_or_default();
            let target = Some((instance_id, instance.state.as_deref()));
            for def in names.iter().filter_map(|name| state.capabilities.get(name)) {
                crate::wiring::check_requirements(&def.name, &def.requirements, &shared, target)?;
            }
        }
        let weak = Arc::downgrade(&self.inner);
        let dead = |reason: MountRejection| Mount {
            registry: weak.clone(),
            registration_id: None,
            type_id: Arc::from(type_id),
            instance_id: Arc::from(instance_id),
            rejection: Some(reason),
        };
        if self.inner.disposed.is_cancelled() {
            return Ok(dead(MountRejection::Disposed));
        }
        let now = self.inner.config.clock.now();
        let n = self.inner.next_registration.fetch_add(1, Ordering::Relaxed);
        let registration_id: Arc<str> = Arc::from(format!("{}.r{n}", &self.inner.surface_id[2..10]));
        let version = {
            let mut state = self.inner.write();
            let Some((type_key, ty)) = state.types.get_key_value(type_id) else {
                return Err(DefinitionError::new(
                    Code::InvalidDefinition,
                    type_id,
                    "cannot mount an instance of a type that is not defined",
                ));
            };
            let type_key = type_key.clone();
            let existing = ty.instances.get(instance_id).cloned();
            if let Some(old) = existing {
                match self.inner.config.duplicate_instance {
                    DuplicateInstance::Reject => {
                        tracing::warn!(
                            target: "agent_surface::registry",
                            type_id, instance_id, live_registration_id = %old.registration_id,
                            "mount rejected: this (type, instanceId) is already live"
                        );
                        return Ok(dead(MountRejection::Duplicate));
                    }
                    DuplicateInstance::Replace => {
                        state.registrations.remove(&old.registration_id);
                        state.tombstones.insert(
                            Tombstone {
                                type_id: old.type_id.clone(),
                                instance_id: old.instance_id.clone(),
                                registration_id: old.registration_id.clone(),
                                created_at: now,
                                expires_at: now.saturating_add(self.inner.config.tombstone_ttl),
                                replaced_by: Some(registration_id.clone()),
                            },
                            self.inner.config.max_tombstones,
                            now,
                        );
                        old.unmounted.cancel();
                        tracing::info!(
                            target: "agent_surface::registry",
                            type_id, instance_id, old = %old.registration_id, new = %registration_id,
                            "registration replaced"
                        );
                    }
                }
            }
            let reg = Arc::new(Registration {
                type_id: type_key.clone(),
                instance_id: Arc::from(instance_id),
                registration_id: registration_id.clone(),
                description: instance.description,
                context: instance.context,
                state: instance.state,
                unmounted: CancellationToken::new(),
            });
            state.registrations.insert(registration_id.clone(), reg.clone());
            if let Some(ty) = state.types.get_mut(&type_key) {
                ty.instances.insert(reg.instance_id.clone(), reg);
            }
            state.touch(type_id)
        };
        self.inner.publish(version);
        Ok(Mount {
            registry: weak,
            registration_id: Some(registration_id),
            type_id: Arc::from(type_id),
            instance_id: Arc::from(instance_id),
            rejection: None,
        })
    }

    /// Whether `capability` is declared long-running (false for an unknown name). Adapters ask
    /// before a call, to decide whether it may become a task.
    pub fn is_long_running(&self, capability: &str) -> bool {
        self.inner.read().capabilities.get(capability).is_some_and(|def| def.long_running)
    }

    /// Disables a capability with a reason the agent sees (`CAPABILITY_NOT_AVAILABLE {reason}`
    /// and `unavailableReason` in discovery). Returns false for an unknown capability.
    pub fn disable(&self, capability: &str, reason: impl Into<SafeText>) -> bool {
        self.set_availability(capability, Some(reason.into()))
    }

    /// Enables a disabled capability. Returns false for an unknown capability.
    pub fn enable(&self, capability: &str) -> bool {
        self.set_availability(capability, None)
    }

    fn set_availability(&self, capability: &str, reason: Option<SafeText>) -> bool {
        let version = {
            let mut state = self.inner.write();
            let Some((name, def)) = state.capabilities.get_key_value(capability) else { return false };
            let (name, type_id) = (name.clone(), def.type_id.clone());
            match reason {
                Some(r) => {
                    self.inner.disables.fetch_add(1, std::sync::atomic::Ordering::Release);
                    state.disabled.insert(name, r)
                }
                None => state.disabled.remove(&name),
            };
            state.touch(&type_id)
        };
        self.inner.publish(version);
        true
    }

    /// Sets the store gauges of [`crate::telemetry`] from what the idempotency store and the
    /// confirmation gate's store report (the memory stores do; a shared store does not): call it
    /// just before the metrics are rendered, e.g. in the `/metrics` handler.
    pub fn record_store_usage(&self) {
        let config = &self.inner.config;
        let confirmations = config.confirmation.as_ref().and_then(|gate| gate.usage(config.clock.now()));
        crate::telemetry::store_usage(config.idempotency.usage(), confirmations);
    }

    /// Disposes the registry: calls in flight end with `CANCELLED`, new calls are `CANCELLED`,
    /// new mounts get dead handles.
    pub fn dispose(&self) {
        self.inner.disposed.cancel();
    }

    /// Whether [`Registry::dispose`] was called.
    pub fn is_disposed(&self) -> bool {
        self.inner.disposed.is_cancelled()
    }

    /// Completes once [`Registry::dispose`] was called: an adapter that waits on its own behalf
    /// for a call (for a person's answer, say) stops then, as the calls in flight do.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use agent_surface_registry::{Registry, RegistryConfig};
    /// let registry = Registry::new(RegistryConfig::default());
    /// registry.dispose();
    /// registry.disposed().await;
    /// # });
    /// ```
    pub async fn disposed(&self) {
        self.inner.disposed.cancelled().await;
    }

    /// The number of tombstones currently remembered.
    pub fn tombstone_count(&self) -> usize {
        let now = self.inner.config.clock.now();
        let mut state = self.inner.write();
        state.tombstones.sweep(now);
        state.tombstones.len()
    }

    /// The number of defined capabilities.
    pub fn capability_count(&self) -> usize {
        self.inner.read().capabilities.len()
    }
}

/// Options of a mounted instance.
#[derive(Default)]
pub struct Instance {
    state: Option<Arc<dyn Any + Send + Sync>>,
    description: Option<String>,
    context: Option<String>,
}

impl Instance {
    /// An instance with no state or description.
    pub fn new() -> Instance {
        Instance::default()
    }

    /// The instance's state, available to handlers as `ctx.instance::<S>()` and to bindings.
    pub fn state<S: Any + Send + Sync>(mut self, state: S) -> Instance {
        self.state = Some(Arc::new(state));
        self
    }

    /// A short description, listed in discovery and in `AMBIGUOUS_INSTANCE`: agent-facing text,
    /// so normalized as every author text is (`SafeText`: control and invisible characters
    /// dropped, whitespace collapsed, at most 200 characters).
    pub fn description(mut self, description: impl Into<String>) -> Instance {
        let description = SafeText::trusted(description);
        self.description = (!description.is_empty()).then(|| description.as_str().to_string());
        self
    }

    /// A short context line for procedure references, listed in `AMBIGUOUS_INSTANCE`; normalized
    /// as [`Instance::description`] is.
    pub fn context(mut self, context: impl Into<String>) -> Instance {
        let context = SafeText::trusted(context);
        self.context = (!context.is_empty()).then(|| context.as_str().to_string());
        self
    }
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("has_state", &self.state.is_some())
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
}

/// Why a mount produced a dead handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MountRejection {
    /// The `(type, instanceId)` was already live and the rule is `Reject`.
    Duplicate,
    /// The registry was disposed.
    Disposed,
}

/// The handle of a mounted instance. Dropping it unmounts the instance (and leaves a
/// tombstone): keep it for as long as the instance should be callable — `let _ =
/// registry.mount(..)` unmounts at once, `let _mounted = ..` keeps it to the end of the scope.
#[must_use = "dropping a Mount unmounts the instance at once; bind it (`let _mounted = ...`) for as long as it should stay callable"]
pub struct Mount {
    registry: Weak<Inner>,
    registration_id: Option<Arc<str>>,
    type_id: Arc<str>,
    instance_id: Arc<str>,
    rejection: Option<MountRejection>,
}

impl Mount {
    /// Whether this handle's registration is live (not rejected, unmounted or replaced).
    pub fn is_live(&self) -> bool {
        match (&self.registration_id, self.registry.upgrade()) {
            (Some(id), Some(inner)) => inner.read().registrations.contains_key(id),
            _ => false,
        }
    }

    /// Why the mount was rejected, for a dead handle.
    pub fn rejection(&self) -> Option<MountRejection> {
        self.rejection
    }

    /// The registration id (`None` for a rejected mount).
    pub fn registration_id(&self) -> Option<&str> {
        self.registration_id.as_deref()
    }

    /// The instance id.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The capability type.
    pub fn type_id(&self) -> &str {
        &self.type_id
    }

    /// Unmounts now (the same as dropping the handle).
    pub fn unmount(self) {
        drop(self);
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let (Some(id), Some(inner)) = (self.registration_id.take(), self.registry.upgrade()) {
            inner.unmount(&id);
        }
    }
}

impl std::fmt::Debug for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mount")
            .field("type_id", &self.type_id)
            .field("instance_id", &self.instance_id)
            .field("registration_id", &self.registration_id)
            .field("rejection", &self.rejection)
            .finish()
    }
}

/// A surface id: `s-` and 32 hex digits, 128 bits nobody can guess (unique per registry with
/// overwhelming probability).
fn new_surface_id() -> String {
    agent_surface_core::id::random_id("s-")
}

/// What [`Registry::wiring_warnings`] reports for `config`.
fn wiring_warnings(config: &RegistryConfig) -> Vec<crate::WiringWarning> {
    let gate = config.confirmation.as_ref();
    let clocks = [
        ("authority policy", config.authority.as_ref().and_then(|p| p.clock())),
        ("rate limiter", config.rate_limiter.as_ref().and_then(|l| l.clock())),
        ("confirmation engine", gate.and_then(|g| g.clock())),
    ];
    crate::wiring::report(&crate::wiring::Parts {
        idempotency: config.idempotency.reach(),
        rates: config.rate_limiter.as_ref().map(|l| l.reach()),
        confirmations: gate.and_then(|g| g.reach()),
        clock: config.clock.clone(),
        clocks: clocks.into_iter().filter_map(|(part, clock)| clock.map(|c| (part, c))).collect(),
        audit: config.audit.as_ref().map(|a| a.sink.clone()),
        // Only a gate that keeps confirmations (and says where) writes their events.
        gate_audit: gate.filter(|g| g.reach().is_some()).map(|g| g.audit_sink()),
        // Every crate of a binary is built with the profile's one panic strategy.
        aborts: cfg!(panic = "abort"),
    })
}
