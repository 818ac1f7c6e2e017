//! Procedural macros of `gpu-scope`. Use them through the `gpu-scope` crate, which re-exports
//! them with these docs (`doc/*.md`). Their examples need `gpu_scope` and libtorch, so they run
//! as that crate's doctests, not this one's (`not(doctest)` below). Each macro parses its input
//! into typed values (`input.rs`, `options.rs`), validates them in one pass (`valid.rs`), then
//! expands (`expand_*.rs`).
#![warn(missing_docs)]
use proc_macro::TokenStream;

mod args;
mod derive;
mod expand_block;
mod expand_fn;
mod expand_options;
mod input;
mod kept;
mod local;
mod options;
mod rename_self;
mod size;
mod types;
mod valid;

#[cfg(test)]
mod hostile_input_tests;
#[cfg(test)]
mod renamed_tests;

#[cfg_attr(not(doctest), doc = include_str!("../doc/gpu_scope.md"))]
#[proc_macro_attribute]
pub fn gpu_scope(args: TokenStream, item: TokenStream) -> TokenStream {
    let original = proc_macro2::TokenStream::from(item.clone());
    match expand_fn::expand(args.into(), item.into()) {
        Ok(tokens) => tokens.into(),
        // A syntax error in the function: rustc reports it in the item given back.
        Err(_) if input::is_broken_fn(&original) => match input::name_syn_cannot_read(&original) {
            // An edition 2015 name: no syntax error for rustc. (`compile_error!` unqualified:
            // `::core` there is a path in the user's crate.)
            Some(word) => {
                let message = format!(
                    "#[gpu_scope] cannot read this function: it uses `{word}` as a name, which \
                     edition 2015 allows; rename it, or write it as a raw identifier \
                     (`r#{word}`)"
                );
                let mut out = quote::quote_spanned!(word.span()=> compile_error! { #message });
                out.extend(original);
                out.into()
            }
            None => original.into(),
        },
        // Emit the item untouched beside the error, so that only the error shows.
        Err(e) => {
            let mut out = e.into_compile_error();
            out.extend(original);
            out.into()
        }
    }
}

#[cfg_attr(not(doctest), doc = include_str!("../doc/scope.md"))]
#[proc_macro]
pub fn scope(input: TokenStream) -> TokenStream {
    expand_block::expand(input.into())
        .unwrap_or_else(|e| {
            // Several `compile_error!`s in a row are no expression: a block holds them all.
            let errors = e.into_compile_error();
            quote::quote!({ #errors })
        })
        .into()
}

#[cfg_attr(not(doctest), doc = include_str!("../doc/tensors.md"))]
#[proc_macro_derive(Tensors, attributes(tensors))]
pub fn derive_tensors(input: TokenStream) -> TokenStream {
    derive::expand(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
