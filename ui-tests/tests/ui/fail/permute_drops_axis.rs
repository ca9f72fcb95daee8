use fucina::prelude::*;

fn main() -> Result<()> {
    let x = Tensor::<axes![batch, seq, hidden]>::zeros(&[2, 3, 4])?;
    let _p = x.permute::<axes![hidden, batch]>()?;
    Ok(())
}
