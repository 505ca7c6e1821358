//! [`ServiceBuilder`]: one place to wire a service — the clock, the stores, the audit sink, the
//! approval base URL, the authority policies and the rate budgets are given once, and the
//! registry, the confirmation engine and the rate limiter are built from them, consistent by
//! construction (one clock, one backend, one audit trail; `Registry::wiring_warnings` is empty
//! in a binary that unwinds on a panic, as Cargo builds by default).
//!
//! Hand-wiring [`RegistryConfig`] and `ConfirmationConfig` stays possible; this is the short
//! path the guide shows, and the safe one.

use std::sync::Arc;

use agent_surface_policy::{
    AuditConfig, AuditSink, AuthorityPolicy, Clock, ConfirmationConfig, ConfirmationEngine, Policies, RateBudgets,
    Stores, SystemClock, TaskStore,
};

use crate::{Registry, RegistryConfig};

/// Builds a [`Service`]: give each part once; every other setting keeps its default (or the
/// one of [`registry`](Self::registry) / [`confirmations`](Self::confirmations)).
///
/// ```
/// use std::collections::HashMap;
/// use std::num::NonZeroU32;
/// use agent_surface_policy::{AllowAll, Policies, Quota, RateBudgets, RequireIdentity, Scope, Stores};
/// use agent_surface_registry::ServiceBuilder;
///
/// let five = Quota::per_minute(NonZeroU32::new(5).unwrap());
/// let service = ServiceBuilder::new()
///     .stores(Stores::memory()) // or a shared backend's bundle, e.g. RedisStores::bundle()
///     .authority(Policies::default_deny().global(RequireIdentity).for_type("tickets", AllowAll))
///     .rate_budgets(RateBudgets {
///         consumer_quotas: HashMap::from([(Scope::capability("tickets.create"), five)]),
///         ..Default::default()
///     })
///     .public_url("https://tickets.example")
///     .build();
/// assert!(service.registry.wiring_warnings().is_empty());
/// // Agents are sent to the approval inbox under the public URL.
/// let page = service.confirmations.approval_url("c-1");
/// assert_eq!(page.as_deref(), Some("https://tickets.example/inbox/c/c-1"));
/// ```
#[must_use = "a ServiceBuilder does nothing until `build` is called"]
pub struct ServiceBuilder {
    clock: Arc<dyn Clock>,
    stores: Stores,
    audit: Option<AuditConfig>,
    approval_base_url: Option<String>,
    public_url: Option<String>,
    authority: Option<Policies>,
    budgets: Option<RateBudgets>,
    confirmations: ConfirmationConfig,
    registry: RegistryConfig,
}

/// A wired service: the registry to serve, and the parts a host keeps beside it. Cloning it
/// clones handles to the same parts.
#[derive(Clone)]
#[non_exhaustive]
pub struct Service {
    /// The registry every adapter serves.
    pub registry: Registry,
    /// The confirmation engine (the registry's gate): approve and deny through it, give it to the
    /// approval inbox, run its sweeps (the adapters' `serve` helpers do).
    pub confirmations: Arc<ConfirmationEngine>,
    /// Where calls answered as tasks are kept (give it to the MCP adapter).
    pub tasks: Arc<dyn TaskStore>,
    /// The audit sink, when one was given (give it to the approval inbox).
    pub audit: Option<Arc<dyn AuditSink>>,
    /// The stores the service was built on (their [`Reach`](agent_surface_policy::Reach) tells
    /// a server whether replicas share them).
    pub stores: Stores,
    /// Where people reach the service ([`ServiceBuilder::public_url`]), without a trailing `/`.
    pub public_url: Option<String>,
}

impl Default for ServiceBuilder {
    fn default() -> ServiceBuilder {
        ServiceBuilder::new()
    }
}

impl ServiceBuilder {
    /// The system clock, the memory stores, no audit trail, no approval page, no rate budgets,
    /// and an authority policy that refuses every call (`Policies::default_deny()` with no rule):
    /// a service opens what [`authority`](Self::authority) names, never what it forgets to name.
    pub fn new() -> ServiceBuilder {
        ServiceBuilder {
            clock: Arc::new(SystemClock),
            stores: Stores::memory(),
            audit: None,
            approval_base_url: None,
            public_url: None,
            authority: None,
            budgets: None,
            confirmations: ConfirmationConfig::default(),
            registry: RegistryConfig::default(),
        }
    }

    /// The clock of every part (a test's `TestClock`, the system clock in `main`).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> ServiceBuilder {
        self.clock = clock;
        self
    }

    /// Where every part keeps its state ([`Stores::memory`], or a shared backend's bundle).
    pub fn stores(mut self, stores: Stores) -> ServiceBuilder {
        self.stores = stores;
        self
    }

    /// The audit trail of executions and confirmation events, for the registry and the engine
    /// alike.
    pub fn audit(mut self, sink: Arc<dyn AuditSink>) -> ServiceBuilder {
        self.audit = Some(AuditConfig::new(sink));
        self
    }

    /// As [`audit`](Self::audit), strict: a call with an effect runs only once the trail has
    /// recorded that it starts.
    pub fn strict_audit(mut self, sink: Arc<dyn AuditSink>) -> ServiceBuilder {
        self.audit = Some(AuditConfig { strict: true, ..AuditConfig::new(sink) });
        self
    }

    /// Where people approve confirmations (`ConfirmationConfig::approval_base_url`): the agent is
    /// told to send a person there. Defaults to the inbox under [`public_url`](Self::public_url).
    pub fn approval_base_url(mut self, url: impl Into<String>) -> ServiceBuilder {
        self.approval_base_url = Some(url.into());
        self
    }

    /// Where people reach the service, e.g. `https://tickets.example` (the address a browser
    /// uses, behind any proxy). The approval inbox is then at `{url}/inbox/`, so unless
    /// [`approval_base_url`](Self::approval_base_url) says otherwise, agents are sent to
    /// `{url}/inbox/c/{id}` to have a confirmation approved; a server admits the URL's host and
    /// marks its session cookie `Secure` when the URL is `https` (`Serve` refuses to serve the
    /// inbox over plain `http` beyond the loopback, where no browser keeps that cookie). A path in
    /// the URL (`https://example.com/tickets`) stays in those links, while the server answers at
    /// its root (`/mcp`, `/api`): a proxy in front must strip it (`Serve` says so at start), and
    /// `Serve` refuses to serve the inbox under one, whose pages link at the root.
    pub fn public_url(mut self, url: impl Into<String>) -> ServiceBuilder {
        self.public_url = Some(url.into().trim_end_matches('/').to_string());
        self
    }

    /// The authority policies (given the service's clock when built, replacing one given with
    /// `Policies::with_clock`: every engine of a service reads one clock). Without them every
    /// call is refused; start from `Policies::default_deny()` so that a capability no rule names
    /// stays closed.
    pub fn authority(mut self, policies: Policies) -> ServiceBuilder {
        self.authority = Some(policies);
        self
    }

    /// The rate budgets, kept by the stores' rate limiter on the service's clock ("5 creates per
    /// minute per user" is per principal on every transport).
    pub fn rate_budgets(mut self, budgets: RateBudgets) -> ServiceBuilder {
        self.budgets = Some(budgets);
        self
    }

    /// The confirmation engine's other settings (ttl, mode, confirmation policies, quorums, …).
    /// Its clock, store, audit sink and approval base URL are the builder's.
    pub fn confirmations(mut self, config: ConfirmationConfig) -> ServiceBuilder {
        self.confirmations = config;
        self
    }

    /// The registry's other settings (limits, budgets, windows, metrics, …). Its clock,
    /// idempotency store, authority, rate limiter, confirmation gate and audit are the builder's.
    pub fn registry(mut self, config: RegistryConfig) -> ServiceBuilder {
        self.registry = config;
        self
    }

    /// The service: the engine and the limiter on the builder's clock and stores, the registry
    /// over them, one audit sink for both.
    pub fn build(self) -> Service {
        let ServiceBuilder {
            clock,
            stores,
            audit,
            approval_base_url,
            public_url,
            authority,
            budgets,
            confirmations,
            registry,
        } = self;
        let sink = audit.as_ref().map(|a| a.sink.clone());
        let approval_base_url = approval_base_url
            .or(confirmations.approval_base_url.clone())
            .or_else(|| public_url.as_ref().map(|url| format!("{url}/inbox/c/")));
        let engine = Arc::new(ConfirmationEngine::new(ConfirmationConfig {
            clock: clock.clone(),
            store: stores.confirmations.clone(),
            audit: sink.clone(),
            approval_base_url,
            ..confirmations
        }));
        let rate_limiter = budgets.map(|b| stores.rate_limiter(b, clock.clone()));
        // No policy given: nothing is open (a hand-wired `RegistryConfig::authority` still counts).
        let authority: Arc<dyn AuthorityPolicy> = match (authority, registry.authority.clone()) {
            (Some(policies), _) => Arc::new(policies.with_clock(clock.clone())),
            (None, Some(given)) => given,
            (None, None) => Arc::new(Policies::default_deny().with_clock(clock.clone())),
        };
        let registry = Registry::new(RegistryConfig {
            clock,
            idempotency: stores.idempotency.clone(),
            authority: Some(authority),
            rate_limiter: rate_limiter.or(registry.rate_limiter.clone()),
            confirmation: Some(engine.clone()),
            audit,
            ..registry
        });
        Service { registry, confirmations: engine, tasks: stores.tasks.clone(), audit: sink, stores, public_url }
    }
}
