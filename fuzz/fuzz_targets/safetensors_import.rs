#![no_main]
//! `store import`'s safetensors decoding: must never panic on any bytes; anything
//! accepted holds exactly the model's parameter count.
use libfuzzer_sys::fuzz_target;
use shardlift::core::logical::PARAMETER_COUNT;
use shardlift::interop::{decode_model, decode_optimizer};

fuzz_target!(|data: &[u8]| {
    if let Ok(flat) = decode_model(data) {
        assert_eq!(flat.len(), PARAMETER_COUNT);
    }
    if let Ok([exp_avg, exp_avg_sq]) = decode_optimizer(data) {
        assert_eq!(exp_avg.len(), PARAMETER_COUNT);
        assert_eq!(exp_avg_sq.len(), PARAMETER_COUNT);
    }
});
