//! The approval inbox in a real browser: headless Chromium, driven over WebDriver
//! (`webdriver.rs`), against the demo's HTTP server (`serve --http`, a child process). An agent's
//! call gets the two-phase result; a second person signs in through the sign-in form, sees it in
//! the inbox, opens it and approves with a note; the agent's repeat runs once. A denial is final,
//! a self-approval is refused, and forged or replayed form posts are refused, as is a sign-in form
//! another site posts to sign her in as someone else (login CSRF).
//!
//! With `--quorum orders.cancel=2`, two distinct approvers are needed (a second test).
//!
//! Screenshots of the inbox, a detail page and a half-approved quorum are written to
//! `AGENT_SURFACE_ARTIFACTS_DIR`, or
//! to `browser-artifacts/` under the target directory's `tmp/` (the path is printed).

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::served::{self, Server};
use crate::webdriver::Chrome;

/// Where the screenshots go.
fn artifacts() -> PathBuf {
    std::env::var_os("AGENT_SURFACE_ARTIFACTS_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("browser-artifacts"), PathBuf::from)
}

/// `POST /api/invoke` of `orders.cancel` for `order` by the holder of `token`: the result's JSON.
fn cancel(server: &Server, token: &str, order: &str) -> Value {
    let body = json!({"capability": "orders.cancel", "input": {"orderId": order}}).to_string();
    let bearer = format!("Bearer {token}");
    let headers = [("Authorization", bearer.as_str()), ("Content-Type", "application/json")];
    let r = served::request(&server.addr, "POST", "/api/invoke", &headers, body.as_bytes());
    serde_json::from_str(&r.body).unwrap_or_else(|_| panic!("HTTP {}: {}", r.status, r.body))
}

/// The `confirmationId` of a two-phase result.
fn confirmation_id(result: &Value) -> String {
    assert_eq!(result["code"], "CONFIRMATION_REQUIRED", "{result}");
    result["details"]["confirmationId"].as_str().expect("a confirmationId").to_string()
}

/// The value of the decision form's token on a detail page's HTML (the header's sign-out form
/// has a token of its own).
fn decision_token(page: &str) -> String {
    let form = page.split("<form id=\"decide\"").nth(1).expect("a decision form");
    form.split("name=\"csrf\" value=\"").nth(1).and_then(|v| v.split('"').next()).expect("a token").to_string()
}

/// A form post to the inbox from outside the browser, with `headers` (a cookie, a bearer token).
fn post_form(server: &Server, path: &str, headers: &[(&str, &str)], form: &str) -> served::Response {
    let mut all = vec![("Content-Type", "application/x-www-form-urlencoded")];
    all.extend_from_slice(headers);
    served::request(&server.addr, "POST", path, &all, form.as_bytes())
}

/// The state of confirmation `id` as its detail page says, read with `token`.
fn state(server: &Server, id: &str, token: &str) -> String {
    let bearer = format!("Bearer {token}");
    let page = served::get(&server.addr, &format!("/inbox/c/{id}"), &[("Authorization", bearer.as_str())]).body;
    let state = page.split("<dd id=\"state\">").nth(1).and_then(|s| s.split("</dd>").next());
    state.expect("a state").to_string()
}

/// `text` percent-encoded for a `data:` URL.
fn data_url(html: &str) -> String {
    let mut out = String::from("data:text/html;charset=utf-8,");
    for b in html.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/:=".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[test]
fn a_second_person_approves_in_a_real_browser() {
    let server = served::start(&[
        "--token",
        "t-alice=alice",
        "--token",
        "t-maria=maria:approver",
        "--token",
        "t-omar=omar:approver",
    ]);
    let Some(browser) = Chrome::start() else { return };
    let base = format!("http://{}", server.addr);
    let shots = artifacts();

    // Alice's agent asks to cancel two orders; each waits for a person (two-phase).
    let first = confirmation_id(&cancel(&server, "t-alice", "A-1001"));
    let second = confirmation_id(&cancel(&server, "t-alice", "A-1003"));

    // Login CSRF: omar fetches a sign-in form for himself and makes a page that posts it, with
    // his token, from maria's browser (to sign her in as him, so that what she does is his). The
    // form's token is bound to omar's sign-in cookie, which her browser does not hold (and the
    // browser says the post comes from another site): refused, and nobody is signed in.
    let omars_form = served::get(&server.addr, "/inbox/sign-in", &[]);
    assert!(
        omars_form.header("set-cookie").is_some_and(|c| c.starts_with("inbox_signin=")),
        "{:?}",
        omars_form.headers
    );
    let omars_token = omars_form.body.split("name=\"csrf\" value=\"").nth(1).and_then(|v| v.split('"').next());
    let login_csrf = format!(
        "<form method=post action=\"{base}/inbox/sign-in\"><input type=hidden name=token value=t-omar>\
         <input type=hidden name=csrf value=\"{}\"><button id=go type=submit>See your prize</button></form>",
        omars_token.expect("a sign-in form token")
    );
    browser.goto(&data_url(&login_csrf));
    browser.find("#go").click_to_navigate();
    assert_eq!(browser.title(), "Form refused", "the forged sign-in was refused: {}", browser.url());
    assert!(browser.cookie("inbox_session").is_none(), "nobody is signed in");
    browser.goto(&format!("{base}/inbox/"));
    assert!(browser.url().ends_with("/inbox/sign-in"), "still signed out: {}", browser.url());

    // Maria opens the inbox: she is sent to the sign-in form; a wrong token does not sign her in.
    browser.goto(&format!("{base}/inbox/"));
    assert!(browser.url().ends_with("/inbox/sign-in"), "{}", browser.url());
    assert_eq!(browser.title(), "Sign in");
    browser.find("#token").type_text("t-nobody");
    browser.find("#submit").click_to_navigate();
    assert!(browser.find("#error").text().contains("does not sign anyone in"));
    browser.find("#token").type_text("t-maria");
    browser.find("#submit").click_to_navigate();
    assert!(browser.url().ends_with("/inbox/"), "{}", browser.url());
    assert_eq!(browser.find("#approver").text(), "maria");
    let cookie = browser.cookie("inbox_session").expect("the session cookie");
    let with_cookie = format!("inbox_session={cookie}");
    let maria = [("Cookie", with_cookie.as_str())];
    // Signed in, the sign-in page sends her on to the inbox.
    browser.goto(&format!("{base}/inbox/sign-in"));
    assert!(browser.url().ends_with("/inbox/"), "{}", browser.url());

    // She sees both, alice's, soonest expiry first.
    let pending = browser.find("#pending").text();
    assert!(pending.contains("Cancel order A-1001 and refund the customer in full."), "{pending}");
    assert!(pending.contains("Cancel order A-1003"), "{pending}");
    assert!(pending.contains("alice") && pending.contains("destructive"), "{pending}");

    // She opens the first: its summary, its input, pending.
    browser.find(&format!("a[href=\"/inbox/c/{first}\"]")).click_to_navigate();
    assert!(browser.url().ends_with(&format!("/inbox/c/{first}")), "{}", browser.url());
    assert_eq!(browser.find("#state").text(), "pending");
    assert_eq!(browser.find("#input").text(), "{\"orderId\":\"A-1001\"}");
    // The inbox's stylesheet applies under its Content-Security-Policy (`style-src 'self'`): the
    // approve button is green, deny is outlined in red, the state a pending (amber) badge.
    assert_eq!(browser.find("#approve").css("background-color"), "rgba(17, 99, 41, 1)");
    assert_eq!(browser.find("#deny").css("border-top-color"), "rgba(164, 14, 38, 1)");
    assert_eq!(browser.find("#state").css("background-color"), "rgba(255, 248, 197, 1)");
    let token = browser.find("#decide input[name=\"csrf\"]").property("value").expect("the form's token");
    browser.find("#note").type_text("Customer asked by phone.");
    browser.screenshot(&shots.join("inbox-detail.png"));

    // She approves, with the note.
    browser.find("#approve").click_to_navigate();
    assert_eq!(browser.find("#state").text(), "approved by maria");
    assert_eq!(browser.find("#state").css("background-color"), "rgba(218, 251, 225, 1)", "an approved badge");
    assert!(browser.try_find("#decide").is_none(), "a decided confirmation has no form");
    // The inbox: the other request waits; the decision is on record.
    browser.goto(&format!("{base}/inbox/"));
    assert!(browser.find("#recent").text().contains("Customer asked by phone."));
    browser.screenshot(&shots.join("inbox-list.png"));
    #[allow(clippy::print_stdout, reason = "the test tells where its screenshots are")]
    {
        println!("browser test screenshots: {}", shots.display());
    }

    // The same form posted again (a replay, with her cookie) is refused.
    let replay = format!("verdict=approve&note=again&csrf={token}");
    let replayed = post_form(&server, &format!("/inbox/c/{first}"), &maria, &replay);
    assert_eq!(replayed.status, 403, "{}", replayed.body);
    assert!(replayed.body.contains("Form refused"), "{}", replayed.body);

    // Alice's agent repeats the same call: it runs, once; a further repeat does not run it again.
    let done = cancel(&server, "t-alice", "A-1001");
    assert_eq!(done["output"], json!({"orderId": "A-1001", "refundedCents": 4200}), "{done}");
    let again = cancel(&server, "t-alice", "A-1001");
    assert_ne!(again["status"], "ok", "{again}");
    assert_eq!(state(&server, &first, "t-omar"), "approved by maria and used");

    // A denial is final: the agent's repeat is refused, and a second decision (with a form token
    // fetched before the denial) is refused as already decided.
    let before = served::get(&server.addr, &format!("/inbox/c/{second}"), &maria).body;
    let spare = decision_token(&before);
    browser.goto(&format!("{base}/inbox/c/{second}"));
    browser.find("#note").type_text("Not without the customer's call.");
    browser.find("#deny").click_to_navigate();
    assert_eq!(browser.find("#state").text(), "denied by maria");
    let refused = cancel(&server, "t-alice", "A-1003");
    assert_eq!((&refused["code"], &refused["details"]["reason"]), (&json!("CONFIRMATION_INVALID"), &json!("denied")));
    let late = post_form(&server, &format!("/inbox/c/{second}"), &maria, &format!("verdict=approve&csrf={spare}"));
    assert_eq!(late.status, 409, "{}", late.body);
    assert_eq!(state(&server, &second, "t-omar"), "denied by maria");

    // The inbox lists nothing more, and shows both decisions with their notes.
    browser.goto(&format!("{base}/inbox/"));
    assert!(browser.try_find("#empty").is_some());
    let recent = browser.find("#recent").text();
    assert!(
        recent.contains("Customer asked by phone.") && recent.contains("Not without the customer's call."),
        "{recent}"
    );

    // Her own request: not listed for her, and approving it herself is refused (403); it stays pending.
    let own = confirmation_id(&cancel(&server, "t-maria", "A-1003"));
    browser.goto(&format!("{base}/inbox/"));
    assert!(browser.try_find(&format!("a[href=\"/inbox/c/{own}\"]")).is_none());
    browser.goto(&format!("{base}/inbox/c/{own}"));
    browser.find("#approve").click_to_navigate();
    assert_eq!(browser.title(), "Not allowed");
    assert!(browser.find("#message").text().contains("another person must approve it"));
    assert_eq!(state(&server, &own, "t-omar"), "pending");

    // Forged posts against alice's next request: no token, a made-up token, another person's
    // token (omar's form) with maria's cookie, and a cross-site form in the browser (the
    // SameSite=Strict cookie stays home) are all refused; the request stays pending.
    let next = confirmation_id(&cancel(&server, "t-alice", "A-1003"));
    let path = format!("/inbox/c/{next}");
    for form in ["verdict=approve".to_string(), "verdict=approve&csrf=0.0.0".to_string()] {
        let forged = post_form(&server, &path, &maria, &form);
        assert_eq!(forged.status, 403, "{form}: {}", forged.body);
    }
    let omars = served::get(&server.addr, &path, &[("Authorization", "Bearer t-omar")]).body;
    let borrowed = format!("verdict=approve&csrf={}", decision_token(&omars));
    assert_eq!(post_form(&server, &path, &maria, &borrowed).status, 403);
    let attack = format!(
        "<form method=post action=\"{base}{path}\"><input type=hidden name=verdict value=approve>\
         <button id=go type=submit>Win a prize</button></form>"
    );
    browser.goto(&data_url(&attack));
    browser.find("#go").click_to_navigate();
    assert_eq!(browser.title(), "Sign in", "the cross-site post arrived without the cookie: {}", browser.url());
    assert_eq!(state(&server, &next, "t-omar"), "pending");
}

/// Signs in to the inbox at `base` through its form, with `token`: the session cookie's value.
fn sign_in(browser: &Chrome, base: &str, token: &str) -> String {
    browser.goto(&format!("{base}/inbox/sign-in"));
    browser.find("#token").type_text(token);
    browser.find("#submit").click_to_navigate();
    assert!(browser.url().ends_with("/inbox/"), "{}", browser.url());
    browser.cookie("inbox_session").expect("the session cookie")
}

/// With `--quorum orders.cancel=2`, one approval is not enough: the agent's repeat still waits,
/// the same approver cannot approve twice, and a second, distinct approver completes the quorum;
/// then the repeat runs once.
#[test]
fn a_quorum_of_two_needs_two_distinct_approvers_in_a_real_browser() {
    let tokens = ["--token", "t-alice=alice", "--token", "t-maria=maria:approver", "--token", "t-omar=omar:approver"];
    let server = served::start(&[&tokens[..], &["--quorum", "orders.cancel=2"]].concat());
    let Some(browser) = Chrome::start() else { return };
    let base = format!("http://{}", server.addr);
    let id = confirmation_id(&cancel(&server, "t-alice", "A-1001"));

    // Maria approves: one of two; the call still waits.
    let cookie = sign_in(&browser, &base, "t-maria");
    let with_cookie = format!("inbox_session={cookie}");
    let maria = [("Cookie", with_cookie.as_str())];
    // A second form of hers, for a second approval later.
    let spare = decision_token(&served::get(&server.addr, &format!("/inbox/c/{id}"), &maria).body);
    assert!(browser.find("#pending").text().contains("0 of 2 approvals"));
    browser.goto(&format!("{base}/inbox/c/{id}"));
    assert_eq!(browser.find("#approvals").text(), "0 of 2 approvals");
    browser.find("#note").type_text("One of two.");
    browser.find("#approve").click_to_navigate();
    assert_eq!(browser.find("#state").text(), "pending");
    assert_eq!(browser.find("#approvals").text(), "1 of 2 approvals");
    assert!(browser.find("#decisions").text().contains("maria"));
    browser.screenshot(&artifacts().join("inbox-quorum.png"));
    assert!(browser.try_find("#decide").is_none(), "maria has decided: no form for her");
    let waiting = cancel(&server, "t-alice", "A-1001");
    assert_eq!(confirmation_id(&waiting), id, "the repeat waits on the same confirmation");
    // Her second approval does not count (409), and the confirmation is no longer listed for her.
    let twice = post_form(&server, &format!("/inbox/c/{id}"), &maria, &format!("verdict=approve&csrf={spare}"));
    assert_eq!(twice.status, 409, "{}", twice.body);
    assert!(state(&server, &id, "t-omar") == "pending");
    let page = served::get(&server.addr, "/inbox/", &maria).body;
    assert!(!page.contains(&format!("/inbox/c/{id}\"")), "no longer listed for maria");
    let omars = served::get(&server.addr, &format!("/inbox/c/{id}"), &[("Authorization", "Bearer t-omar")]).body;
    assert!(omars.contains("<form id=\"decide\""), "omar may still decide");

    // Omar signs in (maria signs out first) and approves: two of two, approved.
    browser.find("header button[type=\"submit\"]").click_to_navigate();
    assert_eq!(browser.title(), "Sign in");
    sign_in(&browser, &base, "t-omar");
    assert!(browser.find("#pending").text().contains("1 of 2 approvals"));
    browser.goto(&format!("{base}/inbox/c/{id}"));
    browser.find("#approve").click_to_navigate();
    assert_eq!(browser.find("#approvals").text(), "2 of 2 approvals");
    assert!(browser.find("#state").text().starts_with("approved by"), "{}", browser.find("#state").text());

    // The agent's repeat runs, once.
    let done = cancel(&server, "t-alice", "A-1001");
    assert_eq!(done["output"]["orderId"], "A-1001", "{done}");
    assert_ne!(cancel(&server, "t-alice", "A-1001")["status"], "ok");
}
