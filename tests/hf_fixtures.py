"""A tiny random Hugging Face style BERT model (safetensors), written by the tests."""

import json
import os

import numpy as np
from safetensors.numpy import save_file

TINY = {"vocab_size": 12, "hidden_size": 8, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 16, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 10, "type_vocab_size": 2,
        "initializer_range": 0.02, "layer_norm_eps": 1e-12, "model_type": "bert",
        "architectures": ["BertForPreTraining"]}
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]


def tiny_tensors(prefix="bert.", ln=("weight", "bias"), seed=0, config=None):
  """Returns (hf_tensors, google_expected): random HF tensors and their Google form.

  Args:
    prefix: "bert." (BertForPreTraining names) or "" (BertModel names).
    ln: the LayerNorm parameter names, ("weight", "bias") or ("gamma", "beta").
    seed: numpy seed of the values.
    config: the Hugging Face config dict (default TINY).
  """
  config = TINY if config is None else config
  rng = np.random.RandomState(seed)
  h, i = config["hidden_size"], config["intermediate_size"]
  hf, google = {}, {}

  def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)

  def table(hf_name, g_name, shape):
    hf[prefix + hf_name] = google[g_name] = rand(*shape)

  def linear(hf_scope, g_scope, n_in, n_out):
    w, b = rand(n_out, n_in), rand(n_out)
    hf[prefix + hf_scope + ".weight"], hf[prefix + hf_scope + ".bias"] = w, b
    google[g_scope + "/kernel"], google[g_scope + "/bias"] = w.T, b

  def layer_norm(hf_scope, g_scope):
    g, b = rand(h), rand(h)
    hf[prefix + hf_scope + "." + ln[0]], hf[prefix + hf_scope + "." + ln[1]] = g, b
    google[g_scope + "/gamma"], google[g_scope + "/beta"] = g, b

  table("embeddings.word_embeddings.weight", "bert/embeddings/word_embeddings",
        (config["vocab_size"], h))
  table("embeddings.position_embeddings.weight", "bert/embeddings/position_embeddings",
        (config["max_position_embeddings"], h))
  table("embeddings.token_type_embeddings.weight",
        "bert/embeddings/token_type_embeddings", (config["type_vocab_size"], h))
  layer_norm("embeddings.LayerNorm", "bert/embeddings/LayerNorm")
  hf[prefix + "embeddings.position_ids"] = np.arange(
      config["max_position_embeddings"], dtype=np.int64)[None]
  for n in range(config["num_hidden_layers"]):
    p, g = "encoder.layer.%d." % n, "bert/encoder/layer_%d/" % n
    for name in ("query", "key", "value"):
      linear(p + "attention.self." + name, g + "attention/self/" + name, h, h)
    linear(p + "attention.output.dense", g + "attention/output/dense", h, h)
    layer_norm(p + "attention.output.LayerNorm", g + "attention/output/LayerNorm")
    linear(p + "intermediate.dense", g + "intermediate/dense", h, i)
    linear(p + "output.dense", g + "output/dense", i, h)
    layer_norm(p + "output.LayerNorm", g + "output/LayerNorm")
  linear("pooler.dense", "bert/pooler/dense", h, h)
  hf["cls.predictions.bias"] = rand(config["vocab_size"])
  hf["cls.seq_relationship.weight"] = rand(2, h)
  return hf, google


def write_hf_model(folder, tensors, config=None, vocab=None):
  """Writes model.safetensors, config.json and vocab.txt into `folder`."""
  os.makedirs(folder, exist_ok=True)
  save_file(tensors, os.path.join(folder, "model.safetensors"))
  with open(os.path.join(folder, "config.json"), "w") as f:
    json.dump(TINY if config is None else config, f)
  with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(TINY_VOCAB if vocab is None else vocab) + "\n")
  return folder
