"""Pretrained encoders as named resources (`model.bert: e5-small`): readers of the wheels they come in and the user
cache they are derived into. A low layer: numpy and safetensors only, no torch models."""
from zhner.pretrained.e5 import E5_NAME, build_e5_small, cache_root, describe, e5_small_dir, verify
from zhner.pretrained.q4 import dequantize_q4, quantize_q4, read_q4_file, read_q4_model

__all__ = [
    "E5_NAME", "build_e5_small", "cache_root", "describe", "e5_small_dir", "verify",
    "dequantize_q4", "quantize_q4", "read_q4_file", "read_q4_model",
]
