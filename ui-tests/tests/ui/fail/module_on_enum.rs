use fucina::prelude::*;

#[derive(Module)]
enum Choice {
    A(Tensor<axes![hidden]>),
}

fn main() {}
