//! ML lane: the engine's explicit backward pass and its in-torch logical-order sum give
//! autograd's and `LogicalSum`'s bits exactly, on real micro-batches at trained states.
#![cfg(feature = "torch")]
mod common;

use shardlift::core::logical::{Hyperparameters, LogicalState};
use shardlift::core::sampling::SampleStream;
use shardlift::core::step::{
    plan_step, GradientEngine, GradientRequest, LogicalSum, MicroBatch, SplitView, StepError,
};
use shardlift::engine::{in_process_step, reference, TchEngine};

fn data() -> shardlift::dataset::FashionMnist {
    shardlift::dataset::ensure_and_load(&common::cache_directory(), None).expect("dataset")
}

/// FP32 values as bits (NaNs by class: their payloads are unspecified).
fn bits(values: &[f32]) -> Vec<Option<u32>> {
    values
        .iter()
        .map(|v| (!v.is_nan()).then(|| v.to_bits()))
        .collect()
}

/// The states of three in-process steps from seed `seed`'s genesis, each with the
/// micro-batches of the step that follows it.
fn states_and_batches(
    data: &shardlift::dataset::FashionMnist,
    seed: u64,
) -> Vec<(LogicalState, Vec<MicroBatch>)> {
    let train = SplitView::from(&data.train);
    let mut state = LogicalState::genesis(Hyperparameters::with_seed(seed));
    let mut stream = SampleStream::new(seed, train.count as u32);
    let mut out = Vec::new();
    for _ in 0..3 {
        // The plan depends on the state's cursor alone, so the step below reads it too.
        let batches = plan_step(&state, &mut stream, train).expect("plan");
        out.push((state.clone(), batches));
        in_process_step(&mut state, &mut stream, train).expect("step");
    }
    out
}

#[test]
fn the_explicit_backward_pass_gives_autograds_bits_for_every_micro_batch() {
    let data = data();
    let mut compared = 0;
    for seed in [0, 7] {
        for (state, batches) in states_and_batches(&data, seed) {
            let flat = state.flat_parameters();
            let global = state.hyperparameters().global_batch_size();
            let mut explicit = Vec::new();
            let request = GradientRequest {
                flat_parameters: &flat,
                batches: &batches,
                global_batch_size: global,
            };
            TchEngine
                .micro_batch_gradients(request, &mut |index, loss, gradient| {
                    explicit.push((index, loss, gradient.to_vec()));
                    Ok(())
                })
                .expect("explicit");
            assert_eq!(explicit.len(), batches.len());
            for ((index, loss, gradient), batch) in explicit.iter().zip(&batches) {
                let (autograd_loss, autograd_gradient) =
                    reference::autograd_gradients(&flat, batch, global).expect("autograd");
                assert_eq!(*index, batch.index);
                assert_eq!(loss.to_bits(), autograd_loss.to_bits(), "loss of {index}");
                assert!(
                    bits(gradient) == bits(&autograd_gradient),
                    "seed {seed} step {} micro-batch {index}: the explicit gradient differs \
                     from autograd's",
                    state.step()
                );
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 2 * 3 * 12);
}

#[test]
fn the_in_torch_sum_gives_logical_sums_bits() {
    let data = data();
    for (state, batches) in states_and_batches(&data, 3) {
        let flat = state.flat_parameters();
        let micro_batches = state.hyperparameters().logical_micro_batches;
        let request = GradientRequest {
            flat_parameters: &flat,
            batches: &batches,
            global_batch_size: state.hyperparameters().global_batch_size(),
        };
        let mut sum = LogicalSum::new(micro_batches);
        TchEngine
            .micro_batch_gradients(request, &mut |index, loss, gradient| {
                sum.add(index, loss, gradient)
            })
            .expect("gradients");
        let (expected_loss, expected) = sum.finish().expect("complete");
        let (loss, gradient) = TchEngine
            .summed_gradients(request, micro_batches)
            .expect("summed");
        assert_eq!(loss.to_bits(), expected_loss.to_bits());
        assert!(
            bits(&gradient) == bits(&expected),
            "the in-torch sum differs"
        );
    }
}

#[test]
fn the_in_torch_sum_refuses_micro_batches_out_of_logical_order_or_incomplete() {
    let data = data();
    let (state, batches) = states_and_batches(&data, 1).remove(0);
    let flat = state.flat_parameters();
    let micro_batches = state.hyperparameters().logical_micro_batches;
    let mut swapped = batches.clone();
    swapped.swap(3, 4);
    let incomplete = &batches[..11];
    for (batches, got) in [
        (
            &swapped[..],
            swapped.iter().map(|b| b.index).collect::<Vec<_>>(),
        ),
        (incomplete, (0..11).collect()),
    ] {
        let request = GradientRequest {
            flat_parameters: &flat,
            batches,
            global_batch_size: state.hyperparameters().global_batch_size(),
        };
        match TchEngine.summed_gradients(request, micro_batches) {
            Err(StepError::MicroBatchCoverage {
                expected,
                got: found,
            }) => {
                assert_eq!(expected, micro_batches);
                assert_eq!(found, got);
            }
            other => panic!("expected a coverage error, got {other:?}"),
        }
    }
}
