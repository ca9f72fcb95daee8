//! Parsing and expansion of `einsum!`.

use crate::{check_distinct, tuple_type, AxisName};
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::{Expr, Token};

/// A parsed `einsum!(operands; spec)` invocation.
pub struct EinsumInput {
    operands: Vec<Expr>,
    inputs: Vec<Vec<AxisName>>,
    output: Vec<AxisName>,
    arrow: Span,
}

fn parse_axis_run(input: ParseStream) -> syn::Result<Vec<AxisName>> {
    let mut list = Vec::new();
    while !input.is_empty() && !input.peek(Token![,]) && !input.peek(Token![->]) {
        list.push(input.parse::<AxisName>()?);
    }
    Ok(list)
}

impl Parse for EinsumInput {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut operands = Vec::new();
        loop {
            if input.is_empty() {
                return Err(input.error("einsum! expects `operands; spec`, e.g. `einsum!(x, w; in ->)`"));
            }
            operands.push(input.parse::<Expr>()?);
            if input.peek(Token![;]) {
                input.parse::<Token![;]>()?;
                break;
            }
            input
                .parse::<Token![,]>()
                .map_err(|e| syn::Error::new(e.span(), "einsum!: separate operands with `,` and end them with `;`"))?;
        }
        let mut inputs = vec![parse_axis_run(input)?];
        while input.peek(Token![,]) {
            input.parse::<Token![,]>()?;
            inputs.push(parse_axis_run(input)?);
        }
        if !input.peek(Token![->]) {
            return Err(syn::Error::new(input.span(), "einsum!: the spec needs `->`, e.g. `einsum!(x, w; in ->)`"));
        }
        let arrow = input.parse::<Token![->]>()?.spans[0];
        let output = parse_axis_run(input)?;
        if !input.is_empty() {
            return Err(input.error("einsum!: unexpected tokens after the result axes"));
        }
        Ok(EinsumInput { operands, inputs, output, arrow })
    }
}

fn minus(a: &[AxisName], others: &[&[AxisName]]) -> Vec<AxisName> {
    a.iter().filter(|x| !others.iter().any(|o| o.iter().any(|y| y.name == x.name))).cloned().collect()
}

fn span_of(list: &[AxisName], fallback: Span) -> Span {
    list.first().map(|a| a.span).unwrap_or(fallback)
}

impl EinsumInput {
    /// Checks the spec and writes the expansion.
    pub fn expand(self) -> syn::Result<TokenStream2> {
        match (self.operands.len(), self.inputs.len()) {
            (2, 1) => self.expand_contract(),
            (2, 2) => self.expand_explicit(),
            (1, 1) => self.expand_unary(),
            (n, _) if n > 2 => {
                Err(syn::Error::new(self.arrow, format!("einsum! takes one or two operands, found {n}")))
            }
            (n, m) => Err(syn::Error::new(
                self.arrow,
                format!(
                    "einsum!: {n} operand(s) need {} axis list(s) before `->` (or, with two operands, \
                     one list naming the axes to contract), found {m}",
                    n
                ),
            )),
        }
    }

    fn check_output_known(&self) -> syn::Result<()> {
        check_distinct(&self.output, "the einsum! result")?;
        for o in &self.output {
            if !self.inputs.iter().any(|l| l.iter().any(|a| a.name == o.name)) {
                return Err(syn::Error::new(
                    o.span,
                    format!("einsum!: result axis `{}` is not an axis of any operand", o.name),
                ));
            }
        }
        Ok(())
    }

    /// `einsum!(x, w; k1 k2 -> [out])`: contract the named axes, result axes from the types.
    fn expand_contract(self) -> syn::Result<TokenStream2> {
        let c = &self.inputs[0];
        if c.is_empty() {
            return Err(syn::Error::new(
                self.arrow,
                "einsum!: name the axes to contract before `->`, e.g. `einsum!(x, w; in ->)`",
            ));
        }
        check_distinct(c, "the contracted axes of einsum!")?;
        check_distinct(&self.output, "the einsum! result")?;
        for o in &self.output {
            if c.iter().any(|x| x.name == o.name) {
                return Err(syn::Error::new(
                    o.span,
                    format!("einsum!: axis `{}` is contracted, so it cannot appear in the result", o.name),
                ));
            }
        }
        let cty = tuple_type(c)?;
        let (x, w) = (&self.operands[0], &self.operands[1]);
        let sp = span_of(c, self.arrow);
        let call = quote_spanned! {sp=> ::fucina::Tensor::contract::<#cty, _>(__a, __b) };
        let tail = if self.output.is_empty() {
            call
        } else {
            let oty = tuple_type(&self.output)?;
            let osp = span_of(&self.output, self.arrow);
            quote_spanned! {osp=> #call.and_then(|__r| __r.permute::<#oty>()) }
        };
        Ok(quote! {{
            let __a = &(#x);
            let __b = &(#w);
            #tail
        }})
    }

    /// `einsum!(x, w; a b, c b -> a c)`: every operand's axes stated; checked against its type.
    fn expand_explicit(self) -> syn::Result<TokenStream2> {
        let (la, lb) = (&self.inputs[0], &self.inputs[1]);
        check_distinct(la, "the first einsum! operand")?;
        check_distinct(lb, "the second einsum! operand")?;
        self.check_output_known()?;
        let out = &self.output;
        let sum_a = minus(la, &[lb, out]);
        let sum_b = minus(lb, &[la, out]);
        let shared: Vec<AxisName> = la.iter().filter(|x| lb.iter().any(|y| y.name == x.name)).cloned().collect();
        let contracted = minus(&shared, &[out]);
        let (aty, bty, oty) = (tuple_type(la)?, tuple_type(lb)?, tuple_type(out)?);
        let cty = tuple_type(&contracted)?;
        let (x, w) = (&self.operands[0], &self.operands[1]);
        let reduce = |name: TokenStream2, list: &[AxisName]| -> syn::Result<TokenStream2> {
            if list.is_empty() {
                Ok(quote! { let #name = #name.clone(); })
            } else {
                let t = tuple_type(list)?;
                Ok(quote! { let #name = #name.sum::<#t>()?; })
            }
        };
        let ra = reduce(quote!(__a), &sum_a)?;
        let rb = reduce(quote!(__b), &sum_b)?;
        let spa = span_of(la, self.arrow);
        let spb = span_of(lb, self.arrow);
        let spo = span_of(out, self.arrow);
        let ta = quote_spanned! {spa=> &::fucina::Tensor<#aty> };
        let tb = quote_spanned! {spb=> &::fucina::Tensor<#bty> };
        let to = quote_spanned! {spo=> ::fucina::Result<::fucina::Tensor<#oty>> };
        Ok(quote! {{
            let __a: #ta = &(#x);
            let __b: #tb = &(#w);
            (|| -> #to {
                #ra
                #rb
                let __r = ::fucina::Tensor::contract::<#cty, _>(&__a, &__b)?;
                __r.permute::<#oty>()
            })()
        }})
    }

    /// `einsum!(x; a b -> b)`: sum the axes missing from the result, then permute.
    fn expand_unary(self) -> syn::Result<TokenStream2> {
        let la = &self.inputs[0];
        check_distinct(la, "the einsum! operand")?;
        self.check_output_known()?;
        let sum = minus(la, &[&self.output]);
        let (aty, oty) = (tuple_type(la)?, tuple_type(&self.output)?);
        let x = &self.operands[0];
        let spa = span_of(la, self.arrow);
        let ta = quote_spanned! {spa=> &::fucina::Tensor<#aty> };
        let body = if sum.is_empty() {
            quote! { __a.permute::<#oty>() }
        } else {
            let st = tuple_type(&sum)?;
            quote! { __a.sum::<#st>().and_then(|__r| __r.permute::<#oty>()) }
        };
        Ok(quote! {{
            let __a: #ta = &(#x);
            #body
        }})
    }
}
