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

fn main() {
    let _ = (first(0), each(&[1]));
    forever()
}
