//! The audit trail: the JSON Lines sink (whole lines through crashes and failed writes) and the
//! confirmation engine's events.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_surface_core::{Effect, SafeText, Timestamp};
use agent_surface_policy::{
    AuditEvent, AuditKind, AuditOutcome, AuditSink, AuditVerdict, CallInfo, Clock, ConfirmationConfig,
    ConfirmationDecision, ConfirmationEngine, ConfirmationGate, Consumer, Identity, JsonLinesAuditSink, ManualClock,
    MemoryAuditSink, idempotency::Fingerprint,
};
use serde_json::json;

fn temp_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agent-surface-audit-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("audit.jsonl");
    let _ = std::fs::remove_file(&path);
    path
}

fn event(i: u64) -> AuditEvent {
    let mut e = AuditEvent::new(
        Timestamp::from_unix_millis(1_795_957_200_000 + i),
        AuditKind::ExecutionStarted { effect: Effect::Destructive },
        "orders.cancel",
        "session-1",
    );
    e.invocation_id = Some(format!("inv-{i}"));
    e
}

/// Every line of the file is a whole event; returns them.
#[track_caller]
fn whole_lines(path: &Path) -> Vec<AuditEvent> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the file ends with a whole line: {:?}",
        &text[text.len().saturating_sub(80)..]
    );
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("torn line {l:?}: {e}"))).collect()
}

#[tokio::test]
async fn a_torn_last_line_is_cut_when_the_file_is_opened_again() {
    let path = temp_file("torn");
    let sink = JsonLinesAuditSink::open(&path).unwrap();
    for i in 0..3 {
        sink.record(&event(i)).await.unwrap();
    }
    drop(sink);
    // A crash in the middle of the fourth write: part of its line reached the disk.
    let line = serde_json::to_string(&event(3)).unwrap();
    let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut file, &line.as_bytes()[..line.len() / 2]).unwrap();
    drop(file);
    assert!(std::fs::read_to_string(&path).unwrap().lines().count() == 4);

    let sink = JsonLinesAuditSink::open(&path).unwrap();
    assert_eq!(whole_lines(&path).len(), 3, "the partial line is gone");
    // Said at open with no log yet: kept for the one installed later (no other test of this
    // binary takes the process's list).
    let warned = agent_surface_policy::wiring::take_unrecorded();
    let cut = format!("the audit file {}: cut a partial last line of {} bytes", path.display(), line.len() / 2);
    assert!(warned.iter().any(|w| w.starts_with(&cut)), "{warned:?}");
    sink.record(&event(4)).await.unwrap();
    let events = whole_lines(&path);
    assert_eq!(
        events.iter().map(|e| e.invocation_id.clone().unwrap()).collect::<Vec<_>>(),
        ["inv-0", "inv-1", "inv-2", "inv-4"]
    );
    assert_eq!(sink.recent(2).await.unwrap(), vec![event(2), event(4)]);
}

#[tokio::test]
async fn a_file_of_one_torn_line_is_emptied() {
    let path = temp_file("only-torn");
    std::fs::write(&path, b"{\"at\":\"2026-").unwrap();
    let sink = JsonLinesAuditSink::open(&path).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    sink.record(&event(1)).await.unwrap();
    assert_eq!(whole_lines(&path), vec![event(1)]);
}

/// The child of [`a_writer_killed_mid_stream_leaves_whole_lines`]: appends events until killed.
#[tokio::test]
#[ignore = "run as a child process by a_writer_killed_mid_stream_leaves_whole_lines"]
async fn audit_child_writer() {
    let path = std::env::var("AUDIT_CHILD_PATH").expect("AUDIT_CHILD_PATH");
    let sink = JsonLinesAuditSink::open(&path).unwrap();
    let mut e = event(0);
    // Long lines, so that a kill is likely to land while a line is being written.
    e.capability = format!("orders.{}", "x".repeat(8 * 1024));
    for i in 0.. {
        e.invocation_id = Some(format!("inv-{i}"));
        sink.record(&e).await.unwrap();
    }
}

#[tokio::test]
async fn a_writer_killed_mid_stream_leaves_whole_lines() {
    let path = temp_file("killed");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "audit::audit_child_writer", "--nocapture"])
        .env("AUDIT_CHILD_PATH", &path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Let it write a while, then kill it without warning.
    let mut lines = 0;
    while lines < 50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        lines = std::fs::read(&path).map(|b| b.iter().filter(|c| **c == b'\n').count()).unwrap_or(0);
        assert!(child.try_wait().unwrap().is_none(), "the writer exited on its own");
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let sink = JsonLinesAuditSink::open(&path).unwrap();
    let events = whole_lines(&path);
    assert!(events.len() >= 50, "{} events", events.len());
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.invocation_id.as_deref(), Some(format!("inv-{i}").as_str()), "events in order, none lost between");
    }
    sink.record(&event(9)).await.unwrap();
    assert_eq!(whole_lines(&path).last(), Some(&event(9)));
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_failed_write_is_an_error_and_the_sink_refuses_until_reopened() {
    // /dev/full accepts opening and refuses every write (ENOSPC); it cannot be cut back either.
    let sink = JsonLinesAuditSink::open("/dev/full").unwrap();
    let first = sink.record(&event(1)).await.unwrap_err();
    assert!(first.to_string().contains("audit sink unavailable"), "{first}");
    let second = sink.record(&event(2)).await.unwrap_err();
    assert!(second.to_string().contains("unusable until reopened"), "{second}");
}

#[tokio::test]
async fn a_sink_that_panics_or_hangs_is_a_failed_write() {
    #[derive(Debug)]
    struct Panicking;
    impl AuditSink for Panicking {
        fn record<'a>(
            &'a self,
            _: &'a AuditEvent,
        ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::AuditError>> {
            panic!("disk driver bug")
        }
    }
    #[derive(Debug)]
    struct Hanging;
    impl AuditSink for Hanging {
        fn record<'a>(
            &'a self,
            _: &'a AuditEvent,
        ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::AuditError>> {
            Box::pin(std::future::pending())
        }
    }
    let clock = ManualClock::default();
    let e = agent_surface_policy::audit::record_within(&Panicking, &clock, Duration::from_secs(1), &event(1))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("panicked"), "{e}");
    let one = event(1);
    let hanging = agent_surface_policy::audit::record_within(&Hanging, &clock, Duration::from_secs(1), &one);
    let advance = async {
        tokio::task::yield_now().await;
        clock.advance(Duration::from_secs(2));
    };
    let (e, ()) = tokio::join!(hanging, advance);
    assert!(e.unwrap_err().to_string().contains("within 1000 ms"));
}

struct Engine {
    clock: Arc<ManualClock>,
    engine: ConfirmationEngine,
    sink: Arc<MemoryAuditSink>,
}

fn engine() -> Engine {
    let clock = Arc::new(ManualClock::default());
    let sink = Arc::new(MemoryAuditSink::default());
    let engine = ConfirmationEngine::new(ConfirmationConfig {
        clock: clock.clone(),
        ttl: Duration::from_secs(60),
        audit: Some(sink.clone()),
        ..Default::default()
    });
    Engine { clock, engine, sink }
}

#[tokio::test]
async fn the_engine_records_requested_decided_consumed_and_expired() {
    let Engine { clock, engine, sink } = engine();
    let requester = Consumer::authenticated("session-1", Identity::new("alice"));
    let input = json!({"order_id": "A-1", "card": "4111 1111 1111 1111"});
    let summary = SafeText::from("Cancel order A-1.");
    let call = CallInfo::new(&requester, "orders.cancel", "orders", Effect::Destructive, false)
        .with_instance("main")
        .with_registration("r-1")
        .with_input(&input)
        .with_declared_gate(Some(&summary))
        .with_ids(Some("inv-1"), "corr-1");
    let ConfirmationDecision::Required { confirmation_id: id, .. } = engine.check(call, None, clock.now()).await else {
        panic!()
    };
    engine.approve_with_note(&id, &Identity::new("manager"), Some("  fine by me  ")).await.unwrap();
    assert_eq!(
        engine.check(call.with_ids(Some("inv-2"), "corr-2"), Some(&id), clock.now()).await,
        ConfirmationDecision::Proceed
    );

    // A second request, left to expire, then presented.
    let ConfirmationDecision::Required { confirmation_id: late, .. } = engine.check(call, None, clock.now()).await
    else {
        panic!()
    };
    clock.advance(Duration::from_secs(61));
    assert!(matches!(engine.check(call, Some(&late), clock.now()).await, ConfirmationDecision::Invalid(_)));
    assert!(engine.deny(&late, &Identity::new("manager")).await.is_err());

    let events = sink.events();
    let names: Vec<_> = events.iter().map(AuditEvent::name).collect();
    assert_eq!(
        names,
        [
            "confirmation.requested",
            "confirmation.decided",
            "confirmation.consumed",
            "confirmation.requested",
            // Once, though met twice (the evidence presented, then a late denial).
            "confirmation.expired",
        ]
    );
    let digest = Fingerprint::of(&input).to_string();
    for e in &events {
        assert_eq!((e.capability.as_str(), e.consumer.as_str()), ("orders.cancel", "session-1"), "{e:?}");
        assert_eq!(e.principal.as_deref(), Some("alice"));
        assert_eq!(e.input_digest.as_deref(), Some(digest.as_str()));
        // Never the input itself.
        assert!(!serde_json::to_string(e).unwrap().contains("4111"));
    }
    assert_eq!(events[0].confirmation_id.as_deref(), Some(id.as_str()));
    assert_eq!(events[0].correlation_id.as_deref(), Some("corr-1"));
    assert!(matches!(events[0].kind, AuditKind::ConfirmationRequested { effect: Effect::Destructive, .. }));
    assert_eq!(
        events[1].kind,
        AuditKind::ConfirmationDecided {
            verdict: AuditVerdict::Approve,
            approver: "manager".into(),
            note: Some("fine by me".into())
        }
    );
    let ids = |e: &AuditEvent| (e.invocation_id.clone(), e.correlation_id.clone());
    let requesting = (Some("inv-1".to_string()), Some("corr-1".to_string()));
    assert_eq!(ids(&events[1]), requesting, "a decision carries the ids of the call that requested it");
    assert_eq!(events[2].kind, AuditKind::ConfirmationConsumed { approved_by: "manager".into() });
    assert_eq!(
        ids(&events[2]),
        (Some("inv-2".to_string()), Some("corr-2".to_string())),
        "the call that used the evidence"
    );
    assert_eq!(events[4].confirmation_id.as_deref(), Some(late.as_str()));
    let _ = AuditOutcome::Ok;
}

/// The events of a confirmation that no call causes — a decision, an expiry found through a
/// late decision — carry the invocation and correlation ids of the call that requested it, as
/// the request did; a caller without an invocation id leaves that field out.
#[tokio::test]
async fn decisions_and_expiries_carry_the_requesting_calls_ids() {
    let Engine { clock, engine, sink } = engine();
    let requester = Consumer::authenticated("session-1", Identity::new("alice"));
    let summary = SafeText::from("Cancel the order.");
    let inputs = [json!({"order_id": "A-1"}), json!({"order_id": "A-2"}), json!({"order_id": "A-3"})];
    let call = |input| {
        CallInfo::new(&requester, "orders.cancel", "orders", Effect::Destructive, false)
            .with_instance("main")
            .with_registration("r-1")
            .with_input(input)
            .with_declared_gate(Some(&summary))
    };
    let (engine, clock) = (&engine, &clock);
    let request = |call| async move {
        match engine.check(call, None, clock.now()).await {
            ConfirmationDecision::Required { confirmation_id, .. } => confirmation_id,
            other => panic!("{other:?}"),
        }
    };
    let denied = request(call(&inputs[0]).with_ids(Some("inv-d"), "corr-d")).await;
    let approved = request(call(&inputs[1]).with_ids(None, "corr-a")).await;
    let expired = request(call(&inputs[2]).with_ids(Some("inv-e"), "corr-e")).await;
    engine.deny(&denied, &Identity::new("manager")).await.unwrap();
    engine.approve_in_person(&approved, "host-ui").await.unwrap();
    clock.advance(Duration::from_secs(61));
    assert!(engine.approve(&expired, &Identity::new("manager")).await.is_err());

    let later: Vec<(String, Option<String>, Option<String>)> = sink
        .events()
        .into_iter()
        .filter(|e| !matches!(e.kind, AuditKind::ConfirmationRequested { .. }))
        .map(|e| (e.name().to_string(), e.invocation_id, e.correlation_id))
        .collect();
    let some = |s: &str| Some(s.to_string());
    assert_eq!(
        later,
        [
            ("confirmation.decided".to_string(), some("inv-d"), some("corr-d")),
            ("confirmation.decided".to_string(), None, some("corr-a")),
            ("confirmation.expired".to_string(), some("inv-e"), some("corr-e")),
        ]
    );
}

#[tokio::test]
async fn a_failing_sink_changes_no_decision() {
    #[derive(Debug)]
    struct Broken;
    impl AuditSink for Broken {
        fn record<'a>(
            &'a self,
            _: &'a AuditEvent,
        ) -> futures_util::future::BoxFuture<'a, Result<(), agent_surface_policy::AuditError>> {
            Box::pin(std::future::ready(Err(agent_surface_policy::AuditError::new("disk full"))))
        }
    }
    let clock = Arc::new(ManualClock::default());
    let engine = ConfirmationEngine::new(ConfirmationConfig {
        clock: clock.clone(),
        audit: Some(Arc::new(Broken)),
        ..Default::default()
    });
    let requester = Consumer::anonymous("session-1");
    let input = json!({});
    let call = CallInfo::new(&requester, "orders.cancel", "orders", Effect::Destructive, false)
        .with_input(&input)
        .with_declared_gate(None);
    let ConfirmationDecision::Required { confirmation_id: id, .. } = engine.check(call, None, clock.now()).await else {
        panic!()
    };
    engine.approve(&id, &Identity::new("manager")).await.unwrap();
    assert_eq!(engine.check(call, Some(&id), clock.now()).await, ConfirmationDecision::Proceed);
}
