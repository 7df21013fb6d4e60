//! Which gradient engine a worker or an in-process run uses.
//!
//! `tch` is the product's engine (feature `torch`). `fake` is a torch-free test engine:
//! deterministic scalar FP32 arithmetic over the same micro-batch bytes, so the
//! coordinator, the protocol and topology independence are tested without libtorch. Its
//! numbers are not a model's gradient and never enter evidence.
use crate::core::step::{
    check_parameter_count, GradientEngine, GradientRequest, GradientSink, StepError,
};

/// A gradient engine, by name (the worker's `--engine` value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// libtorch through tch, one thread (needs the `torch` feature).
    Tch,
    /// The torch-free test engine ([`FakeEngine`]).
    Fake,
}

impl EngineKind {
    /// The name used on command lines.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Tch => "tch",
            EngineKind::Fake => "fake",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "tch" => Some(EngineKind::Tch),
            "fake" => Some(EngineKind::Fake),
            _ => None,
        }
    }

    /// The engine itself; `Tch` pins torch to one thread first. Fails for `Tch` in a build
    /// without the `torch` feature.
    pub fn instantiate(self) -> Result<Box<dyn GradientEngine>, StepError> {
        match self {
            EngineKind::Fake => Ok(Box::new(FakeEngine)),
            #[cfg(feature = "torch")]
            EngineKind::Tch => {
                crate::engine::pin_single_thread();
                Ok(Box::new(crate::engine::TchEngine))
            }
            #[cfg(not(feature = "torch"))]
            EngineKind::Tch => Err(StepError::Engine(
                "this shardlift was built without the `torch` feature; only the fake engine is available"
                    .to_owned(),
            )),
        }
    }
}

/// Deterministic torch-free stand-in for a gradient: for parameter `i`,
/// `(p_i / 2 + (pixel_sum / 255 + label_sum) / (i + 1)) / global_batch_size`, with the
/// loss the mean pixel of the micro-batch. Scalar FP32 in a fixed order, so its bits do
/// not depend on the process or the topology, and it changes with every input byte sum.
#[derive(Clone, Copy, Debug, Default)]
pub struct FakeEngine;

impl GradientEngine for FakeEngine {
    fn micro_batch_gradients(
        &self,
        request: GradientRequest<'_>,
        sink: &mut GradientSink<'_>,
    ) -> Result<(), StepError> {
        let flat_parameters = request.flat_parameters;
        check_parameter_count(flat_parameters)?;
        let global = request.global_batch_size as f32;
        let mut gradient = vec![0f32; flat_parameters.len()];
        for batch in request.batches {
            let pixel_sum: f32 = batch.pixels.iter().map(|&p| f32::from(p)).sum();
            let label_sum: f32 = batch.labels.iter().map(|&l| f32::from(l)).sum();
            let signal = pixel_sum / 255.0 + label_sum;
            for (i, (slot, p)) in gradient.iter_mut().zip(flat_parameters).enumerate() {
                *slot = (p * 0.5 + signal / (i as f32 + 1.0)) / global;
            }
            let loss = pixel_sum / (batch.pixels.len().max(1) as f32 * 255.0) / global;
            sink(batch.index, loss, &gradient)?;
        }
        Ok(())
    }
}
