//! The placement validator on its own: random commits (the guest's
//! answers, honest or not), releases and lookups (TensorFlow's pointers,
//! valid or not), checked against a model of the live allocations.

use std::cell::Cell;
use std::collections::BTreeMap;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use tfwasm_runtime::device::arena::PlacementError;
use tfwasm_runtime::device::{DeviceArena, Pages, ALIGNMENT};

/// Where a guest says an allocation goes.
#[derive(Debug, Clone)]
enum Offer {
    /// The first aligned offset of a free gap (fits if the gap is large
    /// enough): what an honest guest answers.
    Gap(Index),
    /// An aligned offset inside (or at the start of) a live allocation.
    Inside(Index, u64),
    /// An aligned offset just before a live allocation, so a large enough
    /// block runs into it.
    Before(Index, u8),
    /// The last aligned offset of the region (the block straddles the end
    /// unless it is small).
    Last,
    /// At or past the end, or where `offset + size` overflows.
    Past(u64),
    Overflow(u64),
    /// An honest offset moved by 1..255 bytes.
    Misaligned(Index, u8),
    Any(u64),
}

/// A pointer TensorFlow hands back.
#[derive(Debug, Clone)]
enum Pointer {
    /// The start of a live allocation.
    Live(Index),
    /// Inside one, not its start.
    Interior(Index, u64),
    /// Somewhere in the region.
    Offset(u64),
    /// Outside the region (before it, past it, null).
    Outside(u8),
}

#[derive(Debug, Clone)]
enum Op {
    Commit(Offer, u64),
    Release(Pointer),
    Lookup(Pointer),
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        6 => 1u64..=4096,
        2 => 4097u64..=1 << 16,
        1 => prop_oneof![Just(u64::MAX), Just(u64::MAX - 255), (1u64 << 20)..=1 << 21],
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let offer = prop_oneof![
        6 => any::<Index>().prop_map(Offer::Gap),
        2 => (any::<Index>(), 0u64..64).prop_map(|(i, k)| Offer::Inside(i, k)),
        1 => (any::<Index>(), 1u8..8).prop_map(|(i, k)| Offer::Before(i, k)),
        1 => Just(Offer::Last),
        1 => (0u64..1 << 12).prop_map(Offer::Past),
        1 => (0u64..1 << 12).prop_map(Offer::Overflow),
        2 => (any::<Index>(), 1u8..=255).prop_map(|(i, k)| Offer::Misaligned(i, k)),
        1 => any::<u64>().prop_map(Offer::Any),
    ];
    let pointer = prop_oneof![
        4 => any::<Index>().prop_map(Pointer::Live),
        1 => (any::<Index>(), 1u64..4096).prop_map(|(i, k)| Pointer::Interior(i, k)),
        1 => any::<u64>().prop_map(Pointer::Offset),
        1 => (0u8..3).prop_map(Pointer::Outside),
    ];
    prop_oneof![
        5 => (offer, size()).prop_map(|(offer, size)| Op::Commit(offer, size)),
        3 => pointer.clone().prop_map(Op::Release),
        1 => pointer.prop_map(Op::Lookup),
    ]
}

/// The region sizes tried: a multiple of the alignment and two that are not.
fn region() -> impl Strategy<Value = u64> {
    prop_oneof![Just(64 << 10), Just((64 << 10) + 100), Just(4096 + 17)]
}

/// What the arena must say to a placement, from the model alone: the same
/// checks in the same order (bounds, alignment, overlap). A zero-byte
/// placement takes one byte: every allocation has an address of its own.
fn expected(live: &BTreeMap<u64, u64>, len: u64, offset: u64, size: u64) -> Result<(), &'static str> {
    let size = size.max(1);
    if offset.checked_add(size).is_none_or(|end| end > len) {
        return Err("OutOfBounds");
    }
    if offset % ALIGNMENT != 0 {
        return Err("Misaligned");
    }
    if live.iter().any(|(&o, &s)| o < offset + size && offset < o + s) {
        return Err("Overlap");
    }
    Ok(())
}

fn kind(error: &PlacementError) -> &'static str {
    match error {
        PlacementError::OutOfBounds { .. } => "OutOfBounds",
        PlacementError::Misaligned { .. } => "Misaligned",
        PlacementError::Overlap { .. } => "Overlap",
    }
}

fn nth(live: &BTreeMap<u64, u64>, index: &Index) -> Option<(u64, u64)> {
    (!live.is_empty()).then(|| live.iter().nth(index.index(live.len())).map(|(&o, &s)| (o, s)).unwrap())
}

/// The offsets where a guest's answer `offer` puts a block of `size`.
fn offset_of(offer: &Offer, live: &BTreeMap<u64, u64>, len: u64, size: u64) -> u64 {
    let align_up = |x: u64| x.div_ceil(ALIGNMENT) * ALIGNMENT;
    match offer {
        Offer::Gap(index) => {
            // Gaps: after each live block, and at 0.
            let starts: Vec<u64> = std::iter::once(0).chain(live.iter().map(|(&o, &s)| align_up(o + s))).collect();
            starts[index.index(starts.len())]
        }
        Offer::Inside(index, k) => {
            nth(live, index).map_or(0, |(o, s)| o + (k * ALIGNMENT) % s.max(1) / ALIGNMENT * ALIGNMENT)
        }
        Offer::Before(index, k) => nth(live, index).map_or(0, |(o, _)| o.saturating_sub(u64::from(*k) * ALIGNMENT)),
        Offer::Last => len.saturating_sub(1) / ALIGNMENT * ALIGNMENT,
        Offer::Past(k) => len + k,
        Offer::Overflow(k) => u64::MAX - k - size.min(u64::MAX / 2) / 2,
        Offer::Misaligned(index, k) => offset_of(&Offer::Gap(index.clone()), live, len, size) + u64::from(*k),
        Offer::Any(offset) => *offset,
    }
}

/// The pointer `pointer` names in `arena`.
fn address(arena: &DeviceArena, live: &BTreeMap<u64, u64>, pointer: &Pointer) -> *const u8 {
    let base = arena.base() as *const u8;
    match pointer {
        Pointer::Live(index) => nth(live, index).map_or(base, |(o, _)| base.wrapping_add(o as usize)),
        Pointer::Interior(index, k) => {
            nth(live, index).map_or(base.wrapping_add(1), |(o, s)| base.wrapping_add((o + 1 + k % s.max(1)) as usize))
        }
        Pointer::Offset(offset) => base.wrapping_add((offset % arena.len()) as usize),
        Pointer::Outside(0) => std::ptr::null(),
        Pointer::Outside(1) => base.wrapping_sub(ALIGNMENT as usize),
        Pointer::Outside(_) => base.wrapping_add(arena.len() as usize),
    }
}

#[test]
fn placements_are_checked_against_everything_live() {
    let (accepted, refused) = (Cell::new(0u64), Cell::new(0u64));
    let strategy = (region(), vec(op(), 1..120));
    let test = |(len, ops): (u64, Vec<Op>)| {
        let arena = DeviceArena::new(len, Pages::Small).expect("a small region maps");
        let mut live: BTreeMap<u64, u64> = BTreeMap::new();
        for op in &ops {
            match op {
                Op::Commit(offer, size) => {
                    let offset = offset_of(offer, &live, len, *size);
                    let expect = expected(&live, len, offset, *size);
                    match arena.commit(offset, *size) {
                        Ok(ptr) => {
                            prop_assert_eq!(expect, Ok(()), "accepted [{}, +{}) over {:?}", offset, size, live);
                            prop_assert_eq!(ptr as usize, arena.base() as usize + offset as usize);
                            live.insert(offset, (*size).max(1));
                            accepted.set(accepted.get() + 1);
                        }
                        Err(error) => {
                            prop_assert_eq!(expect, Err(kind(&error)), "{} for [{}, +{})", error, offset, size);
                            refused.set(refused.get() + 1);
                        }
                    }
                }
                Op::Release(pointer) => {
                    let ptr = address(&arena, &live, pointer);
                    let offset = (ptr as usize).wrapping_sub(arena.base() as usize) as u64;
                    let expect = live.get(&offset).map(|&size| (offset, size)).filter(|_| arena.contains(ptr, 0));
                    prop_assert_eq!(arena.release(ptr), expect);
                    if expect.is_some() {
                        live.remove(&offset);
                    }
                }
                Op::Lookup(pointer) => {
                    let ptr = address(&arena, &live, pointer);
                    let offset = (ptr as usize).wrapping_sub(arena.base() as usize) as u64;
                    let expect = live.get(&offset).map(|&size| (offset, size)).filter(|_| arena.contains(ptr, 0));
                    prop_assert_eq!(arena.lookup(ptr), expect);
                }
            }
            // After every step, refusals included: the arena's record is the model.
            prop_assert_eq!(arena.live(), live.iter().map(|(&o, &s)| (o, s)).collect::<Vec<_>>());
            prop_assert_eq!(arena.bytes_in_use(), live.values().sum::<u64>());
        }
        Ok(())
    };
    let summary = || format!("{} placements accepted, {} refused", accepted.get(), refused.get());
    crate::fuzz("arena placements", 3000, strategy, test, summary);
}
