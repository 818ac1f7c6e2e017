// A block may end in a `loop` that a `break` ends: one in a macro the scope cannot look into,
// one naming the loop's label from a loop inside it, one without a label.
macro_rules! break_if {
    ($done:expr) => {
        if $done {
            break;
        }
    };
}

macro_rules! break_to {
    ($label:lifetime, $value:expr) => {
        break $label $value
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
    // A `break` in a `for` loop's iterator ends the loop around it.
    let mut queue = vec![vec![1], vec![2]];
    let mut seen = 0;
    gpu_scope::scope!({
        loop {
            for x in match queue.pop() {
                Some(batch) => batch,
                None => break,
            } {
                seen += x;
            }
        }
    });
    // A macro in a nested loop that is given the loop's label.
    let to_label = gpu_scope::scope!({
        'found: loop {
            for i in 0..3 {
                break_to!('found, i);
            }
        }
    });
    assert_eq!((labelled, plain, seen, to_label), (2, 3, 3, 0));
}
