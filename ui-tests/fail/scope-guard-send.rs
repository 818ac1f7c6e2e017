use gpu_scope::{Scope, ScopeOptions};

fn main() {
    let scope = Scope::enter(ScopeOptions::new("here")).unwrap();
    std::thread::spawn(move || {
        let _ = scope.exit(&());
    });
}
