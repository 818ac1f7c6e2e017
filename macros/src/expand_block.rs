//! `scope!(options, { block })`: a scope around a block inside a function.
use crate::expand_options::scope_options;
use crate::input::ScopedBlock;
use crate::kept::Kept;
use crate::local::{self, ERROR, EXIT, KEPT, RESULT, VALUE};
use crate::options::Policy;
use crate::valid;
use proc_macro2::{Ident, Span, TokenStream};
use quote::quote_spanned;
use syn::spanned::Spanned;
use syn::Stmt;

pub(crate) fn expand(input: TokenStream) -> syn::Result<TokenStream> {
    let scoped = syn::parse2(input)?;
    valid::validate_block(&scoped)?;
    Ok(rewrite(scoped))
}

/// Input: `scope!(name = "n", keep = [cache], { body })`
/// Output:
/// ```ignore
/// {
///     let exit = ScopeGuard::enter(opts);      // the runtime applies the escape policy
///     let value = if true { body } else { never() }; // `?`, `return`, `break` drop the
///                                         // guard: no check
///     let mut kept = StorageSet::new();
///     Tensors::visit(&value, &mut kept);  // the value and each `keep` entry must implement
///     Tensors::visit(&cache, &mut kept);  // `Tensors`
///     exit.exit(kept);
///     value
/// }
/// ```
/// With `on_escape = error` the block evaluates to `Result<T, gpu_scope::Error>`: `try_enter`
/// and `try_exit`, and the body does not run when the scope cannot be entered.
fn rewrite(ScopedBlock { options, block }: ScopedBlock) -> TokenStream {
    let span = Span::mixed_site();
    let default_name = quote_spanned!(span=>
        ::core::concat!(::core::file!(), ":", ::core::line!())
    );
    let opts = scope_options(&options, default_name, false);
    let private = options.private(span);
    let (exit, value, kept, err) = (
        local::local(EXIT, span),
        local::local(VALUE, span),
        local::local(KEPT, span),
        local::local(ERROR, span),
    );

    let mut keep = Kept::new(options.krate());
    let value_at = match block.stmts.last() {
        Some(Stmt::Expr(tail, None)) => tail.span(),
        _ => block.brace_token.span.join(),
    };
    // A block that always panics has no value to keep (its scope ends unchecked), and the
    // `keep` entries are used before it (after it, their use is unreachable: `unused_variables`).
    let diverges = valid::ends_in_panic(&block);
    if !diverges {
        keep.checked(local::local(VALUE, value_at), None, value_at);
        if returns_result(&block) {
            keep.returned(local::local(VALUE, Span::mixed_site()));
        }
    }
    let mut touch = TokenStream::new();
    for entry in options.keep.iter().flat_map(|k| &k.value) {
        keep.checked(entry, None, entry.span());
        if diverges {
            touch.extend(quote_spanned!(span=> let _ = &#entry;));
        }
    }
    let collect = keep.collect();

    // What follows the user's block is ours, and would be unreachable where the block
    // diverges (`return`, `break`, a panic): beside a call that does not diverge, the block
    // leaves nothing to lint (a lint allowed here would be an error where a crate forbids it).
    let value_of = quote_spanned!(span=> if true #block else { #private::never() });
    if options.policy() != Some(Policy::Error) {
        return quote_spanned! {span=> {
            let #exit = #private::ScopeGuard::enter(#opts);
            #touch
            let #value = #value_of;
            #collect
            #exit.exit(#kept);
            #value
        }};
    }
    // Bound after the user's block, which cannot name it; spanned as the whole call, so that
    // a type error about the `Result` (and rustc's `.expect()` or `?`) points at the call.
    let result = Ident::new(RESULT, Span::call_site());
    // The entry in a statement of its own: what the options' expressions borrow (`name =
    // cfg.borrow().name.as_str()`) is given back before the block runs.
    quote_spanned! {span=> {
        let #exit = #private::ScopeGuard::try_enter(#opts);
        let #result = match #exit {
            ::core::result::Result::Ok(#exit) => {
                #touch
                let #value = #value_of;
                let #err = {
                    #collect
                    #exit.try_exit(#kept)
                };
                match #err {
                    ::core::result::Result::Ok(()) => ::core::result::Result::Ok(#value),
                    ::core::result::Result::Err(#err) => ::core::result::Result::Err(#err),
                }
            }
            ::core::result::Result::Err(#err) => ::core::result::Result::Err(#err),
        };
        #result
    }}
}

/// Whether the block's value is a call that returns a `Result` whatever the code around the
/// block makes of it (tch's `y.f_backward()`, `.map_err(..)`, anyhow's `.context(..)`): the
/// `keep_grad` hint looks at its `Err`. No other value is looked at: its type may be known
/// only where the block is used (`let v: Vec<i32> = scope!({ it.collect() })`), and the
/// hint's look, before that, would take it for a `Result`.
fn returns_result(block: &syn::Block) -> bool {
    let Some(Stmt::Expr(tail, None)) = block.stmts.last() else {
        return false;
    };
    match valid::strip_parens(tail) {
        syn::Expr::MethodCall(call) => {
            let name = call.method.to_string();
            name.starts_with("f_")
                || matches!(name.as_str(), "map_err" | "context" | "with_context")
        }
        _ => false,
    }
}
