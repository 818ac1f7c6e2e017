//! `scope!(options, { block })`: a scope around a block inside a function.
use crate::options::{Options, Policy};
use crate::roots;
use proc_macro2::TokenStream;
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{Block, Expr};

pub(crate) struct BlockInput {
    options: Options,
    block: Block,
}

impl Parse for BlockInput {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let options = Options::parse_list(input, true)?;
        if !input.peek(syn::token::Brace) {
            return Err(input.error(
                "`scope!` needs a block: write `scope!({ ... })` or `scope!(name = \"step\", { ... })`",
            ));
        }
        let block: Block = input.parse()?;
        if !input.is_empty() {
            return Err(input.error("nothing may follow the block in `scope!(..., { ... })`"));
        }
        Ok(BlockInput { options, block })
    }
}

/// Finds `.await` in the block itself (not in nested async blocks, closures or items).
struct AwaitFinder(Vec<syn::Error>);

impl Visit<'_> for AwaitFinder {
    fn visit_expr_await(&mut self, e: &syn::ExprAwait) {
        self.0.push(syn::Error::new(
            e.await_token.span(),
            "`.await` inside `scope!` cannot be tracked: a block scope lives on one thread \
             between two polls; put `#[gpu_scope]` on an `async fn` instead",
        ));
        syn::visit::visit_expr_await(self, e);
    }
    fn visit_expr_async(&mut self, _: &syn::ExprAsync) {}
    fn visit_expr_closure(&mut self, _: &syn::ExprClosure) {}
    fn visit_item(&mut self, _: &syn::Item) {}
}

/// Input: `scope!(name = "n", keep = [cache], { body })`
/// Output:
/// ```ignore
/// {
///     let guard = Scope::enter(opts).unwrap_or_else(panic);
///     let value = { body };          // `?`, `return`, `break` drop the guard: no check
///     guard.exit(&(value, cache));   // value is `Result<T, Error>` with `on_escape = error`
///     value
/// }
/// ```
pub(crate) fn expand(input: TokenStream) -> syn::Result<TokenStream> {
    let BlockInput { options, block } = syn::parse2(input)?;
    let mut awaits = AwaitFinder(Vec::new());
    awaits.visit_block(&block);
    if let Some(mut first) = awaits.0.pop() {
        awaits.0.into_iter().for_each(|e| first.combine(e));
        return Err(first);
    }
    let opts = options.build(
        quote!(::core::concat!(::core::file!(), ":", ::core::line!())),
        options.policy(),
    );
    let mut kept = vec![quote!(__gpu_scope_value)];
    kept.extend(options.keep.iter().map(|e: &Expr| quote!(#e)));
    let collect = roots::collect(kept);
    let prelude = roots::prelude();
    let block_span = block.span();
    Ok(if options.policy() == Some(Policy::Error) {
        quote::quote_spanned! {block_span=> {
            #prelude
            match ::gpu_scope::__private::Guard::try_enter(#opts) {
                ::core::result::Result::Err(e) => ::core::result::Result::Err(e),
                ::core::result::Result::Ok(__gpu_scope_guard) => {
                    #[allow(clippy::let_unit_value)]
                    let __gpu_scope_value = #block;
                    #collect
                    __gpu_scope_guard.try_exit(__gpu_scope_kept).map(|_| __gpu_scope_value)
                }
            }
        }}
    } else {
        quote::quote_spanned! {block_span=> {
            #prelude
            let __gpu_scope_guard = ::gpu_scope::__private::Guard::enter(#opts);
            #[allow(clippy::let_unit_value)]
            let __gpu_scope_value = #block;
            #collect
            __gpu_scope_guard.exit(__gpu_scope_kept);
            __gpu_scope_value
        }}
    })
}
