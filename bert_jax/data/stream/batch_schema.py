"""The pretraining batch's features: one schema for the input pipeline and the compile-time
abstract batch (pretrain_setup.abstract_batch), so the two cannot drift apart."""
import numpy as np


def features(seq_len: int, max_predictions: int, packing: bool
             ) -> dict[str, tuple[type, tuple[int, ...]]]:
  """Name -> (dtype, shape of one row), in the pipeline's order."""
  length, p = seq_len, max_predictions
  out = {"input_ids": (np.int32, (length,)), "input_mask": (np.int32, (length,)),
         "segment_ids": (np.int32, (length,)), "next_sentence_labels": (np.int32, ()),
         "masked_lm_positions": (np.int32, (p,)), "masked_lm_ids": (np.int32, (p,)),
         "masked_lm_weights": (np.float32, (p,))}
  if packing:
    out["position_ids"] = (np.int32, (length,))
  return out
