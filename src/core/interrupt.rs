//! Whether the user asked this process to stop (Ctrl-C, SIGTERM), as one process-wide
//! flag that the binary's signal handler sets and long waits read.
//!
//! The library installs no handler: the binary registers [`signal_slot`] with its signal
//! handling (so a library caller keeps its own), and the waits that can last (a child's
//! exit, a deadline) poll [`requested`] between short slices, so an interrupted command
//! unwinds through its owners' destructors — children torn down and reaped, temporary
//! directories removed — instead of dying with its children still running.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Longest a wait that honours interruption blocks before it looks at the flag again.
pub const POLL_SLICE_MS: u64 = 50;

fn slot() -> &'static Arc<AtomicUsize> {
    static SLOT: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
    SLOT.get_or_init(|| Arc::new(AtomicUsize::new(0)))
}

/// The shared slot a signal handler writes the signal's number into (0: none yet).
pub fn signal_slot() -> Arc<AtomicUsize> {
    Arc::clone(slot())
}

/// The signal that asked this process to stop, if one has.
pub fn requested() -> Option<i32> {
    match slot().load(Ordering::SeqCst) {
        0 => None,
        signal => i32::try_from(signal).ok(),
    }
}
