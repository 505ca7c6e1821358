//! `Ctx::progress`: reports reach the caller's sink in order, and the ones no transport can carry
//! are dropped.

use std::sync::{Arc, Mutex};

use agent_surface_core::{AgentSurfaceError, Effect};
use agent_surface_registry::{
    Ctx, FnProgress, MAX_PROGRESS_MESSAGE_CHARS, Progress, ProgressSink, Registry, RegistryConfig,
};
use serde_json::{Value, json};

use crate::support::{call, consumer};

/// A registry whose `work.run` reports what its input lists (`[[done, total|null, message|null]]`)
/// and then once more after a handler-spawned task outlives the call.
fn registry() -> (Registry, agent_surface_registry::Mount, Arc<Mutex<Option<Ctx>>>) {
    let kept = Arc::new(Mutex::new(None));
    let r = Registry::new(RegistryConfig::default());
    let keep = kept.clone();
    r.define("work", move |t| {
        let keep = keep.clone();
        t.capability("run", "Report progress as listed.").effect(Effect::Read).raw_handler(
            json!({"type": "object", "properties": {"steps": {"type": "array"}}}),
            None,
            move |ctx: Ctx, input: Value| {
                let keep = keep.clone();
                async move {
                    for step in input["steps"].as_array().cloned().unwrap_or_default() {
                        let done = step[0].as_f64().unwrap_or(f64::NAN);
                        ctx.progress(done, step[1].as_f64(), step[2].as_str());
                    }
                    *keep.lock().unwrap() = Some(ctx.clone());
                    Ok::<_, AgentSurfaceError>(json!({"wantsProgress": ctx.wants_progress()}))
                }
            },
        )
    })
    .expect("definition is valid");
    let mount = r.mount("work", "main").expect("mounts");
    (r, mount, kept)
}

/// The reports a sink received.
type Seen = Arc<Mutex<Vec<Progress>>>;

fn collecting() -> (Seen, Arc<dyn ProgressSink>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let seen = seen.clone();
        Arc::new(FnProgress::new(move |p: Progress| seen.lock().unwrap().push(p)))
    };
    (seen, sink)
}

#[tokio::test]
async fn reports_reach_the_sink_in_order_and_unusable_ones_are_dropped() {
    let (r, _m, kept) = registry();
    let (seen, sink) = collecting();
    let steps = json!({"steps": [
        [0, 3, "start"],
        [1, 3, null],
        [1, 3, "not growing"],
        [0.5, 3, "going back"],
        [-1, null, "negative"],
        [4, 3, "past the total"],
        [2, 3, "two\u{0007} of three"],
        [3, null, null]
    ]});
    let result = r.invoke(call("work.run", steps), consumer("p").with_progress(sink)).await;
    assert_eq!(result.output(), Some(&json!({"wantsProgress": true})));
    let seen = seen.lock().unwrap().clone();
    let summary: Vec<(f64, Option<f64>, Option<&str>)> =
        seen.iter().map(|p| (p.done, p.total, p.message.as_deref())).collect();
    assert_eq!(
        summary,
        vec![
            (0.0, Some(3.0), Some("start")),
            (1.0, Some(3.0), None),
            (2.0, Some(3.0), Some("two of three")),
            (3.0, None, None)
        ]
    );
    // After the call ended, a context the handler kept reports nothing.
    let ctx = kept.lock().unwrap().take().expect("the handler kept its context");
    ctx.progress(10.0, None, Some("late"));
    assert_eq!(seen.len(), 4);
}

#[tokio::test]
async fn a_long_message_is_cut_and_a_call_without_a_sink_reports_nowhere() {
    let (r, _m, _kept) = registry();
    let (seen, sink) = collecting();
    let long = "é".repeat(MAX_PROGRESS_MESSAGE_CHARS + 50);
    let result =
        r.invoke(call("work.run", json!({"steps": [[1, null, long]]})), consumer("p").with_progress(sink)).await;
    assert!(result.is_ok());
    let message = seen.lock().unwrap()[0].message.clone().expect("a message");
    assert_eq!(message.chars().count(), MAX_PROGRESS_MESSAGE_CHARS);

    let result = r.invoke(call("work.run", json!({"steps": [[1, null, null]]})), consumer("p")).await;
    assert_eq!(result.output(), Some(&json!({"wantsProgress": false})));
}
