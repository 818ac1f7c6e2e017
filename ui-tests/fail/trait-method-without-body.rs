trait Model {
    #[gpu_scope::gpu_scope]
    fn forward(&self);
}

fn main() {}
