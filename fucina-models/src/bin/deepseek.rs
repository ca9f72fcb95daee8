//! `deepseek [model.gguf] --chat "…"`: run a DeepSeek-V2/V3 GGUF on the CPU, streaming
//! routed experts from the mapped file under `--expert-cache-mb`.

use clap::Parser;
use fucina_models::llm::cli::{run, LmArgs};
use std::path::PathBuf;

/// Chat with or complete text using a DeepSeek-V2/V3 (`deepseek2`) model in GGUF format:
/// multi-head latent attention with a compressed KV cache, mixtures of experts read from the
/// mapped file only when routed (`--expert-cache-mb` bounds the resident ones). Without a
/// model path it runs the tiny random DeepSeek-V3 shipped with the crate.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    #[command(flatten)]
    lm: LmArgs,
}

fn main() {
    let a = Args::parse();
    let go = || -> fucina::Result<()> {
        let path =
            a.lm.model
                .clone()
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/deepseek-v3-tiny-f32.gguf"));
        let ctx = a.lm.context()?;
        let _g = ctx.enter();
        let budget = a.lm.expert_cache_mb.map(|mb| mb << 20);
        let lm = fucina_models::lm::open_with(&path, a.lm.no_mmap, budget)?;
        if lm.arch != "deepseek2" {
            eprintln!("note: {} is a `{}` model, not deepseek2; running it anyway", path.display(), lm.arch);
        }
        eprintln!("{}: {}, {} threads ({:?})", path.display(), lm.summary, ctx.threads(), ctx.backend());
        run(&*lm.model, &lm.header, &a.lm)
    };
    if let Err(e) = go() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
