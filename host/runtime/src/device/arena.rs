//! The device's memory region and the host's record of what is live in it.
//!
//! The region is ordinary host memory (an anonymous mapping whose pages
//! arrive on first touch), because TensorFlow's own DEVICE_DEFAULT kernels
//! (AssignAdd, AssignSub, ...) dereference device pointers on the host. The
//! guest decides *where* an allocation goes; the arena checks that answer
//! (in bounds, aligned, not overlapping anything live) before a pointer
//! leaves the host. Sizes are tracked here because TensorFlow may pass
//! `size == 0` when it deallocates.

use std::collections::BTreeMap;
use std::ptr::NonNull;

use parking_lot::Mutex;

/// Alignment of every device allocation (and of the host memory the plugin
/// hands TensorFlow). TensorFlow's `Allocator::kAllocatorAlignment` is 64,
/// but its BFC allocator requires 256 of a sub-allocator and aborts the
/// process otherwise (`SubAllocator must return memory aligned to at least
/// 256 bytes`): TensorFlow after 2.21 puts plugin memory under BFC, so 256
/// is the strictest any supported TensorFlow asks.
pub const ALIGNMENT: u64 = 256;

/// Why the arena rejected a placement the guest proposed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("offset {offset} + size {size} lies outside the {region} byte region (out of bounds)")]
    OutOfBounds { offset: u64, size: u64, region: u64 },
    #[error("offset {offset} is not aligned to {alignment} bytes (misaligned)")]
    Misaligned { offset: u64, alignment: u64 },
    #[error("[{offset}, {end}) overlaps the live allocation [{live_offset}, {live_end})", end = offset + size, live_end = live_offset + live_size)]
    Overlap { offset: u64, size: u64, live_offset: u64, live_size: u64 },
}

pub struct DeviceArena {
    base: NonNull<u8>,
    len: u64,
    /// Live allocations: offset → size.
    live: Mutex<BTreeMap<u64, u64>>,
}

// SAFETY: the arena only hands out raw addresses; the mapping itself is
// owned for the arena's lifetime and all bookkeeping is behind a mutex.
unsafe impl Send for DeviceArena {}
// SAFETY: see `Send`; `&DeviceArena` exposes no unsynchronised mutation.
unsafe impl Sync for DeviceArena {}

/// Freed blocks at least this large give their pages back to the OS.
///
/// Smaller blocks keep theirs: a training step frees and reallocates the same
/// weight- and activation-sized blocks every step, and discarding them made
/// every reuse fault in and zero-fill each page again (at a 1 MiB threshold a
/// Keras MLP step ran 2.6× slower than TensorFlow's CPU device, and a
/// 2048² MatMul lost ~15% to page faults on its 16 MiB output).
pub const DISCARD_MIN_BYTES: u64 = 256 << 20;

/// Size of a transparent huge page on x86-64 and most aarch64 kernels; the
/// region starts on such a boundary when it asks for huge pages.
pub const HUGE_PAGE: u64 = 2 << 20;

/// How the region's pages are backed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pages {
    /// 4 KiB pages only.
    Small,
    /// Asks the kernel for transparent huge pages (`MADV_HUGEPAGE`) where it
    /// offers them (`/sys/kernel/mm/transparent_hugepage/enabled` not
    /// `never`). Kernels compute over whole tensors, and 2 MiB pages cut the
    /// TLB misses of streaming through them: a 2048² MatMul ran 2.6% faster
    /// and 1M-element activations 3–8% faster on the development VM.
    Huge,
}

impl DeviceArena {
    /// Reserves `len` bytes of address space. Pages are committed lazily by
    /// the kernel on first touch, so a large region costs nothing until used.
    /// With [`Pages::Huge`] the region starts on a [`HUGE_PAGE`] boundary,
    /// so the guest's offsets line up with the kernel's huge pages.
    pub fn new(len: u64, pages: Pages) -> std::io::Result<DeviceArena> {
        let size = usize::try_from(len).map_err(|_| std::io::Error::other("region too large"))?;
        let base = region::reserve(size, pages)?;
        Ok(DeviceArena { base, len, live: Mutex::new(BTreeMap::new()) })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Checks a guest's placement and records it as live. A zero-byte
    /// placement takes one byte: every allocation has an address of its own
    /// (recorded at size 0 at the start of a live block, it would replace
    /// that block's record).
    pub fn commit(&self, offset: u64, size: u64) -> Result<*mut u8, PlacementError> {
        let size = size.max(1);
        let end = offset.checked_add(size).filter(|&end| end <= self.len);
        if end.is_none() {
            return Err(PlacementError::OutOfBounds { offset, size, region: self.len });
        }
        if offset % ALIGNMENT != 0 {
            return Err(PlacementError::Misaligned { offset, alignment: ALIGNMENT });
        }
        let mut live = self.live.lock();
        if let Some((&live_offset, &live_size)) = overlapping(&live, offset, size) {
            return Err(PlacementError::Overlap { offset, size, live_offset, live_size });
        }
        live.insert(offset, size);
        // SAFETY: offset + size <= len was checked above, so the result stays
        // inside the mapping.
        Ok(unsafe { self.base.as_ptr().add(offset as usize) })
    }

    /// Forgets the live allocation at `ptr` and returns `(offset, size)`.
    /// Pages of very large blocks go back to the OS (see [`DISCARD_MIN_BYTES`]).
    pub fn release(&self, ptr: *const u8) -> Option<(u64, u64)> {
        let offset = self.offset_of(ptr)?;
        let size = self.live.lock().remove(&offset)?;
        if size >= DISCARD_MIN_BYTES {
            self.discard(offset, size);
        }
        Some((offset, size))
    }

    /// Gives the pages fully inside a freed block back to the OS, so a
    /// device that once peaked does not keep that much resident forever.
    fn discard(&self, offset: u64, size: u64) {
        let page = 4096u64;
        let start = offset.div_ceil(page) * page;
        let end = (offset + size) / page * page;
        if end > start {
            // SAFETY: [start, end) lies inside a block that was just released
            // and inside the region.
            unsafe { region::discard(self.base.as_ptr().add(start as usize), (end - start) as usize) };
        }
    }

    /// `(offset, size)` of the live allocation that starts at `ptr`.
    pub fn lookup(&self, ptr: *const u8) -> Option<(u64, u64)> {
        let offset = self.offset_of(ptr)?;
        self.live.lock().get(&offset).map(|&size| (offset, size))
    }

    /// The offset of `ptr` if it points into the region.
    pub fn offset_of(&self, ptr: *const u8) -> Option<u64> {
        let base = self.base.as_ptr() as usize;
        let addr = ptr as usize;
        (addr >= base && ((addr - base) as u64) < self.len).then(|| (addr - base) as u64)
    }

    /// True if `[ptr, ptr + size)` lies inside the region.
    pub fn contains(&self, ptr: *const u8, size: u64) -> bool {
        let base = self.base.as_ptr() as u64;
        let addr = ptr as u64;
        addr >= base && addr.checked_add(size).is_some_and(|end| end <= base + self.len)
    }

    /// Live allocations as `(offset, size)`, for re-adoption by a new guest instance.
    pub fn live(&self) -> Vec<(u64, u64)> {
        self.live.lock().iter().map(|(&o, &s)| (o, s)).collect()
    }

    /// Bytes the host knows to be live.
    pub fn bytes_in_use(&self) -> u64 {
        self.live.lock().values().sum()
    }
}

impl Drop for DeviceArena {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the region reserved in `new`.
        unsafe { region::release(self.base, self.len as usize) };
    }
}

/// The memory behind an arena: an anonymous mapping on Unix (committed page
/// by page on first touch), a zeroed allocation elsewhere (enough for
/// testing guests on any OS, where regions are small).
#[cfg(unix)]
mod region {
    use super::{Pages, HUGE_PAGE};
    use std::ptr::NonNull;

    /// Reserves `size` bytes, on a [`HUGE_PAGE`] boundary for [`Pages::Huge`].
    pub fn reserve(size: usize, pages: Pages) -> std::io::Result<NonNull<u8>> {
        let slack = match pages {
            Pages::Small => 0,
            Pages::Huge => HUGE_PAGE as usize,
        };
        let reserved = size.checked_add(slack).ok_or_else(|| std::io::Error::other("region too large"))?;
        // SAFETY: an anonymous private mapping with no address hint; the
        // result is checked for MAP_FAILED before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserved,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let start = ptr as usize;
        let aligned = match pages {
            Pages::Small => start,
            Pages::Huge => start.next_multiple_of(slack),
        };
        // SAFETY: [start, aligned) and [aligned + size, start + reserved) are
        // the unused ends of the mapping just made (together `slack` bytes,
        // page-aligned since both `start` and `slack` are), so unmapping them
        // leaves exactly [aligned, aligned + size), which `release` unmaps.
        unsafe {
            if aligned > start {
                libc::munmap(ptr, aligned - start);
            }
            let tail = start + reserved - (aligned + size);
            if tail > 0 {
                libc::munmap((aligned + size) as *mut libc::c_void, tail);
            }
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if pages == Pages::Huge {
            // SAFETY: advice on the mapping just made; it changes how pages
            // are backed, never their contents. A kernel without transparent
            // huge pages refuses (EINVAL) and the region keeps small pages.
            let refused = unsafe { libc::madvise(aligned as *mut libc::c_void, size, libc::MADV_HUGEPAGE) } != 0;
            if refused {
                tracing::debug!("device memory keeps 4 KiB pages: {}", std::io::Error::last_os_error());
            }
        }
        NonNull::new(aligned as *mut u8).ok_or_else(|| std::io::Error::other("mmap returned null"))
    }

    /// Drops the contents of whole pages (later reads see zeros).
    ///
    /// # Safety
    /// `[ptr, ptr + len)` lies inside a region from `reserve`, page-aligned,
    /// and nothing live is in it.
    pub unsafe fn discard(ptr: *mut u8, len: usize) {
        // SAFETY: per the contract; MADV_DONTNEED on private anonymous memory
        // only drops contents.
        unsafe { libc::madvise(ptr.cast(), len, libc::MADV_DONTNEED) };
    }

    /// # Safety
    /// `base` and `len` are exactly a region from `reserve`, used no more.
    pub unsafe fn release(base: NonNull<u8>, len: usize) {
        // SAFETY: per the contract.
        unsafe { libc::munmap(base.as_ptr().cast(), len) };
    }
}

#[cfg(not(unix))]
mod region {
    use super::{Pages, HUGE_PAGE};
    use std::alloc::Layout;
    use std::ptr::NonNull;

    fn layout(size: usize) -> std::io::Result<Layout> {
        Layout::from_size_align(size.max(1), HUGE_PAGE as usize).map_err(|_| std::io::Error::other("region too large"))
    }

    pub fn reserve(size: usize, _pages: Pages) -> std::io::Result<NonNull<u8>> {
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout(size)?) };
        NonNull::new(ptr).ok_or_else(|| std::io::Error::other(format!("cannot allocate {size} bytes of device memory")))
    }

    /// # Safety
    /// As the Unix version; here the pages stay (there is no portable way
    /// to give them back).
    pub unsafe fn discard(_ptr: *mut u8, _len: usize) {}

    /// # Safety
    /// `base` and `len` are exactly a region from `reserve`, used no more.
    pub unsafe fn release(base: NonNull<u8>, len: usize) {
        // SAFETY: per the contract, allocated with this layout.
        unsafe { std::alloc::dealloc(base.as_ptr(), layout(len).expect("reserved with this layout")) };
    }
}

/// The live allocation overlapping `[offset, offset + size)`, if any.
fn overlapping(live: &BTreeMap<u64, u64>, offset: u64, size: u64) -> Option<(&u64, &u64)> {
    let end = offset + size;
    // The last allocation starting before `end` is the only candidate: live
    // allocations never overlap each other.
    live.range(..end).next_back().filter(|(&o, &s)| o + s > offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_and_rejects() {
        let arena = DeviceArena::new(1 << 20, Pages::Small).unwrap();
        let p = arena.commit(0, 128).unwrap();
        assert_eq!(p, arena.base());
        assert!(matches!(arena.commit(0, 64), Err(PlacementError::Overlap { live_offset: 0, .. })));
        assert!(matches!(arena.commit(1 << 20, 1), Err(PlacementError::OutOfBounds { .. })));
        assert!(matches!(arena.commit(u64::MAX - 10, 64), Err(PlacementError::OutOfBounds { .. })));
        assert!(matches!(arena.commit(130, 64), Err(PlacementError::Misaligned { .. })));
        // 64-byte alignment is not enough: TensorFlow's BFC allocator wants 256.
        assert!(matches!(arena.commit(192, 64), Err(PlacementError::Misaligned { alignment: 256, .. })));
        arena.commit(256, 64).unwrap();
        // A block that ends exactly where the next one starts does not overlap.
        arena.commit(512, 256).unwrap();
        assert!(matches!(arena.commit(256, 64), Err(PlacementError::Overlap { live_offset: 256, .. })));
        assert_eq!(arena.bytes_in_use(), 128 + 64 + 256);
        assert_eq!(arena.lookup(p), Some((0, 128)));
        assert_eq!(arena.lookup(p.wrapping_add(64)), None, "only block starts are allocations");
        assert_eq!(arena.release(p), Some((0, 128)));
        assert_eq!(arena.lookup(p), None);
        assert_eq!(arena.release(p), None);
        arena.commit(0, 64).unwrap();
        assert!(arena.release(std::ptr::null()).is_none());
    }

    #[test]
    fn a_zero_byte_placement_takes_a_byte() {
        // Found by the arena fuzz test (host/runtime/tests/fuzz): at the
        // start of a live block, a zero-byte placement passed the overlap
        // check and overwrote the block's record with size 0.
        let arena = DeviceArena::new(1 << 16, Pages::Small).unwrap();
        arena.commit(0, 512).unwrap();
        assert!(matches!(arena.commit(0, 0), Err(PlacementError::Overlap { live_offset: 0, live_size: 512, .. })));
        assert!(matches!(arena.commit(256, 0), Err(PlacementError::Overlap { .. })));
        assert!(matches!(arena.commit(1 << 16, 0), Err(PlacementError::OutOfBounds { .. })));
        assert_eq!(arena.live(), [(0, 512)]);
        arena.commit(512, 0).unwrap();
        assert_eq!(arena.live(), [(0, 512), (512, 1)]);
    }

    #[test]
    fn region_is_host_addressable_and_zeroed() {
        let arena = DeviceArena::new(8 << 20, Pages::Small).unwrap();
        let p = arena.commit(2 << 20, 2 << 20).unwrap();
        // SAFETY: p..p+2MiB was just committed inside the region.
        unsafe {
            assert_eq!(*p, 0);
            std::ptr::write_bytes(p, 7, 2 << 20);
            assert_eq!(*p.add((2 << 20) - 1), 7);
        }
        assert!(arena.contains(p, 2 << 20));
        assert!(!arena.contains(p, (6 << 20) + 1));
        arena.release(p).unwrap();
    }

    /// Field `key` (`"VmFlags:"`, `"Rss:"`, ...) of the mapping that holds
    /// `addr`, from `/proc/self/smaps`.
    fn smaps_field(addr: *mut u8, key: &str) -> Option<String> {
        let addr = addr as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let holds = |line: &str| {
            let range = line.split_whitespace().next()?;
            let (start, end) = range.split_once('-')?;
            let (start, end) = (usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?);
            (start..end).contains(&addr).then_some(())
        };
        let mut lines = smaps.lines().skip_while(|line| holds(line).is_none());
        lines.next()?;
        lines.find_map(|line| line.strip_prefix(key)).map(|value| value.trim().to_owned())
    }

    fn vm_flags(addr: *mut u8) -> Option<String> {
        smaps_field(addr, "VmFlags:")
    }

    /// Resident KiB of the arena's own pages, from `mincore`. (The `Rss`
    /// of its mapping in smaps also counts memory the kernel merged into the
    /// same mapping, such as a large buffer another test allocated next to
    /// it: that read 6 MiB "still resident" after a release.)
    fn resident_kib(arena: &DeviceArena) -> u64 {
        let page = 4096usize;
        let len = arena.len() as usize;
        let mut resident = vec![0u8; len.div_ceil(page)];
        // SAFETY: the arena's base is page-aligned and [base, base + len) is
        // its mapping; `resident` has one byte per page of it.
        let rc = unsafe { libc::mincore(arena.base().cast(), len, resident.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore over the arena");
        resident.iter().filter(|&&flags| flags & 1 != 0).count() as u64 * (page as u64 / 1024)
    }

    #[test]
    fn released_large_blocks_give_their_pages_back() {
        for pages in [Pages::Small, Pages::Huge] {
            let block = DISCARD_MIN_BYTES;
            let arena = DeviceArena::new(block + (4 << 20), pages).unwrap();
            // An odd offset, so the discarded range starts inside a huge page.
            let p = arena.commit(64 << 10, block).unwrap();
            // SAFETY: [p, p + block) was just committed inside the region.
            unsafe { std::ptr::write_bytes(p, 1, block as usize) };
            let touched = resident_kib(&arena);
            assert!(touched >= block / 1024, "{pages:?}: {touched} KiB resident after touching {block} bytes");
            arena.release(p).unwrap();
            let left = resident_kib(&arena);
            assert!(left <= 4 << 10, "{pages:?}: {left} KiB still resident after the release");
        }
    }

    #[test]
    fn huge_page_region_is_aligned_usable_and_advised() {
        let len = (5 << 20) + 4096;
        let arena = DeviceArena::new(len, Pages::Huge).unwrap();
        assert_eq!(arena.base() as u64 % HUGE_PAGE, 0, "region starts on a huge-page boundary");
        assert_eq!(arena.len(), len);
        let p = arena.commit(len - 4096, 4096).unwrap();
        // SAFETY: the region's last page was just committed.
        unsafe {
            std::ptr::write_bytes(p, 9, 4096);
            assert_eq!(*arena.base(), 0);
            assert_eq!(*p.add(4095), 9);
        }
        // `hg` is the kernel's mark of MADV_HUGEPAGE; kernels built without
        // transparent huge pages have no sysfs entry and refuse the advice.
        if std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            let flags = vm_flags(arena.base()).expect("the region is listed in /proc/self/smaps");
            assert!(flags.split_whitespace().any(|f| f == "hg"), "VmFlags:{flags}");
            let small = DeviceArena::new(len, Pages::Small).unwrap();
            let flags = vm_flags(small.base()).expect("the region is listed in /proc/self/smaps");
            assert!(!flags.split_whitespace().any(|f| f == "hg"), "VmFlags:{flags}");
        }
    }
}
