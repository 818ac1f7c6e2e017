//! The default name of a `#[gpu_scope]` function: its path as rustc prints it, read once per
//! function from a marker item the macro declares in its body (a proc macro sees neither the
//! `impl` a method is in nor the function a nested one is in).
use std::borrow::Cow;
use std::sync::OnceLock;

/// The marker item's name; the generated code declares `fn __gpu_scope_fn() {}`.
const MARKER: &str = "::__gpu_scope_fn";

/// One function's default name, worked out at its first scope.
#[derive(Debug)]
pub struct FnName(OnceLock<&'static str>);

impl FnName {
    /// Not worked out yet (a `static` per function).
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        FnName(OnceLock::new())
    }

    /// `marker` is `type_name` of the marker item; `fallback` (`module_path::ident`) is used
    /// where rustc's form is not the one expected (its exact text is not a stable guarantee).
    pub fn get(&self, marker: &'static str, fallback: &'static str) -> &'static str {
        // Once per function, so a path rebuilt without generic arguments is leaked.
        self.0.get_or_init(|| match path_of(marker) {
            Some(Cow::Borrowed(path)) => path,
            Some(Cow::Owned(path)) => Box::leak(path.into_boxed_str()),
            None => fallback,
        })
    }
}

/// `krate::Model::forward` from `krate::Model::forward::__gpu_scope_fn`: the marker and
/// closures' `{{closure}}` (an async body's, or one a function is declared in) left out,
/// generic arguments (printed `<_>`) dropped.
fn path_of(marker: &'static str) -> Option<Cow<'static, str>> {
    let mut path = Cow::Borrowed(marker.strip_suffix(MARKER)?);
    if path.contains("::{{closure}}") {
        path = Cow::Owned(path.replace("::{{closure}}", ""));
    }
    if path.is_empty() {
        return None;
    }
    if !path.contains("<_") {
        return Some(path);
    }
    // `krate::Cache<_, _>::get` → `krate::Cache::get`.
    let mut out = String::with_capacity(path.len());
    let mut rest = &*path;
    while let Some(at) = rest.find("<_") {
        out.push_str(&rest[..at]);
        let args = &rest[at..];
        let end = args.find('>')?;
        if args[1..end].split(',').any(|a| a.trim() != "_") {
            return None;
        }
        rest = &args[end + 1..];
    }
    out.push_str(rest);
    Some(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::path_of;

    #[test]
    fn paths_of_functions_methods_and_async_bodies() {
        let cases = [
            ("k::f::__gpu_scope_fn", Some("k::f")),
            (
                "k::m::Model::forward::__gpu_scope_fn",
                Some("k::m::Model::forward"),
            ),
            ("k::Cache<_>::get::__gpu_scope_fn", Some("k::Cache::get")),
            ("k::Pair<_, _>::get::__gpu_scope_fn", Some("k::Pair::get")),
            (
                "<k::M<_> as k::Fw>::fw::__gpu_scope_fn",
                Some("<k::M as k::Fw>::fw"),
            ),
            ("k::outer::inner::__gpu_scope_fn", Some("k::outer::inner")),
            ("k::run::{{closure}}::__gpu_scope_fn", Some("k::run")),
            (
                "k::main::{{closure}}::{{closure}}::helper::__gpu_scope_fn",
                Some("k::main::helper"),
            ),
            ("k::run::{{closure}}::__gpu_scope_fn::extra", None),
            ("__gpu_scope_fn", None),
            ("k::Odd<_, i32>::get::__gpu_scope_fn", None),
        ];
        for (marker, path) in cases {
            assert_eq!(path_of(marker).as_deref(), path, "{marker}");
        }
    }
}
