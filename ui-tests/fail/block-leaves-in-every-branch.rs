#![allow(unused_labels, unreachable_code)] // the refused blocks expand to nothing
// Blocks that always leave the `scope!` however they are written: inside an inner block, in
// parentheses, in both branches of an `if`, in every arm of a `match` (some arms panicking), in a
// `let`'s value. A `break` to a labeled block inside the `scope!` stays inside: that one is
// accepted.
fn inner_block(items: &[u32]) {
    for _ in items {
        gpu_scope::scope!({
            {
                break;
            }
        });
    }
}

fn parenthesised() -> u32 {
    gpu_scope::scope!({
        let _x = 1;
        (return 5)
    })
}

fn both_branches(n: u32) -> u32 {
    gpu_scope::scope!({
        if n > 1 {
            return 1;
        } else {
            return 2;
        }
    })
}

fn every_arm(n: u32) -> u32 {
    gpu_scope::scope!({
        match n {
            0 => return 0,
            _ => return 1,
        }
    })
}

fn leaves_or_panics(n: u32) -> u32 {
    gpu_scope::scope!({
        match n {
            0 => todo!(),
            1 => return 1,
            _ => panic!("no"),
        }
    })
}

fn in_a_let(n: u32) -> u32 {
    gpu_scope::scope!({
        let _x: () = return n;
    })
}

// A statement under `#[cfg]` is taken as there where it is the last (nothing follows it).
fn last_under_cfg(n: u32) -> u32 {
    gpu_scope::scope!({
        #[cfg(any())]
        return n;
        #[cfg(all())]
        return n + 1;
    })
}

fn labeled_block_stays_inside(n: u32) -> u32 {
    gpu_scope::scope!({
        let value = 'found: {
            if n > 1 {
                break 'found n;
            }
            break 'found 0;
        };
        value
    })
}

fn main() {
    inner_block(&[1]);
    let _ = (parenthesised(), both_branches(1), every_arm(1), leaves_or_panics(1));
    let _ = (in_a_let(1), last_under_cfg(1));
    let _ = labeled_block_stays_inside(2);
}
