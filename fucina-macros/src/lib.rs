//! Procedural macros for fucina: `axis!`, `axes!`, `einsum!` and `#[derive(Module)]`.
//!
//! The macros only rewrite syntax; every axis check that needs the operands'
//! types is done by trait resolution in `fucina::tensor::axes`, so the macros
//! stay small and the rules live in one place.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{DeriveInput, Ident, Token};

mod einsum;
mod module;

/// Keywords that may not even be written as raw identifiers.
const NOT_RAW: &[&str] = &["self", "Self", "super", "crate", "_"];

/// Every Rust keyword (strict, reserved and 2018+), which must be emitted as `r#name`.
const KEYWORDS: &[&str] = &[
    "as", "break", "const", "continue", "else", "enum", "extern", "false", "fn", "for", "if", "impl", "in", "let",
    "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "static", "struct", "trait", "true", "type",
    "unsafe", "use", "where", "while", "async", "await", "dyn", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "typeof", "unsized", "virtual", "yield", "try", "gen",
];

/// One axis name as written by the user (keywords allowed: `in`, `type`, ...).
#[derive(Clone)]
pub(crate) struct AxisName {
    pub name: String,
    pub span: Span,
}

impl AxisName {
    /// The identifier that names the axis type in the caller's scope.
    pub(crate) fn type_ident(&self) -> syn::Result<Ident> {
        if NOT_RAW.contains(&self.name.as_str()) {
            return Err(syn::Error::new(self.span, format!("`{}` cannot be used as an axis name", self.name)));
        }
        if KEYWORDS.contains(&self.name.as_str()) {
            Ok(Ident::new_raw(&self.name, self.span))
        } else {
            Ok(Ident::new(&self.name, self.span))
        }
    }
}

impl Parse for AxisName {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let ident = Ident::parse_any(input)?;
        let name = ident.to_string();
        let name = name.strip_prefix("r#").map(str::to_string).unwrap_or(name);
        Ok(AxisName { name, span: ident.span() })
    }
}

/// Fails with a readable message if an axis list names the same axis twice.
pub(crate) fn check_distinct(list: &[AxisName], what: &str) -> syn::Result<()> {
    for (i, a) in list.iter().enumerate() {
        if list[..i].iter().any(|b| b.name == a.name) {
            return Err(syn::Error::new(
                a.span,
                format!("duplicate axis `{}` in {what}: each axis may appear once", a.name),
            ));
        }
    }
    Ok(())
}

/// The tuple type `(a, b, c,)` naming an ordered list of axes.
pub(crate) fn tuple_type(list: &[AxisName]) -> syn::Result<TokenStream2> {
    let idents = list.iter().map(AxisName::type_ident).collect::<syn::Result<Vec<_>>>()?;
    Ok(quote! { ( #( #idents, )* ) })
}

struct AxisList(Vec<AxisName>);

impl Parse for AxisList {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let p = Punctuated::<AxisName, Token![,]>::parse_terminated(input)?;
        Ok(AxisList(p.into_iter().collect()))
    }
}

/// `axes![batch, in]`: the type naming an ordered set of axes, `(batch, r#in,)`.
///
/// Each name must be an axis type in scope (see `axis!`); a duplicate is a compile error.
#[proc_macro]
pub fn axes(input: TokenStream) -> TokenStream {
    let list = syn::parse_macro_input!(input as AxisList);
    let result = check_distinct(&list.0, "axes![...]").and_then(|_| tuple_type(&list.0));
    match result {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// Encodes an axis name as a typenum unsigned integer, 6 bits a character.
fn name_id_type(name: &str, span: Span) -> syn::Result<TokenStream2> {
    let mut bits: Vec<bool> = Vec::new();
    for ch in name.chars() {
        let code: u8 = match ch {
            'a'..='z' => ch as u8 - b'a' + 1,
            'A'..='Z' => ch as u8 - b'A' + 27,
            '0'..='9' => ch as u8 - b'0' + 53,
            '_' => 63,
            _ => {
                return Err(syn::Error::new(span, format!("axis name `{name}` must use ASCII letters, digits and `_`")))
            }
        };
        for i in (0..6).rev() {
            bits.push(code >> i & 1 == 1);
        }
    }
    // Strip leading zeros so the typenum value is canonical.
    let first = bits.iter().position(|b| *b).unwrap_or(bits.len());
    let mut ty = quote! { ::fucina::typenum::UTerm };
    for b in &bits[first..] {
        let bit = if *b { quote!(::fucina::typenum::B1) } else { quote!(::fucina::typenum::B0) };
        ty = quote! { ::fucina::typenum::UInt<#ty, #bit> };
    }
    Ok(ty)
}

struct AxisDecls(Vec<(syn::Visibility, AxisName)>);

impl Parse for AxisDecls {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut out = Vec::new();
        while !input.is_empty() {
            let vis: syn::Visibility = input.parse()?;
            let name: AxisName = input.parse()?;
            out.push((vis, name));
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(AxisDecls(out))
    }
}

/// `axis!(pub h1, pub class)`: declares axis types usable in `axes![...]`.
#[proc_macro]
pub fn axis(input: TokenStream) -> TokenStream {
    let decls = syn::parse_macro_input!(input as AxisDecls);
    let mut out = TokenStream2::new();
    for (vis, name) in decls.0 {
        let ident = match name.type_ident() {
            Ok(i) => i,
            Err(e) => return e.to_compile_error().into(),
        };
        let id = match name_id_type(&name.name, name.span) {
            Ok(t) => t,
            Err(e) => return e.to_compile_error().into(),
        };
        let lit = &name.name;
        let doc = format!("The `{lit}` axis.");
        out.extend(quote_spanned! {name.span=>
            #[doc = #doc]
            #[allow(non_camel_case_types)]
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
            #vis enum #ident {}
            impl ::fucina::tensor::axes::Axis for #ident {
                const NAME: &'static str = #lit;
                type Id = #id;
            }
            impl ::fucina::tensor::axes::AxisSet for #ident {
                type List = ::fucina::tensor::axes::Cons<#ident, ::fucina::tensor::axes::Nil>;
            }
        });
    }
    out.into()
}

/// `einsum!(x, w; in ->)` contracts by axis name; see `fucina`'s docs/DSL.md.
///
/// Forms: `einsum!(x, w; k ->)` and `einsum!(x, w; k -> out axes)` contract the listed axes
/// (the result's axes are computed from the operand types); `einsum!(x, w; a b, c b -> a c)`
/// states every operand's axes; `einsum!(x; a b -> b a)` permutes and sums one operand.
#[proc_macro]
pub fn einsum(input: TokenStream) -> TokenStream {
    let spec = syn::parse_macro_input!(input as einsum::EinsumInput);
    match spec.expand() {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// `#[derive(Module)]`: parameter listing, visiting, counting and naming for a struct or
/// an enum.
///
/// Every field must be a `Tensor`, a sub-module, or a `Vec`/array/`Option` of those;
/// mark other fields `#[module(skip)]`. An enum visits the variant it holds: named fields
/// by name, several unnamed fields by index, and a single unnamed field transparently (its
/// parameters keep their own names, so `Ffn::SwiGlu(mlp)` names `ffn.gate`, not `ffn.0.gate`).
/// Generic structs are bounded by their field types, so axis parameters need no bound.
#[proc_macro_derive(Module, attributes(module))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    match module::expand(input) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}
