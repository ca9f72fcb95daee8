"""The tiny models' byte-level BPE, trained offline with HF `tokenizers` as Qwen2's is set up
(NFC normalizer, the Qwen2 split regex, byte-level, Qwen's special tokens) on a corpus
written here. Shared by tools/gen_qwen3_tiny.py (the default model) and
tools/gen_grammar_masks.py (llguidance's token masks on the same vocabulary); needs only
numpy and tokenizers.
"""
import numpy as np
from tokenizers import Tokenizer, Regex, models, normalizers, pre_tokenizers, decoders, trainers

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
                 r"\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# A training corpus written here (no downloads): prose, code, numbers, chat turns, unicode.
CORPUS = []
words = ("the capital of france is paris . a small model learns to speak slowly but it speaks . "
         "rust python zig tensors axes gradients kernels attention heads tokens layers norm rope "
         "what is why how when where who which bonjour monde ciao mondo hallo welt hola mundo").split()
rng = np.random.default_rng(7)
for i in range(4000):
    n = int(rng.integers(3, 14))
    s = " ".join(words[int(j)] for j in rng.integers(0, len(words), n))
    if i % 5 == 0:
        s = s.capitalize() + "?"
    if i % 7 == 0:
        s += f" {int(rng.integers(0, 100000))} and {rng.uniform(-100, 100):.3f}"
    CORPUS.append(s)
CORPUS += [
    "def forward(self, x):\n    return self.w @ x + self.b\n",
    "fn main() {\n    println!(\"hello, world\");\n}\n",
    "Ünïcödé çàñ bé trícky: naïve café, Straße, ÅÄÖ, Ελληνικά, русский, 日本語のテキスト, 中文字符, 한국어",
    "emoji 🙂🚀👍🏽 and symbols © ® ™ € £ ¥ → ← ≤ ≥ ∑ ∫",
    "tabs\tand  double  spaces   and newlines\n\n\nend",
    "I'm sure it's fine, they'll see what we've done, you'd agree, she's RIGHT. DON'T SHOUT.",
] * 20

def train_tokenizer(pattern=QWEN2_PATTERN, nfc=True, specials=SPECIALS, extra=()):
    """Qwen2's set-up by default; other split patterns, no normalizer, other specials for
    the other families' tiny vocabularies (tools/gen_llama_family_tiny.py); `extra` texts
    join the training corpus."""
    tok = Tokenizer(models.BPE())
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=1024, special_tokens=[], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(list(CORPUS) + list(extra), trainer=trainer)
    tok.add_special_tokens(specials)
    return tok
