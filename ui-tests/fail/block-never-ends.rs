#![allow(unused_labels, unused_macros)] // the refused blocks expand to nothing
fn first(n: u32) -> Result<u32, ()> {
    if n == 0 {
        gpu_scope::scope!({ return Ok(1) });
    }
    Ok(n)
}

fn each(items: &[u32]) -> u32 {
    for _ in items {
        gpu_scope::scope!({
            let _ = 1;
            continue;
        });
    }
    0
}

fn forever() -> ! {
    gpu_scope::scope!({ loop {} })
}

// Its `break`s leave a loop inside it, or a loop around the `scope!`: never the loop itself.
fn batches(items: &[u32]) -> u32 {
    'batches: for _ in items {
        let _: () = gpu_scope::scope!({
            loop {
                for _ in 0..2 {
                    break;
                }
                if items.is_empty() {
                    break 'batches;
                }
                println!("{}", items.len());
            }
        });
    }
    0
}

macro_rules! info {
    ($($t:tt)*) => { println!($($t)*) };
}

macro_rules! break_if {
    ($done:expr) => {
        if $done {
            break;
        }
    };
}

// A logging macro holds no `break`; one in a nested loop ends that loop.
fn logged(items: &[u32]) {
    let _: () = gpu_scope::scope!({
        loop {
            info!("{}", items.len());
            for _ in items {
                break_if!(items.is_empty());
            }
        }
    });
}

fn main() {
    let _ = (first(0), each(&[1]), batches(&[1]), logged(&[1]));
    forever()
}
