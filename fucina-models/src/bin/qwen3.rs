//! `qwen3 [model.gguf] --chat "…"`: run a Qwen3 or Qwen3-MoE GGUF (any of its dtypes) on the CPU.

use clap::Parser;
use fucina_models::llm::cli::{default_model, run, LmArgs};

/// Chat with or complete text using a Qwen3 (dense or MoE) model in GGUF format. Without a
/// model path it runs the tiny random-weight Qwen3 shipped with the crate (its answers are
/// noise; it exists to show the whole path working).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    #[command(flatten)]
    lm: LmArgs,
}

fn main() {
    let a = Args::parse();
    let go = || -> fucina::Result<()> {
        let path = a.lm.model.clone().unwrap_or_else(default_model);
        let ctx = a.lm.context()?;
        let _g = ctx.enter();
        let lm = fucina_models::lm::open(&path, a.lm.no_mmap)?;
        eprintln!("{}: {}, {} threads ({:?})", path.display(), lm.summary, ctx.threads(), ctx.backend());
        run(&*lm.model, &lm.header, &a.lm)
    };
    if let Err(e) = go() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
