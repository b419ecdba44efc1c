"""The names of what a run keeps in its workdir: the one place that spells them.

A pretraining workdir holds CHECKPOINTS/, EXPORT/ (the params bundle), METRICS and
TENSORBOARD/; a fine-tuning workdir FINETUNE_CHECKPOINTS/, RESULTS (and RESULTS_PER_SEED),
the task's prediction files, RUN_FILE (what it runs and whether it finished), EXPORT/ (the
fine-tuned bundle), METRICS and TENSORBOARD/.
"""
CHECKPOINTS = "checkpoints"
FINETUNE_CHECKPOINTS = "finetune_checkpoints"
EXPORT = "export"
METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"
RESULTS = "eval_results.json"
RESULTS_PER_SEED = "eval_results_per_seed.json"
RUN_FILE = "run.json"
