//! Checking the frames workers send back.

use crate::core::logical::{ChunkState, LogicalState};
use crate::core::topology::Topology;

use crate::trainer::protocol::{GradientBytes, GradientsView, Message, ProtocolError};

/// Why a gathered `Gradients` frame was refused.
pub(super) enum GradientsRefusal {
    /// A `Gradients` reply that is wrong (the reason).
    Bad(String),
    /// Another message, or none that decodes.
    Other(Result<Message, ProtocolError>),
}

/// Checks one streamed `Gradients` frame from `rank`: it must be for `step` and hold
/// exactly one result, micro-batch `expected` (the next in logical order, which `rank`
/// owns). Returns that result.
pub(super) fn check_gradients_frame<'a>(
    view: &GradientsView<'a>,
    step: u64,
    expected: u32,
    rank: u32,
    topology: Topology,
) -> Result<GradientBytes<'a>, String> {
    if view.step != step {
        return Err(format!("gradients for step {}, expected {step}", view.step));
    }
    match view.results.as_slice() {
        [result] if result.index == expected => Ok(*result),
        [result] if topology.micro_batch_owner(result.index) != rank => Err(format!(
            "returned micro-batch {} it does not own",
            result.index
        )),
        [result] => Err(format!(
            "returned micro-batch {}, expected micro-batch {expected} next",
            result.index
        )),
        results => Err(format!(
            "a gradients frame holds {} micro-batches, not one",
            results.len()
        )),
    }
}

/// Checks a `Chunks` reply against the chunk ids the worker owns (`owned`, ascending):
/// every chunk must be owned and of its chunk's size, and the reply must hold each owned
/// chunk exactly once, in that order (the order the update sent them).
pub(super) fn check_chunks_reply(
    state: &LogicalState,
    owned: &[u32],
    chunks: &[ChunkState],
) -> Result<(), String> {
    for chunk in chunks {
        // A `ChunkState`'s three slots are equal in length by construction.
        let fits = state
            .chunks()
            .get(chunk.id() as usize)
            .is_some_and(|old| old.len() == chunk.len());
        if !owned.contains(&chunk.id()) || !fits {
            return Err(format!(
                "returned chunk {} it does not own or of the wrong size",
                chunk.id()
            ));
        }
    }
    let returned: Vec<u32> = chunks.iter().map(|chunk| chunk.id()).collect();
    if returned != owned {
        return Err(format!(
            "returned chunks {returned:?}, expected exactly its chunks {owned:?}"
        ));
    }
    Ok(())
}
