//! `#[gpu_scope]` on a function.
use crate::options::{FnOptions, Policy};
use crate::roots;
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{FnArg, Item, ItemFn, Pat, ReturnType, Type};

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let options = syn::parse2::<FnOptions>(args);
    let func = match syn::parse2::<Item>(item.clone()) {
        Ok(Item::Fn(func)) => func,
        Ok(other) => return Err(not_a_function(&other.to_token_stream())),
        Err(_) => return Err(not_a_function(&item)),
    };
    let options = options?.0;
    check(&func, options.policy())?;
    Ok(rewrite(func, options))
}

fn not_a_function(item: &TokenStream) -> syn::Error {
    syn::Error::new_spanned(
        item.clone().into_iter().take(3).collect::<TokenStream>(),
        "#[gpu_scope] goes on a function or method with a body; for a block inside a function \
         write `gpu_scope::scope!({ ... })`",
    )
}

fn is_extern(func: &ItemFn) -> bool {
    func.sig
        .abi
        .as_ref()
        .is_some_and(|abi| abi.name.as_ref().is_none_or(|n| n.value() != "Rust"))
}

/// Finds `impl Trait` anywhere in a type.
fn has_impl_trait(ty: &Type) -> bool {
    struct Finder(bool);
    impl Visit<'_> for Finder {
        fn visit_type_impl_trait(&mut self, _: &syn::TypeImplTrait) {
            self.0 = true;
        }
    }
    let mut f = Finder(false);
    f.visit_type(ty);
    f.0
}

/// Whether a type can annotate a closure's return: no `impl Trait`, no elided lifetimes.
fn annotatable(ty: &Type) -> bool {
    struct Finder(bool);
    impl Visit<'_> for Finder {
        fn visit_type_impl_trait(&mut self, _: &syn::TypeImplTrait) {
            self.0 = false;
        }
        fn visit_type_reference(&mut self, r: &syn::TypeReference) {
            if r.lifetime.as_ref().is_none_or(|l| l.ident == "_") {
                self.0 = false;
            }
            syn::visit::visit_type_reference(self, r);
        }
        fn visit_lifetime(&mut self, l: &syn::Lifetime) {
            if l.ident == "_" {
                self.0 = false;
            }
        }
    }
    let mut f = Finder(true);
    f.visit_type(ty);
    f.0
}

fn check(func: &ItemFn, policy: Option<Policy>) -> syn::Result<()> {
    if let Some(c) = &func.sig.constness {
        return Err(syn::Error::new(
            c.span,
            "#[gpu_scope] cannot go on a `const fn`: a scope tracks memory at run time; \
             remove `const` or the attribute",
        ));
    }
    if policy == Some(Policy::Panic) && is_extern(func) {
        return Err(syn::Error::new(
            func.sig.abi.span(),
            "a panic cannot unwind out of an `extern` function; use `on_escape = warn`, \
             `on_escape = error` or `on_escape = ignore`",
        ));
    }
    if policy == Some(Policy::Error) {
        match &func.sig.output {
            ReturnType::Default => {
                return Err(syn::Error::new(
                    func.sig.ident.span(),
                    "`on_escape = error` makes the function return `Err` on an escape: it must \
                     return `Result<_, E>` with `E: From<gpu_scope::Error>`",
                ))
            }
            ReturnType::Type(_, ty) if has_impl_trait(ty) => return Err(syn::Error::new_spanned(
                ty,
                "`on_escape = error` needs a nameable `Result<_, E>` return type, not `impl Trait`",
            )),
            ReturnType::Type(..) => {}
        }
    }
    Ok(())
}

/// Input:
/// ```ignore
/// #[gpu_scope(opts)] fn f(&mut self, a: &mut Cache, mut x: Tensor) -> R { body }
/// ```
/// Output:
/// ```ignore
/// fn f(&mut self, a: &mut Cache, x: Tensor) -> R {
///     let guard = Scope::enter(opts)?;                  // or panic
///     let ret: R = (|| -> R { let mut x = x; body })(); // owned arguments die inside
///     guard.exit(&(ret, self, a))?;                     // or panic/warn per policy
///     ret
/// }
/// ```
/// `async fn` runs `async { ... }` inside a `ScopeFuture` instead of the closure.
fn rewrite(mut func: ItemFn, options: crate::options::Options) -> TokenStream {
    let policy = options.policy();
    let ident = &func.sig.ident;
    let default_name = quote!(::core::concat!(
        ::core::module_path!(),
        "::",
        ::core::stringify!(#ident)
    ));
    let mut opts = options.build(default_name, policy);
    if is_extern(&func) {
        opts = quote!(#opts.cannot_unwind());
    }

    let mut rebinds = Vec::new();
    let mut kept = vec![quote!(__gpu_scope_ret)];
    for (i, arg) in func.sig.inputs.iter_mut().enumerate() {
        match arg {
            FnArg::Receiver(r) if r.reference.is_some() => kept.push(quote!(self)),
            FnArg::Receiver(_) => {}
            FnArg::Typed(pt) => match (&mut *pt.pat, &*pt.ty) {
                (Pat::Ident(p), Type::Reference(_)) if p.by_ref.is_none() => {
                    let name = &p.ident;
                    kept.push(quote!(#name));
                }
                (_, Type::Reference(_)) => {}
                (Pat::Ident(p), _) if p.by_ref.is_none() && p.subpat.is_none() => {
                    let mutability = p.mutability.take();
                    let name = &p.ident;
                    rebinds.push(quote!(#[allow(unused_variables)] let #mutability #name = #name;));
                }
                (pat, _) => {
                    let name = format_ident!("__gpu_scope_arg{}", i, span = Span::mixed_site());
                    let original = std::mem::replace(pat, syn::parse_quote!(#name));
                    rebinds.push(quote!(let #original = #name;));
                }
            },
        }
    }

    let (ret_ty, annotate) = match &func.sig.output {
        ReturnType::Default => (quote!(()), true),
        ReturnType::Type(_, ty) => (ty.to_token_stream(), annotatable(ty)),
    };
    let ret_annotation = annotate.then(|| quote!(: #ret_ty));
    let closure_ret = annotate.then(|| quote!(-> #ret_ty));
    let block = &func.block;
    // A closure inside an `unsafe fn` is not an unsafe context by itself.
    let block = match func.sig.unsafety {
        Some(_) => {
            quote!({ #[allow(unused_unsafe)] let __gpu_scope_v = unsafe #block; __gpu_scope_v })
        }
        None => quote!(#block),
    };
    let error = policy == Some(Policy::Error);
    let fail_fn = error.then(|| {
        quote_spanned! {func.sig.output.span()=>
            let __gpu_scope_fail = <#ret_ty as ::gpu_scope::__private::EscapeResult>::from_escape;
        }
    });
    let (enter, exit) = if error {
        (
            quote!(match ::gpu_scope::__private::Guard::try_enter(#opts) {
                ::core::result::Result::Ok(g) => g,
                ::core::result::Result::Err(e) => return __gpu_scope_fail(e),
            }),
            quote!(if let ::core::result::Result::Err(e) =
                __gpu_scope_exit.try_exit(__gpu_scope_kept)
            {
                return __gpu_scope_fail(e);
            }),
        )
    } else {
        (
            quote!(::gpu_scope::__private::Guard::enter(#opts)),
            quote!(__gpu_scope_exit.exit(__gpu_scope_kept);),
        )
    };
    let (enter_future, exit_future) = if error {
        (
            quote!(match ::gpu_scope::__private::ScopeFuture::try_enter(#opts, async { #(#rebinds)* #block }) {
                ::core::result::Result::Ok(f) => f,
                ::core::result::Result::Err(e) => return __gpu_scope_fail(e),
            }),
            quote!(if let ::core::result::Result::Err(e) =
                __gpu_scope_exit.try_exit(__gpu_scope_kept)
            {
                return __gpu_scope_fail(e);
            }),
        )
    } else {
        (
            quote!(::gpu_scope::__private::ScopeFuture::enter(#opts, async { #(#rebinds)* #block })),
            quote!(__gpu_scope_exit.exit(__gpu_scope_kept);),
        )
    };
    let collect = roots::collect(kept);
    let prelude = roots::prelude();

    let (body, exit) = if func.sig.asyncness.is_some() {
        (
            quote! {
                let (__gpu_scope_ret, __gpu_scope_exit) = #enter_future.await;
                let __gpu_scope_ret #ret_annotation = __gpu_scope_ret;
            },
            exit_future,
        )
    } else {
        (
            quote! {
                let __gpu_scope_exit = #enter;
                #[allow(clippy::redundant_closure_call)]
                let __gpu_scope_ret #ret_annotation = (|| #closure_ret { #(#rebinds)* #block })();
            },
            exit,
        )
    };
    let new_block = quote! {{
        #prelude
        #fail_fn
        #body
        #collect
        #exit
        __gpu_scope_ret
    }};
    func.block = Box::new(syn::parse2(new_block).expect("generated block parses"));
    func.into_token_stream()
}
