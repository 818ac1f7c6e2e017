struct Tokenizer {
    vocab: Vec<String>,
}

#[gpu_scope::gpu_scope]
fn load() -> Tokenizer {
    Tokenizer { vocab: Vec::new() }
}

fn main() {
    let _ = load().vocab;
}
