// Options written as code that does not mean what it says: the error says so and what to do
// instead (a policy read at run time, one word of the docs' `a | b` notation, `^` for a power).
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

#[gpu_scope(keep_grad = true | false)]
fn either() {}

#[gpu_scope(max_peak = 2^30)]
fn power() {}

fn main() {
    from_config(&Config { policy: EscapePolicy::Warn });
    choice();
    either();
    power();
}
