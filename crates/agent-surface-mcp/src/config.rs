//! [`McpConfig`]: how the adapter presents a registry over MCP.

use std::sync::Arc;
use std::time::Duration;

use agent_surface_policy::Identity;

use crate::confirm::ConfirmationResolver;
use crate::mrtr::ApprovalStates;

/// How a call of a tool that is not in the consumer's surface is answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnknownTool {
    /// A tool result with `isError: true` carrying `CAPABILITY_NOT_FOUND` (retry
    /// `after-refresh`), like every other capability error. The default: the model learns to
    /// refresh its tool list, and a hidden capability stays indistinguishable from one that never
    /// existed.
    #[default]
    InBand,
    /// JSON-RPC error `-32602` (invalid params), as the MCP specification (2025-11-25,
    /// `server/tools`) classifies an unknown tool. Clients usually do not show this to the model.
    /// The codes answered so, and with which JSON-RPC code, are the matrix's
    /// (`McpMapping::strict_protocol_error`: `CAPABILITY_NOT_FOUND` only); all others stay in-band.
    ProtocolError,
}

/// The adapter's configuration. Build it with struct update syntax over `Default`.
///
/// ```
/// use agent_surface_mcp::{McpConfig, UnknownTool};
/// let config = McpConfig { name: "shop".into(), unknown_tool: UnknownTool::ProtocolError, ..Default::default() };
/// # let _ = config;
/// ```
#[derive(Clone)]
pub struct McpConfig {
    /// The server name reported at `initialize`.
    pub name: String,
    /// The server version reported at `initialize`.
    pub version: String,
    /// Instructions for the model, reported at `initialize`.
    pub instructions: Option<String>,
    /// How calls of unknown tools are answered.
    pub unknown_tool: UnknownTool,
    /// Records approvals given through elicitation; `None` relays every `CONFIRMATION_REQUIRED`
    /// to the model (two-phase). See [`crate::confirm`].
    pub confirmations: Option<Arc<dyn ConfirmationResolver>>,
    /// How long the adapter waits for the person to answer an elicitation before it relays
    /// `CONFIRMATION_REQUIRED` instead (legacy clients).
    pub elicitation_timeout: Duration,
    /// Seals the `requestState` of input-required results to modern clients — approvals and a
    /// capability's questions ([`crate::mrtr`]). The
    /// default draws a random key per configuration: enough for one process; several replicas
    /// must share a keyring ([`ApprovalStates::new`]).
    pub approval_states: ApprovalStates,
    /// Long-running capabilities as tasks for modern clients that negotiate the tasks extension
    /// ([`crate::tasks`]); `None` (the default): the extension is not offered and every call is
    /// answered when it ends.
    pub tasks: Option<crate::tasks::Tasks>,
    /// How long a modern client may cache `tools/list` (`ttlMs`; the scope is always
    /// `private`: the list depends on the caller). The list changes with the surface, which
    /// `subscriptions/listen` announces; zero asks clients not to cache.
    pub list_ttl: Duration,
    /// The identity of every session that has no authenticator (stdio: the person who started
    /// the server). `None`: anonymous.
    pub identity: Option<Identity>,
    /// The largest JSON-RPC message the stdio transport accepts, in bytes; a longer line is
    /// discarded and answered with JSON-RPC error `-32600`.
    pub max_message_bytes: usize,
    /// Adds the proposed structured tool-failure object (SEP-3313, a draft) to the `_meta` of
    /// every error result, under our own key `agent-surface/toolFailure`, never under the
    /// protocol's reserved prefix ([`agent_surface_core::wire`] maps each code and retry
    /// category onto it). Off by default until the proposal is accepted; the payload in the
    /// result's text block says the same either way.
    pub tool_failure: bool,
    /// Over HTTP: turns each request's headers into the caller's identity, or refuses the
    /// request at the transport (`401`/`403` with a challenge; see [`crate::http::authenticated`]).
    #[cfg(feature = "http")]
    pub authenticator: Option<Arc<dyn agent_surface_policy::Authenticator>>,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            name: "agent-surface".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            instructions: None,
            unknown_tool: UnknownTool::InBand,
            confirmations: None,
            elicitation_timeout: Duration::from_secs(120),
            approval_states: ApprovalStates::ephemeral(),
            list_ttl: Duration::from_secs(60),
            tasks: None,
            identity: None,
            max_message_bytes: 4 * 1024 * 1024,
            tool_failure: false,
            #[cfg(feature = "http")]
            authenticator: None,
        }
    }
}

impl std::fmt::Debug for McpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("McpConfig");
        d.field("name", &self.name)
            .field("version", &self.version)
            .field("unknown_tool", &self.unknown_tool)
            .field("confirmations", &self.confirmations.is_some())
            .field("elicitation_timeout", &self.elicitation_timeout)
            .field("list_ttl", &self.list_ttl)
            .field("tasks", &self.tasks)
            .field("identity", &self.identity.as_ref().map(|i| &i.subject))
            .field("max_message_bytes", &self.max_message_bytes)
            .field("tool_failure", &self.tool_failure);
        #[cfg(feature = "http")]
        d.field("authenticator", &self.authenticator.is_some());
        d.finish_non_exhaustive()
    }
}
