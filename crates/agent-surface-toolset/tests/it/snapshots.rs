//! The embedded toolset's result items, pinned: every case of the conformance corpus as an OpenAI
//! Chat tool message (the payload text a model reads, with each message as the toolset words
//! it), and one error and one success in every other provider's format. A change shows as a diff
//! of the files under `snapshots/`; accept an intended one with `UPDATE_EXPECT=1 cargo test -p
//! agent-surface-toolset --test it snapshots` (see `docs/testing.md`).

use agent_surface_core::InvokeResult;
use agent_surface_toolset::{Provider, ResultFormat, encode_result};

use crate::conformance::call;

fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).expect("JSON serializes")
}

#[test]
fn every_case_as_the_toolset_sends_it() {
    let chat = call(Provider::OpenAiChat);
    let text =
        agent_surface_testing::wire_snapshot(|result| pretty(&encode_result(&chat, result, &ResultFormat::default())));
    expect_test::expect_file!["snapshots/toolset_openai_chat.txt"].assert_eq(&text);
}

#[test]
fn one_error_and_one_success_in_every_provider_format() {
    let cases = agent_surface_testing::cases();
    let error = cases.iter().find(|c| !c.is_ok()).expect("the corpus has errors");
    let ok = cases.iter().find(|c| c.is_ok()).expect("the corpus has successes");
    let mut text = String::new();
    for provider in Provider::ALL {
        for (what, result) in [("error", error), ("ok", ok)] {
            let encoded: serde_json::Value =
                encode_result(&call(provider), result as &InvokeResult, &ResultFormat::default());
            text.push_str(&format!("## {provider:?} {what}\n{}\n\n", pretty(&encoded)));
        }
    }
    expect_test::expect_file!["snapshots/toolset_providers.txt"].assert_eq(text.trim_end());
}
