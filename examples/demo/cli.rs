//! The command line's checks that need no libtorch; `tests/demo.rs` runs them too.

/// The arguments with each `--flag=value` split into `--flag` and `value`, so that both
/// spellings work.
pub fn split_values(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut split = Vec::new();
    for arg in args {
        match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                split.extend([flag.to_string(), value.to_string()]);
            }
            _ => split.push(arg),
        }
    }
    split
}

/// A whole number of at least 1 for `flag`.
pub fn count(flag: &str, value: &str) -> Result<usize, String> {
    let too_large = || {
        Err(format!(
            "{flag} {value} is too large: give at most {}",
            i64::MAX
        ))
    };
    match value.parse::<u64>() {
        Ok(n) if n >= 1 && i64::try_from(n).is_ok() => Ok(n as usize),
        Ok(n) if n >= 1 => too_large(),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => too_large(),
        _ => Err(format!(
            "{flag} needs a whole number of at least 1, not `{value}`"
        )),
    }
}

/// What libtorch says when an allocation fails (on the CPU or on CUDA), or when its size does
/// not even fit in 64 bits, without its C++ frames.
pub fn out_of_memory(message: &str) -> Option<&str> {
    let at = [
        "can't allocate memory",
        "out of memory",
        "Storage size calculation overflowed",
    ]
    .iter()
    .find_map(|sign| message.find(sign))?;
    // The frames follow the first line (its `\n` escaped, as tch's error prints it).
    message[at..].split(['\n', '\\', '"']).next()
}
