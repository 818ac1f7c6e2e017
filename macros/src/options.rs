//! The options of `#[gpu_scope(...)]` and `scope!(..., { ... })`, parsed into typed values: the
//! same words in both forms. Which option suits which form is for `valid.rs` to say.
use crate::size::{parse_size, unit_meant};
use proc_macro2::{Span, TokenStream};
use syn::parse::ParseStream;
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, Lit, LitStr, Token};

/// Every option's name, for the block macro's error without a block.
pub(crate) const NAMES: [&str; 8] = [
    "name",
    "on_escape",
    "release",
    "max_peak",
    "keep_grad",
    "device",
    "keep",
    "crate",
];

mod kw {
    syn::custom_keyword!(name);
    syn::custom_keyword!(on_escape);
    syn::custom_keyword!(release);
    syn::custom_keyword!(max_peak);
    syn::custom_keyword!(keep_grad);
    syn::custom_keyword!(device);
    syn::custom_keyword!(keep);
}

const VALID: &str = "valid options: `name = \"...\"`, \
`on_escape = panic | warn | error | ignore`, \
`release = outermost | always | never | \"<size>\"` or a `ReleasePolicy` expression, \
`max_peak = \"<size>\"` (e.g. \"2 GiB\") or an integer expression in bytes, \
`keep_grad` (or `keep_grad = true | false` or a `bool` expression), `device = <expr>`, \
`crate = path` (where gpu-scope is renamed or re-exported)";
const VALID_BLOCK: &str = ", and in `scope!` only `keep = [place, ...]`";

/// Which macro the options belong to: the block form stops before its block.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    Attribute,
    Block,
}

/// An option as written: where its key is, and its value.
pub(crate) struct Given<T> {
    pub key: Span,
    pub value: T,
}

pub(crate) enum Name {
    /// A string literal: `'static`, used as is.
    Literal(LitStr),
    /// Any other expression; the scope copies the string, so it may borrow.
    Expr(Box<Expr>),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Policy {
    Panic,
    Warn,
    Error,
    Ignore,
}

#[derive(Clone)]
pub(crate) enum Release {
    Outermost,
    Always,
    Never,
    Above(u64),
    /// A `ReleasePolicy` expression (a call, a path, a block), evaluated when the scope is
    /// entered.
    Expr(Box<Expr>),
}

pub(crate) enum KeepGrad {
    /// `keep_grad`, `keep_grad = true | false`.
    Is(bool),
    /// A `bool` expression, evaluated when the scope is entered.
    Expr(Box<Expr>),
}

pub(crate) enum Bytes {
    /// A size string such as `"2 GiB"`, parsed here.
    Size(u64),
    /// An integer expression, evaluated when the scope is entered.
    Expr(Box<Expr>),
}

#[derive(Default)]
pub(crate) struct Options {
    pub name: Option<Given<Name>>,
    pub on_escape: Option<Given<Policy>>,
    pub release: Option<Given<Release>>,
    pub max_peak: Option<Given<Bytes>>,
    pub keep_grad: Option<Given<KeepGrad>>,
    pub device: Option<Given<Expr>>,
    pub keep: Option<Given<Vec<Expr>>>,
    /// Where the generated code finds gpu-scope: a re-export (a renamed dependency is found
    /// without it).
    pub krate: Option<Given<syn::Path>>,
}

impl Options {
    pub(crate) fn policy(&self) -> Option<Policy> {
        self.on_escape.as_ref().map(|p| p.value)
    }

    /// The runtime's hidden module as the generated code names it: see [`private`].
    pub(crate) fn private(&self, span: Span) -> TokenStream {
        private(self.krate(), span)
    }

    /// The path `crate = path` gave.
    pub(crate) fn krate(&self) -> Option<&syn::Path> {
        self.krate.as_ref().map(|k| &k.value)
    }

    /// Parses a comma-separated option list; in the block form it stops before the block.
    pub(crate) fn parse(input: ParseStream, form: Form) -> syn::Result<Options> {
        let mut options = Options::default();
        let at_end = |input: ParseStream| {
            input.is_empty() || (form == Form::Block && input.peek(syn::token::Brace))
        };
        while !at_end(input) {
            options.parse_one(input, form)?;
            if input.is_empty() {
                break;
            }
            if at_end(input) {
                return Err(input.error(
                    "expected `,` between the options and the block: write \
                     `scope!(name = \"step\", { ... })`",
                ));
            }
            if !input.peek(Token![,]) {
                return Err(input.error(
                    "expected `,` after the option: options are written `key = value` and \
                     separated by commas (`name = \"step\", keep_grad = true`)",
                ));
            }
            input.parse::<Token![,]>()?;
            if input.peek(Token![,]) {
                return Err(input.error("two commas in a row: remove one"));
            }
        }
        Ok(options)
    }

    fn parse_one(&mut self, input: ParseStream, form: Form) -> syn::Result<()> {
        let look = input.lookahead1();
        if look.peek(kw::name) {
            let key = input.parse::<kw::name>()?.span;
            set(&mut self.name, key, "name", || {
                equals(input, key, "name = \"step\"")?;
                Ok(match input.parse::<Expr>()? {
                    Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(lit),
                        ..
                    }) => Name::Literal(lit),
                    Expr::Lit(lit) => {
                        return Err(syn::Error::new_spanned(
                            lit,
                            "a scope's name is a string: write `name = \"step\"` (or a \
                             string expression such as `name = format!(\"step {i}\")`)",
                        ))
                    }
                    expr => Name::Expr(Box::new(expr)),
                })
            })
        } else if look.peek(kw::on_escape) {
            let key = input.parse::<kw::on_escape>()?.span;
            set(&mut self.on_escape, key, "on_escape", || {
                equals(input, key, "on_escape = panic | warn | error | ignore")?;
                parse_policy(input)
            })
        } else if look.peek(kw::release) {
            let key = input.parse::<kw::release>()?.span;
            set(&mut self.release, key, "release", || {
                equals(
                    input,
                    key,
                    "release = outermost | always | never | \"<size>\"",
                )?;
                parse_release(input)
            })
        } else if look.peek(kw::max_peak) {
            let key = input.parse::<kw::max_peak>()?.span;
            set(&mut self.max_peak, key, "max_peak", || {
                equals(input, key, "max_peak = \"1.5 GiB\"")?;
                let value = input.parse::<Expr>()?;
                // `max_peak = 1 KiB`: a unit after a number.
                let unit = input.fork().parse::<syn::Ident>().ok();
                let meant = unit.and_then(|u| Some((unit_meant(&u.to_string())?, u.span())));
                if let Some((unit, span)) = meant {
                    let text = quote::ToTokens::to_token_stream(&value);
                    return Err(syn::Error::new(
                        span,
                        format!(
                            "a size with a unit is a string: write `max_peak = \"{text} {unit}\"`"
                        ),
                    ));
                }
                // `max_peak = 2^30`: XOR of two numbers, not a power.
                if let Expr::Binary(
                    b @ syn::ExprBinary {
                        op: syn::BinOp::BitXor(_),
                        ..
                    },
                ) = &value
                {
                    if [&*b.left, &*b.right].iter().all(|e| is_literal(e)) {
                        return Err(syn::Error::new_spanned(
                            value,
                            "`^` is XOR in Rust, not a power: write `max_peak = 1 << 30` or \
                             `max_peak = \"1 GiB\"`",
                        ));
                    }
                }
                Ok(match string_literal(&value) {
                    Some(lit) => Bytes::Size(size_literal(lit, "")?),
                    None => Bytes::Expr(Box::new(value)),
                })
            })
        } else if look.peek(kw::keep_grad) {
            let key = input.parse::<kw::keep_grad>()?.span;
            set(&mut self.keep_grad, key, "keep_grad", || {
                if !input.peek(Token![=]) {
                    return Ok(KeepGrad::Is(true));
                }
                input.parse::<Token![=]>()?;
                if no_value(input) {
                    return Err(needs_value(key, "keep_grad = true | false"));
                }
                let wrong = |span| {
                    syn::Error::new(
                        span,
                        "write `keep_grad`, `keep_grad = true | false` or `keep_grad = <bool \
                         expression>`",
                    )
                };
                match input.parse::<Expr>().map_err(|e| wrong(e.span()))? {
                    Expr::Lit(syn::ExprLit {
                        lit: Lit::Bool(b), ..
                    }) => Ok(KeepGrad::Is(b.value)),
                    // `keep_grad = 1`, `= "yes"`: refused here rather than as a type error.
                    Expr::Lit(lit) => Err(wrong(lit.lit.span())),
                    // The docs' notation for a choice, a `bool` expression that is always true.
                    Expr::Binary(b)
                        if matches!(b.op, syn::BinOp::BitOr(_))
                            && is_literal(&b.left)
                            && is_literal(&b.right) =>
                    {
                        Err(syn::Error::new_spanned(
                            b,
                            "choose one: `keep_grad = true` or `keep_grad = false` (`true | \
                             false` is a `bool` expression, always true)",
                        ))
                    }
                    expr => Ok(KeepGrad::Expr(Box::new(expr))),
                }
            })
        } else if look.peek(kw::device) {
            let key = input.parse::<kw::device>()?.span;
            set(&mut self.device, key, "device", || {
                equals(input, key, "device = tch::Device::Cuda(0)")?;
                match input.parse::<Expr>()? {
                    // `device = "cuda"`: refused here rather than as a type error in our code.
                    Expr::Lit(lit) => Err(syn::Error::new_spanned(
                        lit,
                        "`device` takes an expression of type `tch::Device`, not a literal: write \
                         `device = tch::Device::Cuda(0)` (or `tch::Device::Cpu`)",
                    )),
                    expr => Ok(expr),
                }
            })
        } else if look.peek(Token![crate]) {
            let key = input.parse::<Token![crate]>()?.span;
            set(&mut self.krate, key, "crate", || {
                equals(input, key, "crate = my_gpu_scope")?;
                crate_path(input)
            })
        } else if look.peek(kw::keep) {
            let key = input.parse::<kw::keep>()?.span;
            set(&mut self.keep, key, "keep", || {
                equals(input, key, "keep = [cache, &x]")?;
                if !input.peek(syn::token::Bracket) {
                    return Err(
                        input.error("expected a list in square brackets: `keep = [cache, &x]`")
                    );
                }
                let content;
                syn::bracketed!(content in input);
                let list = Punctuated::<Expr, Token![,]>::parse_terminated(&content)?;
                Ok(list.into_iter().collect())
            })
        } else {
            let valid = match form {
                Form::Attribute => VALID.to_owned(),
                Form::Block => format!("{VALID}{VALID_BLOCK}"),
            };
            Err(match input.fork().parse::<proc_macro2::TokenTree>() {
                Ok(tt) if form == Form::Block && tt.to_string() == "async" => syn::Error::new(
                    tt.span(),
                    "`scope!` scopes a block of synchronous code; for async work put \
                     `#[gpu_scope]` on an `async fn`",
                ),
                Ok(tt) if form == Form::Block && tt.to_string() == "unsafe" => syn::Error::new(
                    tt.span(),
                    "`scope!` takes a plain block: write `scope!({ unsafe { ... } })`",
                ),
                Ok(proc_macro2::TokenTree::Literal(lit)) if lit.to_string().starts_with('"') => {
                    syn::Error::new(
                        lit.span(),
                        format!("a scope's name is an option: write `name = {lit}`"),
                    )
                }
                Ok(tt)
                    if form == Form::Block
                        && ["loop", "while", "for", "if", "match"].contains(&&*tt.to_string()) =>
                {
                    syn::Error::new(
                        tt.span(),
                        format!("`scope!` needs a block: put the code in braces, `scope!({{ {tt} ... }})`"),
                    )
                }
                Ok(tt) if form == Form::Block && tt.to_string() == "'" => syn::Error::new(
                    tt.span(),
                    "`scope!` takes an unlabelled block: write `scope!({ 'label: { ... } })`",
                ),
                Ok(tt) => syn::Error::new(tt.span(), format!("unknown option `{tt}`; {valid}")),
                Err(_) => {
                    let mut err = look.error();
                    err.combine(syn::Error::new(err.span(), valid));
                    err
                }
            })
        }
    }
}

/// `path::__private` for a path the user wrote (it resolves where it was written), else
/// `::name::__private` (at `span`), `name` being what the crate being compiled calls gpu-scope.
pub(crate) fn private(path: Option<&syn::Path>, span: Span) -> TokenStream {
    match path {
        // Shown at the path (a wrong one is an error there), with the generated code's
        // hygiene: lints such as `unused_qualifications` (the path where a glob import or the
        // module makes it longer than needed) are about the user's code only.
        Some(path) => {
            let tokens = quote::ToTokens::to_token_stream(path);
            let path: TokenStream = (tokens.into_iter())
                .map(|mut t| {
                    t.set_span(Span::mixed_site().located_at(t.span()));
                    t
                })
                .collect();
            let at = Span::mixed_site().located_at(syn::spanned::Spanned::span(&path));
            quote::quote_spanned!(at=> #path::__private)
        }
        None => {
            let name = Ident::new(&dependency_name(), span);
            quote::quote_spanned!(span=> ::#name::__private)
        }
    }
}

/// The name the crate being compiled gives gpu-scope in its `Cargo.toml`: `gs` for
/// `gs = { package = "gpu-scope", .. }` (read as `proc-macro-crate` reads it), else
/// `gpu_scope` (gpu-scope itself, whose examples and doctests name it so, or not listed).
fn dependency_name() -> String {
    match proc_macro_crate::crate_name("gpu-scope") {
        Ok(proc_macro_crate::FoundCrate::Name(name)) => name,
        _ => "gpu_scope".into(),
    }
}

/// The value of `crate = ...`: a path to gpu-scope (`gs`, `my_lib::gpu_scope`), also written
/// as a string (`"gs"`), as serde's and tokio's `crate` options are.
pub(crate) fn crate_path(input: ParseStream) -> syn::Result<syn::Path> {
    const WRITE: &str = "write the path gpu-scope is found at: `crate = my_lib::gpu_scope` where \
                         a crate re-exports it (a renamed dependency is found without it)";
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        lit.parse_with(syn::Path::parse_mod_style)
            .map_err(|_| syn::Error::new(lit.span(), WRITE))
    } else {
        let at = input.span();
        syn::Path::parse_mod_style(input).map_err(|_| syn::Error::new(at, WRITE))
    }
}

/// Fills `slot` with what `value` parses, unless the option was given already.
fn set<T>(
    slot: &mut Option<Given<T>>,
    key: Span,
    name: &str,
    value: impl FnOnce() -> syn::Result<T>,
) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            key,
            format!("option `{name}` is given twice; keep one"),
        ));
    }
    *slot = Some(Given {
        key,
        value: value()?,
    });
    Ok(())
}

fn parse_policy(input: ParseStream) -> syn::Result<Policy> {
    // An expression (`on_escape = cfg.policy`): not a misspelt word.
    let fork = input.fork();
    let ends = |f: ParseStream| f.is_empty() || f.peek(Token![,]) || f.peek(syn::token::Brace);
    if fork.parse::<Ident>().is_ok() && !ends(&fork) && !fork.peek(Token![::]) {
        let expr: Expr = input.parse()?;
        return Err(syn::Error::new_spanned(
            expr,
            "`on_escape` takes a bare word, not an expression: the policy is chosen where the \
             function is written (`error` changes what it returns); for one chosen at run time \
             set `GPU_SCOPE_ON_ESCAPE` (`panic | warn | ignore`), or open the scope with \
             `gpu_scope::scope(ScopeOptions::new(..).on_escape(policy), ..)`",
        ));
    }
    one_of(
        input,
        "write the policy as a bare word: `on_escape = panic | warn | error | ignore`",
        "escape policy",
        &[
            ("panic", Policy::Panic),
            ("warn", Policy::Warn),
            ("error", Policy::Error),
            ("ignore", Policy::Ignore),
        ],
        " (a policy chosen at run time: `GPU_SCOPE_ON_ESCAPE`, or `gpu_scope::scope` with \
         `ScopeOptions::on_escape`)",
    )
}

/// A literal, also one a `macro_rules!` fragment passed on (in an invisible group).
fn is_literal(expr: &Expr) -> bool {
    match expr {
        Expr::Lit(_) => true,
        Expr::Group(group) => is_literal(&group.expr),
        _ => false,
    }
}

/// A string literal, also one a `macro_rules!` fragment (`$size:literal`, `$size:expr`) passed
/// on: it arrives wrapped in an invisible group.
fn string_literal(expr: &Expr) -> Option<&LitStr> {
    match expr {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(lit),
            ..
        }) => Some(lit),
        Expr::Group(group) => string_literal(&group.expr),
        _ => None,
    }
}

fn parse_release(input: ParseStream) -> syn::Result<Release> {
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        let word = lit.value().trim().to_lowercase();
        if ["outermost", "always", "never"].contains(&word.as_str()) {
            return Err(syn::Error::new(
                lit.span(),
                format!("write the policy as a bare word: `release = {word}` (a string is a size)"),
            ));
        }
        let policies = ", or a policy: `release = outermost | always | never`";
        return size_literal(&lit, policies).map(Release::Above);
    }
    // A word alone is a policy (or a typo of one); anything longer an expression.
    let fork = input.fork();
    let word = fork.parse::<Ident>().is_ok();
    if word && fork.peek(Token![|]) && !fork.peek(Token![||]) {
        // The docs' notation for a choice (`release = outermost | always`).
        return Err(input.error(
            "choose one: `release = outermost`, `always`, `never` or a size such as \"1 GiB\"",
        ));
    }
    let word_alone =
        word && (fork.is_empty() || fork.peek(Token![,]) || fork.peek(syn::token::Brace));
    if !word_alone && !input.peek(syn::Lit) {
        return Ok(Release::Expr(Box::new(input.parse()?)));
    }
    one_of(
        input,
        "write `release = outermost | always | never | \"<size>\"`",
        "release policy",
        &[
            ("outermost", Release::Outermost),
            ("always", Release::Always),
            ("never", Release::Never),
        ],
        ", a size such as \"1 GiB\", or a `gpu_scope::ReleasePolicy` expression (a variable \
         in braces: `release = { policy }`)",
    )
}

/// A bare word among `words`; `write` says what to write where there is no word, and an
/// unknown word gets the list of choices (and `more`).
fn one_of<T: Clone>(
    input: ParseStream,
    write: &str,
    what: &str,
    words: &[(&str, T)],
    more: &str,
) -> syn::Result<T> {
    let word: Ident = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), write))?;
    // A path (`EscapePolicy::Warn`): the macro takes the bare word.
    if input.peek(Token![::]) {
        return Err(syn::Error::new(word.span(), write));
    }
    match words.iter().find(|(w, _)| word == w) {
        Some((_, value)) => Ok(value.clone()),
        None => {
            let choices: Vec<&str> = words.iter().map(|(w, _)| *w).collect();
            Err(syn::Error::new(
                word.span(),
                format!(
                    "unknown {what} `{word}`; write one of {}{more}",
                    choices.join(", ")
                ),
            ))
        }
    }
}

/// `more`: what else the option takes, after the sizes.
fn size_literal(lit: &LitStr, more: &str) -> syn::Result<u64> {
    parse_size(&lit.value()).map_err(|why| {
        syn::Error::new(
            lit.span(),
            format!(
                "bad size: {why}; write a number and a unit such as \"512 MiB\", \"1.5 GiB\", \
                 \"100 MB\" or plain bytes \"4096\"{more}"
            ),
        )
    })
}

/// The `=` after an option's name and the start of its value; else an error that shows the
/// option written out (`example`), at the key when no value follows it.
fn equals(input: ParseStream, key: Span, example: &str) -> syn::Result<()> {
    if input.peek(Token![=]) {
        input.parse::<Token![=]>()?;
    } else if !no_value(input) {
        return Err(input.error(format!("expected `=`: write `{example}`")));
    }
    if no_value(input) {
        return Err(needs_value(key, example));
    }
    Ok(())
}

/// Whether the option list ends here or the next option follows.
fn no_value(input: ParseStream) -> bool {
    input.is_empty() || input.peek(Token![,])
}

/// An option written without its value; `example` starts with the option's name.
fn needs_value(key: Span, example: &str) -> syn::Error {
    let name = example.split(' ').next().unwrap_or(example);
    syn::Error::new(
        key,
        format!("option `{name}` needs a value: write `{example}`"),
    )
}
