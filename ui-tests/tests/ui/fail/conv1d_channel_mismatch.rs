use fucina::prelude::*;

fn main() -> Result<()> {
    let x = Tensor::<axes![batch, channel, time]>::zeros(&[1, 2, 8])?;
    // The kernel's input-channel axis is `feature`, not the signal's `channel`.
    let w = Tensor::<axes![out, feature, time]>::zeros(&[3, 2, 3])?;
    let _y = x.conv1d::<channel, time, out>(&w, None, Conv1dOptions::default())?;
    Ok(())
}
