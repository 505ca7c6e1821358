//! Where the memory store keeps its records' bytes: pages of its own.
//!
//! A full store holds up to 100,000 records for the whole idempotency window while every call
//! makes and frees short-lived allocations of its own. With one allocation per record, the
//! system allocator kept the two mixed in one heap, and every call of a server whose store was
//! full paid for it (~13 µs a call under glibc at 100,000 records against 1,000, nothing
//! measurable under jemalloc: `spec/invocation.md` §11.2). Records are therefore written into
//! pages of [`PAGE_BYTES`], one after the other; the allocator sees a page, not a record. A
//! record longer than [`MAX_PAGED`] keeps an allocation of its own, which a large allocation is
//! anyway.
//!
//! A page is written once, front to back, and is empty again when its last record goes. Results
//! are mostly dropped in the order they were stored (eviction takes the oldest, expiry follows
//! the window), so pages empty whole. An order that leaves a few records in many pages cannot
//! pin a page per record: when the pages hold more than twice the live bytes (and a few pages
//! more), the sparsest pages' records are moved into the page being written and their pages
//! emptied. Memory stays within about twice the records' bytes plus a few pages, whatever the
//! order of removals.

use super::Slot;

/// The size of a page (smaller in tests, so that they fill and compact many pages).
#[cfg(not(test))]
pub(super) const PAGE_BYTES: usize = 64 << 10;
#[cfg(test)]
pub(super) const PAGE_BYTES: usize = 4 << 10;

/// The longest record written into a page; a longer one is an allocation of its own.
pub(super) const MAX_PAGED: usize = PAGE_BYTES / 4;

/// Emptied pages kept for the records to come; more are given back to the allocator.
const SPARE_PAGES: usize = 2;

/// A record's bytes.
#[derive(Debug)]
pub(super) enum Bytes {
    /// In a page, at `start`, `len` bytes long.
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
    /// How far the page is written; all of it once it is no longer the page being written.
    used: usize,
    /// The bytes of the records still in it.
    live: usize,
    /// The records written into it, as they were then (a record moved, dropped or rewritten
    /// since is found no more under its slot there).
    slots: Vec<Slot>,
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
    /// What the pages other than the empty ones have written.
    used: usize,
    /// What the paged records hold.
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

    /// Writes `parts`, one after the other, as the bytes of the record at `slot`.
    pub(super) fn write(&mut self, slot: Slot, parts: &[&[u8]]) -> Bytes {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > MAX_PAGED {
            return Bytes::Own(parts.concat().into_boxed_slice());
        }
        let page = self.room_for(len);
        let p = &mut self.pages[page as usize];
        let start = p.used;
        let mut at = start;
        for part in parts {
            p.memory[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        p.used = at;
        p.live += len;
        p.slots.push(slot);
        self.used += len;
        self.live += len;
        // Both fit in `u32`: a page is 64 KiB.
        Bytes::Paged { page, start: start as u32, len: len as u32 }
    }

    /// Drops `bytes`, a record's, which are no longer used.
    pub(super) fn free(&mut self, bytes: Bytes) {
        let Bytes::Paged { page, len, .. } = bytes else { return };
        let p = &mut self.pages[page as usize];
        p.live -= len as usize;
        self.live -= len as usize;
        if p.live == 0 {
            self.empty_page(page);
        } else if Some(page) != self.current && !p.listed && 2 * p.live < p.used {
            p.listed = true;
            self.sparse.push(page);
        }
    }

    /// The page to compact next, when the pages hold more than twice the live bytes and a few
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

    /// The slots written into `page`, for its compaction; each still in the page is moved with
    /// [`Pages::moved`], after which the page is empty.
    pub(super) fn slots_of(&mut self, page: u32) -> Vec<Slot> {
        std::mem::take(&mut self.pages[page as usize].slots)
    }

    /// Moves the record at `slot`, whose bytes are `bytes` in the page being compacted, into the
    /// page being written; the new place of its bytes. (`None` only for bytes not in a page: the
    /// page being compacted is never the one written, which is a fresh page once it is full.)
    pub(super) fn moved(&mut self, slot: Slot, bytes: &Bytes) -> Option<Bytes> {
        let Bytes::Paged { page, start, len } = *bytes else { return None };
        let (start, len) = (start as usize, len as usize);
        let to = self.room_for(len);
        let [from, into] = self.pages.get_disjoint_mut([page as usize, to as usize]).ok()?;
        let at = into.used;
        into.memory[at..at + len].copy_from_slice(&from.memory[start..start + len]);
        into.used += len;
        into.live += len;
        into.slots.push(slot);
        from.live -= len;
        self.used += len;
        if from.live == 0 {
            self.empty_page(page);
        }
        Some(Bytes::Paged { page: to, start: at as u32, len: len as u32 })
    }

    /// The bytes the pages' memory takes, for tests.
    #[cfg(test)]
    pub(super) fn memory(&self) -> usize {
        self.pages.iter().map(|p| p.memory.len()).sum()
    }

    /// A page with room for `len` more bytes (at most [`MAX_PAGED`]): the current one, or a
    /// fresh one made current.
    fn room_for(&mut self, len: usize) -> u32 {
        if let Some(current) = self.current {
            if self.pages[current as usize].used + len <= PAGE_BYTES {
                return current;
            }
            // The page is done: what is left of it counts as written (it takes memory and
            // is not written again until it is empty), and it is listed if already sparse.
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
        p.slots.clear();
        if Some(page) == self.current {
            return;
        }
        if self.empty.len() < SPARE_PAGES {
            self.empty.push(page);
        } else {
            p.memory = Box::default();
            p.slots = Vec::new();
            self.released.push(page);
        }
    }
}
