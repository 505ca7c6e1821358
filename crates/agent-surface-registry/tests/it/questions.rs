//! The ask step (phase 5b): questions to the client before a call runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, Phase, Retry};
use agent_surface_registry::{Abilities, Answers, Ask, Ctx, Question, Registry, RegistryConfig, Unmet};
use serde_json::{Value, json};

use crate::support::{assert_produced, call, consumer};

/// `greet.hello` asks for a name (a form), then for a completion once it has one; it refuses a
/// declined form. `greet.broken` panics in its ask step.
fn registry() -> (Registry, agent_surface_registry::Mount, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Registry::new(RegistryConfig::default());
    r.provide(runs.clone());
    r.define("greet", |t| {
        t.capability("hello", "Greet the user.")
            .effect(Effect::Write)
            .ask(|_ctx: &Ctx, _input: &Value, answers: &Answers| {
                if answers.declined("name") {
                    return Err(Unmet::new("The user gave no name.").reason("declined"));
                }
                if answers.form("name").is_none() {
                    let schema =
                        json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
                    return Ok(vec![Question::form("name", "What is your name?", schema)]);
                }
                Ok(match answers.sample_text("motto") {
                    Some(_) => vec![],
                    None => vec![Question::sample("motto", "Write a motto.", 20)],
                })
            })
            .raw_handler(json!({"type": "object"}), None, |ctx: Ctx, _input: Value| async move {
                ctx.state::<Arc<AtomicUsize>>().fetch_add(1, Ordering::SeqCst);
                let answers = ctx.answers();
                let name = answers.form("name").and_then(|f| f["name"].as_str()).unwrap_or_default().to_string();
                let motto = answers.sample_text("motto").unwrap_or_default().to_string();
                Ok::<_, AgentSurfaceError>(json!({"greeting": format!("Hello, {name}! {motto}")}))
            });
        t.capability("broken", "An ask step that panics.")
            .effect(Effect::Read)
            .ask(|_ctx: &Ctx, _input: &Value, _answers: &Answers| -> Result<Vec<Question>, Unmet> {
                panic!("the ask step fails")
            })
            .raw_handler(json!({"type": "object"}), None, |_ctx: Ctx, _input: Value| async move {
                Ok::<_, AgentSurfaceError>(json!({}))
            });
    })
    .expect("definition is valid");
    let mount = r.mount("greet", "main").expect("mounts");
    (r, mount, runs)
}

fn accepted(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

#[tokio::test]
async fn open_questions_stop_the_call_before_it_runs() {
    let (r, _m, runs) = registry();
    let invocation = r.invoke_detailed(call("greet.hello", json!({})), consumer("q")).await;
    let payload = assert_produced(&invocation, ErrorCode::PreconditionFailed, Phase::Input);
    assert_eq!(payload.retry(), Retry::No);
    assert_eq!(payload.detail("reason"), Some(&json!("client-input-required")));
    let questions = invocation.questions.expect("the open questions");
    assert_eq!(questions.len(), 1);
    assert_eq!(questions[0].key, "name");
    assert!(matches!(&questions[0].ask, Ask::Form { message, .. } if message == "What is your name?"));
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // One round answered, the next question.
    let answers = Answers::new(Abilities::new(true, true, false)).with("name", accepted(json!({"name": "Ada"})));
    let invocation =
        r.invoke_detailed(call("greet.hello", json!({})), consumer("q").with_answers(answers.clone())).await;
    let questions = invocation.questions.expect("the next question");
    assert_eq!(questions[0].key, "motto");
    assert!(matches!(&questions[0].ask, Ask::Sample { params } if params["maxTokens"] == 20));

    // Everything answered: the handler runs once and reads the answers.
    let sampled = json!({"role": "assistant", "content": {"type": "text", "text": "Keep going."}, "model": "m"});
    let answers = answers.with("motto", sampled);
    let result = r.invoke(call("greet.hello", json!({})), consumer("q").with_answers(answers)).await;
    assert_eq!(result.output(), Some(&json!({"greeting": "Hello, Ada! Keep going."})));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn malformed_answers_leave_the_question_open_and_a_declined_form_is_unmet() {
    let (r, _m, runs) = registry();
    for bad in [json!(12345), json!({"action": "accept"}), json!({"action": "accept", "content": "Ada"})] {
        let answers = Answers::new(Abilities::new(true, false, false)).with("name", bad);
        let invocation = r.invoke_detailed(call("greet.hello", json!({})), consumer("q").with_answers(answers)).await;
        assert_eq!(invocation.questions.map(|q| q[0].key.clone()).as_deref(), Some("name"));
    }
    let answers = Answers::new(Abilities::new(true, false, false)).with("name", json!({"action": "decline"}));
    let invocation = r.invoke_detailed(call("greet.hello", json!({})), consumer("q").with_answers(answers)).await;
    let payload = assert_produced(&invocation, ErrorCode::PreconditionFailed, Phase::Input);
    assert_eq!(payload.detail("reason"), Some(&json!("declined")));
    assert_eq!(payload.retry(), Retry::WithChanges);
    assert!(invocation.questions.is_none());
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_panicking_ask_step_fails_the_call_without_running_it() {
    let (r, _m, _runs) = registry();
    let invocation = r.invoke_detailed(call("greet.broken", json!({})), consumer("q")).await;
    let payload = assert_produced(&invocation, ErrorCode::ExecutionFailed, Phase::Input);
    assert_eq!(payload.detail("reason"), Some(&json!("handler-error")));
}

#[tokio::test]
async fn a_stop_for_questions_is_not_the_terminal_result_of_its_invocation_id() {
    let (r, _m, runs) = registry();
    let first = r.invoke(call("greet.hello", json!({})).with_invocation_id("inv-q"), consumer("q")).await;
    assert_eq!(first.code(), Some(ErrorCode::PreconditionFailed));
    let sampled = json!({"role": "assistant", "content": [{"type": "text", "text": "Onward."}]});
    let answers = Answers::new(Abilities::new(true, true, false))
        .with("name", accepted(json!({"name": "Bo"})))
        .with("motto", sampled);
    let second =
        r.invoke(call("greet.hello", json!({})).with_invocation_id("inv-q"), consumer("q").with_answers(answers)).await;
    assert_eq!(second.output(), Some(&json!({"greeting": "Hello, Bo! Onward."})));
    // Now the id has its terminal result: a repeat without answers replays it.
    let third = r.invoke(call("greet.hello", json!({})).with_invocation_id("inv-q"), consumer("q")).await;
    assert_eq!(third, second);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[test]
fn an_ask_step_of_another_input_type_is_a_definition_error() {
    let r = Registry::new(RegistryConfig::default());
    let err = r
        .define("bad", |t| {
            t.capability("mixed", "Mismatched types.")
                .effect(Effect::Read)
                .ask(|_ctx: &Ctx, _input: &String, _answers: &Answers| Ok(vec![]))
                .raw_handler(json!({"type": "object"}), None, |_ctx: Ctx, _input: Value| async move {
                    Ok::<_, AgentSurfaceError>(json!({}))
                })
        })
        .expect_err("the ask step's type differs");
    assert!(err.to_string().contains("ask step"), "{err}");
}

#[test]
fn abilities_say_which_questions_a_client_can_answer() {
    let abilities = Abilities::new(true, false, true);
    assert!(abilities.can(&Question::form("a", "A?", json!({"type": "object"})).ask));
    assert!(!abilities.can(&Question::sample("b", "B", 5).ask));
    assert!(abilities.can(&Question::roots("c").ask));
}

/// A call that joins an identical one in flight whose leader then stops for questions asks its
/// own: the leader's stop is released (the same id comes back with the answers) and carries no
/// questions to a follower, whose client — which may well answer them — would otherwise read
/// `client-input-required` (retry `no`) as final. The follower admits once more and runs.
#[tokio::test]
async fn a_follower_of_a_leader_that_stopped_for_questions_asks_its_own() {
    use agent_surface_policy::Policies;

    let held = Arc::new(crate::support::Held::default());
    let r = Registry::new(RegistryConfig {
        authority: Some(Arc::new(Policies::default_allow().global(held.clone()))),
        ..Default::default()
    });
    r.define("greet", |t| {
        t.capability("hi", "Greet the user by name.")
            .effect(Effect::Write)
            .ask(|_ctx: &Ctx, _input: &Value, answers: &Answers| {
                Ok(match answers.form("name") {
                    Some(_) => vec![],
                    None => vec![Question::form("name", "Your name?", json!({"type": "object"}))],
                })
            })
            .raw_handler(json!({"type": "object"}), None, |_ctx: Ctx, _input: Value| async move {
                Ok::<_, AgentSurfaceError>(json!({"greeted": true}))
            });
    })
    .unwrap();
    let _mount = r.mount("greet", "main").unwrap();

    let request = || call("greet.hi", json!({})).with_invocation_id("g-1");
    let leader = tokio::spawn({
        let (r, request) = (r.clone(), request());
        async move { r.invoke_detailed(request, consumer("q")).await }
    });
    crate::support::settle().await;
    let answers = Answers::new(Abilities::new(true, false, false)).with("name", accepted(json!({"name": "Ada"})));
    let follower = tokio::spawn({
        let (r, request) = (r.clone(), request());
        async move { r.invoke_detailed(request, consumer("q").with_answers(answers)).await }
    });
    crate::support::settle().await;
    held.release(2);

    let leader = leader.await.unwrap();
    assert!(leader.questions.is_some(), "the leader's own client is asked: {leader:?}");
    let follower = follower.await.unwrap();
    assert_eq!(follower.result.output(), Some(&json!({"greeted": true})), "{follower:?}");
}

/// A call presenting an approval given in person (`InvokeOptions::approval`, recorded under the
/// request as its client sent it) that joins the identical plain call in flight — the client's
/// own retry — is not handed that call's `CONFIRMATION_REQUIRED`, which lacked the approval: it
/// is admitted once more and runs, once.
#[tokio::test]
async fn an_approved_call_joined_to_an_unapproved_one_runs_with_its_approval() {
    use agent_surface_policy::{ConfirmationConfig, ConfirmationEngine, Policies};

    let held = Arc::new(crate::support::Held::default());
    // An engine that does not present a relayed approval on repeat: the plain retry lacks it.
    let engine =
        Arc::new(ConfirmationEngine::new(ConfirmationConfig { present_on_repeat: false, ..Default::default() }));
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Registry::new(RegistryConfig {
        authority: Some(Arc::new(Policies::default_allow().global(held.clone()))),
        confirmation: Some(engine.clone()),
        ..Default::default()
    });
    r.provide(runs.clone());
    r.define("vault", |t| {
        t.capability("wipe", "Wipe the vault.")
            .effect(Effect::Destructive)
            .confirm(|_: &Value| "Wipe the vault.")
            .raw_handler(json!({"type": "object"}), None, |ctx: Ctx, _input: Value| async move {
                ctx.state::<Arc<AtomicUsize>>().fetch_add(1, Ordering::SeqCst);
                Ok::<_, AgentSurfaceError>(json!({"wiped": true}))
            });
    })
    .unwrap();
    let _mount = r.mount("vault", "main").unwrap();
    let request = || call("vault.wipe", json!({})).with_invocation_id("w-1");

    // The first round asks; the person approves it in person.
    held.release(1);
    let asked = r.invoke_detailed(request(), consumer("q")).await;
    let id = asked.result.error_payload().unwrap().detail("confirmationId").unwrap().as_str().unwrap().to_string();
    engine.approve_in_person_for(&id, "mcp-elicitation", &consumer("q").consumer).await.unwrap();

    // The client's plain retry leads; the approved call joins it.
    let leader = tokio::spawn({
        let (r, request) = (r.clone(), request());
        async move { r.invoke_detailed(request, consumer("q")).await }
    });
    crate::support::settle().await;
    let approved = tokio::spawn({
        let (r, request) = (r.clone(), request());
        async move { r.invoke_detailed(request, consumer("q").with_approval(id)).await }
    });
    crate::support::settle().await;
    held.release(2);

    let leader = leader.await.unwrap();
    assert_eq!(leader.result.code(), Some(ErrorCode::ConfirmationRequired), "{leader:?}");
    let approved = approved.await.unwrap();
    assert_eq!(approved.result.output(), Some(&json!({"wiped": true})), "{approved:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
