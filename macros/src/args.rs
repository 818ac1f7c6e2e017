//! What each argument of a scoped function is to its scope.
//!
//! - Borrowed (`&T`, `&mut T`, `&self`, `self: &Arc<Self>`, `self: Pin<&mut Self>`, ...): the
//!   caller's value; a root, searched after the body (one destructured in the signature is
//!   bound whole and destructured in the body). A `&mut` one is left out when the return
//!   type may borrow from it (it cannot be looked at while that borrow lives; one whose
//!   lifetime is elided only a lifetime elided in the return type can borrow), or when the
//!   body may store it for its named lifetime (see `storable`), and named as not inspected,
//!   so that what the body stored in it is not called escaped. A shared one
//!   (`&T`) was made before the scope: tch modules whose tensors are private to tch hold
//!   nothing the scope made, unless reached through a cell or lock.
//! - Owned: moved into the body (`let x = x;`, also when the body does not use it: its drop
//!   may allocate), so that it dies inside the scope. One whose type has a `&mut` in it
//!   (`(&T, &mut U)`) is named as not inspected: what the body stored through it cannot be
//!   searched after the body consumed it. An owned
//!   receiver (`self`, `self: Box<Self>`, `self: Arc<Self>`, ...) cannot be rebound under its
//!   name: the body takes all of it instead (see `take_self`), where a closure would capture
//!   only the fields it uses and leave the rest alive in the function until after the search.
//! - Owned handles that share their contents with the caller (`Arc`, `Rc`): a weak handle,
//!   taken before the body moves the argument, keeps what the caller still holds.
use crate::local;
use crate::rename_self;
use crate::types::{self, Receiver};
use proc_macro2::{Ident, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::visit_mut::VisitMut;
use syn::{Block, FnArg, Pat, ReturnType, Signature, Token, Type};

#[derive(Default)]
pub(crate) struct Args {
    /// Borrowed arguments and receivers, and whether each is a shared borrow.
    pub roots: Vec<Gated<(TokenStream, bool)>>,
    /// Statements that move the owned bindings into the body.
    pub rebinds: Vec<TokenStream>,
    /// Owned arguments that may be `Arc` or `Rc` handles.
    pub owned: Vec<Gated<TokenStream>>,
    /// Shared borrows the body may reassign: searched as a copy taken before it.
    pub copied: Vec<Gated<Ident>>,
    /// A `self: Pin<&mut Self>` or `&mut self` receiver that the body gets a reborrow of (see
    /// `rename_self`), so that the body may move it and it is still searched after.
    pub renamed_self: Option<RenamedSelf>,
    /// An owned receiver: the body takes it (see `take_self`).
    pub owned_self: Option<Token![self]>,
    /// `&mut` arguments that cannot be searched after the body (the return value may borrow
    /// from them, or they move into it), described for the report, which names them as not
    /// inspected.
    pub unsearched: Vec<Gated<String>>,
    /// Owned arguments whose type borrows from the caller (`ctx: Ctx<'_>`), described for the
    /// hint of a report with escapes: what the body stored through them cannot be searched.
    pub lending: Vec<Gated<String>>,
    /// The `#[cfg]` attributes of the argument being sorted.
    cfg: TokenStream,
    /// The names the arguments bind (`self` too): locals of the body.
    pub names: Vec<Ident>,
}

/// Something generated for an argument, with the argument's `#[cfg]` attributes (empty for
/// most): what names an argument that may not exist goes under the same condition.
pub(crate) struct Gated<T> {
    pub cfg: TokenStream,
    pub item: T,
}

impl Args {
    /// `item`, under the `#[cfg]` attributes of the argument being sorted.
    fn gated<T>(&self, item: T) -> Gated<T> {
        let cfg = self.cfg.clone();
        Gated { cfg, item }
    }
}

/// A receiver the body gets a reborrow of, under another name: `this` with the `mut` the user
/// wrote on it (the reborrow is as mutable); `pinned`: a `Pin<&mut Self>`.
pub(crate) struct RenamedSelf {
    pub this: Token![self],
    pub mutability: Option<Token![mut]>,
    pub pinned: bool,
}

/// Which `&mut` arguments the return value may borrow from, by how their lifetime is written,
/// and which the body may store for longer than itself.
#[derive(Clone, Copy)]
struct Borrows<'s> {
    /// A named one (`&'a mut T`): the return type may name it, or one it outlives.
    named: bool,
    /// An elided one (`&mut T`, `&'_ mut T`): nothing can name it, so only a lifetime the
    /// return type leaves to elision (`&T`, `'_`) can be it, or `impl Trait`, which captures
    /// every lifetime in scope.
    elided: bool,
    /// Named lifetimes the body may store a `&'a mut` argument under (see `storable`).
    stored: &'s Stored,
}

impl Borrows<'_> {
    fn from(self, lifetime: Option<&syn::Lifetime>) -> bool {
        match lifetime {
            Some(l) if l.ident != "_" => self.named,
            _ => self.elided,
        }
    }

    /// Whether a `&'a mut` argument may have to outlive the body: the body can store it under
    /// that lifetime elsewhere (`h: &mut Holder<'a>`, `f: impl FnOnce(&'a mut T)`), and
    /// then the argument cannot be searched after it.
    fn stored(self, lifetime: Option<&syn::Lifetime>) -> bool {
        lifetime.is_some_and(|l| self.stored.contains(l))
    }
}

/// The named lifetimes a `&'a mut` argument could be stored under: `'static`, one the
/// function does not declare (the `impl`'s, which `Self` may hold), and one named inside an
/// argument's type (not as the lifetime of the argument's own reference: `y: &'a Tensor` can
/// hold no `&'a mut`, `h: &mut Holder<'a>` can) or in the generics' bounds.
fn storable(sig: &Signature) -> Stored {
    use syn::visit::Visit;
    #[derive(Default)]
    struct Named(Vec<String>);
    impl Visit<'_> for Named {
        fn visit_lifetime(&mut self, l: &syn::Lifetime) {
            self.0.push(l.ident.to_string());
        }
    }
    let mut named = Named::default();
    for arg in &sig.inputs {
        let ty = match arg {
            FnArg::Receiver(r) => &r.ty,
            FnArg::Typed(t) => &t.ty,
        };
        let ty = types::strip_parens(ty);
        let pointee = match (types::option_of_reference(ty), ty) {
            (Some(r), _) | (None, Type::Reference(r)) => &*r.elem,
            (None, ty) => ty,
        };
        named.visit_type(pointee);
    }
    let mut declared = Vec::new();
    for param in &sig.generics.params {
        match param {
            syn::GenericParam::Lifetime(l) => {
                declared.push(l.lifetime.ident.to_string());
                l.bounds.iter().for_each(|b| named.visit_lifetime(b));
            }
            syn::GenericParam::Type(t) => t
                .bounds
                .iter()
                .for_each(|b| named.visit_type_param_bound(b)),
            syn::GenericParam::Const(_) => {}
        }
    }
    if let Some(w) = &sig.generics.where_clause {
        named.visit_where_clause(w);
    }
    Stored {
        named: named.0,
        declared,
    }
}

/// See `storable`.
struct Stored {
    /// Named inside an argument's type or in a bound.
    named: Vec<String>,
    /// Declared by the function.
    declared: Vec<String>,
}

impl Stored {
    fn contains(&self, lifetime: &syn::Lifetime) -> bool {
        let l = lifetime.ident.to_string();
        l == "static" || (l != "_" && (!self.declared.contains(&l) || self.named.contains(&l)))
    }
}

/// Sorts the arguments; moves `mut` from owned bindings in the signature to their rebinding,
/// and gives a pinned receiver the `mut` its reborrow needs.
pub(crate) fn classify(sig: &mut Signature, body: &Block, options: &TokenStream) -> Args {
    let (may_borrow, impl_trait, named, elided) = match &sig.output {
        ReturnType::Type(_, ty) => (
            types::may_borrow(ty),
            types::has_impl_trait(ty),
            types::has_named_lifetime(ty),
            types::has_elided_lifetime(ty),
        ),
        ReturnType::Default => (false, false, false, false),
    };
    // With a borrowed receiver (`&self`, `&mut self`, `self: Pin<&Self>`, ...), a return type
    // whose lifetimes are all elided borrows from the receiver only (lifetime elision): the
    // other arguments can be searched.
    let by_reference = sig
        .receiver()
        .is_some_and(|r| !matches!(types::receiver(&r.ty), Receiver::Owned));
    let stored = storable(sig);
    let receiver = Borrows {
        named: may_borrow,
        elided: impl_trait || elided,
        stored: &stored,
    };
    let others = Borrows {
        named: may_borrow && !(by_reference && !impl_trait && !named),
        elided: impl_trait || (elided && !by_reference),
        stored: &stored,
    };
    let body = body.to_token_stream();
    let uses = Uses {
        body: &body,
        options,
    };
    let mut args = Args::default();
    for arg in sig.inputs.iter_mut() {
        match arg {
            FnArg::Receiver(r) => {
                let this = r.self_token;
                // As written, and as renamed (`rename_self`).
                args.names.push(this.into());
                args.names.push(Ident::new(local::SELF, Span::call_site()));
                let lifetime = match types::strip_parens(&r.ty) {
                    Type::Reference(t) => t.lifetime.as_ref(),
                    _ => None,
                };
                let borrowed = receiver.from(lifetime);
                let stored = receiver.stored(lifetime);
                // `self` named in a format string (`"{self:?}"`) cannot be renamed: the body
                // then uses the receiver itself.
                let renamable = !rename_self::in_literal(&body);
                match types::receiver(&r.ty) {
                    Receiver::Borrowed { mutable } if mutable && stored && !borrowed => {
                        args.unsearched.push(args.gated(stored_elsewhere("self")))
                    }
                    Receiver::Borrowed { mutable } if !(mutable && borrowed) => {
                        args.roots.push(args.gated((quote!(#this), !mutable)));
                        // A body that moves `self` (`for t in self`) moves a reborrow.
                        if mutable && renamable && mentions(body.clone(), &this.into()) {
                            // `mut self: &mut Self`: the `mut` goes to the reborrow (in
                            // `&mut self`, it is the reference's).
                            let mutability = match r.reference {
                                None => r.mutability.take(),
                                Some(_) => None,
                            };
                            args.renamed_self = Some(RenamedSelf {
                                this,
                                mutability,
                                pinned: false,
                            });
                        }
                    }
                    // Unrenamed, the body moves the receiver, which then cannot be searched.
                    Receiver::PinnedMut if !may_borrow && renamable => {
                        // The reborrow is `Pin::as_mut(&mut self)`.
                        let mutability = r.mutability.replace(Default::default());
                        args.renamed_self = Some(RenamedSelf {
                            this,
                            mutability,
                            pinned: true,
                        });
                        args.roots.push(args.gated((quote!(#this), false)));
                    }
                    Receiver::PinnedMut if !may_borrow => args.unsearched.push(args.gated(
                        "`self` (a `Pin<&mut Self>` receiver named in a format string)".into(),
                    )),
                    Receiver::Owned => {
                        args.owned.push(args.gated(quote!(#this)));
                        args.owned_self = Some(this);
                    }
                    Receiver::Borrowed { .. } | Receiver::PinnedMut => {
                        args.unsearched.push(args.gated(borrowed_by_return("self")))
                    }
                }
            }
            FnArg::Typed(pt) => {
                // An argument under `#[cfg]` may not exist: what names it goes under the same
                // condition.
                let cfg = pt.attrs.iter().filter(|a| a.path().is_ident("cfg"));
                args.cfg = quote!(#(#cfg)*);
                args.names.extend(bound_names(&pt.pat));
                let before = args.rebinds.len();
                typed(&mut pt.pat, &pt.ty, others, uses, &mut args);
                lints_follow(&mut pt.attrs, &mut args.rebinds[before..]);
            }
        }
    }
    args
}

/// The lint attributes of an argument (`#[allow(unused_variables)] x: u32`) go with it onto
/// the statements that rebind it in the body, where rustc now checks its binding and its
/// `mut`: `allow`, `warn`, `deny` and `forbid` are copied, `expect` moved (the argument itself
/// is used by its rebinding, so an expectation left on it would go unfulfilled); so does
/// `cfg`, under which the argument exists.
fn lints_follow(attrs: &mut Vec<syn::Attribute>, rebinds: &mut [TokenStream]) {
    const LINTS: [&str; 6] = ["allow", "expect", "warn", "deny", "forbid", "cfg"];
    if rebinds.is_empty() {
        return;
    }
    let lints: Vec<syn::Attribute> = (attrs.iter())
        .filter(|a| LINTS.iter().any(|l| a.path().is_ident(l)))
        .cloned()
        .collect();
    attrs.retain(|a| !a.path().is_ident("expect"));
    for rebind in rebinds {
        *rebind = quote!(#(#lints)* #rebind);
    }
}

/// How the report names a `&mut` argument the return value may borrow from.
fn borrowed_by_return(name: impl std::fmt::Display) -> String {
    format!("`{name}` (a `&mut` argument the return value may borrow from)")
}

/// How the report names a `&'a mut` argument the body may store elsewhere.
fn stored_elsewhere(name: impl std::fmt::Display) -> String {
    format!("`{name}` (a `&mut` argument whose lifetime other arguments or bounds name)")
}

/// Sorts one typed argument, or one element of a tuple argument destructured in the signature
/// (`(x, cache): (&Tensor, &mut Vec<Tensor>)`), whose elements are sorted one by one.
fn typed(pat: &mut Pat, ty: &Type, borrows: Borrows, uses: Uses<'_>, args: &mut Args) {
    let ty = types::strip_parens(ty);
    // A tuple, or an array of a length written as a number up to 32 (`[a, b]: [Tensor; 2]`),
    // sorted element by element; what a `..` stands for is bound by `_`s, which the elements'
    // sorting moves into the body whole.
    let elements: Option<(_, Vec<&Type>)> = match (&mut *pat, ty) {
        (Pat::Tuple(p), Type::Tuple(t)) => Some((&mut p.elems, t.elems.iter().collect())),
        (Pat::Slice(p), Type::Array(t)) => {
            let len = match &t.len {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Int(n),
                    ..
                }) => n.base10_parse().ok(),
                _ => None,
            };
            len.filter(|&n| n <= 32)
                .map(|n| (&mut p.elems, vec![&*t.elem; n]))
        }
        _ => None,
    };
    if let Some((pats, tys)) = elements {
        if fill_rest(pats, tys.len()) {
            for (pat, ty) in pats.iter_mut().zip(tys) {
                typed(pat, ty, borrows, uses, args);
            }
            return;
        }
    }
    let name = match &*pat {
        Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => Some(p.ident.clone()),
        _ => None,
    };
    if let (Some(r), Some(name), Pat::Ident(p)) = (types::option_of_reference(ty), &name, &mut *pat)
    {
        if r.mutability.is_none() {
            // `Option<&T>` is `Copy`: the body copies it, and it is searched after.
            shared_root(p, name, uses, args);
            return;
        }
        // A named lifetime may have to outlive the body (stored in `self` or another argument):
        // such an argument moves into the body whole, as any owned one.
        let named = r.lifetime.as_ref().is_some_and(|l| l.ident != "_");
        if named || borrows.from(r.lifetime.as_ref()) {
            args.unsearched.push(args.gated(match named {
                true => format!("`{name}` (an `Option<&mut _>` argument with a named lifetime)"),
                false => borrowed_by_return(name),
            }));
        } else {
            // `Option<&mut T>`: the body gets a reborrow, so that it can be searched after.
            args.roots.push(args.gated((quote!(#name), false)));
            if !mentions(uses.body.clone(), name) {
                return;
            }
            let span = Span::mixed_site();
            let mutability = p.mutability.replace(Token![mut](span));
            args.rebinds.push(quote_spanned! {span=>
                let #mutability #name = ::core::option::Option::as_deref_mut(&mut #name);
            });
            return;
        }
    }
    match (ty, name) {
        (Type::Reference(r), Some(name)) => {
            if r.mutability.is_some() && borrows.from(r.lifetime.as_ref()) {
                args.unsearched.push(args.gated(borrowed_by_return(&name)));
                return;
            }
            if r.mutability.is_some() && borrows.stored(r.lifetime.as_ref()) {
                args.unsearched.push(args.gated(stored_elsewhere(&name)));
                return;
            }
            match (r.mutability, &*pat) {
                (None, Pat::Ident(p)) => shared_root(p, &name, uses, args),
                _ => args
                    .roots
                    .push(args.gated((quote!(#name), r.mutability.is_none()))),
            }
            if r.mutability.is_some() && mentions(uses.body.clone(), &name) {
                // The body gets a reborrow, so that moving it there (`for t in xs`) leaves
                // the argument to be searched after.
                if let Pat::Ident(p) = pat {
                    let mutability = p.mutability.take();
                    // The body may mention the name only as something else (`p.xs`): the
                    // borrow after it uses the reborrow, without a lint `allow` on a
                    // statement with the user's tokens (the user's `mut`, moved here, is
                    // still linted as on the argument).
                    // Two statements, each given the argument's `#[cfg]` (`lints_follow`).
                    let at = local::at(name.span());
                    args.rebinds
                        .push(quote_spanned!(at=> let #mutability #name = &mut *#name;));
                    args.rebinds.push(quote_spanned!(at=> let _ = &#name;));
                }
            }
        }
        // `_` and `&x` (a `Copy` pointee) hold nothing the body could have stored; `&mut
        // Wrap(ref mut t)` reaches into the caller's value, and is searched as below.
        (Type::Reference(_), None)
            if matches!(pat, Pat::Wild(_))
                || matches!(pat, Pat::Reference(_)) && binds_by_ref(pat).is_none() => {}
        (Type::Reference(r), None)
            if r.mutability.is_some() && borrows.from(r.lifetime.as_ref()) =>
        {
            let pat = types::shown(pat);
            args.unsearched.push(args.gated(borrowed_by_return(pat)));
        }
        (Type::Reference(r), None)
            if r.mutability.is_some() && borrows.stored(r.lifetime.as_ref()) =>
        {
            let pat = types::shown(pat);
            args.unsearched.push(args.gated(stored_elsewhere(pat)));
        }
        (Type::Reference(r), None) => {
            // Destructured in the signature (`Wrap(v): &mut Wrap`): bound under a name of its
            // own, destructured in the body (which reborrows through it), searched after.
            let span = Span::mixed_site();
            let name = local::arg(args.rebinds.len());
            let parts = std::mem::replace(pat, ident_pat(name.clone()));
            args.rebinds
                .push(quote_spanned!(span=> let #parts = #name;));
            args.roots
                .push(args.gated((quote!(#name), r.mutability.is_none())));
        }
        (_, name) => {
            // Its name without `mut`, or the pattern it is destructured by.
            let what = (name.as_ref()).map_or_else(|| types::shown(pat), ToString::to_string);
            if types::may_hold_mut(ty) {
                args.unsearched
                    .push(args.gated(format!("`{what}` (an owned argument with a `&mut` in it)")));
            } else if types::has_lifetime_argument(ty)
                || types::reaches_cell(ty)
                || types::is_nn_path(ty)
                || types::is_closure(ty)
            {
                let ty = types::shown(ty);
                args.lending.push(args.gated(format!("`{what}: {ty}`")));
            }
            let name = match name {
                Some(name) => name,
                // `_`, or destructured in the signature (`Pair(a, _): Pair`): bound whole under
                // a name of its own, moved into the body and destructured there, so that all
                // of it (the parts no binding takes too) dies inside the scope.
                None => {
                    let span = Span::mixed_site();
                    let whole = local::arg(args.rebinds.len());
                    let parts = std::mem::replace(pat, ident_pat(whole.clone()));
                    // `mut` for a `ref mut` binding in the parts (`Wrap(ref mut t): Wrap`).
                    args.rebinds.push(match binds_by_ref(&parts) == Some(true) {
                        true => quote_spanned!(span=> let mut #whole = #whole;),
                        false => quote_spanned!(span=> let #whole = #whole;),
                    });
                    if !matches!(parts, Pat::Wild(_)) {
                        args.rebinds
                            .push(quote_spanned!(span=> let #parts = #whole;));
                    }
                    args.owned.push(args.gated(quote!(#whole)));
                    return;
                }
            };
            args.owned.push(args.gated(quote!(#name)));
            Rebind {
                uses,
                rebinds: &mut args.rebinds,
            }
            .visit_pat_mut(pat);
        }
    }
}

/// The names `pat` binds.
fn bound_names(pat: &Pat) -> Vec<Ident> {
    struct Names(Vec<Ident>);
    impl<'ast> syn::visit::Visit<'ast> for Names {
        fn visit_pat_ident(&mut self, p: &'ast syn::PatIdent) {
            self.0.push(p.ident.clone());
            syn::visit::visit_pat_ident(self, p);
        }
    }
    let mut names = Names(Vec::new());
    syn::visit::Visit::visit_pat(&mut names, pat);
    names.0
}

/// Whether `pat` binds something by reference (`ref t`, `ref mut t`): then whether mutably.
fn binds_by_ref(pat: &Pat) -> Option<bool> {
    struct ByRef(Option<bool>);
    impl<'ast> syn::visit::Visit<'ast> for ByRef {
        fn visit_pat_ident(&mut self, p: &'ast syn::PatIdent) {
            if p.by_ref.is_some() {
                self.0 = Some(self.0 == Some(true) || p.mutability.is_some());
            }
            syn::visit::visit_pat_ident(self, p);
        }
    }
    let mut found = ByRef(None);
    syn::visit::Visit::visit_pat(&mut found, pat);
    found.0
}

/// Makes `pats` one pattern per element of a tuple or array of `len` elements, writing a
/// `..` as the `_`s it stands for; false where they cannot match (a pattern that does not
/// compile, left to rustc's error).
fn fill_rest(pats: &mut syn::punctuated::Punctuated<Pat, Token![,]>, len: usize) -> bool {
    let rests = pats.iter().filter(|p| matches!(p, Pat::Rest(_))).count();
    if rests > 1 || pats.len() - rests > len || rests == 0 && pats.len() != len {
        return false;
    }
    let filled = pats.iter().cloned().flat_map(|p| match p {
        Pat::Rest(rest) => {
            let wild = Pat::Wild(syn::PatWild {
                attrs: rest.attrs,
                underscore_token: Token![_](rest.dot2_token.spans[0]),
            });
            vec![wild; len + 1 - pats.len()]
        }
        p => vec![p],
    });
    *pats = filled.collect();
    true
}

fn ident_pat(ident: Ident) -> Pat {
    Pat::Ident(syn::PatIdent {
        attrs: Vec::new(),
        by_ref: None,
        mutability: None,
        ident,
        subpat: None,
    })
}

/// Makes the closure or async block of the body take an owned receiver whole, so that it dies
/// inside the scope like the other owned arguments. `self` cannot be rebound (`let self = self;`)
/// and renaming it would miss the `self` of format strings (`"{self:?}"`); instead, a move of
/// `self` on a path that is never taken makes the body capture all of it by value, without
/// changing what `self` is in the user's code. The body then drops it when it ends, before the
/// search (a closure's captures when it is called, an async block's when it completes). A
/// `Copy` receiver is captured by reference, and holds no tensor. The path returns by a call
/// (`never`), not a diverging expression, which would need a lint allowed.
pub(crate) fn take_self(this: Token![self], private: &TokenStream) -> TokenStream {
    let span = Span::mixed_site();
    let local = crate::local::local(crate::local::SELF, span);
    quote_spanned! {span=>
        if false {
            let #local = #this;
            return #private::never();
        }
    }
}

/// A shared borrow (`x: &T`, `x: Option<&T>`), searched after the body. One the body may
/// reassign (`mut x`, `x = &other`) is searched as a copy taken before the body: what the
/// caller passed.
fn shared_root(p: &syn::PatIdent, name: &Ident, uses: Uses<'_>, args: &mut Args) {
    if p.mutability.is_some() && mentions(uses.body.clone(), name) {
        args.copied.push(args.gated(name.clone()));
    } else {
        args.roots.push(args.gated((quote!(#name), true)));
    }
}

/// The tokens an argument may be used in: the body, and the options (evaluated before it).
#[derive(Clone, Copy)]
struct Uses<'a> {
    body: &'a TokenStream,
    options: &'a TokenStream,
}

/// Collects `let [mut] x = x;` for each by-value binding of an owned argument's pattern,
/// taking the `mut` off the pattern: the binding in the body is the one that is mutated (and
/// linted: one nothing uses is an unused variable, as on a plain function). One only the
/// options use moves in under a generated name (its drop may allocate, and runs inside the
/// scope), where it is not linted as unused.
struct Rebind<'a> {
    uses: Uses<'a>,
    rebinds: &'a mut Vec<TokenStream>,
}

impl VisitMut for Rebind<'_> {
    fn visit_pat_ident_mut(&mut self, p: &mut syn::PatIdent) {
        if p.by_ref.is_none() {
            let span = Span::mixed_site();
            let ident = &p.ident;
            let in_options = mentions(self.uses.options.clone(), ident);
            let rebind = if !in_options || mentions(self.uses.body.clone(), ident) {
                let mutability = p.mutability.take();
                quote_spanned!(span=> let #mutability #ident = #ident;)
            } else {
                let moved = local::arg(self.rebinds.len());
                quote_spanned!(span=> let #moved = #ident;)
            };
            self.rebinds.push(rebind);
        }
        syn::visit_mut::visit_pat_ident_mut(self, p);
    }
}

/// Whether `ident` occurs anywhere in `tokens`, macro calls included.
pub(crate) fn mentions(tokens: TokenStream, ident: &Ident) -> bool {
    tokens.into_iter().any(|tt| match tt {
        TokenTree::Ident(i) => i == *ident,
        TokenTree::Group(g) => mentions(g.stream(), ident),
        _ => false,
    })
}
