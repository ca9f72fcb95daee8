// Every einsum! form, with the result types written out.
use fucina::prelude::*;

fn main() -> Result<()> {
    let x = Tensor::<axes![batch, seq, in]>::ones(&[2, 3, 4])?;
    let w = Tensor::<axes![out, in]>::ones(&[5, 4])?;
    let q = Tensor::<axes![batch, seq, head_dim]>::ones(&[2, 3, 8])?;
    let k = Tensor::<axes![batch, kv_seq, head_dim]>::ones(&[2, 6, 8])?;
    let a: Tensor<axes![batch, seq, out]> = einsum!(x, w; in ->)?;
    let b: Tensor<axes![out, batch, seq]> = einsum!(x, w; in -> out batch seq)?;
    let c: Tensor<axes![batch, out]> = einsum!(x, w; batch seq in, out in -> batch out)?;
    let s: Tensor<axes![batch, seq, kv_seq]> = einsum!(q, k; head_dim ->)?;
    let t: Tensor<axes![in, batch]> = einsum!(x; batch seq in -> in batch)?;
    let n: Tensor<axes![batch, seq]> = x.contract::<axes![in], _>(&Tensor::<axes![in]>::ones(&[4])?)?;
    assert_eq!(a.to_f32_vec()[0], 4.0);
    assert_eq!(b.shape(), &[5, 2, 3]);
    assert_eq!(c.to_f32_vec()[0], 12.0);
    assert_eq!(s.shape(), &[2, 3, 6]);
    assert_eq!(t.to_f32_vec()[0], 3.0); // summed over seq (3)
    assert_eq!(n.to_f32_vec()[0], 4.0);
    Ok(())
}
