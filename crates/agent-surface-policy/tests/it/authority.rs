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
    }
    assert_eq!(hidden.name(), "require-role");
    let disable = FnPolicy::new("closed", |_c| Ok(AuthorityDecision::Disable { reason: SafeText::from("Closed.") }));
    assert_eq!(disable.name(), "closed");
    assert!(format!("{disable:?}").contains("closed"));
    assert!(format!("{:?}", Policies::default_allow().global(disable)).contains("closed"));
}
