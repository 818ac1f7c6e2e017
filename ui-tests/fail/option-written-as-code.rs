// Options that take a bare word, written as code: the error says so and what to do instead
// (a policy read at run time, one word of the docs' `a | b` notation).
use gpu_scope::{gpu_scope, EscapePolicy};

struct Config {
    policy: EscapePolicy,
}

#[gpu_scope(on_escape = config.policy)]
fn from_config(config: &Config) {
    let _ = config.policy;
}

#[gpu_scope(release = outermost | always)]
fn choice() {}

fn main() {
    from_config(&Config { policy: EscapePolicy::Warn });
    choice();
}
