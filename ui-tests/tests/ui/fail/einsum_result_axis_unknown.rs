use fucina::prelude::*;

fn main() -> Result<()> {
    let x = Tensor::<axes![batch, in]>::zeros(&[2, 3])?;
    let w = Tensor::<axes![out, in]>::zeros(&[4, 3])?;
    let _y = einsum!(x, w; batch in, out in -> batch class)?;
    Ok(())
}
