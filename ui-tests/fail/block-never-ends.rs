fn forever() -> ! {
    gpu_scope::scope!({ loop {} })
}

fn main() {
    forever()
}
