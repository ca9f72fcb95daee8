use fucina::prelude::*;

fn main() -> Result<()> {
    let x = Tensor::<axes![batch, in]>::zeros(&[2, 3])?;
    let _y = einsum!(x, x, x; in ->)?;
    Ok(())
}
