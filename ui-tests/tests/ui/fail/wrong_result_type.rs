use fucina::prelude::*;

fn main() -> Result<()> {
    let x = Tensor::<axes![batch, in]>::zeros(&[2, 3])?;
    let w = Tensor::<axes![out, in]>::zeros(&[4, 3])?;
    // Contracting `in` gives [batch, out], not [out, batch].
    let _y: Tensor<axes![out, batch]> = einsum!(x, w; in ->)?;
    Ok(())
}
