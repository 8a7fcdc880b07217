"""`--device auto|cpu|cuda`: where train / evaluate / predict run. A GPU is used when asked for (or, with auto, when one
is present); asking for one that is not there is a user error, not a crash inside torch."""
from __future__ import annotations

import torch

from zhner.errors import ZhnerError

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(name: str) -> torch.device:
    """auto: the GPU when CUDA is available, else the CPU; cpu; cuda (or cuda:N): that GPU, which must exist."""
    if name == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        index = name.partition(":")[2]
        if index and not index.isdigit():
            raise ZhnerError(f"--device {name!r}: expected cuda or cuda:N")
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise ZhnerError(f"--device {name}: no CUDA device is available (torch {torch.__version__}, {build})")
        if index and int(index) >= torch.cuda.device_count():
            raise ZhnerError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s)")
        return torch.device(name)
    raise ZhnerError(f"--device must be one of {', '.join(DEVICES)} (or cuda:N), not {name!r}")
