//! `#[derive(Tensors)]`: a struct or enum owns the tensors of its fields.
use crate::options::{crate_path, private};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, Data, DeriveInput, Fields, LitBool, Token};

const ONLY_SKIP: &str = "the only `tensors` attribute is `#[tensors(skip)]` (or `skip = true | \
false`), on a field or an enum variant that holds no tensors";

/// Whether `attrs` mark their field or variant `#[tensors(skip)]`; any other `tensors`
/// attribute is an error at its token.
fn skipped(attrs: &[Attribute]) -> syn::Result<bool> {
    let skip = tensors_option(attrs, "skip", ONLY_SKIP, |meta| {
        if !meta.input.peek(Token![=]) {
            return Ok(true);
        }
        let value: LitBool = meta.value()?.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "write `#[tensors(skip)]` or `skip = true | false`",
            )
        })?;
        Ok(value.value)
    })?;
    Ok(skip.unwrap_or(false))
}

/// The value of `key`, the one option the `tensors` attributes in `attrs` may give there
/// (`value` reads it); another option, `key` given twice, or an empty `#[tensors()]` (nothing
/// to honour, and nothing to say it was ignored) is an error that says `only`.
fn tensors_option<T>(
    attrs: &[Attribute],
    key: &str,
    only: &str,
    mut value: impl FnMut(&syn::meta::ParseNestedMeta) -> syn::Result<T>,
) -> syn::Result<Option<T>> {
    let mut given = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("tensors")) {
        let mut said = false;
        attr.parse_nested_meta(|meta| {
            said = true;
            if !meta.path.is_ident(key) {
                return Err(meta.error(only));
            }
            if given.is_some() {
                return Err(meta.error(format!("`{key}` is given twice; keep one")));
            }
            given = Some(value(&meta)?);
            Ok(())
        })?;
        if !said {
            return Err(syn::Error::new_spanned(attr, only));
        }
    }
    Ok(given)
}

/// The `crate = path` of a `tensors` attribute on the type itself; any other is an error: what
/// to skip is said per field.
fn on_the_type(attrs: &[Attribute]) -> syn::Result<Option<syn::Path>> {
    // `#[repr(packed)]`, `#[repr(C, packed(2))]`: its fields cannot be borrowed in place.
    let packed = attrs
        .iter()
        .filter(|a| a.path().is_ident("repr"))
        .find(|a| {
            let mut packed = false;
            let _ = a.parse_nested_meta(|m| {
                packed |= m.path.is_ident("packed");
                // `packed(2)`, `align(8)`: the argument is not needed.
                let _ = m.input.parse::<proc_macro2::Group>();
                Ok(())
            });
            packed
        });
    if let Some(attr) = packed {
        return Err(syn::Error::new_spanned(
            attr,
            "`Tensors` cannot be derived for a `#[repr(packed)]` type: its fields may be \
             unaligned and cannot be borrowed in place; implement `gpu_scope::Tensors` by hand",
        ));
    }
    // `#[tensors(crate = path)]`: where gpu-scope is found (a re-export).
    tensors_option(attrs, "crate", ON_THE_TYPE, |meta| {
        crate_path(meta.value()?)
    })
}

const ON_THE_TYPE: &str = "`#[tensors(skip)]` goes on a field or an enum variant, not on the \
type: mark each field that holds no tensors `#[tensors(skip)]`, or implement `gpu_scope::Tensors` \
by hand with an empty `visit`; on the type, `#[tensors(...)]` only takes `crate = path` (where \
a crate re-exports gpu-scope)";

/// Binds each visited field of `fields` and returns the pattern and the visit statements.
fn visit_fields(
    fields: &Fields,
    set: &syn::Ident,
    krate: Option<&syn::Path>,
) -> syn::Result<(TokenStream, TokenStream)> {
    let span = Span::mixed_site();
    let mut binds = Vec::new();
    let mut visits = Vec::new();
    for (i, field) in fields.iter().enumerate() {
        if skipped(&field.attrs)? {
            continue;
        }
        let member = match &field.ident {
            Some(name) => quote!(#name),
            None => {
                let index = syn::Index::from(i);
                quote!(#index)
            }
        };
        let var = format_ident!("__gpu_scope_f{}", i, span = span);
        let ty = &field.ty;
        let private = private(krate, ty.span());
        binds.push(quote!(#member: #var));
        visits.push(quote_spanned! {ty.span()=>
            <#ty as #private::Tensors>::visit(#var, #set);
        });
    }
    Ok((quote!({ #(#binds,)* .. }), quote!(#(#visits)*)))
}

/// What the types of the visited fields need to be `Tensors`: the type parameters they name
/// (all of them when such a type is a macro call, whose tokens cannot be read as a type), and
/// the associated types they name (`T::Item`, `<T as Trait>::Item`: the bound goes there, not
/// on `T`). A map's key type is not searched, so it needs nothing (`searched_arguments`).
#[derive(Default)]
struct Needs {
    params: Vec<syn::Ident>,
    associated: Vec<syn::Type>,
}

impl Needs {
    fn associated(&mut self, ty: syn::Type) {
        let same = |t: &syn::Type| quote!(#t).to_string() == quote!(#ty).to_string();
        if !self.associated.iter().any(same) {
            self.associated.push(ty);
        }
    }
}

/// Which generic arguments of a standard type its `Tensors` impl searches, where that is not
/// all of them: a `HashMap`'s or `BTreeMap`'s value (not the key or the hasher), a `HashSet`'s
/// element (not the hasher), a `Result`'s `Ok` value (not the error), none of a `Cell`'s (a
/// `Copy` value, written with its path: a bare `Cell` is often a type of one's own, an RNN's)
/// or a `PhantomData`'s. Matched by the usual paths to the type, so a renamed or aliased one
/// asks for every argument, and a type of one's own named so asks for fewer.
fn searched_arguments(path: &syn::Path) -> Option<(&GenericArguments, &'static [usize])> {
    let names: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let searched: &[usize] = match names[..] {
        ["HashMap" | "BTreeMap"]
        | ["hash_map", "HashMap"]
        | ["btree_map", "BTreeMap"]
        | ["collections", "HashMap" | "BTreeMap"]
        | ["collections", "hash_map", "HashMap"]
        | ["collections", "btree_map", "BTreeMap"]
        | ["std", "collections", "HashMap" | "BTreeMap"]
        | ["std", "collections", "hash_map", "HashMap"]
        | ["std" | "alloc", "collections", "btree_map", "BTreeMap"]
        | ["alloc", "collections", "BTreeMap"] => &[1],
        ["HashSet"]
        | ["hash_set", "HashSet"]
        | ["collections", "HashSet"]
        | ["collections", "hash_set", "HashSet"]
        | ["std", "collections", "HashSet"]
        | ["std", "collections", "hash_set", "HashSet"]
        | ["Result"]
        | ["result", "Result"]
        | ["std" | "core", "result", "Result"] => &[0],
        _ if is_std_cell(path) => &[],
        ["PhantomData"] | ["marker", "PhantomData"] | ["std" | "core", "marker", "PhantomData"] => {
            &[]
        }
        _ => return None,
    };
    match &path.segments.last()?.arguments {
        syn::PathArguments::AngleBracketed(args) => Some((&args.args, searched)),
        _ => None,
    }
}

/// `std::cell::Cell` written with its path (a bare `Cell` is often a type of one's own).
fn is_std_cell(path: &syn::Path) -> bool {
    let names: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    matches!(
        names[..],
        ["cell", "Cell"] | ["std" | "core", "cell", "Cell"]
    )
}

type GenericArguments = syn::punctuated::Punctuated<syn::GenericArgument, Token![,]>;

fn visited_params(input: &DeriveInput) -> syn::Result<Needs> {
    struct Names<'a>(&'a [syn::Ident], Needs);
    impl syn::visit::Visit<'_> for Names<'_> {
        fn visit_macro(&mut self, _: &syn::Macro) {
            self.1.params = self.0.to_vec();
        }
        fn visit_path(&mut self, path: &syn::Path) {
            if let Some((args, searched)) = searched_arguments(path) {
                // Only what is searched needs `Tensors` (a map's values, not its keys).
                return args
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| searched.contains(i))
                    .for_each(|(_, a)| self.visit_generic_argument(a));
            }
            let first = path.segments.first().map(|s| &s.ident);
            if let Some(first) = first.filter(|f| self.0.contains(f)) {
                if path.segments.len() > 1 {
                    self.1.associated(syn::parse_quote!(#path));
                } else if !self.1.params.contains(first) {
                    self.1.params.push(first.clone());
                }
            }
            syn::visit::visit_path(self, path);
        }
        fn visit_type_path(&mut self, ty: &syn::TypePath) {
            // `<T as Trait>::Item` naming a parameter: the bound goes on the whole type.
            fn names(params: &[syn::Ident], tokens: TokenStream) -> bool {
                tokens.into_iter().any(|tt| match tt {
                    proc_macro2::TokenTree::Ident(i) => params.contains(&i),
                    proc_macro2::TokenTree::Group(g) => names(params, g.stream()),
                    _ => false,
                })
            }
            let qself = ty.qself.as_ref().map(|q| q.ty.as_ref());
            match qself {
                Some(q) if names(self.0, quote!(#q)) => {
                    self.1.associated(syn::Type::Path(ty.clone()))
                }
                // A `Cell`'s impl asks its value to be `Copy`: the bound goes on the cell.
                None if is_std_cell(&ty.path) && names(self.0, quote!(#ty)) => {
                    self.1.associated(syn::Type::Path(ty.clone()))
                }
                _ => syn::visit::visit_type_path(self, ty),
            }
        }
    }
    let params: Vec<syn::Ident> = input
        .generics
        .type_params()
        .map(|p| p.ident.clone())
        .collect();
    let fields: Vec<&Fields> = match &input.data {
        Data::Struct(s) => vec![&s.fields],
        Data::Enum(e) => {
            let mut visited = Vec::new();
            for v in &e.variants {
                if !skipped(&v.attrs)? {
                    visited.push(&v.fields);
                }
            }
            visited
        }
        Data::Union(_) => vec![],
    };
    let mut names = Names(&params, Needs::default());
    for field in fields.into_iter().flatten() {
        if !skipped(&field.attrs)? {
            syn::visit::Visit::visit_type(&mut names, &field.ty);
        }
    }
    Ok(names.1)
}

/// Input: `#[derive(Tensors)] struct M<T> { a: T, #[tensors(skip)] n: String }`
/// Output: `impl<T: Tensors> Tensors for M<T> { fn visit(&self, set) { deeper(set, |set| match self { M { a, .. } => a.visit(set) }) } }`
pub(crate) fn expand(input: TokenStream) -> syn::Result<TokenStream> {
    let input: DeriveInput = syn::parse2(input)?;
    let krate = on_the_type(&input.attrs)?;
    let private = private(krate.as_ref(), Span::call_site());
    let name = &input.ident;
    let set = syn::Ident::new("__gpu_scope_set", Span::mixed_site());
    let arms =
        match &input.data {
            Data::Struct(s) => {
                let (pattern, visits) = visit_fields(&s.fields, &set, krate.as_ref())?;
                vec![quote!(#name #pattern => { #visits })]
            }
            Data::Enum(e) => e
                .variants
                .iter()
                .map(|v| {
                    let variant = &v.ident;
                    let (pattern, visits) = visit_fields(&v.fields, &set, krate.as_ref())?;
                    // `Self::`, ours, so that a variant the user imported is not linted as
                    // qualified needlessly (`unused_qualifications`).
                    Ok(match skipped(&v.attrs)? {
                        true => quote!(Self::#variant { .. } => {}),
                        false => quote!(Self::#variant #pattern => { #visits }),
                    })
                })
                .collect::<syn::Result<_>>()?,
            Data::Union(u) => return Err(syn::Error::new(
                u.union_token.span,
                "`Tensors` cannot be derived for a union: gpu-scope cannot tell which field is \
                 live; implement `gpu_scope::Tensors` by hand",
            )),
        };
    // Only what a visited field's type names is bounded: a type parameter that only skipped
    // fields use (`#[tensors(skip)] meta: T`), or only a map's keys, a `Result`'s error or a
    // `PhantomData`, may be anything.
    let needs = visited_params(&input)?;
    let mut generics = input.generics.clone();
    for param in generics.type_params_mut() {
        if needs.params.contains(&param.ident) {
            param.bounds.push(syn::parse_quote!(#private::Tensors));
        }
    }
    for ty in &needs.associated {
        let bound = syn::parse_quote!(#ty: #private::Tensors);
        generics.make_where_clause().predicates.push(bound);
    }
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    // No lint is allowed where it can be avoided: a crate may `forbid` it.
    let matched = match arms.is_empty() {
        true => quote!(match *self {}),
        false => quote!(match self { #(#arms)* }),
    };
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics #private::Tensors for #name #ty_generics #where_clause {
            fn visit(&self, #set: &mut #private::StorageSet) {
                #private::deeper(#set, |#set| {
                    // Used even where no field is visited.
                    let _ = &#set;
                    #matched
                })
            }
        }
    })
}
