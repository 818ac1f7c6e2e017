//! `crate = path`: the generated code names gpu-scope only through the path given, in every
//! form each macro expands to (a renamed dependency has no `::gpu_scope` to fall back on).
use crate::{derive, expand_block, expand_fn};
use proc_macro2::{TokenStream, TokenTree};

fn tokens(text: &str) -> TokenStream {
    text.parse().expect("test input lexes")
}

/// The identifiers `gpu_scope` in `stream`, at any depth, and whether `gs` names `__private`.
fn names(stream: TokenStream) -> (usize, bool) {
    let (mut gpu_scope, mut through_gs) = (0, false);
    let mut previous = String::new();
    for tree in stream {
        match &tree {
            TokenTree::Group(group) => {
                let (inner, gs) = names(group.stream());
                gpu_scope += inner;
                through_gs |= gs;
            }
            TokenTree::Ident(ident) if ident == "gpu_scope" => gpu_scope += 1,
            TokenTree::Ident(ident) if ident == "__private" => through_gs |= previous == "gs::",
            _ => {}
        }
        previous = match (&tree, previous.as_str()) {
            (TokenTree::Ident(ident), _) if ident == "gs" => "gs".into(),
            (TokenTree::Punct(p), "gs" | "gs:") if p.as_char() == ':' => previous + ":",
            _ => String::new(),
        };
    }
    (gpu_scope, through_gs)
}

fn assert_through_gs(what: &str, expanded: syn::Result<TokenStream>) {
    let expanded = expanded.unwrap_or_else(|e| panic!("{what}: {e}"));
    let (gpu_scope, through_gs) = names(expanded.clone());
    assert!(
        gpu_scope == 0 && through_gs,
        "{what} names `gpu_scope` {gpu_scope} times (through `gs`: {through_gs}):\n{expanded}"
    );
}

#[test]
fn every_form_of_the_attribute_names_only_the_path_given() {
    let items = [
        "fn f(a: &Tensor, b: &mut Vec<Tensor>, c: Option<&mut Tensor>, d: Arc<Cache>, e: Tensor) \
         -> Tensor { e }",
        "fn f(&self, x: &Tensor) -> impl Fn() -> u32 { || 1 }",
        "async fn f(x: Tensor) -> Tensor { x }",
        "fn f() -> ! { loop {} }",
        "async fn f() -> ! { loop {} }",
    ];
    let options = [
        "crate = gs",
        "crate = \"gs\"",
        "name = self.name(), max_peak = limit, device = Device::Cpu, keep_grad, crate = gs, \
         release = \"1 GiB\"",
        "crate = gs, max_peak = 8 * 1024",
    ];
    let error = (
        "crate = gs, on_escape = error",
        "fn f() -> Result<Tensor, E> { todo!() }",
    );
    let all = items
        .iter()
        .flat_map(|item| options.iter().map(move |args| (*args, *item)));
    for (args, item) in all.chain([error]) {
        {
            let (args, item) = (tokens(args), tokens(item));
            let what = format!("#[gpu_scope({args})] {item}");
            assert_through_gs(&what, expand_fn::expand(args, item));
        }
    }
}

#[test]
fn every_form_of_the_block_names_only_the_path_given() {
    for input in [
        "crate = gs, { 1 }",
        "crate = gs, keep = [cache], name = format!(\"{i}\"), { 1 }",
        "crate = gs, on_escape = error, keep = [cache], { 1 }",
        "crate = gs, { panic!() }",
    ] {
        assert_through_gs(input, expand_block::expand(tokens(input)));
    }
}

#[test]
fn the_derive_names_only_the_path_given() {
    for input in [
        "#[tensors(crate = gs)] struct S<T: Iterator> { a: T, b: T::Item, c: Vec<Tensor> }",
        "#[tensors(crate = \"gs\")] enum E<T> { A(T), #[tensors(skip)] B(u8), C { t: Tensor } }",
    ] {
        assert_through_gs(input, derive::expand(tokens(input)));
    }
}
