//! Repair plans: the concrete next action an agent should take after an error.
//!
//! A [`Repair`] is one step or an ordered plan of at most [`MAX_STEPS`] steps, each with a
//! [`RepairAction`], the tool to call where relevant and a short instruction, plus `preserve` and
//! `update` lists of input field names (at most [`MAX_FIELDS`] each). It travels as the optional
//! `repair` member of an [`ErrorPayload`](crate::ErrorPayload) and is also rendered as a bounded
//! "Next action:" sentence appended to the message, for boundaries that keep only text.
//!
//! # Bounds
//!
//! Instructions are [`SafeText`]: trusted application text only, whitespace-normalized and capped
//! at [`MAX_INSTRUCTION_CHARS`]. Tool and field names are normalized the same way (whitespace,
//! control and invisible format characters) and capped at [`MAX_NAME_CHARS`]. A *static* plan
//! (declared at definition time) that breaks a bound, or names a tool or field with stray
//! whitespace or invisible characters, is a definition defect ([`Repair::check_static`]); a
//! *dynamic* plan (built at run time) is cut to the bounds and marked `truncated: true`
//! ([`Repair::bounded`]). A parsed plan must already be in normalized form: parsing never
//! normalizes, it rejects.
//!
//! # Relation to `retry`
//!
//! Each action is compatible with a fixed set of retry categories ([`RepairAction::compatible`],
//! the `repairActions` table of the matrix). A plan fits a payload when every step's action is
//! compatible with the payload's retry; [`AgentSurfaceError::with_repair`](crate::AgentSurfaceError::with_repair)
//! and payload parsing reject a plan that contradicts it.
//!
//! ```
//! use agent_surface_core::repair::{Repair, RepairAction, RepairStep};
//! use agent_surface_core::AgentSurfaceError;
//!
//! let err = AgentSurfaceError::precondition_failed("The selected slot is no longer available.")
//!     .with_repair(Repair::single(
//!         RepairStep::new(RepairAction::CallTool, "Choose a current slot, then retry.").tool("list_slots"),
//!     ))
//!     .unwrap();
//! assert!(err.payload().message().contains("Next action: Call list_slots"));
//!
//! // `stop` says "do not retry": it contradicts a retryable code.
//! let stop = Repair::single(RepairStep::new(RepairAction::Stop, "Tell the user."));
//! assert!(AgentSurfaceError::precondition_failed("No.").with_repair(stop).is_err());
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::code::Retry;
use crate::message::is_quotable;
use crate::text::{SafeText, clean, is_normalized, normalize};

/// The most steps a plan has.
pub const MAX_STEPS: usize = 5;
/// The most field names in `preserve` and in `update`, each.
pub const MAX_FIELDS: usize = 8;
/// The longest instruction, in characters.
pub const MAX_INSTRUCTION_CHARS: usize = 120;
/// The longest tool or field name, in characters.
pub const MAX_NAME_CHARS: usize = 64;

/// What a repair step asks the agent to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RepairAction {
    /// Change the input (the fields named in `update`), then retry.
    ChangeInput,
    /// Call another tool and wait for its result before continuing.
    CallTool,
    /// Re-read the state (the tool list, or the data the call depends on).
    RefreshState,
    /// Retry the same operation (with the same intent; see `preserve`).
    RetrySameOperation,
    /// Ask the user before going on.
    AskUser,
    /// Call again with the same invocation id to learn the recorded outcome.
    Reconcile,
    /// Stop: do not retry and do not work around the failure.
    Stop,
}

impl RepairAction {
    /// Every action, in specification order.
    pub const ALL: [RepairAction; 7] = [
        RepairAction::ChangeInput,
        RepairAction::CallTool,
        RepairAction::RefreshState,
        RepairAction::RetrySameOperation,
        RepairAction::AskUser,
        RepairAction::Reconcile,
        RepairAction::Stop,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            RepairAction::ChangeInput => "change_input",
            RepairAction::CallTool => "call_tool",
            RepairAction::RefreshState => "refresh_state",
            RepairAction::RetrySameOperation => "retry_same_operation",
            RepairAction::AskUser => "ask_user",
            RepairAction::Reconcile => "reconcile",
            RepairAction::Stop => "stop",
        }
    }

    /// What the action means, in one sentence (for the matrix and the docs).
    pub const fn meaning(self) -> &'static str {
        match self {
            RepairAction::ChangeInput => "Change the input fields named in update, then retry.",
            RepairAction::CallTool => "Call the named tool and wait for its result before the next step.",
            RepairAction::RefreshState => "Re-read the tool list or the state the call depends on.",
            RepairAction::RetrySameOperation => "Retry the same operation, keeping the fields named in preserve.",
            RepairAction::AskUser => "Ask the user before going on.",
            RepairAction::Reconcile => "Call again with the same invocationId and input to learn the recorded outcome.",
            RepairAction::Stop => "Do not retry and do not work around the failure.",
        }
    }

    /// The retry categories this action is compatible with (the `repairActions` table of the
    /// matrix).
    ///
    /// ```
    /// use agent_surface_core::{repair::RepairAction, Retry};
    /// assert_eq!(RepairAction::Stop.compatible(), &[Retry::No]);
    /// assert!(!RepairAction::RetrySameOperation.compatible().contains(&Retry::No));
    /// ```
    pub const fn compatible(self) -> &'static [Retry] {
        match self {
            RepairAction::ChangeInput => &[Retry::WithChanges],
            RepairAction::CallTool => &[Retry::No, Retry::AfterRefresh, Retry::WithChanges, Retry::WithConfirmation],
            RepairAction::RefreshState => &[Retry::No, Retry::AfterRefresh, Retry::WithChanges],
            RepairAction::RetrySameOperation => {
                &[Retry::Yes, Retry::AfterRefresh, Retry::AfterDelay, Retry::WithConfirmation, Retry::WithChanges]
            }
            RepairAction::AskUser => &[Retry::No, Retry::WithConfirmation, Retry::WithChanges],
            RepairAction::Reconcile => &[Retry::No],
            RepairAction::Stop => &[Retry::No],
        }
    }

    /// Whether the action is compatible with `retry`.
    pub fn is_compatible(self, retry: Retry) -> bool {
        self.compatible().contains(&retry)
    }
}

impl fmt::Display for RepairAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One step of a repair plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RepairStep {
    action: RepairAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool: Option<String>,
    instruction: String,
    /// Whether the tool name or the instruction was cut to its cap (not on the wire).
    #[serde(skip)]
    cut: bool,
    /// Whether the tool name needed normalizing without being cut (not on the wire).
    #[serde(skip)]
    unclean: bool,
}

impl RepairStep {
    /// A step with an instruction the application wrote (trusted text only: never an error's,
    /// a request's or a downstream response's text).
    pub fn new(action: RepairAction, instruction: impl Into<SafeText>) -> RepairStep {
        let raw = instruction.into();
        let instruction = normalize(raw.as_str(), MAX_INSTRUCTION_CHARS);
        let cut = instruction != raw.as_str();
        RepairStep { action, tool: None, instruction, cut, unclean: false }
    }

    /// The tool the step is about (required for `call_tool`); whitespace-normalized, stripped of
    /// control and invisible characters and capped at [`MAX_NAME_CHARS`].
    pub fn tool(mut self, tool: &str) -> RepairStep {
        let name = Name::new(tool);
        self.cut |= name.cut;
        self.unclean |= name.unclean;
        self.tool = Some(name.value);
        self
    }

    /// The action.
    pub fn action(&self) -> RepairAction {
        self.action
    }

    /// The tool, if any.
    pub fn tool_name(&self) -> Option<&str> {
        self.tool.as_deref()
    }

    /// The instruction.
    pub fn instruction(&self) -> &str {
        &self.instruction
    }
}

/// A tool or field name as a builder received it, normalized.
struct Name {
    /// The normalized name.
    value: String,
    /// It was over [`MAX_NAME_CHARS`] after normalization, so it was cut.
    cut: bool,
    /// It was not cut, but normalization changed it (stray whitespace, control or invisible
    /// characters).
    unclean: bool,
}

impl Name {
    fn new(raw: &str) -> Name {
        let cleaned = clean(raw);
        let cut = cleaned.chars().count() > MAX_NAME_CHARS;
        let unclean = !cut && cleaned != raw;
        Name { value: normalize(raw, MAX_NAME_CHARS), cut, unclean }
    }
}

/// Why a tool name is not in normalized form.
const UNCLEAN_TOOL: &str = "the tool name is not in normalized form (leading, trailing, repeated or non-space \
                            whitespace, or control or invisible characters); write it exactly as the tool is named";
/// Why a field name is not in normalized form.
const UNCLEAN_FIELD: &str = "a field name of `preserve` or `update` is not in normalized form (leading, trailing, \
                             repeated or non-space whitespace, or control or invisible characters)";
/// Why an instruction is not in normalized form.
const UNCLEAN_INSTRUCTION: &str = "the instruction is not in normalized form (leading, trailing, repeated or \
                                   non-space whitespace, or control or invisible characters)";

/// Checks that a parsed text is in the normalized form the builders produce: `Malformed` when it
/// has characters normalization removes or changes, `TooLong` when it is only over `cap`.
fn check_normalized(text: &str, cap: usize, step: usize, problem: &'static str) -> Result<(), RepairError> {
    if is_normalized(text, cap) {
        Ok(())
    } else if clean(text) != text {
        Err(RepairError::Malformed { step, problem })
    } else {
        Err(RepairError::TooLong(step))
    }
}

/// Why a repair plan is rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RepairError {
    /// The plan has no step.
    #[error("a repair plan needs at least one step")]
    Empty,
    /// More steps than [`MAX_STEPS`].
    #[error("a repair plan has at most {MAX_STEPS} steps, this one has {0}")]
    TooManySteps(usize),
    /// More field names than [`MAX_FIELDS`] in `preserve` or `update`.
    #[error("`{list}` has at most {MAX_FIELDS} field names, this one has {count}")]
    TooManyFields {
        /// `preserve` or `update`.
        list: &'static str,
        /// How many names it has.
        count: usize,
    },
    /// An instruction, tool or field name over its cap: the step (1-based), or 0 for a field name
    /// of `preserve` or `update`.
    #[error("step {0} (0: the field lists): an instruction, tool or field name is over its length cap")]
    TooLong(usize),
    /// An empty instruction or field name, a `call_tool` step without a tool, or a name or
    /// instruction that is not in normalized form (stray whitespace, control or invisible
    /// characters).
    #[error("step {step}: {problem}")]
    Malformed {
        /// The step (1-based; 0 for the field lists).
        step: usize,
        /// What is wrong.
        problem: &'static str,
    },
    /// A step's action contradicts the payload's retry category.
    #[error("step {step}: `{action}` contradicts retry `{retry}`")]
    Contradicts {
        /// The step (1-based).
        step: usize,
        /// Its action.
        action: RepairAction,
        /// The payload's retry category.
        retry: Retry,
    },
    /// The error already carries a repair plan.
    #[error("the error already carries a repair plan")]
    AlreadySet,
}

impl RepairError {
    /// Whether the error is about a bound (a static plan that breaks it is `LIMIT_EXCEEDED`; the
    /// others are `INVALID_DEFINITION`).
    pub fn is_limit(&self) -> bool {
        matches!(self, RepairError::TooManySteps(_) | RepairError::TooManyFields { .. } | RepairError::TooLong(_))
    }
}

/// A repair: one step or an ordered plan, with the input fields to preserve and to update.
///
/// On the wire: `{"steps": [{"action", "tool"?, "instruction"}], "preserve"?: [..], "update"?:
/// [..], "truncated"?: true}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Repair {
    steps: Vec<RepairStep>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    preserve: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    update: Vec<String>,
    /// Set when a dynamic plan was cut to the bounds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    truncated: bool,
    /// Whether a field name was cut to its cap (not on the wire).
    #[serde(skip)]
    names_cut: bool,
    /// Whether a field name needed normalizing without being cut (not on the wire).
    #[serde(skip)]
    names_unclean: bool,
}

impl Repair {
    /// A one-step repair.
    pub fn single(step: RepairStep) -> Repair {
        Repair::plan([step])
    }

    /// An ordered plan; the agent runs the steps in order, not in parallel.
    pub fn plan(steps: impl IntoIterator<Item = RepairStep>) -> Repair {
        Repair {
            steps: steps.into_iter().collect(),
            preserve: Vec::new(),
            update: Vec::new(),
            truncated: false,
            names_cut: false,
            names_unclean: false,
        }
    }

    /// Names intent-defining input fields whose original values must survive the repair
    /// (normalized like [`RepairStep::tool`]).
    pub fn preserve(mut self, fields: &[&str]) -> Repair {
        let names = self.names(fields);
        self.preserve.extend(names);
        self
    }

    /// Names input fields that must be replaced from the repair's output (normalized like
    /// [`RepairStep::tool`]).
    pub fn update(mut self, fields: &[&str]) -> Repair {
        let names = self.names(fields);
        self.update.extend(names);
        self
    }

    fn names(&mut self, fields: &[&str]) -> Vec<String> {
        fields
            .iter()
            .map(|f| {
                let name = Name::new(f);
                self.names_cut |= name.cut;
                self.names_unclean |= name.unclean;
                name.value
            })
            .collect()
    }

    /// The steps, in order.
    pub fn steps(&self) -> &[RepairStep] {
        &self.steps
    }

    /// The fields to preserve.
    pub fn preserved(&self) -> &[String] {
        &self.preserve
    }

    /// The fields to update.
    pub fn updated(&self) -> &[String] {
        &self.update
    }

    /// Whether a dynamic plan was cut to the bounds.
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }

    /// Checks the well-formedness every plan needs: at least one step, non-empty instructions and
    /// names, a tool on every `call_tool` step.
    fn check_shape(&self) -> Result<(), RepairError> {
        if self.steps.is_empty() {
            return Err(RepairError::Empty);
        }
        for (i, s) in self.steps.iter().enumerate() {
            if s.instruction.is_empty() {
                return Err(RepairError::Malformed { step: i + 1, problem: "the instruction is empty" });
            }
            if s.action == RepairAction::CallTool && s.tool.as_deref().is_none_or(str::is_empty) {
                return Err(RepairError::Malformed { step: i + 1, problem: "a call_tool step needs a tool" });
            }
            if s.tool.as_deref().is_some_and(str::is_empty) {
                return Err(RepairError::Malformed { step: i + 1, problem: "the tool name is empty" });
            }
        }
        if self.preserve.iter().chain(&self.update).any(String::is_empty) {
            return Err(RepairError::Malformed { step: 0, problem: "a field name is empty" });
        }
        Ok(())
    }

    fn check_counts(&self) -> Result<(), RepairError> {
        if self.steps.len() > MAX_STEPS {
            return Err(RepairError::TooManySteps(self.steps.len()));
        }
        for (list, fields) in [("preserve", &self.preserve), ("update", &self.update)] {
            if fields.len() > MAX_FIELDS {
                return Err(RepairError::TooManyFields { list, count: fields.len() });
            }
        }
        Ok(())
    }

    /// The check for a static plan, declared at definition time: any broken bound (too many
    /// steps or fields, an instruction or name that had to be cut) is an error, reported by the
    /// registry as a definition defect (`LIMIT_EXCEEDED`, see [`RepairError::is_limit`]). So is a
    /// malformed plan, including a tool or field name that normalization changed without cutting
    /// it (`" list_orders "`, a name with a control or invisible character): that is
    /// [`RepairError::Malformed`], `INVALID_DEFINITION`, since no bound is broken.
    ///
    /// ```
    /// use agent_surface_core::repair::{Repair, RepairAction, RepairError, RepairStep};
    ///
    /// let plan = Repair::single(RepairStep::new(RepairAction::CallTool, "List them.").tool(" list_orders "));
    /// let err = plan.check_static().unwrap_err();
    /// assert!(matches!(err, RepairError::Malformed { step: 1, .. }) && !err.is_limit());
    /// ```
    pub fn check_static(&self) -> Result<(), RepairError> {
        self.check_shape()?;
        if let Some(i) = self.steps.iter().position(|s| s.unclean) {
            return Err(RepairError::Malformed { step: i + 1, problem: UNCLEAN_TOOL });
        }
        if self.names_unclean {
            return Err(RepairError::Malformed { step: 0, problem: UNCLEAN_FIELD });
        }
        self.check_counts()?;
        if let Some(i) = self.steps.iter().position(|s| s.cut) {
            return Err(RepairError::TooLong(i + 1));
        }
        if self.names_cut {
            return Err(RepairError::TooLong(0));
        }
        Ok(())
    }

    /// The plan cut to the bounds, for a dynamic plan built at run time: at most [`MAX_STEPS`]
    /// steps and [`MAX_FIELDS`] names per list, marked `truncated` when anything was dropped
    /// (instructions and names are capped with a trailing `…` when they are built). A name that
    /// was only whitespace-normalized or stripped of invisible characters is not a cut.
    pub fn bounded(mut self) -> Repair {
        let mut cut = self.names_cut || self.steps.iter().any(|s| s.cut);
        if self.steps.len() > MAX_STEPS {
            self.steps.truncate(MAX_STEPS);
            cut = true;
        }
        for list in [&mut self.preserve, &mut self.update] {
            if list.len() > MAX_FIELDS {
                list.truncate(MAX_FIELDS);
                cut = true;
            }
        }
        self.truncated |= cut;
        // The marker now records any cut; the private flags are only for `check_static`.
        self.names_cut = false;
        self.names_unclean = false;
        for s in &mut self.steps {
            s.cut = false;
            s.unclean = false;
        }
        self
    }

    /// Whether every step is compatible with `retry`.
    pub fn check_retry(&self, retry: Retry) -> Result<(), RepairError> {
        match self.steps.iter().enumerate().find(|(_, s)| !s.action.is_compatible(retry)) {
            Some((i, s)) => Err(RepairError::Contradicts { step: i + 1, action: s.action, retry }),
            None => Ok(()),
        }
    }

    /// The checks a parsed plan passes: the shape, the bounds, normalized form (every
    /// instruction, tool and field name is exactly what the builders would have produced from it:
    /// `normalize(x, cap) == x`) and compatibility with `retry`.
    pub(crate) fn check_parsed(&self, retry: Retry) -> Result<(), RepairError> {
        self.check_shape()?;
        self.check_counts()?;
        for (i, s) in self.steps.iter().enumerate() {
            check_normalized(&s.instruction, MAX_INSTRUCTION_CHARS, i + 1, UNCLEAN_INSTRUCTION)?;
            if let Some(tool) = s.tool.as_deref() {
                check_normalized(tool, MAX_NAME_CHARS, i + 1, UNCLEAN_TOOL)?;
            }
        }
        for field in self.preserve.iter().chain(&self.update) {
            check_normalized(field, MAX_NAME_CHARS, 0, UNCLEAN_FIELD)?;
        }
        self.check_retry(retry)
    }

    /// The "Next action:" sentence for the message, at most `budget` characters (empty when not
    /// even a short form fits). Field values are never included; tool and field names only when
    /// they look like plain identifiers. A `call_tool` step whose tool name is not one still
    /// renders the call, pointing at the structured plan (`Call the tool named in
    /// repair.steps[0].tool …`, the 0-based index of the step in the JSON array).
    pub(crate) fn render(&self, budget: usize) -> String {
        let step_text = |i: usize, s: &RepairStep| -> String {
            let mut t = String::new();
            match s.tool.as_deref() {
                Some(tool) if s.action == RepairAction::CallTool && is_quotable(tool) => {
                    t.push_str(&format!("Call {tool} and wait for its result. "));
                }
                Some(_) if s.action == RepairAction::CallTool => {
                    t.push_str(&format!("Call the tool named in repair.steps[{i}].tool and wait for its result. "));
                }
                Some(tool) if is_quotable(tool) => t.push_str(&format!("({tool}) ")),
                _ => {}
            }
            t.push_str(&s.instruction);
            if !t.ends_with(['.', '!', '?', '…']) {
                t.push('.');
            }
            t
        };
        let mut out = if self.steps.len() == 1 {
            format!("Next action: {}", step_text(0, &self.steps[0]))
        } else {
            let mut s = String::from("Next actions, in order, not in parallel:");
            for (i, step) in self.steps.iter().enumerate() {
                s.push_str(&format!(" {}. {}", i + 1, step_text(i, step)));
            }
            s
        };
        let names = |l: &[String]| l.iter().filter(|f| is_quotable(f)).cloned().collect::<Vec<_>>().join(", ");
        let keep = names(&self.preserve);
        if !keep.is_empty() {
            out.push_str(&format!(" Keep {keep} unchanged."));
        }
        let update = names(&self.update);
        if !update.is_empty() {
            out.push_str(&format!(" Replace {update} from the repair output."));
        }
        const SHORT: &str = "Next action: see the repair plan.";
        if out.chars().count() <= budget {
            out
        } else if budget >= SHORT.chars().count() + 20 {
            normalize(&out, budget)
        } else if budget >= SHORT.chars().count() {
            SHORT.to_string()
        } else {
            String::new()
        }
    }
}
