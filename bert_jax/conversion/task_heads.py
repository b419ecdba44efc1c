"""A fine-tuned BERT's task head as transformers names it, for `convert --to hf` and back.

  classifier        (a GLUE task, the 'cls' head: the pooled [CLS], dense)
                    -> BertForSequenceClassification (classifier.weight / .bias), one label
                       per class of the task, or one score (problem_type 'regression': STS-B)
  token_classifier  (NER: each token's vector, dense)
                    -> BertForTokenClassification, the run's label list

The labels come from what the export's bundle.json records (`labels`: a GLUE task's classes,
none for a regression; NER's tags); an export written before GLUE's were recorded is left to
--drop_unexpected.
`convert --from hf` reads these two classes back, and ModernBERT's (ModernBertFor
SequenceClassification / TokenClassification, with their prediction head `head`), by
config.json's `architectures`: the head's params, and bundle.json's `labels` from `id2label`
(none for problem_type 'regression'), so that `Encoder.classify` and `Encoder.tag` use a model
fine-tuned with transformers.
Left to --drop_unexpected: the other members' classifiers, which transformers builds otherwise
(RoBERTa's reads <s> through two layers, DistilBERT's pre_classifier, ELECTRA's its own head),
the 'mean' and 'layers_attention' heads, which transformers has no class for, and SQuAD's span
head.
"""
import dataclasses
from typing import Any, Optional

import numpy as np


@dataclasses.dataclass(frozen=True)
class TaskHead:
  group: str  # the params' top-level key
  architecture: str  # transformers' class
  tensors: dict  # transformers' name -> array (PyTorch layout)
  config: dict  # config.json's keys for the labels


def exportable(params: dict, model_type: str, info: dict) -> Optional[TaskHead]:
  """The task head of `params` in transformers' names, or None when it has none (or one that
  transformers builds otherwise: then it stays outside the name map)."""
  if model_type != "bert":
    return None
  if "classifier" in params and info.get("head", "cls") == "cls" and "labels" in info:
    if "pooler" not in params.get("bert", {}):
      return None
    regression = not info["labels"]  # (STS-B: one score, no classes)
    labels = ["LABEL_0"] if regression else list(info["labels"])
    extra = {"problem_type": "regression" if regression else "single_label_classification"}
    return _head(params, "classifier", "BertForSequenceClassification", labels, extra)
  if "token_classifier" in params and info.get("labels"):
    return _head(params, "token_classifier", "BertForTokenClassification",
                 list(info["labels"]), {})
  return None


def _head(params: dict, group: str, architecture: str, labels: list, extra: dict) -> TaskHead:
  kernel = np.asarray(params[group]["kernel"], np.float32)  # [hidden, labels]
  if kernel.shape[1] != len(labels):
    raise ValueError(f"{group}/kernel has {kernel.shape[1]} outputs, but bundle.json records "
                     f"{len(labels)} labels")
  tensors = {"classifier.weight": np.ascontiguousarray(kernel.T),
             "classifier.bias": np.asarray(params[group]["bias"], np.float32)}
  config: dict[str, Any] = {"id2label": {str(i): label for i, label in enumerate(labels)},
                            "label2id": {label: i for i, label in enumerate(labels)}, **extra}
  return TaskHead(group, architecture, tensors, config)


# transformers' classes whose head is read back: class -> (the member, the params' group,
# bundle.json's task). ModernBERT's heads read a prediction head (`head`: dense, activation,
# norm) between the pooled or token vectors and the classifier.
_READ = {"BertForSequenceClassification": ("bert", "classifier", None),
         "BertForTokenClassification": ("bert", "token_classifier", "ner"),
         "ModernBertForSequenceClassification": ("modernbert", "classifier", None),
         "ModernBertForTokenClassification": ("modernbert", "token_classifier", "ner")}


def readable(hf_config: dict, model_type: str) -> Optional[str]:
  """The architecture of config.json whose task head `convert --from hf` reads, or None."""
  arch = (hf_config.get("architectures") or [None])[0]
  return arch if arch in _READ and _READ[arch][0] == model_type else None


def head_names(architecture: str, names) -> list[str]:
  """The tensor names of `architecture`'s task head among `names` (the classifier's, and
  ModernBERT's prediction head's)."""
  roots = ("classifier.", "head.") if _READ[architecture][0] == "modernbert" else ("classifier.",)
  return [n for n in names if n.startswith(roots)]


def read_head(hf_config: dict, architecture: str, tensors: dict, source: str
              ) -> tuple[dict, dict]:
  """(the params' groups, bundle.json's fields) of transformers' task head, from its tensors
  (name -> array, PyTorch layout); ValueError names config.json's label keys where they
  disagree with the weights."""
  _, group, task = _READ[architecture]
  weight, bias = tensors["classifier.weight"], tensors["classifier.bias"]
  outputs = weight.shape[0]  # [labels, hidden]
  id2label = hf_config.get("id2label") or {str(i): f"LABEL_{i}" for i in range(outputs)}
  try:
    labels = [id2label[k] for k in sorted(id2label, key=int)]
  except ValueError:
    raise ValueError(f"{source}: id2label's keys must be the numbers 0..{outputs - 1} "
                     f"(got {sorted(id2label)[:4]})") from None
  problem = hf_config.get("problem_type")
  if problem == "multi_label_classification":
    raise ValueError(f"{source}: problem_type 'multi_label_classification' scores each label "
                     "on its own (a sigmoid each); bert_jax's classifier picks one label per "
                     "text (a softmax)")
  regression = group == "classifier" and (problem == "regression" or outputs == 1)
  if len(labels) != outputs and not regression:
    raise ValueError(f"{source}: id2label names {len(labels)} labels, but the classifier has "
                     f"{outputs} outputs")
  groups = {group: {"kernel": np.ascontiguousarray(weight.T), "bias": np.asarray(bias)}}
  if "head.dense.weight" in tensors:
    dense = {"kernel": np.ascontiguousarray(tensors["head.dense.weight"].T)}
    norm = {"scale": np.asarray(tensors["head.norm.weight"])}
    if "head.dense.bias" in tensors:
      dense["bias"] = np.asarray(tensors["head.dense.bias"])
    if "head.norm.bias" in tensors:
      norm["bias"] = np.asarray(tensors["head.norm.bias"])
    groups["head"] = {"dense": dense, "norm": norm}
  info = {"labels": [] if regression else labels}
  if group == "classifier":
    info["head"] = hf_config.get("classifier_pooling", "cls")  # (ModernBERT's: cls or mean)
  if task:
    info["task"] = task
  return groups, info
