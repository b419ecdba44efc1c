"""Optional: the GLUE TSV reader on the real files of the optional real-data folder
(tests/conftest.py).

The reference is TFDS's own GLUE builder (`_generate_examples`), run on the same
files: every text and label must agree, in order. Skips without the folder.
"""
import numpy as np
import pytest

from bert_jax.runtime import cpu_tensorflow
from bert_jax.tasks.glue import data as glue

# Rows per split, from the real-data folder's README.md (test sizes from the files).
_ROWS = {
    "cola": {"train": 8551, "dev": 1043, "test": 1063},
    "mrpc": {"train": 3668, "dev": 408, "test": 1725},
    "rte": {"train": 2490, "dev": 277, "test": 3000},
    "stsb": {"train": 5749, "dev": 1500, "test": 1379},
}


def _ours_as_tfds(task, examples):
  """Our examples in TFDS's terms: (text features..., label id or float or -1)."""
  rows = []
  for ex in examples:
    if ex.label is None:
      label = -1
    elif task.is_regression:
      label = float(np.float32(ex.label))  # TFDS stores float32.
    else:
      name = task.labels[ex.label]
      label = task.tfds_labels.index(name) if name in task.tfds_labels else int(name)
    rows.append((ex.text_a, ex.text_b, label))
  return rows


def _tfds_rows(task, generated):
  rows = []
  for _, ex in generated:
    text_b = ex[task.tfds_text_b] if task.tfds_text_b else None
    label = ex["label"]
    if isinstance(label, str):  # ClassLabel names are encoded to ids later by TFDS.
      label = task.tfds_labels.index(label)
    rows.append((ex[task.tfds_text_a], text_b, float(label) if task.is_regression else label))
  return rows


@pytest.mark.parametrize("name", sorted(_ROWS))
def test_real_glue_files_match_tfds_builder(shared_data, name):
  tfds = cpu_tensorflow.import_tfds()
  task = glue.get_task(name)
  data_dir = str(shared_data / "glue")
  builder = tfds.builder(task.tfds_name, data_dir=str(shared_data / "no_such_tfds_dir"))
  mrpc_dir = shared_data / "glue" / "MRPC"
  mrpc_files = {"dev_ids": str(mrpc_dir / "dev_ids.tsv"),
                "train": str(mrpc_dir / "msr_paraphrase_train.txt"),
                "test": str(mrpc_dir / "msr_paraphrase_test.txt")}
  for split, rows in _ROWS[name].items():
    examples = glue.read_tsv(task, data_dir, split)
    assert len(examples) == rows, split
    if name == "mrpc":
      generated = builder._generate_examples(None, split, mrpc_files)
    else:
      generated = builder._generate_examples(glue.tsv_path(task, data_dir, split), split)
    reference = _tfds_rows(task, generated)
    ours = _ours_as_tfds(task, examples)
    assert len(ours) == len(reference), split
    mismatches = [(i, a, b) for i, (a, b) in enumerate(zip(ours, reference)) if a != b]
    assert not mismatches, (split, mismatches[:3])
