//! Limits the README states about what a scope counts as kept or escaped, each checked as
//! written there (on the CPU).
mod common;
use common::{block, floats, strict};
use gpu_scope::{gpu_scope, last_report, scope, Error, HeldBy};
use std::sync::{LazyLock, Mutex};
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

static SINK: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());

#[gpu_scope(on_escape = error)]
fn head_per_call(vs: &nn::VarStore, x: &Tensor) -> Result<Tensor, Error> {
    let head = nn::linear(vs.root() / "head", 4, 16, Default::default());
    Ok(head.forward(x).sum(Kind::Float))
}

/// A layer built on every call in a `VarStore` the function borrows: the store grows, and each
/// report shows the new variables as kept, not escaped.
#[test]
fn variables_added_to_a_borrowed_var_store_are_kept() {
    let vs = nn::VarStore::new(Device::Cpu);
    let x = Tensor::ones([2, 4], (Kind::Float, Device::Cpu));
    for calls in 1..=2 {
        drop(head_per_call(&vs, &x).unwrap());
        let r = last_report().unwrap();
        assert!(r.is_clean(), "{r}");
        assert!(r.kept >= block(16 * 4 * 4) + block(16 * 4), "{r}");
        assert_eq!(vs.variables().len(), 2 * calls);
    }
}

/// A view of a handed-back tensor, stashed in a global as well, is kept with it: the whole
/// batch it views is `kept`.
#[test]
fn a_view_stashed_elsewhere_is_kept_with_what_is_handed_back() {
    let _serial = common::serial();
    let (row, r) = scope(strict("view stash"), || {
        let batch = floats(1000).reshape([10, 100]);
        SINK.lock().unwrap().push(batch.select(0, 1));
        batch.select(0, 0)
    })
    .unwrap();
    assert!(r.is_clean(), "{r}");
    assert_eq!(r.kept, block(4000), "{r}");
    drop(row);
    SINK.lock().unwrap().clear();
}

static MEAN: LazyLock<Mutex<Tensor>> = LazyLock::new(|| Mutex::new(floats(3)));
static STD: LazyLock<Mutex<Tensor>> = LazyLock::new(|| {
    let t = floats(3);
    gpu_scope::keep_forever(&t);
    Mutex::new(t)
});

/// A lazily initialised global first touched inside a scope allocates there: the scope reports
/// it escaped, later scopes are clean; one whose initialiser gives its tensors to
/// `keep_forever` is clean from the first.
#[test]
fn a_lazy_global_first_touched_in_a_scope_escapes_unless_kept_forever() {
    let touch = |global: &'static LazyLock<Mutex<Tensor>>| {
        scope(strict("lazy global"), || {
            drop(global.lock().unwrap().shallow_clone())
        })
        .map(|(_, r)| r)
    };
    let r = common::escaped(touch(&MEAN));
    assert_eq!(r.escaped_bytes, block(12), "{r}");
    assert!(touch(&MEAN).unwrap().is_clean());
    let r = touch(&STD).unwrap();
    assert!(r.is_clean(), "{r}");
    assert_eq!(r.held_by(HeldBy::KeptForever), block(12), "{r}");
}

/// A TorchScript model loaded before the scope and converted in it (`to`) has its parameters
/// and buffers made there: its buffers are private, so memory nothing else keeps is `not
/// inspected`, as for a model loaded in the scope.
#[test]
fn a_torchscript_model_converted_in_the_scope_is_not_inspected() {
    let _serial = common::serial();
    let mut model = tch::CModule::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/linear_bn.pt"
    ))
    .unwrap();
    let scope = gpu_scope::Scope::enter(strict("convert")).unwrap();
    model.to(Device::Cpu, Kind::Double, false);
    SINK.lock().unwrap().push(floats(5));
    let r = scope.exit(&model).unwrap();
    assert_eq!(r.escaped_bytes, 0, "{r}");
    assert!(r.held_by(HeldBy::Uninspected) >= block(20), "{r}");
    assert_eq!(r.uninspected_kept, ["tch::CModule"], "{r}");
    SINK.lock().unwrap().clear();
}

/// Under QNNPACK, quantized tensors come from libtorch's mobile CPU allocator, which no scope
/// sees; under FBGEMM the same leak is reported. (The test leaves the engine at FBGEMM: tch
/// cannot read the engine it found.)
#[test]
fn quantized_tensors_under_qnnpack_are_not_counted() {
    static QUANTIZED: Mutex<Vec<Tensor>> = Mutex::new(Vec::new());
    let leak = || {
        scope(strict("quantize"), || {
            let x = Tensor::ones([1024], (Kind::Float, Device::Cpu));
            QUANTIZED
                .lock()
                .unwrap()
                .push(x.quantize_per_tensor(0.1, 0, Kind::QInt8));
        })
    };
    if tch::QEngine::FBGEMM.set().is_err() {
        println!("skipped: this libtorch has no FBGEMM engine to compare with");
        return;
    }
    match leak() {
        Err(Error::Escaped(r)) => assert_eq!(r.escaped_bytes, block(1024), "{r}"),
        other => panic!("FBGEMM: expected the escape, got {other:?}"),
    }
    if tch::QEngine::QNNPACK.set().is_err() {
        println!("skipped the QNNPACK half: this libtorch has no QNNPACK");
        return;
    }
    let unseen = leak();
    tch::QEngine::FBGEMM.set().unwrap();
    let (_, r) = unseen.unwrap();
    assert_eq!(r.allocated, block(4096), "only the float tensor: {r}");
    QUANTIZED.lock().unwrap().clear();
}
