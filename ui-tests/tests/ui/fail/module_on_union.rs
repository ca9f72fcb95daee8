use fucina::prelude::*;

#[derive(Module)]
union Choice {
    a: f32,
    b: u32,
}

fn main() {}
