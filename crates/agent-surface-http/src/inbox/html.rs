//! The inbox's pages: server-rendered HTML, no script, no inline style (one linked stylesheet,
//! `inbox.css`), every value escaped.

use std::fmt::Write;

use agent_surface_core::Timestamp;
use agent_surface_policy::{
    AuditEvent, AuditKind, AuditVerdict, ConfirmationRecord,
    confirmation::{ApprovalVerdict, ConfirmationState},
};

/// `text` with the five characters HTML gives a meaning escaped (safe in element content and in
/// quoted attribute values).
pub(crate) struct Esc<'a>(pub(crate) &'a str);

impl std::fmt::Display for Esc<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '&' => f.write_str("&amp;")?,
                '<' => f.write_str("&lt;")?,
                '>' => f.write_str("&gt;")?,
                '"' => f.write_str("&quot;")?,
                '\'' => f.write_str("&#39;")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// A whole page, linking the stylesheet at `stylesheet`.
pub(crate) fn page(title: &str, stylesheet: &str, signed_in: Option<(&str, &str, &str)>, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 512);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{}</title>\
         <link rel=\"stylesheet\" href=\"{}\"></head><body>\n",
        Esc(title),
        Esc(stylesheet),
    );
    if let Some((subject, prefix, csrf)) = signed_in {
        let _ = writeln!(
            out,
            "<header><p>Signed in as <strong id=\"approver\">{}</strong>. <a href=\"{p}/\">Inbox</a></p>\
             <form method=\"post\" action=\"{p}/sign-out\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button type=\"submit\">Sign out</button></form></header>",
            Esc(subject),
            Esc(csrf),
            p = Esc(prefix),
        );
    }
    let _ = write!(out, "<main>\n<h1>{}</h1>\n{body}</main>\n</body></html>\n", Esc(title));
    out
}

/// The recent decisions the inbox lists, read from the audit trail: those on confirmations the
/// viewer may see.
pub(crate) enum Recent {
    /// The latest decisions the viewer may see, newest first (none yet: empty), and whether the
    /// reads that tell which they may see ran out first (older ones may be missing).
    Listed(Vec<AuditEvent>, bool),
    /// The service keeps no audit trail, so the inbox has no decisions to list.
    NoTrail,
    /// The trail, or the confirmations that tell which decisions the viewer may see, could not
    /// be read just now.
    Unavailable,
}

/// The list of pending confirmations and the recent decisions.
pub(crate) fn inbox(prefix: &str, pending: &[ConfirmationRecord], recent: &Recent) -> String {
    let mut out = String::new();
    if pending.is_empty() {
        out.push_str("<p id=\"empty\">Nothing waits for your decision.</p>\n");
    } else {
        out.push_str(
            "<div class=\"scroll\"><table id=\"pending\"><thead><tr><th>What</th><th>Capability</th><th>Requested by</th>\
             <th>Effect</th><th>Input</th><th>Approvals</th><th>Decided so far</th><th>Requested at / expires at</th>\
             </tr></thead><tbody>\n",
        );
        for r in pending {
            let _ = writeln!(
                out,
                "<tr><td><a href=\"{}/c/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td class=\"input\">{}</td>\
                 <td class=\"approvals\">{}</td><td class=\"decided\">{}</td><td class=\"when\">{}<br>{}</td></tr>",
                Esc(prefix),
                Esc(&r.id),
                Esc(&r.summary),
                Esc(&r.binding.capability),
                Esc(requester(r)),
                Esc(r.effect.as_str()),
                InputPreview(r.input_preview.as_deref()),
                Esc(&approvals_text(r)),
                DecidedSoFar(r),
                r.created_at,
                r.expires_at,
            );
        }
        out.push_str("</tbody></table></div>\n");
    }
    out.push_str("<h2>Recent decisions</h2>\n");
    // Where the reads ran out, the list says so rather than that there is nothing more.
    const CUT: &str = "<p id=\"recent-cut\">Only the newest decisions were looked through; older ones you may see \
                       are on each confirmation's page.</p>\n";
    let recent = match recent {
        Recent::Listed(events, cut) if !events.is_empty() => {
            if *cut {
                out.push_str(CUT);
            }
            events
        }
        Recent::Listed(_, true) => {
            out.push_str(CUT);
            return out;
        }
        Recent::Listed(_, false) => {
            out.push_str("<p id=\"no-recent\">No recent decision on a confirmation you may see.</p>\n");
            return out;
        }
        Recent::NoTrail => {
            out.push_str(
                "<p id=\"no-trail\">Decisions are listed from the audit trail, and this service keeps none. Each \
                 confirmation's page shows the decisions made on it.</p>\n",
            );
            return out;
        }
        Recent::Unavailable => {
            out.push_str("<p id=\"trail-unavailable\">The recent decisions could not be read just now.</p>\n");
            return out;
        }
    };
    out.push_str(
        "<div class=\"scroll\"><table id=\"recent\"><thead><tr><th>When</th><th>Who</th><th>Decision</th><th>Capability</th>\
         <th>Requested by</th><th>Note</th></tr></thead><tbody>\n",
    );
    for e in recent {
        let AuditKind::ConfirmationDecided { verdict, approver, note } = &e.kind else { continue };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            e.at,
            Esc(approver),
            Badge(verdict_text(*verdict)),
            Esc(&e.capability),
            Esc(e.principal.as_deref().unwrap_or(&e.consumer)),
            Esc(note.as_deref().unwrap_or("")),
        );
    }
    out.push_str("</tbody></table></div>\n");
    out
}

/// One confirmation as it stands at `now`, with the decision form when it is pending.
pub(crate) fn detail(prefix: &str, r: &ConfirmationRecord, csrf: Option<&str>, now: Timestamp) -> String {
    let state = if r.state == ConfirmationState::Pending && now >= r.expires_at {
        "expired".to_string()
    } else {
        state_text(&r.state)
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<dl id=\"detail\" class=\"{}\"><dt>What</dt><dd id=\"summary\">{}</dd><dt>Capability</dt><dd>{}</dd>\
         <dt>Requested by</dt><dd>{}</dd><dt>Effect</dt><dd>{}</dd><dt>Requested at</dt><dd>{}</dd>\
         <dt>Expires at</dt><dd>{}</dd><dt>State</dt><dd id=\"state\">{}</dd>\
         <dt>Approvals</dt><dd id=\"approvals\">{}</dd>{}<dt>Id</dt><dd>{}</dd></dl>",
        badge_kind(&state),
        Esc(&r.summary),
        Esc(&r.binding.capability),
        Esc(requester(r)),
        Esc(r.effect.as_str()),
        r.created_at,
        r.expires_at,
        Esc(&state),
        Esc(&approvals_text(r)),
        slots_list(r),
        Esc(&r.id),
    );
    out.push_str("<h2>Decisions so far</h2>\n");
    if r.decisions.is_empty() {
        out.push_str("<p id=\"no-decisions\">No decision yet.</p>\n");
    } else {
        out.push_str(
            "<div class=\"scroll\"><table id=\"decisions\"><thead><tr><th>When</th><th>Who</th><th>Decision</th></tr></thead>\
             <tbody>\n",
        );
        for d in &r.decisions {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                d.at,
                Esc(&d.approver),
                Badge(decision_text(d.verdict))
            );
        }
        out.push_str("</tbody></table></div>\n");
    }
    let _ = writeln!(
        out,
        "<h2>Input</h2>\n<pre id=\"input\">{}</pre>",
        Esc(r.input_preview.as_deref().unwrap_or("(not recorded)"))
    );
    if let Some(csrf) = csrf {
        let _ = writeln!(
            out,
            "<form id=\"decide\" method=\"post\" action=\"{}/c/{}\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <p><label for=\"note\">Note (optional)</label><br>\
             <textarea id=\"note\" name=\"note\" rows=\"3\" cols=\"60\" maxlength=\"1000\"></textarea></p>\
             <p><button id=\"approve\" type=\"submit\" name=\"verdict\" value=\"approve\">Approve</button> \
             <button id=\"deny\" type=\"submit\" name=\"verdict\" value=\"deny\">Deny</button></p></form>",
            Esc(prefix),
            Esc(&r.id),
            Esc(csrf),
        );
    }
    out
}

/// The sign-in form.
pub(crate) fn sign_in(prefix: &str, csrf: &str, then: Option<&str>, failed: bool) -> String {
    let mut out = String::new();
    if failed {
        out.push_str("<p id=\"error\">That token does not sign anyone in.</p>\n");
    }
    // The confirmation to show once signed in, kept through the post.
    let then = then.map(|id| format!("<input type=\"hidden\" name=\"c\" value=\"{}\">", Esc(id))).unwrap_or_default();
    let _ = writeln!(
        out,
        "<form id=\"sign-in\" method=\"post\" action=\"{}/sign-in\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">{then}\
         <p><label for=\"token\">Access token</label><br>\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" required></p>\
         <p><button id=\"submit\" type=\"submit\">Sign in</button></p></form>",
        Esc(prefix),
        Esc(csrf),
    );
    out
}

/// A short message page's body.
pub(crate) fn message(prefix: &str, text: &str) -> String {
    format!("<p id=\"message\">{}</p>\n<p><a href=\"{}/\">Back to the inbox</a></p>\n", Esc(text), Esc(prefix))
}

/// How many characters of the input the list shows before folding the rest away.
const PREVIEW_CHARS: usize = 60;

/// The input (sensitive fields already redacted by the engine) in a list cell: whole when short,
/// else its start, with the whole in a `<details>` to unfold (no script needed).
struct InputPreview<'a>(Option<&'a str>);

impl std::fmt::Display for InputPreview<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(text) = self.0 else { return f.write_str("(not recorded)") };
        match text.char_indices().nth(PREVIEW_CHARS) {
            None => write!(f, "<pre>{}</pre>", Esc(text)),
            Some((cut, _)) => {
                write!(
                    f,
                    "<details><summary><code>{}…</code></summary><pre>{}</pre></details>",
                    Esc(&text[..cut]),
                    Esc(text)
                )
            }
        }
    }
}

/// Who decided a confirmation so far (a quorum's earlier approvers): each approver with a
/// badge of the verdict, or a dash.
struct DecidedSoFar<'a>(&'a ConfirmationRecord);

impl std::fmt::Display for DecidedSoFar<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.decisions.is_empty() {
            return f.write_str("—");
        }
        for (i, d) in self.0.decisions.iter().enumerate() {
            if i > 0 {
                f.write_str("<br>")?;
            }
            write!(f, "{} {}", Esc(&d.approver), Badge(decision_text(d.verdict)))?;
        }
        Ok(())
    }
}

fn decision_text(v: ApprovalVerdict) -> &'static str {
    match v {
        ApprovalVerdict::Approve => "approved",
        ApprovalVerdict::ApproveInPerson => "approved in person",
        ApprovalVerdict::Deny => "denied",
    }
}

/// A state or verdict as a badge (`<span class="badge KIND">`), its kind from its first word:
/// `pending`, `approved`, `denied`, or `closed` for anything else (withdrawn).
struct Badge<'a>(&'a str);

impl std::fmt::Display for Badge<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<span class=\"badge {}\">{}</span>", badge_kind(self.0), Esc(self.0))
    }
}

/// The badge class of a state or verdict text (the detail page's state is shown as one through
/// its list's class, so that the state's element holds the text alone).
fn badge_kind(text: &str) -> &'static str {
    match text.split(' ').next() {
        Some("pending") => "pending",
        Some("approved") => "approved",
        Some("denied") => "denied",
        _ => "closed",
    }
}

/// "1 of 2 approvals", and what an approval needs when the quorum asks for more than anyone:
/// the roles every approver needs, the named approvers, the role of each slot.
fn approvals_text(r: &ConfirmationRecord) -> String {
    let q = &r.quorum;
    let need = q.required();
    let mut text = format!("{} of {need} approval{}", r.approvals().min(need), if need == 1 { "" } else { "s" });
    let mut asks = Vec::new();
    if !q.roles.is_empty() {
        asks.push(format!("role: {}", q.roles.join(" or ")));
    }
    if !q.approvers.is_empty() {
        asks.push(format!("{need} of {}", q.approvers.join(", ")));
    }
    if !q.slots.is_empty() {
        let mut slots: Vec<String> = q.slots.iter().map(|role| format!("one {role}")).collect();
        let any = (need as usize).saturating_sub(q.slots.len());
        if any > 0 {
            slots.push(format!("{any} of any role"));
        }
        asks.push(slots.join(", "));
    }
    if !asks.is_empty() {
        let _ = write!(text, " ({})", asks.join("; "));
    }
    text
}

/// Who fills which slot of a quorum that has role slots: one item per slot, its role (or "any
/// role") and its approver, or "open".
fn slots_list(r: &ConfirmationRecord) -> String {
    let q = &r.quorum;
    if q.slots.is_empty() {
        return String::new();
    }
    let mut filled: Vec<Option<&str>> = vec![None; q.required() as usize];
    for (decision, slot) in r.decisions.iter().zip(r.slot_assignment()) {
        if let Some(slot) = slot.and_then(|s| filled.get_mut(s)) {
            *slot = Some(decision.approver.as_str());
        }
    }
    let mut out = String::from("<dt>Slots</dt><dd><ul id=\"slots\">");
    for (i, by) in filled.iter().enumerate() {
        let role = q.slot_role(i).unwrap_or("any role");
        let _ = write!(
            out,
            "<li class=\"{}\">{}: {}</li>",
            if by.is_some() { "filled" } else { "open" },
            Esc(role),
            Esc(by.unwrap_or("open"))
        );
    }
    out.push_str("</ul></dd>");
    out
}

fn requester(r: &ConfirmationRecord) -> &str {
    r.requester.as_deref().unwrap_or(&r.binding.consumer_key)
}

fn verdict_text(v: AuditVerdict) -> &'static str {
    match v {
        AuditVerdict::Approve => "approved",
        AuditVerdict::ApproveInPerson => "approved in person",
        AuditVerdict::Deny => "denied",
    }
}

fn state_text(s: &ConfirmationState) -> String {
    match s {
        ConfirmationState::Pending => "pending".to_string(),
        ConfirmationState::Approved { by } => format!("approved by {by}"),
        ConfirmationState::Denied { by } => format!("denied by {by}"),
        ConfirmationState::Consumed { approved_by } => format!("approved by {approved_by} and used"),
        ConfirmationState::Withdrawn => "withdrawn".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::Esc;

    #[test]
    fn escapes_what_html_gives_a_meaning() {
        assert_eq!(
            Esc(r#"<script>alert("x")</script> & 'y'"#).to_string(),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
    }
}
