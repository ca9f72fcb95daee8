//! The embedded default job: build the README's MLP from a fixed seed, run a batch on
//! both backends, check they agree, and round-trip the weights through safetensors.
//!
//! `cargo run -p fucina-models --release --example mlp -- --help`

use clap::Parser;
use fucina::prelude::*;
use fucina_models::mlp::Mlp;

/// Run the README's two-layer MLP on both backends and round-trip its weights.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Rows in the batch.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    batch: u64,
    /// Hidden units.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    hidden: u64,
    /// Native worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// Seed of the counter-based RNG.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

fn run(a: Args) -> Result<()> {
    let ctx = ExecContext::new(ExecConfig { seed: a.seed, threads: a.threads, ..ExecConfig::default() })?;
    let (batch, hidden) = (a.batch as usize, a.hidden as usize);
    let model = Mlp::new(&ctx, 2, hidden, 3)?;
    let x = ctx.randn::<axes![batch, in]>(&[batch, 2], 0.0, 1.0)?;
    println!("MLP: {} parameters in {} tensors: {:?}", model.num_params(), model.num_tensors(), model.param_names());

    let native = ctx.scope(|| model.forward(&x))?;
    let scalar_ctx = ExecContext::with_backend(BackendKind::Scalar, 1)?;
    let scalar = scalar_ctx.scope(|| model.forward(&x))?;
    let (nv, sv) = (native.to_f32_vec(), scalar.to_f32_vec());
    let max_diff = nv.iter().zip(&sv).map(|(p, q)| (p - q).abs()).fold(0.0f32, f32::max);
    println!("logits {:?} on {} threads:", native, ctx.threads());
    for row in nv.chunks(3) {
        println!("  {row:?}");
    }
    println!("native vs scalar: max |diff| = {max_diff:.2e}");

    let path = std::env::temp_dir().join(format!("fucina-mlp-{}.safetensors", std::process::id()));
    model.save_safetensors(&path)?;
    let mut reloaded = Mlp::new(&ctx, 2, hidden, 3)?;
    reloaded.load_safetensors(&path)?;
    let again = ctx.scope(|| reloaded.forward(&x))?.to_f32_vec();
    std::fs::remove_file(&path).ok();
    println!("safetensors round trip: {}", if again == nv { "identical logits" } else { "MISMATCH" });
    if again != nv || max_diff > 1e-5 {
        return Err(FucinaError::InvalidArgument { op: "mlp example", msg: "results disagree".into() });
    }
    Ok(())
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
