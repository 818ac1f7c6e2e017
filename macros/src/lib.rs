//! Procedural macros of `gpu-scope`. Use them through the `gpu-scope` crate.
use proc_macro::TokenStream;

#[proc_macro_attribute]
pub fn gpu_scope(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
