struct Tokenizer;

fn main() {
    let cache: Vec<Tokenizer> = Vec::new();
    let n = gpu_scope::scope!(keep = [cache], { 1 });
    let _ = n;
}
