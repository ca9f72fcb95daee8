#!/usr/bin/env python3
"""Token masks from the `llguidance` PyPI package on the tiny Qwen3's vocabulary.

The vocabulary comes from HF `tokenizers` (tools/tiny_tokenizer.py, the tokenizer the
default model's GGUF was written from; checked here against the GGUF's token list), so
llguidance decodes the byte-level tokens and marks the special ones itself, independently
of fucina's GGUF tokenizer. For each grammar, a seeded walk picks allowed tokens and records,
at every step, the set of ids the grammar allows next (a hex bitmask). fucina-models/tests/grammar_masks.rs
replays the walks through fucina's GrammarCompiler and requires the same sets, exactly.

Writes fucina-models/tests/goldens/grammar_masks.json.
"""
import json
import os

import gguf
import llguidance
import numpy as np

from tiny_tokenizer import train_tokenizer

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..")
asset = os.path.join(root, "fucina-models", "assets", "qwen3-tiny-f32.gguf")
out = os.path.join(root, "fucina-models", "tests", "goldens", "grammar_masks.json")

# fucina's default JSON layout (llm/grammar.rs): separators as json.dumps writes them.
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

CASES = [
    ("json_schema", {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 6},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "tags": {"type": "array", "items": {"enum": ["rust", "zig", "c"]}, "maxItems": 3},
            "ok": {"type": "boolean"},
        },
        "required": ["name", "age", "tags", "ok"],
        "additionalProperties": False,
    }),
    ("json_schema", {"type": "object"}),
    ("json_schema", {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 4}),
    ("regex", r"[a-z]+ [0-9]{2,4}( (yes|no))?"),
    ("regex", r"(Paris|Rome|Berlin)\."),
    ("lark", 'start: "say " WORD (", " WORD)*\nWORD: /[a-z]{1,5}/'),
    ("lark", 'start: "The answer is " ANSWER\nANSWER: /[0-9]+/ | "unknown"'),
]
WALKS_PER_CASE = 3
MAX_STEPS = 40


def grammar(kind, spec):
    if kind == "json_schema":
        return llguidance.LLMatcher.grammar_from_json_schema(spec, overrides=JSON_LAYOUT)
    if kind == "regex":
        return llguidance.LLMatcher.grammar_from_regex(spec)
    return llguidance.LLMatcher.grammar_from_lark(spec)


def allowed(m, n_vocab):
    bits = np.frombuffer(m.compute_bitmask(), dtype=np.uint32)
    return [t for t in range(n_vocab) if (bits[t // 32] >> (t % 32)) & 1]


def hex_mask(ids, n_vocab):
    """Bit t of byte t // 8 set when token t is allowed, as hex."""
    b = bytearray((n_vocab + 7) // 8)
    for t in ids:
        b[t // 8] |= 1 << (t % 8)
    return b.hex()


def main():
    tok = train_tokenizer()
    vocab = tok.get_vocab()
    n_vocab = len(vocab)
    reader = gguf.GGUFReader(asset)
    field = reader.fields["tokenizer.ggml.tokens"]
    gguf_tokens = [bytes(field.parts[i]).decode() for i in field.data]
    hf_tokens = [None] * n_vocab
    for t, i in vocab.items():
        hf_tokens[i] = t
    assert hf_tokens == gguf_tokens, "the trained vocabulary is not the default model's"
    end = vocab["<|im_end|>"]
    ll = llguidance.LLTokenizer(tok.to_str(), n_vocab=n_vocab, eos_token=end)
    rng = np.random.default_rng(11)
    cases = []
    for kind, spec in CASES:
        walks = []
        for _ in range(WALKS_PER_CASE):
            m = llguidance.LLMatcher(ll, grammar(kind, spec), log_level=0)
            assert not m.is_error(), m.get_error()
            steps = []
            for _ in range(MAX_STEPS):
                a = allowed(m, n_vocab)
                content = [t for t in a if t != end]
                if not content:
                    steps.append({"allowed": hex_mask(a, n_vocab), "token": None})
                    break
                t = int(content[int(rng.integers(0, len(content)))])
                steps.append({"allowed": hex_mask(a, n_vocab), "token": t})
                assert m.consume_token(t), m.get_error()
            walks.append(steps)
        cases.append({"kind": kind, "spec": spec, "walks": walks})
    with open(out, "w") as f:
        json.dump({"generator": "tools/gen_grammar_masks.py", "llguidance": llguidance.__version__,
                   "end_token": end, "vocab": n_vocab, "cases": cases}, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out}: {len(cases)} grammars x {WALKS_PER_CASE} walks")


if __name__ == "__main__":
    main()
