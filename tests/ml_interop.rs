//! ML lane: a generation exported to safetensors and imported back continues training
//! bit for bit like the original, and computes the same logit-probe bytes.
#![cfg(feature = "torch")]
mod common;

use shardlift::core::logical::LogicalState;
use shardlift::core::sampling::SampleStream;
use shardlift::core::step::SplitView;
use shardlift::engine::{evaluate, in_process_step};

#[test]
fn continuing_from_an_import_equals_continuing_from_the_original() {
    let data = shardlift::dataset::ensure_and_load(&common::cache_directory(), None).expect("data");
    let train = || SplitView::from(&data.train);
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, imported_store, out) = (
        dir.path().join("store"),
        dir.path().join("imported"),
        dir.path().join("export"),
    );
    common::publish_two_trained_steps(&data, 5, &store);
    shardlift::interop::export(&store, 0, &out).expect("export");
    shardlift::interop::import(&imported_store, &out, 3).expect("import");
    let (original, _) = shardlift::store::load_generation(&store, 0).expect("original");
    let (imported, _) = shardlift::store::load_generation(&imported_store, 0).expect("imported");

    let test = SplitView::from(&data.test);
    let probe = |s: &LogicalState| evaluate(&s.flat_parameters(), test).expect("eval");
    assert_eq!(probe(&original).logit_probe, probe(&imported).logit_probe);

    let continued = |mut s: LogicalState| {
        let mut stream = SampleStream::new(5, data.train.count as u32);
        for _ in 0..2 {
            in_process_step(&mut s, &mut stream, train()).expect("step");
        }
        s
    };
    let (a, b) = (continued(original), continued(imported));
    assert_eq!(a.logical_state_root(), b.logical_state_root());
    assert_eq!(a.ledger_digest(), b.ledger_digest());
    assert_eq!(a.cursor(), b.cursor());
}
