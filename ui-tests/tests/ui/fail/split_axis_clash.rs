use fucina::prelude::*;

fn main() {
    let x = Tensor::<axes![seq, hidden]>::zeros(&[2, 6]).unwrap();
    // `seq` is kept, so it cannot also be a part.
    let _ = x.split_axis::<hidden, axes![seq, head_dim]>(&[3, 2]);
}
