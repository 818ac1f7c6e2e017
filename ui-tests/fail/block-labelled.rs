// A labelled block given to `scope!`: the label goes inside.
fn main() {
    let v = gpu_scope::scope!('found: {
        break 'found 1;
    });
    let _ = v;
}
