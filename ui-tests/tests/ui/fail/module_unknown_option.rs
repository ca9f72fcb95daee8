use fucina::prelude::*;

#[derive(Module)]
struct Mlp {
    #[module(freeze)]
    w1: Tensor<axes![hidden, in]>,
}

fn main() {}
