// A block may end in a `loop` that a `break` ends: one in a macro the scope cannot look into,
// one naming the loop's label from a loop inside it, one without a label.
macro_rules! break_if {
    ($done:expr) => {
        if $done {
            break;
        }
    };
}

fn main() {
    let mut n = 0;
    gpu_scope::scope!({
        loop {
            n += 1;
            break_if!(n > 2);
        }
    });
    let labelled = gpu_scope::scope!({
        'outer: loop {
            for i in 0..3 {
                if i == 2 {
                    break 'outer i;
                }
            }
        }
    });
    let plain = gpu_scope::scope!({
        loop {
            if n > 0 {
                break n;
            }
        }
    });
    assert_eq!((labelled, plain), (2, 3));
}
