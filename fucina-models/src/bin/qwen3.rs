//! `qwen3 [model.gguf] --chat "…"`: run a Qwen3 GGUF (any of its dtypes) on the CPU.

use clap::Parser;
use fucina_models::llm::cli::{default_model, run, LmArgs};
use fucina_models::llm::ModelFile;
use fucina_models::qwen3::Qwen3;

/// Chat with or complete text using a Qwen3 model in GGUF format. Without a model path it
/// runs the tiny random-weight Qwen3 shipped with the crate (its answers are noise; it
/// exists to show the whole path working).
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
        let file = ModelFile::open_with(&path, &["qwen3", "qwen3moe"], a.lm.no_mmap)?;
        let model = Qwen3::load(&file)?;
        let c = &model.config;
        let experts = c.moe.as_ref().map_or(String::new(), |m| format!(", {} of {} experts", m.used, m.experts));
        eprintln!(
            "{}: {}, {} layers, hidden {}, {}/{} heads{experts}, vocab {}, {} threads ({:?})",
            path.display(),
            file.arch,
            c.layers,
            c.hidden,
            c.heads,
            c.kv_heads,
            c.vocab,
            ctx.threads(),
            ctx.backend()
        );
        run(&model, file.gguf.header(), &a.lm)
    };
    if let Err(e) = go() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
