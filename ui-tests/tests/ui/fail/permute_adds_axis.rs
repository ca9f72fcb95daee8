use fucina::prelude::*;

fn main() -> Result<()> {
    let x = Tensor::<axes![batch, hidden]>::zeros(&[2, 4])?;
    let _p = x.permute::<axes![hidden, batch, head]>()?;
    Ok(())
}
