//! What a user's binary sees: the device backend gpu-scope loaded, then one scope through the
//! attribute (the generated code names `::gpu_scope` from a crate that is not gpu-scope's).
use gpu_scope::{gpu_scope, Error};
use tch::{Device, Kind, Tensor};

#[gpu_scope(on_escape = error)]
fn total(n: i64, device: Device) -> Result<f64, Error> {
    let ones = Tensor::ones([n], (Kind::Float, device));
    Ok(ones.sum(Kind::Float).double_value(&[]))
}

fn main() -> Result<(), Error> {
    println!("{}", gpu_scope::versions());
    let info = gpu_scope::device_info();
    println!("{info:?}");
    let device = Device::cuda_if_available();
    let sum = total(1024, device)?;
    let report = gpu_scope::last_report().expect("the scope reported");
    println!("{report}");
    assert_eq!(sum, 1024.0);
    assert!(report.is_clean() && report.allocated > 0, "{report}");
    println!("downstream: OK on {device:?}");
    Ok(())
}
