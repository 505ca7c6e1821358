//! [`ScriptedConsumer`]: a consumer (key, identity) with a script of calls to replay against a
//! registry.

use agent_surface_core::InvokeResult;
use agent_surface_policy::{Consumer, Identity};
use agent_surface_registry::{InvokeOptions, InvokeRequest, Registry};
use serde_json::Value;

/// A consumer key, an optional identity and a sequence of calls.
///
/// ```
/// use agent_surface_core::ErrorCode;
/// use agent_surface_registry::RegistryConfig;
/// use agent_surface_testing::{ScriptedConsumer, Shop, expect_error, expect_ok};
/// use serde_json::json;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let shop = Shop::new(RegistryConfig::default());
/// let results = ScriptedConsumer::new("session-1")
///     .call("cart.add", json!({"sku": "tea", "quantity": 2}))
///     .call("cart.add", json!({"sku": "tea", "quantity": 0}))
///     .run(shop.registry())
///     .await;
/// expect_ok(&results[0]);
/// expect_error(&results[1], ErrorCode::InvalidInput);
/// # });
/// ```
#[derive(Clone, Debug)]
pub struct ScriptedConsumer {
    consumer: Consumer,
    steps: Vec<InvokeRequest>,
}

impl ScriptedConsumer {
    /// An anonymous consumer with key `key` and no calls yet.
    pub fn new(key: &str) -> ScriptedConsumer {
        ScriptedConsumer { consumer: Consumer::anonymous(key), steps: Vec::new() }
    }

    /// A signed-in consumer with key `key` and no calls yet.
    pub fn signed_in(key: &str, identity: Identity) -> ScriptedConsumer {
        ScriptedConsumer { consumer: Consumer::authenticated(key, identity), steps: Vec::new() }
    }

    /// The same script with one more call of `capability` with `input`.
    pub fn call(self, capability: &str, input: Value) -> ScriptedConsumer {
        self.request(InvokeRequest::new(capability, input))
    }

    /// The same script with one more request (with an invocation id, a target, …).
    pub fn request(mut self, request: InvokeRequest) -> ScriptedConsumer {
        self.steps.push(request);
        self
    }

    /// The consumer.
    pub fn consumer(&self) -> &Consumer {
        &self.consumer
    }

    /// Invoke options for this consumer.
    pub fn options(&self) -> InvokeOptions {
        InvokeOptions::new(self.consumer.clone())
    }

    /// The scripted requests, in order.
    pub fn steps(&self) -> &[InvokeRequest] {
        &self.steps
    }

    /// Runs the calls one after the other against `registry` and returns their results in order.
    pub async fn run(&self, registry: &Registry) -> Vec<InvokeResult> {
        let mut results = Vec::with_capacity(self.steps.len());
        for step in &self.steps {
            results.push(registry.invoke(step.clone(), self.options()).await);
        }
        results
    }
}
