//! What the macros are given, parsed: options and a function, or options and a block.
use crate::options::{Form, Options};
use proc_macro2::{Delimiter, Group, Ident, Spacing, Span, TokenStream, TokenTree};
use syn::parse::{Parse, ParseStream, Parser};
use syn::{Block, Item, ItemFn, Token, TraitItemFn};

/// `#[gpu_scope(options)] fn ...`
pub(crate) struct ScopedFn {
    pub options: Options,
    /// The options as written, to see which arguments they use.
    pub tokens: TokenStream,
    pub func: ItemFn,
}

/// Parses the attribute's arguments and its item; when both are wrong, both errors show.
pub(crate) fn parse_fn(args: TokenStream, item: TokenStream) -> syn::Result<ScopedFn> {
    let tokens = args.clone();
    let options = (|input: ParseStream| Options::parse(input, Form::Attribute)).parse2(args);
    match (options, parse_item(item)) {
        (Ok(options), Ok(func)) => Ok(ScopedFn {
            options,
            tokens,
            func,
        }),
        (Err(mut first), Err(second)) => {
            first.combine(second);
            Err(first)
        }
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => Err(e),
    }
}

/// A function with a syntax error in it (not an item the attribute refuses): rustc reports the
/// error in the tokens given back, and nothing of the macro's should show beside it.
pub(crate) fn is_broken_fn(item: &TokenStream) -> bool {
    let head_has_fn = item
        .clone()
        .into_iter()
        .take_while(|tt| !matches!(tt, TokenTree::Group(g) if g.delimiter() == Delimiter::Brace))
        .any(|tt| matches!(tt, TokenTree::Ident(i) if i == "fn"));
    head_has_fn
        && syn::parse2::<Item>(item.clone()).is_err()
        && syn::parse2::<TraitItemFn>(item.clone()).is_err()
}

/// The first of `async`, `await`, `dyn` and `try` that `item` uses as a name (`let async =
/// 1;`), which an edition 2015 crate allows and syn cannot read: rustc then finds no syntax
/// error in the item given back, and the function would run unscoped, unsaid. Found by
/// writing each one not in a keyword's place as a raw identifier (`r#async`): the item then
/// reads.
pub(crate) fn name_syn_cannot_read(item: &TokenStream) -> Option<Ident> {
    let mut found = Vec::new();
    let raw = as_raw_names(item.clone(), &mut found);
    (!found.is_empty() && !is_broken_fn(&raw)).then(|| found.swap_remove(0))
}

/// `tokens` with each of those words that is not in a keyword's place made raw, and the words.
fn as_raw_names(tokens: TokenStream, found: &mut Vec<Ident>) -> TokenStream {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let punct = |i: usize, c: char| match tokens.get(i) {
        Some(TokenTree::Punct(p)) => p.as_char() == c,
        _ => false,
    };
    // `::`, not the `:` after a name.
    let path_start = |i: usize| match tokens.get(i) {
        Some(TokenTree::Punct(p)) => p.as_char() == ':' && p.spacing() == Spacing::Joint,
        _ => false,
    };
    let brace = |i: usize| match tokens.get(i) {
        Some(TokenTree::Group(g)) => g.delimiter() == Delimiter::Brace,
        _ => false,
    };
    let ident = |i: usize, words: &[&str]| match tokens.get(i) {
        Some(TokenTree::Ident(w)) => words.is_empty() || words.iter().any(|k| w == k),
        _ => false,
    };
    let keyword = |i: usize, word: &str| match word {
        "await" => i > 0 && punct(i - 1, '.'),
        "async" => ident(i + 1, &["fn", "unsafe", "move"]) || punct(i + 1, '|') || brace(i + 1),
        "dyn" => ident(i + 1, &[]) || path_start(i + 1) || punct(i + 1, '\''),
        _ => punct(i + 1, '!') || brace(i + 1),
    };
    let mut out = Vec::with_capacity(tokens.len());
    for (i, tt) in tokens.iter().enumerate() {
        out.push(match tt {
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), as_raw_names(g.stream(), found));
                group.set_span(g.span());
                TokenTree::Group(group)
            }
            TokenTree::Ident(w) => {
                let word = w.to_string();
                if ["async", "await", "dyn", "try"].contains(&word.as_str()) && !keyword(i, &word) {
                    found.push(w.clone());
                    TokenTree::Ident(Ident::new_raw(&word, w.span()))
                } else {
                    tt.clone()
                }
            }
            _ => tt.clone(),
        });
    }
    out.into_iter().collect()
}

fn parse_item(item: TokenStream) -> syn::Result<ItemFn> {
    if let Ok(Item::Fn(func)) = syn::parse2(item.clone()) {
        return Ok(func);
    }
    Err(match syn::parse2::<TraitItemFn>(item.clone()) {
        Ok(decl) if decl.default.is_none() => syn::Error::new_spanned(
            &decl.sig,
            "#[gpu_scope] scopes a body, and this function declaration has none (a trait \
             method's declaration, or a function of an `extern` block); on a trait method, \
             put the attribute on the method in the `impl` of the trait (or on a default \
             body here)",
        ),
        _ => syn::Error::new_spanned(
            item.into_iter().take(3).collect::<TokenStream>(),
            "#[gpu_scope] goes on a function or method with a body; for a block inside a \
             function write `gpu_scope::scope!({ ... })`",
        ),
    })
}

/// `scope!(options, { block })`, with an optional comma after the block.
pub(crate) struct ScopedBlock {
    pub options: Options,
    pub block: Block,
}

const NEEDS_BLOCK: &str =
    "`scope!` needs a block: write `scope!({ ... })` or `scope!(name = \"step\", { ... })`";

impl Parse for ScopedBlock {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        // Without a block anywhere, say so first (rather than find fault with the options).
        let tokens: TokenStream = input.fork().parse()?;
        let any_block = tokens
            .clone()
            .into_iter()
            .any(|tt| matches!(tt, TokenTree::Group(g) if g.delimiter() == Delimiter::Brace));
        let options = match Options::parse(input, Form::Block) {
            Err(_) if !any_block => return Err(no_block(tokens)),
            options => options?,
        };
        if !input.peek(syn::token::Brace) {
            return Err(input.error(NEEDS_BLOCK));
        }
        if has_inner_attribute(input) {
            return Err(input.error(
                "a `scope!` block takes no inner attributes (`#![...]`): put them on the \
                 function around it, or an outer `#[...]` on a statement of the block",
            ));
        }
        let block = input.parse()?;
        if input.peek(Token![,]) {
            input.parse::<Token![,]>()?;
        }
        if !input.is_empty() {
            return Err(input.error(
                "nothing may follow the block in `scope!(..., { ... })`: options go before it, \
                 `scope!(name = \"step\", { ... })`",
            ));
        }
        Ok(ScopedBlock { options, block })
    }
}

/// The error for `scope!` without a block: at the code after the last comma where that is not
/// an option (`scope!(name = "a", x + 1)`), else at the whole call.
fn no_block(tokens: TokenStream) -> syn::Error {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    // The last part that is not empty: a comma may end the list.
    let last = tokens
        .rsplit(|tt| matches!(tt, TokenTree::Punct(p) if p.as_char() == ','))
        .find(|part| !part.is_empty())
        .unwrap_or_default();
    let option = |tt: &TokenTree| matches!(tt, TokenTree::Ident(i) if crate::options::NAMES.iter().any(|o| i == o));
    match last.first() {
        Some(first) if !option(first) => syn::Error::new_spanned(
            last.iter().cloned().collect::<TokenStream>(),
            "`scope!` needs a block: put the code in braces, `scope!(name = \"step\", { ... })`",
        ),
        _ => syn::Error::new(Span::call_site(), NEEDS_BLOCK),
    }
}

/// Whether the block ahead opens with an inner attribute (`{ #![allow(..)] ... }`).
fn has_inner_attribute(input: ParseStream) -> bool {
    let opens = |input: ParseStream| -> syn::Result<bool> {
        let content;
        syn::braced!(content in input);
        Ok(content.peek(Token![#]) && content.peek2(Token![!]))
    };
    opens(&input.fork()).unwrap_or(false)
}
