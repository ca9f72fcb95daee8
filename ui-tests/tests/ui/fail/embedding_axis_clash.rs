use fucina::prelude::*;

fn main() -> Result<()> {
    let table = Tensor::<axes![vocab, hidden]>::zeros(&[10, 4])?;
    // The ids already have a `hidden` axis, so the lookup would duplicate it.
    let ids = Tensor::<axes![batch, hidden]>::from_vec(vec![0u32; 2], &[1, 2])?;
    let _e = table.embedding(&ids)?;
    Ok(())
}
