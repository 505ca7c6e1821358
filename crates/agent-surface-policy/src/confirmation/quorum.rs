//! Who must approve a confirmation and who did: the [`Quorum`], its role slots ([`SlotSet`]), the
//! matching that gives each approval a distinct slot, and the approvers' decisions
//! ([`ApproverDecision`], [`ApprovalVerdict`]) it counts.

use agent_surface_core::Timestamp;

use crate::consumer::Identity;

/// The most approvals a [`Quorum`] may ask for (a larger number is read as this one, and refused
/// when the registry checks the quorum).
pub const MAX_QUORUM: u32 = 16;

/// The most approvers a [`Quorum`] may name ([`Quorum::approvers`]).
pub const MAX_NAMED_APPROVERS: usize = 256;

/// How many approvals a confirmation needs, and from whom.
///
/// A confirmation is approved when `approvals` distinct approvers approved it — distinct as a
/// person reads their names ([`crate::principal::same_principal`]), none of them the requester.
/// Each approval fills one of the quorum's `approvals` *slots*:
///
/// - **`roles`**: an approval counts only from an identity that holds at least one of them.
///   "2 of role `manager`" is `Quorum::of(2).with_role("manager")`, "2 approvers, each a
///   `manager` or a `security` officer" is `Quorum::of(2).with_role("manager").with_role("security")`.
/// - **`approvers`** ("N of M"): an approval counts only from one of these M named subjects,
///   compared exactly (an authenticated subject is an identity, not a name to read: a
///   look-alike of a named approver is not one). "2 of alice, bob and carol" is
///   `Quorum::of(2).with_approver("alice").with_approver("bob").with_approver("carol")`.
/// - **`slots`**: a role per approver slot. "One `manager` and one `security` officer" is
///   `Quorum::default().with_slot("manager").with_slot("security")`; each approval fills one
///   slot whose role its approver holds, an approver holding both roles fills only one, and the
///   assignment is a matching over all the approvals (an approver who could fill either slot
///   never blocks a later one who can fill only one). Slots beyond the named ones (with
///   `approvals` larger than `slots`) take an approver of any role: `Quorum::of(3).with_slot("security")`
///   is three approvers, one of them a `security` officer.
///
/// The three combine: every approver must pass `roles` and `approvers`, and fill a slot. An
/// approval that cannot count is refused ([`ApprovalError::NotEligible`](crate::ApprovalError::NotEligible)
/// when the approver could fill no slot at all, [`ApprovalError::SlotsTaken`](crate::ApprovalError::SlotsTaken)
/// when the slots they could fill are taken). A denial needs no role and is final whoever gives
/// it. An in-person approval (`in-person:{channel}`, no roles) counts at most once per
/// confirmation — it is always the requester — and only towards a slot that asks for no role.
///
/// The default is the single approval of anyone but the requester. A quorum that cannot be met
/// ([`Quorum::problem`]) is an `INVALID_DEFINITION` when the registry checks its wiring.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Quorum {
    /// How many distinct approvers must approve (1 to [`MAX_QUORUM`]; at least as many as
    /// `slots`; 0 is read as 1).
    #[serde(default = "one")]
    pub approvals: u32,
    /// The roles every approver needs, any one of them; empty: any approver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// The subjects whose approvals count (the "M" of "N of M"), compared exactly; empty: anyone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    /// The role of each of the first slots, one approver per slot; the remaining `approvals −
    /// slots` slots take any approver. Empty: every slot takes any approver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<String>,
}

fn one() -> u32 {
    1
}

impl Default for Quorum {
    fn default() -> Quorum {
        Quorum { approvals: 1, roles: Vec::new(), approvers: Vec::new(), slots: Vec::new() }
    }
}

impl Quorum {
    /// `approvals` distinct approvers, any role.
    pub fn of(approvals: u32) -> Quorum {
        Quorum { approvals, ..Quorum::default() }
    }

    /// The same quorum, counting approvals from identities with `role` too (an approver needs
    /// one of the listed roles).
    pub fn with_role(mut self, role: impl Into<String>) -> Quorum {
        self.roles.push(role.into());
        self
    }

    /// The same quorum, counting approvals from the subject `approver` too (only the named
    /// approvers count once one is named).
    pub fn with_approver(mut self, approver: impl Into<String>) -> Quorum {
        self.approvers.push(approver.into());
        self
    }

    /// The same quorum with one more slot, for an approver holding `role`; `approvals` grows
    /// with the slots (`Quorum::default().with_slot("manager").with_slot("security")` needs two
    /// approvals).
    pub fn with_slot(mut self, role: impl Into<String>) -> Quorum {
        self.slots.push(role.into());
        self.approvals = self.approvals.max(u32::try_from(self.slots.len()).unwrap_or(u32::MAX));
        self
    }

    /// How many approvals are needed (the number of slots), within 1 and [`MAX_QUORUM`].
    pub fn required(&self) -> u32 {
        let slots = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
        self.approvals.max(slots).clamp(1, MAX_QUORUM)
    }

    /// The role slot `slot` asks for; `None` for a slot that takes any approver.
    pub fn slot_role(&self, slot: usize) -> Option<&str> {
        self.slots.get(slot).map(String::as_str)
    }

    /// Whether an approval by `approver` may count at all: it holds one of the roles (or none is
    /// asked), it is one of the named approvers (or none is named), and it could fill a slot.
    pub fn admits(&self, approver: &Identity) -> bool {
        !self.slots_for(approver).is_empty()
    }

    /// The slots `approver` could fill: none when it lacks the quorum's `roles` or is not one
    /// of its named `approvers` (compared exactly); otherwise every slot whose role it holds
    /// and every slot that asks for none.
    pub fn slots_for(&self, approver: &Identity) -> SlotSet {
        let roles = self.roles.is_empty() || self.roles.iter().any(|r| approver.has_role(r));
        let named = self.approvers.is_empty() || self.approvers.contains(&approver.subject);
        if !roles || !named {
            return SlotSet::EMPTY;
        }
        let mut set = SlotSet::EMPTY;
        for slot in 0..self.required() as usize {
            if self.slot_role(slot).is_none_or(|role| approver.has_role(role)) {
                set = set.with(slot);
            }
        }
        set
    }

    /// The slots this quorum has, all of them.
    pub fn all_slots(&self) -> SlotSet {
        SlotSet::first(self.required() as usize)
    }

    /// Why this quorum can never be met or is malformed, for the registry's definition check;
    /// `None` when it is sound: 1 to [`MAX_QUORUM`] approvals, no more slots than approvals, no
    /// empty role or approver name, no approver named twice (as a person reads the names), at
    /// most [`MAX_NAMED_APPROVERS`], and at least as many distinct named approvers as approvals.
    pub fn problem(&self) -> Option<String> {
        if self.approvals == 0 {
            return Some("asks for 0 approvals (at least 1)".to_string());
        }
        if self.approvals > MAX_QUORUM {
            return Some(format!("asks for {} approvals (at most {MAX_QUORUM})", self.approvals));
        }
        if self.slots.len() > self.approvals as usize {
            return Some(format!(
                "names {} role slots for {} approval{} (one approver per slot)",
                self.slots.len(),
                self.approvals,
                if self.approvals == 1 { "" } else { "s" }
            ));
        }
        if self.roles.iter().chain(&self.slots).any(|r| r.trim().is_empty()) {
            return Some("names an empty role".to_string());
        }
        if self.approvers.iter().any(|a| a.trim().is_empty()) {
            return Some("names an empty approver".to_string());
        }
        if self.approvers.len() > MAX_NAMED_APPROVERS {
            return Some(format!("names {} approvers (at most {MAX_NAMED_APPROVERS})", self.approvers.len()));
        }
        let mut seen: Vec<String> = Vec::with_capacity(self.approvers.len());
        for approver in &self.approvers {
            let read = crate::principal::skeleton(approver);
            if seen.contains(&read) {
                return Some(format!(
                    "names approver `{approver}` twice (as a person reads the names; distinct approvers must \
                     have distinct names)"
                ));
            }
            seen.push(read);
        }
        if !self.approvers.is_empty() && self.approvers.len() < self.approvals as usize {
            return Some(format!(
                "asks for {} approvals of {} named approver{}",
                self.approvals,
                self.approvers.len(),
                if self.approvers.len() == 1 { "" } else { "s" }
            ));
        }
        None
    }

    /// Which slot each decision fills (`None`: a denial, or an approval no slot is left for),
    /// in the order of `decisions`: a maximum matching of the approvals to the slots they could
    /// fill ([`ApproverDecision::slots`]), earlier approvals first.
    pub fn assignment(&self, decisions: &[ApproverDecision]) -> Vec<Option<usize>> {
        let all = self.all_slots();
        let sets: Vec<SlotSet> = decisions
            .iter()
            .map(|d| if d.verdict == ApprovalVerdict::Deny { SlotSet::EMPTY } else { d.slots.intersect(all) })
            .collect();
        assign(&sets, self.required() as usize)
    }

    /// Whether one more approval, by an approver who could fill `slots`, can be given a slot
    /// next to the approvals in `decisions` (each keeping one).
    pub fn has_room(&self, decisions: &[ApproverDecision], slots: SlotSet) -> bool {
        let all = self.all_slots();
        let mut sets: Vec<SlotSet> =
            decisions.iter().filter(|d| d.verdict != ApprovalVerdict::Deny).map(|d| d.slots.intersect(all)).collect();
        sets.push(slots.intersect(all));
        assign(&sets, self.required() as usize).iter().all(Option::is_some)
    }
}

/// A set of a [`Quorum`]'s slots (bit `i`: slot `i`; at most 32, a quorum has at most
/// [`MAX_QUORUM`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SlotSet(u32);

impl SlotSet {
    /// No slot.
    pub const EMPTY: SlotSet = SlotSet(0);
    /// Every slot (an approver whose slots nobody worked out: the quorum's roles were checked
    /// otherwise, or it has no role slots).
    pub const ANY: SlotSet = SlotSet(u32::MAX);

    /// The set with these bits.
    pub const fn from_bits(bits: u32) -> SlotSet {
        SlotSet(bits)
    }

    /// Its bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// The first `n` slots.
    pub fn first(n: usize) -> SlotSet {
        if n >= 32 { SlotSet::ANY } else { SlotSet((1u32 << n) - 1) }
    }

    /// The same set with `slot` (a slot of 32 or more is left out).
    pub fn with(self, slot: usize) -> SlotSet {
        if slot >= 32 { self } else { SlotSet(self.0 | (1 << slot)) }
    }

    /// Whether it holds `slot`.
    pub fn contains(self, slot: usize) -> bool {
        slot < 32 && self.0 & (1 << slot) != 0
    }

    /// The slots in both.
    pub fn intersect(self, other: SlotSet) -> SlotSet {
        SlotSet(self.0 & other.0)
    }

    /// Whether it holds no slot.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// A maximum matching of approvals (the slots each could fill) to `slots` slots, one approval
/// per slot, found by augmenting paths in the order of the approvals (Kuhn's algorithm: at most
/// [`MAX_QUORUM`] of each side, so at most a few hundred steps). Which slot each approval got.
fn assign(approvals: &[SlotSet], slots: usize) -> Vec<Option<usize>> {
    let slots = slots.min(32);
    let mut owner: Vec<Option<usize>> = vec![None; slots];
    for approval in 0..approvals.len() {
        let mut seen = vec![false; slots];
        augment(approval, approvals, &mut owner, &mut seen);
    }
    let mut filled = vec![None; approvals.len()];
    for (slot, approval) in owner.iter().enumerate() {
        if let Some(a) = approval {
            filled[*a] = Some(slot);
        }
    }
    filled
}

/// Finds a slot for `approval`, moving earlier approvals to other slots they could fill.
fn augment(approval: usize, approvals: &[SlotSet], owner: &mut [Option<usize>], seen: &mut [bool]) -> bool {
    for slot in 0..owner.len() {
        if !approvals[approval].contains(slot) || seen[slot] {
            continue;
        }
        seen[slot] = true;
        if owner[slot].is_none_or(|other| augment(other, approvals, owner, seen)) {
            owner[slot] = Some(approval);
            return true;
        }
    }
    false
}

/// An approval or a denial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalVerdict {
    /// Approve: the evidence becomes usable once. Refused when the approver is the requester.
    Approve,
    /// Approve in person: the requesting user approved through a channel the agent cannot
    /// drive — an MCP elicitation answered at the client, a prompt in the host's own interface.
    /// The requester rule does not apply: the person asked *is* the requester, and the trust
    /// comes from the channel, which only host code reaches.
    ApproveInPerson,
    /// Deny: final; the evidence is rejected with `CONFIRMATION_INVALID {reason: denied}`.
    Deny,
}

/// One approver's decision on a confirmation, as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApproverDecision {
    /// The approver's subject (`in-person:{channel}` for an in-person approval).
    pub approver: String,
    /// What they decided.
    pub verdict: ApprovalVerdict,
    /// When.
    pub at: Timestamp,
    /// The quorum's slots this approver could fill when they decided (from their roles; every
    /// slot for a quorum without role slots); the slot their approval fills is
    /// [`Quorum::assignment`]'s.
    pub slots: SlotSet,
}

impl ApproverDecision {
    /// `approver` decided `verdict` at `at`, able to fill any slot.
    pub fn new(approver: impl Into<String>, verdict: ApprovalVerdict, at: Timestamp) -> ApproverDecision {
        ApproverDecision { approver: approver.into(), verdict, at, slots: SlotSet::ANY }
    }

    /// The same decision, by an approver who could fill `slots`.
    pub fn with_slots(mut self, slots: SlotSet) -> ApproverDecision {
        self.slots = slots;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(slots: &[usize]) -> SlotSet {
        slots.iter().fold(SlotSet::EMPTY, |s, &i| s.with(i))
    }

    fn approval(who: &str, slots: SlotSet) -> ApproverDecision {
        ApproverDecision::new(who, ApprovalVerdict::Approve, Timestamp::from_unix_millis(0)).with_slots(slots)
    }

    /// Every assignment of `approvals` to distinct slots, by brute force: the size of the largest.
    fn largest_matching(approvals: &[SlotSet], slots: usize) -> usize {
        fn go(i: usize, approvals: &[SlotSet], used: u32, slots: usize) -> usize {
            if i == approvals.len() {
                return 0;
            }
            let mut best = go(i + 1, approvals, used, slots);
            for s in 0..slots {
                if approvals[i].contains(s) && used & (1 << s) == 0 {
                    best = best.max(1 + go(i + 1, approvals, used | (1 << s), slots));
                }
            }
            best
        }
        go(0, approvals, 0, slots)
    }

    #[test]
    fn the_matching_moves_an_earlier_approver_to_make_room() {
        // Slots: 0 manager, 1 security. The first approver holds both roles, the second only
        // manager: the first moves to security, the second takes manager.
        let both = set(&[0, 1]);
        let manager = set(&[0]);
        assert_eq!(assign(&[both, manager], 2), vec![Some(1), Some(0)]);
        // A second manager-only approver has no slot left: the largest matching leaves it out.
        assert_eq!(assign(&[both, manager, manager], 2), vec![Some(1), Some(0), None]);
        // An approver who fills nothing gets nothing.
        assert_eq!(assign(&[SlotSet::EMPTY, both], 2), vec![None, Some(0)]);
    }

    #[test]
    fn the_matching_is_maximum_on_every_small_case() {
        // Every list of up to 4 approvals over 3 slots, each approval any subset of the slots.
        for len in 0..=4usize {
            for code in 0..8u32.pow(len as u32) {
                let approvals: Vec<SlotSet> = (0..len).map(|i| SlotSet::from_bits((code >> (3 * i)) & 0b111)).collect();
                let got = assign(&approvals, 3);
                let filled: Vec<usize> = got.iter().flatten().copied().collect();
                let mut distinct = filled.clone();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(distinct.len(), filled.len(), "one approval per slot: {approvals:?} -> {got:?}");
                for (a, slot) in approvals.iter().zip(&got) {
                    assert!(slot.is_none_or(|s| a.contains(s)), "a slot the approver can fill: {approvals:?}");
                }
                assert_eq!(filled.len(), largest_matching(&approvals, 3), "maximum: {approvals:?} -> {got:?}");
            }
        }
    }

    #[test]
    fn room_for_one_more_approval_is_a_matching_of_all() {
        let q = Quorum::default().with_slot("manager").with_slot("security");
        assert_eq!(q.required(), 2);
        let both = approval("dana", set(&[0, 1]));
        assert!(q.has_room(std::slice::from_ref(&both), set(&[0])), "dana moves to security");
        assert!(q.has_room(std::slice::from_ref(&both), set(&[1])), "dana stays on manager");
        let taken = [both, approval("bob", set(&[0]))];
        assert!(!q.has_room(&taken, set(&[0, 1])), "both slots are filled");
        let manager = [approval("bob", set(&[0]))];
        assert!(!q.has_room(&manager, set(&[0])), "a second manager-only approver cannot count");
        assert!(q.has_room(&manager, set(&[1])));
        assert_eq!(q.assignment(&taken), vec![Some(1), Some(0)]);
        // A denial takes no slot.
        let denied = ApproverDecision::new("eve", ApprovalVerdict::Deny, Timestamp::from_unix_millis(0));
        assert_eq!(q.assignment(std::slice::from_ref(&denied)), vec![None]);
        assert!(q.has_room(&[denied], set(&[0])));
    }

    #[test]
    fn slots_follow_roles_names_and_free_slots() {
        let q = Quorum::of(3).with_slot("security");
        assert_eq!((q.required(), q.slots.len()), (3, 1));
        let sec = Identity::new("sam").with_role("security");
        assert_eq!(q.slots_for(&sec), set(&[0, 1, 2]));
        assert_eq!(q.slots_for(&Identity::new("ann")), set(&[1, 2]), "free slots take anyone");

        let named = Quorum::of(2).with_approver("alice").with_approver("bob").with_approver("carol");
        assert_eq!(named.slots_for(&Identity::new("bob")), set(&[0, 1]));
        assert!(named.slots_for(&Identity::new("dave")).is_empty(), "an outsider");
        assert!(named.slots_for(&Identity::new("Bob")).is_empty(), "exact subjects only");
        assert!(named.slots_for(&Identity::new("b\u{043e}b")).is_empty(), "a look-alike is not a member");

        let roles = Quorum::of(2).with_role("manager").with_slot("security");
        assert!(roles.slots_for(&Identity::new("sam").with_role("security")).is_empty(), "not a manager");
        let both = Identity::new("dana").with_role("manager").with_role("security");
        assert_eq!(roles.slots_for(&both), set(&[0, 1]));
        assert_eq!(roles.slots_for(&Identity::new("max").with_role("manager")), set(&[1]));
    }

    #[test]
    fn unsatisfiable_quorums_have_a_problem() {
        assert_eq!(Quorum::default().problem(), None);
        assert_eq!(Quorum::of(2).with_approver("a").with_approver("b").problem(), None);
        assert_eq!(Quorum::default().with_slot("manager").with_slot("security").problem(), None);
        let problem = |q: Quorum| q.problem().unwrap_or_default();
        assert!(problem(Quorum::of(0)).contains("0 approvals"));
        assert!(problem(Quorum::of(17)).contains("at most 16"));
        assert!(problem(Quorum::of(3).with_approver("a").with_approver("b")).contains("3 approvals of 2 named"));
        assert!(problem(Quorum::of(2).with_approver("bob").with_approver("Bob")).contains("twice"));
        assert!(problem(Quorum::of(1).with_role(" ")).contains("empty role"));
        assert!(problem(Quorum::default().with_slot("")).contains("empty role"));
        assert!(problem(Quorum::of(1).with_approver("")).contains("empty approver"));
        let q = Quorum { approvals: 1, slots: vec!["manager".into(), "security".into()], ..Quorum::default() };
        assert!(problem(q).contains("2 role slots for 1 approval"));
        let many = (0..=MAX_NAMED_APPROVERS).fold(Quorum::of(1), |q, i| q.with_approver(format!("a{i}")));
        assert!(problem(many).contains("at most 256"));
    }

    #[test]
    fn a_stored_quorum_without_the_new_fields_still_reads() {
        let old: Quorum = serde_json::from_str(r#"{"approvals":2,"roles":["manager"]}"#).unwrap();
        assert_eq!(old, Quorum::of(2).with_role("manager"));
        let q = Quorum::of(2).with_approver("a").with_approver("b").with_slot("manager");
        let text = serde_json::to_string(&q).unwrap();
        assert_eq!(serde_json::from_str::<Quorum>(&text).unwrap(), q);
        assert_eq!(serde_json::to_string(&Quorum::of(2)).unwrap(), r#"{"approvals":2}"#, "unused fields are left out");
    }
}
