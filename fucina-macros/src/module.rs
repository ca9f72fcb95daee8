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

/// Writes the `Module` impl for a struct.
pub fn expand(input: DeriveInput) -> syn::Result<TokenStream2> {
    let ident = &input.ident;
    let data = match &input.data {
        Data::Struct(s) => s,
        Data::Enum(e) => {
            return Err(syn::Error::new(
                e.enum_token.span,
                "#[derive(Module)] supports structs only: an enum has no fixed set of parameters",
            ))
        }
        Data::Union(u) => return Err(syn::Error::new(u.union_token.span, "#[derive(Module)] supports structs only")),
    };
    let mut fields = Vec::new();
    match &data.fields {
        Fields::Named(named) => {
            for f in &named.named {
                let (skip, rename) = field_attrs(&f.attrs)?;
                if skip {
                    continue;
                }
                let Some(id) = f.ident.as_ref() else { continue };
                let raw = id.to_string();
                let plain = raw.strip_prefix("r#").unwrap_or(&raw).to_string();
                fields.push(FieldInfo { access: quote!(#id), name: rename.unwrap_or(plain), span: f.ty.span() });
            }
        }
        Fields::Unnamed(unnamed) => {
            for (i, f) in unnamed.unnamed.iter().enumerate() {
                let (skip, rename) = field_attrs(&f.attrs)?;
                if skip {
                    continue;
                }
                let idx = syn::Index::from(i);
                fields.push(FieldInfo {
                    access: quote!(#idx),
                    name: rename.unwrap_or_else(|| i.to_string()),
                    span: f.ty.span(),
                });
            }
        }
        Fields::Unit => {}
    }

    let mut generics = input.generics.clone();
    for p in generics.params.iter_mut() {
        if let GenericParam::Type(t) = p {
            t.bounds.push(syn::parse_quote!(::fucina::nn::Module));
        }
    }
    let (impl_g, ty_g, where_c) = generics.split_for_impl();
    let prefix = format_ident!("__prefix");
    let visit = fields.iter().map(|f| {
        let (acc, name) = (&f.access, &f.name);
        quote_spanned! {f.span=>
            ::fucina::nn::Module::visit_params(&self.#acc, &::fucina::nn::join_name(#prefix, #name), __f);
        }
    });
    let visit_mut = fields.iter().map(|f| {
        let (acc, name) = (&f.access, &f.name);
        quote_spanned! {f.span=>
            ::fucina::nn::Module::visit_params_mut(&mut self.#acc, &::fucina::nn::join_name(#prefix, #name), __f);
        }
    });
    Ok(quote! {
        impl #impl_g ::fucina::nn::Module for #ident #ty_g #where_c {
            fn visit_params(&self, #prefix: &str, __f: &mut dyn FnMut(&str, &::fucina::RawTensor)) {
                #( #visit )*
            }
            fn visit_params_mut(&mut self, #prefix: &str, __f: &mut dyn FnMut(&str, ::fucina::nn::ParamMut<'_>)) {
                #( #visit_mut )*
            }
        }
    })
}
