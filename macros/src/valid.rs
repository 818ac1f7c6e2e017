//! One validation pass over what was parsed, before any code is generated: every misuse that the
//! options and the item show, reported together, each at its own tokens.
use crate::expand_options::{literal_arithmetic, literal_value};
use crate::input::{ScopedBlock, ScopedFn};
use crate::options::{Bytes, Given, Options, Policy};
use crate::types;
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{Expr, Lit, ReturnType, Signature, Type, UnOp};

/// Types that the `error` policy's return type cannot be, though they are paths.
const NOT_RESULTS: &[&str] = &[
    "Option", "bool", "char", "str", "String", "Vec", "Box", "f32", "f64", "i8", "i16", "i32",
    "i64", "i128", "isize", "u8", "u16", "u32", "u64", "u128", "usize",
];

const ERROR_POLICY_RETURN: &str = "`on_escape = error` makes the function return `Err` on an \
escape: it must return `Result<_, E>` with `E: From<gpu_scope::Error>`";

pub(crate) fn validate_fn(scoped: &ScopedFn) -> syn::Result<()> {
    let mut errors = Errors(None);
    let (options, sig) = (&scoped.options, &scoped.func.sig);
    validate_options(options, &mut errors);
    if let Some(keep) = &options.keep {
        errors.push(
            keep.key,
            "`keep = [...]` is for `scope!` only; a function keeps what it returns and its \
             arguments, and `gpu_scope::keep(&value)` keeps anything else",
        );
    }
    if let Some(c) = &sig.constness {
        errors.push(
            c.span,
            "#[gpu_scope] cannot go on a `const fn`: a scope tracks memory at run time; \
             remove `const` or the attribute",
        );
    }
    // Another `#[gpu_scope]` below this one (by its name; a renamed import is not seen).
    let again = scoped.func.attrs.iter().find(|a| {
        let last = a.path().segments.last();
        last.is_some_and(|s| s.ident == "gpu_scope")
    });
    if let Some(again) = again {
        errors.push_spanned(
            again,
            "#[gpu_scope] is given twice: one scope per function; for a scope inside the \
             function's, use `gpu_scope::scope!` in its body",
        );
    }
    if let (None, ReturnType::Type(_, ty)) = (&sig.asyncness, &sig.output) {
        if types::is_future(ty) {
            // `#[async_trait]` expands first, into a function returning a boxed future with a
            // lifetime of this name: the user wrote an `async fn`, and cannot write another.
            let async_trait = sig
                .generics
                .lifetimes()
                .any(|l| l.lifetime.ident == "async_trait");
            errors.push_spanned(
                ty,
                if async_trait {
                    ASYNC_TRAIT
                } else {
                    FUTURE_RETURN
                },
            );
        }
    }
    if let Some(pat) = untyped_closure_argument(&scoped.func) {
        errors.push_spanned(
            pat,
            "write this closure's argument types (`|x: &Tensor|`): inside #[gpu_scope] the \
             closure is made in the scope's own body, and rustc does not take them from the \
             `impl Fn` return type",
        );
    }
    match options.policy() {
        Some(Policy::Panic) if is_extern(sig) => errors.push_spanned(
            &sig.abi,
            "a panic cannot unwind out of an `extern` function; use `on_escape = warn`, \
             `on_escape = error` or `on_escape = ignore`",
        ),
        Some(Policy::Error) => validate_error_return(sig, &mut errors),
        _ => {}
    }
    errors.finish()
}

/// An untyped argument of a closure that the function returns as `impl Fn(&T)` (or `FnMut`,
/// `FnOnce`) with a borrowed argument: in the scope's body rustc infers one lifetime for it
/// rather than any, and says only that the closure is "not general enough".
fn untyped_closure_argument(func: &syn::ItemFn) -> Option<&syn::Pat> {
    let ReturnType::Type(_, ty) = &func.sig.output else {
        return None;
    };
    let Type::ImplTrait(it) = types::strip_parens(ty) else {
        return None;
    };
    let borrowed_argument = it.bounds.iter().any(|b| match b {
        syn::TypeParamBound::Trait(t) => t.path.segments.last().is_some_and(|s| {
            let callable = ["Fn", "FnMut", "FnOnce"].iter().any(|f| s.ident == f);
            let syn::PathArguments::Parenthesized(args) = &s.arguments else {
                return false;
            };
            callable && args.inputs.iter().any(types::has_elided_lifetime)
        }),
        _ => false,
    });
    let Some(syn::Stmt::Expr(Expr::Closure(closure), None)) = func.block.stmts.last() else {
        return None;
    };
    let untyped = closure
        .inputs
        .iter()
        .find(|p| !matches!(p, syn::Pat::Type(_)));
    untyped.filter(|_| borrowed_argument)
}

pub(crate) fn validate_block(scoped: &ScopedBlock) -> syn::Result<()> {
    let mut errors = Errors(None);
    validate_options(&scoped.options, &mut errors);
    for entry in scoped.options.keep.iter().flat_map(|k| &k.value) {
        if !is_place(entry) {
            errors.push_spanned(
                entry,
                "`keep` takes places: variables or fields (`cache`, `self.cache`, `*cache_ref`, \
                 `&x`), not a value computed here; keep the variable or field that holds the \
                 tensors (what a getter returns: `*model.cache()`), or bind the value first \
                 (`let kept = ...;` before `scope!`) and write `keep = [kept]`",
            );
        }
    }
    AwaitFinder(&mut errors).visit_block(&scoped.block);
    if let Some((at, message)) = never_ends(&scoped.block) {
        errors.push_spanned(at, message);
    }
    errors.finish()
}

/// The statement of a block that can only leave early, and what to write instead: its scope
/// would never be checked (and its value, `!`, is no `Tensors`).
fn never_ends(block: &syn::Block) -> Option<(&dyn ToTokens, String)> {
    if let Some(syn::Stmt::Expr(last @ Expr::Loop(l), _)) = block.stmts.last() {
        if !loop_ends(l) {
            return Some((
                last,
                "this block can only leave early (it ends in a `loop` that no `break` ends), so \
                 its scope would never be checked: open the scope inside the loop \
                 (`loop { scope!({ ... }) }`), or put the loop in a `#[gpu_scope]` function \
                 returning `!`"
                    .to_owned(),
            ));
        }
    }
    let (at, word) = block_leaves(block).filter(|(_, w)| *w != "panic")?;
    Some((
        at,
        format!(
            "this block always leaves with `{word}` before its end, so its scope would never be \
             checked (leaving early skips the check): end the block with its value and `{word}` \
             after the `scope!` (`let value = scope!({{ ... }});` then `{word}`)"
        ),
    ))
}

/// The `return`, `break` or `continue` by which a block always leaves the `scope!`, if it
/// does, or `panic` where every way out of it panics: a statement of it that always does (what
/// follows never runs). A panic is named only where nothing else leaves: a block that may
/// leave early or panic is never checked either.
fn block_leaves(block: &syn::Block) -> Option<Leaving<'_>> {
    let last = block.stmts.len().saturating_sub(1);
    block.stmts.iter().enumerate().find_map(|(at, s)| match s {
        // Under `#[cfg]` it may not be there, and the block go on to its value; as the last
        // statement, it is taken as there (nothing follows it; its value, `!`, has no
        // `Tensors`, and a block that leaves where it is compiled in is refused).
        _ if at != last && under_cfg(s) => None,
        syn::Stmt::Expr(e, _) => leaves(e),
        // `let x = return ..;` (not its `else`, which runs only sometimes).
        syn::Stmt::Local(l) => l.init.as_ref().and_then(|i| leaves(&i.expr)),
        syn::Stmt::Macro(m) if panics(&m.mac.path, PANICS) => Some((m, "panic")),
        _ => None,
    })
}

/// Whether a statement has a `#[cfg]` (or `#[cfg_attr]`, which may add one) among its outer
/// attributes, which come first in its tokens.
fn under_cfg(stmt: &syn::Stmt) -> bool {
    use proc_macro2::TokenTree;
    let tokens: Vec<TokenTree> = stmt.to_token_stream().into_iter().collect();
    tokens
        .chunks(2)
        .map_while(|pair| match pair {
            [TokenTree::Punct(p), TokenTree::Group(g)] if p.as_char() == '#' => Some(g.stream()),
            _ => None,
        })
        .any(|attr| {
            matches!(attr.into_iter().next(), Some(TokenTree::Ident(i)) if i == "cfg" || i == "cfg_attr")
        })
}

/// Where and how a block leaves: `return`, `break`, `continue` or `panic`.
type Leaving<'a> = (&'a dyn ToTokens, &'static str);

/// [`block_leaves`] for an expression: one that leaves or panics, a block or parentheses
/// around one, an `if` whose branches both leave, a `match` whose arms all do (a panic named
/// only where none leaves otherwise). Not through loops (a `break` there ends the loop),
/// closures or anything else.
fn leaves(expr: &Expr) -> Option<Leaving<'_>> {
    let early = |(_, word): &Leaving<'_>| *word != "panic";
    match expr {
        Expr::Macro(m) if panics(&m.mac.path, PANICS) => Some((expr, "panic")),
        Expr::Call(call) => match &*call.func {
            Expr::Path(p) if panics(&p.path, EXITS) => Some((expr, "panic")),
            _ => None,
        },
        Expr::Return(_) => Some((expr, "return")),
        Expr::Continue(_) => Some((expr, "continue")),
        // To a labelled block inside, it would be seen there (below): to a loop or block
        // around the `scope!`.
        Expr::Break(_) => Some((expr, "break")),
        Expr::Paren(p) => leaves(&p.expr),
        Expr::Group(g) => leaves(&g.expr),
        Expr::Unsafe(u) => block_leaves(&u.block),
        Expr::Block(b) => {
            // A `break` to its label (in a macro's input too) may leave it before what leaves
            // the `scope!`.
            match &b.label {
                Some(l) if has_label(b.block.to_token_stream(), &l.name.ident) => None,
                _ => block_leaves(&b.block),
            }
        }
        Expr::If(i) => {
            let (_, otherwise) = i.else_branch.as_ref()?;
            let then = block_leaves(&i.then_branch);
            let otherwise = leaves(otherwise)?;
            then.map(|then| if early(&then) { then } else { otherwise })
        }
        Expr::Match(m) => {
            let arms: Option<Vec<_>> = m.arms.iter().map(|a| leaves(&a.body)).collect();
            let arms = arms?;
            let early = arms.iter().copied().find(early);
            early.or(arms.first().copied())
        }
        _ => None,
    }
}

/// Whether the block ends by panicking or ending the process, which its scope sees as an
/// unchecked end: the standard panicking macros (`panic!`, `todo!`, `unimplemented!`,
/// `unreachable!`) or `process::exit`/`abort`, as its last statement. Its value is `!`, which
/// the expansion must not ask to implement `Tensors` (rustc's never-type fallback would make
/// that `()`, an error under `dependency_on_unit_never_type_fallback`, or `!` in edition 2024).
pub(crate) fn ends_in_panic(block: &syn::Block) -> bool {
    block_leaves(block).is_some_and(|(_, w)| w == "panic")
}

/// Whether `path` names one of `wanted`, as in the standard library, which may be written
/// first (`std::process::exit`).
fn panics(path: &syn::Path, wanted: &[&[&str]]) -> bool {
    let names: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    let from_std = match names.first().map(String::as_str) {
        Some("std" | "core") if names.len() > 1 => &names[1..],
        _ => &names[..],
    };
    wanted.iter().any(|w| from_std.iter().eq(w.iter()))
}

/// The standard macros that always panic.
const PANICS: &[&[&str]] = &[&["panic"], &["todo"], &["unimplemented"], &["unreachable"]];
/// The standard functions that end the process.
const EXITS: &[&[&str]] = &[&["process", "exit"], &["process", "abort"]];

/// Whether a `break` in the loop's body ends it: one without a label outside the loops nested
/// in it, or one naming its label (not one leaving a loop around the `scope!`). A macro there
/// might hold one its input does not show, except the standard and logging macros (whose input
/// is looked at as tokens); inside a nested loop, only through the label (labels are hygienic).
fn loop_ends(l: &syn::ExprLoop) -> bool {
    let mut finder = LoopBreak {
        label: l.label.as_ref().map(|l| &l.name.ident),
        nested: 0,
        found: false,
    };
    finder.visit_block(&l.body);
    finder.found
}

struct LoopBreak<'a> {
    label: Option<&'a proc_macro2::Ident>,
    /// How many loops around the current point are nested inside the one looked at.
    nested: usize,
    found: bool,
}

/// The standard and logging macros, which cannot break out of a loop but through their input.
const STD_MACROS: &[&str] = &[
    "assert",
    "assert_eq",
    "assert_ne",
    "dbg",
    "debug_assert",
    "debug_assert_eq",
    "debug_assert_ne",
    "debug",
    "eprint",
    "eprintln",
    "error",
    "event",
    "format",
    "format_args",
    "info",
    "matches",
    "panic",
    "print",
    "println",
    "todo",
    "trace",
    "unimplemented",
    "unreachable",
    "vec",
    "warn",
    "write",
    "writeln",
];

impl LoopBreak<'_> {
    fn nest(&mut self, visit: impl FnOnce(&mut Self)) {
        self.nested += 1;
        visit(self);
        self.nested -= 1;
    }
}

impl Visit<'_> for LoopBreak<'_> {
    fn visit_expr_break(&mut self, b: &syn::ExprBreak) {
        self.found |= match &b.label {
            None => self.nested == 0,
            Some(label) => self.label == Some(&label.ident),
        };
        syn::visit::visit_expr_break(self, b);
    }
    fn visit_expr_loop(&mut self, e: &syn::ExprLoop) {
        self.nest(|v| syn::visit::visit_expr_loop(v, e));
    }
    fn visit_expr_while(&mut self, e: &syn::ExprWhile) {
        self.nest(|v| syn::visit::visit_expr_while(v, e));
    }
    fn visit_expr_for_loop(&mut self, e: &syn::ExprForLoop) {
        // Its iterator is evaluated outside it.
        self.visit_expr(&e.expr);
        self.nest(|v| v.visit_block(&e.body));
    }
    // A `break` cannot leave these.
    fn visit_expr_async(&mut self, _: &syn::ExprAsync) {}
    fn visit_expr_closure(&mut self, _: &syn::ExprClosure) {}
    fn visit_item(&mut self, _: &syn::Item) {}
    fn visit_macro(&mut self, m: &syn::Macro) {
        let name = m.path.segments.last().map(|s| s.ident.to_string());
        let standard = name.is_some_and(|n| STD_MACROS.contains(&n.as_str()));
        self.found |= if self.nested > 0 {
            self.label
                .is_some_and(|label| has_label(m.tokens.clone(), label))
        } else {
            !standard || has_break(m.tokens.clone())
        };
    }
}

/// Whether `tokens` name the label `label` anywhere.
fn has_label(tokens: proc_macro2::TokenStream, label: &proc_macro2::Ident) -> bool {
    let mut quote = false;
    tokens.into_iter().any(|tt| {
        let found = match &tt {
            proc_macro2::TokenTree::Ident(i) => quote && i == label,
            proc_macro2::TokenTree::Group(g) => has_label(g.stream(), label),
            _ => false,
        };
        quote = matches!(&tt, proc_macro2::TokenTree::Punct(p) if p.as_char() == '\'');
        found
    })
}

/// Whether `tokens` hold a `break` anywhere.
fn has_break(tokens: proc_macro2::TokenStream) -> bool {
    tokens.into_iter().any(|tt| match tt {
        proc_macro2::TokenTree::Ident(i) => i == "break",
        proc_macro2::TokenTree::Group(g) => has_break(g.stream()),
        _ => false,
    })
}

/// Whether the function has a foreign ABI through which a panic must not unwind.
pub(crate) fn is_extern(sig: &Signature) -> bool {
    sig.abi.as_ref().is_some_and(|abi| {
        // `extern "C-unwind"` (and the other `-unwind` ABIs) lets a panic unwind.
        abi.name
            .as_ref()
            .is_none_or(|n| n.value() != "Rust" && !n.value().ends_with("-unwind"))
    })
}

fn validate_options(options: &Options, errors: &mut Errors) {
    let Some(Given {
        value: Bytes::Expr(expr),
        ..
    }) = &options.max_peak
    else {
        return;
    };
    const NEGATIVE: &str = "`max_peak` is a number of bytes and cannot be negative";
    // Worked out here, as the expansion works it out (expand_options.rs).
    if literal_arithmetic(expr) {
        match literal_value(expr) {
            Some(bytes) if bytes < 0 => errors.push_spanned(expr, NEGATIVE),
            Some(_) => {}
            None => errors.push_spanned(
                expr,
                "`max_peak`'s arithmetic has no value (a division by zero, or a shift by a \
                 negative amount or by 128 or more): write a number of bytes (one over u64::MAX \
                 means no limit), or a size string such as \"64 GiB\"",
            ),
        }
        return;
    }
    match strip_parens(expr) {
        Expr::Unary(e)
            if matches!(e.op, UnOp::Neg(_)) && matches!(strip_parens(&e.expr), Expr::Lit(_)) =>
        {
            errors.push_spanned(expr, NEGATIVE)
        }
        Expr::Lit(lit) if matches!(lit.lit, Lit::Float(_)) => errors.push_spanned(
            expr,
            "`max_peak` counts whole bytes: write an integer expression, or a size string such \
             as \"1.5 GiB\"",
        ),
        _ => {}
    }
}

/// A place expression as Rust has them (a path, a field or element, a dereference, or a
/// borrow of one of these): what `keep` borrows after the block. A field or element of a call
/// is one too (`self.model().cache`, `state.borrow().cache`: the call's reference is
/// dereferenced), and so, for all we can see, is a macro; a call, a literal or an operation
/// on its own is a value computed after the block.
fn is_place(expr: &Expr) -> bool {
    match strip_parens(expr) {
        Expr::Path(_) | Expr::Field(_) | Expr::Index(_) | Expr::Macro(_) => true,
        // `*cache_ref`, `*model.cache()`: a dereference is a place, whatever it dereferences.
        Expr::Unary(e) => matches!(e.op, UnOp::Deref(_)),
        Expr::Reference(e) => is_place(&e.expr),
        _ => false,
    }
}

pub(crate) fn strip_parens(mut expr: &Expr) -> &Expr {
    while let Expr::Paren(syn::ExprParen { expr: inner, .. })
    | Expr::Group(syn::ExprGroup { expr: inner, .. }) = expr
    {
        expr = inner;
    }
    expr
}

const FUTURE_RETURN: &str = "#[gpu_scope] on a function that returns a future would scope only \
the call that makes the future, not the work done when it is awaited; write it as an `async fn`, \
whose scope covers the whole future";

const ASYNC_TRAIT: &str = "#[gpu_scope] cannot scope an `#[async_trait]` method: async-trait \
turns it into a function that returns a boxed future before the scope sees it, and only the call \
that makes the future would be scoped; put the work in a `#[gpu_scope] async fn` (an inherent \
method or a free function) and await it from the trait method, or use Rust's own `async fn` in \
traits";

/// The return type must be able to carry the escape error: a `Result` (or an alias of one).
/// What cannot be one is refused here; a path that names no `Result` fails type checking.
fn validate_error_return(sig: &Signature, errors: &mut Errors) {
    let ty = match &sig.output {
        ReturnType::Default => return errors.push(sig.ident.span(), ERROR_POLICY_RETURN),
        ReturnType::Type(_, ty) => ty,
    };
    if let Type::ImplTrait(_) = types::strip_parens(ty) {
        return errors.push_spanned(
            ty,
            "`on_escape = error` needs a nameable `Result<_, E>` return type, not `impl Trait`",
        );
    }
    let named_other = match types::strip_parens(ty) {
        Type::Path(p) => {
            p.qself.is_none()
                && p.path
                    .segments
                    .last()
                    .is_some_and(|s| NOT_RESULTS.iter().any(|name| s.ident == name))
        }
        _ => true,
    };
    if named_other {
        errors.push_spanned(
            ty,
            format!("{ERROR_POLICY_RETURN}, not `{}`", types::shown(ty)),
        );
    }
}

/// Finds `.await` in the block itself (not in nested async blocks, closures or items).
struct AwaitFinder<'a>(&'a mut Errors);

impl Visit<'_> for AwaitFinder<'_> {
    fn visit_expr_await(&mut self, e: &syn::ExprAwait) {
        self.0.push(
            e.await_token.span(),
            "`.await` inside `scope!` cannot be tracked: a block scope lives on one thread \
             between two polls; put `#[gpu_scope]` on an `async fn` instead",
        );
        syn::visit::visit_expr_await(self, e);
    }
    fn visit_expr_async(&mut self, _: &syn::ExprAsync) {}
    fn visit_expr_closure(&mut self, _: &syn::ExprClosure) {}
    fn visit_item(&mut self, _: &syn::Item) {}
    /// A macro's input is tokens (`vec![x.await]`, `tokio::join!(..)`): looked at as tokens.
    fn visit_macro(&mut self, m: &syn::Macro) {
        if let Some(at) = await_in_tokens(m.tokens.clone()) {
            self.0.push(
                at,
                "`.await` inside `scope!` cannot be tracked (here inside a macro's input): a \
                 block scope lives on one thread between two polls; put `#[gpu_scope]` on an \
                 `async fn` instead",
            );
        }
    }
}

/// Where `.await` occurs in `tokens`, outside the `async` blocks and items among them (whose
/// `.await`s are their own): after one, the tokens go on being looked at; after an `async`
/// closure, whose body has no end the tokens show, they are not.
fn await_in_tokens(tokens: proc_macro2::TokenStream) -> Option<proc_macro2::Span> {
    use proc_macro2::{Delimiter, TokenTree};
    let mut dot = false;
    let mut tokens = tokens.into_iter();
    while let Some(tt) = tokens.next() {
        match &tt {
            TokenTree::Ident(i) if dot && i == "await" => return Some(i.span()),
            TokenTree::Ident(i) if i == "async" || i == "fn" || i == "impl" => loop {
                match tokens.next()? {
                    TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => break,
                    TokenTree::Punct(p) if i == "async" && p.as_char() == '|' => return None,
                    _ => {}
                }
            },
            TokenTree::Group(g) => {
                if let Some(at) = await_in_tokens(g.stream()) {
                    return Some(at);
                }
            }
            _ => {}
        }
        dot = matches!(&tt, TokenTree::Punct(p) if p.as_char() == '.');
    }
    None
}

/// Errors gathered in one pass, reported together.
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, span: proc_macro2::Span, message: impl std::fmt::Display) {
        self.add(syn::Error::new(span, message));
    }

    fn push_spanned(&mut self, tokens: &dyn quote::ToTokens, message: impl std::fmt::Display) {
        self.add(syn::Error::new_spanned(tokens, message));
    }

    fn add(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(first) => first.combine(error),
            None => self.0 = Some(error),
        }
    }

    fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}
