// `device` takes one type (`tch::Device`), so a conversion into it infers it.
fn main() {
    let device: tch::Device = tch::Device::Cpu;
    let value = gpu_scope::scope!(device = device.into(), { 1 });
    assert_eq!(value, 1);
}
