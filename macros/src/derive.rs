//! `#[derive(Tensors)]`: a struct or enum owns the tensors of its fields.
use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Field, Fields};

/// Whether a field carries `#[tensors(skip)]`; any other `tensors` attribute is an error.
fn skipped(field: &Field) -> syn::Result<bool> {
    let mut skip = false;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("tensors")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                skip = true;
                Ok(())
            } else {
                Err(meta.error("unknown `tensors` attribute; the only one is `#[tensors(skip)]`"))
            }
        })?;
    }
    Ok(skip)
}

/// Binds each visited field of `fields` and returns the pattern and the visit statements.
fn visit_fields(fields: &Fields) -> syn::Result<(TokenStream, TokenStream)> {
    let mut binds = Vec::new();
    let mut visits = Vec::new();
    for (i, field) in fields.iter().enumerate() {
        let member = match &field.ident {
            Some(name) => quote!(#name),
            None => {
                let index = syn::Index::from(i);
                quote!(#index)
            }
        };
        if skipped(field)? {
            continue;
        }
        let var = format_ident!("__gpu_scope_f{}", i);
        let ty = &field.ty;
        binds.push(quote!(#member: #var));
        visits.push(quote_spanned! {ty.span()=>
            <#ty as ::gpu_scope::__private::Tensors>::visit(#var, __gpu_scope_set);
        });
    }
    Ok((quote!({ #(#binds,)* .. }), quote!(#(#visits)*)))
}

/// Input: `#[derive(Tensors)] struct M<T> { a: T, #[tensors(skip)] n: String }`
/// Output: `impl<T: Tensors> Tensors for M<T> { fn visit(&self, set) { match self { M { a, .. } => a.visit(set) } } }`
pub(crate) fn expand(input: TokenStream) -> syn::Result<TokenStream> {
    let input: DeriveInput = syn::parse2(input)?;
    let name = &input.ident;
    let arms =
        match &input.data {
            Data::Struct(s) => {
                let (pattern, visits) = visit_fields(&s.fields)?;
                vec![quote!(#name #pattern => { #visits })]
            }
            Data::Enum(e) => e
                .variants
                .iter()
                .map(|v| {
                    let variant = &v.ident;
                    let (pattern, visits) = visit_fields(&v.fields)?;
                    Ok(quote!(#name::#variant #pattern => { #visits }))
                })
                .collect::<syn::Result<_>>()?,
            Data::Union(u) => return Err(syn::Error::new(
                u.union_token.span,
                "`Tensors` cannot be derived for a union: gpu-scope cannot tell which field is \
                 live; implement `gpu_scope::Tensors` by hand",
            )),
        };
    let mut generics = input.generics.clone();
    for param in generics.type_params_mut() {
        param
            .bounds
            .push(syn::parse_quote!(::gpu_scope::__private::Tensors));
    }
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics ::gpu_scope::__private::Tensors for #name #ty_generics #where_clause {
            #[allow(unused_variables)]
            fn visit(&self, __gpu_scope_set: &mut ::gpu_scope::__private::StorageSet) {
                #[allow(unreachable_patterns)]
                match self {
                    #(#arms)*
                    _ => {}
                }
            }
        }
    })
}
