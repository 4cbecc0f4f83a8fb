//! Best-fit allocation with coalescing over the offsets `[0, limit)`.
//!
//! Free blocks are indexed twice: by offset (to merge with neighbours on
//! free) and by `(size, offset)` (to find the smallest block that fits).
//! Both operations are O(log n). Pure Rust, no WIT types: tested natively.

use std::collections::{BTreeMap, BTreeSet};

/// Sizes are rounded up to this, so blocks stay aligned for common requests
/// and tiny fragments do not accumulate.
pub const GRANULE: u64 = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocError {
    OutOfMemory(u64),
    UnknownOffset(u64),
    Invalid(String),
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    pub bytes_in_use: u64,
    pub peak_bytes_in_use: u64,
    pub num_allocs: u64,
    pub largest_alloc_size: u64,
    pub largest_free_block: u64,
    pub limit: u64,
}

#[derive(Debug, Default)]
pub struct BestFit {
    limit: u64,
    /// Free blocks: offset → size.
    free_by_offset: BTreeMap<u64, u64>,
    /// Free blocks ordered for best fit.
    free_by_size: BTreeSet<(u64, u64)>,
    /// Live blocks: offset → rounded size.
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

    pub fn allocate(&mut self, size: u64, alignment: u64) -> Result<u64, AllocError> {
        if size == 0 {
            return Err(AllocError::Invalid("size must be greater than zero".into()));
        }
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(AllocError::Invalid(format!("alignment {alignment} is not a power of two")));
        }
        let rounded = size.checked_next_multiple_of(GRANULE).ok_or(AllocError::OutOfMemory(size))?;
        // Smallest block that can hold `rounded` after aligning its start.
        // Alignment padding can make a block of exactly `rounded` bytes too
        // small, so scan upward from the first candidate until one fits.
        let fit = self
            .free_by_size
            .range((rounded, 0)..)
            .map(|&(block_size, offset)| (block_size, offset))
            .find(|&(block_size, offset)| {
                let start = align_up(offset, alignment);
                start - offset + rounded <= block_size
            });
        let Some((block_size, offset)) = fit else {
            return Err(AllocError::OutOfMemory(size));
        };
        self.remove_free(offset, block_size);
        let start = align_up(offset, alignment);
        if start > offset {
            self.insert_free(offset, start - offset);
        }
        let end = start + rounded;
        let block_end = offset + block_size;
        if block_end > end {
            self.insert_free(end, block_end - end);
        }
        self.live.insert(start, rounded);
        self.bytes_in_use += rounded;
        self.peak = self.peak.max(self.bytes_in_use);
        self.num_allocs += 1;
        self.largest_alloc = self.largest_alloc.max(size);
        Ok(start)
    }

    pub fn free(&mut self, offset: u64) -> Result<(), AllocError> {
        let size = self.live.remove(&offset).ok_or(AllocError::UnknownOffset(offset))?;
        self.bytes_in_use -= size;
        let (mut start, mut len) = (offset, size);
        // Merge with the free block that ends where this one starts.
        if let Some((&prev, &prev_len)) = self.free_by_offset.range(..start).next_back() {
            if prev + prev_len == start {
                self.remove_free(prev, prev_len);
                start = prev;
                len += prev_len;
            }
        }
        // And with the one that starts where this one ends.
        if let Some(&next_len) = self.free_by_offset.get(&(start + len)) {
            self.remove_free(start + len, next_len);
            len += next_len;
        }
        self.insert_free(start, len);
        Ok(())
    }

    /// Marks `(offset, size)` ranges live, carving them out of free space.
    pub fn adopt(&mut self, ranges: &[(u64, u64)]) -> Result<(), AllocError> {
        for &(offset, size) in ranges {
            let rounded = size.max(1).checked_next_multiple_of(GRANULE).unwrap_or(u64::MAX);
            let end = offset.checked_add(rounded).filter(|&e| e <= self.limit).ok_or_else(|| {
                AllocError::Invalid(format!("adopted range at {offset} of {size} bytes exceeds the limit {}", self.limit))
            })?;
            let (&block, &block_len) = self
                .free_by_offset
                .range(..=offset)
                .next_back()
                .filter(|(&b, &l)| b + l >= end)
                .ok_or_else(|| AllocError::Invalid(format!("adopted range at {offset} overlaps a live block")))?;
            self.remove_free(block, block_len);
            if offset > block {
                self.insert_free(block, offset - block);
            }
            if block + block_len > end {
                self.insert_free(end, block + block_len - end);
            }
            self.live.insert(offset, rounded);
            self.bytes_in_use += rounded;
            self.peak = self.peak.max(self.bytes_in_use);
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

    fn insert_free(&mut self, offset: u64, size: u64) {
        self.free_by_offset.insert(offset, size);
        self.free_by_size.insert((size, offset));
    }

    fn remove_free(&mut self, offset: u64, size: u64) {
        self.free_by_offset.remove(&offset);
        self.free_by_size.remove(&(size, offset));
    }
}

fn align_up(value: u64, alignment: u64) -> u64 {
    (value + alignment - 1) & !(alignment - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_picks_the_smallest_block() {
        let mut a = BestFit::new(10 * 1024);
        let x = a.allocate(1024, 64).unwrap();
        let _y = a.allocate(64, 64).unwrap();
        let z = a.allocate(256, 64).unwrap();
        let _w = a.allocate(64, 64).unwrap();
        a.free(x).unwrap(); // 1024-byte hole
        a.free(z).unwrap(); // 256-byte hole
        // 200 bytes fit both holes; best fit takes the 256-byte one.
        assert_eq!(a.allocate(200, 64).unwrap(), z);
        assert_eq!(a.allocate(1000, 64).unwrap(), x);
    }

    #[test]
    fn freeing_everything_coalesces_to_one_block() {
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]] {
            let mut a = BestFit::new(4096);
            let blocks: Vec<u64> = (0..4).map(|_| a.allocate(1000, 64).unwrap()).collect();
            for i in order {
                a.free(blocks[i]).unwrap();
            }
            let stats = a.stats();
            assert_eq!(stats.bytes_in_use, 0);
            assert_eq!(stats.largest_free_block, 4096, "order {order:?}");
            assert_eq!(a.free_by_offset.len(), 1);
        }
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
        assert!(a.allocate(1, 3).is_err());
        assert!(a.allocate(0, 64).is_err());
    }

    #[test]
    fn out_of_memory_then_recovery() {
        let mut a = BestFit::new(1024);
        let x = a.allocate(1000, 64).unwrap();
        assert_eq!(a.allocate(64, 64), Err(AllocError::OutOfMemory(64)));
        a.free(x).unwrap();
        assert_eq!(a.allocate(1024, 64), Ok(0));
        assert_eq!(a.free(12345), Err(AllocError::UnknownOffset(12345)));
    }

    #[test]
    fn adopt_carves_out_live_ranges() {
        let mut a = BestFit::new(8192);
        a.adopt(&[(0, 100), (4096, 64)]).unwrap();
        let x = a.allocate(64, 64).unwrap();
        assert!(x >= 128 && x + 64 <= 4096 || x >= 4160);
        assert!(a.adopt(&[(4096, 64)]).is_err(), "already live");
        assert!(a.adopt(&[(8192, 64)]).is_err(), "out of range");
        a.free(4096).unwrap();
        a.free(0).unwrap();
    }

    #[test]
    fn randomized_operations_keep_invariants() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let limit = 1 << 20;
        let mut a = BestFit::new(limit);
        let mut live: BTreeMap<u64, u64> = BTreeMap::new();
        for _ in 0..20_000 {
            if next() % 3 != 0 || live.is_empty() {
                let size = 1 + next() % 8192;
                let alignment = 1 << (6 + next() % 6);
                if let Ok(offset) = a.allocate(size, alignment) {
                    assert_eq!(offset % alignment, 0);
                    assert!(offset + size <= limit);
                    if let Some((&o, &s)) = live.range(..offset + size).next_back() {
                        assert!(o + s <= offset, "overlap");
                    }
                    live.insert(offset, size);
                }
            } else {
                let nth = (next() % live.len() as u64) as usize;
                let offset = *live.keys().nth(nth).unwrap();
                live.remove(&offset);
                a.free(offset).unwrap();
            }
            let free: u64 = a.free_by_offset.values().sum();
            assert_eq!(free + a.stats().bytes_in_use, limit);
        }
        for offset in live.keys() {
            a.free(*offset).unwrap();
        }
        assert_eq!(a.stats().largest_free_block, limit);
    }
}
