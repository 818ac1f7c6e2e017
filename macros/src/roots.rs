//! Generated code that collects the storages of kept values.
use proc_macro2::TokenStream;
use quote::quote;

/// Statements that declare `__gpu_scope_kept` and add each expression's storages to it.
/// Values whose type does not implement `Tensors` are recorded by type name instead
/// (autoref specialisation: `ViaTensors` wins where it applies, else `ViaOpaque`).
pub(crate) fn collect(values: impl IntoIterator<Item = TokenStream>) -> TokenStream {
    let values = values.into_iter();
    quote! {
        let mut __gpu_scope_kept = ::gpu_scope::__private::StorageSet::new();
        #(
            (&::gpu_scope::__private::Root(&#values)).__gpu_scope_visit(&mut __gpu_scope_kept);
        )*
    }
}

/// The `use` that brings the specialisation traits into scope for `collect`.
pub(crate) fn prelude() -> TokenStream {
    quote! {
        #[allow(unused_imports)]
        use ::gpu_scope::__private::{ViaOpaque as _, ViaTensors as _};
    }
}
