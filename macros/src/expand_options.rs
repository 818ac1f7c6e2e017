//! The `ScopeOptions` expression that a scope is entered with, from the typed options.
use crate::local;
use crate::options::{Bytes, KeepGrad, Name, Options, Policy, Release};
use proc_macro2::{Literal, Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{BinOp, Expr, Lit};

/// `ScopeOptions::new(name).on_escape(..)...`; `default_name` when the options give none.
pub(crate) fn scope_options(
    options: &Options,
    default_name: TokenStream,
    cannot_unwind: bool,
) -> TokenStream {
    let span = Span::mixed_site();
    let private = options.private(span);
    let name = match options.name.as_ref().map(|n| &n.value) {
        None => default_name,
        Some(Name::Literal(lit)) => quote!(#lit),
        // Copied from a borrow, so that the name may borrow (`name = self.name.as_str()`)
        // and an argument named here stays the body's. A string of any kind (`&str`,
        // `String`, `Cow<str>`, ...); not a number or anything else that merely displays.
        Some(Name::Expr(expr)) => quote_spanned! {local::at(expr.span())=>
            #private::ScopeName::scope_name(&#expr)
        },
    };
    let mut out = quote_spanned!(span=> #private::ScopeOptions::new(#name));
    if let Some(policy) = options.policy() {
        let policy = match policy {
            Policy::Panic => quote_spanned!(span=> Panic),
            Policy::Warn => quote_spanned!(span=> Warn),
            Policy::Error => quote_spanned!(span=> Error),
            Policy::Ignore => quote_spanned!(span=> Ignore),
        };
        out.extend(quote_spanned!(span=> .on_escape(#private::EscapePolicy::#policy)));
    }
    if let Some(release) = &options.release {
        let policy = quote_spanned!(span=> #private::ReleasePolicy);
        let release = match &release.value {
            Release::Outermost => quote_spanned!(span=> #policy::Outermost),
            Release::Always => quote_spanned!(span=> #policy::Always),
            Release::Never => quote_spanned!(span=> #policy::Never),
            Release::Above(bytes) => quote_spanned!(span=> #policy::Above(#bytes)),
            Release::Expr(expr) => typed(expr, |_| policy),
        };
        out.extend(quote_spanned!(span=> .release(#release)));
    }
    if let Some(max_peak) = &options.max_peak {
        let call = match &max_peak.value {
            Bytes::Size(bytes) => quote_spanned!(span=> .max_peak(#bytes)),
            // Literals joined by arithmetic are worked out here (valid.rs refused a negative
            // value), so that `8 * 1024 * 1024 * 1024` does not overflow `i32` and `4 - 8 +
            // 1024` has no negative step; one too large for `u64` is no limit. Any other
            // expression: any integer type (and nothing else: `true` is no budget), evaluated
            // once; a negative one is refused on entry.
            Bytes::Expr(expr) => {
                let bytes = match literal_arithmetic(expr).then(|| literal_value(expr)) {
                    Some(Some(v)) => {
                        Literal::u128_suffixed(u128::try_from(v).unwrap_or(0)).into_token_stream()
                    }
                    _ => expr.to_token_stream(),
                };
                let bytes = quote_spanned! {local::at(expr.span())=>
                    #private::MaxPeak::bytes(#bytes)
                };
                quote_spanned!(span=> .max_peak_budget(#bytes))
            }
        };
        out.extend(call);
    }
    match options.keep_grad.as_ref().map(|k| &k.value) {
        Some(KeepGrad::Is(true)) => out.extend(quote_spanned!(span=> .keep_grad_mode(true))),
        Some(KeepGrad::Expr(keep)) => {
            let keep = typed(keep, |at| quote_spanned!(at=> bool));
            out.extend(quote_spanned!(span=> .keep_grad_mode(#keep)));
        }
        Some(KeepGrad::Is(false)) | None => {}
    }
    if let Some(device) = &options.device {
        // `.into()` knows what to convert to.
        let device = typed(&device.value, |at| quote_spanned!(at=> #private::Device));
        out.extend(quote_spanned!(span=> .device(#device)));
    }
    if cannot_unwind {
        out.extend(quote_spanned!(span=> .cannot_unwind()));
    }
    out
}

/// An option's expression typed where it is written: a wrong type is an error at the
/// expression (not at the runtime's method that takes it). `ty` gets the span the expression
/// is shown at, for a type error's "expected due to this".
fn typed(expr: &Expr, ty: impl FnOnce(Span) -> TokenStream) -> TokenStream {
    let at = local::at(expr.span());
    let ty = ty(at);
    quote_spanned! {at=> { let value: #ty = #expr; value } }
}

/// The value of integer literals joined by arithmetic ([`literal_arithmetic`]), worked out in
/// `i128`, a step past its range held at its end (past `u64` is no limit all the same);
/// `None` where a step has no value (a division by zero, a shift by a negative amount or by
/// 128 or more).
pub(crate) fn literal_value(expr: &Expr) -> Option<i128> {
    match expr {
        Expr::Lit(lit) => match &lit.lit {
            Lit::Int(i) => i
                .base10_parse::<u128>()
                .ok()
                .map(|v| i128::try_from(v).unwrap_or(i128::MAX)),
            _ => None,
        },
        Expr::Paren(p) => literal_value(&p.expr),
        Expr::Group(g) => literal_value(&g.expr),
        Expr::Binary(b) => {
            let (l, r) = (literal_value(&b.left)?, literal_value(&b.right)?);
            match b.op {
                BinOp::Add(_) => Some(l.saturating_add(r)),
                BinOp::Sub(_) => Some(l.saturating_sub(r)),
                BinOp::Mul(_) => Some(l.saturating_mul(r)),
                BinOp::Div(_) => l.checked_div(r),
                BinOp::Rem(_) => l.checked_rem(r),
                // 2^127 is past `i128`: held at its end, as a product would be.
                BinOp::Shl(_) if (0..128).contains(&r) => {
                    Some(l.saturating_mul(if r < 127 { 1 << r } else { i128::MAX }))
                }
                BinOp::Shr(_) if (0..128).contains(&r) => Some(l >> r),
                BinOp::BitAnd(_) => Some(l & r),
                BinOp::BitOr(_) => Some(l | r),
                BinOp::BitXor(_) => Some(l ^ r),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Integer literals without suffix joined by arithmetic: the literals take the type the
/// expression is used at.
pub(crate) fn literal_arithmetic(expr: &Expr) -> bool {
    match expr {
        Expr::Lit(lit) => matches!(&lit.lit, Lit::Int(i) if i.suffix().is_empty()),
        Expr::Paren(p) => literal_arithmetic(&p.expr),
        Expr::Group(g) => literal_arithmetic(&g.expr),
        Expr::Binary(b) => {
            matches!(
                b.op,
                BinOp::Add(_)
                    | BinOp::Sub(_)
                    | BinOp::Mul(_)
                    | BinOp::Div(_)
                    | BinOp::Rem(_)
                    | BinOp::Shl(_)
                    | BinOp::Shr(_)
                    | BinOp::BitAnd(_)
                    | BinOp::BitOr(_)
                    | BinOp::BitXor(_)
            ) && literal_arithmetic(&b.left)
                && literal_arithmetic(&b.right)
        }
        _ => false,
    }
}
