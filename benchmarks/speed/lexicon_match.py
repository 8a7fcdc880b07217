"""Lexicon matching speed: zhner's Aho-Corasick Lexicon.match against the torch-free runtime's pure-Python matcher
(zhner.runtime.matcher: sets of the words and of their prefixes) and a naive substring scan.

Usage: .venv/bin/python benchmarks/speed/lexicon_match.py [--repeats 3] [--json OUT.json]
Lexicon: the installed jieba's dict.txt, words of >= 2 characters. Sentences: Resume train + MSRA test
($ZHNER_DATA or ../shared/data). The naive scan looks up every substring s[i:i+L], 2 <= L <= longest word, in a Python set.
Reports the best of `repeats` timings; every method must return the same matches.
"""
from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

harness.use_checkout()
from zhner.data.corpus import read_corpus  # noqa: E402
from zhner.data.registry import find_file  # noqa: E402
from zhner.lexicon.lexicon import Lexicon  # noqa: E402
from zhner.runtime.matcher import WordMatcher  # noqa: E402

SPLITS = [("resume", "train"), ("msra", "test")]  # found as the CLI finds them ($ZHNER_DATA, shared/data)


def naive_match(text: str, words: set[str], min_len: int, max_len: int) -> list[tuple[int, int, str]]:
    n = len(text)
    return [
        (i, j, text[i:j]) for i in range(n) for j in range(i + min_len, min(n, i + max_len) + 1) if text[i:j] in words
    ]


def best_of(repeats: int, fn) -> tuple[float, object]:
    clocks, result = harness.repeated(fn, repeats)
    return min(clock.wall_s for clock in clocks), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers to this file")
    args = parser.parse_args()
    provenance = harness.Run()
    texts = [s.text for name, split in SPLITS for s in read_corpus(find_file(name, split)).sentences]
    n_chars = sum(map(len, texts))

    with harness.clocked() as load:
        lexicon = Lexicon.from_jieba()
    with harness.clocked() as build:
        lexicon._get_automaton()  # built lazily on the first match; time it on its own
    load_s, build_s = load.wall_s, build.wall_s

    ac_s, ac = best_of(args.repeats, lambda: lexicon.match_many(texts))
    words, max_len = set(lexicon.words), lexicon.max_len
    naive_s, naive = best_of(args.repeats, lambda: [naive_match(t, words, 2, max_len) for t in texts])
    assert ac == naive, "Aho-Corasick and the naive scan disagree"
    with harness.clocked() as sets:
        prefix_matcher = WordMatcher(lexicon.words)
    prefix_s, prefix = best_of(args.repeats, lambda: [prefix_matcher.match(t) for t in texts])
    assert ac == prefix, "Aho-Corasick and the prefix sets disagree"
    n_matches = sum(map(len, ac))

    results = {
        "python": platform.python_version(),
        "lexicon_words": len(lexicon),
        "max_word_len": max_len,
        "sentences": len(texts),
        "chars": n_chars,
        "matches_per_sentence": n_matches / len(texts),
        "matches_per_char": n_matches / n_chars,
        "lexicon_load_s": load_s,
        "automaton_build_s": build_s,
        "aho_corasick": {"seconds": ac_s, "sentences_per_s": len(texts) / ac_s, "chars_per_s": n_chars / ac_s},
        "naive_scan": {"seconds": naive_s, "sentences_per_s": len(texts) / naive_s, "chars_per_s": n_chars / naive_s},
        "prefix_sets": {"seconds": prefix_s, "sentences_per_s": len(texts) / prefix_s, "chars_per_s": n_chars / prefix_s,
                        "build_s": sets.wall_s},
        "speedup": naive_s / ac_s,
    }
    print(f"lexicon: {len(lexicon):,} jieba words (len >= 2, longest {max_len}); load {load_s:.2f} s, "
          f"automaton build {build_s:.2f} s")
    print(f"text: {len(texts):,} sentences, {n_chars:,} chars; {results['matches_per_sentence']:.1f} matches/sentence "
          f"({results['matches_per_char']:.2f}/char)")
    for name in ("aho_corasick", "prefix_sets", "naive_scan"):
        r = results[name]
        print(f"{name:>13}: {r['seconds']:.3f} s  {r['sentences_per_s']:>9,.0f} sentences/s  {r['chars_per_s']:>11,.0f} chars/s")
    print(f"speedup: {results['speedup']:.1f}x over the naive scan, {prefix_s / ac_s:.1f}x over the prefix sets "
          f"(built in {sets.wall_s:.2f} s; identical matches)")
    if args.json:
        harness.write(args.json, provenance.record(results), echo=False)


if __name__ == "__main__":
    main()
