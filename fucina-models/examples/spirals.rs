//! Two spirals: train the DSL MLP with SGD, AdamW, Muon, APOLLO and evolution strategies,
//! prove a bit-exact resume from a checkpoint, report test accuracy, and draw the learned
//! decision boundary as a PNG.
//!
//! `cargo run -p fucina-models --release --example spirals -- --help`

use clap::Parser;
use fucina::formats::checkpoint::{load_checkpoint, save_checkpoint};
use fucina::optim::{AdamW, Apollo, EvolutionStrategy, LrSchedule, Muon, Optimizer, Sgd};
use fucina::prelude::*;
use fucina_models::spirals::{train_step, SpiralNet, Spirals};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

/// Train a two-spirals classifier with each optimizer and draw its decision boundary.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Gradient steps per optimizer.
    #[arg(long, default_value_t = 1500)]
    steps: u64,
    /// Evolution-strategy steps.
    #[arg(long, default_value_t = 300)]
    es_steps: u64,
    /// Hidden units per layer.
    #[arg(long, default_value_t = 32)]
    hidden: usize,
    /// Minibatch size.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Points per spiral arm in the training set.
    #[arg(long, default_value_t = 300)]
    points: usize,
    /// Worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// RNG seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Where to write the decision-boundary PNG.
    #[arg(long, default_value = "spirals.png")]
    out: PathBuf,
    /// Minimum test accuracy the gradient optimizers must reach.
    #[arg(long, default_value_t = 0.98)]
    min_accuracy: f32,
}

fn bar(len: u64, name: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    let style = ProgressStyle::with_template("{prefix:>7} [{bar:30}] {pos}/{len} {msg} ({per_sec})")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    pb.set_style(style);
    pb.set_prefix(name.to_string());
    pb
}

fn context(a: &Args) -> Result<ExecContext> {
    ExecContext::new(ExecConfig { seed: a.seed, threads: a.threads, ..ExecConfig::default() })
}

fn train(a: &Args, name: &str, opt: &mut dyn Optimizer, train_set: &Spirals) -> Result<(SpiralNet, ExecContext)> {
    let ctx = context(a)?;
    let mut net = SpiralNet::new(&ctx, a.hidden)?;
    net.track_params();
    let base = opt.lr();
    let sched =
        LrSchedule::Cosine { lr: base as f32, min_lr: base as f32 * 0.05, warmup: a.steps / 20, total: a.steps };
    let pb = bar(a.steps, name);
    for step in 0..a.steps {
        opt.set_lr(sched.at(step) as f64);
        let loss = train_step(&ctx, &mut net, opt, train_set, a.batch)?;
        if step % 25 == 0 {
            pb.set_message(format!("loss {loss:.4}"));
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok((net, ctx))
}

fn resume_is_bit_exact(a: &Args, train_set: &Spirals) -> Result<bool> {
    let half = a.steps.min(400) / 2;
    let bits = |n: &SpiralNet| -> Vec<u32> {
        n.named_params().iter().flat_map(|(_, t)| t.to_f32_vec()).map(f32::to_bits).collect()
    };
    let run = |steps: u64, net: &mut SpiralNet, opt: &mut AdamW, ctx: &ExecContext| -> Result<()> {
        for _ in 0..steps {
            train_step(ctx, net, opt, train_set, a.batch)?;
        }
        Ok(())
    };
    let ctx = context(a)?;
    let mut straight = SpiralNet::new(&ctx, a.hidden)?;
    straight.track_params();
    let mut o1 = AdamW::new(0.01);
    run(2 * half, &mut straight, &mut o1, &ctx)?;

    let path = std::env::temp_dir().join(format!("fucina-spirals-{}.safetensors", std::process::id()));
    let ctx2 = context(a)?;
    let mut first = SpiralNet::new(&ctx2, a.hidden)?;
    first.track_params();
    let mut o2 = AdamW::new(0.01);
    run(half, &mut first, &mut o2, &ctx2)?;
    save_checkpoint(&path, &first, &o2, &ctx2, &Default::default())?;
    let ctx3 = context(a)?;
    let mut resumed = SpiralNet::new(&ctx3, a.hidden)?;
    resumed.track_params();
    let mut o3 = AdamW::new(0.01);
    load_checkpoint(&path, &mut resumed, &mut o3, &ctx3)?;
    run(half, &mut resumed, &mut o3, &ctx3)?;
    std::fs::remove_file(&path).ok();
    Ok(bits(&straight) == bits(&resumed))
}

fn draw(net: &SpiralNet, data: &Spirals, path: &PathBuf) -> std::result::Result<(), String> {
    const N: usize = 320;
    let lim = 1.25f32;
    let mut grid = Vec::with_capacity(N * N * 2);
    for y in 0..N {
        for x in 0..N {
            grid.push(-lim + 2.0 * lim * (x as f32 + 0.5) / N as f32);
            grid.push(lim - 2.0 * lim * (y as f32 + 0.5) / N as f32);
        }
    }
    let gx = Tensor::<axes![batch, in]>::from_vec(grid, &[N * N, 2]).map_err(|e| e.to_string())?;
    let probs =
        fucina::autograd::no_grad(|| net.forward(&gx).and_then(|l| l.softmax::<class>())).map_err(|e| e.to_string())?;
    let p = probs.to_f32_vec();
    let mut img = vec![0u8; N * N * 3];
    for i in 0..N * N {
        let q = p[2 * i + 1];
        img[3 * i] = (255.0 * (1.0 - q) * 0.9 + 20.0) as u8;
        img[3 * i + 1] = (60.0 + 80.0 * (1.0 - (2.0 * q - 1.0).abs())) as u8;
        img[3 * i + 2] = (255.0 * q * 0.9 + 20.0) as u8;
    }
    let pts = data.x.to_f32_vec();
    for (k, c) in data.y.iter().enumerate() {
        let px = ((pts[2 * k] + lim) / (2.0 * lim) * N as f32) as i64;
        let py = ((lim - pts[2 * k + 1]) / (2.0 * lim) * N as f32) as i64;
        for dy in -1..=1 {
            for dx in -1..=1 {
                let (x, y) = (px + dx, py + dy);
                if (0..N as i64).contains(&x) && (0..N as i64).contains(&y) {
                    let o = 3 * (y as usize * N + x as usize);
                    let v = if *c == 1 { [255, 255, 255] } else { [0, 0, 0] };
                    img[o..o + 3].copy_from_slice(&v);
                }
            }
        }
    }
    let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), N as u32, N as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().map_err(|e| e.to_string())?;
    w.write_image_data(&img).map_err(|e| e.to_string())
}

fn run(a: Args) -> std::result::Result<(), String> {
    let train_set = Spirals::generate(a.points, 0.02, a.seed).map_err(|e| e.to_string())?;
    let test_set = Spirals::generate(a.points / 2, 0.02, a.seed + 1000).map_err(|e| e.to_string())?;
    println!(
        "two spirals: {} training and {} test points, MLP 2-{h}-{h}-2",
        train_set.len(),
        test_set.len(),
        h = a.hidden
    );
    let mut opts: Vec<(&str, Box<dyn Optimizer>)> = vec![
        ("sgd", Box::new(Sgd::new(0.3, 0.9).nesterov(true))),
        ("adamw", Box::new(AdamW::new(0.02).weight_decay(0.0))),
        ("muon", Box::new(Muon::new(0.05, 0.02))),
        (
            "apollo",
            Box::new({
                let mut o = Apollo::new(0.02, 8, a.seed);
                o.update_proj_gap = 100;
                o
            }),
        ),
    ];
    let mut failed = Vec::new();
    let mut best: Option<(f32, SpiralNet)> = None;
    for (name, opt) in opts.iter_mut() {
        let t0 = std::time::Instant::now();
        let (net, _ctx) = train(&a, name, opt.as_mut(), &train_set).map_err(|e| e.to_string())?;
        let acc = net.accuracy(&test_set).map_err(|e| e.to_string())?;
        let rate = a.steps as f64 / t0.elapsed().as_secs_f64();
        println!("{name:>7}: test accuracy {:.2}% ({} steps, {rate:.0} steps/s)", 100.0 * acc, a.steps);
        if acc < a.min_accuracy {
            failed.push(format!("{name} reached {:.2}%", 100.0 * acc));
        }
        if best.as_ref().is_none_or(|(b, _)| acc > *b) {
            best = Some((acc, net));
        }
    }
    {
        let ctx = context(&a).map_err(|e| e.to_string())?;
        let mut net = SpiralNet::new(&ctx, a.hidden).map_err(|e| e.to_string())?;
        let ids: Vec<u32> = (0..train_set.len() as u32).collect();
        let fitness = |m: &SpiralNet| -> Result<f32> { Ok(-m.loss(&train_set, &ids)?.item()?) };
        let mut es = EvolutionStrategy::new(0.03, 32, 0.03, a.seed);
        let pb = bar(a.es_steps, "es");
        for _ in 0..a.es_steps {
            let f = es.step(&ctx, &mut net, fitness).map_err(|e| e.to_string())?;
            pb.set_message(format!("loss {:.4}", -f));
            pb.inc(1);
        }
        pb.finish_and_clear();
        let acc = net.accuracy(&test_set).map_err(|e| e.to_string())?;
        println!(
            "{:>7}: test accuracy {:.2}% ({} steps of {} antithetic pairs, forward passes only)",
            "es",
            100.0 * acc,
            a.es_steps,
            es.pairs
        );
    }
    let exact = resume_is_bit_exact(&a, &train_set).map_err(|e| e.to_string())?;
    println!("checkpoint resume: {}", if exact { "bit-exact (N + save + load + N == 2N)" } else { "DIVERGED" });
    if let Some((acc, net)) = best {
        draw(&net, &train_set, &a.out)?;
        println!("decision boundary of the best model ({:.2}%) written to {}", 100.0 * acc, a.out.display());
    }
    if !exact {
        failed.push("resume was not bit-exact".into());
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
