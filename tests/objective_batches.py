"""A tiny masked-LM batch for the objectives' unit tests (tests/test_distill.py, tests/test_electra.py)."""
from typing import Optional

import numpy as np

VOCAB, LEN, P = 64, 16, 4


def masked_batch(b: int = 4, seed: int = 0, mask_id: Optional[int] = None) -> dict[str, np.ndarray]:
  """b random sequences of LEN ids (the last 3 padding) with P predictions each.

  Row 0's last prediction is padding (weight 0: its position must not be written or counted).
  With mask_id, the predicted positions of input_ids hold it (as [MASK]); otherwise the originals.
  """
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, VOCAB, (b, LEN)).astype(np.int32)
  mask = np.ones((b, LEN), np.int32)
  mask[:, -3:] = 0
  pos = np.stack([np.sort(rng.choice(np.arange(1, LEN - 3), P, replace=False))
                  for _ in range(b)]).astype(np.int32)
  weights = np.ones((b, P), np.float32)
  weights[0, -1] = 0.0
  labels = np.take_along_axis(ids, pos, 1)
  inputs = ids.copy()
  if mask_id is not None:
    np.put_along_axis(inputs, pos, mask_id, 1)
  return dict(input_ids=inputs, input_mask=mask, segment_ids=np.zeros_like(ids),
              masked_lm_positions=pos, masked_lm_ids=labels, masked_lm_weights=weights)
