"""What the tiny Parakeet generators share: the encoder's sizes and the randomization that
makes every parameter and batch-norm statistic matter (tools/gen_parakeet_tiny.py,
tools/gen_parakeet_transducers.py)."""
import torch
from transformers import ParakeetEncoderConfig


def tiny_encoder():
    """2 FastConformer blocks of width 32, 4 heads, kernel 9, 8x subsampling with 8 channels."""
    return ParakeetEncoderConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        conv_kernel_size=9,
        subsampling_factor=8,
        subsampling_conv_channels=8,
        num_mel_bins=80,
    )


def randomize(model):
    """Every parameter redrawn (matrices N(0, 0.3), vectors N(0, 0.1), norm weights around 1),
    batch-norm statistics randomized (they start as zeros and ones)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm = name.endswith("norm.weight") or ".norm_" in name and name.endswith("weight")
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.1) + (1.0 if norm else 0.0))
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.running_mean.copy_(torch.randn_like(m.running_mean) * 0.2)
                m.running_var.copy_(torch.rand_like(m.running_var) + 0.5)


def ctc_outputs(model, inp):
    """A CTC model's logits and greedy `generate` ids over the valid frames of the features
    `inp` (one utterance), and that frame count."""
    with torch.no_grad():
        out = model(input_features=inp["input_features"], attention_mask=inp["attention_mask"])
        seq = model.generate(input_features=inp["input_features"], attention_mask=inp["attention_mask"])
    n = int(model.encoder._get_subsampling_output_length(inp["attention_mask"].sum(-1))[0])
    return out.logits[0, :n].contiguous(), seq[0, :n].to(torch.int32).contiguous(), n
