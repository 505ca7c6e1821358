//! Who is calling: the consumer key and the authenticated identity.

use std::sync::{Arc, OnceLock};

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

    /// The key of the principal this identity names: `principal:` and the JSON array of its
    /// issuer (when the identity carries an `iss` claim) and subject — the same on every request,
    /// session, transport and replica, and unambiguous whatever the strings hold.
    ///
    /// Budgets, approvals and the memory of relayed confirmations of a signed-in caller are
    /// keyed on it ([`Consumer::principal`]), so that "per user" means per user whichever
    /// transport, session or header the call came through.
    ///
    /// ```
    /// use agent_surface_policy::Identity;
    /// assert_eq!(Identity::new("alice").principal_key(), r#"principal:["alice"]"#);
    /// let issued = Identity::new("alice").with_claim("iss", "https://id.example");
    /// assert_eq!(issued.principal_key(), r#"principal:["https://id.example","alice"]"#);
    /// // A subject that looks like a pair cannot pass for one.
    /// assert_ne!(Identity::new(r#"a","b"#).principal_key(), Identity::new("b").with_claim("iss", "a").principal_key());
    /// ```
    pub fn principal_key(&self) -> String {
        let parts: Vec<&str> = match self.claims.get("iss").and_then(Value::as_str) {
            Some(issuer) => vec![issuer, self.subject.as_str()],
            None => vec![self.subject.as_str()],
        };
        // Serializing a list of strings cannot fail.
        format!("principal:{}", serde_json::to_string(&parts).unwrap_or_default())
    }
}

/// The caller of an invocation: a consumer key (one agent session, one MCP session, one API
/// client) and, when signed in, an identity.
///
/// Two keys follow from it:
///
/// - the **consumer key** ([`Consumer::key`]) names one session of a caller: audit events and
///   the operator log show it, and it scopes MCP tasks;
/// - the **principal** ([`Consumer::principal`]) scopes what belongs to the person: the
///   namespace of invocation ids and idempotency keys (a retry that comes back through another
///   session or transport is the same call), rate budgets, confirmations (the evidence is bound
///   to it) and the memory of relayed confirmations. For a signed-in caller it is
///   [`Identity::principal_key`], the same whatever session, header or transport the call came
///   through, so one user can neither widen a "per user" budget, split an approval, nor run a
///   write twice by opening another session. For an anonymous caller it is the consumer key:
///   nothing proves two anonymous sessions are one person.
///
/// ```
/// use agent_surface_policy::{Consumer, Identity};
/// let c = Consumer::authenticated("session-1", Identity::new("user-7").with_role("support"));
/// assert_eq!(c.key(), "session-1");
/// assert_eq!(c.principal(), r#"principal:["user-7"]"#);
/// assert!(c.identity().unwrap().has_role("support"));
/// // Another session of the same person: another consumer key, the same principal.
/// let other = Consumer::authenticated("session-9", Identity::new("user-7"));
/// assert_eq!(other.principal(), c.principal());
/// let anonymous = Consumer::anonymous("session-2");
/// assert!(anonymous.identity().is_none());
/// assert_eq!(anonymous.principal(), "session-2");
/// ```
#[derive(Clone, Debug)]
pub struct Consumer {
    key: Arc<str>,
    identity: Option<Arc<Identity>>,
    /// The principal key of a signed-in consumer, made when first asked for.
    principal: OnceLock<Arc<str>>,
}

/// Two consumers are equal when their keys and identities are.
impl PartialEq for Consumer {
    fn eq(&self, other: &Consumer) -> bool {
        self.key == other.key && self.identity == other.identity
    }
}

impl Consumer {
    /// A consumer that is not signed in.
    pub fn anonymous(key: impl Into<Arc<str>>) -> Consumer {
        Consumer { key: key.into(), identity: None, principal: OnceLock::new() }
    }

    /// A signed-in consumer.
    pub fn authenticated(key: impl Into<Arc<str>>, identity: Identity) -> Consumer {
        Consumer { key: key.into(), identity: Some(Arc::new(identity)), principal: OnceLock::new() }
    }

    /// A signed-in consumer keyed on its principal ([`Identity::principal_key`]), as the MCP
    /// adapter keys callers its authenticator signed in: the key is the principal, built once and
    /// shared (with [`Consumer::authenticated`] and that key, [`Consumer::principal`] would build
    /// the principal key a second time to find it equal).
    ///
    /// ```
    /// use agent_surface_policy::{Consumer, Identity};
    /// let c = Consumer::signed_in(Identity::new("user-7"));
    /// assert_eq!(c.key(), r#"principal:["user-7"]"#);
    /// assert!(std::ptr::eq(c.key(), c.principal()), "one string, not two");
    /// assert_eq!(c, Consumer::authenticated(r#"principal:["user-7"]"#, Identity::new("user-7")));
    /// ```
    pub fn signed_in(identity: Identity) -> Consumer {
        let key: Arc<str> = identity.principal_key().into();
        Consumer { key: key.clone(), identity: Some(Arc::new(identity)), principal: OnceLock::from(key) }
    }

    /// A signed-in consumer keyed on one session of its principal: the key is `prefix`, the
    /// principal ([`Identity::principal_key`]) and `suffix`, and the principal is built once for
    /// both (as the HTTP binding keys a caller: `http:{principal}:{session}`).
    ///
    /// ```
    /// use agent_surface_policy::{Consumer, Identity};
    /// let c = Consumer::signed_in_session("http:", Identity::new("user-7"), ":default");
    /// assert_eq!(c.key(), r#"http:principal:["user-7"]:default"#);
    /// assert_eq!(c.principal(), r#"principal:["user-7"]"#);
    /// assert_eq!(c, Consumer::authenticated(r#"http:principal:["user-7"]:default"#, Identity::new("user-7")));
    /// ```
    pub fn signed_in_session(prefix: &str, identity: Identity, suffix: &str) -> Consumer {
        let principal: Arc<str> = identity.principal_key().into();
        let key: Arc<str> = format!("{prefix}{principal}{suffix}").into();
        Consumer { key, identity: Some(Arc::new(identity)), principal: OnceLock::from(principal) }
    }

    /// The consumer key: one session of the caller (see [`Consumer`]).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The principal: [`Identity::principal_key`] when signed in, else the consumer key (see
    /// [`Consumer`]). Rate budgets, confirmations and relayed confirmations are keyed on it.
    pub fn principal(&self) -> &str {
        match &self.identity {
            None => &self.key,
            Some(identity) => self.principal.get_or_init(|| {
                let principal = identity.principal_key();
                // The MCP adapter keys signed-in callers on the principal already.
                if *principal == *self.key { self.key.clone() } else { principal.into() }
            }),
        }
    }

    /// The identity, when signed in.
    pub fn identity(&self) -> Option<&Identity> {
        self.identity.as_deref()
    }
}
