#[derive(gpu_scope::Tensors)]
union Bits {
    a: u32,
    b: f32,
}

fn main() {
    let _ = Bits { a: 1 };
}
