use fucina::prelude::*;

fn main() -> Result<()> {
    let _x = Tensor::<axes![batch, in, batch]>::zeros(&[2, 3, 2])?;
    Ok(())
}
