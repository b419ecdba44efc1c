"""Pretraining objectives: each module gives a train_core.Objective and its logged metrics.

  mlm_nsp  BERT's masked-LM loss plus, when the data has sentence pairs, next-sentence
           prediction (MLM alone for RoBERTa-style full sentences)

An objective module provides `init_fn(model, seq_len, num_predictions)` (rng ->
params), `objective(model)` (a train_core.Objective) and `summarize(sums)` (host
side: accumulated sums -> the logged means).
"""
