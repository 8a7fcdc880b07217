"""The model zoo: each name maps to (config class, model class); one file per model."""
from __future__ import annotations

from zhner.models.modeling_acts import ACTS, ACTSConfig
from zhner.models.modeling_atssa import ATSSA, ATSSAConfig
from zhner.models.modeling_bert import BertClassifier, BertClassifierConfig, BertTagger, BertTaggerConfig
from zhner.models.modeling_bilstm_crf import BiLSTMCRF, BiLSTMCRFConfig
from zhner.models.modeling_flat import FLAT, FLATConfig
from zhner.models.modeling_nflat import NFLAT, NFLATConfig
from zhner.models.modeling_tener import TENER, TENERConfig
from zhner.models.modeling_tener_classifier import TENERClassifier, TENERClassifierConfig

MODELS = {
    "tener": (TENERConfig, TENER),
    "bilstm_crf": (BiLSTMCRFConfig, BiLSTMCRF),
    "flat": (FLATConfig, FLAT),
    "atssa": (ATSSAConfig, ATSSA),
    "nflat": (NFLATConfig, NFLAT),
    "bert_tagger": (BertTaggerConfig, BertTagger),
    "bert_classifier": (BertClassifierConfig, BertClassifier),
    "tener_classifier": (TENERClassifierConfig, TENERClassifier),
    "acts": (ACTSConfig, ACTS),
}
