use fucina::prelude::*;

fn main() -> Result<()> {
    let _x = Tensor::<axes![batch, hiden]>::zeros(&[2, 3])?;
    Ok(())
}
