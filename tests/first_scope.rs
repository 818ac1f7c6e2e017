//! A tensor made before the process's first scope keeps the allocator it was made with: grown
//! inside a scope (`resize_`), its new block is still seen. (Its own test binary: nothing may
//! open a scope before.)
use gpu_scope::{Error, EscapePolicy, Scope, ScopeOptions};
use std::sync::Mutex;
use tch::{Device, Kind, Tensor};

static SCRATCH: Mutex<Option<Tensor>> = Mutex::new(None);

#[test]
fn a_tensor_made_before_any_scope_and_grown_inside_one_is_seen() {
    *SCRATCH.lock().unwrap() = Some(Tensor::zeros([10], (Kind::Float, Device::Cpu)));
    let scope = Scope::enter(ScopeOptions::new("grow").on_escape(EscapePolicy::Error)).unwrap();
    let _ = SCRATCH.lock().unwrap().as_mut().unwrap().resize_([20_000]);
    let report = match scope.exit(&()) {
        Err(Error::Escaped(report)) => report,
        other => panic!("the grown block escaped into a static: {other:?}"),
    };
    assert_eq!(report.escaped.len(), 1, "{report}");
    assert_eq!(report.escaped[0].bytes, 80_000, "{report}");
    *SCRATCH.lock().unwrap() = None;
}
