//! Where the memory store keeps its records' bytes: pages of its own.
//!
//! A full store holds up to 100,000 records for the whole idempotency window while every call
//! makes and frees short-lived allocations of its own. With one allocation per record, the
//! system allocator kept the two mixed in one heap, and every call of a server whose store was
//! full paid for it (~24 µs a call under glibc at 100,000 records against 1,000, nothing
//! measurable under jemalloc: `spec/invocation.md` §11.2). Records are therefore written into
//! pages of [`PAGE_BYTES`], one after the other, each behind a [`HEADER`] that names it; the
//! allocator sees a page, not a record. A record longer than [`MAX_PAGED`] keeps an allocation of
//! its own, which a large allocation is anyway.
//!
//! A page is written once, front to back, and is empty again when its last record goes. Results
//! are mostly dropped in the order they were stored (eviction takes the oldest, expiry follows
//! the window), so pages empty whole. An order that leaves a few records in many pages cannot
//! pin a page per record: when the pages hold more than twice the live bytes and four pages
//! more, the records of pages less than half live are moved into the page being written (found
//! by walking the page's headers) and those pages emptied, at most [`COMPACTED_AT_ONCE`] pages an
//! operation. Removals never add memory; after removals out of order, the pages keep what they
//! held until compaction catches up, about one operation for every two sparse pages, and then
//! hold within twice the records' bytes (headers included) and seven pages (the margin, the page
//! being written, the spare ones).

use super::Slot;

/// The size of a page (smaller in tests, so that they fill and compact many pages).
#[cfg(not(test))]
pub(super) const PAGE_BYTES: usize = 64 << 10;
#[cfg(test)]
pub(super) const PAGE_BYTES: usize = 4 << 10;

/// The longest record written into a page; a longer one is an allocation of its own, which its
/// caller makes before taking the store's lock.
pub(super) const MAX_PAGED: usize = PAGE_BYTES / 4;

/// Emptied pages kept for the records to come; more are given back to the allocator.
const SPARE_PAGES: usize = 2;

/// What precedes a record's bytes in its page: the hash of its key and its generation (its
/// [`Slot`]), then its length, so that a compaction walks a page to find the records in it.
pub(super) const HEADER: usize = 20;

/// The most pages one operation compacts, so that no single call pays for a large compaction;
/// a burst of removals (an expiry sweep) is caught up by the operations that follow.
pub(super) const COMPACTED_AT_ONCE: usize = 2;

/// A record's bytes.
#[derive(Debug)]
pub(super) enum Bytes {
    /// In a page, at `start` (after its header), `len` bytes long.
    Paged { page: u32, start: u32, len: u32 },
    /// An allocation of its own (a record longer than [`MAX_PAGED`]).
    Own(Box<[u8]>),
}

impl Bytes {
    /// How many bytes the record has.
    pub(super) fn len(&self) -> usize {
        match self {
            Bytes::Paged { len, .. } => *len as usize,
            Bytes::Own(bytes) => bytes.len(),
        }
    }
}

#[derive(Default)]
struct Page {
    /// The page's memory: [`PAGE_BYTES`] long, or empty when given back.
    memory: Box<[u8]>,
    /// How far the page is written.
    end: usize,
    /// What the page counts as used: `end` while it is the page being written, all of it after
    /// (the rest takes memory and is not written until the page is empty again).
    used: usize,
    /// The bytes (headers included) of the records still in it.
    live: usize,
    /// Whether it is listed in [`Pages::sparse`].
    listed: bool,
}

/// The pages, with the one being written.
#[derive(Default)]
pub(super) struct Pages {
    pages: Vec<Page>,
    /// The page new records are written to.
    current: Option<u32>,
    /// Pages with nothing in them that kept their memory (at most [`SPARE_PAGES`]), reused first.
    empty: Vec<u32>,
    /// Pages with nothing in them whose memory was given back, reused next.
    released: Vec<u32>,
    /// Pages other than the current one that were less than half live when listed; checked
    /// again before they are compacted.
    sparse: Vec<u32>,
    /// What the pages count as used, together.
    used: usize,
    /// What the paged records hold, headers included.
    live: usize,
}

impl Pages {
    /// The bytes of `bytes`.
    pub(super) fn get<'a>(&'a self, bytes: &'a Bytes) -> &'a [u8] {
        match bytes {
            Bytes::Paged { page, start, len } => {
                let start = *start as usize;
                &self.pages[*page as usize].memory[start..start + *len as usize]
            }
            Bytes::Own(own) => own,
        }
    }

    /// Writes `parts`, one after the other, as the bytes of the record at `slot`: into a page
    /// when they are [`MAX_PAGED`] bytes or fewer, else (which callers avoid under the store's
    /// lock) into an allocation of their own.
    pub(super) fn write(&mut self, slot: Slot, parts: &[&[u8]]) -> Bytes {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > MAX_PAGED {
            return Bytes::Own(parts.concat().into_boxed_slice());
        }
        let page = self.room_for(HEADER + len);
        let p = &mut self.pages[page as usize];
        let mut at = p.end;
        for part in [&slot.hash.to_le_bytes()[..], &slot.generation.to_le_bytes(), &(len as u32).to_le_bytes()]
            .into_iter()
            .chain(parts.iter().copied())
        {
            p.memory[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        let start = p.end + HEADER;
        p.end = at;
        p.used = at;
        p.live += HEADER + len;
        self.used += HEADER + len;
        self.live += HEADER + len;
        // Both fit in `u32`: a page is 64 KiB.
        Bytes::Paged { page, start: start as u32, len: len as u32 }
    }

    /// Drops `bytes`, a record's, which are no longer used.
    pub(super) fn free(&mut self, bytes: Bytes) {
        let Bytes::Paged { page, len, .. } = bytes else { return };
        let held = HEADER + len as usize;
        let p = &mut self.pages[page as usize];
        p.live -= held;
        self.live -= held;
        if p.live == 0 {
            self.empty_page(page);
        } else if Some(page) != self.current && !p.listed && 2 * p.live < p.used {
            p.listed = true;
            self.sparse.push(page);
        }
    }

    /// The page to compact next, when the pages hold more than twice the live bytes and four
    /// pages more; `None` while they do not.
    pub(super) fn next_to_compact(&mut self) -> Option<u32> {
        while self.used > 2 * self.live + 4 * PAGE_BYTES {
            let page = self.sparse.pop()?;
            let p = &mut self.pages[page as usize];
            p.listed = false;
            if Some(page) != self.current && p.live > 0 && 2 * p.live < p.used {
                return Some(page);
            }
        }
        None
    }

    /// The records ever written into `page` since it was last empty, read from their headers:
    /// each one's slot and where its bytes start. A record moved, dropped or rewritten since is
    /// still listed; its slot finds no record whose bytes are there.
    pub(super) fn records_in(&self, page: u32) -> Vec<(Slot, u32)> {
        let p = &self.pages[page as usize];
        let mut found = Vec::new();
        let mut at = 0;
        while at + HEADER <= p.end {
            let word = |from: usize| u64::from_le_bytes(p.memory[from..from + 8].try_into().unwrap_or_default());
            let slot = Slot { hash: word(at), generation: word(at + 8) };
            let len = u32::from_le_bytes(p.memory[at + 16..at + 20].try_into().unwrap_or_default()) as usize;
            found.push((slot, (at + HEADER) as u32));
            at += HEADER + len;
        }
        found
    }

    /// Moves the record whose bytes are `bytes`, in the page being compacted, with its header
    /// into the page being written; the new place of its bytes. (`None` only for bytes not in a
    /// page: the page being compacted is never the one written, which is a fresh page once full.)
    pub(super) fn moved(&mut self, bytes: &Bytes) -> Option<Bytes> {
        let Bytes::Paged { page, start, len } = *bytes else { return None };
        let (from_at, held) = (start as usize - HEADER, HEADER + len as usize);
        let to = self.room_for(held);
        let [from, into] = self.pages.get_disjoint_mut([page as usize, to as usize]).ok()?;
        let at = into.end;
        into.memory[at..at + held].copy_from_slice(&from.memory[from_at..from_at + held]);
        into.end += held;
        into.used = into.end;
        into.live += held;
        from.live -= held;
        self.used += held;
        if from.live == 0 {
            self.empty_page(page);
        }
        Some(Bytes::Paged { page: to, start: (at + HEADER) as u32, len })
    }

    /// The bytes the pages' memory takes, for tests.
    #[cfg(test)]
    pub(super) fn memory(&self) -> usize {
        self.pages.iter().map(|p| p.memory.len()).sum()
    }

    /// Whether a compaction is due and a page is listed for it, for tests: only then may the
    /// pages hold more than twice the records' bytes and seven pages (the module's docs).
    #[cfg(test)]
    pub(super) fn compaction_due(&self) -> bool {
        self.used > 2 * self.live + 4 * PAGE_BYTES
            && self.sparse.iter().any(|&page| {
                let p = &self.pages[page as usize];
                Some(page) != self.current && p.live > 0 && 2 * p.live < p.used
            })
    }

    /// Checks the pages' counts against the pages, for tests: what they count as used and live,
    /// each empty page listed once, and every sparse page but the current one listed.
    #[cfg(test)]
    pub(super) fn check(&self) -> Result<(), String> {
        let used: usize = self.pages.iter().map(|p| p.used).sum();
        let live: usize = self.pages.iter().map(|p| p.live).sum();
        if (used, live) != (self.used, self.live) {
            return Err(format!("counted used {} live {}, pages {used} {live}", self.used, self.live));
        }
        let mut idle: Vec<u32> = self.empty.iter().chain(&self.released).copied().collect();
        idle.sort_unstable();
        if idle.windows(2).any(|w| w[0] == w[1]) || idle.iter().any(|&i| Some(i) == self.current) {
            return Err(format!("a page idle twice, or idle and current: {idle:?}"));
        }
        for (i, p) in self.pages.iter().enumerate() {
            let i = i as u32;
            if p.live == 0 && Some(i) != self.current && !idle.contains(&i) {
                return Err(format!("page {i} holds nothing and is not idle"));
            }
            if Some(i) != self.current && p.live > 0 && 2 * p.live < p.used && !p.listed {
                return Err(format!("page {i} is sparse and not listed"));
            }
            if p.listed != self.sparse.contains(&i) {
                return Err(format!("page {i}'s listing is wrong"));
            }
        }
        Ok(())
    }

    /// A page with room for `held` more bytes (at most [`HEADER`] + [`MAX_PAGED`]): the current
    /// one, or a fresh one made current.
    fn room_for(&mut self, held: usize) -> u32 {
        if let Some(current) = self.current {
            if self.pages[current as usize].end + held <= PAGE_BYTES {
                return current;
            }
            // The page is done: what is left of it counts as used, and it is listed if already
            // sparse.
            let p = &mut self.pages[current as usize];
            self.used += PAGE_BYTES - p.used;
            p.used = PAGE_BYTES;
            if !p.listed && 2 * p.live < p.used {
                p.listed = true;
                self.sparse.push(current);
            }
        }
        let page = match self.empty.pop().or_else(|| self.released.pop()) {
            Some(page) => page,
            None => {
                self.pages.push(Page::default());
                (self.pages.len() - 1) as u32
            }
        };
        let p = &mut self.pages[page as usize];
        if p.memory.is_empty() {
            p.memory = vec![0; PAGE_BYTES].into_boxed_slice();
        }
        self.current = Some(page);
        page
    }

    /// `page` holds nothing live any more: it is written again from its start, as the current
    /// page or, emptied, once it is needed (its memory given back beyond [`SPARE_PAGES`]).
    fn empty_page(&mut self, page: u32) {
        let p = &mut self.pages[page as usize];
        self.used -= p.used;
        p.used = 0;
        p.end = 0;
        if Some(page) == self.current {
            return;
        }
        if self.empty.len() < SPARE_PAGES {
            self.empty.push(page);
        } else {
            p.memory = Box::default();
            self.released.push(page);
        }
    }
}
