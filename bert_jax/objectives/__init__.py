"""Pretraining objectives (config.objective): each module gives a train_core.Objective and its logged metrics.

  mlm_nsp  masked LM with a sentence-pair task on BertForPreTraining's pair head:
           objectives 'mlm_nsp' (BERT, next sentence), 'mlm_sop' (ALBERT, sentence order)
           and 'mlm' (RoBERTa, MLM alone, no pair head)
  electra  'electra': a small MLM generator and the discriminator in one params tree;
           replaced-token detection
  distill  'distill': DistilBERT's student of a frozen teacher (soft targets, MLM, cosine)

An objective module provides `init_fn(...)` (rng -> params), `objective(...)` (a
train_core.Objective) and `summarize(sums, ...)` (host side: accumulated sums -> the
logged means); bert_jax.pretrain_setup.build picks one from the config.
"""
