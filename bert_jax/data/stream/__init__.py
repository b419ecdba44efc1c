"""The pretraining input stream: a source's shards as tokens, examples, masked rows, host
batches; the length buckets fine-tuning and inference batch by."""
