//! Procedural macros of `gpu-scope`. Use them through the `gpu-scope` crate, which documents
//! them on its re-exports. Each macro parses its input into typed values (`input.rs`,
//! `options.rs`), validates them in one pass (`valid.rs`), then expands (`expand_*.rs`).
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

// Documented on its re-export, `gpu_scope::gpu_scope`.
#[proc_macro_attribute]
pub fn gpu_scope(args: TokenStream, item: TokenStream) -> TokenStream {
    let original = proc_macro2::TokenStream::from(item.clone());
    match expand_fn::expand(args.into(), item.into()) {
        Ok(tokens) => tokens.into(),
        // Emit the item untouched beside the error, so that only the error shows.
        Err(e) => {
            let mut out = e.into_compile_error();
            out.extend(original);
            out.into()
        }
    }
}

// Documented on its re-export, `gpu_scope::scope!`.
#[proc_macro]
pub fn scope(input: TokenStream) -> TokenStream {
    expand_block::expand(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

// Documented on its re-export, `gpu_scope::Tensors`.
#[proc_macro_derive(Tensors, attributes(tensors))]
pub fn derive_tensors(input: TokenStream) -> TokenStream {
    derive::expand(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
