//! A global allocator that forwards to the system allocator and counts live bytes, their peak
//! and the calls, so memory tests assert a bound on what the code really holds (not on a
//! process's RSS, which the test harness and the allocator's caching blur). Included by path
//! by the memory tests of several crates; each test binary gets its own counters.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes allocated and not yet freed.
pub static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The most [`LIVE`] reached; a test stores the current value to start a measurement.
pub static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Allocation calls that succeeded.
#[allow(dead_code)] // not every memory test counts calls
pub static ALLOCS: AtomicUsize = AtomicUsize::new(0);

pub struct Counting;

// SAFETY: forwards every call to `System` unchanged; only counts bytes and calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` (a non-zero size) is passed on as it is.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `alloc` above, that is from `System`, with this layout.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;
