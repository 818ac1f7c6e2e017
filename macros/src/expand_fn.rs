//! `#[gpu_scope]` on a function: parse, validate, then rewrite the body.
use crate::args::{self, Args, Gated};
use crate::expand_options::scope_options;
use crate::input::{self, ScopedFn};
use crate::kept::{self, Kept};
use crate::local::{self, COPY, ERROR, EXIT, KEPT, RET, SHARED};
use crate::options::Policy;
use crate::{rename_self, types, valid};
use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{Block, Expr, ExprAsync, ItemFn, Pat, ReturnType, Signature, Stmt, Token, Type};

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let mut scoped = input::parse_fn(args, item)?;
    let Some(future) = runtime_future(&scoped.func.sig, &mut scoped.func.block) else {
        valid::validate_fn(&scoped)?;
        return Ok(rewrite(scoped).into_token_stream());
    };
    // The `async fn` the user wrote, scoped as under the attributes' other order: entered at
    // each poll of its future, not around the runtime that polls it.
    let written = ScopedFn {
        options: scoped.options,
        tokens: scoped.tokens,
        func: ItemFn {
            attrs: scoped.func.attrs.clone(),
            vis: scoped.func.vis.clone(),
            sig: Signature {
                asyncness: Some(Token![async](future.async_token.span)),
                ..scoped.func.sig.clone()
            },
            block: Box::new(future.block.clone()),
        },
    };
    valid::validate_fn(&written)?;
    // The arguments as the rewritten body expects them (renamed or made `mut`): tokio hands
    // them to the future unchanged.
    let rewritten = rewrite(written);
    scoped.func.sig.inputs = rewritten.sig.inputs;
    future.block = *rewritten.block;
    Ok(scoped.func.into_token_stream())
}

/// `#[tokio::test]` or `#[tokio::main]` written above `#[gpu_scope]` expands first, and hands on
/// a plain `fn` (its arguments unchanged) that opens with `let body = async { <the user's
/// body> };` and ends in a block whose last statement is `return <runtime>.block_on(body);`.
/// That future is the user's `async fn` (a function written so by hand is taken as the same,
/// and scoped the same way: the future's output is what the function returns).
fn runtime_future<'a>(sig: &Signature, block: &'a mut Block) -> Option<&'a mut ExprAsync> {
    if sig.asyncness.is_some() || !blocks_on_body(block) {
        return None;
    }
    let Some(Stmt::Local(local)) = block.stmts.first_mut() else {
        return None;
    };
    if !matches!(&local.pat, Pat::Ident(p) if p.ident == "body") {
        return None;
    }
    match &mut *local.init.as_mut()?.expr {
        Expr::Async(future) if future.capture.is_none() => Some(future),
        _ => None,
    }
}

/// The function's last statement is a block ending in `return <expr>.block_on(body);`.
fn blocks_on_body(block: &Block) -> bool {
    let Some(Stmt::Expr(Expr::Block(last), _)) = block.stmts.last() else {
        return false;
    };
    let Some(Stmt::Expr(Expr::Return(ret), _)) = last.block.stmts.last() else {
        return false;
    };
    let Some(Expr::MethodCall(call)) = ret.expr.as_deref() else {
        return false;
    };
    let on_body = match call.args.first() {
        Some(Expr::Path(p)) => p.path.is_ident("body"),
        _ => false,
    };
    call.method == "block_on" && call.args.len() == 1 && on_body
}

/// Input:
/// ```ignore
/// #[gpu_scope(opts)] fn f(&mut self, a: &mut Cache, mut x: Tensor, s: Arc<Shared>) -> R { body }
/// ```
/// Output (`on_escape = panic | warn | ignore`; the runtime applies the policy):
/// ```ignore
/// fn f(&mut self, a: &mut Cache, x: Tensor, s: Arc<Shared>) -> R {
///     let shared = share(&s);                 // a weak handle if `s` is an `Arc` or `Rc`
///     let exit = ScopeGuard::enter(opts);
///     let ret = run_body(|| -> R {            // `return` and `?` end the closure
///         let mut x = x; let s = s;           // owned arguments die inside
///                                             // (an owned `self`: see `args::take_self`)
///         body
///     });
///     let mut kept = StorageSet::new();
///     <R as Tensors>::visit(&ret, &mut kept); // R must implement `Tensors`
///     Root(&self).visit(&mut kept);           // arguments are kept where they implement it
///     Root(&a).visit(&mut kept);
///     shared.visit(&mut kept);
///     exit.exit(kept);
///     ret
/// }
/// ```
/// `on_escape = error` uses `try_enter`/`try_exit` and returns
/// `Err(EscapeInto::escape_into(error))` from one place; `async fn` runs `async { ... }` inside
/// a `ScopeFuture` instead of the closure, its type pinned by `if false { let never: R = loop
/// {}; return never; }` first; a function returning `!` runs its body inline, as it never
/// returns.
fn rewrite(
    ScopedFn {
        options,
        tokens,
        mut func,
    }: ScopedFn,
) -> ItemFn {
    let span = Span::mixed_site();
    let private = options.private(span);
    let ident = &func.sig.ident;
    // The function's path as rustc prints it for an item declared in its body (a method's
    // includes its type), worked out once; `module_path::ident` if rustc's form is not the
    // expected one.
    let default_name = quote_spanned!(span=> {
        fn __gpu_scope_fn() {}
        static __GPU_SCOPE_NAME: #private::FnName = #private::FnName::new();
        __GPU_SCOPE_NAME.get(
            ::core::any::type_name_of_val(&__gpu_scope_fn),
            ::core::concat!(::core::module_path!(), "::", ::core::stringify!(#ident)),
        )
    });
    let opts = scope_options(&options, default_name, valid::is_extern(&func.sig));
    let ret_ty = match &func.sig.output {
        ReturnType::Type(_, ty) => Some((**ty).clone()),
        ReturnType::Default => None,
    };
    let body = match &ret_ty {
        Some(ty) if types::is_never(ty) => never_returns(&func, opts, &private),
        _ => {
            let args = args::classify(&mut func.sig, &func.block, &tokens);
            if args.renamed_self.is_some() {
                rename_self::rename_self(&mut func.block);
            }
            let error = options
                .on_escape
                .as_ref()
                .filter(|p| p.value == Policy::Error)
                .map(|p| p.key);
            returns(&func, &args, ret_ty.as_ref(), opts, error, options.krate())
        }
    };
    let block = Block {
        brace_token: func.block.brace_token,
        stmts: vec![Stmt::Expr(Expr::Verbatim(body), None)],
    };
    func.block = Box::new(block);
    func
}

/// The body of a function that returns: see `rewrite`.
fn returns(
    func: &ItemFn,
    args: &Args,
    ret_ty: Option<&Type>,
    opts: TokenStream,
    on_escape_error: Option<Span>,
    krate: Option<&syn::Path>,
) -> TokenStream {
    let span = Span::mixed_site();
    let (ret, exit, kept, err) = (
        local::local(RET, span),
        local::local(EXIT, span),
        local::local(KEPT, span),
        local::local(ERROR, span),
    );
    let private = crate::options::private(krate, span);
    let asyncness = func.sig.asyncness;
    let (shares, collect) = kept_values(args, ret_ty, asyncness.is_none(), krate);

    // Sync: a guard, and the body run as a closure. Async: a future whose output comes with
    // the end of its scope.
    let body = body(func, args, ret_ty, &private);
    let enter = if on_escape_error.is_some() {
        quote_spanned!(span=> try_enter)
    } else {
        quote_spanned!(span=> enter)
    };
    let (enter, run) = if let Some(asyncness) = asyncness {
        // Where a note says the function's future awaits: at its `async`, not the attribute.
        let wait = quote_spanned!(asyncness.span=> .await);
        // Shown at the body's brace, as the sync closure is.
        let at = local::at(func.block.brace_token.span.open());
        let block = quote_spanned!(at=> async #body);
        // The value looked at for the `keep_grad` hint while the scope is still on the thread
        // (after the future, its autograd mode is given back).
        let block = match ret_ty {
            Some(_) => {
                let hint = kept::hint(&ret, krate);
                quote_spanned!(at=> async { let #ret = #block.await; #hint #ret })
            }
            None => block,
        };
        (
            quote_spanned!(span=> #private::ScopeFuture::#enter(#opts, #block)),
            quote_spanned!(span=> let (#ret, #exit) = #exit #wait;),
        )
    } else {
        // Shown at the body's brace: a borrow error about what the closure captures (`self`
        // mutated through `&self`) points into the function, not at the attribute.
        // Its return type written out, as the user's (`impl Trait` as `_`): a `return;` in
        // the body is then told what it should return, where that type is.
        let returns = ret_ty
            .filter(|ty| !matches!(types::strip_parens(ty), Type::ImplTrait(_)))
            .map(|ty| {
                let ty = types::impl_trait_inferred(ty);
                quote!(-> #ty)
            });
        let closure =
            quote_spanned!(local::at(func.block.brace_token.span.open())=> || #returns #body);
        (
            quote_spanned!(span=> #private::ScopeGuard::#enter(#opts)),
            quote_spanned!(span=> let #ret = #private::run_body(#closure);),
        )
    };

    // The value returned, shown at the body's last expression (else its closing brace): a
    // borrow it needs for longer than an argument's type allows (E0621) is shown there, as
    // without the attribute, not at the attribute.
    let returned = match func.block.stmts.last() {
        Some(Stmt::Expr(tail, None)) => local::local(RET, tail.span()),
        _ => local::local(RET, func.block.brace_token.span.close()),
    };
    let Some(on_escape) = on_escape_error else {
        return quote_spanned! {span=>
            #(#shares)*
            let #exit = #enter;
            #run
            #collect
            #exit.exit(#kept);
            #returned
        };
    };
    // Evaluates to the error, or returns the value. The entry's `Result` is matched in a
    // statement of its own, so that it is gone before the search borrows the arguments again.
    let label = syn::Lifetime::new("'__gpu_scope", span);
    let failed = quote_spanned! {span=> #label: {
        let #exit = match #enter {
            ::core::result::Result::Ok(#exit) => #exit,
            ::core::result::Result::Err(#err) => break #label #err,
        };
        #run
        #collect
        match #exit.try_exit(#kept) {
            ::core::result::Result::Ok(()) => return #returned,
            ::core::result::Result::Err(#err) => #err,
        }
    }};
    // The one place that turns the escape into the function's error: a return type that is
    // not a `Result` whose error converts from `gpu_scope::Error` fails here, shown at that
    // type, with the conversion shown at the `on_escape` option that asks for it. Spanned as
    // the user's tokens, so that rustc shows them as such; the local is bound after the
    // user's code, which therefore cannot name it.
    let at = ret_ty.map_or(func.sig.ident.span(), types::name_span);
    let error = Ident::new(ERROR, at);
    // Through `EscapeInto` (`From<gpu_scope::Error>`), whose message says what to return,
    // shown at the return type; the call at the option.
    let escape_into = crate::options::private(krate, local::at(on_escape));
    let converted =
        quote_spanned!(local::at(on_escape)=> #escape_into::EscapeInto::escape_into(#error));
    // Through a trait that any `Result` implements: another type is refused with a message
    // that names the option (instead of a bare type mismatch).
    let fail = match ret_ty {
        Some(ty) => {
            // `Result<impl Trait, E>` names its `impl Trait` as `_` here.
            let ty = types::impl_trait_inferred(ty);
            quote_spanned!(at=> <#ty as #private::ErrorReturn>::err(#converted))
        }
        None => quote_spanned!(at=> ::core::result::Result::Err(#converted)),
    };
    quote_spanned! {span=>
        #(#shares)*
        let #error = #failed;
        #fail
    }
}

/// The weak handles taken before the body, and the collection of kept values after it: the
/// return value, the borrowed arguments, and what the handles still reach; with `hint`, the
/// returned value's `keep_grad` hint (an `async fn` gives it inside its future instead).
fn kept_values(
    args: &Args,
    ret_ty: Option<&Type>,
    hint: bool,
    krate: Option<&syn::Path>,
) -> (Vec<TokenStream>, TokenStream) {
    let span = Span::mixed_site();
    let private = crate::options::private(krate, span);
    let mut kept = Kept::new(krate);
    match ret_ty {
        None => {}
        Some(ty) if types::has_impl_trait(ty) => kept.lenient(local::local(RET, span), false),
        Some(ty) => kept.checked(local::local(RET, ty.span()), Some(ty), ty.span()),
    }
    if ret_ty.is_some() && hint {
        kept.returned(local::local(RET, span));
    }
    for Gated { cfg, item } in &args.roots {
        kept.under(cfg).lenient(&item.0, item.1);
    }
    for Gated { cfg, item } in &args.unsearched {
        kept.under(cfg).unsearched(item);
    }
    for Gated { cfg, item } in &args.lending {
        kept.under(cfg).lending(item);
    }
    let mut shares = Vec::new();
    for (i, Gated { cfg, item: name }) in args.copied.iter().enumerate() {
        let copy = format_ident!("{}{}", COPY, i, span = span);
        shares.push(quote_spanned!(span=> #cfg let #copy = #name;));
        kept.under(cfg).lenient(&copy, true);
    }
    for (i, Gated { cfg, item: owned }) in args.owned.iter().enumerate() {
        let handle = format_ident!("{}{}", SHARED, i, span = span);
        shares.push(quote_spanned! {span=>
            #cfg
            let #handle = {
                use #private::{ViaShared as _, ViaSharedUnseen as _, ViaOwnTensors as _, ViaUnshared as _};
                (&&#private::Owned(&#owned)).__gpu_scope_share()
            };
        });
        kept.under(cfg).checked(&handle, None, span);
    }
    (shares, kept.collect())
}

/// `{ reborrow or take of self; rebinds; fake return; user's block }`: what the closure or
/// async block runs.
fn body(func: &ItemFn, args: &Args, ret_ty: Option<&Type>, private: &TokenStream) -> TokenStream {
    let span = Span::mixed_site();
    let reborrow = args.renamed_self.as_ref().map(rename_self::reborrow);
    let take_self = args.owned_self.map(|this| args::take_self(this, private));
    let rebinds = &args.rebinds;
    // Pins the type of the async block to the declared return type (`impl Trait` as `_`), so
    // that `?` and `return` inside it convert as in the function itself (a closure has its
    // return type written out instead). Spanned as the return type, so that a mismatch in the
    // body is explained by that type.
    let fake_return = ret_ty
        .filter(|_| func.sig.asyncness.is_some())
        .filter(|ty| !matches!(types::strip_parens(ty), Type::ImplTrait(_)))
        .map(|ty| {
            let at = ty.span();
            let ty = types::impl_trait_inferred(ty);
            // A call, not a diverging expression: no lint to allow (a crate may `forbid` it).
            quote_spanned! {at=>
                if false {
                    return #private::never::<#ty>();
                }
            }
        });
    // The user's statements, not their block: a block of one expression as the value of
    // another would be linted (`unused_braces`) at the user's braces.
    let (items, stmts) = leading_items(&func.block.stmts, &args.names);
    let inside = quote_spanned! {span=>
        #(#items)* #reborrow #take_self #(#rebinds)* #fake_return #(#stmts)*
    };
    // Braces shown as the user's: a body without a value where one is returned (`y;` as the
    // last statement) is shown there, with rustc's advice, not at the attribute.
    let mut block = Group::new(Delimiter::Brace, inside);
    block.set_span(func.block.brace_token.span.join());
    block.into_token_stream()
}

/// A function returning `!` never ends normally: its scope is entered, the body runs inline,
/// and only an unwinding panic ends the scope (unchecked).
fn never_returns(func: &ItemFn, opts: TokenStream, private: &TokenStream) -> TokenStream {
    let span = Span::mixed_site();
    let exit = local::local(EXIT, span);
    let block = &func.block;
    if func.sig.asyncness.is_some() {
        quote_spanned! {span=>
            let _ = #private::ScopeFuture::enter(#opts, async #block).await;
            ::core::unreachable!("an `async fn` returning `!` returned")
        }
    } else {
        let (items, stmts) = leading_items(&block.stmts, &[]);
        quote_spanned! {span=>
            #(#items)*
            let #exit = #private::ScopeGuard::enter(#opts);
            #(#stmts)*
        }
    }
}

/// The items a body opens with, and the rest: the items stay first, before the statements
/// added to the body (as written, they are not items after statements, which
/// `clippy::items_after_statements` lints). A `macro_rules!` definition that names one of
/// `names` (the arguments' bindings, `self`), and what follows it, stay after them: such a
/// macro sees only the locals declared before it, and those are locals of the body.
fn leading_items<'a>(stmts: &'a [Stmt], names: &[Ident]) -> (&'a [Stmt], &'a [Stmt]) {
    let sees_names = |m: &syn::ItemMacro| {
        let tokens = m.mac.tokens.clone();
        names.iter().any(|n| args::mentions(tokens.clone(), n))
    };
    stmts.split_at(
        stmts
            .iter()
            .take_while(|s| match s {
                Stmt::Item(syn::Item::Macro(m)) => !sees_names(m),
                s => matches!(s, Stmt::Item(_)),
            })
            .count(),
    )
}
