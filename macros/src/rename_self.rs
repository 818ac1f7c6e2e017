//! `self: Pin<&mut Self>` and `&mut self` receivers. Many bodies move the receiver
//! (`self.project()`, `self.get_mut()`, `for t in self`), after which the scope could not
//! search it; and a closure cannot take a parameter named `self`. So the body's `self` is
//! renamed to a local that holds `Pin::as_mut(&mut self)` or `&mut *self` (mutable where the
//! receiver is `mut self`), and the receiver itself stays for the search after the body. A
//! `self` named in a format string cannot be renamed: such a body uses the receiver as
//! written (a `Pin<&mut Self>` one is then not searched).
use crate::args::RenamedSelf;
use crate::local::{self, SELF};
use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use syn::visit_mut::VisitMut;
use syn::{Block, Ident};

/// Renames `self` in `block`, outside nested items (which have their own `self`) and
/// paths such as `self::module`; inside macro calls, every `self` not followed by `::` nor in
/// a function item (`fn name ... { .. }`).
pub(crate) fn rename_self(block: &mut Block) {
    Rename.visit_block_mut(block);
}

/// The renamed `self`: found by the local that the expansion declares, shown where `self` was.
fn renamed(at: Span) -> Ident {
    Ident::new(SELF, Span::mixed_site().located_at(at))
}

struct Rename;

impl VisitMut for Rename {
    fn visit_expr_path_mut(&mut self, e: &mut syn::ExprPath) {
        if e.qself.is_none() && e.path.is_ident("self") {
            let segment = &mut e.path.segments[0];
            segment.ident = renamed(segment.ident.span());
        }
    }

    fn visit_item_mut(&mut self, item: &mut syn::Item) {
        if let syn::Item::Macro(m) = item {
            self.visit_macro_mut(&mut m.mac);
        }
    }

    fn visit_macro_mut(&mut self, mac: &mut syn::Macro) {
        mac.tokens = rename_tokens(std::mem::take(&mut mac.tokens));
    }
}

fn rename_tokens(tokens: TokenStream) -> TokenStream {
    let mut out: Vec<TokenTree> = tokens.into_iter().collect();
    // A function item in the call (`fn get(&self) { .. }`, in an `impl` the macro expands to)
    // has a `self` of its own: left as it is, from its name to its body.
    let mut in_fn = false;
    for i in 0..out.len() {
        let path_follows = matches!(
            (out.get(i + 1), out.get(i + 2)),
            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) if a.as_char() == ':' && b.as_char() == ':'
        );
        if in_fn {
            in_fn = !matches!(&out[i], TokenTree::Group(g) if g.delimiter() == Delimiter::Brace)
                && !matches!(&out[i], TokenTree::Punct(p) if p.as_char() == ';');
            continue;
        }
        if matches!((&out[i], out.get(i + 1)), (TokenTree::Ident(f), Some(TokenTree::Ident(_))) if f == "fn")
        {
            in_fn = true;
            continue;
        }
        match &mut out[i] {
            TokenTree::Ident(ident) if ident == "self" && !path_follows => {
                *ident = renamed(ident.span());
            }
            TokenTree::Group(g) => {
                let mut renamed = Group::new(g.delimiter(), rename_tokens(g.stream()));
                renamed.set_span(g.span());
                *g = renamed;
            }
            _ => {}
        }
    }
    out.into_iter().collect()
}

/// `let [mut] __gpu_scope_self = Pin::as_mut(&mut self);` (or `&mut *self`), `mut` where the
/// user wrote `mut self` (for `self.as_mut()` in the body).
pub(crate) fn reborrow(renamed: &RenamedSelf) -> TokenStream {
    let RenamedSelf {
        this, mutability, ..
    } = renamed;
    // Shown at the receiver: rustc's advice for the body's use of it (`mut self`, the move
    // of a receiver used twice, a borrow stored in it for too long) then points there, not
    // at the attribute.
    let span = local::at(this.span);
    let local = local::local(SELF, this.span);
    let value = match renamed.pinned {
        true => quote::quote_spanned!(span=> ::core::pin::Pin::as_mut(&mut #this)),
        false => quote::quote_spanned!(span=> &mut *#this),
    };
    quote::quote_spanned!(span=> let #mutability #local = #value;)
}

/// Whether a string literal in `tokens` names `self` as a format argument (`"{self:?}"`),
/// which renaming cannot reach.
pub(crate) fn in_literal(tokens: &TokenStream) -> bool {
    tokens.clone().into_iter().any(|tt| match tt {
        TokenTree::Literal(l) => {
            let text = l.to_string();
            text.match_indices("{self").any(|(at, _)| {
                let next = text[at + "{self".len()..].chars().next();
                matches!(next, Some('}' | ':'))
            })
        }
        TokenTree::Group(g) => in_literal(&g.stream()),
        _ => false,
    })
}
