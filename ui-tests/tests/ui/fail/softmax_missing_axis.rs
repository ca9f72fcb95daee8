use fucina::prelude::*;

fn main() -> Result<()> {
    let x = Tensor::<axes![batch, class]>::zeros(&[2, 3])?;
    let _p = x.softmax::<vocab>()?;
    Ok(())
}
