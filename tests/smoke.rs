use gpu_scope::{EscapePolicy, Scope, ScopeOptions};
use tch::{Device, Kind, Tensor};

#[test]
fn tensor_value_through_tch() {
    let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0]) * 2;
    assert_eq!(Vec::<f32>::try_from(&t).unwrap(), vec![2.0, 4.0, 6.0]);
}

#[test]
fn smoke() {
    let scope = Scope::enter(ScopeOptions::new("s").on_escape(EscapePolicy::Error)).unwrap();
    let a = Tensor::zeros([256, 256], (Kind::Float, Device::Cpu));
    let b = &a + 1;
    drop(a);
    let r = scope.exit(&b).unwrap();
    println!("{r}");
    assert_eq!(r.kept, 256 * 256 * 4);
    assert_eq!(r.freed, 256 * 256 * 4 + 12, "{r}");
}
