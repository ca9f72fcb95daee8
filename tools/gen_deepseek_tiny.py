#!/usr/bin/env python3
"""Tiny DeepSeek-V2 and DeepSeek-V3 models and their goldens, from `transformers`.

Two random-initialised models (seeded) with every DeepSeek mechanism at small sizes:

* deepseek-v2-tiny: no query compression (as V2-Lite), MLA with kv_lora_rank 32, a leading
  dense layer, 8 routed experts (top 2, softmax, greedy), 1 shared expert, plain RoPE.
* deepseek-v3-tiny: query compression, 16 routed experts in 4 groups (2 used, top 4),
  sigmoid scores with a correction bias, normalized weights times 2.5, 1 shared expert,
  YaRN RoPE (factor 4, mscale = mscale_all_dim = 1).

Also a DeepSeek-V3-style byte-level BPE (its pre-tokenizer: three isolated splits in
sequence, no normalizer), trained with `tokenizers` on the tiny Qwen3's corpus, and the ids
it gives a corpus of tricky strings (`deepseek_v3_tokenizer.json`), for token-exact checks
of the `deepseek-v3` pre-tokenizer.

Each model is written with gguf-py as llama.cpp's converter writes `deepseek2` files (MLA split:
`attn_k_b`/`attn_v_b`, latent key/value lengths, `*_mla` head sizes, stacked experts),
with the tokenizer of the committed tiny Qwen3. The goldens hold transformers' logits for
every prefill position and 16 greedy decode steps, and every MoE layer's chosen experts for
each prompt token.
"""
import json
import os

import numpy as np
import torch
import gguf
from golden_common import greedy_reference
from transformers import DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..")
assets = os.path.join(root, "fucina-models", "assets")
gold = os.path.join(root, "fucina-models", "tests", "goldens")


def tiny_tokenizer():
    """Tokens, types, merges and ids of the committed tiny Qwen3's tokenizer."""
    r = gguf.GGUFReader(os.path.join(assets, "qwen3-tiny-f32.gguf"))

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = strings("tokenizer.ggml.merges")
    f = r.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    return tokens, types, merges


def write_gguf(path, name, cfg, model, tokens, types, merges, v3):
    ids = {t: i for i, t in enumerate(tokens)}
    w = gguf.GGUFWriter(path, "deepseek2")
    w.add_name(name)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_leading_dense_block_count(cfg.first_k_dense_replace)
    w.add_vocab_size(cfg.vocab_size)
    if cfg.q_lora_rank is not None:
        w.add_q_lora_rank(cfg.q_lora_rank)
    w.add_kv_lora_rank(cfg.kv_lora_rank)
    w.add_key_length(cfg.kv_lora_rank + cfg.qk_rope_head_dim)
    w.add_value_length(cfg.kv_lora_rank)
    w.add_key_length_mla(cfg.qk_nope_head_dim + cfg.qk_rope_head_dim)
    w.add_value_length_mla(cfg.v_head_dim)
    w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    w.add_expert_count(cfg.n_routed_experts)
    w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_expert_shared_count(cfg.n_shared_experts)
    w.add_expert_weights_scale(cfg.routed_scaling_factor)
    if cfg.norm_topk_prob:
        w.add_expert_weights_norm(True)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID if v3 else gguf.ExpertGatingFuncType.SOFTMAX)
    if cfg.n_group:
        w.add_expert_group_count(cfg.n_group)
        w.add_expert_group_used_count(cfg.topk_group)
    w.add_rope_dimension_count(cfg.qk_rope_head_dim)
    rp = cfg.rope_parameters
    if rp.get("rope_type", "default") == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rp["factor"])
        w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_log_mul(0.1 * rp["mscale_all_dim"])
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(ids["<|im_end|>"])
    w.add_bos_token_id(ids["<|endoftext|>"])
    w.add_add_bos_token(False)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    nh, nope, vd, r = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
    inter = cfg.moe_intermediate_size
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        t = lambda dst, src: w.add_tensor(f"blk.{i}.{dst}.weight", sd[p + src])
        t("attn_norm", "input_layernorm.weight")
        if cfg.q_lora_rank is None:
            t("attn_q", "self_attn.q_proj.weight")
        else:
            t("attn_q_a", "self_attn.q_a_proj.weight")
            t("attn_q_a_norm", "self_attn.q_a_layernorm.weight")
            t("attn_q_b", "self_attn.q_b_proj.weight")
        t("attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa.weight")
        t("attn_kv_a_norm", "self_attn.kv_a_layernorm.weight")
        kv_b = sd[p + "self_attn.kv_b_proj.weight"].reshape(nh, nope + vd, r)
        w.add_tensor(f"blk.{i}.attn_k_b.weight", np.ascontiguousarray(kv_b[:, :nope, :].transpose(0, 2, 1)))
        w.add_tensor(f"blk.{i}.attn_v_b.weight", np.ascontiguousarray(kv_b[:, nope:, :]))
        t("attn_output", "self_attn.o_proj.weight")
        t("ffn_norm", "post_attention_layernorm.weight")
        if i < cfg.first_k_dense_replace:
            t("ffn_gate", "mlp.gate_proj.weight")
            t("ffn_up", "mlp.up_proj.weight")
            t("ffn_down", "mlp.down_proj.weight")
        else:
            t("ffn_gate_inp", "mlp.gate.weight")
            if v3:
                w.add_tensor(f"blk.{i}.exp_probs_b.bias", sd[p + "mlp.gate.e_score_correction_bias"])
            gate_up = sd[p + "mlp.experts.gate_up_proj"]
            w.add_tensor(f"blk.{i}.ffn_gate_exps.weight", np.ascontiguousarray(gate_up[:, :inter, :]))
            w.add_tensor(f"blk.{i}.ffn_up_exps.weight", np.ascontiguousarray(gate_up[:, inter:, :]))
            t("ffn_down_exps", "mlp.experts.down_proj")
            t("ffn_gate_shexp", "mlp.shared_experts.gate_proj.weight")
            t("ffn_up_shexp", "mlp.shared_experts.up_proj.weight")
            t("ffn_down_shexp", "mlp.shared_experts.down_proj.weight")
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def reference(model, cfg, prompts_ids):
    routes_now = []

    def hook(_module, _inp, out):
        idx = out[2] if isinstance(out, tuple) else out
        routes_now.append(torch.sort(idx, dim=-1).values.tolist())

    for layer in model.model.layers[cfg.first_k_dense_replace:]:
        layer.mlp.gate.register_forward_hook(hook)
    cases = []
    for ids_in in prompts_ids:
        routes_now.clear()
        n_layers = len(model.model.layers) - cfg.first_k_dense_replace
        _, prefill, greedy, decode = greedy_reference(model, ids_in)
        routes = routes_now[:n_layers]  # the prompt's pass only, not the decode steps'
        cases.append({"ids": ids_in, "prefill": prefill.tolist(), "greedy": greedy,
                      "decode": decode.tolist(), "routes": routes})
    return cases


DEEPSEEK_V3_SPLITS = [
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]


def deepseek_v3_tokenizer():
    """A small BPE with DeepSeek-V3's pre-tokenizer, and its ids on the tricky corpus."""
    import sys
    sys.path.insert(0, here)
    from gen_qwen3_tiny import TRICKY
    from tiny_tokenizer import CORPUS, SPECIALS
    from tokenizers import Tokenizer, Regex, models, pre_tokenizers, decoders, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in DEEPSEEK_V3_SPLITS]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=1024, special_tokens=[], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS + ["12345678 1234567890123 中文字符日本語のテキスト ひらがな カタカナ"] * 20, trainer=trainer)
    tok.add_special_tokens(SPECIALS)
    vocab = tok.get_vocab()
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    merges = [" ".join(m) if isinstance(m, (list, tuple)) else m for m in json.loads(tok.to_str())["model"]["merges"]]
    cases = TRICKY + ["digits 1234567 and 12 and 99999", "中文日本語カタカナ mixed with English", "a.b,c;d!e?f", "x=1+2*3/4"]
    with open(os.path.join(gold, "deepseek_v3_tokenizer.json"), "w") as f:
        json.dump({"generator": "tools/gen_deepseek_tiny.py", "tokens": tokens, "merges": merges,
                   "specials": SPECIALS,
                   "cases": [{"text": s, "ids": tok.encode(s, add_special_tokens=False).ids} for s in cases]},
                  f, ensure_ascii=False)
        f.write("\n")


def main():
    torch.set_num_threads(1)
    deepseek_v3_tokenizer()
    tokens, types, merges = tiny_tokenizer()
    ids = {t: i for i, t in enumerate(tokens)}
    common = dict(vocab_size=len(tokens), hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                  num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32,
                  qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, first_k_dense_replace=1,
                  n_shared_experts=1, max_position_embeddings=256, rms_norm_eps=1e-6, initializer_range=0.2,
                  tie_word_embeddings=False, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                  attn_implementation="eager")
    specs = [
        ("deepseek-v2-tiny", False, DeepseekV2Config(
            **common, q_lora_rank=None, n_routed_experts=8, num_experts_per_tok=2, topk_method="greedy",
            norm_topk_prob=False, routed_scaling_factor=1.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
        ("deepseek-v3-tiny", True, DeepseekV3Config(
            **common, q_lora_rank=24, n_routed_experts=16, num_experts_per_tok=4, n_group=4, topk_group=2,
            norm_topk_prob=True, routed_scaling_factor=2.5, rope_interleave=True,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 64, "mscale": 1.0, "mscale_all_dim": 1.0,
                             "beta_fast": 32.0, "beta_slow": 1.0})),
    ]
    prompt_ids = [[ids[t] for t in ["<|im_start|>"]] + list(range(40, 60)), list(range(100, 131))]
    for seed, (name, v3, cfg) in enumerate(specs):
        torch.manual_seed(100 + seed)
        model = (DeepseekV3ForCausalLM if v3 else DeepseekV2ForCausalLM)(cfg).eval()
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "norm" in n:
                    p.copy_(1.0 + 0.3 * torch.randn_like(p))
                if n.endswith("mlp.gate.weight"):  # routers spread wide: no near-ties
                    p.copy_(2.0 * torch.randn_like(p))
            for n, b in model.named_buffers():
                if n.endswith("e_score_correction_bias"):
                    b.copy_(0.1 * torch.randn_like(b))
        path = os.path.join(assets, f"{name}-f32.gguf")
        write_gguf(path, f"fucina {name} (random weights)", cfg, model, tokens, types, merges, v3)
        cases = reference(model, cfg, prompt_ids)
        with open(os.path.join(gold, f"{name.replace('-', '_')}_logits.json"), "w") as f:
            json.dump({"generator": "tools/gen_deepseek_tiny.py", "model": f"assets/{name}-f32.gguf",
                       "cases": cases}, f)
            f.write("\n")
        print(f"wrote {path} and its goldens")


if __name__ == "__main__":
    main()
