use fucina::prelude::*;

fn main() -> Result<()> {
    let x = Tensor::<axes![batch, hidden]>::zeros(&[2, 3])?;
    let _s = x.sum::<seq>()?;
    Ok(())
}
