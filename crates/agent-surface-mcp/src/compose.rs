//! One MCP server for the registry's tools and an application's own resources, prompts and
//! completions: [`Composed`].
//!
//! [`McpServer`] answers tools (and the MCP tasks they become). An application that already
//! serves resources, prompts, completions — anything an `rmcp` [`ServerHandler`] answers — keeps
//! its handler and hands it to [`McpServer::with_fallback`]: the composed server answers
//! `tools/*` and `tasks/*` with the adapter, and delegates every other method and notification
//! to the application's handler. Clients see one server, on both protocol eras and both
//! transports ([`serve_io`](crate::serve_io), [`serve_stdio_with`](crate::serve_stdio_with),
//! [`http::router_with_fallback`](crate::http::router_with_fallback)).
//!
//! What goes where:
//!
//! | request or notification | answered by |
//! |---|---|
//! | `tools/list`, `tools/call`, `tasks/get`, `tasks/update`, `tasks/cancel` | the adapter |
//! | `initialize`, `server/discover`, `ping` | the composed server (one answer, merged capabilities) |
//! | `subscriptions/listen` | both: the adapter its tool-list changes, the application the rest |
//! | `resources/*`, `prompts/*`, `completion/complete`, `logging/setLevel`, skills, anything else | the application |
//! | `notifications/initialized` | both |
//! | every other notification | the application (over [`crate::serve_io`], a `notifications/cancelled` for a request in progress is the transport's: it fires that request's `RequestContext::ct` and reaches no `on_cancelled`; see `stdio`) |
//!
//! The capabilities announced are the adapter's `tools` (and the tasks extension when it offers
//! it) and everything else the application's handler declares in its `get_info` (`resources`,
//! `prompts`, `completions`, `logging`, experimental capabilities, extensions); a `tools`
//! capability of the application is not announced, nor are its tools served. The server's name
//! and version are the adapter's ([`McpConfig`](crate::McpConfig)); instructions are the
//! adapter's and the application's, in that order. The protocol versions served are those both
//! support. The application's own `initialize` is not called (the composed server negotiates
//! with the merged capabilities); it sees the client's information through each request's
//! `context.peer`, and is told `notifications/initialized`.
//!
//! # Examples
//!
//! ```
//! use agent_surface_mcp::{McpConfig, McpServer};
//! use agent_surface_registry::{Registry, RegistryConfig};
//! use rmcp::model::{
//!     GetPromptRequestParams, GetPromptResponse, GetPromptResult, ListPromptsResult,
//!     PaginatedRequestParams, Prompt, PromptMessage, Role, ServerCapabilities, ServerConfig,
//! };
//! use rmcp::service::RequestContext;
//! use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
//!
//! /// The application's own handler: one prompt.
//! struct Prompts;
//!
//! impl ServerHandler for Prompts {
//!     fn get_info(&self) -> ServerConfig {
//!         ServerConfig::new(ServerCapabilities::builder().enable_prompts().build())
//!     }
//!
//!     async fn list_prompts(
//!         &self,
//!         _request: Option<PaginatedRequestParams>,
//!         _context: RequestContext<RoleServer>,
//!     ) -> Result<ListPromptsResult, ErrorData> {
//!         Ok(ListPromptsResult::with_all_items(vec![Prompt::new("triage", Some("Triage a ticket."), None)]))
//!     }
//!
//!     async fn get_prompt(
//!         &self,
//!         request: GetPromptRequestParams,
//!         _context: RequestContext<RoleServer>,
//!     ) -> Result<GetPromptResponse, ErrorData> {
//!         match request.name.as_str() {
//!             "triage" => Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, "Triage it.")]).into()),
//!             _ => Err(ErrorData::invalid_params("no such prompt", None)),
//!         }
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! let registry = Registry::new(RegistryConfig::default());
//! // … define and mount capabilities …
//! let server = McpServer::new(registry, McpConfig::default()).with_fallback(Prompts);
//!
//! let (client_io, server_io) = tokio::io::duplex(64 * 1024);
//! let (read, write) = tokio::io::split(server_io);
//! tokio::spawn(agent_surface_mcp::serve_io(server, read, write, 1 << 20));
//!
//! let client = ().serve(client_io).await.unwrap();
//! let info = client.peer_info().unwrap();
//! assert!(info.capabilities.tools.is_some() && info.capabilities.prompts.is_some());
//! let prompts = client.list_all_prompts().await.unwrap();
//! assert_eq!(prompts[0].name, "triage");
//! client.cancel().await.unwrap();
//! # });
//! ```

use std::borrow::Cow;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CancelledNotificationParam, CompleteRequestParams,
    CompleteResult, CustomNotification, CustomRequest, CustomResult, GetPromptRequestParams, GetPromptResponse,
    GetSkillRequestParams, GetSkillResult, GetTaskParams, GetTaskResult, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListSkillsResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion, ReadResourceDirectoryRequestParams,
    ReadResourceDirectoryResult, ReadResourceRequestParams, ReadResourceResponse, ServerConfig, SubscribeRequestParams,
    SubscriptionFilter, Tool, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::McpServer;
use crate::server::SERVED_METHODS;

/// The adapter's tools and an application's own [`ServerHandler`] as one MCP server: see
/// [the module docs](self) for what each answers. Built by [`McpServer::with_fallback`], one per
/// connection or legacy session (over HTTP, one per modern request too, as an [`McpServer`] is).
#[derive(Debug, Clone)]
pub struct Composed<H> {
    tools: McpServer,
    app: H,
}

impl McpServer {
    /// This server's tools beside `app`, the application's own handler, which answers every
    /// method that is not about tools or tasks (resources, prompts, completions, …) — see
    /// [`Composed`].
    pub fn with_fallback<H: ServerHandler>(self, app: H) -> Composed<H> {
        Composed { tools: self, app }
    }
}

impl<H> Composed<H> {
    /// The adapter, which answers tools and tasks.
    pub fn tools(&self) -> &McpServer {
        &self.tools
    }

    /// The application's handler, which answers the rest.
    pub fn app(&self) -> &H {
        &self.app
    }
}

/// Whether `filter` asks for any notification at all.
fn any(filter: &SubscriptionFilter) -> bool {
    filter.tools_list_changed == Some(true)
        || filter.prompts_list_changed == Some(true)
        || filter.resources_list_changed == Some(true)
        || filter.resource_subscriptions.as_ref().is_some_and(|uris| !uris.is_empty())
}

/// `ours` with `theirs` added (for the notification categories, either's acceptance; for
/// resource subscriptions, theirs: the adapter has no resources).
fn union(ours: Option<SubscriptionFilter>, theirs: Option<SubscriptionFilter>) -> Option<SubscriptionFilter> {
    match (ours, theirs) {
        (None, None) => None,
        (Some(one), None) | (None, Some(one)) => Some(one),
        (Some(ours), Some(theirs)) => {
            let mut filter = SubscriptionFilter::new();
            let either = |a: Option<bool>, b: Option<bool>| (a == Some(true) || b == Some(true)).then_some(true);
            filter.tools_list_changed = either(ours.tools_list_changed, theirs.tools_list_changed);
            filter.prompts_list_changed = either(ours.prompts_list_changed, theirs.prompts_list_changed);
            filter.resources_list_changed = either(ours.resources_list_changed, theirs.resources_list_changed);
            filter.resource_subscriptions = theirs.resource_subscriptions;
            Some(filter)
        }
    }
}

impl<H: ServerHandler> ServerHandler for Composed<H> {
    /// Answered once per session with the merged capabilities (the adapter refuses a second
    /// `initialize`); the application's own `initialize` is not called.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        self.tools.claim_initialize()?;
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    /// The versions both the adapter and the application support, in the adapter's order.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        let theirs = self.app.supported_protocol_versions();
        let ours = self.tools.supported_protocol_versions();
        if ours == theirs {
            return ours;
        }
        Cow::Owned(ours.iter().filter(|v| theirs.contains(v)).cloned().collect())
    }

    /// The adapter's tools (and tasks), name, version and instructions; everything else the
    /// application declares.
    fn get_info(&self) -> ServerConfig {
        let ours = self.tools.get_info();
        let theirs = self.app.get_info();
        let mut capabilities = theirs.capabilities;
        capabilities.tools = ours.capabilities.tools;
        if let Some(extensions) = ours.capabilities.extensions {
            capabilities.extensions.get_or_insert_with(Default::default).extend(extensions);
        }
        let instructions = match (ours.instructions, theirs.instructions) {
            (Some(ours), Some(theirs)) => Some(format!("{ours}\n\n{theirs}")),
            (ours, theirs) => ours.or(theirs),
        };
        let mut info = ServerConfig::new(capabilities).with_server_info(ours.server_info);
        info.protocol_version = ours.protocol_version;
        info.instructions = instructions;
        info.meta = theirs.meta.or(ours.meta);
        info
    }

    fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListToolsResult, ErrorData>> + Send + '_ {
        self.tools.list_tools(request, context)
    }

    fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CallToolResponse, ErrorData>> + Send + '_ {
        self.tools.call_tool(request, context)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.get_tool(name)
    }

    fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<GetTaskResult, ErrorData>> + Send + '_ {
        self.tools.get_task(request, context)
    }

    fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + Send + '_ {
        self.tools.update_task(request, context)
    }

    fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + Send + '_ {
        self.tools.cancel_task(request, context)
    }

    fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<CompleteResult, ErrorData>> + Send + '_ {
        self.app.complete(request, context)
    }

    #[allow(deprecated, reason = "logging (SEP-2577) is the application's to offer, or not")]
    fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + Send + '_ {
        self.app.set_level(request, context)
    }

    fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<GetPromptResponse, ErrorData>> + Send + '_ {
        self.app.get_prompt(request, context)
    }

    fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListPromptsResult, ErrorData>> + Send + '_ {
        self.app.list_prompts(request, context)
    }

    fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListResourcesResult, ErrorData>> + Send + '_ {
        self.app.list_resources(request, context)
    }

    fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListResourceTemplatesResult, ErrorData>> + Send + '_ {
        self.app.list_resource_templates(request, context)
    }

    fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ReadResourceResponse, ErrorData>> + Send + '_ {
        self.app.read_resource(request, context)
    }

    #[allow(deprecated, reason = "legacy resource subscriptions are the application's to serve")]
    fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + Send + '_ {
        self.app.subscribe(request, context)
    }

    #[allow(deprecated, reason = "legacy resource subscriptions are the application's to serve")]
    fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + Send + '_ {
        self.app.unsubscribe(request, context)
    }

    fn list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListSkillsResult, ErrorData>> + Send + '_ {
        self.app.list_skills(request, context)
    }

    fn get_skill(
        &self,
        request: GetSkillRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<GetSkillResult, ErrorData>> + Send + '_ {
        self.app.get_skill(request, context)
    }

    fn read_resource_directory(
        &self,
        request: ReadResourceDirectoryRequestParams,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ReadResourceDirectoryResult, ErrorData>> + Send + '_ {
        self.app.read_resource_directory(request, context)
    }

    /// The methods the adapter serves (a request of theirs whose params do not fit) are the
    /// adapter's; any other method is the application's.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if SERVED_METHODS.contains(&request.method.as_str()) {
            self.tools.on_custom_request(request, context).await
        } else {
            self.app.on_custom_request(request, context).await
        }
    }

    /// What either accepts: the adapter its tool-list changes, the application the rest.
    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let ours = self.tools.accepted_subscription_filter(requested).map(|f| {
            let mut tools_only = SubscriptionFilter::new();
            tools_only.tools_list_changed = f.tools_list_changed;
            tools_only
        });
        union(ours, self.app.accepted_subscription_filter(requested))
    }

    /// The adapter announces tool-list changes on the stream while the application's `listen`
    /// runs (the stream ends when it returns, or when the client closes it); a stream that
    /// accepted nothing of the application's is the adapter's alone.
    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        let accepted = subscription.accepted().clone();
        let theirs =
            self.app.accepted_subscription_filter(subscription.requested()).map(|f| f.intersection(&accepted)).filter(
                |f| {
                    // The application's share: anything but the tool list, which the adapter owns.
                    let mut rest = f.clone();
                    rest.tools_list_changed = None;
                    any(&rest)
                },
            );
        let ours = accepted.tools_list_changed == Some(true);
        match (ours, theirs.is_some()) {
            (_, false) => self.tools.listen(subscription).await,
            (false, true) => self.app.listen(subscription).await,
            (true, true) => {
                let context = subscription.request_context().clone();
                let sink = subscription.sink().clone();
                let app = self.app.listen(subscription);
                let watch = self.tools.watch_tool_list(&context, &sink);
                tokio::pin!(app, watch);
                tokio::select! {
                    ended = &mut app => ended,
                    // The tool list is no longer watched (the sink closed): the application
                    // keeps the stream.
                    () = &mut watch => app.await,
                }
            }
        }
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.tools.on_initialized(context.clone()).await;
        self.app.on_initialized(context).await;
    }

    fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + Send + '_ {
        // `rmcp` cancels the request's token itself; the adapter needs nothing more.
        self.app.on_cancelled(notification, context)
    }

    fn on_progress(
        &self,
        notification: ProgressNotificationParam,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.app.on_progress(notification, context)
    }

    fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) -> impl Future<Output = ()> + Send + '_ {
        self.app.on_roots_list_changed(context)
    }

    fn on_custom_notification(
        &self,
        notification: CustomNotification,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.app.on_custom_notification(notification, context)
    }
}

#[cfg(test)]
mod tests {
    use super::{any, union};
    use rmcp::model::SubscriptionFilter;

    #[test]
    fn accepted_filters_are_united() {
        let tools = SubscriptionFilter::builder().tools_list_changed().build();
        let prompts = SubscriptionFilter::builder().prompts_list_changed().resources_list_changed().build();
        let both = union(Some(tools.clone()), Some(prompts)).unwrap();
        assert_eq!(both.tools_list_changed, Some(true));
        assert_eq!(both.prompts_list_changed, Some(true));
        assert_eq!(both.resources_list_changed, Some(true));
        assert_eq!(union(Some(tools.clone()), None), Some(tools));
        assert_eq!(union(None, None), None);
        assert!(!any(&SubscriptionFilter::new()));
    }
}
