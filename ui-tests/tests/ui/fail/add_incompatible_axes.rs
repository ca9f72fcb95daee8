use fucina::prelude::*;

fn main() -> Result<()> {
    let x = Tensor::<axes![batch, hidden]>::zeros(&[2, 3])?;
    let b = Tensor::<axes![out]>::zeros(&[3])?;
    let _y = x.add(&b)?;
    Ok(())
}
