//! What a user's binary sees: the device backend gpu-scope loaded, then scopes through the
//! attribute and the block, from a crate that is not gpu-scope's and names it `gs` (a renamed
//! dependency, with no `::gpu_scope` here: the macros find the name in Cargo.toml, and
//! `crate = gs` says it too).
use gs::{gpu_scope, Error, Tensors};
use tch::{Device, Kind, Tensor};

#[derive(Tensors)]
struct Sums {
    total: Tensor,
}

#[derive(Tensors)]
#[tensors(crate = gs)]
struct Told {
    sums: Sums,
}

#[gpu_scope(on_escape = error)]
fn total(n: i64, device: Device) -> Result<Sums, Error> {
    let ones = Tensor::ones([n], (Kind::Float, device));
    Ok(Sums {
        total: ones.sum(Kind::Float),
    })
}

#[gpu_scope(crate = gs, on_escape = error)]
fn told(sums: Sums) -> Result<Told, Error> {
    Ok(Told { sums })
}

fn main() -> Result<(), Error> {
    println!("{}", gs::versions());
    let info = gs::device_info();
    println!("{info:?}");
    let device = Device::cuda_if_available();
    let sums = total(1024, device)?;
    let report = gs::last_report().expect("the scope reported");
    println!("{report}");
    assert_eq!(sums.total.double_value(&[]), 1024.0);
    assert!(report.is_clean() && report.kept > 0, "{report}");
    let told = told(sums)?;
    assert!(gs::last_report().is_some_and(|r| r.is_clean()));
    let leaked = gs::scope!(on_escape = error, {
        Box::leak(Box::new(Tensor::ones([256], (Kind::Float, device))));
    });
    let escaped = gs::last_report().expect("the block reported").escaped.len();
    assert!(matches!(leaked, Err(Error::Escaped(_))) && escaped == 1, "{leaked:?}");
    let again = gs::scope!(crate = gs, { told.sums.total.shallow_clone() });
    assert_eq!(again.double_value(&[]), 1024.0);
    println!("downstream: OK on {device:?}");
    Ok(())
}
