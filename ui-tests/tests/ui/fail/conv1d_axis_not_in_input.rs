use fucina::prelude::*;

fn main() -> Result<()> {
    let x = Tensor::<axes![batch, channel, time]>::zeros(&[1, 2, 8])?;
    // The convolution is asked to run along `seq`, which the signal does not have.
    let w = Tensor::<axes![out, channel, seq]>::zeros(&[3, 2, 3])?;
    let _y = x.conv1d::<channel, seq, out>(&w, None, Conv1dOptions::default())?;
    Ok(())
}
