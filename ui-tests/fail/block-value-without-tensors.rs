struct Tokenizer;

fn main() {
    let _t = gpu_scope::scope!({
        let t = Tokenizer;
        t
    });
}
