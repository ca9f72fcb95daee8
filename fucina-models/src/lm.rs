//! Opening any supported language model from a GGUF file by its `general.architecture`:
//! the entry point of the binaries and the server.

use crate::deepseek::experts::ExpertPlacement;
use crate::deepseek::DeepSeek;
use crate::gemma4::Gemma4;
use crate::llm::generate::CausalLm;
use crate::llm::ModelFile;
use crate::qwen3::Qwen3;
use fucina::formats::gguf::GgufHeader;
use fucina::Result;
use std::path::Path;
use std::sync::Arc;

/// The architectures [`open`] accepts.
pub const ARCHITECTURES: &[&str] =
    &["qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen2", "llama", "glm4moe", "nanochat", "deepseek2", "gemma4"];

/// A loaded model with its file's header (tokenizer, metadata).
pub struct LoadedLm {
    /// The model.
    pub model: Arc<dyn CausalLm + Send>,
    /// The GGUF header.
    pub header: GgufHeader,
    /// `general.architecture`.
    pub arch: String,
    /// A one-line description for logs.
    pub summary: String,
}

/// Opens `path` (mapped, or read into memory with `resident`) and builds its model.
pub fn open(path: &Path, resident: bool) -> Result<LoadedLm> {
    open_with(path, resident, None)
}

/// As [`open`]; `expert_budget` bounds the bytes of routed experts kept resident (DeepSeek).
pub fn open_with(path: &Path, resident: bool, expert_budget: Option<usize>) -> Result<LoadedLm> {
    load(ModelFile::open_with(path, ARCHITECTURES, resident)?, expert_budget)
}

/// The memory report's note on weights repacked for this CPU at load, if any.
fn repacked_note(file: &ModelFile) -> String {
    match file.repacked_bytes() {
        0 => String::new(),
        b => format!(", {:.1} MiB of weights repacked for this CPU", b as f64 / (1 << 20) as f64),
    }
}

/// Builds the model of an opened file (one of [`ARCHITECTURES`]).
pub fn load(file: ModelFile, expert_budget: Option<usize>) -> Result<LoadedLm> {
    let header = file.gguf.header().clone();
    if file.arch == "deepseek2" {
        let model = DeepSeek::load(&file, expert_budget)?;
        let c = &model.config;
        let placement = match model.expert_placement() {
            Some(ExpertPlacement::Resident) => ", experts resident",
            Some(ExpertPlacement::Mapped) => ", experts read from the map (they do not fit in memory)",
            Some(ExpertPlacement::Streamed(_)) => ", experts streamed under a budget",
            None => "",
        };
        let experts = c.moe.as_ref().map_or(String::new(), |m| {
            format!(", {} of {} experts + {} shared ({:?} routing{placement})", m.used, m.experts, m.shared, m.gating)
        });
        let summary = format!(
            "deepseek2, {} layers, hidden {}, {} heads, MLA latent {}+{}{experts}, vocab {}{}",
            c.layers,
            c.hidden,
            c.heads,
            c.kv_lora,
            c.qk_rope,
            c.vocab,
            repacked_note(&file)
        );
        return Ok(LoadedLm { model: Arc::new(model), header, arch: file.arch.clone(), summary });
    }
    if file.arch == "gemma4" {
        let model = Gemma4::load(&file)?;
        let c = &model.config;
        let sliding = c.sliding.iter().filter(|&&s| s).count();
        let experts = c.moe.as_ref().map_or(String::new(), |m| format!(", {} of {} experts", m.used, m.experts));
        // kv heads of the first sliding-window layer and of the first global one.
        let of_kind = |sliding: bool| (0..c.layers).find(|&l| c.sliding[l] == sliding).map(|l| c.kv_heads[l]);
        let kv = match (of_kind(true), of_kind(false)) {
            (Some(a), Some(b)) if a != b => format!("{a}/{b} (sliding/global)"),
            (a, b) => a.or(b).unwrap_or(0).to_string(),
        };
        let summary = format!(
            "gemma4, {} layers ({sliding} sliding-window of {}, heads {}/{} wide, {} reusing keys and values), \
             hidden {}, {} heads, kv heads {kv}{experts}, per-layer embeddings {}, vocab {}{}",
            c.layers,
            c.window,
            c.head_dim_swa,
            c.head_dim,
            c.layers - c.first_shared,
            c.hidden,
            c.heads,
            c.per_layer,
            c.vocab,
            repacked_note(&file)
        );
        return Ok(LoadedLm { model: Arc::new(model), header, arch: file.arch.clone(), summary });
    }
    let model = Qwen3::load(&file)?;
    let c = &model.config;
    let experts = c.moe.as_ref().map_or(String::new(), |m| {
        let shared = if m.shared > 0 { format!(" + {} shared", m.shared) } else { String::new() };
        format!(", {} of {} experts{shared} ({:?} routing)", m.routing.used, m.experts, m.routing.gating)
    });
    let deltanet = c.deltanet.as_ref().map_or(String::new(), |d| {
        let n = d.recurrent.iter().filter(|&&r| r).count();
        format!(
            ", {n} Gated DeltaNet layers ({}/{} heads of {}/{}, {}-tap conv)",
            d.k_heads, d.v_heads, d.head_k, d.head_v, d.conv_kernel
        )
    });
    let summary = format!(
        "{}, {} layers, hidden {}, {}/{} heads{experts}{deltanet}, vocab {}{}",
        file.arch,
        c.layers,
        c.hidden,
        c.heads,
        c.kv_heads,
        c.vocab,
        repacked_note(&file)
    );
    Ok(LoadedLm { model: Arc::new(model), header, arch: file.arch.clone(), summary })
}

#[cfg(feature = "cli")]
/// The body of the language-model binaries: open the model the flags name (or `default`),
/// report it, then complete, chat or run the REPL as [`crate::llm::cli::run`] does.
pub fn run_cli(args: &crate::llm::cli::LmArgs, default: &Path) -> Result<()> {
    let path = args.model.clone().unwrap_or_else(|| default.to_path_buf());
    let ctx = args.context()?;
    let _g = ctx.enter();
    let lm = open_with(&path, args.no_mmap, args.expert_cache_mb.map(|mb| mb << 20))?;
    eprintln!("{}: {}, {} threads ({:?})", path.display(), lm.summary, ctx.threads(), ctx.backend());
    crate::llm::cli::run(&*lm.model, &lm.header, args)
}
