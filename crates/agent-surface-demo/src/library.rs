//! The demo's own MCP features beside its tools: one resource, one prompt and the completion of
//! the prompt's first argument, in an ordinary `rmcp` [`ServerHandler`] served through
//! `McpServer::with_fallback` (`agent_surface_mcp::compose`), as an application that already has
//! such a handler would.
//!
//! The shop serves its refund policy and a prompt that drafts a reply about an order
//! ([`Library::shop`]); under `--conformance` the MCP conformance suite's fixtures take their
//! place ([`Library::conformance`]: `test://static-text`, `test_prompt_with_arguments`).

use rmcp::model::{
    CompleteRequestParams, CompleteResult, CompletionInfo, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    ListPromptsResult, ListResourcesResult, PaginatedRequestParams, Prompt, PromptArgument, PromptMessage,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Reference, Resource, ResourceContents, Role,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

/// One text resource, one prompt whose text names its arguments' values, and the values its
/// first argument completes to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Library {
    uri: &'static str,
    resource_name: &'static str,
    resource_text: &'static str,
    prompt: &'static str,
    prompt_description: &'static str,
    /// The prompt's arguments (all required); the first one completes to `completions`.
    arguments: &'static [&'static str],
    /// The prompt's text, with `{name}` replaced by each argument's value.
    template: &'static str,
    completions: &'static [&'static str],
}

impl Library {
    /// The shop's: its refund policy, and a prompt that drafts a reply about an order (the order
    /// id completes to the demo's orders).
    pub(crate) const fn shop() -> Library {
        Library {
            uri: "shop://policies/refunds",
            resource_name: "Refund policy",
            resource_text: "Orders can be refunded within 30 days of delivery. Refunds over 100.00 need a \
                            second person's approval; a refund is issued once per order.",
            prompt: "draft_refund_reply",
            prompt_description: "Draft a reply to a customer who asks for a refund of an order.",
            arguments: &["orderId"],
            template: "Look up order {orderId}, check it against the refund policy (shop://policies/refunds) \
                       and draft a short, friendly reply to the customer who asked for its refund.",
            completions: &["A-1001", "A-1002", "A-1003"],
        }
    }

    /// The MCP conformance suite's fixtures (`resources-read-text`, `prompts-get-with-args`,
    /// `completion-complete`).
    pub(crate) const fn conformance() -> Library {
        Library {
            uri: "test://static-text",
            resource_name: "static-text",
            resource_text: "This is the content of the static text resource.",
            prompt: "test_prompt_with_arguments",
            prompt_description: "A prompt with two required arguments (conformance fixture).",
            arguments: &["arg1", "arg2"],
            template: "Prompt with arguments: arg1='{arg1}', arg2='{arg2}'",
            completions: &["paris", "park", "party"],
        }
    }

    /// The prompt's text for `arguments`, or why they do not fit.
    fn render(&self, arguments: Option<&serde_json::Map<String, Value>>) -> Result<String, ErrorData> {
        let mut text = self.template.to_string();
        for name in self.arguments {
            let value = arguments.and_then(|a| a.get(*name)).and_then(Value::as_str).ok_or_else(|| {
                ErrorData::invalid_params(format!("The prompt `{}` needs the argument `{name}`.", self.prompt), None)
            })?;
            text = text.replace(&format!("{{{name}}}"), value);
        }
        Ok(text)
    }
}

impl ServerHandler for Library {
    fn get_info(&self) -> ServerConfig {
        let capabilities =
            ServerCapabilities::builder().enable_completions().enable_prompts().enable_resources().build();
        ServerConfig::new(capabilities)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let resource = Resource::new(self.uri, self.resource_name)
            .with_description(self.resource_name)
            .with_mime_type("text/plain")
            .with_size(self.resource_text.len() as u64);
        Ok(ListResourcesResult::with_all_items(vec![resource]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri != self.uri {
            // -32002 for legacy clients; rmcp answers -32602 to modern ones (with the same data).
            return Err(ErrorData::resource_not_found("Resource not found", Some(json!({"uri": request.uri}))));
        }
        let contents = ResourceContents::text(self.resource_text, self.uri).with_mime_type("text/plain");
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let arguments = self.arguments.iter().map(|name| PromptArgument::new(*name).with_required(true)).collect();
        let prompt = Prompt::new(self.prompt, Some(self.prompt_description), Some(arguments));
        Ok(ListPromptsResult::with_all_items(vec![prompt]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name != self.prompt {
            return Err(ErrorData::invalid_params(format!("Unknown prompt: {}", request.name), None));
        }
        let text = self.render(request.arguments.as_ref())?;
        let result = GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
            .with_description(self.prompt_description);
        Ok(result.into())
    }

    /// The values of the prompt's first argument that start with what was typed; nothing for
    /// any other reference.
    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let ours = matches!(&request.r#ref, Reference::Prompt(p) if p.name == self.prompt)
            && self.arguments.first() == Some(&request.argument.name.as_str());
        let typed = request.argument.value.to_lowercase();
        let values: Vec<String> = if ours {
            self.completions.iter().filter(|v| v.to_lowercase().starts_with(&typed)).map(|v| v.to_string()).collect()
        } else {
            Vec::new()
        };
        let mut completion = CompletionInfo::new(values).map_err(|e| ErrorData::internal_error(e, None))?;
        completion.total = Some(completion.values.len() as u32);
        completion.has_more = Some(false);
        Ok(CompleteResult::new(completion))
    }
}

#[cfg(test)]
mod tests {
    use super::Library;
    use serde_json::json;

    #[test]
    fn the_prompt_names_every_argument_and_refuses_a_missing_one() {
        let args = json!({"arg1": "hello", "arg2": "world"});
        let text = Library::conformance().render(args.as_object()).unwrap();
        assert_eq!(text, "Prompt with arguments: arg1='hello', arg2='world'");
        let missing = Library::conformance().render(json!({"arg1": "x"}).as_object()).unwrap_err();
        assert!(missing.message.contains("arg2"), "{missing:?}");
        let shop = Library::shop().render(json!({"orderId": "A-1002"}).as_object()).unwrap();
        assert!(shop.starts_with("Look up order A-1002,"), "{shop}");
    }
}
