"""Dependency syntax for syntax-aware attention (SLA): parsers behind one interface, a parse cache, tree distances and
the local attention masks. Sits between `data` and `nn`: imports zhner.data and zhner.errors only."""
from zhner.syntax.cache import ParseCache, ParseStats, add_heads, parse_cache_dir, parse_report
from zhner.syntax.distance import (
    check_heads, local_mask, neighbour_distance, piece_mask, tree_distance, window_mask, word_of_piece,
)
from zhner.syntax.parsers import ConlluParser, Parser, SpacyParser, UDChineseParser, make_parser, project_heads

__all__ = [
    "Parser", "SpacyParser", "UDChineseParser", "ConlluParser", "make_parser", "project_heads",
    "ParseCache", "ParseStats", "add_heads", "parse_cache_dir", "parse_report",
    "check_heads", "tree_distance", "neighbour_distance", "local_mask", "window_mask", "word_of_piece", "piece_mask",
]
