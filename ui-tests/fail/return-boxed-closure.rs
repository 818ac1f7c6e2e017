use tch::Tensor;

#[gpu_scope::gpu_scope]
fn make(w: &Tensor) -> Box<dyn Fn(&Tensor) -> Tensor> {
    let w = w.shallow_clone();
    Box::new(move |x: &Tensor| x * &w)
}

fn main() {
    let w = Tensor::ones([2], (tch::Kind::Float, tch::Device::Cpu));
    let f = make(&w);
    let _ = f(&w);
}
