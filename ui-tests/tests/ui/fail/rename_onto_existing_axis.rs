use fucina::prelude::*;

fn main() -> Result<()> {
    let x = Tensor::<axes![seq, kv_seq]>::zeros(&[2, 4])?;
    let _r = x.rename::<seq, kv_seq>()?;
    Ok(())
}
