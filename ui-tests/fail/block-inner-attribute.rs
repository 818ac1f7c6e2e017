// A `scope!` block's inner attributes: refused, with where to put them instead.
fn block() -> u32 {
    gpu_scope::scope!({
        #![allow(unused_variables)]
        let x = 1;
        2
    })
}

fn main() {
    let _ = block();
}
