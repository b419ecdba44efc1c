"""The Python API: one loaded checkpoint, the jobs users call it for.

  from bert_jax import Encoder
  enc = Encoder.load("/tmp/minilm")                     # any checkpoint fine-tuning takes
  vectors = enc.embed(["a sentence", "another"], pooling="mean", normalize=True)
  enc.fill_mask("the capital of france is [MASK] .")    # needs the MLM head
  clf = Encoder.load("runs/mrpc/export")                # a GLUE fine-tuning export
  clf.classify([("a sentence", "its paraphrase")])      # [("1", 0.93)]: label, probability

Each method is the library function its command-line program runs
(`bert_jax.embed.embed`, `bert_jax.fill_mask.fill_mask`), on the checkpoint
loaded once, with the checkpoint's own tokenizer.
"""
import functools
from typing import Optional, Sequence, Union

from etils import epath
import jax
import numpy as np

from bert_jax import bundle as bundle_lib
from bert_jax import checkpoint as ckpt_lib
from bert_jax import embed as embed_lib
from bert_jax import fill_mask as fill_mask_lib
from bert_jax import model as model_lib
from bert_jax.data import length_buckets
from bert_jax.json_file import read_json
from bert_jax.data import tokenizer as tokenizer_lib

Text = Union[str, tuple[str, str]]


class Encoder:
  """A loaded checkpoint (params on the host) and its tokenizer.

  Attributes:
    pretrained: the `checkpoint.Pretrained` (params, model config, vocab, source).
    tokenizer: the checkpoint's tokenizer.
    heads: the param groups beside the encoder ('pooler', 'mlm', 'classifier', ...).
    task: the fine-tuned task recorded in a fine-tuning export's bundle.json, or None.
  """

  def __init__(self, pretrained: ckpt_lib.Pretrained):
    self.pretrained = pretrained
    self.tokenizer = tokenizer_lib.for_checkpoint(pretrained)
    self.heads = bundle_lib.heads_of(pretrained.params)
    info = epath.Path(pretrained.source) / bundle_lib.INFO_FILE
    self.task = read_json(info, missing=f"{info} is missing").get("task") if info.exists() else None

  @classmethod
  def load(cls, path: str) -> "Encoder":
    """Loads a bundle, a pretraining workdir or its checkpoints/ (see load_pretrained)."""
    return cls(ckpt_lib.load_pretrained(path))

  @property
  def config(self):
    return self.pretrained.config

  def embed(self, texts: Sequence[Text], *, pooling: str = "mean", normalize: bool = False,
            layers: Sequence[int] = (-1,), combine: str = "mean",
            max_length: Optional[int] = None, batch_size: int = 32) -> np.ndarray:
    """float32 [len(texts), dim] embeddings of texts or (a, b) pairs (see bert_jax.embed)."""
    emb, _ = embed_lib.embed(self.pretrained, list(texts), pooling=pooling, layers=layers,
                             combine=combine, normalize=normalize, max_length=max_length,
                             batch_size=batch_size, tokenizer=self.tokenizer)
    return emb

  def fill_mask(self, texts: Union[str, Sequence[str]],
                top_k: int = 5) -> list:
    """Top-k (token, probability) per `[MASK]`: for one text a list per mask, for a list of
    texts a list of those."""
    one = isinstance(texts, str)
    result = fill_mask_lib.fill_mask(self.pretrained, [texts] if one else list(texts), top_k=top_k,
                                     tokenizer=self.tokenizer)
    return result[0] if one else result

  def classify(self, texts: Sequence[Text], *, max_length: int = 128,
               batch_size: int = 32) -> list[tuple[Union[str, float], float]]:
    """Labels of texts or (a, b) pairs with a GLUE fine-tuning export's classifier.

    Returns:
      (label, probability) per text for classification tasks; (score, 1.0) for
      regression (STS-B).

    Raises:
      ValueError: the checkpoint has no classifier, or no GLUE task recorded.
    """
    from bert_jax.tasks import glue  # pylint: disable=g-import-not-at-top
    if "classifier" not in self.heads or self.task is None:
      raise ValueError(f"{self.pretrained.source} has no classifier of a GLUE task (heads: "
                       f"{list(self.heads)}); load a fine-tuning run's export/")
    task = glue.get_task(self.task)
    examples = [glue.GlueExample(f"text:{i}", *(t if isinstance(t, tuple) else (t, None)), None, i)
                for i, t in enumerate(texts)]
    arrays = glue.encode_examples(self.tokenizer, examples, max_length)
    # Rows sorted by length into fixed buckets, as fine-tuning's evaluation batches them.
    batches = length_buckets.eval_batches(length_buckets.row_lengths(arrays["input_mask"]),
                                          batch_size, length_buckets.bucket_lengths(max_length))
    params = model_lib.match_scan_layout(self.pretrained.params, self.config)
    forward = _classifier_fn(self.config, task.num_labels)
    with jax.default_matmul_precision("float32"):
      chunks = [np.asarray(forward(params, *length_buckets.cut(
          arrays, batch, ("input_ids", "input_mask", "segment_ids")).values()))
                for batch in batches]
    logits = length_buckets.scatter_outputs(chunks, batches, len(examples))
    if task.is_regression:
      return [(float(x[0]), 1.0) for x in logits]
    probs = np.asarray(jax.nn.softmax(logits.astype(np.float64), -1))
    return [(task.labels[int(np.argmax(p))], float(np.max(p))) for p in probs]


@functools.lru_cache(maxsize=8)
def _classifier_fn(config, num_labels: int):
  module = model_lib.BertForSequenceClassification(config, num_labels=num_labels)
  return jax.jit(lambda params, ids, mask, seg: module.apply({"params": params}, ids, mask, seg))
