//! Best-fit allocation with coalescing over the offsets `[0, limit)`.
//!
//! Free blocks are indexed twice: by offset (to merge with neighbours on
//! free) and by `(size, offset)` (to find the smallest block that fits).
//! Both operations are O(log n). Live blocks remember the bytes actually
//! reserved for them, so a free gives back exactly what was taken and the
//! free set always coalesces to a single block once everything is freed.
//! Pure Rust, no WIT types: tested natively.

use std::collections::{BTreeMap, BTreeSet};

/// Sizes are rounded up to this, so block boundaries stay aligned for the
/// host's requests (256 bytes, what TensorFlow's BFC allocator requires)
/// and tiny fragments do not accumulate. A block that cannot hold the
/// rounded size but can hold the exact one (the tail of a region whose size
/// is not a multiple of 256) is still used.
pub const GRANULE: u64 = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocError {
    OutOfMemory(u64),
    UnknownOffset(u64),
    Invalid(String),
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Bytes reserved for live allocations, including their rounding: the
    /// figure that, added to the free bytes, gives the limit.
    pub bytes_in_use: u64,
    pub peak_bytes_in_use: u64,
    /// Allocations made since creation (adopted ranges are not counted).
    pub num_allocs: u64,
    /// Largest size ever requested (or adopted), before rounding.
    pub largest_alloc_size: u64,
    pub largest_free_block: u64,
    pub limit: u64,
}

#[derive(Debug, Default)]
pub struct BestFit {
    limit: u64,
    /// Free blocks: offset → size. Never two adjacent (they are merged).
    free_by_offset: BTreeMap<u64, u64>,
    /// The same free blocks ordered for best fit.
    free_by_size: BTreeSet<(u64, u64)>,
    /// Live blocks: offset → bytes reserved (the rounded size).
    live: BTreeMap<u64, u64>,
    bytes_in_use: u64,
    peak: u64,
    num_allocs: u64,
    largest_alloc: u64,
}

impl BestFit {
    pub fn new(limit: u64) -> BestFit {
        let mut allocator = BestFit { limit, ..Default::default() };
        if limit > 0 {
            allocator.insert_free(0, limit);
        }
        allocator
    }

    /// Places `size` bytes at a multiple of `alignment`, in the smallest
    /// free block that can hold them.
    pub fn allocate(&mut self, size: u64, alignment: u64) -> Result<u64, AllocError> {
        if size == 0 {
            return Err(AllocError::Invalid("size must be greater than zero".into()));
        }
        if !alignment.is_power_of_two() {
            return Err(AllocError::Invalid(format!("alignment {alignment} is not a power of two")));
        }
        // Alignment padding can make the smallest block with at least `size`
        // bytes too small, so scan upward from it until one fits. With the
        // usual alignments (≤ GRANULE) every block start is already aligned
        // and the first candidate fits.
        let fit = self.free_by_size.range((size, 0)..).find_map(|&(block_size, offset)| {
            let start = align_up(offset, alignment)?;
            let block_end = offset + block_size;
            start.checked_add(size).filter(|&end| end <= block_end)?;
            Some((offset, block_size, start))
        });
        let Some((offset, block_size, start)) = fit else {
            return Err(AllocError::OutOfMemory(size));
        };
        let block_end = offset + block_size;
        let rounded = size.checked_next_multiple_of(GRANULE).unwrap_or(u64::MAX);
        let end = block_end.min(start.saturating_add(rounded));
        self.remove_free(offset, block_size);
        // Leading padding and the unused tail go back to the free set.
        if start > offset {
            self.insert_free(offset, start - offset);
        }
        if block_end > end {
            self.insert_free(end, block_end - end);
        }
        self.mark_live(start, end - start, size);
        self.num_allocs += 1;
        Ok(start)
    }

    /// Releases the allocation starting at `offset`, merging it with the
    /// free blocks on either side.
    pub fn free(&mut self, offset: u64) -> Result<(), AllocError> {
        let size = self.live.remove(&offset).ok_or(AllocError::UnknownOffset(offset))?;
        self.bytes_in_use -= size;
        let (mut start, mut len) = (offset, size);
        if let Some((&prev, &prev_len)) = self.free_by_offset.range(..start).next_back() {
            if prev + prev_len == start {
                self.remove_free(prev, prev_len);
                start = prev;
                len += prev_len;
            }
        }
        if let Some(&next_len) = self.free_by_offset.get(&(start + len)) {
            self.remove_free(start + len, next_len);
            len += next_len;
        }
        self.insert_free(start, len);
        Ok(())
    }

    /// Marks `(offset, size)` ranges live, carving them out of free space.
    ///
    /// All or nothing: the ranges are checked first (non-empty, inside the
    /// limit, disjoint from each other and from every live block), so a
    /// refused request leaves the allocator as it was.
    pub fn adopt(&mut self, ranges: &[(u64, u64)]) -> Result<(), AllocError> {
        // In offset order (a map rather than a sort: the guest already
        // carries this map's code, and a repeated offset shows up on insert).
        let mut sorted = BTreeMap::new();
        for &(offset, size) in ranges {
            if sorted.insert(offset, size).is_some() {
                return Err(AllocError::Invalid(format!("offset {offset} is adopted twice")));
            }
        }
        let mut previous_end = 0;
        for (&offset, &size) in &sorted {
            if size == 0 {
                return Err(AllocError::Invalid(format!("adopted range at {offset} is empty")));
            }
            let end = offset.checked_add(size).filter(|&end| end <= self.limit).ok_or_else(|| {
                AllocError::Invalid(format!(
                    "adopted range at {offset} of {size} bytes exceeds the limit {}",
                    self.limit
                ))
            })?;
            if offset < previous_end {
                return Err(AllocError::Invalid(format!("adopted range at {offset} overlaps another adopted range")));
            }
            if self.free_block_containing(offset, end).is_none() {
                return Err(AllocError::Invalid(format!(
                    "adopted range at {offset} of {size} bytes overlaps a live block"
                )));
            }
            previous_end = end;
        }
        for (&offset, &size) in &sorted {
            // The ranges are disjoint and each lay inside a free block, so
            // carving the earlier ones leaves each later one inside a piece.
            let (block, block_len) = self.free_block_containing(offset, offset + size).expect("checked above");
            let block_end = block + block_len;
            // Round up like `allocate` does, but never into the next range.
            let next_offset = sorted.range(offset + 1..).next().map_or(u64::MAX, |(&next, _)| next);
            let rounded_end = (offset + size).checked_next_multiple_of(GRANULE).unwrap_or(u64::MAX);
            let end = rounded_end.min(block_end).min(next_offset);
            self.remove_free(block, block_len);
            if offset > block {
                self.insert_free(block, offset - block);
            }
            if block_end > end {
                self.insert_free(end, block_end - end);
            }
            self.mark_live(offset, end - offset, size);
        }
        Ok(())
    }

    pub fn stats(&self) -> Stats {
        Stats {
            bytes_in_use: self.bytes_in_use,
            peak_bytes_in_use: self.peak,
            num_allocs: self.num_allocs,
            largest_alloc_size: self.largest_alloc,
            largest_free_block: self.free_by_size.iter().next_back().map_or(0, |&(size, _)| size),
            limit: self.limit,
        }
    }

    /// Live blocks as `(offset, bytes reserved)`, in offset order.
    pub fn live(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.live.iter().map(|(&offset, &size)| (offset, size))
    }

    fn mark_live(&mut self, offset: u64, reserved: u64, requested: u64) {
        self.live.insert(offset, reserved);
        self.bytes_in_use += reserved;
        self.peak = self.peak.max(self.bytes_in_use);
        self.largest_alloc = self.largest_alloc.max(requested);
    }

    fn free_block_containing(&self, start: u64, end: u64) -> Option<(u64, u64)> {
        let (&block, &len) = self.free_by_offset.range(..=start).next_back()?;
        (block + len >= end).then_some((block, len))
    }

    fn insert_free(&mut self, offset: u64, size: u64) {
        self.free_by_offset.insert(offset, size);
        self.free_by_size.insert((size, offset));
    }

    fn remove_free(&mut self, offset: u64, size: u64) {
        self.free_by_offset.remove(&offset);
        self.free_by_size.remove(&(size, offset));
    }

    /// Panics unless free and live blocks tile `[0, limit)` exactly, no two
    /// free blocks touch, both free indexes agree and the counters add up.
    #[cfg(test)]
    fn check_invariants(&self) {
        assert_eq!(self.free_by_offset.len(), self.free_by_size.len());
        for (&offset, &size) in &self.free_by_offset {
            assert!(size > 0);
            assert!(self.free_by_size.contains(&(size, offset)));
        }
        let free = self.free_by_offset.iter().map(|(&o, &s)| (o, s, true));
        let live = self.live.iter().map(|(&o, &s)| (o, s, false));
        let mut blocks: Vec<_> = free.chain(live).collect();
        blocks.sort_unstable();
        let mut cursor = 0;
        let mut previous_free = false;
        for (offset, size, is_free) in blocks {
            assert_eq!(offset, cursor, "gap or overlap at {offset}");
            assert!(!(is_free && previous_free), "free blocks at {offset} not coalesced");
            cursor = offset + size;
            previous_free = is_free;
        }
        assert_eq!(cursor, self.limit);
        assert_eq!(self.live.values().sum::<u64>(), self.bytes_in_use);
    }
}

/// `value` rounded up to a multiple of `alignment` (a power of two), or
/// `None` if that does not fit in a `u64`.
fn align_up(value: u64, alignment: u64) -> Option<u64> {
    value.checked_next_multiple_of(alignment)
}

#[cfg(test)]
#[allow(clippy::manual_is_multiple_of)] // `is_multiple_of` needs Rust 1.87; the MSRV is 1.85
mod tests {
    use super::*;

    /// xorshift64: deterministic, dependency-free randomness for tests.
    fn rng(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    #[test]
    fn best_fit_picks_the_smallest_block() {
        let mut a = BestFit::new(10 * 1024);
        let x = a.allocate(1024, 64).unwrap();
        let _y = a.allocate(64, 64).unwrap();
        let z = a.allocate(256, 64).unwrap();
        let _w = a.allocate(64, 64).unwrap();
        a.free(x).unwrap(); // 1024-byte hole
        a.free(z).unwrap(); // 256-byte hole

        // 200 bytes fit both holes (and the tail); best fit takes the 256-byte one.
        assert_eq!(a.allocate(200, 64).unwrap(), z);
        assert_eq!(a.allocate(1000, 64).unwrap(), x);
        a.check_invariants();
    }

    #[test]
    fn freeing_everything_coalesces_to_one_block() {
        let mut next = rng(7);
        for round in 0..200 {
            let mut a = BestFit::new(1 << 16);
            let mut blocks: Vec<u64> = (0..12).filter_map(|_| a.allocate(1 + next() % 3000, 64).ok()).collect();
            // Fisher–Yates: a different free order every round.
            for i in (1..blocks.len()).rev() {
                blocks.swap(i, (next() % (i as u64 + 1)) as usize);
            }
            for offset in blocks {
                a.free(offset).unwrap();
                a.check_invariants();
            }
            let stats = a.stats();
            assert_eq!(stats.bytes_in_use, 0);
            assert_eq!(stats.largest_free_block, 1 << 16, "round {round}");
            assert_eq!(a.free_by_offset.len(), 1);
        }
    }

    #[test]
    fn sizes_round_to_granules_but_free_returns_exactly_what_was_taken() {
        let mut a = BestFit::new(4096);
        let x = a.allocate(1, 1).unwrap();
        let y = a.allocate(257, 1).unwrap();
        assert_eq!((x, y), (0, GRANULE));
        assert_eq!(a.stats().bytes_in_use, GRANULE + 2 * GRANULE);
        assert_eq!(a.stats().largest_alloc_size, 257);
        a.free(x).unwrap();
        a.free(y).unwrap();
        assert_eq!(a.stats().largest_free_block, 4096);
    }

    #[test]
    fn alignment_is_honoured_and_padding_reused() {
        let mut a = BestFit::new(1 << 16);
        let first = a.allocate(64, 64).unwrap();
        let aligned = a.allocate(100, 4096).unwrap();
        assert_eq!(aligned % 4096, 0);
        assert!(aligned >= first + 64);
        // The padding between them is free and gets used.
        let small = a.allocate(64, 64).unwrap();
        assert!(small < aligned);
        a.check_invariants();
    }

    #[test]
    fn malformed_requests_are_refused() {
        let mut a = BestFit::new(1 << 16);
        assert!(matches!(a.allocate(0, 64), Err(AllocError::Invalid(_))));
        assert!(matches!(a.allocate(64, 0), Err(AllocError::Invalid(_))));
        assert!(matches!(a.allocate(64, 48), Err(AllocError::Invalid(_))));
        // Absurd sizes and alignments are out of memory, never an overflow.
        assert_eq!(a.allocate(u64::MAX, 64), Err(AllocError::OutOfMemory(u64::MAX)));
        assert_eq!(a.allocate(u64::MAX - 10, 1), Err(AllocError::OutOfMemory(u64::MAX - 10)));
        a.allocate(64, 64).unwrap();
        assert_eq!(a.allocate(64, 1 << 63), Err(AllocError::OutOfMemory(64)));
        assert_eq!(a.stats().num_allocs, 1);
        a.check_invariants();
    }

    #[test]
    fn the_tail_of_an_odd_sized_region_is_usable() {
        let mut a = BestFit::new(1000);
        assert_eq!(a.allocate(1000, 64), Ok(0));
        a.free(0).unwrap();
        let x = a.allocate(3 * GRANULE, 64).unwrap();
        // 1000 - 768 = 232 bytes are left: less than a granule, enough for 40.
        assert_eq!(a.allocate(40, 64), Ok(3 * GRANULE));
        a.free(x).unwrap();
        a.free(3 * GRANULE).unwrap();
        assert_eq!(a.stats().largest_free_block, 1000);
        a.check_invariants();
    }

    #[test]
    fn out_of_memory_then_recovery() {
        let mut a = BestFit::new(1024);
        let x = a.allocate(1000, 64).unwrap();
        assert_eq!(a.allocate(64, 64), Err(AllocError::OutOfMemory(64)));
        a.free(x).unwrap();
        assert_eq!(a.allocate(1024, 64), Ok(0));
        assert_eq!(a.free(12345), Err(AllocError::UnknownOffset(12345)));
        assert_eq!(a.free(x + 64), Err(AllocError::UnknownOffset(x + 64)));
        let stats = a.stats();
        assert_eq!((stats.bytes_in_use, stats.peak_bytes_in_use, stats.num_allocs), (1024, 1024, 2));
    }

    #[test]
    fn adopt_carves_out_live_ranges() {
        let mut a = BestFit::new(8192);
        a.adopt(&[(4096, 64), (0, 100)]).unwrap();
        a.check_invariants();
        for _ in 0..10 {
            let x = a.allocate(64, 64).unwrap();
            assert!((128..4096).contains(&x) || x >= 4160, "{x} overlaps an adopted range");
        }
        assert_eq!(a.stats().num_allocs, 10, "adopted ranges are not allocations");
        a.free(4096).unwrap();
        a.free(0).unwrap();
        a.check_invariants();
    }

    #[test]
    fn adopt_is_all_or_nothing() {
        let mut a = BestFit::new(8192);
        let live = a.allocate(64, 64).unwrap();
        let refused: [&[(u64, u64)]; 6] = [
            &[(1024, 64), (live, 64)],         // a live block
            &[(1024, 64), (8190, 64)],         // past the limit
            &[(1024, 64), (u64::MAX - 1, 64)], // past u64
            &[(1024, 64), (1050, 64)],         // each other
            &[(1024, 64), (2048, 0)],          // empty
            &[(1024, 64), (1024, 64)],         // twice
        ];
        for ranges in refused {
            assert!(matches!(a.adopt(ranges), Err(AllocError::Invalid(_))), "{ranges:?}");
            assert_eq!(a.live().count(), 1, "{ranges:?} left a partial adoption");
            a.check_invariants();
        }
        // Ranges closer than a granule keep exactly to their own bytes.
        a.adopt(&[(1024, 10), (1040, 10)]).unwrap();
        a.check_invariants();
        assert_eq!(a.live().collect::<Vec<_>>(), vec![(0, GRANULE), (1024, 16), (1040, 1280 - 1040)]);
    }

    #[test]
    fn randomized_operations_keep_invariants() {
        let mut next = rng(0x9E37_79B9_7F4A_7C15);
        let limit = (1 << 20) + 100; // not a multiple of the granule
        let mut a = BestFit::new(limit);
        // What was handed out, as (offset, requested size).
        let mut live: BTreeMap<u64, u64> = BTreeMap::new();
        let mut peak = 0;
        let mut allocs = 0;
        for step in 0..20_000 {
            if next() % 3 != 0 || live.is_empty() {
                let size = 1 + next() % 8192;
                let alignment = 1 << (next() % 13);
                match a.allocate(size, alignment) {
                    Ok(offset) => {
                        allocs += 1;
                        assert_eq!(offset % alignment, 0);
                        assert!(offset + size <= limit);
                        if let Some((&o, &s)) = live.range(..offset + size).next_back() {
                            assert!(o + s <= offset, "step {step}: overlap");
                        }
                        live.insert(offset, size);
                    }
                    // Out of memory is only allowed when no free block could
                    // hold the request even unaligned.
                    Err(AllocError::OutOfMemory(_)) => assert!(a.stats().largest_free_block < size + alignment),
                    Err(e) => panic!("step {step}: {e:?}"),
                }
            } else {
                let nth = (next() % live.len() as u64) as usize;
                let offset = *live.keys().nth(nth).unwrap();
                live.remove(&offset);
                a.free(offset).unwrap();
            }
            // The full check walks every block: often enough to pin down
            // the step that broke something, rarely enough to stay quick.
            if step % 64 == 0 {
                a.check_invariants();
            }
            let stats = a.stats();
            assert!(stats.bytes_in_use >= live.values().sum::<u64>());
            peak = peak.max(stats.bytes_in_use);
            assert_eq!(stats.peak_bytes_in_use, peak);
            assert_eq!(stats.num_allocs, allocs);
        }
        a.check_invariants();
        for offset in live.keys() {
            a.free(*offset).unwrap();
        }
        assert_eq!(a.stats().largest_free_block, limit);
    }
}
