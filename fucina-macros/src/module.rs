//! Expansion of `#[derive(Module)]`.

use proc_macro2::TokenStream as TokenStream2;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, GenericParam, LitStr};

struct FieldInfo {
    access: TokenStream2,
    name: String,
    span: proc_macro2::Span,
}

fn field_attrs(attrs: &[syn::Attribute]) -> syn::Result<(bool, Option<String>)> {
    let mut skip = false;
    let mut rename = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                skip = true;
                Ok(())
            } else if meta.path.is_ident("rename") {
                let lit: LitStr = meta.value()?.parse()?;
                rename = Some(lit.value());
                Ok(())
            } else {
                Err(meta.error("unknown #[module(...)] option: expected `skip` or `rename = \"...\"`"))
            }
        })?;
    }
    Ok((skip, rename))
}

/// The fields of one struct or variant that are parameters: how to reach each (a path
/// after `self.` for a struct, a binding name for a variant), its name, and its type.
fn collect_fields(fields: &Fields, binding: bool) -> syn::Result<Vec<(FieldInfo, syn::Type)>> {
    let mut out = Vec::new();
    let one_unnamed = matches!(fields, Fields::Unnamed(u) if u.unnamed.len() == 1);
    for (i, f) in fields.iter().enumerate() {
        let (skip, rename) = field_attrs(&f.attrs)?;
        if skip {
            continue;
        }
        let (access, default_name) = match &f.ident {
            Some(id) => {
                let raw = id.to_string();
                let plain = raw.strip_prefix("r#").unwrap_or(&raw).to_string();
                (quote!(#id), plain)
            }
            None if binding => {
                let b = format_ident!("__f{}", i);
                // A variant's single unnamed field is transparent: its parameters keep their names.
                (quote!(#b), if one_unnamed { String::new() } else { i.to_string() })
            }
            None => {
                let idx = syn::Index::from(i);
                (quote!(#idx), i.to_string())
            }
        };
        out.push((FieldInfo { access, name: rename.unwrap_or(default_name), span: f.ty.span() }, f.ty.clone()));
    }
    Ok(out)
}

/// Whether `ty` mentions one of the type parameters (then it needs a `Module` bound).
fn mentions(ty: &syn::Type, params: &[syn::Ident]) -> bool {
    fn walk(ts: TokenStream2, params: &[syn::Ident]) -> bool {
        ts.into_iter().any(|t| match t {
            proc_macro2::TokenTree::Ident(i) => params.contains(&i),
            proc_macro2::TokenTree::Group(g) => walk(g.stream(), params),
            _ => false,
        })
    }
    walk(quote!(#ty), params)
}

/// Writes the `Module` impl for a struct, or for an enum (the parameters of the variant it
/// holds; a variant's single unnamed field adds no name of its own).
pub fn expand(input: DeriveInput) -> syn::Result<TokenStream2> {
    let ident = &input.ident;
    let params: Vec<syn::Ident> = input
        .generics
        .params
        .iter()
        .filter_map(|p| if let GenericParam::Type(t) = p { Some(t.ident.clone()) } else { None })
        .collect();
    let prefix = format_ident!("__prefix");
    // One call per field and visitor: `Module::<method>(target, "prefix.name", __f);`.
    let call = |method: &str, f: &FieldInfo, target: TokenStream2| {
        let (name, m) = (&f.name, syn::Ident::new(method, f.span));
        quote_spanned! {f.span=>
            ::fucina::nn::Module::#m(#target, &::fucina::nn::join_name(#prefix, #name), __f);
        }
    };
    // The four visitor bodies over `fields` (params, params_mut, frozen, frozen_mut), each
    // field reached by `shared` (for `&self`) or `exclusive` (for `&mut self`).
    type Target<'a> = &'a dyn Fn(&FieldInfo) -> TokenStream2;
    let bodies = |fields: &[(FieldInfo, syn::Type)], shared: Target<'_>, exclusive: Target<'_>| {
        let each = |method: &str, target: Target<'_>| {
            let calls = fields.iter().map(|(f, _)| call(method, f, target(f)));
            quote!(#(#calls)*)
        };
        [
            each("visit_params", shared),
            each("visit_params_mut", exclusive),
            each("visit_frozen", shared),
            each("visit_frozen_mut", exclusive),
        ]
    };
    let mut bounded: Vec<syn::Type> = Vec::new();
    let [visit, visit_mut, frozen, frozen_mut] = match &input.data {
        Data::Struct(s) => {
            let fields = collect_fields(&s.fields, false)?;
            let shared = |f: &FieldInfo| {
                let acc = &f.access;
                quote_spanned!(f.span=> &self.#acc)
            };
            let exclusive = |f: &FieldInfo| {
                let acc = &f.access;
                quote_spanned!(f.span=> &mut self.#acc)
            };
            let out = bodies(&fields, &shared, &exclusive);
            bounded.extend(fields.into_iter().map(|(_, t)| t));
            out
        }
        Data::Enum(e) => {
            let mut arms: [Vec<TokenStream2>; 4] = Default::default();
            for var in &e.variants {
                let vid = &var.ident;
                let fields = collect_fields(&var.fields, true)?;
                let pattern = match &var.fields {
                    Fields::Named(n) => {
                        let ids: Vec<_> = n.named.iter().filter_map(|f| f.ident.clone()).collect();
                        let used: Vec<_> = fields.iter().map(|(f, _)| f.access.clone()).collect();
                        let rest: Vec<_> =
                            ids.iter().filter(|i| !used.iter().any(|u| u.to_string() == i.to_string())).collect();
                        quote!(#ident::#vid { #(#used,)* #(#rest: _,)* })
                    }
                    Fields::Unnamed(u) => {
                        let binds: Vec<_> = (0..u.unnamed.len())
                            .map(|i| {
                                let b = format_ident!("__f{}", i);
                                if fields.iter().any(|(f, _)| b == f.access.to_string()) {
                                    quote!(#b)
                                } else {
                                    quote!(_)
                                }
                            })
                            .collect();
                        quote!(#ident::#vid( #(#binds),* ))
                    }
                    Fields::Unit => quote!(#ident::#vid),
                };
                // The pattern binds each field by reference (shared or exclusive as `self` is).
                let bound = |f: &FieldInfo| {
                    let a = &f.access;
                    quote_spanned!(f.span=> #a)
                };
                for (arm, body) in arms.iter_mut().zip(bodies(&fields, &bound, &bound)) {
                    arm.push(quote!(#pattern => { #body }));
                }
                bounded.extend(fields.into_iter().map(|(_, t)| t));
            }
            if e.variants.is_empty() {
                std::array::from_fn(|_| quote!(match *self {}))
            } else {
                arms.map(|a| quote!(match self { #(#a)* }))
            }
        }
        Data::Union(u) => {
            return Err(syn::Error::new(
                u.union_token.span,
                "#[derive(Module)] supports structs and enums: a union cannot tell which field holds parameters",
            ))
        }
    };
    // Bound the field types that depend on type parameters (not the parameters themselves:
    // an axis parameter is no module), so `Linear<O, I>` needs nothing of `O` and `I`.
    let mut generics = input.generics.clone();
    let where_c = generics.make_where_clause();
    for ty in bounded.iter().filter(|t| mentions(t, &params)) {
        where_c.predicates.push(syn::parse_quote!(#ty: ::fucina::nn::Module));
    }
    let (impl_g, ty_g, where_c) = generics.split_for_impl();
    Ok(quote! {
        impl #impl_g ::fucina::nn::Module for #ident #ty_g #where_c {
            #[allow(unused_variables)]
            fn visit_params(&self, #prefix: &str, __f: &mut dyn FnMut(&str, &::fucina::RawTensor)) {
                #visit
            }
            #[allow(unused_variables)]
            fn visit_params_mut(&mut self, #prefix: &str, __f: &mut dyn FnMut(&str, ::fucina::nn::ParamMut<'_>)) {
                #visit_mut
            }
            #[allow(unused_variables)]
            fn visit_frozen(&self, #prefix: &str, __f: &mut dyn FnMut(&str, &dyn ::fucina::nn::FrozenWeight)) {
                #frozen
            }
            #[allow(unused_variables)]
            fn visit_frozen_mut(&mut self, #prefix: &str, __f: &mut dyn FnMut(&str, &mut dyn ::fucina::nn::FrozenWeight)) {
                #frozen_mut
            }
        }
    })
}
