//! What `Serve` says at startup of where the service keeps its state. A binary of its own: it
//! captures the operator log, which a test that lets `Serve` install its own log would take.

use agent_surface::{Serve, ServiceBuilder};

mod support;

/// What `bind` logs at WARN (the operator log's default) for a service on the default (memory)
/// stores, with `public_url`, listening on `addr`. People approve elsewhere (no inbox served).
fn warnings(public_url: Option<&str>, addr: &'static str) -> String {
    let mut builder = ServiceBuilder::new().approval_base_url("https://desk.example/approve/");
    if let Some(url) = public_url {
        builder = builder.public_url(url);
    }
    warnings_of(builder, addr)
}

/// What `bind` logs at WARN for the service `builder` makes, listening on `addr`, with no inbox.
fn warnings_of(builder: ServiceBuilder, addr: &'static str) -> String {
    let ((), log) = agent_surface_testing::capture_operator_log_at(tracing::Level::WARN, || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async {
            let (service, _mount) = support::refunds_on(builder);
            let running = Serve::new(service).operator_log(false).bind(addr).await.expect("serves");
            running.stop();
            running.stopped().await.expect("drains");
        });
    });
    log
}

/// Approval links derived from the public URL point at this server's inbox: a server that does
/// not serve it says so at startup, naming the fixes (a person sent there would find "no such
/// confirmation"); links to where people do approve are not reported.
#[test]
fn approval_links_to_an_inbox_this_server_does_not_serve_are_reported_at_startup() {
    const REPORT: &str = "approval links point at the inbox under ServiceBuilder::public_url";
    let log = warnings_of(ServiceBuilder::new().public_url("https://refunds.example"), "127.0.0.1:0");
    assert!(log.contains(REPORT) && log.contains("approval_base_url=https://refunds.example/inbox/c/"), "{log}");
    assert!(log.contains("Serve::approvers") && log.contains("ServiceBuilder::approval_base_url"), "{log}");
    // An explicit base to the same place is the same inbox.
    let same = ServiceBuilder::new()
        .public_url("https://refunds.example")
        .approval_base_url("https://Refunds.example/inbox/c");
    assert!(warnings_of(same, "127.0.0.1:0").contains(REPORT));
    // People approve elsewhere: nothing to report.
    assert!(!warnings(Some("https://refunds.example"), "127.0.0.1:0").contains(REPORT));
}

/// A service agents reach from elsewhere (here: its public URL names another host) whose stores
/// keep their records in this process only is told so at startup, naming them and what to use
/// instead; one tried on this machine is not.
#[test]
fn process_only_stores_are_reported_at_startup_when_the_service_is_reachable() {
    let log = warnings(Some("https://refunds.example"), "127.0.0.1:0");
    assert!(log.contains("keep their records in this process's memory only"), "{log}");
    // The stores this service uses (no rate budgets, no inbox served), and what each loses.
    assert!(log.contains("stores=idempotency, confirmations\n"), "{log}");
    assert!(log.contains("a retried call may run again") && log.contains("people are asked again"), "{log}");
    assert!(!log.contains("rate budgets") && !log.contains("sign-ins"), "{log}");
    assert!(log.contains("agent-surface-sqlite"), "{log}");
    // Tried on this machine: no public URL, or one that names this machine, as the guide's.
    for local in [None, Some("http://127.0.0.1:8787"), Some("http://localhost:8787"), Some("http://[::1]:8787")] {
        let log = warnings(local, "127.0.0.1:0");
        assert!(!log.contains("this process's memory only"), "{local:?}: {log}");
    }
}

/// Turning in-person approval off on a service that gives agents no approval page leaves nobody
/// to approve through what `Serve` serves: said at startup. With an approval page, nothing.
#[test]
fn nowhere_to_approve_is_reported_at_startup() {
    const REPORT: &str = "in-person approval is off and agents are given no approval page";
    let run = |builder: ServiceBuilder| {
        let ((), log) = agent_surface_testing::capture_operator_log_at(tracing::Level::WARN, || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            runtime.block_on(async {
                let (service, _mount) = support::refunds_on(builder);
                let serve = Serve::new(service).operator_log(false).in_person_approval(false);
                let running = serve.bind("127.0.0.1:0").await.expect("serves");
                running.stop();
                running.stopped().await.expect("drains");
            });
        });
        log
    };
    assert!(run(ServiceBuilder::new()).contains(REPORT));
    assert!(!run(ServiceBuilder::new().approval_base_url("https://desk.example/approve/")).contains(REPORT));
}

/// A public URL with a path is said at startup (INFO): the links keep the path, the server answers
/// at its root, so a proxy in front must strip it. One without a path says nothing of it.
#[test]
fn a_public_url_with_a_path_is_reported_at_startup() {
    let run = |url: &'static str| {
        let ((), log) = agent_surface_testing::capture_operator_log_at(tracing::Level::INFO, || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            runtime.block_on(async {
                let (service, _mount) = support::refunds_on(ServiceBuilder::new().public_url(url));
                let running = Serve::new(service).operator_log(false).bind("127.0.0.1:0").await.expect("serves");
                running.stop();
                running.stopped().await.expect("drains");
            });
        });
        log
    };
    let log = run("https://refunds.example/expenses/");
    assert!(log.contains("public_url has the path /expenses") && log.contains("must strip /expenses"), "{log}");
    assert!(!run("https://refunds.example/").contains("has the path"));
}
