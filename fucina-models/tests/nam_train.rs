//! Training: a compact WaveNet learns the synthetic amp (tanh waveshaper + one-pole tone
//! filter) with the library's autograd and AdamW to an ESR below 0.01 on held-out audio,
//! and its `.nam` export (both schemas) loads back to the same model.

use fucina::formats::nam::{to_json, Architecture, NamFile, Schema};
use fucina::prelude::*;
use fucina_models::nam::train::{compact_config, esr, synthetic_amp, synthetic_guitar, train, TrainOptions};
use fucina_models::nam::Amp;

#[test]
fn wavenet_learns_the_synthetic_amp_and_exports() {
    let ctx = ExecContext::with_backend(BackendKind::Native, 2).unwrap();
    let _g = ctx.enter();
    let x = synthetic_guitar(48_000 * 20, 1);
    let y = synthetic_amp(&x, 4.0, 0.6);
    let config = compact_config();
    let mut losses = Vec::new();
    let net = train(&ctx, &config, &x, &y, &TrainOptions::default(), |_, l| losses.push(l)).unwrap();
    assert!(
        losses[losses.len() - 1] < losses[0] / 10.0,
        "the loss fell: {} -> {}",
        losses[0],
        losses[losses.len() - 1]
    );
    let hx = synthetic_guitar(48_000 * 5, 77);
    let hy = synthetic_amp(&hx, 4.0, 0.6);
    let t = Tensor::<axes![batch, time]>::from_vec(hx.clone(), &[1, hx.len()]).unwrap();
    let pred = fucina::autograd::no_grad(|| net.forward(&t)).unwrap().to_f32_vec();
    let e = esr(&pred, &hy);
    assert!(e < 0.01, "held-out ESR {e}");
    for schema in [Schema::V0_7, Schema::V0_5] {
        let doc = to_json(&Architecture::WaveNet(config.clone()), &net.to_weights(), Some(48_000.0), None, schema);
        let amp = Amp::from_file(&NamFile::parse(doc.to_string().as_bytes()).unwrap()).unwrap();
        let again = amp.process_block(&hx[..4000]).unwrap();
        let d = again.iter().zip(&pred).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(d <= 1e-6, "{schema:?}: exported model differs by {d}");
    }
}
