//! The options of `#[gpu_scope(...)]` and `scope!(..., { ... })`: the same words in both.
use crate::size::parse_size;
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, LitStr, Token};

mod kw {
    syn::custom_keyword!(name);
    syn::custom_keyword!(on_escape);
    syn::custom_keyword!(release);
    syn::custom_keyword!(max_peak);
    syn::custom_keyword!(keep_grad);
    syn::custom_keyword!(device);
    syn::custom_keyword!(keep);
}

pub(crate) const VALID: &str = "valid options: `name = \"...\"`, \
`on_escape = panic | warn | error | ignore`, `release = outermost | always | never | \"<size>\"`, \
`max_peak = \"<size>\"` (e.g. \"2 GiB\") or an expression in bytes, `keep_grad`, `device = <expr>`";
const VALID_BLOCK: &str = ", and in `scope!` only `keep = [binding, ...]`";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Policy {
    Panic,
    Warn,
    Error,
    Ignore,
}

#[derive(Default)]
pub(crate) struct Options {
    pub name: Option<Expr>,
    pub on_escape: Option<(Policy, Span)>,
    pub release: Option<TokenStream>,
    pub max_peak: Option<TokenStream>,
    pub keep_grad: Option<Span>,
    pub device: Option<Expr>,
    pub keep: Vec<Expr>,
    pub keep_span: Option<Span>,
}

fn duplicate<T>(slot: &Option<T>, span: Span, key: &str) -> syn::Result<()> {
    match slot {
        Some(_) => Err(syn::Error::new(
            span,
            format!("option `{key}` is given twice; keep one"),
        )),
        None => Ok(()),
    }
}

fn size_literal(lit: &LitStr) -> syn::Result<u64> {
    parse_size(&lit.value()).map_err(|why| {
        syn::Error::new(
            lit.span(),
            format!(
                "bad size: {why}; write a number and a unit such as \"512 MiB\", \"2 GiB\", \
                 \"100 MB\" or plain bytes \"4096\""
            ),
        )
    })
}

impl Options {
    fn parse_one(&mut self, input: ParseStream, block: bool) -> syn::Result<()> {
        let look = input.lookahead1();
        if look.peek(kw::name) {
            let key: kw::name = input.parse()?;
            duplicate(&self.name, key.span, "name")?;
            input.parse::<Token![=]>()?;
            self.name = Some(input.parse()?);
        } else if look.peek(kw::on_escape) {
            let key: kw::on_escape = input.parse()?;
            duplicate(&self.on_escape, key.span, "on_escape")?;
            input.parse::<Token![=]>()?;
            let word: Ident = input.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "write the policy as a bare word: `on_escape = panic | warn | error | ignore`",
                )
            })?;
            let policy = match word.to_string().as_str() {
                "panic" => Policy::Panic,
                "warn" => Policy::Warn,
                "error" => Policy::Error,
                "ignore" => Policy::Ignore,
                _ => {
                    return Err(syn::Error::new(
                        word.span(),
                        format!(
                        "unknown escape policy `{word}`; write one of panic, warn, error, ignore"
                    ),
                    ))
                }
            };
            self.on_escape = Some((policy, word.span()));
        } else if look.peek(kw::release) {
            let key: kw::release = input.parse()?;
            duplicate(&self.release, key.span, "release")?;
            input.parse::<Token![=]>()?;
            let p = quote!(::gpu_scope::__private::ReleasePolicy);
            self.release = Some(if input.peek(LitStr) {
                let bytes = size_literal(&input.parse()?)?;
                quote!(#p::Above(#bytes))
            } else {
                let word: Ident = input.parse().map_err(|e| {
                    syn::Error::new(
                        e.span(),
                        "write `release = outermost | always | never | \"<size>\"`",
                    )
                })?;
                match word.to_string().as_str() {
                    "outermost" => quote!(#p::Outermost),
                    "always" => quote!(#p::Always),
                    "never" => quote!(#p::Never),
                    _ => {
                        return Err(syn::Error::new(
                            word.span(),
                            format!("unknown release policy `{word}`; write one of outermost, always, never, or a size such as \"1 GiB\""),
                        ))
                    }
                }
            });
        } else if look.peek(kw::max_peak) {
            let key: kw::max_peak = input.parse()?;
            duplicate(&self.max_peak, key.span, "max_peak")?;
            input.parse::<Token![=]>()?;
            self.max_peak = Some(if input.peek(LitStr) {
                let bytes = size_literal(&input.parse()?)?;
                quote!(#bytes)
            } else {
                let expr: Expr = input.parse()?;
                quote_spanned!(syn::spanned::Spanned::span(&expr)=> ::core::convert::Into::<u64>::into(#expr))
            });
        } else if look.peek(kw::keep_grad) {
            let key: kw::keep_grad = input.parse()?;
            duplicate(&self.keep_grad, key.span, "keep_grad")?;
            self.keep_grad = Some(key.span);
        } else if look.peek(kw::device) {
            let key: kw::device = input.parse()?;
            duplicate(&self.device, key.span, "device")?;
            input.parse::<Token![=]>()?;
            self.device = Some(input.parse()?);
        } else if block && look.peek(kw::keep) {
            let key: kw::keep = input.parse()?;
            duplicate(&self.keep_span, key.span, "keep")?;
            input.parse::<Token![=]>()?;
            let content;
            syn::bracketed!(content in input);
            let list = Punctuated::<Expr, Token![,]>::parse_terminated(&content)?;
            self.keep = list.into_iter().collect();
            self.keep_span = Some(key.span);
        } else if input.peek(kw::keep) {
            return Err(input.error(
                "`keep = [...]` is for `scope!` only; a function keeps what it returns, \
                 and `gpu_scope::keep(&value)` keeps anything else",
            ));
        } else {
            let valid = if block {
                format!("{VALID}{VALID_BLOCK}")
            } else {
                VALID.to_owned()
            };
            let mut err = look.error();
            if let Ok(tt) = input.fork().parse::<proc_macro2::TokenTree>() {
                err = syn::Error::new(tt.span(), format!("unknown option `{tt}`; {valid}"));
            } else {
                err.combine(syn::Error::new(err.span(), valid));
            }
            return Err(err);
        }
        Ok(())
    }

    /// Parses a comma-separated option list; in the block form it stops before the block.
    pub(crate) fn parse_list(input: ParseStream, block: bool) -> syn::Result<Options> {
        let mut options = Options::default();
        let at_end =
            |input: ParseStream| input.is_empty() || (block && input.peek(syn::token::Brace));
        while !at_end(input) {
            options.parse_one(input, block)?;
            if at_end(input) {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(options)
    }

    pub(crate) fn policy(&self) -> Option<Policy> {
        self.on_escape.map(|(p, _)| p)
    }

    /// A `ScopeOptions` expression; `default_name` is used when no `name` was given.
    pub(crate) fn build(&self, default_name: TokenStream, policy: Option<Policy>) -> TokenStream {
        let name = self
            .name
            .as_ref()
            .map(|n| quote!(#n))
            .unwrap_or(default_name);
        let mut out = quote!(::gpu_scope::__private::ScopeOptions::new(#name));
        if let Some(policy) = policy {
            let p = match policy {
                Policy::Panic => quote!(Panic),
                Policy::Warn => quote!(Warn),
                Policy::Error => quote!(Error),
                Policy::Ignore => quote!(Ignore),
            };
            out = quote!(#out.on_escape(::gpu_scope::__private::EscapePolicy::#p));
        }
        if let Some(r) = &self.release {
            out = quote!(#out.release(#r));
        }
        if let Some(b) = &self.max_peak {
            out = quote!(#out.max_peak(#b));
        }
        if self.keep_grad.is_some() {
            out = quote!(#out.keep_grad_mode(true));
        }
        if let Some(d) = &self.device {
            out = quote!(#out.device(#d));
        }
        out
    }
}

/// The attribute's arguments.
pub(crate) struct FnOptions(pub Options);

impl Parse for FnOptions {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        Options::parse_list(input, false).map(FnOptions)
    }
}
