//! [`Serve`]: a [`Service`] on the network (HTTP) or on standard input and output (MCP stdio),
//! with everything a deployment needs started and every setting it cannot do without checked
//! before the first request.

use std::fmt;
use std::io;
#[cfg(feature = "http")]
use std::net::SocketAddr;
#[cfg(feature = "stdio")]
use std::pin::Pin;
use std::sync::Arc;

#[cfg(feature = "inbox")]
use agent_surface_http::inbox::InboxConfig;
#[cfg(feature = "http")]
use agent_surface_http::{HttpConfig, MetricsRenderer};
use agent_surface_mcp::McpConfig;
use agent_surface_mcp::confirm::{ConfirmationResolver, EngineResolver};
#[cfg(feature = "http")]
use agent_surface_mcp::http::McpHttpConfig;
use agent_surface_mcp::mrtr::ApprovalStates;
use agent_surface_mcp::tasks::{TaskConfig, Tasks};
#[cfg(feature = "http")]
use agent_surface_policy::Authenticator;
#[cfg(feature = "stdio")]
use agent_surface_policy::Identity;
use agent_surface_registry::{Periodic, Registry, Service};
#[cfg(feature = "http")]
use agent_surface_server::Drain;
#[cfg(feature = "http")]
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The operator log's target for what `Serve` does.
#[cfg(any(feature = "http", feature = "stdio"))]
const TARGET: &str = "agent_surface::serve";

/// Where the MCP transport, the HTTP binding and the approval inbox are served.
#[cfg(feature = "http")]
const MCP_PATH: &str = "/mcp";
#[cfg(feature = "http")]
const API_PREFIX: &str = "/api";
#[cfg(any(feature = "http", feature = "stdio"))]
const INBOX_PREFIX: &str = "/inbox";

/// Serves a [`Service`]: over HTTP ([`http`](Self::http), [`bind`](Self::bind)) MCP at `/mcp`,
/// the HTTP binding at `/api` and, for the people named by [`approvers`](Self::approvers), the
/// approval inbox at `/inbox`; over standard input and output ([`stdio`](Self::stdio)) MCP for
/// the one person who started the process.
///
/// While it serves:
/// - **one authenticator** ([`authenticator`](Self::authenticator)) signs callers in on every
///   route, so a person's quotas and approvals are theirs whichever route they take;
/// - **approvals are asked** through MCP elicitation where the client offers it — the person at
///   the client approves their own call in person, which counts as an approval (see
///   [`in_person_approval`](Self::in_person_approval), which turns it off) — and relayed to the
///   agent (with the inbox page, under [`ServiceBuilder::public_url`]) where it does not; long
///   calls are answered as MCP tasks kept in the service's task store, and over the HTTP
///   binding as `202 Accepted` tasks in the same store (`Prefer: respond-async`);
/// - **the confirmation sweep** runs on its timer (expired confirmations are swept and recorded);
/// - **a signal drains** (over HTTP): on SIGTERM or Ctrl-C the server stops accepting, lets the
///   calls in flight and the calls answered as tasks finish within the drain deadline
///   (`server::Limits::drain_timeout`), then cancels what is left (`Registry::dispose`); a
///   second signal cancels at once. Over stdio the client ends the session by closing standard
///   input (as MCP asks of it before it signals the process): the calls in flight are answered
///   first (`rmcp` waits up to 5 s for them), and the calls answered as tasks get 10 s (the HTTP
///   drain's default) to end and have their ends recorded, then 1 s after the disposal;
/// - **the operator log** (`registry::operator_log`: `RUST_LOG`, text or JSON on standard
///   error, credentials masked) is installed, unless the application installed a `tracing`
///   subscriber of its own first or turned it off ([`operator_log`](Self::operator_log)); the
///   wiring warnings said before anything recorded them (the registry's, the Redis or PostgreSQL
///   stores' at connect, an OAuth resource server's: `policy::wiring`) are said there once (or to
///   the application's subscriber), and on standard error when no subscriber is installed.
///
/// It refuses to start ([`ServeError::Refused`], before it listens) when:
/// - the inbox is served but agents are not told where it is (no approval base URL: give the
///   service [`ServiceBuilder::public_url`]), or there is no authenticator to sign people in, or
///   the approvals are in a store replicas share while the inbox keeps its sign-ins in this
///   process (give the backend's inbox store: `Stores::with_inbox`, which every backend's
///   `bundle()` does);
/// - the confirmations are in a store replicas share, or one that outlives the process (a
///   durable store), no [`state_key`](Self::state_key) is given, and the stores' inbox store,
///   which would keep the key, does not reach as far or does not answer: each replica (each
///   start) would seal its MCP approval rounds with a key of its own, and a round begun on one
///   could not be finished on another, or after a restart (or a state key is shorter than 32
///   bytes, or keys are only [accepted](Self::accept_state_key) and none seals, or
///   `McpConfig::approval_states` and a state key are both given);
/// - [`in_person_approval`](Self::in_person_approval) is off while `McpConfig::confirmations`
///   gives a resolver to record approvals at the client; or [`mcp`](Self::mcp) was given an
///   authenticator, an identity or a task runtime, which are `Serve`'s own;
/// - the registry's wiring check fails (`Registry::check_wiring`: a policy, quota or hook that
///   names a capability type nobody defined);
/// - the service's public URL or its approval base URL is not an absolute `http` or `https` URL
///   (`lb.example` without a scheme would send people to a link no browser opens).
///
/// It warns at start (`WARN` on the operator log) when the approval links point at the inbox
/// under [`ServiceBuilder::public_url`] (their default) but this server does not serve it (no
/// [`approvers`](Self::approvers), or [`stdio`](Self::stdio)): a person sent there would find "no
/// such confirmation" unless another server answers there. Serve the inbox, or give
/// [`ServiceBuilder::approval_base_url`] the address where people do approve. (A warning, not a
/// refusal: the public URL also names the host agents reach, and another `Serve` of the same
/// service, or a proxy, may serve the inbox.)
///
/// [`ServiceBuilder::public_url`]: agent_surface_registry::ServiceBuilder::public_url
/// [`ServiceBuilder::approval_base_url`]: agent_surface_registry::ServiceBuilder::approval_base_url
#[must_use = "Serve does nothing until `http`, `bind` or `stdio` is awaited"]
pub struct Serve {
    service: Service,
    #[cfg(feature = "http")]
    authenticator: Option<Arc<dyn Authenticator>>,
    #[cfg(feature = "inbox")]
    approver_role: Option<String>,
    state_key: Option<Vec<u8>>,
    accepted_state_keys: Vec<Vec<u8>>,
    in_person_approval: bool,
    mcp: McpConfig,
    #[cfg(feature = "http")]
    mcp_http: McpHttpConfig,
    #[cfg(feature = "http")]
    api: HttpConfig,
    #[cfg(feature = "http")]
    routes: Vec<axum::Router>,
    mcp_fallback: Option<Arc<dyn Fallback>>,
    #[cfg(feature = "operator-log")]
    operator_log: bool,
    #[cfg(feature = "http")]
    on_listening: Option<Box<dyn FnOnce(SocketAddr) + Send>>,
}

/// The application's own MCP handler, as [`Serve::mcp_fallback`] was given it: builds the MCP
/// routes or serves stdio with it beside the tools.
trait Fallback: Send + Sync {
    #[cfg(feature = "http")]
    fn router(
        &self,
        registry: Registry,
        mcp: McpConfig,
        http: &McpHttpConfig,
        streams: CancellationToken,
    ) -> axum::Router;
    #[cfg(feature = "stdio")]
    fn stdio(
        &self,
        registry: Registry,
        mcp: McpConfig,
    ) -> Pin<Box<dyn Future<Output = Result<(), agent_surface_mcp::ServeError>> + Send>>;
}

/// A [`Fallback`] from a function that builds the handler.
struct NewHandler<F>(Arc<F>);

impl<H, F> Fallback for NewHandler<F>
where
    H: rmcp::ServerHandler,
    F: Fn() -> H + Send + Sync + 'static,
{
    #[cfg(feature = "http")]
    fn router(
        &self,
        registry: Registry,
        mcp: McpConfig,
        http: &McpHttpConfig,
        streams: CancellationToken,
    ) -> axum::Router {
        let new = self.0.clone();
        agent_surface_mcp::http::router_with_fallback(registry, mcp, move || new(), http, streams)
    }

    #[cfg(feature = "stdio")]
    fn stdio(
        &self,
        registry: Registry,
        mcp: McpConfig,
    ) -> Pin<Box<dyn Future<Output = Result<(), agent_surface_mcp::ServeError>> + Send>> {
        Box::pin(agent_surface_mcp::serve_stdio_with(registry, mcp, (self.0)()))
    }
}

/// Over stdio, how long the calls answered as tasks may run on once the session ended (the
/// HTTP drain's `Limits::drain_timeout`, of the same default).
#[cfg(feature = "stdio")]
const STDIO_DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Over stdio, how long the tasks the disposal ended get to record their ends (the HTTP drain's
/// `Limits::cancel_grace`).
#[cfg(feature = "stdio")]
const STDIO_CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Why [`Serve`] did not serve.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// A setting the service cannot be served safely without is missing or inconsistent; the
    /// message names the fix. Nothing was started.
    Refused(String),
    /// The address could not be bound, or the server failed.
    Io(io::Error),
    /// The MCP stdio session could not start or failed.
    Mcp(String),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Refused(why) => write!(f, "not served: {why}"),
            ServeError::Io(e) => write!(f, "serving failed: {e}"),
            ServeError::Mcp(e) => write!(f, "serving MCP failed: {e}"),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for ServeError {
    fn from(e: io::Error) -> ServeError {
        ServeError::Io(e)
    }
}

impl Serve {
    /// Serves `service` with the defaults: no authenticator (every caller anonymous), no inbox,
    /// the adapters' default settings.
    pub fn new(service: Service) -> Serve {
        Serve {
            service,
            #[cfg(feature = "http")]
            authenticator: None,
            #[cfg(feature = "inbox")]
            approver_role: None,
            state_key: None,
            accepted_state_keys: Vec::new(),
            in_person_approval: true,
            mcp: McpConfig::default(),
            #[cfg(feature = "http")]
            mcp_http: McpHttpConfig::default(),
            #[cfg(feature = "http")]
            api: HttpConfig::default(),
            #[cfg(feature = "http")]
            routes: Vec::new(),
            mcp_fallback: None,
            #[cfg(feature = "operator-log")]
            operator_log: true,
            #[cfg(feature = "http")]
            on_listening: None,
        }
    }

    /// Who is calling, from each request's headers, on every route: bearer tokens
    /// (`policy::BearerTokens`), an OAuth resource server (`oauth::ResourceServer`), or your own.
    #[cfg(feature = "http")]
    pub fn authenticator(mut self, authenticator: Arc<dyn Authenticator>) -> Serve {
        self.authenticator = Some(authenticator);
        self
    }

    /// Serves the approval inbox at `/inbox` to the signed-in people whose identity has `role`:
    /// they see the pending confirmations they may decide, approve or deny them, and the recent
    /// decisions (from the service's audit sink).
    #[cfg(feature = "inbox")]
    pub fn approvers(mut self, role: impl Into<String>) -> Serve {
        self.approver_role = Some(role.into());
        self
    }

    /// The key that seals MCP approval rounds (`requestState`), at least 32 bytes of secret
    /// randomness, the same on every replica (from your secret store, never from the source).
    /// Without it, a service whose confirmations are in a shared or durable store seals with a key
    /// its stores keep (the inbox store's, `Stores::with_inbox`; each backend's `bundle()`
    /// includes it): drawn by the first process to start, read by every replica and restart, and
    /// readable by whoever reads the store, who could then forge a client's sealed state — but
    /// a state names its caller, a signed-in caller must still sign in as themselves, and an
    /// answer in person counts only for the caller's own confirmation. Give one here to keep it in
    /// your secret store instead (do so where anonymous callers may run actions that need
    /// approval: the store holds their keys too), to every replica or to none: replicas that
    /// seal with different keys cannot open each other's rounds (`-32602` to the retry). A
    /// store that loses its data (a Redis without persistence, restarted) loses the kept key with
    /// the approvals: restart every replica then, so that all read the new one.
    /// A service whose confirmations live in the process seals with a key drawn at start. To change
    /// a given key without failing the rounds in flight, see
    /// [`accept_state_key`](Self::accept_state_key).
    pub fn state_key(mut self, key: impl Into<Vec<u8>>) -> Serve {
        self.state_key = Some(key.into());
        self
    }

    /// Another key that MCP approval rounds in flight may be sealed with: their states are opened
    /// with it too, while new ones are sealed with the [`state_key`](Self::state_key) only (at
    /// least 32 bytes; repeat the call for several). This is how the state key is rotated
    /// without failing the rounds in flight, across replicas, in three steps: give every
    /// replica the new key here (beside its old `state_key`); then make the new key the
    /// `state_key` and the old one accepted here; then, once the rounds sealed with the old one
    /// are over (a round lives as long as its confirmation, plus `mcp::mrtr::STATE_TTL`), drop
    /// it. A key is known by a digest of itself, so the replicas need agree on nothing else.
    pub fn accept_state_key(mut self, key: impl Into<Vec<u8>>) -> Serve {
        self.accepted_state_keys.push(key.into());
        self
    }

    /// The MCP adapter's other settings (server name, instructions, list TTL, elicitation
    /// timeout, …). Its authenticator, identity and tasks are `Serve`'s: an authenticator,
    /// identity or task runtime given here is refused at start ([`ServeError::Refused`]), since it
    /// would be dropped. Its `approval_states`, when given (not the default
    /// `ApprovalStates::ephemeral()`), seal the MCP approval rounds as
    /// [`state_key`](Self::state_key) would, with the codec's own key ids (give one of the two). Its
    /// `confirmations` (who records an approval given at the client) are the service engine's
    /// in-person approvals unless you give a resolver of your own (over `Service::confirmations`);
    /// `None` there is the field's default, so it means "not given", never "off": to turn
    /// approval at the client off, use [`in_person_approval`](Self::in_person_approval).
    pub fn mcp(mut self, config: McpConfig) -> Serve {
        self.mcp = config;
        self
    }

    /// Whether the person at an MCP client may approve their own call in person (default `true`).
    ///
    /// On, a client that declares form elicitation (and cannot open links, or has no approval
    /// page to be sent to: URL mode is preferred) shows the person an approval prompt with the
    /// confirmation's summary (over the legacy era during the call, over the modern era as an
    /// input-required round), and their *accept* is recorded in the service's engine as an
    /// in-person approval (`ConfirmationEngine::approve_in_person`, approver
    /// `in-person:mcp-elicitation`); *decline* is their denial. That is the requester approving
    /// their own call, which the engine refuses everywhere else, and it counts: it is the one
    /// approval a confirmation needs when its quorum asks for no role and names no approvers, and
    /// at most one approval of a larger quorum (filling a slot that asks for no role). It does not
    /// count where the quorum asks every approver for a role (`Quorum::with_role`) or names its
    /// approvers (`Quorum::with_approver`, unless it names `in-person:mcp-elicitation`). It is
    /// exactly as trustworthy as the client's prompt: the model cannot answer it, but a client
    /// that answers it without showing it to the person (an autonomous agent runner, a harness
    /// that accepts everything) approves in their name.
    ///
    /// Off (`false`), nobody is asked at the client to approve: `CONFIRMATION_REQUIRED` goes to
    /// the agent (two-phase), or, where the client offers URL-mode elicitation and the service has
    /// an approval page, the person is sent to that page, where someone other than the requester
    /// approves. Turn it off when every approval must be someone else's.
    ///
    /// (`McpConfig::confirmations: None` cannot say "off": `None` is that field's default, so
    /// [`mcp`](Self::mcp) reads it as "not given".)
    pub fn in_person_approval(mut self, allow: bool) -> Serve {
        self.in_person_approval = allow;
        self
    }

    /// Serves the application's own MCP handler beside the tools, on both transports and both
    /// protocol eras: `new_handler` builds one for each MCP session (over HTTP, for each legacy
    /// session and each modern request; over stdio, once), and it answers every method that is
    /// not about tools or tasks — its resources, prompts, completions, … The capabilities
    /// announced are the tools' and the handler's (see `mcp::compose`). Authentication, host
    /// checks and limits are the MCP route's, for its methods too.
    pub fn mcp_fallback<H, F>(mut self, new_handler: F) -> Serve
    where
        H: rmcp::ServerHandler,
        F: Fn() -> H + Send + Sync + 'static,
    {
        self.mcp_fallback = Some(Arc::new(NewHandler(Arc::new(new_handler))));
        self
    }

    /// The MCP HTTP transport's settings; its [`limits`](McpHttpConfig::limits) are the server's
    /// (connection caps, header timeout, drain). The path is `/mcp`; the service's public host
    /// is added to the allowed hosts.
    #[cfg(feature = "http")]
    pub fn mcp_http(mut self, config: McpHttpConfig) -> Serve {
        self.mcp_http = config;
        self
    }

    /// The HTTP binding's other settings (body limits, the consumer header, …), served under
    /// `/api`. Its authenticator and tasks are `Serve`'s (the MCP adapter's task runtime, so a
    /// task started over either is read over the other), its prefix is `/api` and its connection
    /// limits are the listener's ([`mcp_http`](Self::mcp_http)): an `HttpConfig` that sets any of
    /// them is refused at start rather than dropped. The service's public host is added to the
    /// allowed hosts.
    #[cfg(feature = "http")]
    pub fn api(mut self, config: HttpConfig) -> Serve {
        // A metrics page given before (Serve::metrics) stays, unless this one names its own.
        let metrics = config.metrics.clone().or_else(|| self.api.metrics.take());
        self.api = HttpConfig { metrics, ..config };
        self
    }

    /// Serves `render` (for example a Prometheus recorder's `render`) at `GET /api/metrics`, with
    /// the stores' usage recorded just before each scrape. The calls themselves are recorded only
    /// when the registry was built with `RegistryConfig::metrics` on (through
    /// `ServiceBuilder::registry`); without it the page has the stores' gauges alone. The route is
    /// behind the host check, not the authenticator: serve it where only your scrapers reach it.
    #[cfg(feature = "http")]
    pub fn metrics(mut self, render: impl Fn() -> String + Send + Sync + 'static) -> Serve {
        let registry = self.service.registry.clone();
        let render: MetricsRenderer = Arc::new(move || {
            registry.record_store_usage();
            render()
        });
        self.api.metrics = Some(render);
        self
    }

    /// More routes beside `Serve`'s own (an OAuth resource server's metadata, a health check):
    /// merged into the same router, under the same connection limits and drain.
    #[cfg(feature = "http")]
    pub fn merge(mut self, routes: axum::Router) -> Serve {
        self.routes.push(routes);
        self
    }

    /// Whether to install the operator log when no `tracing` subscriber is installed (default
    /// `true`).
    #[cfg(feature = "operator-log")]
    pub fn operator_log(mut self, install: bool) -> Serve {
        self.operator_log = install;
        self
    }

    /// Called with the address once the server listens (the port the system chose for `:0`):
    /// the place to say that the service is ready — print the address, tell a supervisor. Under
    /// [`http`](Self::http) the signal handlers are installed by then, so a SIGTERM sent as soon
    /// as the service says it is ready drains it rather than ending the process.
    #[cfg(feature = "http")]
    pub fn on_listening(mut self, announce: impl FnOnce(SocketAddr) + Send + 'static) -> Serve {
        self.on_listening = Some(Box::new(announce));
        self
    }

    /// Serves over HTTP on `addr` until SIGTERM or Ctrl-C, then drains (see
    /// [`Running::until_signal`]). The signal handlers are installed before it listens.
    #[cfg(feature = "http")]
    pub async fn http(self, addr: impl tokio::net::ToSocketAddrs) -> Result<(), ServeError> {
        let signals = Signals::install();
        self.bind(addr).await?.until(signals).await
    }

    /// Checks the settings, binds `addr` and serves over HTTP in the background; the [`Running`]
    /// server says where it listens and stops when asked. For tests and for applications that
    /// decide themselves when to stop.
    #[cfg(feature = "http")]
    pub async fn bind(self, addr: impl tokio::net::ToSocketAddrs) -> Result<Running, ServeError> {
        self.install_operator_log();
        self.refuse_settings_of_serve()?;
        let mcp = self.mcp_config().await?;
        #[cfg(feature = "inbox")]
        let serving_inbox = self.approver_role.is_some();
        #[cfg(not(feature = "inbox"))]
        let serving_inbox = false;
        if serving_inbox && self.authenticator.is_none() {
            return Err(ServeError::Refused(
                "the approval inbox is served but nobody can sign in to it: give Serve::authenticator".into(),
            ));
        }
        #[cfg(feature = "inbox")]
        if serving_inbox
            && self.service.stores.confirmations.reach().is_shared()
            && !self.service.stores.inbox.reach().is_shared()
        {
            return Err(ServeError::Refused(
                "the approval inbox would keep its sign-ins in this process while the approvals are shared \
                 between replicas: a person signed in on one replica is a stranger to the next. Give the \
                 backend's inbox store (Stores::with_inbox; each backend's bundle() includes it)"
                    .into(),
            ));
        }
        if serving_inbox && self.service.confirmations.config().approval_base_url.is_none() {
            return Err(ServeError::Refused(
                "the approval inbox is served but agents are not told where it is: give \
                 ServiceBuilder::public_url (or ServiceBuilder::approval_base_url)"
                    .into(),
            ));
        }
        // The inbox's pages link at this server's root (`/inbox/…`): under a public path, behind
        // a proxy that strips it or not, its sign-in, forms and stylesheet lead nowhere.
        if let Some(path) = self.service.public_url.as_deref().and_then(public_path).filter(|_| serving_inbox) {
            return Err(ServeError::Refused(format!(
                "ServiceBuilder::public_url has the path {path}, but the approval inbox's pages link at this \
                 server's root (/inbox/…), which a browser under {path} does not reach: serve the service at the \
                 root of its host, or leave the inbox (Serve::approvers) to a server that is"
            )));
        }
        if !serving_inbox {
            warn_of_unserved_approval_links(&self.service, "this server does not serve it");
        }
        self.warn_of_nowhere_to_approve();
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        // The address people reach the inbox at: the public URL, else the approval links'.
        let approvals = self.service.confirmations.config().approval_base_url.clone();
        let people_url = self.service.public_url.clone().or_else(|| approvals.clone());
        // A browser keeps a `Secure` cookie only over HTTPS: plain HTTP is for trying the inbox on
        // a loopback address. Beyond it, every sign-in would be forgotten at once.
        let plain = people_url
            .as_deref()
            .is_none_or(|url| url.split_once("://").is_some_and(|(scheme, _)| scheme.eq_ignore_ascii_case("http")));
        // People who reach it at a loopback name (`http://localhost:8080` mapped into a container
        // bound on 0.0.0.0) are served: browsers keep Secure cookies from a loopback origin.
        let people_at_loopback = people_url.as_deref().is_some_and(names_loopback);
        if serving_inbox && plain && !local.ip().is_loopback() && !people_at_loopback {
            return Err(ServeError::Refused(format!(
                "the approval inbox would be reached over plain http on {local}, beyond the loopback: browsers keep \
                 its sign-in cookies (Secure) only over https, so nobody could stay signed in. Give an https \
                 ServiceBuilder::public_url (TLS ended by a proxy in front), or bind a loopback address to try it"
            )));
        }
        let Serve {
            service,
            authenticator,
            #[cfg(feature = "inbox")]
            approver_role,
            mut mcp_http,
            mut api,
            routes,
            on_listening,
            mcp_fallback,
            ..
        } = self;
        // The hosts people and agents reach the service by: the public URL's, and the approval
        // links' (an approval base URL alone names the inbox's host).
        let public_host: Vec<String> = [service.public_url.as_deref(), approvals.as_deref()]
            .into_iter()
            .flatten()
            .filter_map(web_address_host)
            .collect();
        mcp_http.path = MCP_PATH.to_string();
        mcp_http.allowed_hosts.extend(public_host.clone());
        api.allowed_hosts.extend(public_host);
        api.authenticator = authenticator.clone();
        // One task runtime for both: a task started over either is read and cancelled over the other.
        api.tasks = mcp.tasks.clone();
        let registry = service.registry.clone();
        let mut drain = Drain::cancelling({
            let registry = registry.clone();
            move || registry.dispose()
        });
        // The calls answered as tasks run on after their requests: the drain waits for them too.
        if let Some(tasks) = api.tasks.clone() {
            drain = drain.waiting_for(move || tasks.idle());
        }
        let mcp_routes = match &mcp_fallback {
            Some(fallback) => fallback.router(registry.clone(), mcp, &mcp_http, drain.streams.clone()),
            None => agent_surface_mcp::http::router(registry.clone(), mcp, &mcp_http, drain.streams.clone()),
        };
        let mut app = mcp_routes.nest(API_PREFIX, agent_surface_http::router(registry.clone(), api.clone()));
        #[cfg(feature = "inbox")]
        if let (Some(role), Some(authenticator)) = (approver_role, authenticator) {
            let inbox = InboxConfig {
                audit: service.audit.clone(),
                prefix: INBOX_PREFIX.to_string(),
                secure_cookie: !(plain && local.ip().is_loopback()),
                allowed_hosts: api.allowed_hosts.clone(),
                // The backend's: replicas on a shared backend serve each other's sessions.
                store: service.stores.inbox.clone(),
                ..InboxConfig::new(service.confirmations.clone(), authenticator, role)
            };
            app = app.merge(agent_surface_http::inbox::router(inbox));
        }
        for routes in routes {
            app = app.merge(routes);
        }
        let stop = CancellationToken::new();
        let periodic = Periodic::start(&registry, &stop);
        let limits = mcp_http.limits.clone();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let served = agent_surface_server::serve_with(listener, app, limits, stop, drain).await;
                periodic.stop().await;
                served
            }
        });
        let inbox = if serving_inbox { format!(", the approval inbox at {INBOX_PREFIX}") } else { String::new() };
        tracing::info!(target: TARGET, %local, "serving MCP at {MCP_PATH}, the HTTP binding at {API_PREFIX}{inbox}");
        report_stores(&service, local, serving_inbox);
        report_public_path(&service);
        if let Some(announce) = on_listening {
            announce(local);
        }
        Ok(Running { local, stop, task: Some(task), service })
    }

    /// Serves MCP on this process's standard input and output until the client closes them, as
    /// `identity` (the person who started the process; `None`: anonymous). The operator log goes
    /// to standard error, never to standard output.
    #[cfg(feature = "stdio")]
    pub async fn stdio(mut self, identity: Option<Identity>) -> Result<(), ServeError> {
        self.install_operator_log();
        self.refuse_settings_of_serve()?;
        self.refuse_http_settings_over_stdio()?;
        self.mcp.identity = identity;
        let config = self.mcp_config().await?;
        let config_tasks = config.tasks.clone();
        warn_of_unserved_approval_links(&self.service, "Serve::stdio serves no inbox");
        self.warn_of_nowhere_to_approve();
        let registry = self.service.registry.clone();
        let stop = CancellationToken::new();
        let periodic = Periodic::start(&registry, &stop);
        let served = match &self.mcp_fallback {
            Some(fallback) => fallback.stdio(registry.clone(), config).await,
            None => agent_surface_mcp::serve_stdio(registry.clone(), config).await,
        };
        // The calls answered as tasks run on after the session: they get the drain's deadline to
        // end and record their ends (a durable task store keeps them for the principal's next
        // session), then the rest are cancelled, and their ends recorded within the grace.
        if let Some(tasks) = &config_tasks
            && tokio::time::timeout(STDIO_DRAIN, tasks.idle()).await.is_err()
        {
            tracing::warn!(target: TARGET, "drain over: cancelling the tasks left");
            registry.dispose();
            if tokio::time::timeout(STDIO_CANCEL_GRACE, tasks.idle()).await.is_err() {
                tracing::warn!(target: TARGET, "tasks whose ends were not recorded within the grace");
            }
        }
        periodic.stop().await;
        registry.dispose();
        served.map_err(|e| ServeError::Mcp(e.to_string()))
    }

    /// The MCP adapter's configuration, or why it cannot be served.
    async fn mcp_config(&self) -> Result<McpConfig, ServeError> {
        let service = &self.service;
        service.registry.check_wiring().map_err(|e| ServeError::Refused(e.to_string()))?;
        // An address agents are told to send a person to must be one a browser opens.
        let approvals = service.confirmations.config().approval_base_url.as_deref();
        for (what, url) in
            [("ServiceBuilder::public_url", service.public_url.as_deref()), ("the approval base URL", approvals)]
        {
            // The URL is named with its credentials masked: a refusal is printed where the
            // operator log's masking does not reach (an application's `main` returning it).
            if let Some(url) = url.filter(|url| web_address_host(url).is_none()).map(agent_surface_policy::redacted) {
                return Err(ServeError::Refused(format!(
                    "{what} `{url}` is not an absolute http or https URL, so agents would send people to a link no \
                     browser opens: write it as `https://host` (with a path if the service is under one)"
                )));
            }
            if let Some(url) = url.filter(|url| names_port_zero(url)).map(agent_surface_policy::redacted) {
                return Err(ServeError::Refused(format!(
                    "{what} `{url}` names port 0, so agents would send people to a port nothing listens on (the \
                     system picks a free port only when the server binds, after the service is built): give the \
                     port the service is reached at, and bind that port (e.g. `127.0.0.1:8787` to try the inbox)"
                )));
            }
        }
        // Shared by replicas, or kept across a restart: a round sealed by one process must open in another.
        let reach = service.stores.confirmations.reach();
        let given_states = !self.mcp.approval_states.is_ephemeral();
        if given_states && (self.state_key.is_some() || !self.accepted_state_keys.is_empty()) {
            return Err(ServeError::Refused(
                "McpConfig::approval_states and Serve::state_key both give the key that seals MCP approval rounds: \
                 give one of the two"
                    .into(),
            ));
        }
        let approval_states = match (&self.state_key, reach.outlives_the_process()) {
            // The application's own states, given through `Serve::mcp`.
            _ if given_states => self.mcp.approval_states.clone(),
            (Some(key), _) => ApprovalStates::new(state_codec(key, &self.accepted_state_keys)?),
            (None, _) if !self.accepted_state_keys.is_empty() => {
                return Err(ServeError::Refused(
                    "Serve::accept_state_key opens rounds sealed with another key, but none seals new ones: \
                     give Serve::state_key"
                        .into(),
                ));
            }
            (None, true) => ApprovalStates::new(state_codec(&kept_state_key(&service.stores, reach).await?, &[])?),
            (None, false) => self.mcp.approval_states.clone(),
        };
        // Approvals at the client: the service engine's in-person approvals, a resolver the
        // application gave, or none.
        let confirmations: Option<Arc<dyn ConfirmationResolver>> =
            match (self.in_person_approval, &self.mcp.confirmations) {
                (true, Some(yours)) => Some(yours.clone()),
                (true, None) => Some(Arc::new(EngineResolver::new(service.confirmations.clone()))),
                (false, None) => None,
                (false, Some(_)) => {
                    return Err(ServeError::Refused(
                        "Serve::in_person_approval(false) turns approval at the MCP client off, but \
                         McpConfig::confirmations gives a resolver to record it: leave one of the two out"
                            .into(),
                    ));
                }
            };
        let tasks = TaskConfig { store: service.tasks.clone(), ..TaskConfig::default() };
        Ok(McpConfig {
            #[cfg(feature = "http")]
            authenticator: self.authenticator.clone(),
            confirmations,
            tasks: Some(Tasks::new(tasks)),
            approval_states,
            ..self.mcp.clone()
        })
    }

    /// Refuses the `McpConfig` settings given to [`mcp`](Self::mcp) that `Serve` sets itself, rather
    /// than drop them without a word: the authenticator ([`authenticator`](Self::authenticator)),
    /// the task runtime (the service's task store) and the identity (the argument of
    /// [`stdio`](Self::stdio); over HTTP it would sign every caller without credentials in as that
    /// person).
    #[cfg(any(feature = "http", feature = "stdio"))]
    fn refuse_settings_of_serve(&self) -> Result<(), ServeError> {
        #[cfg(feature = "http")]
        let authenticator = self.mcp.authenticator.is_some();
        #[cfg(not(feature = "http"))]
        let authenticator = false;
        #[cfg(feature = "http")]
        let api = &self.api;
        #[cfg(feature = "http")]
        let api_given = [
            (api.authenticator.is_some(), "HttpConfig::authenticator is Serve's: give it with Serve::authenticator"),
            (
                api.tasks.is_some(),
                "HttpConfig::tasks is Serve's: it keeps tasks in the service's task store (ServiceBuilder's stores)",
            ),
            (!api.prefix.is_empty(), "HttpConfig::prefix is Serve's: the HTTP binding is served under /api"),
            (
                api.limits != agent_surface_server::Limits::default(),
                "HttpConfig::limits is not Serve's: one listener serves both, under McpHttpConfig::limits \
                 (Serve::mcp_http)",
            ),
        ];
        #[cfg(feature = "http")]
        if let Some((_, why)) = api_given.iter().find(|(set, _)| *set) {
            return Err(ServeError::Refused(format!("a setting given to Serve::api would be dropped: {why}")));
        }
        let given = [
            (authenticator, "McpConfig::authenticator is Serve's: give it with Serve::authenticator"),
            (
                self.mcp.tasks.is_some(),
                "McpConfig::tasks is Serve's: it keeps tasks in the service's task store (ServiceBuilder's stores)",
            ),
            (
                self.mcp.identity.is_some(),
                "McpConfig::identity is Serve's: give the person who started a stdio server to Serve::stdio; over \
                 HTTP callers sign in through Serve::authenticator",
            ),
        ];
        match given.iter().find(|(set, _)| *set) {
            Some((_, why)) => {
                Err(ServeError::Refused(format!("a setting given to Serve::mcp would be dropped: {why}")))
            }
            None => Ok(()),
        }
    }

    /// Refuses, over stdio, the settings only HTTP serves, rather than drop them without a word:
    /// an authenticator (nobody sends a token over stdio: it would make every call anonymous, the
    /// person who started the process dropped) and the approval inbox.
    #[cfg(feature = "stdio")]
    fn refuse_http_settings_over_stdio(&self) -> Result<(), ServeError> {
        #[cfg(feature = "http")]
        if self.authenticator.is_some() {
            return Err(ServeError::Refused(
                "Serve::authenticator signs in HTTP callers by their tokens; over stdio nobody sends one, so every \
                 call would be anonymous: give the person who started the process to Serve::stdio instead"
                    .into(),
            ));
        }
        #[cfg(feature = "inbox")]
        if self.approver_role.is_some() {
            return Err(ServeError::Refused(
                "Serve::approvers serves the approval inbox over HTTP; Serve::stdio serves none: serve the inbox \
                 from an HTTP server of the same service (Serve::http), or leave approvers out"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Reports, at start, a service on which nobody can approve through what `Serve` serves: in-person
    /// approval is off and agents are given no approval page (no approval base URL), so a
    /// confirmation is approved only by the application's own call of `ConfirmationEngine::approve`.
    #[cfg(any(feature = "http", feature = "stdio"))]
    fn warn_of_nowhere_to_approve(&self) {
        if !self.in_person_approval && self.service.confirmations.config().approval_base_url.is_none() {
            tracing::warn!(
                target: TARGET,
                "in-person approval is off and agents are given no approval page: a confirmation can only be \
                 approved by the application's own ConfirmationEngine::approve. Give ServiceBuilder::public_url \
                 and serve the inbox (Serve::approvers), or ServiceBuilder::approval_base_url for a page of yours"
            );
        }
    }

    /// Installs the operator log, unless turned off or another subscriber is installed; without
    /// the `operator-log` feature there is none to install, and the application brings its own.
    /// Then says the wiring warnings nothing recorded when they were said (the guide's order: the
    /// service, its stores and its authenticator are built before `Serve` installs the log), kept
    /// by `agent_surface_policy::wiring`: each once, whichever part said it, to the subscriber
    /// now current or, with none, to standard error.
    fn install_operator_log(&self) {
        use std::io::Write as _;
        #[cfg(feature = "operator-log")]
        if self.operator_log {
            // Refused, changing nothing, when the process has a global subscriber: theirs is kept.
            let _ = agent_surface_registry::operator_log::init();
        }
        // Something records the operator channel here: a subscriber is current (a global one, or
        // this thread's), not merely one that was set once and whose scope has ended.
        let subscriber = tracing::dispatcher::get_default(|d| !d.is::<tracing::subscriber::NoSubscriber>());
        if let Some(notice) = no_operator_log(cfg!(feature = "operator-log"), subscriber) {
            // Standard error: over stdio, standard output is the protocol's.
            let _ = writeln!(std::io::stderr(), "{notice}");
        }
        // To the subscriber, whose filter decides (an operator who keeps only errors has said
        // so); to standard error only when there is none.
        for warning in agent_surface_policy::wiring::take_unrecorded() {
            if subscriber {
                tracing::warn!(target: "agent_surface::wiring", "{warning}");
            } else {
                let _ = writeln!(std::io::stderr(), "agent-surface: {warning}");
            }
        }
    }
}

/// What a service built without the `operator-log` feature says once at start when nothing else
/// records the operator channel either (no `tracing` subscriber installed): handler errors,
/// panics and refusals would go nowhere, silently. `None` when there is a log.
fn no_operator_log(feature: bool, subscriber: bool) -> Option<&'static str> {
    (!feature && !subscriber).then_some(
        "agent-surface: no operator log: handler errors, panics and refusals are not recorded. Turn on \
         the `operator-log` feature of agent-surface (RUST_LOG then filters it), or install a `tracing` \
         subscriber before serving.",
    )
}

/// The name of the key that seals MCP approval rounds when the stores keep it (see
/// [`kept_state_key`]).
const KEPT_STATE_KEY: &str = "mcp-approval-state";

/// The key that seals MCP approval rounds when none is given and the confirmations reach as far as
/// `reach` (across replicas, or across restarts): the one the stores' inbox store keeps under
/// [`KEPT_STATE_KEY`], drawn and stored by whichever process asks first (set-if-absent, as the
/// inbox's form-signing keys). Every replica and every restart then opens the rounds another
/// sealed. Refused when the inbox store does not reach as far as the confirmations, or cannot be
/// read.
async fn kept_state_key(
    stores: &agent_surface_policy::Stores,
    reach: agent_surface_policy::Reach,
) -> Result<[u8; 32], ServeError> {
    let kept = stores.inbox.reach();
    let keeps = if reach.is_shared() { kept.is_shared() } else { kept.outlives_the_process() };
    if !keeps {
        let (where_, what) = if reach.is_shared() {
            ("are shared between replicas", "each replica would seal its MCP approval rounds with a key of its own")
        } else {
            ("outlive the process", "its MCP approval rounds would be sealed with a key a restart loses")
        };
        return Err(ServeError::Refused(format!(
            "the confirmations {where_}, but the inbox store that would keep the key sealing MCP approval rounds \
             does not, so {what}: give the backend's inbox store (Stores::with_inbox; each backend's bundle() \
             includes it), or Serve::state_key (the same on every replica and every start)"
        )));
    }
    let mut candidate = [0u8; 32];
    agent_surface_core::id::fill_random(&mut candidate);
    stores.inbox.mac_key(KEPT_STATE_KEY, candidate).await.map_err(|e| {
        ServeError::Refused(format!(
            "cannot read the key sealing MCP approval rounds from the inbox store ({e}); give Serve::state_key, or \
             start once the store answers"
        ))
    })
}

/// The codec that seals approval rounds with `active` and opens those sealed with `active` or
/// any of `accepted`, each key named by [`key_id`].
fn state_codec(active: &[u8], accepted: &[Vec<u8>]) -> Result<rmcp::model::RequestStateCodec, ServeError> {
    const MIN: usize = rmcp::model::RequestStateCodec::MIN_KEY_LENGTH;
    if active.len() < MIN {
        return Err(ServeError::Refused(format!("Serve::state_key must be at least {MIN} bytes")));
    }
    if accepted.iter().any(|key| key.len() < MIN) {
        return Err(ServeError::Refused(format!("every Serve::accept_state_key must be at least {MIN} bytes")));
    }
    let mut ring: Vec<(String, Vec<u8>)> = vec![(key_id(active), active.to_vec())];
    for key in accepted {
        let id = key_id(key);
        if !ring.iter().any(|(known, _)| *known == id) {
            ring.push((id, key.clone()));
        }
    }
    rmcp::model::RequestStateCodec::new_with_keyring(key_id(active), ring)
        .map_err(|e| ServeError::Refused(format!("Serve::state_key: {e}")))
}

/// The id a sealed state names its key by: the same for one key on every replica, and telling
/// nothing of the key (the first 8 bytes of a SHA-256 of it, which a client can read).
fn key_id(key: &[u8]) -> String {
    let digest = agent_surface_core::digest::sha256_parts([&b"agent-surface/request-state-key"[..], key]);
    format!("sk-{}", agent_surface_core::hex::Hex(&digest[..8]))
}

/// A server [`Serve::bind`] started: where it listens, and how to stop it.
#[must_use = "the server stops when `Running` is dropped"]
#[cfg(feature = "http")]
pub struct Running {
    local: SocketAddr,
    stop: CancellationToken,
    task: Option<JoinHandle<io::Result<()>>>,
    service: Service,
}

#[cfg(feature = "http")]
impl Running {
    /// The address the server listens on (the port the system chose for `:0`).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The service it serves.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// Starts the drain: the server stops accepting and the calls in flight finish within the
    /// drain deadline. Await [`stopped`](Self::stopped) for the end.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Waits until the server has stopped (after [`stop`](Self::stop), or a failure), and
    /// cancels what is left of the service's calls (calls answered as tasks).
    pub async fn stopped(mut self) -> Result<(), ServeError> {
        let served = match self.task.take() {
            Some(task) => task.await.unwrap_or_else(|e| Err(io::Error::other(e))),
            None => Ok(()),
        };
        self.service.registry.dispose();
        served.map_err(ServeError::Io)
    }

    /// Serves until SIGTERM or Ctrl-C, then drains; a second signal during the drain cancels the
    /// calls in flight at once. The handlers are installed when this is first polled: a signal
    /// that comes before ends the process by its default action. To say that the service is
    /// ready, use [`Serve::on_listening`] with [`Serve::http`], which installs them before it
    /// listens.
    pub async fn until_signal(self) -> Result<(), ServeError> {
        self.until(Signals::install()).await
    }

    /// [`until_signal`](Self::until_signal) with handlers installed already.
    async fn until(self, mut signals: Signals) -> Result<(), ServeError> {
        let registry = self.service.registry.clone();
        let stop = self.stop.clone();
        let waiter = tokio::spawn(async move {
            tokio::select! {
                () = signals.next() => {}
                () = stop.cancelled() => return,
            }
            tracing::info!(target: TARGET, "signal: draining");
            stop.cancel();
            signals.next().await;
            tracing::warn!(target: TARGET, "second signal: cancelling the calls in flight");
            registry.dispose();
        });
        let stopped = self.stopped().await;
        waiter.abort();
        stopped
    }
}

#[cfg(feature = "http")]
impl Drop for Running {
    fn drop(&mut self) {
        if self.task.is_some() {
            self.stop.cancel();
        }
    }
}

#[cfg(feature = "http")]
impl fmt::Debug for Running {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Running").field("local", &self.local).finish_non_exhaustive()
    }
}

/// SIGTERM and SIGINT (Ctrl-C), listened for from the moment [`Signals::install`] returns: one
/// that comes later is never missed, nor does it end the process by its default action.
#[cfg(feature = "http")]
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

#[cfg(feature = "http")]
impl Signals {
    /// Installs the handlers (in a Tokio runtime); one that cannot be installed is logged, and
    /// that signal is not waited for.
    fn install() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let install = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(signal) => Some(signal),
                Err(e) => {
                    tracing::warn!(target: TARGET, error = %e, signal = name, "cannot handle this signal; it will not drain");
                    None
                }
            };
            Signals {
                term: install(SignalKind::terminate(), "SIGTERM"),
                int: install(SignalKind::interrupt(), "SIGINT"),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// The next signal; pending forever when none could be installed.
    async fn next(&mut self) {
        #[cfg(unix)]
        {
            async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
                if let Some(signal) = signal
                    && signal.recv().await.is_some()
                {
                    return;
                }
                std::future::pending().await
            }
            tokio::select! {
                () = recv(&mut self.term) => {}
                () = recv(&mut self.int) => {}
            }
        }
        #[cfg(not(unix))]
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(target: TARGET, error = %e, "cannot handle Ctrl-C");
            std::future::pending::<()>().await;
        }
    }
}

/// Says where the service keeps its state, once it listens: at INFO, where each store keeps it;
/// at WARN, what is lost with the stores that keep it in this process's memory only, when the
/// service is reachable from elsewhere (it listens beyond loopback, or its public URL names
/// another host than this machine): a restart forgets it, and replicas do not share it.
#[cfg(feature = "http")]
fn report_stores(service: &Service, local: SocketAddr, serving_inbox: bool) {
    use agent_surface_policy::Reach;
    let config = service.registry.config();
    // Each store, where it keeps its records, and what a restart or a second replica loses with
    // a store of this process.
    let mut stores: Vec<(&str, Option<Reach>, &str)> = vec![
        (
            "idempotency",
            Some(config.idempotency.reach()),
            "the answers of calls with an invocation id (a retried call may run again)",
        ),
        (
            "confirmations",
            Some(service.stores.confirmations.reach()),
            "pending and approved confirmations (people are asked again)",
        ),
        (
            "rate limiter",
            config.rate_limiter.as_ref().map(|limiter| limiter.reach()),
            "the rate budgets (each replica counts alone; a restart refills them)",
        ),
    ];
    if serving_inbox {
        stores.push(("inbox", Some(service.stores.inbox.reach()), "the approvers' sign-ins (they sign in again)"));
    }
    let kept = |reach: Reach| match reach {
        Reach::Process => "in this process's memory",
        Reach::Durable => "on this machine's disk",
        Reach::Shared => "shared",
        other => other.as_str(),
    };
    let all: Vec<String> =
        stores.iter().filter_map(|(name, reach, _)| reach.map(|r| format!("{name} {}", kept(r)))).collect();
    tracing::info!(target: TARGET, "stores: {}", all.join(", "));
    let in_memory: Vec<_> = stores.iter().filter(|(_, reach, _)| *reach == Some(Reach::Process)).collect();
    let public_elsewhere =
        service.public_url.as_deref().and_then(web_address_host).is_some_and(|host| !is_loopback_host(&host));
    if !in_memory.is_empty() && (!local.ip().is_loopback() || public_elsewhere) {
        let names: Vec<&str> = in_memory.iter().map(|(name, _, _)| *name).collect();
        let lost: Vec<&str> = in_memory.iter().map(|(_, _, lost)| *lost).collect();
        tracing::warn!(
            target: TARGET,
            stores = %names.join(", "),
            "these stores keep their records in this process's memory only; a restart forgets, and another replica \
             does not see, {}. Give ServiceBuilder::stores a durable bundle (agent-surface-sqlite) or a shared one \
             (agent-surface-redis, agent-surface-postgres)",
            lost.join("; ")
        );
    }
}

/// Says, once the server listens, that the service's public URL has a path (`/expenses` in
/// `https://host/expenses`): the links built from it (approval pages) keep the path, while this
/// server answers at its root (`/mcp`, `/api`, `/inbox`), so what is in front must strip the path.
/// At INFO: behind such a proxy it is right.
#[cfg(feature = "http")]
fn report_public_path(service: &Service) {
    if let Some(path) = service.public_url.as_deref().and_then(public_path) {
        tracing::info!(
            target: TARGET,
            public_url = service.public_url.as_deref().unwrap_or_default(),
            "ServiceBuilder::public_url has the path {path}: approval links keep it, but this server answers at its \
             root (/mcp, /api, /inbox); a proxy in front must strip {path}, or links lead nowhere"
        );
    }
}

/// Whether `url`'s host is the loopback: `localhost`, or a loopback address.
#[cfg(feature = "http")]
fn names_loopback(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else { return false };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The path of a public URL, without trailing `/`s, when it has one (`/expenses` in
/// `https://host/expenses/`).
#[cfg(any(feature = "http", test))]
fn public_path(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let path = rest.find('/').map(|at| &rest[at..])?.trim_end_matches('/');
    (!path.is_empty()).then_some(path)
}

/// Reports, at start, approval links that point at the inbox under the service's public URL
/// when this server does not serve it (`why`): a person sent there finds "no such confirmation".
/// A warning, not a refusal: another `Serve` of the same service in this process, or a proxy in
/// front of it, may serve that inbox, and a service that never asks for an approval sends no link.
#[cfg(any(feature = "http", feature = "stdio"))]
fn warn_of_unserved_approval_links(service: &Service, why: &str) {
    if let Some(base) = approvals_in_own_inbox(service) {
        tracing::warn!(
            target: TARGET,
            approval_base_url = %base,
            "approval links point at the inbox under ServiceBuilder::public_url, but {why}: unless another server \
             answers there, a person sent to approve finds \"no such confirmation\". Serve the inbox (Serve::approvers, \
             with Serve::authenticator; the `inbox` feature), or give the address where people do approve with \
             ServiceBuilder::approval_base_url"
        );
    }
}

/// The approval base URL when it points at the inbox that `Serve` serves under the service's
/// public URL (`{public_url}/inbox/…`: the default `ServiceBuilder` derives from the public URL,
/// or an explicit base to the same place).
#[cfg(any(feature = "http", feature = "stdio"))]
fn approvals_in_own_inbox(service: &Service) -> Option<&str> {
    let public = service.public_url.as_deref()?.trim_end_matches('/');
    let base = service.confirmations.config().approval_base_url.as_deref()?;
    let inbox = format!("{public}{INBOX_PREFIX}");
    let under = base.get(..inbox.len()).is_some_and(|head| head.eq_ignore_ascii_case(&inbox));
    (under && matches!(base.as_bytes().get(inbox.len()), None | Some(b'/'))).then_some(base)
}

/// Whether `url` (one [`web_address_host`] accepts) names port 0: a port the system picks when a
/// server binds, never one a browser can be sent to.
fn names_port_zero(url: &str) -> bool {
    let authority = url.split_once("://").map_or("", |(_, rest)| rest.split('/').next().unwrap_or_default());
    let port = match authority.rsplit_once(']') {
        Some((_, after)) => after.strip_prefix(':'),
        None => authority.split_once(':').map(|(_, port)| port),
    };
    port.and_then(|p| p.parse::<u16>().ok()) == Some(0)
}

/// Whether `host` (as [`web_address_host`] gives it) names this machine: `localhost` or a
/// loopback address.
#[cfg(feature = "http")]
fn is_loopback_host(host: &str) -> bool {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    host == "localhost" || bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The host of `url` (lowercased, an IPv6 address in brackets) when it is an address to send a
/// person to: `http` or `https`, a host, an optional port and path, and nothing else — no user
/// information (a password would reach every agent told the link), query or fragment (what is
/// appended to it would not reach the inbox), space or control character.
fn web_address_host(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return None;
    }
    if !url.is_ascii() || url.contains(|c: char| c.is_ascii_control() || matches!(c, ' ' | '?' | '#' | '@' | '\\')) {
        return None;
    }
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (address, port) = v6.split_once(']')?;
            let valid = !address.is_empty() && address.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
            (valid.then(|| format!("[{address}]"))?, port)
        }
        None => {
            let (host, port) = authority.find(':').map_or((authority, ""), |at| authority.split_at(at));
            let valid = !host.is_empty() && host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
            (valid.then(|| host.to_string())?, port)
        }
    };
    let port_ok = port.is_empty() || port.strip_prefix(':').is_some_and(|p| !p.is_empty() && p.parse::<u16>().is_ok());
    port_ok.then(|| host.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::{key_id, no_operator_log, public_path, web_address_host};

    #[test]
    fn the_path_of_a_public_url() {
        assert_eq!(public_path("https://lb.example/expenses/"), Some("/expenses"));
        assert_eq!(public_path("http://127.0.0.1:8787/a/b"), Some("/a/b"));
        for none in
            ["https://lb.example", "https://lb.example/", "https://lb.example//", "lb.example/x", "https://h/?q"]
        {
            assert_eq!(public_path(none), None, "{none}");
        }
    }

    #[test]
    fn only_an_absolute_web_address_is_one_to_send_people_to() {
        for good in
            ["https://lb.example", "http://127.0.0.1:8787", "https://lb.example/desk", "https://lb.example/inbox/c/"]
        {
            assert!(web_address_host(good).is_some(), "{good}");
        }
        for bad in
            ["lb.example", "lb.example/inbox", "/inbox", "ftp://lb.example", "https://", "", "mailto:x@lb.example"]
        {
            assert!(web_address_host(bad).is_none(), "{bad}");
        }
    }

    /// Built without the operator log and with no subscriber of the application's, the service
    /// says so at start; with either, it says nothing.
    #[test]
    fn a_service_without_an_operator_log_says_so() {
        let notice = no_operator_log(false, false).expect("nothing records the operator channel");
        assert!(notice.contains("`operator-log` feature") && notice.contains("tracing"), "{notice}");
        assert_eq!(no_operator_log(true, false), None);
        assert_eq!(no_operator_log(false, true), None);
        assert_eq!(no_operator_log(true, true), None);
    }

    #[test]
    fn the_public_host_is_admitted_without_its_port() {
        assert_eq!(web_address_host("https://Tickets.Example:8443/x").as_deref(), Some("tickets.example"));
        assert_eq!(web_address_host("http://[::1]:8080").as_deref(), Some("[::1]"));
        assert_eq!(web_address_host("not a url"), None);
        for zero in ["http://127.0.0.1:0", "http://localhost:00/x", "http://[::1]:0"] {
            assert!(super::names_port_zero(zero), "{zero}");
        }
        for other in ["http://127.0.0.1:8787", "https://tickets.example", "http://[::1]:8080/0", "http://a.example/:0"]
        {
            assert!(!super::names_port_zero(other), "{other}");
        }
    }

    #[test]
    fn a_state_key_is_named_by_a_digest_of_itself() {
        let (one, other) = (vec![1u8; 32], vec![2u8; 32]);
        assert_eq!(key_id(&one), key_id(&one.clone()), "the same on every replica");
        assert_ne!(key_id(&one), key_id(&other));
        assert_eq!(key_id(&one).len(), "sk-".len() + 16);
    }
}
