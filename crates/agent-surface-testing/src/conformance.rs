//! The adapter conformance kit: does an adapter carry every code, retry category and details
//! shape through its wire form without losing anything?
//!
//! An adapter provides an [`AdapterCodec`]: `encode` turns an [`InvokeResult`] into what the
//! adapter sends (an MCP tool result, a provider's tool-result message, …) and `decode` reads it
//! back. [`check_conformance`] runs every case of [`cases`] — each example payload of every
//! matrix row (so every code with every retry category it can take), payloads with
//! representative details, and a handful of outputs — through `decode(encode(r))` and compares
//! the result with the original — its message worded for what the adapter's binding lets an
//! agent send ([`ConformanceConfig::sends`]; `spec/error-model.md`, "Messages are true to their
//! transport"), everything else as it was.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use agent_surface_core::details::{InputIssue, PreconditionDetails};
use agent_surface_core::matrix::MATRIX;
use agent_surface_core::message::Sends;
use agent_surface_core::{AgentSurfaceError, Effect, ErrorCode, InvokeResult, Retry, SafeText, Timestamp};
use serde_json::{Map, json};

/// An adapter's encode/decode pair.
pub trait AdapterCodec {
    /// The adapter's wire form of one result.
    type Wire;

    /// The wire form of `result`, as the adapter sends it.
    fn encode(&self, result: &InvokeResult) -> Self::Wire;

    /// The result read back from its wire form.
    fn decode(&self, wire: &Self::Wire) -> Result<InvokeResult, String>;
}

/// An [`AdapterCodec`] made of two closures; build it with [`codec`].
pub struct FnCodec<E, D> {
    encode: E,
    decode: D,
}

impl<E, D> fmt::Debug for FnCodec<E, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnCodec")
    }
}

/// An [`AdapterCodec`] from an encode and a decode closure.
///
/// ```
/// use agent_surface_core::InvokeResult;
/// use agent_surface_testing::{assert_conformance, codec};
///
/// // The identity adapter: JSON text of the whole result.
/// let json_text = codec(
///     |r: &InvokeResult| serde_json::to_string(r).unwrap(),
///     |s: &String| serde_json::from_str::<InvokeResult>(s).map_err(|e| e.to_string()),
/// );
/// assert_conformance(&json_text);
/// ```
pub fn codec<W, E, D>(encode: E, decode: D) -> FnCodec<E, D>
where
    E: Fn(&InvokeResult) -> W,
    D: Fn(&W) -> Result<InvokeResult, String>,
{
    FnCodec { encode, decode }
}

impl<W, E, D> AdapterCodec for FnCodec<E, D>
where
    E: Fn(&InvokeResult) -> W,
    D: Fn(&W) -> Result<InvokeResult, String>,
{
    type Wire = W;

    fn encode(&self, result: &InvokeResult) -> W {
        (self.encode)(result)
    }

    fn decode(&self, wire: &W) -> Result<InvokeResult, String> {
        (self.decode)(wire)
    }
}

/// What [`check_conformance`] compares. Build it with struct update syntax over `Default`.
#[derive(Clone, Debug, Default)]
pub struct ConformanceConfig {
    /// Compare invocation ids too. Off by default: most wire forms carry the provider's call id,
    /// not the invocation id, and the comparison then ignores it.
    pub compare_invocation_ids: bool,
    /// Further cases to run besides [`cases`].
    pub extra_cases: Vec<InvokeResult>,
    /// What the adapter's binding lets an agent send, which decides the wording of the messages
    /// it must carry ([`InvokeResult::worded_for`]): [`Sends::Request`] (the default: the payload
    /// exactly as built, e.g. HTTP) or [`Sends::Arguments`] (MCP, the embedded toolset).
    pub sends: Sends,
}

/// One case that did not survive the round trip.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The result that was encoded.
    pub case: InvokeResult,
    /// What went wrong.
    pub problem: String,
}

/// The outcome of [`check_conformance`].
#[derive(Clone, Debug, Default)]
pub struct ConformanceReport {
    /// How many cases ran.
    pub cases: usize,
    /// The (code, retry) pairs that survived the round trip.
    pub covered: BTreeSet<(ErrorCode, Retry)>,
    /// The cases that did not.
    pub failures: Vec<Failure>,
}

impl ConformanceReport {
    /// The (code, retry) pairs the matrix allows that no passing case covered.
    pub fn uncovered(&self) -> Vec<(ErrorCode, Retry)> {
        let mut missing = Vec::new();
        for row in &MATRIX {
            for retry in row.retry.values() {
                if !self.covered.contains(&(row.code, retry)) {
                    missing.push((row.code, retry));
                }
            }
        }
        missing
    }

    /// Whether every case passed and every (code, retry) pair of the matrix was covered.
    pub fn is_conformant(&self) -> bool {
        self.failures.is_empty() && self.uncovered().is_empty()
    }
}

impl fmt::Display for ConformanceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} cases, {} failed", self.cases, self.failures.len())?;
        for failure in &self.failures {
            let case = serde_json::to_string_pretty(&failure.case).unwrap_or_default();
            writeln!(f, "- {}\n  case: {}", failure.problem, case.replace('\n', "\n  "))?;
        }
        for (code, retry) in self.uncovered() {
            writeln!(f, "- not covered: {code} with retry `{retry}`")?;
        }
        Ok(())
    }
}

/// The corpus: every example payload of every matrix row, payloads with representative details
/// (author keys, unicode, quotes, many issues) and with repair plans, and successful outputs of every JSON kind. Error
/// cases alternate between carrying an invocation id and not.
pub fn cases() -> Vec<InvokeResult> {
    let mut out = Vec::new();
    let mut n = 0usize;
    let mut id = || {
        n += 1;
        n.is_multiple_of(2).then(|| format!("inv-{n}"))
    };
    for row in &MATRIX {
        for payload in agent_surface_core::examples::of(row.code) {
            out.push(InvokeResult::error(payload, id()));
        }
    }
    let mut extra = Map::new();
    extra.insert("orderId".into(), json!("A-1001"));
    extra.insert("shippedAt".into(), json!("2026-11-02T09:30:00Z"));
    extra.insert("carrier".into(), json!({"name": "Post \"Express\"", "tracking": ["JJ1", "JJ2"]}));
    let representative = [
        AgentSurfaceError::precondition_failed_with(
            "Shipped orders cannot be cancelled; offer a return instead.",
            PreconditionDetails { reason: Some("order-shipped".into()), extra },
        ),
        AgentSurfaceError::invalid_input(
            vec![
                InputIssue { path: "/quantity".into(), message: "must be at least 1".into() },
                InputIssue { path: "/lines/0/sku".into(), message: "is required".into() },
                InputIssue { path: "/naïve ключ/~1".into(), message: "must be a string, not \"null\"".into() },
                InputIssue { path: String::new(), message: "has 2 unknown members".into() },
            ],
            None,
        ),
        AgentSurfaceError::confirmation_required(
            "c-ü-1",
            SafeText::from("Refund 12,50 € to \"Zoë\" — card ending 4242."),
            Timestamp::from_unix_millis(1_795_957_500_000),
            Effect::External,
            agent_surface_core::details::Origin::Server,
        ),
        AgentSurfaceError::capability_not_available("Sign in to a store first (Settings → Account)."),
    ];
    for e in representative {
        out.push(InvokeResult::error(e.into_payload(), id()));
    }
    // Repair plans travel inside the payload: a single step, an ordered plan with preserve/update
    // lists, and the runtime's outcome-unknown plan.
    use agent_surface_core::repair::{Repair, RepairAction, RepairStep};
    let plan = Repair::plan([
        RepairStep::new(RepairAction::CallTool, "Refresh the source account state.").tool("payments-list_accounts"),
        RepairStep::new(RepairAction::CallTool, "Create a replacement authorization.").tool("payments-authorize"),
    ])
    .preserve(&["amount", "receiverId"])
    .update(&["authorizationId"]);
    let repaired = [
        AgentSurfaceError::precondition_failed("The source account changed after authorization.").with_repair(plan),
        AgentSurfaceError::precondition_failed("Choose a current slot.")
            .with_repair(Repair::single(RepairStep::new(RepairAction::ChangeInput, "Pick a slot from the list."))),
    ];
    for e in repaired {
        // The plans above are compatible with with-changes; a failure here is a bug in this corpus.
        out.push(InvokeResult::error(e.expect("a compatible repair plan").into_payload(), id()));
    }
    out.push(InvokeResult::error(AgentSurfaceError::outcome_unknown().into_payload(), id()));
    out.push(InvokeResult::error(AgentSurfaceError::outcome_unknown_untracked().into_payload(), None));
    let outputs = [
        json!({"total": 3, "items": [{"sku": "tea", "quantity": 2}]}),
        json!([1, 2.5, -3, "x", null, true]),
        json!("plain text with \"quotes\" and a\nnewline"),
        json!(42),
        json!(null),
        json!(false),
        json!({}),
        json!({"nested": {"emoji": "🍵", "escape": "\u{1}\t", "big": 18446744073709551615u64}}),
        json!({"code": "NOT_AN_ERROR", "message": "an output that merely looks like a payload", "retry": "maybe"}),
    ];
    for (i, output) in outputs.into_iter().enumerate() {
        out.push(InvokeResult::ok(output, (i % 2 == 1).then(|| format!("inv-ok-{i}"))));
    }
    out
}

/// Every case of the corpus ([`cases`]), each under a heading that names it (its number, its code
/// and retry category or `OK`, its invocation id), rendered by `render`: the text a snapshot test
/// pins for an adapter's wire form (see `docs/testing.md`, "Snapshots").
///
/// ```
/// let text = agent_surface_testing::wire_snapshot(|result| {
///     serde_json::to_string_pretty(result).unwrap()
/// });
/// assert!(text.starts_with("## 1 CAPABILITY_NOT_FOUND (after-refresh)\n{"));
/// assert_eq!(text.matches("\n## ").count() + 1, agent_surface_testing::cases().len());
/// ```
pub fn wire_snapshot(render: impl Fn(&InvokeResult) -> String) -> String {
    let mut out = String::new();
    for (i, case) in cases().iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let what = match case.error_payload() {
            Some(p) => format!("{} ({})", p.code(), p.retry()),
            None => "OK".to_string(),
        };
        out.push_str(&format!("## {} {what}", i + 1));
        if let Some(id) = case.invocation_id() {
            out.push_str(&format!(" {id}"));
        }
        out.push('\n');
        out.push_str(render(case).trim_end());
        out.push('\n');
    }
    out
}

/// Runs every case through `decode(encode(case))` and reports what did not come back unchanged.
pub fn check_conformance<C: AdapterCodec>(codec: &C, config: &ConformanceConfig) -> ConformanceReport {
    let mut report = ConformanceReport::default();
    for case in cases().into_iter().chain(config.extra_cases.iter().cloned()) {
        report.cases += 1;
        let wire = codec.encode(&case);
        let decoded = match codec.decode(&wire) {
            Ok(decoded) => decoded,
            Err(problem) => {
                report.failures.push(Failure { case, problem: format!("decode failed: {problem}") });
                continue;
            }
        };
        let worded = case.worded_for(config.sends).into_owned();
        let (expected, got) = if config.compare_invocation_ids {
            (worded, decoded)
        } else {
            (worded.with_invocation_id(None), decoded.with_invocation_id(None))
        };
        if expected != got {
            let got = serde_json::to_string(&got).unwrap_or_default();
            report.failures.push(Failure { case, problem: format!("came back different: {got}") });
            continue;
        }
        if let Some(p) = case.error_payload() {
            report.covered.insert((p.code(), p.retry()));
        }
    }
    report
}

/// Asserts that `codec` is conformant with the default [`ConformanceConfig`].
///
/// # Panics
///
/// When a case does not survive the round trip or a (code, retry) pair is not covered; the
/// message lists every failing case in full.
#[track_caller]
pub fn assert_conformance<C: AdapterCodec>(codec: &C) {
    assert_conformance_with(codec, &ConformanceConfig::default());
}

/// Asserts that `codec` is conformant under `config`.
///
/// # Panics
///
/// As [`assert_conformance`].
#[track_caller]
pub fn assert_conformance_with<C: AdapterCodec>(codec: &C, config: &ConformanceConfig) {
    let report = check_conformance(codec, config);
    if !report.is_conformant() {
        panic!("the adapter is not conformant:\n{report}");
    }
}

/// Per code, how many cases of [`cases`] exercise it (for coverage reports).
pub fn case_counts() -> BTreeMap<ErrorCode, usize> {
    let mut counts = BTreeMap::new();
    for case in cases() {
        if let Some(code) = case.code() {
            *counts.entry(code).or_default() += 1;
        }
    }
    counts
}
