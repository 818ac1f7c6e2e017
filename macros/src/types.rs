//! What the macros need to know about a type as the user wrote it.
use syn::visit::Visit;
use syn::visit_mut::VisitMut;
use syn::{Type, TypeReference};

pub(crate) fn strip_parens(mut ty: &Type) -> &Type {
    while let Type::Paren(syn::TypeParen { elem, .. }) | Type::Group(syn::TypeGroup { elem, .. }) =
        ty
    {
        ty = elem;
    }
    ty
}

/// Where an error about `ty` is shown: a path at its last segment (`Result` in
/// `std::io::Result<u32>`, where the first token would be `std`: a span cannot cover it all).
pub(crate) fn name_span(ty: &Type) -> proc_macro2::Span {
    match strip_parens(ty) {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last().map(|s| s.ident.span()),
        _ => None,
    }
    .unwrap_or_else(|| syn::spanned::Spanned::span(ty))
}

pub(crate) fn is_never(ty: &Type) -> bool {
    matches!(strip_parens(ty), Type::Never(_))
}

/// Finds `impl Trait` anywhere in a type.
pub(crate) fn has_impl_trait(ty: &Type) -> bool {
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

/// The type with each `impl Trait` replaced by `_`: what a `let` inside the body may name.
pub(crate) fn impl_trait_inferred(ty: &Type) -> Type {
    struct Replace;
    impl VisitMut for Replace {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::ImplTrait(t) = ty {
                *ty = Type::Infer(syn::TypeInfer {
                    underscore_token: syn::Token![_](t.impl_token.span),
                });
            } else {
                syn::visit_mut::visit_type_mut(self, ty);
            }
        }
    }
    let mut ty = ty.clone();
    Replace.visit_type_mut(&mut ty);
    ty
}

/// Whether a value of this type may hold a borrow (a reference, a lifetime, `impl Trait`):
/// then it may borrow from a `&mut` argument, which cannot be looked at again while it lives.
/// `'static` borrows from no argument: `&'static str` and `Cow<'static, str>` count only for
/// what they contain.
pub(crate) fn may_borrow(ty: &Type) -> bool {
    struct Finder(bool);
    impl Visit<'_> for Finder {
        fn visit_type_reference(&mut self, r: &TypeReference) {
            match &r.lifetime {
                Some(l) if is_static(l) => syn::visit::visit_type_reference(self, r),
                _ => self.0 = true,
            }
        }
        fn visit_lifetime(&mut self, l: &syn::Lifetime) {
            if !is_static(l) {
                self.0 = true;
            }
        }
        fn visit_type_impl_trait(&mut self, _: &syn::TypeImplTrait) {
            self.0 = true;
        }
    }
    let mut f = Finder(false);
    f.visit_type(ty);
    f.0
}

/// Whether `ty` leaves a lifetime to elision: a reference without one, `'_`, or one of the
/// standard types that borrow (`Cow`, `Ref`, `MutexGuard`, ...) written without its lifetime.
/// One elided inside any other path (`View` for `View<'a>`) is not seen (README, Limits).
pub(crate) fn has_elided_lifetime(ty: &Type) -> bool {
    const BORROWING: [&str; 6] = [
        "Cow",
        "Ref",
        "RefMut",
        "MutexGuard",
        "RwLockReadGuard",
        "RwLockWriteGuard",
    ];
    any_part(ty, |part| match part {
        Part::Reference(r) => r.lifetime.is_none(),
        Part::Lifetime(l) => l.ident == "_",
        Part::Segment(s) => {
            BORROWING.iter().any(|b| s.ident == b)
                && match &s.arguments {
                    syn::PathArguments::AngleBracketed(a) => !a
                        .args
                        .iter()
                        .any(|a| matches!(a, syn::GenericArgument::Lifetime(_))),
                    _ => true,
                }
        }
    })
}

/// Whether a lifetime other than `'_` and `'static` occurs in `ty`.
pub(crate) fn has_named_lifetime(ty: &Type) -> bool {
    struct Finder(bool);
    impl Visit<'_> for Finder {
        fn visit_lifetime(&mut self, l: &syn::Lifetime) {
            if l.ident != "_" && !is_static(l) {
                self.0 = true;
            }
        }
    }
    let mut f = Finder(false);
    f.visit_type(ty);
    f.0
}

/// Whether a type it names is given a lifetime other than `'static` (`Ctx<'_>`, `Path<'a>`):
/// an owned value of it may reach the caller's data through a `&mut` or a cell. `Cow` is
/// left out: it holds shared borrows only.
pub(crate) fn has_lifetime_argument(ty: &Type) -> bool {
    any_part(ty, |part| match part {
        Part::Segment(s) if s.ident != "Cow" => match &s.arguments {
            syn::PathArguments::AngleBracketed(a) => a
                .args
                .iter()
                .any(|a| matches!(a, syn::GenericArgument::Lifetime(l) if !is_static(l))),
            _ => false,
        },
        _ => false,
    })
}

/// Whether an owned value of this type reaches the caller's data through a shared borrow of a
/// cell or lock (`Vec<&RefCell<Vec<Tensor>>>`) or a standard guard that gives `&mut` access
/// (`RefMut<Vec<Tensor>>`, its lifetime elided): the body may store through it. A shared
/// borrow of anything else holds nothing the body could change.
pub(crate) fn reaches_cell(ty: &Type) -> bool {
    const CELLS: [&str; 5] = ["Cell", "RefCell", "OnceCell", "Mutex", "RwLock"];
    const GUARDS: [&str; 3] = ["RefMut", "MutexGuard", "RwLockWriteGuard"];
    fn named(part: Part<'_>, names: &[&str]) -> bool {
        matches!(part, Part::Segment(s) if names.iter().any(|n| s.ident == n))
    }
    any_part(ty, |part| match part {
        Part::Reference(r) => any_part(&r.elem, |part| named(part, &CELLS)),
        part => named(part, &GUARDS),
    })
}

/// Whether this is tch's `nn::Path` with its lifetime elided (`p: nn::Path`, `tch::nn::Path`;
/// not a bare `Path`, a name other crates use too): it borrows the caller's `VarStore`, and
/// what the body builds through it grows that store.
pub(crate) fn is_nn_path(ty: &Type) -> bool {
    let Type::Path(p) = strip_parens(ty) else {
        return false;
    };
    let segments: Vec<_> = p.path.segments.iter().collect();
    matches!(segments.as_slice(), [.., before, last]
        if last.ident == "Path" && before.ident == "nn" && last.arguments.is_none())
}

/// Whether this is a closure that may store what it is given (`impl FnMut(Tensor)`,
/// `Box<dyn FnOnce(Tensor)>`): it may capture a `&mut` borrow of the caller's data, which
/// nothing can search. An `Fn` one cannot change its captures but through a cell: the usual
/// transform (`f: impl Fn(&Tensor) -> Tensor`) is not named.
pub(crate) fn is_closure(ty: &Type) -> bool {
    any_part(
        ty,
        |part| matches!(part, Part::Segment(s) if s.ident == "FnMut" || s.ident == "FnOnce"),
    )
}

/// Whether an owned value of this type holds a `&mut` borrow of the caller's data: a `&mut`
/// written in it (`(&Tensor, &mut Vec<Tensor>)`). One hidden in a type it names (`Ctx<'_>`) is
/// not seen: a lifetime alone says nothing of mutability (`Cow<'_, str>`, `nn::Path<'_>`), and
/// taking every such argument as unsearchable would hide the leaks beside it.
pub(crate) fn may_hold_mut(ty: &Type) -> bool {
    any_part(
        ty,
        |part| matches!(part, Part::Reference(r) if r.mutability.is_some()),
    )
}

/// A part of a type that [`any_part`] shows.
enum Part<'a> {
    Reference(&'a TypeReference),
    Lifetime(&'a syn::Lifetime),
    Segment(&'a syn::PathSegment),
}

/// Whether `found` holds for a reference, lifetime or path segment of `ty`, outside the
/// parameters of function pointers and closure traits (`fn(&mut T)`, `impl FnMut(&Tensor)`):
/// a value of the type holds none of those, and a return value borrows from none of them.
fn any_part(ty: &Type, found: impl FnMut(Part<'_>) -> bool) -> bool {
    struct Finder<F>(F, bool);
    impl<F: FnMut(Part<'_>) -> bool> Visit<'_> for Finder<F> {
        fn visit_type_reference(&mut self, r: &TypeReference) {
            self.1 |= (self.0)(Part::Reference(r));
            syn::visit::visit_type_reference(self, r);
        }
        fn visit_lifetime(&mut self, l: &syn::Lifetime) {
            self.1 |= (self.0)(Part::Lifetime(l));
        }
        fn visit_path_segment(&mut self, s: &syn::PathSegment) {
            self.1 |= (self.0)(Part::Segment(s));
            syn::visit::visit_path_segment(self, s);
        }
        fn visit_type_bare_fn(&mut self, _: &syn::TypeBareFn) {}
        fn visit_parenthesized_generic_arguments(
            &mut self,
            _: &syn::ParenthesizedGenericArguments,
        ) {
        }
    }
    let mut f = Finder(found, false);
    f.visit_type(ty);
    f.1
}

/// The reference in `Option<&T>` or `Option<&mut T>`, as the user wrote it.
pub(crate) fn option_of_reference(ty: &Type) -> Option<&TypeReference> {
    let Type::Path(p) = strip_parens(ty) else {
        return None;
    };
    let last = p.path.segments.last()?;
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match (last.ident == "Option", args.args.first(), args.args.len()) {
        (true, Some(syn::GenericArgument::Type(t)), 1) => match strip_parens(t) {
            Type::Reference(r) => Some(r),
            _ => None,
        },
        _ => None,
    }
}

fn is_static(l: &syn::Lifetime) -> bool {
    l.ident == "static"
}

/// How a method's receiver relates to the caller's value.
pub(crate) enum Receiver {
    /// `self`, `self: Box<Self>`, `self: Arc<Self>`, ...: the method owns it (an `Arc` or `Rc`
    /// may still share its contents with the caller).
    Owned,
    /// `&self`, `&mut self`, `self: &Arc<Self>`, `self: Pin<&Self>`, ...
    Borrowed { mutable: bool },
    /// `self: Pin<&mut Self>`: borrowed, and moved by most bodies (`self.project()`).
    PinnedMut,
}

pub(crate) fn receiver(ty: &Type) -> Receiver {
    match strip_parens(ty) {
        Type::Reference(r) => Receiver::Borrowed {
            mutable: r.mutability.is_some(),
        },
        Type::Path(p) => {
            let Some(last) = p.path.segments.last().filter(|s| s.ident == "Pin") else {
                return Receiver::Owned;
            };
            let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
                return Receiver::Owned;
            };
            match args.args.first() {
                Some(syn::GenericArgument::Type(Type::Reference(r))) if r.mutability.is_some() => {
                    Receiver::PinnedMut
                }
                Some(syn::GenericArgument::Type(Type::Reference(_))) => {
                    Receiver::Borrowed { mutable: false }
                }
                _ => Receiver::Owned,
            }
        }
        _ => Receiver::Owned,
    }
}

/// Whether `ty` is, or holds, a future: `impl Future`, `dyn Future` (`Pin<Box<dyn Future>>`),
/// `BoxFuture` or `LocalBoxFuture`. A function that makes futures (`Box<dyn Fn() -> BoxFuture>`,
/// `fn() -> BoxFuture`) is not one.
pub(crate) fn is_future(ty: &Type) -> bool {
    struct Finder(bool);
    impl Visit<'_> for Finder {
        fn visit_path_segment(&mut self, s: &syn::PathSegment) {
            if ["Future", "IntoFuture", "BoxFuture", "LocalBoxFuture"]
                .iter()
                .any(|name| s.ident == name)
            {
                self.0 = true;
            }
            syn::visit::visit_path_segment(self, s);
        }
        fn visit_type_bare_fn(&mut self, _: &syn::TypeBareFn) {}
        fn visit_parenthesized_generic_arguments(
            &mut self,
            _: &syn::ParenthesizedGenericArguments,
        ) {
        }
    }
    let mut f = Finder(false);
    f.visit_type(ty);
    f.0
}

/// A type or pattern as the user wrote it, for a message: tokens joined without the spaces
/// that `to_string` puts around `<`, `>`, `&`, `::` and brackets (`Option<Tensor>`, not
/// `Option < Tensor >`).
pub(crate) fn shown(tokens: &dyn quote::ToTokens) -> String {
    let mut text = tokens.to_token_stream().to_string();
    for (spaced, tight) in [
        (" <", "<"),
        ("< ", "<"),
        (" >", ">"),
        (" ,", ","),
        (" ::", "::"),
        (":: ", "::"),
        ("& ", "&"),
        ("' ", "'"),
        ("( ", "("),
        (" )", ")"),
        ("[ ", "["),
        (" ]", "]"),
    ] {
        text = text.replace(spaced, tight);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::may_borrow;

    fn borrows(ty: &str) -> bool {
        may_borrow(&syn::parse_str(ty).expect("a type"))
    }

    #[test]
    fn static_borrows_from_no_argument() {
        for ty in [
            "Result<Tensor, &'static str>",
            "Option<&'static str>",
            "Cow<'static, str>",
            "(Tensor, &'static mut [u8])",
            "Box<dyn Error + Send + 'static>",
            "Result<Tensor, String>",
        ] {
            assert!(!borrows(ty), "{ty}");
        }
    }

    #[test]
    fn other_lifetimes_references_and_impl_trait_may_borrow() {
        for ty in [
            "Option<&mut Tensor>",
            "&'a Tensor",
            "Cow<'_, str>",
            "&'static &'a Tensor",
            "&'static Foo<'a>",
            "Result<Tensor, &str>",
            "Box<dyn Fn() + 'a>",
            "impl Iterator<Item = Tensor> + 'static",
            "for<'b> fn(&'b str) -> &'b str",
        ] {
            assert!(borrows(ty), "{ty}");
        }
    }
}
