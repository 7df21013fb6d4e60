//! Barrier events and hooks: how the writer reports each named barrier it reaches
//! (the names themselves are `core::barrier::Barrier`, one enum in RFC 0001 order).
use serde::{Deserialize, Serialize};

pub use crate::core::barrier::Barrier;

/// One protocol step completed: the barrier, its 1-based occurrence in this run, the
/// path (relative to the store) it concerns, and its sequence number in the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BarrierEvent {
    /// Its sequence number in the run, from 0.
    pub seq: u64,
    /// The barrier reached.
    pub barrier: Barrier,
    /// Its 1-based occurrence in this run (object barriers repeat per chunk).
    pub occurrence: u32,
    /// The path it concerns, relative to the store.
    pub path: String,
}

/// Numbers the barrier events of one publish run: a sequence across every barrier and a
/// 1-based occurrence per barrier. The file-system writer and the object-store writer
/// both number their events here, so one run shape yields the same events on both.
#[derive(Debug, Clone, Default)]
pub struct BarrierSequencer {
    next_seq: u64,
    occurrences: [u32; Barrier::ALL.len()],
}

impl BarrierSequencer {
    /// A sequencer for a new run: the first event gets sequence number 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Numbers the next event, for `barrier` concerning `path`, and hands it to `hooks`;
    /// `Err` when the hook stops the run there.
    pub fn reach(
        &mut self,
        hooks: &mut dyn BarrierHook,
        barrier: Barrier,
        path: &str,
    ) -> Result<(), HookStop> {
        let index = barrier as usize;
        self.occurrences[index] = self.occurrences[index].saturating_add(1);
        let event = BarrierEvent {
            seq: self.next_seq,
            barrier,
            occurrence: self.occurrences[index],
            path: path.to_owned(),
        };
        self.next_seq = self.next_seq.saturating_add(1);
        hooks.reached(&event)
    }
}

/// Why a barrier hook stopped the publisher at a barrier (a crash harness's pause, a
/// test's injected stop, a parent that went away). The writer carries it, with the
/// barrier, into its `Stopped` error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct HookStop {
    /// What the hook said.
    pub reason: String,
}

impl From<&str> for HookStop {
    fn from(reason: &str) -> Self {
        HookStop {
            reason: reason.to_owned(),
        }
    }
}

impl From<String> for HookStop {
    fn from(reason: String) -> Self {
        HookStop { reason }
    }
}

/// Called by the writer at every barrier; returning `Err` stops the publisher there
/// (nothing after the barrier happens).
pub trait BarrierHook {
    /// Called when the writer reaches `event`; `Err` stops the publisher.
    fn reached(&mut self, event: &BarrierEvent) -> Result<(), HookStop>;

    /// Whether this hook needs every object barrier, in order (it may stop the writer
    /// there, or records or reports them). A writer whose hook does not MAY install
    /// objects concurrently and report no object barrier (RFC 0001 §4); one whose hook
    /// does issues every step from one thread, in order. Manifest, commit and LATEST
    /// barriers are reported either way.
    fn observes(&self) -> bool {
        true
    }
}

/// Hooks that do nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;

impl BarrierHook for NoHooks {
    fn reached(&mut self, _event: &BarrierEvent) -> Result<(), HookStop> {
        Ok(())
    }

    fn observes(&self) -> bool {
        false
    }
}

/// Hooks that do nothing but ask for the observed order: the writer reports every
/// barrier (to nobody) and so issues every operation from one thread, in RFC 0001 §4
/// order. For a deterministic operation trace (crash-testing a publish from outside,
/// `store publish-synthetic --sequential`) or a sequential baseline.
#[derive(Debug, Default, Clone, Copy)]
pub struct InOrder;

impl BarrierHook for InOrder {
    fn reached(&mut self, _event: &BarrierEvent) -> Result<(), HookStop> {
        Ok(())
    }
}

/// Records every event.
#[derive(Debug, Default, Clone)]
pub struct RecordingHooks {
    /// Every event reached, in order.
    pub events: Vec<BarrierEvent>,
}

impl BarrierHook for RecordingHooks {
    fn reached(&mut self, event: &BarrierEvent) -> Result<(), HookStop> {
        self.events.push(event.clone());
        Ok(())
    }
}

/// Adapts a closure.
pub struct FnHook<F>(pub F);

impl<F: FnMut(&BarrierEvent) -> Result<(), HookStop>> BarrierHook for FnHook<F> {
    fn reached(&mut self, event: &BarrierEvent) -> Result<(), HookStop> {
        (self.0)(event)
    }
}
