"""Pretraining objectives (config.objective): each module gives a train_core.Objective and its logged metrics.

  mlm_nsp  masked LM with a sentence-pair task on BertForPreTraining's pair head:
           objectives 'mlm_nsp' (BERT, next sentence), 'mlm_sop' (ALBERT, sentence order)
           and 'mlm' (RoBERTa, MLM alone, no pair head)
  electra  'electra': a small MLM generator and the discriminator in one params tree;
           replaced-token detection
  distill  'distill': DistilBERT's student of a frozen teacher (soft targets, MLM, cosine)

An objective module declares a `SPEC` (bert_jax.objectives.base.Spec): the objective
names it serves and their data modes, the config keys it reads (`options`: it is handed their
values alone), its own config checks, the model types only it trains, whether it reads a
teacher or can use DeBERTa's enhanced mask decoder, and its `build(options, inputs)`, which
returns the run's Pretraining pieces (model config, train_core.Objective, init, metrics
summary, exported params, FLOPs per token).
bert_jax.objectives.registry finds the SPEC by config.objective; an objective module
from outside the package registers its own. bert_jax.pretraining.setup names none of them.
"""
