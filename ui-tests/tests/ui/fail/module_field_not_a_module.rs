use fucina::prelude::*;

#[derive(Module)]
struct Mlp {
    w1: Tensor<axes![hidden, in]>,
    layers: usize,
}

fn main() {}
