//! Hostile causes: nothing from an unknown error's text reaches the agent channel.

use std::fmt;

use agent_surface_core::{AgentSurfaceError, ErrorCode, InvokeResult};

const SECRETS: &[&str] = &[
    "SELECT card_number FROM payments WHERE user_id = 7",
    "postgres://admin:hunter2@db.internal.example:5432/prod",
    "at orders::cancel (src/orders.rs:88:17)",
    "AWS_SECRET_ACCESS_KEY=AKIAXXXXXXXXEXAMPLE",
    "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.secret",
    "hunter2",
    "db.internal.example",
];

#[derive(Debug)]
struct Hostile {
    text: String,
    source: Option<Box<Hostile>>,
}

impl fmt::Display for Hostile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Hostile {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|s| s as &(dyn std::error::Error + 'static))
    }
}

fn hostile() -> Hostile {
    Hostile {
        text: format!("query failed: {} ({})", SECRETS[0], SECRETS[1]),
        source: Some(Box::new(Hostile {
            text: format!("{}\n{}\n{}", SECRETS[2], SECRETS[3], SECRETS[4]),
            source: None,
        })),
    }
}

fn handler() -> Result<(), AgentSurfaceError> {
    Err(hostile())?;
    Ok(())
}

#[track_caller]
fn assert_clean(err: &AgentSurfaceError) {
    let result = InvokeResult::error(err.payload().clone(), Some("inv-1".into()));
    let renderings = [
        serde_json::to_string(err.payload()).unwrap(),
        serde_json::to_string_pretty(&result).unwrap(),
        err.payload().to_string(),
        format!("{:?}", err.payload()),
        err.to_string(),
        format!("{err:?}"),
        format!("{err:#?}"),
        err.payload().message().to_string(),
    ];
    for r in &renderings {
        for s in SECRETS {
            assert!(!r.contains(s), "secret {s:?} leaked into {r:?}");
        }
    }
}

#[test]
fn question_mark_on_a_hostile_error_is_sanitized() {
    let err = handler().unwrap_err();
    assert_eq!(err.code(), ErrorCode::ExecutionFailed);
    assert_clean(&err);
    // The operator channel keeps the whole chain.
    let chain = err.cause_chain();
    assert_eq!(chain.len(), 2);
    assert!(chain[0].contains(SECRETS[0]));
    assert!(chain[1].contains(SECRETS[3]));
}

#[test]
fn a_cause_attached_to_any_code_stays_private() {
    for err in [
        AgentSurfaceError::internal(hostile()),
        AgentSurfaceError::not_authorized(agent_surface_core::details::Origin::Server).with_cause(hostile()),
        AgentSurfaceError::precondition_failed("The order is locked.").with_cause(hostile()),
        AgentSurfaceError::transient(std::time::Duration::from_secs(1)).with_cause(hostile()),
        AgentSurfaceError::internal(anyhow_like(SECRETS[1])),
    ] {
        assert!(err.cause().is_some());
        assert_clean(&err);
    }
}

/// A boxed error made from a string, as `anyhow::Error` or `Box<dyn Error>` converts.
fn anyhow_like(text: &str) -> Box<dyn std::error::Error + Send + Sync> {
    text.into()
}

/// An `anyhow::Error` with a hostile root and a hostile context: sanitized like any unknown
/// error, the whole chain kept for the operator channel (the `anyhow` feature).
#[cfg(feature = "anyhow")]
#[test]
fn an_anyhow_chain_stays_private() {
    use anyhow::Context;
    let err = Err::<(), _>(hostile()).context(SECRETS[5]).context(SECRETS[6]).unwrap_err();
    let err = AgentSurfaceError::from_anyhow(err);
    assert_eq!(err.code(), ErrorCode::ExecutionFailed);
    assert_eq!(err.payload().detail("reason").and_then(|r| r.as_str()), Some("handler-error"));
    assert_eq!(
        err.payload().message(),
        AgentSurfaceError::execution_failed(agent_surface_core::details::ExecutionFailedReason::HandlerError)
            .payload()
            .message()
    );
    assert_clean(&err);
    let chain = err.cause_chain();
    assert_eq!(chain.len(), 4, "{chain:?}");
    assert_eq!((chain[0].as_str(), chain[1].as_str()), (SECRETS[6], SECRETS[5]));
    assert!(chain[2].contains(SECRETS[0]) && chain[3].contains(SECRETS[3]));
}

/// A typed error converted into `anyhow` with `?` comes back out as itself, cause included.
#[cfg(feature = "anyhow")]
#[test]
fn an_agent_surface_error_survives_anyhow() {
    fn inner() -> anyhow::Result<()> {
        Err(AgentSurfaceError::precondition_failed("The order has shipped.").with_cause(hostile()))?;
        Ok(())
    }
    let err = AgentSurfaceError::from_anyhow(inner().unwrap_err());
    assert_eq!(err.code(), ErrorCode::PreconditionFailed);
    assert_eq!(err.cause_chain().len(), 2);
    assert_clean(&err);
}

/// A relayed upstream payload cannot make this service's answer tell a client to repeat a call
/// whose handler ran: a reason reserved for the runtime (`binding-failed`, whose retry is
/// `after-refresh`; `client-input-required`) is dropped, and an unknown outcome that also says
/// `transient` stays an unknown outcome (verify), never a transient failure to retry.
#[test]
fn a_relayed_payload_cannot_turn_a_ran_call_into_one_to_repeat() {
    use agent_surface_core::decision::{Action, decide_payload};
    use agent_surface_core::{AgentSurfaceError, ErrorCode, ErrorPayload, Retry};
    let parse = |text: &str| -> ErrorPayload { serde_json::from_str(text).unwrap() };
    for (reason, retry) in [("binding-failed", "after-refresh"), ("client-input-required", "no")] {
        let upstream = parse(&format!(
            r#"{{"code":"PRECONDITION_FAILED","message":"x","retry":"{retry}","details":{{"reason":"{reason}"}}}}"#
        ));
        let p = AgentSurfaceError::relayed(upstream).into_payload();
        assert_eq!(
            (p.code(), p.retry(), p.detail("reason")),
            (ErrorCode::PreconditionFailed, Retry::WithChanges, None)
        );
    }
    let unknown = parse(
        r#"{"code":"EXECUTION_FAILED","message":"x","retry":"after-delay","details":{"reason":"outcome-unknown","transient":true,"retryAfterMs":1000}}"#,
    );
    // As received, the client helpers verify rather than wait and retry.
    assert_eq!(decide_payload(&unknown).action, Action::Verify);
    let p = AgentSurfaceError::relayed(unknown).into_payload();
    assert_eq!((p.retry(), p.detail("reason").and_then(|r| r.as_str())), (Retry::No, Some("outcome-unknown")));
}
