//! Hostile input: malformed option lists, items, blocks and derive input never panic the
//! macros, and every error points at the tokens it is about.
use crate::{derive, expand_block, expand_fn};
use proc_macro2::TokenStream;
use proptest::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

fn tokens(text: &str) -> TokenStream {
    text.parse().expect("test input lexes")
}

/// Runs one expansion; a panic fails the test with the input that caused it.
fn expand(
    what: &str,
    input: &str,
    f: impl FnOnce() -> syn::Result<TokenStream>,
) -> Option<syn::Error> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.err(),
        Err(_) => panic!("{what} panicked on `{input}`"),
    }
}

fn attribute(args: &str, item: &str) -> Option<syn::Error> {
    expand("#[gpu_scope]", args, || {
        expand_fn::expand(tokens(args), tokens(item))
    })
}

fn block(input: &str) -> Option<syn::Error> {
    expand("scope!", input, || expand_block::expand(tokens(input)))
}

fn derive(input: &str) -> Option<syn::Error> {
    expand("derive(Tensors)", input, || derive::expand(tokens(input)))
}

/// What is wrong with the error for `input`: none, a message without `says`, or a span that does
/// not cover `at` (`None`: the input ended early and the error is on the macro call itself).
fn check_error(
    err: Option<syn::Error>,
    input: &str,
    at: Option<&str>,
    says: &str,
) -> Option<String> {
    let Some(err) = err else {
        return Some(format!("`{input}` was accepted"));
    };
    let message = err.to_string();
    let span = err.span().source_text();
    (!message.contains(says) || span.as_deref() != at || err.to_compile_error().is_empty())
        .then(|| format!("`{input}`: {message:?} at {span:?}; wanted {says:?} at {at:?}"))
}

/// Checks a table of `(input, offending tokens, words of the message)`.
fn table(cases: &[(&str, Option<&str>, &str)], run: impl Fn(&str) -> Option<syn::Error>) {
    let wrong: Vec<String> = cases
        .iter()
        .filter_map(|&(input, at, says)| check_error(run(input), input, at, says))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

const ITEM: &str = "fn f() -> u32 { 1 }";

#[test]
fn malformed_attribute_options() {
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("bogus", Some("bogus"), "unknown option `bogus`"),
        ("crate", Some("crate"), "option `crate` needs a value"),
        (
            "crate = 1",
            Some("1"),
            "write the path gpu-scope is found at",
        ),
        (
            "crate = \"a b\"",
            Some("\"a b\""),
            "write the path gpu-scope is found at",
        ),
        (
            "crate = gs, crate = gs",
            Some("crate"),
            "option `crate` is given twice",
        ),
        (
            "name",
            Some("name"),
            "option `name` needs a value: write `name = \"step\"`",
        ),
        (
            "device",
            Some("device"),
            "option `device` needs a value: write `device = tch::Device::Cuda(0)`",
        ),
        (
            "on_escape",
            Some("on_escape"),
            "needs a value: write `on_escape = panic | warn | error | ignore`",
        ),
        ("on_escape =", Some("on_escape"), "needs a value"),
        ("release =, name = \"a\"", Some("release"), "needs a value"),
        ("max_peak", Some("max_peak"), "needs a value"),
        ("keep_grad =", Some("keep_grad"), "needs a value"),
        (
            "name \"x\"",
            Some("\"x\""),
            "expected `=`: write `name = \"step\"`",
        ),
        (
            "device = \"cuda\"",
            Some("\"cuda\""),
            "write `device = tch::Device::Cuda(0)`",
        ),
        (
            "device = 0",
            Some("0"),
            "`device` takes an expression of type `tch::Device`, not a literal",
        ),
        ("max_peak = \"-1 MiB\"", Some("\"-1 MiB\""), "is negative"),
        (
            "max_peak = \"1.5 B\"",
            Some("\"1.5 B\""),
            "not a whole number of bytes",
        ),
        ("name =", Some("name"), "option `name` needs a value"),
        (
            "on_escape = explode",
            Some("explode"),
            "unknown escape policy `explode`",
        ),
        ("on_escape = \"panic\"", Some("\"panic\""), "bare word"),
        (
            "release = sometimes",
            Some("sometimes"),
            "release = { policy }",
        ),
        ("release = 5", Some("5"), "release = outermost"),
        (
            "release = \"12 parsecs\"",
            Some("\"12 parsecs\""),
            "bad size",
        ),
        (
            "release = \"abc\"",
            Some("\"abc\""),
            "or a policy: `release = outermost | always | never`",
        ),
        (
            "max_peak = \"512 mib\"",
            Some("\"512 mib\""),
            "units are case-sensitive: `MiB`",
        ),
        ("max_peak = \"-1 GiB\"", Some("\"-1 GiB\""), "bad size"),
        (
            "max_peak = \"99999999999 TiB\"",
            Some("\"99999999999 TiB\""),
            "bad size",
        ),
        ("max_peak = \"\"", Some("\"\""), "bad size"),
        ("name = \"a\", name = \"b\"", Some("name"), "given twice"),
        ("keep_grad, keep_grad", Some("keep_grad"), "given twice"),
        (
            "name = \"a\" on_escape = warn",
            Some("on_escape"),
            "expected `,`",
        ),
        (", name = \"a\"", Some(","), "unknown option"),
        ("keep = [x]", Some("keep"), "for `scope!` only"),
        ("= 1", Some("="), "unknown option"),
        ("device =", Some("device"), "option `device` needs a value"),
        (
            "keep_grad = \"yes\"",
            Some("\"yes\""),
            "`keep_grad = true | false`",
        ),
        ("keep_grad = 1", Some("1"), "`keep_grad = true | false`"),
        ("keep_grad = ,", Some("keep_grad"), "needs a value"),
        ("max_peak = -1", Some("-1"), "cannot be negative"),
        ("max_peak = (-4096)", Some("(-4096)"), "cannot be negative"),
        ("max_peak = 1 - 2", Some("1 - 2"), "cannot be negative"),
        (
            "max_peak = (1 << 20) - (1 << 21)",
            Some("(1 << 20) - (1 << 21)"),
            "cannot be negative",
        ),
        (
            "max_peak = 1 << 128",
            Some("1 << 128"),
            "a shift by a negative amount or by 128 or more",
        ),
        (
            "max_peak = 4096 / (2 - 2)",
            Some("4096 / (2 - 2)"),
            "a division by zero",
        ),
        ("max_peak = 1.5", Some("1.5"), "whole bytes"),
        (
            "max_peak = 512 mib",
            Some("mib"),
            "a size with a unit is a string: write `max_peak = \"512 MiB\"`",
        ),
        ("name = 42", Some("42"), "a scope's name is a string"),
        (
            "name = b\"x\"",
            Some("b\"x\""),
            "a scope's name is a string",
        ),
    ];
    table(cases, |args| attribute(args, ITEM));
}

#[test]
fn attribute_on_things_that_are_not_functions() {
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("struct S;", Some("struct S;"), "goes on a function"),
        ("impl S {}", Some("impl S {}"), "goes on a function"),
        ("const fn f() {}", Some("const"), "const fn"),
        ("fn", Some("fn"), "goes on a function"),
        ("", None, "goes on a function"),
        (
            "fn f(&self);",
            Some("fn f(&self)"),
            "on the method in the `impl`",
        ),
        (
            "fn f() -> !;",
            Some("fn f() -> !"),
            "on the method in the `impl`",
        ),
    ];
    table(cases, |item| attribute("", item));
}

#[test]
fn bad_options_on_a_bad_item_report_both() {
    let err = attribute("verbose", "struct S;").expect("rejected");
    let messages: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(
        messages[0].contains("unknown option `verbose`"),
        "{messages:?}"
    );
    assert!(messages[1].contains("goes on a function"), "{messages:?}");
}

#[test]
fn every_documented_form_is_accepted() {
    let attributes = [
        "keep_grad = true",
        "keep_grad = false",
        "keep_grad = training",
        "release = cfg.release_policy()",
        "release = gpu_scope::ReleasePolicy::Above(1 << 30)",
        "release = { policy }",
        "release = if big { ReleasePolicy::Always } else { ReleasePolicy::Never }",
        "keep_grad = self.training && !frozen",
        "max_peak = 512 * 1024 * 1024",
        "max_peak = 4 * x.numel()",
        "max_peak = limit as u64",
        "name = self.name.as_str()",
        "name = \"literal\", release = \"1.5 GiB\", device = tch::Device::Cpu",
        "on_escape = error, release = never",
    ];
    let wrong: Vec<_> = attributes
        .iter()
        .filter_map(|args| {
            attribute(args, "fn f(&self) -> Result<(), E> { Ok(()) }")
                .map(|e| (args, e.to_string()))
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:?}");
    let blocks = [
        "{ 1 },",
        "name = \"x\", { 1 },",
        "keep = [self.cache, &x, *y], { 1 }",
        "keep = [a.b[0].0, &mut x, *c.borrow(), (y), &(self.z)], { 1 }",
        "keep = [self.model().cache, s.borrow().cache[0], f().x, m!(s), *m.cache()], { 1 }",
        "keep = [], keep_grad = false, { 1 }",
    ];
    let wrong: Vec<_> = blocks
        .iter()
        .filter_map(|input| block(input).map(|e| (input, e.to_string())))
        .collect();
    assert!(wrong.is_empty(), "{wrong:?}");
}

#[test]
fn malformed_blocks() {
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("", None, "needs a block"),
        ("name = \"x\"", None, "needs a block"),
        ("name = \"x\",", None, "needs a block"),
        ("{ 1 } 2", Some("2"), "nothing may follow"),
        ("{ x.await }", Some("await"), "`.await` inside `scope!`"),
        (
            "keep = x, { 1 }",
            Some("x"),
            "expected a list in square brackets",
        ),
        ("x", Some("x"), "put the code in braces"),
        (
            "name = \"a\", x + 1",
            Some("x + 1"),
            "put the code in braces",
        ),
        ("name = \"a\", keep_grad", None, "needs a block"),
        ("x + 1,", Some("x + 1"), "put the code in braces"),
        (
            "name, { 1 }",
            Some("name"),
            "option `name` needs a value: write `name = \"step\"`",
        ),
        ("on_escape = , { 1 }", Some("on_escape"), "needs a value"),
        ("keep =, { 1 }", Some("keep"), "needs a value"),
        (
            "keep = [c.len()], { 1 }",
            Some("c.len()"),
            "`keep` takes places",
        ),
        (
            "keep = [x, &c.len()], { 1 }",
            Some("&c.len()"),
            "takes places",
        ),
        ("keep = [1], { 1 }", Some("1"), "takes places"),
        (
            "keep = [m.cache()], { 1 }",
            Some("m.cache()"),
            "`*model.cache()`",
        ),
        ("keep = [a + b], { 1 }", Some("a + b"), "takes places"),
        ("keep = [1 +], { 1 }", Some("]"), "expected an expression"),
        ("keep = [], keep = [], { 1 }", Some("keep"), "given twice"),
        (
            "on_escape = never, { 1 }",
            Some("never"),
            "unknown escape policy",
        ),
        ("name = \"x\" { 1 }", Some("{"), "expected `,` between"),
        ("keep_grad { 1 }", Some("{"), "expected `,` between"),
        ("name = 7, { 1 }", Some("7"), "a scope's name is a string"),
    ];
    table(cases, block);
}

#[test]
fn malformed_derive_input() {
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("union U { a: u32 }", Some("union"), "union"),
        ("struct S { #[tensors(bogus)] a: T }", Some("bogus"), "skip"),
        (
            "struct S { #[tensors] a: T }",
            Some("tensors"),
            "#[tensors(...)]",
        ),
        (
            "struct S { #[tensors(skip = 1)] a: T }",
            Some("1"),
            "`skip = true | false`",
        ),
        (
            "struct S { #[tensors(skip, skip)] a: T }",
            Some("skip"),
            "given twice",
        ),
        (
            "#[tensors(skip)] struct S { a: T }",
            Some("skip"),
            "not on the type",
        ),
        (
            "#[tensors(crate = 1)] struct S { a: T }",
            Some("1"),
            "write the path gpu-scope is found at",
        ),
        (
            "#[tensors(crate = gs, crate = gs)] struct S { a: T }",
            Some("crate"),
            "`crate` is given twice",
        ),
        (
            "#[tensors()] struct S { a: T }",
            Some("#[tensors()]"),
            "only takes `crate = path`",
        ),
        (
            "enum E { #[tensors(skip)] A(T), #[tensors(bogus = 1)] B }",
            Some("bogus"),
            "the only `tensors` attribute",
        ),
        (
            "enum E { #[tensors(skip)] A(#[tensors(bogus)] T) }",
            Some("bogus"),
            "the only `tensors` attribute",
        ),
        ("fn f() {}", Some("fn"), "expected"),
    ];
    table(cases, derive);
}

/// Tokens that the option parsers and the block parser react to, and some they must reject;
/// brackets come in pairs so that every soup of them lexes.
#[rustfmt::skip]
const WORDS: &[&str] = &[
    "name", "on_escape", "release", "max_peak", "keep_grad", "device", "keep", "=", ",", ";",
    "\"2 GiB\"", "\"x\"", "\"\"", "\"1e99 TiB\"", "panic", "error", "never", "1", "-", "::",
    "#", "async", "fn", "f", "x", ".await", "[x]", "[]", "[1 +]", "{}", "{ 1 }", "{ x.await }",
    "()", "(x)", "struct", "S", "<", ">", "'a", "&",
];

fn soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(WORDS), 0..14).prop_map(|w| w.join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any soup of these tokens gives an expansion or an error with a message, never a panic;
    /// an error inside the input points at a token of it.
    #[test]
    fn token_soup_never_panics(text in soup()) {
        let errors = [
            attribute(&text, ITEM),
            attribute("", &text),
            block(&text),
            derive(&text),
        ];
        for err in errors.into_iter().flatten() {
            prop_assert!(!err.to_string().is_empty());
            if let Some(at) = err.span().source_text() {
                prop_assert!(text.contains(at.as_str()) || ITEM.contains(at.as_str()), "{at:?} not in {text:?}");
            }
        }
    }

    /// Size strings of any shape parse or fail with a reason; never panic.
    #[test]
    fn any_size_string_is_handled(text in ".{0,24}") {
        let parsed = catch_unwind(|| crate::size::parse_size(&text));
        prop_assert!(parsed.is_ok(), "parse_size panicked on {text:?}");
    }
}

/// A function that uses `async`, `await`, `dyn` or `try` as a name (edition 2015) is found,
/// so that the attribute says it cannot scope it; their uses as keywords and `try!` are not,
/// nor is a function that does not read for another reason.
#[test]
fn edition_2015_names_are_found() {
    use crate::input::name_syn_cannot_read;
    for (item, word) in [
        ("fn f() -> i64 { let async = 1; async }", "async"),
        ("fn f(dyn: i64) -> i64 { dyn + 1 }", "dyn"),
        ("fn f() { let x = (await, 1); }", "await"),
        ("fn f() { g(try); }", "try"),
        ("fn f(x: S) -> i64 { x.dyn + async(1) }", "dyn"),
        ("fn f() { fn async() {} }", "async"),
    ] {
        let found = name_syn_cannot_read(&tokens(item));
        assert_eq!(
            found.map(|w| w.to_string()),
            Some(word.to_owned()),
            "{item}"
        );
    }
    for item in [
        "async fn f(x: Box<dyn Tr>) -> i64 { x.g().await; try!(h()); async move { 1 }.await }",
        "fn f() -> Box<dyn ::core::any::Any> { let async = 1 x; }",
        "fn f() { let x = 1 x; }",
    ] {
        assert!(name_syn_cannot_read(&tokens(item)).is_none(), "{item}");
    }
}
