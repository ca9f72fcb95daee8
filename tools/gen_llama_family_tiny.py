#!/usr/bin/env python3
"""Tiny Llama 3, Llama 2 and Qwen2 models from `transformers`, converted to GGUF by
llama.cpp's own converter, and their goldens.

1. Trains two small byte-level BPEs offline with `tokenizers`: Llama 3's set-up (its split
   regex, no normalizer, its header and turn tokens) and Qwen2's (tools/tiny_tokenizer.py);
   and a SentencePiece BPE with `sentencepiece`, set up as Llama 2's (no normalization,
   spaces kept, a dummy prefix, digits split, byte fallback).
2. Builds a seeded random LlamaForCausalLM (grouped-query attention, untied output, Llama 3
   RoPE scaling, so the converter writes `rope_freqs`) and Qwen2ForCausalLM (q/k/v biases,
   tied output), with norms and biases away from their defaults; and a Llama 2 on the
   SentencePiece vocabulary with linear RoPE scaling.
3. Saves each with its tokenizer and runs `convert_hf_to_gguf.py` from the pinned
   llama-cpp-python sdist (fetched and sha256-checked by tools/gen_kquant_goldens.py) on it,
   with its own gguf-py. The converter names a BPE's pre-tokenizer by hashing how the
   tokenizer splits a test string; a tokenizer trained here matches no released one, so
   the name is given (`llama-bpe`, `qwen2`: the pre-tokenizers the two are set up as).
   Q and K rows of the Llama come out permuted for llama.cpp's interleaved RoPE, as for a
   real Llama.
   A Mistral on the same SentencePiece vocabulary with sliding-window attention (5
   positions), its window written as `llama.attention.sliding_window`.
4. Writes fucina-models/assets/{llama,llama-spm,mistral,qwen2}-tiny-f32.gguf and
   fucina-models/tests/goldens/llama_family.json: each model's token ids for a corpus of
   tricky strings (HF `tokenizers`; `sentencepiece` for the SentencePiece one) and its logits for fixed prompts (every prefill position
   and 16 greedy decode steps).
"""
import json
import os
import shutil
import sys
import tarfile
import tempfile

import torch
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast,
                          Qwen2Config, Qwen2ForCausalLM)

from gen_kquant_goldens import SDIST, cache, ggml_sources
from gen_qwen3_tiny import TRICKY
from golden_common import greedy_reference
from tiny_tokenizer import CORPUS, train_tokenizer

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..")
assets = os.path.join(root, "fucina-models", "assets")
gold = os.path.join(root, "fucina-models", "tests", "goldens")

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def llama3_tokenizer():
    return train_tokenizer(LLAMA3_PATTERN, nfc=False, specials=LLAMA3_SPECIALS)


def spm_tokenizer(d):
    """A SentencePiece BPE trained on the shared corpus, written to `d`/tokenizer.model."""
    import sentencepiece as spm
    corpus = os.path.join(d, "corpus.txt")
    with open(corpus, "w") as f:
        f.write("\n".join(CORPUS))
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(d, "tokenizer"), vocab_size=600,
                                   model_type="bpe", normalization_rule_name="identity",
                                   remove_extra_whitespaces=False, add_dummy_prefix=True, split_digits=True,
                                   byte_fallback=True, allow_whitespace_only_pieces=True, character_coverage=0.9995,
                                   num_threads=1, minloglevel=2, seed_sentencepiece_size=100000,
                                   max_sentence_length=100000)
    return spm.SentencePieceProcessor(model_file=os.path.join(d, "tokenizer.model"))


def converter():
    """The sdist's convert_hf_to_gguf module (and its gguf-py), unpacked into the cache."""
    ggml_sources()  # fetches and checks the sdist
    base = os.path.join(cache, SDIST, "vendor", "llama.cpp")
    if not os.path.isfile(os.path.join(base, "convert_hf_to_gguf.py")):
        with tarfile.open(os.path.join(cache, f"{SDIST}.tar.gz")) as t:
            want = ("/vendor/llama.cpp/convert_hf_to_gguf.py", "/vendor/llama.cpp/conversion/",
                    "/vendor/llama.cpp/gguf-py/")
            t.extractall(cache, members=[m for m in t.getmembers() if any(w in m.name for w in want)],
                         filter="data")
    sys.path.insert(0, os.path.join(base, "gguf-py"))
    sys.path.insert(0, base)
    # The converter needs its own gguf-py, not the pinned PyPI gguf the K-quant module loaded.
    for name in [m for m in sys.modules if m == "gguf" or m.startswith("gguf.")]:
        del sys.modules[name]
    import convert_hf_to_gguf
    import conversion.base
    return convert_hf_to_gguf, conversion.base


def convert(model, tok, specials, pre, out, name, spm_model=None, extra_args=()):
    """Saves `model` with `tok` (or the SentencePiece file `spm_model`) and converts the
    directory to `out` (F32) with the sdist's converter, naming the BPE's pre-tokenizer `pre`.
    `specials` names the bos and eos tokens (either may be None) and optionally a pad token;
    `extra_args` go to the converter's command line."""
    conv, base = converter()
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        if spm_model is None:
            fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=specials["bos"],
                                           eos_token=specials["eos"], pad_token=specials.get("pad"))
            fast.save_pretrained(d)
        else:
            shutil.copy(spm_model, os.path.join(d, "tokenizer.model"))
        argv = sys.argv
        sys.argv = ["convert_hf_to_gguf.py", d, "--outfile", out, "--outtype", "f32", "--model-name", name,
                    *extra_args]
        try:
            conv.main()
        finally:
            sys.argv = argv


def randomize(model):
    with torch.no_grad():  # norms and biases away from their defaults so they matter
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif n.endswith(".bias"):
                p.copy_(0.5 * torch.randn_like(p))


def main():
    results = {}
    # Llama 3: grouped-query attention, untied output, RoPE with Llama 3's frequency scaling.
    tok = llama3_tokenizer()
    ids = {s: tok.token_to_id(s) for s in LLAMA3_SPECIALS}
    torch.manual_seed(1)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 64},
                      rms_norm_eps=1e-5, tie_word_embeddings=False, initializer_range=0.2,
                      bos_token_id=ids["<|begin_of_text|>"], eos_token_id=ids["<|eot_id|>"],
                      attn_implementation="eager")
    llama = LlamaForCausalLM(cfg).eval()
    randomize(llama)
    path = os.path.join(assets, "llama-tiny-f32.gguf")
    convert(llama, tok, {"bos": "<|begin_of_text|>", "eos": "<|eot_id|>"}, "llama-bpe", path,
            "fucina llama-tiny (random weights)")
    prompts = ["<|begin_of_text|>What is the capital of France? 12345 numbers",
               "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\n"]
    results["llama"] = reference(llama, tok, path, prompts, "llama")

    # Llama 2: the SentencePiece vocabulary, linear RoPE scaling, untied output.
    with tempfile.TemporaryDirectory() as d:
        sp = spm_tokenizer(d)
        torch.manual_seed(3)
        cfg = LlamaConfig(vocab_size=sp.get_piece_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                          rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
                          rms_norm_eps=1e-5, tie_word_embeddings=False, initializer_range=0.2,
                          bos_token_id=sp.bos_id(), eos_token_id=sp.eos_id(), attn_implementation="eager")
        llama2 = LlamaForCausalLM(cfg).eval()
        randomize(llama2)
        path = os.path.join(assets, "llama-spm-tiny-f32.gguf")
        convert(llama2, None, None, None, path, "fucina llama-spm-tiny (random weights)",
                spm_model=os.path.join(d, "tokenizer.model"))
        prompts = ["What is the capital of France? 12345 numbers", "  two spaces, a tab\tand é ✓ 🙂"]
        results["llama-spm"] = reference(llama2, SpmIds(sp), path, prompts, "llama", bos=sp.bos_id())

        # Mistral (v0.1's set-up): the SentencePiece vocabulary, sliding-window attention over
        # 5 positions (the prompts and the decode run well past it). llama.cpp's converter
        # files Mistral as `llama` and does not write the window; it is added as
        # `llama.attention.sliding_window`, the key llama.cpp's SWA families use.
        torch.manual_seed(4)
        cfg = MistralConfig(vocab_size=sp.get_piece_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                            sliding_window=5, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                            rms_norm_eps=1e-5, tie_word_embeddings=False, initializer_range=0.2,
                            bos_token_id=sp.bos_id(), eos_token_id=sp.eos_id(), attn_implementation="eager")
        mistral = MistralForCausalLM(cfg).eval()
        randomize(mistral)
        path = os.path.join(assets, "mistral-tiny-f32.gguf")
        _, base = converter()
        import conversion.llama as llama_conv
        plain = llama_conv.LlamaModel.set_gguf_parameters

        def with_window(self):
            plain(self)
            if self.hparams.get("sliding_window"):
                self.gguf_writer.add_sliding_window(self.hparams["sliding_window"])
        llama_conv.LlamaModel.set_gguf_parameters = with_window
        try:
            convert(mistral, None, None, None, path, "fucina mistral-tiny (random weights)",
                    spm_model=os.path.join(d, "tokenizer.model"))
        finally:
            llama_conv.LlamaModel.set_gguf_parameters = plain
        results["mistral"] = reference(mistral, SpmIds(sp), path, prompts, "llama", bos=sp.bos_id())

    # Qwen2: q/k/v biases, tied output, plain RoPE.
    tok = train_tokenizer()
    ids = {s: tok.token_to_id(s) for s in ["<|endoftext|>", "<|im_end|>"]}
    torch.manual_seed(2)
    cfg = Qwen2Config(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}, rms_norm_eps=1e-6,
                      tie_word_embeddings=True, initializer_range=0.2, bos_token_id=ids["<|endoftext|>"],
                      eos_token_id=ids["<|im_end|>"], attn_implementation="eager")
    qwen2 = Qwen2ForCausalLM(cfg).eval()
    randomize(qwen2)
    path = os.path.join(assets, "qwen2-tiny-f32.gguf")
    convert(qwen2, tok, {"bos": "<|endoftext|>", "eos": "<|im_end|>"}, "qwen2", path, "fucina qwen2-tiny (random weights)")
    prompts = ["What is the capital of France?", "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"]
    results["qwen2"] = reference(qwen2, tok, path, prompts, "qwen2")

    out = os.path.join(gold, "llama_family.json")
    with open(out, "w") as f:
        json.dump({"generator": "tools/gen_llama_family_tiny.py", "models": results}, f, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {out}")


class SpmIds:
    """`sentencepiece` behind the `tokenizers` calls `reference` makes."""
    def __init__(self, sp):
        self.sp = sp

    def encode(self, text, add_special_tokens=False):
        class Ids:
            ids = self.sp.encode(text)
        return Ids


def reference(model, tok, path, prompts, arch, bos=None):
    tokens = [{"text": s, "ids": tok.encode(s, add_special_tokens=False).ids} for s in TRICKY]
    cases = []
    for text in prompts:
        ids_in = ([bos] if bos is not None else []) + tok.encode(text, add_special_tokens=False).ids
        _, prefill, greedy, decode = greedy_reference(model, ids_in)
        cases.append({"prompt": text, "ids": ids_in, "prefill": prefill.tolist(), "greedy": greedy,
                      "decode": decode.tolist()})
    print(f"wrote {path}")
    return {"model": "assets/" + os.path.basename(path), "arch": arch, "tokenizer": tokens, "cases": cases}


if __name__ == "__main__":
    main()
