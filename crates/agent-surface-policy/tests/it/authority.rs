//! `Policies`: evaluation order, first non-`Allow` wins, fail-closed evaluation, budgets on a
//! manual clock, and the ready-made policies.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_surface_core::details::Origin;
use agent_surface_core::{Effect, SafeText};
use agent_surface_policy::{
    AuthorityDecision, AuthorityPolicy, CallInfo, Consumer, Fallback, FnPolicy, Identity, ManualClock, Policies,
    PolicyError, RequireIdentity, RequireRole,
};
use agent_surface_testing::Misbehaving;
use futures_util::future::BoxFuture;

const DENY: AuthorityDecision = AuthorityDecision::Deny { origin: Origin::Client };

/// Records the order in which policies are asked, and answers `decision`.
struct Recorder {
    name: &'static str,
    log: Arc<std::sync::Mutex<Vec<&'static str>>>,
    decision: AuthorityDecision,
}

impl AuthorityPolicy for Recorder {
    fn name(&self) -> &str {
        self.name
    }
    fn decide<'a>(&'a self, _call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>> {
        self.log.lock().unwrap().push(self.name);
        Box::pin(std::future::ready(Ok(self.decision.clone())))
    }
}

fn call<'a>(consumer: &'a Consumer, capability: &'a str) -> CallInfo<'a> {
    let type_id = capability.split_once('.').map_or("", |(t, _)| t);
    CallInfo::new(consumer, capability, type_id, Effect::Write, false)
}

#[tokio::test]
async fn global_then_type_then_capability_first_refusal_wins() {
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let rec = |name, decision| Recorder { name, log: log.clone(), decision };
    let policies = Policies::default_allow()
        .for_capability("orders.cancel", rec("cap", AuthorityDecision::Hide))
        .for_type("orders", rec("type-1", AuthorityDecision::Allow))
        .global(rec("global", AuthorityDecision::Allow))
        .for_type("orders", rec("type-2", AuthorityDecision::Allow))
        .for_capability("orders.cancel", rec("cap-after", DENY));
    assert_eq!(policies.len(), 5);
    let consumer = Consumer::anonymous("c");

    let verdict = policies.evaluate(call(&consumer, "orders.cancel")).await;
    assert_eq!(verdict.decision, AuthorityDecision::Hide);
    assert_eq!(verdict.decided_by, Some("cap"));
    assert!(!verdict.failed);
    // The policy after the first refusal is never asked.
    assert_eq!(*log.lock().unwrap(), ["global", "type-1", "type-2", "cap"]);

    log.lock().unwrap().clear();
    let verdict = policies.evaluate(call(&consumer, "orders.list")).await;
    assert_eq!((verdict.decision, verdict.decided_by), (AuthorityDecision::Allow, None));
    assert_eq!(*log.lock().unwrap(), ["global", "type-1", "type-2"]);

    log.lock().unwrap().clear();
    let verdict = policies.evaluate(call(&consumer, "nothing")).await;
    assert_eq!(verdict.decision, AuthorityDecision::Allow);
    assert_eq!(*log.lock().unwrap(), ["global"]);
}

#[tokio::test]
async fn an_empty_engine_refuses_everything_unless_asked_to_allow() {
    let consumer = Consumer::anonymous("c");
    for empty in [Policies::default(), Policies::new(), Policies::default_deny()] {
        assert!(empty.is_empty());
        assert_eq!(empty.fallback(), Fallback::Deny);
        let verdict = empty.evaluate(call(&consumer, "a.b")).await;
        assert_eq!(verdict.decision, AuthorityDecision::Deny { origin: Origin::Client });
        assert_eq!(verdict.decided_by, Some("default-deny"));
    }
    let open = Policies::default_allow();
    assert!(open.is_empty());
    assert_eq!(open.evaluate(call(&consumer, "a.b")).await.decision, AuthorityDecision::Allow);
}

#[tokio::test]
async fn errors_panics_and_overruns_deny() {
    let clock = Arc::new(ManualClock::default());
    let after = Arc::new(AtomicUsize::new(0));
    let counter = after.clone();
    let policies = Policies::default_allow()
        .with_clock(clock.clone())
        .with_budget(Duration::from_millis(100))
        .for_capability("x.error", Misbehaving::fails("errors", "backend down"))
        .for_capability("x.panic", Misbehaving::panics("panics", "bug"))
        .for_capability("x.late-panic", Misbehaving::panics_later("panics-while-running", "bug"))
        .for_capability("x.hang", Misbehaving::hangs("hangs"))
        .global(FnPolicy::new("first", |_c| Ok(AuthorityDecision::Allow)))
        .for_capability(
            "x.error",
            FnPolicy::new("never-asked", move |_c| {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(AuthorityDecision::Allow)
            }),
        );
    let consumer = Consumer::anonymous("c");
    for (capability, name) in [("x.error", "errors"), ("x.panic", "panics"), ("x.late-panic", "panics-while-running")] {
        let verdict = policies.evaluate(call(&consumer, capability)).await;
        assert_eq!(verdict.decision, DENY, "{capability}");
        assert_eq!(verdict.decided_by, Some(name));
        assert!(verdict.failed);
    }
    assert_eq!(after.load(Ordering::SeqCst), 0, "a failure ends the evaluation");
    // Answering at once never arms a timer.
    assert_eq!(clock.pending_sleeps(), 0);

    let hang = {
        let policies = policies.clone();
        tokio::spawn(async move {
            let consumer = Consumer::anonymous("c");
            let verdict = policies.evaluate(call(&consumer, "x.hang")).await;
            (verdict.decision, verdict.decided_by.map(String::from), verdict.failed)
        })
    };
    while clock.pending_sleeps() == 0 {
        tokio::task::yield_now().await;
    }
    clock.advance(Duration::from_millis(99));
    tokio::task::yield_now().await;
    assert!(!hang.is_finished());
    clock.advance(Duration::from_millis(1));
    assert_eq!(hang.await.unwrap(), (DENY, Some("hangs".to_string()), true));
}

#[tokio::test]
async fn engines_nest() {
    let inner = Policies::default_allow().global(RequireIdentity);
    let outer = Policies::default_allow().for_type("orders", inner);
    let anonymous = Consumer::anonymous("c");
    let verdict = outer.evaluate(call(&anonymous, "orders.list")).await;
    assert_eq!(verdict.decision, AuthorityDecision::Unauthenticated);
    assert_eq!(verdict.decided_by, Some("policies"));
    assert_eq!(outer.evaluate(call(&anonymous, "shop.list")).await.decision, AuthorityDecision::Allow);
}

#[tokio::test]
async fn ready_made_policies() {
    let anonymous = Consumer::anonymous("c");
    let user = Consumer::authenticated("u", Identity::new("u"));
    let admin = Consumer::authenticated("a", Identity::new("a").with_role("admin"));
    let role = RequireRole::new("admin");
    let hidden = RequireRole::new("admin").or_hide();
    let cases = [
        (&anonymous, AuthorityDecision::Unauthenticated, AuthorityDecision::Unauthenticated, AuthorityDecision::Hide),
        (&user, AuthorityDecision::Allow, DENY, AuthorityDecision::Hide),
        (&admin, AuthorityDecision::Allow, AuthorityDecision::Allow, AuthorityDecision::Allow),
    ];
    for (who, identity, with_role, or_hide) in cases {
        assert_eq!(RequireIdentity.decide(call(who, "a.b")).await.unwrap(), identity);
        assert_eq!(role.decide(call(who, "a.b")).await.unwrap(), with_role);
        assert_eq!(hidden.decide(call(who, "a.b")).await.unwrap(), or_hide);
        // Each decides at once, as it decides.
        assert_eq!(RequireIdentity.decide_at_once(&call(who, "a.b")).unwrap().unwrap(), identity);
        assert_eq!(role.decide_at_once(&call(who, "a.b")).unwrap().unwrap(), with_role);
        assert_eq!(hidden.decide_at_once(&call(who, "a.b")).unwrap().unwrap(), or_hide);
    }
    assert_eq!(hidden.name(), "require-role");
    let disable = FnPolicy::new("closed", |_c| Ok(AuthorityDecision::Disable { reason: SafeText::from("Closed.") }));
    assert_eq!(disable.name(), "closed");
    assert!(format!("{disable:?}").contains("closed"));
    assert!(format!("{:?}", Policies::default_allow().global(disable)).contains("closed"));
}

/// An engine decides at once when every policy it asks does, with the decision, the deciding
/// policy and the failures its evaluation through `decide` gives; a policy that needs an await
/// (one without `decide_at_once`) leaves it undecided, unless a policy before it already refused.
#[tokio::test]
async fn an_engine_decides_at_once_when_every_policy_it_asks_does() {
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let awaits = |decision| Recorder { name: "awaits", log: log.clone(), decision };
    let user = Consumer::authenticated("u", Identity::new("u"));
    let anonymous = Consumer::anonymous("c");
    let engine = Policies::default_deny()
        .global(RequireIdentity)
        .for_type("orders", FnPolicy::new("orders-open", |_| Ok(AuthorityDecision::Allow)))
        .for_capability("orders.cancel", RequireRole::new("admin").or_hide())
        .for_type("shop", awaits(AuthorityDecision::Allow))
        .for_type("broken", FnPolicy::new("broken", |_| panic!("bug: ldap://10.0.0.7")))
        .for_type("failing", FnPolicy::new("failing", |_| Err(PolicyError::new("directory down"))))
        .for_type("nested", Policies::default_allow().global(RequireRole::new("nested")))
        .for_type("wrapped", Arc::new(Policies::default_allow().global(RequireRole::new("nested"))));
    let cases: [(&Consumer, &str); 10] = [
        (&user, "wrapped.run"),
        (&user, "orders.list"),
        (&user, "orders.cancel"),
        (&anonymous, "orders.list"),
        (&anonymous, "shop.list"),
        (&user, "broken.run"),
        (&user, "failing.run"),
        (&user, "nested.run"),
        (&user, "unnamed.run"),
        (&user, "shop.list"),
    ];
    for (who, capability) in cases {
        let at_once = engine.decide_noted_at_once(&call(who, capability));
        let awaited = engine.decide_noted(call(who, capability)).await.unwrap();
        if capability == "shop.list" && who.identity().is_some() {
            assert!(at_once.is_none(), "a policy that awaits leaves the engine undecided at once");
        } else {
            assert_eq!(at_once.unwrap().unwrap(), awaited, "{capability}");
        }
    }
    // Refused by the global policy at once, the anonymous call never reached the policy that awaits.
    assert_eq!(*log.lock().unwrap(), ["awaits"], "asked through decide only, once");
    let failed = engine.decide_noted_at_once(&call(&user, "broken.run")).unwrap().unwrap();
    assert_eq!((failed.decision, failed.by.as_str(), failed.wants), (DENY, "broken", None));
    let hidden = engine.decide_at_once(&call(&user, "orders.cancel")).unwrap().unwrap();
    assert_eq!(hidden, AuthorityDecision::Hide);
    let nested = engine.decide_noted_at_once(&call(&user, "nested.run")).unwrap().unwrap();
    assert_eq!((nested.decision, nested.by.as_str()), (DENY, "require-role"), "the nested engine's own policy");
    let unnamed = engine.decide_noted_at_once(&call(&user, "unnamed.run")).unwrap().unwrap();
    assert_eq!((unnamed.decision, unnamed.by.as_str()), (DENY, "default-deny"));
}
