struct Model;

#[gpu_scope::gpu_scope]
impl Model {
    fn run(&self) {}
}

fn main() {
    Model.run();
}
