use fucina::prelude::*;

fn main() -> Result<()> {
    let x = Tensor::<axes![batch, in]>::zeros(&[2, 3])?;
    let w = Tensor::<axes![out, in]>::zeros(&[4, 3])?;
    // The spec says x is [in, batch], but its type is [batch, in].
    let _y = einsum!(x, w; in batch, out in -> batch out)?;
    Ok(())
}
