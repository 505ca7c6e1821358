//! Who is calling: the consumer key and the authenticated identity.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// An authenticated identity, as the host defines it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Identity {
    /// The subject (user id, service account).
    pub subject: String,
    /// Roles granted to the subject.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Further claims (tenant, scopes, …).
    #[serde(default)]
    pub claims: Map<String, Value>,
}

impl Identity {
    /// An identity with a subject and no roles or claims.
    pub fn new(subject: impl Into<String>) -> Identity {
        Identity { subject: subject.into(), roles: Vec::new(), claims: Map::new() }
    }

    /// The same identity with one more role.
    pub fn with_role(mut self, role: impl Into<String>) -> Identity {
        self.roles.push(role.into());
        self
    }

    /// The same identity with one more claim.
    pub fn with_claim(mut self, name: impl Into<String>, value: impl Into<Value>) -> Identity {
        self.claims.insert(name.into(), value.into());
        self
    }

    /// Whether the identity has `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }
}

/// The caller of an invocation: a consumer key (one agent session, one MCP session, one API
/// client) and, when signed in, an identity.
///
/// The consumer key scopes idempotency records, confirmations and rate limits: two consumers
/// never share them.
///
/// ```
/// use agent_surface_policy::{Consumer, Identity};
/// let c = Consumer::authenticated("session-1", Identity::new("user-7").with_role("support"));
/// assert_eq!(c.key(), "session-1");
/// assert!(c.identity().unwrap().has_role("support"));
/// assert!(Consumer::anonymous("session-2").identity().is_none());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Consumer {
    key: Arc<str>,
    identity: Option<Arc<Identity>>,
}

impl Consumer {
    /// A consumer that is not signed in.
    pub fn anonymous(key: impl Into<Arc<str>>) -> Consumer {
        Consumer { key: key.into(), identity: None }
    }

    /// A signed-in consumer.
    pub fn authenticated(key: impl Into<Arc<str>>, identity: Identity) -> Consumer {
        Consumer { key: key.into(), identity: Some(Arc::new(identity)) }
    }

    /// The consumer key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The identity, when signed in.
    pub fn identity(&self) -> Option<&Identity> {
        self.identity.as_deref()
    }
}
