"""A user-supplied local MT model (a `transformers` seq2seq directory, e.g. MarianMT's opus-mt-zh-en) as a Translator.

`transformers` is not a dependency of zhner (only of its tests): it is imported when a ModelTranslator is made, and its
absence is a one-line error. Nothing is downloaded: the directory must hold the model and its tokenizer.
"""
from __future__ import annotations

from pathlib import Path

from zhner.errors import ZhnerError


class ModelTranslator:
    """Greedy decoding (no sampling, one beam) of `AutoModelForSeq2SeqLM` with its `AutoTokenizer`, in batches of
    `batch_size` texts; inputs longer than `max_input_tokens` are truncated, outputs stop at `max_new_tokens`."""

    def __init__(self, directory: str | Path, batch_size: int = 16, max_input_tokens: int = 512, max_new_tokens: int = 256):
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise ZhnerError("no such directory: a model translator reads a local seq2seq model directory", self.directory)
        try:
            import transformers
        except ImportError:
            raise ZhnerError("a model translator needs transformers: pip install transformers", self.directory) from None
        try:
            # nothing from the directory runs: no code of its own (trust_remote_code), and a pickled
            # pytorch_model.bin is read as tensors only (weights_only; transformers' default, said explicitly)
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(self.directory), trust_remote_code=False)
            self.model = transformers.AutoModelForSeq2SeqLM.from_pretrained(
                str(self.directory), trust_remote_code=False, weights_only=True
            ).eval()
        except Exception as exc:  # transformers' own errors for a directory it cannot read
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ZhnerError(f"cannot load a seq2seq model and tokenizer: {first}", self.directory) from None
        self.batch_size, self.max_input_tokens, self.max_new_tokens = batch_size, max_input_tokens, max_new_tokens
        self.name = f"model:{self.directory.resolve()}"

    def translate(self, texts: list[str]) -> list[str]:
        import torch

        out = [""] * len(texts)
        todo = [i for i, t in enumerate(texts) if t.strip()]  # an empty text stays empty, without a model call
        for start in range(0, len(todo), self.batch_size):
            index = todo[start : start + self.batch_size]
            inputs = self.tokenizer(
                [texts[i] for i in index], return_tensors="pt", padding=True, truncation=True, max_length=self.max_input_tokens
            )
            with torch.no_grad():
                ids = self.model.generate(
                    input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], num_beams=1, do_sample=False, max_new_tokens=self.max_new_tokens)
            for i, text in zip(index, self.tokenizer.batch_decode(ids, skip_special_tokens=True)):
                out[i] = text.strip()
        return out
