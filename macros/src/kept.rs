//! The collection of kept values: generated code that gathers the storages of everything a
//! scope hands back into one `StorageSet`, which the scope's exit receives.
use crate::local::{self, KEPT};
use crate::options::private;
use proc_macro2::{Delimiter, Group, Span, TokenStream};
use quote::{quote_spanned, ToTokens};
use syn::Type;

pub(crate) struct Kept<'a> {
    /// Where gpu-scope is (`crate = path`), or `None`: `::gpu_scope`.
    krate: Option<&'a syn::Path>,
    checked: Vec<TokenStream>,
    lenient: Vec<TokenStream>,
    /// The `#[cfg]` attributes the next statements go under (see [`Kept::under`]).
    cfg: TokenStream,
}

impl<'a> Kept<'a> {
    pub(crate) fn new(krate: Option<&'a syn::Path>) -> Kept<'a> {
        Kept {
            krate,
            checked: Vec::new(),
            lenient: Vec::new(),
            cfg: TokenStream::new(),
        }
    }

    /// The values added next are those of an argument under these `#[cfg]` attributes (none:
    /// an unconditional value).
    pub(crate) fn under(&mut self, cfg: &TokenStream) -> &mut Self {
        self.cfg = cfg.clone();
        self
    }

    /// A value whose type must implement `Tensors`: a compile error at `at` otherwise, naming
    /// `ty` (the type as written) where it is known.
    pub(crate) fn checked(&mut self, value: impl ToTokens, ty: Option<&Type>, at: Span) {
        let span = local::at(at);
        let kept = local::local(KEPT, at);
        // Invisible delimiters keep an expression such as `a as B` whole after the `&`.
        let mut value = Group::new(Delimiter::None, value.into_token_stream());
        value.set_span(span);
        let private = private(self.krate, span);
        let tensors = match ty {
            Some(ty) => quote_spanned!(span=> <#ty as #private::Tensors>),
            None => quote_spanned!(span=> #private::Tensors),
        };
        let cfg = &self.cfg;
        self.checked
            .push(quote_spanned!(span=> #cfg #tensors::visit(&#value, &mut #kept);));
    }

    /// A value kept through `Tensors` where its type implements it; otherwise the report names
    /// its type (autoref specialisation: `ViaTensors` wins where it applies, else `ViaOpaque`).
    /// `shared`: a shared borrow of the caller's, made before the scope.
    pub(crate) fn lenient(&mut self, value: impl ToTokens, shared: bool) {
        let span = Span::mixed_site();
        let kept = local::local(KEPT, span);
        let private = private(self.krate, span);
        let root = quote_spanned!(span=> (&#private::Root(&#value)));
        let cfg = &self.cfg;
        self.lenient.push(if shared {
            quote_spanned! {span=>
                #cfg #private::made_before(&mut #kept, |#kept| #root.__gpu_scope_visit(#kept));
            }
        } else {
            quote_spanned!(span=> #cfg #root.__gpu_scope_visit(&mut #kept);)
        });
    }

    /// The scope's own value: an `Err` in it that says a tensor does not require grad gets the
    /// `keep_grad` hint (see [`hint`]).
    pub(crate) fn returned(&mut self, value: impl ToTokens) {
        self.checked.push(hint(value, self.krate));
    }

    /// A value that cannot be searched (`what` describes it): the report names it as not
    /// inspected, and memory nothing else keeps is not called escaped.
    pub(crate) fn unsearched(&mut self, what: &str) {
        let span = Span::mixed_site();
        let kept = local::local(KEPT, span);
        let cfg = &self.cfg;
        self.checked
            .push(quote_spanned!(span=> #cfg #kept.add_uninspected(#what);));
    }

    /// An owned argument that borrows from the caller (`what` describes it): named in the hint
    /// of a report with escapes.
    pub(crate) fn lending(&mut self, what: &str) {
        let span = Span::mixed_site();
        let kept = local::local(KEPT, span);
        let cfg = &self.cfg;
        self.checked
            .push(quote_spanned!(span=> #cfg #kept.add_lending(#what);));
    }

    /// Statements that declare the kept set and add every value to it.
    pub(crate) fn collect(&self) -> TokenStream {
        let span = Span::mixed_site();
        let kept = local::local(KEPT, span);
        let (private, checked) = (private(self.krate, span), &self.checked);
        let lenient = (!self.lenient.is_empty()).then(|| {
            let lenient = &self.lenient;
            quote_spanned! {span=> {
                use #private::{ViaOpaque as _, ViaTensors as _};
                #(#lenient)*
            }}
        });
        quote_spanned! {span=>
            let mut #kept = #private::StorageSet::new();
            #(#checked)*
            #lenient
        }
    }
}

/// A scope's value, looked at while the scope is still open: an `Err` that says a tensor does
/// not require grad gets the `keep_grad` hint, as a panic does (autoref specialisation:
/// `HintErr` for a `Result` whose error is `Display`, else `HintNone`, which does nothing).
/// (Reading a `std::error::Error`'s causes would need a third impl, chosen before rustc knows
/// the lifetimes: an `Error` impl that asks for `'static` then fails to compile.)
pub(crate) fn hint(value: impl ToTokens, krate: Option<&syn::Path>) -> TokenStream {
    let span = Span::mixed_site();
    let private = private(krate, span);
    quote_spanned! {span=> {
        use #private::{HintErr as _, HintNone as _};
        (&#private::Returned(&#value)).__gpu_scope_hint();
    }}
}
