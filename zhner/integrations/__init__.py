"""zhner inside other libraries' pipelines: `hf` (transformers' token-classification output records) and `spacy` (a
pipeline component setting doc.ents). Each imports its library only when used."""
