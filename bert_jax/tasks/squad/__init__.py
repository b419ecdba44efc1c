"""SQuAD: features, offsets, the task module and the official metrics."""
