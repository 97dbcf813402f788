//! How the process's allocator treats freed memory, tuned for streaming.
//!
//! Streaming output allocates and frees buffers of tens of KiB thousands of times a second. By
//! default glibc hands the top of its heap back to the kernel as soon as 128 KiB of it is free,
//! so each burst maps fresh pages again: page faults, zeroing and memory-cgroup accounting
//! that showed up as ~5 % of a streaming profile and cost ~10 % of throughput. Keeping up to
//! 8 MiB of freed heap for reuse removes that; an idle process is unaffected (nothing was
//! freed), and a busy one keeps at most 8 MiB more than it uses.
//!
//! Setting that threshold also fixes glibc's otherwise self-adjusting mmap threshold at its
//! 128 KiB start, so every bigger buffer — a 1 MiB file block is a 1.4 MB base64 string and a
//! JSON frame of as much again — would be mapped fresh and faulted in page by page, a third
//! of a streamed file copy's time. Buffers up to [`HEAP_ALLOCATION_MAX_BYTES`] come from the
//! heap instead, and are reused.
//!
//! Bigger buffers still are mapped fresh for each use: a whole file read, a buffered HTTP body,
//! the WebSocket's buffers for such a message, each up to tens of MB. Faulted in 4 KiB at a
//! time, they spent over a third of a 100 MB `fs/readFile`'s server time in page faults and
//! their accounting. [`HugePageHint`], the global allocator of `tether` and of the bench, asks
//! the kernel to back them with transparent huge pages (2 MiB, one fault for 512 of the small
//! ones) where it allows (`/sys/kernel/mm/transparent_hugepage/enabled` set to `madvise` or
//! `always`): what glibc's `glibc.malloc.hugetlb=1` tunable does, without an environment
//! variable that children would inherit.
//!
//! But only while the process has freed a buffer that big within the last
//! [`WARM_HUGE_PAGES_NANOS`]. A huge page is a 2 MiB block of free memory, and on a virtual
//! machine whose host takes back the guest's free memory (free page reporting through a
//! virtio balloon, as on the VM these figures come from; the kernel reports a free block after
//! about two seconds), free blocks that big are what the host has taken back: each huge page
//! is then faulted in again from the host, 4 KiB at a time. Measured on such a machine, touching a
//! fresh 256 MiB buffer a few seconds after the last big one was freed ran at 140–210 MB/s
//! with the advice and 1.3–1.7 GB/s without; right after a big free, at 4.7 GB/s with it. An
//! agent's big reads come one now and then, so the first big buffer after a quiet spell is
//! not advised, and the ones that follow it closely reuse what it freed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// Freed heap kept for reuse before it is returned to the kernel.
pub const KEPT_FREE_HEAP_BYTES: usize = 8 * 1024 * 1024;

/// Largest allocation served from the heap rather than mapped on its own: a whole file-block
/// message (1 MiB of data, its base64 and its JSON frame) with room to spare. Bigger buffers
/// (a whole-file read) are rare and mapped, so they go back to the kernel when freed.
pub const HEAP_ALLOCATION_MAX_BYTES: usize = 4 * 1024 * 1024;

/// Applies the tuning to this process. Call once, early in `main`; elsewhere than on glibc
/// Linux it does nothing.
pub fn tune_for_streaming() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets a parameter of glibc's allocator, which is thread-safe; the
    // value is in range for an `int`.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEPT_FREE_HEAP_BYTES as libc::c_int);
        libc::mallopt(libc::M_MMAP_THRESHOLD, HEAP_ALLOCATION_MAX_BYTES as libc::c_int);
    }
}

/// Makes every thread allocate from one heap, for a client (`tether exec`, `cp`, `mcp`), not
/// the server. glibc gives each thread that allocates an arena of its own, and each arena
/// keeps up to [`KEPT_FREE_HEAP_BYTES`] of what was freed in it. A client's runtime threads
/// take turns decoding output that another thread writes out and frees, so each arena grows to
/// hold a share of the same few MiB in flight: `tether exec` into a reader that stalled and
/// then read 200 MB peaked at 20.5–21.9 MB with its three arenas and at 16.4 MB with one, at
/// the same speed (a client's few threads seldom allocate at the same moment). The server keeps
/// an arena per thread: its pumps, blocking pool and workers allocate at once. Call before any
/// thread is started.
pub fn one_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: as in `tune_for_streaming`.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// The smallest allocation [`HugePageHint`] asks huge pages for: the size from which glibc maps
/// a buffer on its own ([`HEAP_ALLOCATION_MAX_BYTES`]), so the hint covers a mapping no other
/// buffer shares. Below it, buffers come from the heap and are reused, already faulted in.
pub const HUGE_PAGE_HINT_MIN_BYTES: usize = HEAP_ALLOCATION_MAX_BYTES;

/// The size of a transparent huge page on x86-64 and on arm64 with 4 KiB pages: only the part
/// of a buffer made of whole, aligned huge pages is advised.
const HUGE_PAGE_BYTES: usize = 2 * 1024 * 1024;

/// How long after a buffer of [`HUGE_PAGE_HINT_MIN_BYTES`] or more is freed the next one is
/// advised to use huge pages: half the two seconds after which Linux reports a free block to
/// the host, so the blocks just freed are still the guest's.
pub const WARM_HUGE_PAGES_NANOS: u64 = 1_000_000_000;

/// When a buffer of [`HUGE_PAGE_HINT_MIN_BYTES`] or more was last freed, in nanoseconds of
/// [`coarse_now`]; 0 for never.
static LAST_BIG_FREE: AtomicU64 = AtomicU64::new(0);

/// The system allocator, asking for transparent huge pages behind every buffer of at least
/// [`HUGE_PAGE_HINT_MIN_BYTES`] (see the module's documentation). Memory is allocated, freed
/// and moved by the system allocator alone; the hint changes how the kernel backs it, never
/// what it holds. Elsewhere than on Linux it is the system allocator.
pub struct HugePageHint;

// SAFETY: every call is the system allocator's, with the caller's arguments; `advise` only
// gives the kernel a hint about memory that allocation returned.
unsafe impl GlobalAlloc for HugePageHint {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System.alloc`'s.
        let pointer = unsafe { System.alloc(layout) };
        advise(pointer, layout.size());
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let pointer = unsafe { System.alloc_zeroed(layout) };
        advise(pointer, layout.size());
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        if layout.size() >= HUGE_PAGE_HINT_MIN_BYTES {
            LAST_BIG_FREE.store(coarse_now(), Ordering::Relaxed);
        }
        // SAFETY: `pointer` came from `System` through this allocator, with this layout.
        unsafe { System.dealloc(pointer, layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as `dealloc`; the caller's contract is `System.realloc`'s.
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        // A buffer that grew into a mapping of its own (glibc moves it there, or grows its
        // mapping in place) is advised as a new one would be.
        if new_size > layout.size() {
            advise(moved, new_size);
        }
        moved
    }
}

/// Whether a big buffer allocated at `now` should be advised, the last one having been freed
/// at `last_big_free` (0: never).
fn warm(now: u64, last_big_free: u64) -> bool {
    last_big_free != 0 && now.saturating_sub(last_big_free) < WARM_HUGE_PAGES_NANOS
}

/// The monotonic clock at the kernel's tick (a read of shared memory, no system call), in
/// nanoseconds; never 0. Allocates nothing, as the allocator must not.
fn coarse_now() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `now` is a valid `timespec` to write.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) };
        (now.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(now.tv_nsec as u64).max(1)
    }
    #[cfg(not(target_os = "linux"))]
    1
}

/// Asks for huge pages behind a buffer just allocated (or grown), if a big one was freed
/// lately (see the module's documentation).
fn advise(pointer: *mut u8, size: usize) {
    if size >= HUGE_PAGE_HINT_MIN_BYTES {
        advise_when(pointer, size, warm(coarse_now(), LAST_BIG_FREE.load(Ordering::Relaxed)));
    }
}

/// Asks for huge pages behind the whole huge pages of `size` bytes at `pointer`, when `warm`
/// ([`advise`] has checked the size). A refusal (a kernel without transparent huge pages)
/// changes nothing, so it is not reported.
fn advise_when(pointer: *mut u8, size: usize, warm: bool) {
    #[cfg(target_os = "linux")]
    if warm && !pointer.is_null() {
        let start = (pointer as usize).next_multiple_of(HUGE_PAGE_BYTES);
        let end = (pointer as usize + size) / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
        if end > start {
            // SAFETY: `start..end` lies within the allocation just made; `MADV_HUGEPAGE` only
            // marks how the kernel may back it, never its contents.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (pointer, size, warm);
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The `VmFlags` line of the mapping that holds `address`, from `/proc/self/smaps`.
    fn vm_flags_at(address: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((from, to)) = range.split_once('-')
                && let (Ok(from), Ok(to)) =
                    (usize::from_str_radix(from, 16), usize::from_str_radix(to, 16))
            {
                inside = (from..to).contains(&address);
            } else if inside && let Some(flags) = line.strip_prefix("VmFlags:") {
                return flags.trim().to_owned();
            }
        }
        panic!("no mapping holds {address:#x}");
    }

    #[test]
    fn only_a_big_free_within_the_warm_spell_asks_for_huge_pages() {
        let second = 1_000_000_000;
        assert!(!warm(5 * second, 0), "nothing freed yet");
        assert!(warm(5 * second, 5 * second));
        assert!(warm(5 * second, 5 * second - WARM_HUGE_PAGES_NANOS + 1));
        assert!(!warm(5 * second, 5 * second - WARM_HUGE_PAGES_NANOS));
        assert!(!warm(60 * second, 5 * second));
        // A free stamped after `now` was read (another thread) counts as just now.
        assert!(warm(5 * second, 6 * second));
    }

    #[test]
    fn a_big_buffer_after_a_big_free_is_advised_to_use_huge_pages_and_holds_what_is_written() {
        let layout = Layout::from_size_align(64 * 1024 * 1024, 8).unwrap();
        // A big free just now: the next big buffer is advised.
        // SAFETY: a non-zero size, freed at once with the same layout.
        unsafe { HugePageHint.dealloc(HugePageHint.alloc(layout), layout) };
        // SAFETY: a non-zero size; freed below with the same layout.
        let pointer = unsafe { HugePageHint.alloc(layout) };
        assert!(!pointer.is_null());
        // SAFETY: the allocation is 64 MiB long.
        let buffer = unsafe { std::slice::from_raw_parts_mut(pointer, layout.size()) };
        buffer.fill(7);
        assert!(buffer.iter().all(|&byte| byte == 7));
        // `hg`: the kernel's mark of `MADV_HUGEPAGE` on the mapping, where the kernel has
        // transparent huge pages at all (built without them, it refuses the advice).
        let advisable = std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists();
        let marked = |address: usize| {
            let flags = vm_flags_at(address);
            assert!(!advisable || flags.split(' ').any(|flag| flag == "hg"), "{flags}");
        };
        marked(pointer as usize + layout.size() / 2);

        // Grown, the buffer keeps its contents and its mark (a big free stamped again, as
        // filling it may have taken a while on a loaded machine).
        let grown = 128 * 1024 * 1024;
        LAST_BIG_FREE.store(coarse_now(), Ordering::Relaxed);
        // SAFETY: `pointer` came from this allocator with `layout`.
        let pointer = unsafe { HugePageHint.realloc(pointer, layout, grown) };
        assert!(!pointer.is_null());
        // SAFETY: the first 64 MiB were kept by the move.
        let kept = unsafe { std::slice::from_raw_parts(pointer, layout.size()) };
        assert!(kept.iter().all(|&byte| byte == 7));
        marked(pointer as usize + grown - HUGE_PAGE_BYTES * 2);
        let grown = Layout::from_size_align(grown, 8).unwrap();
        // SAFETY: as allocated, with the size it was grown to.
        unsafe { HugePageHint.dealloc(pointer, grown) };
    }

    /// Called directly (other tests in this process may free big buffers at any time): a big
    /// buffer is advised only when warm.
    #[test]
    fn a_big_buffer_after_a_quiet_spell_is_left_to_small_pages() {
        let layout = Layout::from_size_align(64 * 1024 * 1024, 8).unwrap();
        // SAFETY: a non-zero size; freed below with the same layout. `System`, so that only
        // the calls below advise it.
        let pointer = unsafe { System.alloc(layout) };
        assert!(!pointer.is_null());
        let middle = pointer as usize + layout.size() / 2;
        let advised = || vm_flags_at(middle).split(' ').any(|flag| flag == "hg");
        advise_when(pointer, layout.size(), false);
        assert!(!advised(), "advised after a quiet spell");
        advise_when(pointer, layout.size(), true);
        let transparent = std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists();
        assert!(!transparent || advised(), "not advised after a big free");
        // SAFETY: as allocated.
        unsafe { System.dealloc(pointer, layout) };
    }

    #[test]
    fn a_big_free_is_stamped() {
        let layout = Layout::from_size_align(HUGE_PAGE_HINT_MIN_BYTES, 8).unwrap();
        // SAFETY: a non-zero size, freed at once with the same layout.
        unsafe { HugePageHint.dealloc(HugePageHint.alloc(layout), layout) };
        assert!(warm(coarse_now(), LAST_BIG_FREE.load(Ordering::Relaxed)));
    }
}
