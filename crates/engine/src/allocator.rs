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
