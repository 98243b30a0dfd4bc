//! Hands freed memory back to the OS after sessions go away. glibc keeps freed heap pages
//! for reuse, so without this a daemon that once served many sessions stays at its peak RSS.

use std::sync::OnceLock;
use std::time::Duration;
use tokio::sync::Notify;

/// Frees are coalesced: one trim at most this long after a burst starts.
const COALESCE: Duration = Duration::from_millis(500);

/// Asks for a trim soon; cheap to call often. Must be called inside the tokio runtime.
pub(crate) fn release_soon() {
    static WAKE: OnceLock<&'static Notify> = OnceLock::new();
    let wake = WAKE.get_or_init(|| {
        let wake: &'static Notify = Box::leak(Box::new(Notify::new()));
        tokio::spawn(async move {
            loop {
                wake.notified().await;
                tokio::time::sleep(COALESCE).await;
                trim();
            }
        });
        wake
    });
    wake.notify_one();
}

/// Buffers of 4 MiB and more (whole-file replies, buffered bodies; not the 1 MiB blocks of
/// streams, which would pay a map per block) are mapped on their own and unmapped
/// when freed. glibc otherwise raises its mmap threshold after the first such free (up to
/// 32 MiB), so later ones land in the heap and stay resident until a trim that may already
/// have run: a client that left kept tens of MiB. Call once, before any thread starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn map_large_buffers() {
    // SAFETY: mallopt takes integers only, and runs before other threads exist.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20) };
    // Setting the mmap threshold also fixes the trim threshold at its 128 KiB default: every
    // free at a heap's top then handed pages back (a thread arena's `madvise`), and a stream's
    // next messages faulted them in again, a tenth of the daemon's time while streaming. A
    // connection's outbound queue holds up to 16 MiB, so its churn stays below this. What
    // stays resident is handed back by `release_soon` once processes and sessions go away,
    // which `malloc_trim` does only for the main arena's top: hence one arena (small blocks
    // come from each thread's cache without its lock).
    // SAFETY: as above.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn map_large_buffers() {}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
