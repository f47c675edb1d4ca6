"""Tests of scripts/benchmark.py: the FLOPs formula, settings, output, a real tiny run."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, requires

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import benchmark  # pylint: disable=wrong-import-position
import benchmark_processes  # pylint: disable=wrong-import-position
import modeling  # pylint: disable=wrong-import-position

SCRIPT = os.path.join(ROOT, "scripts", "benchmark.py")


def tiny_bert_config(layers=2, hidden=8, heads=2, intermediate=16):
  return modeling.BertConfig(vocab_size=50, hidden_size=hidden, num_hidden_layers=layers,
                             num_attention_heads=heads, intermediate_size=intermediate)


def test_flops_formula_matches_hand_computation():
  config = tiny_bert_config(layers=2, hidden=8, intermediate=16)
  flops = benchmark.train_flops_per_example(config, seq_length=4)
  # Per layer: Q, K, V, attention output 8x8 each; FFN 8x16 and 16x8.
  assert flops["matmul_params"] == 2 * (4 * 64 + 8 * 16 + 16 * 8) == 1024
  # Forward: 2 FLOPs per weight per token; QK^T and AV: 2 * S^2 * H each per layer.
  assert flops["forward_dense"] == 2 * 1024 * 4 == 8192
  assert flops["forward_attention"] == 2 * (2 * 4 * 4 * 8) * 2 == 1024
  # Training = 3x forward = 6 * N_mm * S + 12 * L * S^2 * H.
  assert flops["train_total"] == 6 * 1024 * 4 + 12 * 2 * 16 * 8 == 27648
  # N_mm is count_parameters without embeddings less biases, LayerNorms and pooler.
  h, i, l = 8, 16, 2
  others = l * (4 * h + i + h + 4 * h) + h * h + h
  assert modeling.count_parameters(config, include_embeddings=False) == 1024 + others


def test_pretraining_flops_add_the_masked_lm_head():
  config = tiny_bert_config(layers=2, hidden=8, intermediate=16)  # vocab 50
  classifier = benchmark.train_flops_per_example(config, seq_length=4)
  pretrain = benchmark.train_flops_per_example(config, seq_length=4, masked_positions=3)
  # The transform (8x8) and the output embedding (8x50) on 3 positions, 3x forward.
  assert pretrain["forward_mlm_head"] == 2 * 3 * (64 + 8 * 50) == 2784
  assert pretrain["train_total"] == classifier["train_total"] + 3 * 2784
  lines = benchmark.flops_report(config, 4, pretrain)
  assert lines[0].endswith("+ 6 * P * (H^2 + H*V)")
  assert any("masked-LM head" in line for line in lines)
  assert not any("masked-LM head" in line for line in
                 benchmark.flops_report(config, 4, classifier))


def test_synthetic_pretraining_records(tmp_path):
  import pretraining_data  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  args = benchmark.parse_args(["--task", "pretrain", "--vocab_size", "40",
                               "--max_seq_length", "20"])
  assert args.max_predictions_per_seq == 4  # 15% of 20, + 1
  assert args.script == os.path.join(ROOT, "run_pretraining.py")
  paths = benchmark.write_task(str(tmp_path), args, num_examples=30)
  records = os.path.join(paths["data_dir"], benchmark.PRETRAIN_RECORDS)
  pretraining_data.check_input_file(records, 20, 4)  # raises on a mismatch
  spec = pretraining_data._feature_spec(20, 4)  # pylint: disable=protected-access
  examples = [tf.io.parse_single_example(r, spec)
              for r in tf.data.TFRecordDataset(records)]
  assert len(examples) == 30
  next_labels = set()
  for e in examples:
    ids, segments = e["input_ids"].numpy(), e["segment_ids"].numpy()
    positions = e["masked_lm_positions"].numpy()
    assert ids[0] == 2 and list(ids).count(3) == 2 and ids[-1] == 3  # [CLS] .. [SEP]
    assert e["input_mask"].numpy().all() and (ids >= 2).all()  # no padding
    assert sorted(set(segments)) == [0, 1] and segments[list(ids).index(3) + 1] == 1
    assert len(set(positions)) == 4 and all(ids[positions] >= 5)  # words only
    assert (e["masked_lm_weights"].numpy() == 1).all()
    assert (e["masked_lm_ids"].numpy() >= 5).all()
    next_labels.add(int(e["next_sentence_labels"].numpy()[0]))
  assert next_labels == {0, 1}
  with pytest.raises(benchmark.BenchmarkError, match="--max_predictions_per_seq"):
    benchmark.validate_args(benchmark.parse_args(
        ["--task", "pretrain", "--max_seq_length", "8", "--max_predictions_per_seq", "6"]))


def test_flops_of_the_default_config():
  args = benchmark.parse_args([])
  config = modeling.BertConfig.from_dict(benchmark.bert_config_dict(args))
  flops = benchmark.train_flops_per_example(config, args.max_seq_length)
  n_mm = 6 * (4 * 384 ** 2 + 2 * 384 * 1536)
  assert flops["train_total"] == 6 * n_mm * 128 + 12 * 6 * 128 ** 2 * 384
  assert flops["pooler_share"] < 0.001


def test_parse_settings():
  assert benchmark.parse_settings("1x1, 1x2,2x1,1x1", gpu=False) == [(1, 1), (1, 2),
                                                                    (2, 1)]
  assert benchmark.parse_settings("1,2,4", gpu=True) == [(1, 0), (2, 0), (4, 0)]
  for bad in ("2", "0x1", "1xa", ""):
    with pytest.raises(benchmark.BenchmarkError, match="--settings"):
      benchmark.parse_settings(bad, gpu=False)


def test_synthetic_task_fills_the_sequence(tmp_path):
  import classifier_data  # pylint: disable=import-outside-toplevel
  import tokenization  # pylint: disable=import-outside-toplevel
  args = benchmark.parse_args(["--vocab_size", "40", "--max_seq_length", "12"])
  paths = benchmark.write_task(str(tmp_path), args, num_examples=10)
  vocab = open(paths["vocab_file"]).read().split()
  assert vocab[:5] == benchmark.SPECIAL_TOKENS and vocab[-1] == "w34" and len(vocab) == 40
  tokenizer = tokenization.FullTokenizer(paths["vocab_file"], True)
  examples = classifier_data.TsvProcessor().get_train_examples(paths["data_dir"])
  assert len(examples) == 10 and {e.label for e in examples} <= {"0", "1"}
  feature = classifier_data.convert_single_example(0, examples[0], {"0": 0, "1": 1}, 12,
                                                   tokenizer)
  assert 0 not in feature.input_ids and all(feature.input_mask)  # no padding, no [PAD]
  assert tokenizer.vocab["[UNK]"] not in feature.input_ids


def fake_runs(gpu):
  t = 0 if gpu else 1
  settings = [(1, t), (2, t)] + ([] if gpu else [(1, 2)])
  runs = [{"setting": benchmark.setting_name(p, tt), "processes": p, "threads": tt,
           "precision": "fp32", "metrics": {"examples_per_sec_global": 10.0 * p * (0.9 if p > 1 else 1) *
                       (1.5 if tt == 2 else 1),
                       "examples_per_sec_per_process": 10.0 * (0.9 if p > 1 else 1),
                       "step_time_p50_s": 0.5}} for p, tt in settings]
  peaks = {}
  for suffix in [""] + (["-bfloat16", "-float16"] if gpu else []):
    peaks[benchmark.peak_key(1, t) + suffix] = {
        "processes": 1, "threads": t, "dtype": "float32", "n": 64,
        "per_process_best": [1.0], "aggregate_best": 1.0}
    peaks[benchmark.peak_key(2, t) + suffix] = {
        "processes": 2, "threads": t, "dtype": "float32", "n": 64,
        "per_process_best": [0.8, 0.8], "aggregate_best": 1.6}
  return runs, peaks


@pytest.mark.parametrize("gpu", [False, True])
def test_derived_numbers_and_table(gpu):
  runs, peaks = fake_runs(gpu)
  benchmark.derive(runs, peaks, flops_per_example=1e11, gpu=gpu)
  one, two = runs[0]["derived"], runs[1]["derived"]
  assert two["scaling_efficiency"] == pytest.approx(0.9)
  assert one["achieved_tflops_global"] == pytest.approx(1.0)
  assert one["per_process_mfu"] == pytest.approx(1.0)
  assert two["per_process_mfu"] == pytest.approx(0.9)
  assert two["global_mfu"] == pytest.approx(18 * 0.1 / 1.6)
  table = benchmark.format_table(runs, peaks, gpu)
  assert table[0].startswith("| processes") and "90.0%" in table[2 + 1]
  if not gpu:
    assert runs[2]["derived"]["speedup_vs_1x1"] == pytest.approx(1.5)
    assert "speedup 1.50x" in "\n".join(table)
    lines = benchmark.comparisons(runs)
    assert lines[0].startswith("2x1 vs 1x1 scaling efficiency: 90.0%")
    assert lines[1].startswith("2x1 vs 1x2 speedup (same cores): 1.20x")
  else:
    assert "MFU vs bf16 peak" in table[0]


def test_independent_jobs_combine_into_one_bound():
  jobs = [{"examples_per_sec_global": rate, "threads_per_process": 1,
           "per_process_batch": 16, "global_batch": 16, "steps_timed": 15,
           "step_time_p50_s": p50, "step_time_p90_s": p50 + 0.1,
           "timed_start_unix": start, "timed_end_unix": start + 10.0}
          for rate, p50, start in ((9.0, 1.8, 100.0), (10.0, 1.6, 101.0))]
  m = benchmark.combine_independent(jobs)
  assert m["examples_per_sec_global"] == 19.0
  assert m["examples_per_sec_per_process"] == 9.5 and m["global_batch"] == 32
  assert m["step_time_p50_s"] == pytest.approx(1.7)
  assert m["timed_overlap"] == pytest.approx(0.9)  # both timing from 101 to 110
  jobs[1]["timed_start_unix"] = 200.0
  assert benchmark.combine_independent(jobs)["timed_overlap"] == 0.0


def test_horovod_run_is_compared_with_its_independent_bound():
  runs, peaks = fake_runs(gpu=False)  # 1x1 10/s, 2x1 18/s, 1x2 15/s
  runs.append({"setting": "2x1 independent", "processes": 2, "threads": 1,
               "precision": "fp32", "independent": True,
               "metrics": {"examples_per_sec_global": 19.5,
                           "examples_per_sec_per_process": 9.75,
                           "step_time_p50_s": 0.5, "timed_overlap": 0.95}})
  benchmark.derive(runs, peaks, flops_per_example=1e11, gpu=False)
  # The independent jobs do not replace the Horovod run as the 2x1 rate.
  assert runs[1]["derived"]["scaling_efficiency"] == pytest.approx(0.9)
  assert runs[1]["derived"]["share_of_independent"] == pytest.approx(18 / 19.5)
  assert runs[3]["derived"]["scaling_efficiency"] == pytest.approx(0.975)
  assert "share_of_independent" not in runs[3]["derived"]
  table = "\n".join(benchmark.format_table(runs, peaks, gpu=False))
  assert "| 2x1 | fp32 | 18.00 | 9.00 | 90.0% (92.3% of independent) |" in table
  assert "| 2x1 independent | fp32 | 19.50 | 9.75 | 97.5% |" in table
  lines = benchmark.comparisons(runs)
  assert lines[2].startswith("2x1 vs 2 independent 1x1 jobs at once (no communication): "
                             "92.3% (18.00 vs 19.50 examples/sec; timed windows "
                             "overlap 95%)")
  assert lines[3].startswith("2 independent 1x1 jobs vs 1x2: 1.30x")


def test_controller_auto_prefers_mpi_where_horovod_and_mpirun_have_it():
  both = {"gloo", "mpi"}
  assert benchmark.resolve_controller("auto", both, mpirun_on_path=True) == "mpi"
  assert benchmark.resolve_controller("auto", both, mpirun_on_path=False) == "gloo"
  assert benchmark.resolve_controller("auto", {"gloo"}, mpirun_on_path=True) == "gloo"
  assert benchmark.resolve_controller("gloo", both, mpirun_on_path=True) == "gloo"
  with pytest.raises(benchmark.BenchmarkError, match="--controller mpi: mpirun is not"):
    benchmark.resolve_controller("mpi", both, mpirun_on_path=False)
  with pytest.raises(benchmark.BenchmarkError, match="built without MPI"):
    benchmark.resolve_controller("mpi", {"gloo"}, mpirun_on_path=True)


def test_command_names_the_controller():
  args = benchmark.parse_args(["--controller", "gloo"])
  paths = {"data_dir": "d", "vocab_file": "v", "bert_config_file": "c"}
  for controller in ("gloo", "mpi"):
    args.controller = controller
    cmd = benchmark.classifier_command("horovodrun", args, paths, 2, 1, "fp32", "out")
    assert cmd[:4] == ["horovodrun", "-np", "2", "--" + controller]
    assert "--use_amp" not in cmd


def test_parse_precisions():
  assert benchmark.parse_precisions("fp32, bf16,fp32", gpu=False) == ["fp32", "bf16"]
  assert benchmark.parse_precisions("FP16", gpu=True) == ["fp16"]
  for bad, gpu, message in (("fp16", False, "fp16 needs --gpu"),
                            ("bf16", True, "float16 on GPUs"),
                            ("fp64", False, "not one of fp32, bf16"),
                            (" , ", False, "no precision given")):
    with pytest.raises(benchmark.BenchmarkError, match="--precision: .*" + message):
      benchmark.parse_precisions(bad, gpu)


def test_amp_flags_come_from_precision_only(monkeypatch, capsys):
  args = benchmark.parse_args(["--precision", "bf16"])
  paths = {"data_dir": "d", "vocab_file": "v", "bert_config_file": "c"}
  cmd = benchmark.script_command(args, paths, 1, "bf16", "out")
  assert cmd.count("--use_amp") == 1
  for extra in ("--use_amp", "--use_xla --use_amp=true", "--nouse_amp"):
    assert benchmark.main(["--extra_args=" + extra]) == 1
    assert ("--extra_args: %s is set by --precision (use --precision fp32,bf16)" %
            extra.split()[-1]) in capsys.readouterr().err
  import distributed  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(distributed, "cpu_supports_bfloat16", lambda: False)
  assert benchmark.main(["--precision", "fp32,bf16"]) == 1
  err = capsys.readouterr().err
  assert err == ("benchmark.py: error: --precision bf16: this CPU has no bfloat16 "
                 "instructions (no avx512_bf16 or amx_bf16 in /proc/cpuinfo)\n")


def test_mfu_uses_the_peak_of_the_runs_precision():
  runs = [{"setting": "%dx1" % p, "processes": p, "threads": 1, "precision": precision,
           "metrics": {"examples_per_sec_global": rate,
                       "examples_per_sec_per_process": rate / p,
                       "step_time_p50_s": 0.5}}
          for p, precision, rate in ((1, "fp32", 10.0), (1, "bf16", 20.0),
                                     (2, "fp32", 18.0), (2, "bf16", 36.0))]
  peaks = {key: {"processes": p, "threads": 1, "dtype": dtype, "n": 64,
                 "per_process_best": [best] * p, "aggregate_best": best * p}
           for key, p, dtype, best in (("T1", 1, "float32", 1.0),
                                       ("T1-bfloat16", 1, "bfloat16", 4.0),
                                       ("P2xT1", 2, "float32", 0.8),
                                       ("P2xT1-bfloat16", 2, "bfloat16", 3.2))}
  benchmark.derive(runs, peaks, flops_per_example=1e11, gpu=False)
  fp32_1, bf16_1, fp32_2, bf16_2 = [r["derived"] for r in runs]
  assert fp32_1["per_process_mfu"] == pytest.approx(1.0)  # 1 TFLOP/s of 1.0
  assert bf16_1["per_process_mfu"] == pytest.approx(0.5)  # 2 TFLOP/s of 4.0
  assert fp32_2["global_mfu"] == pytest.approx(1.8 / 1.6)
  assert bf16_2["per_process_mfu"] == pytest.approx(1.8 / 4.0)
  assert bf16_2["global_mfu"] == pytest.approx(3.6 / 6.4)
  # Scaling compares runs of one precision: bf16 2x1 against bf16 1x1.
  assert bf16_2["scaling_efficiency"] == pytest.approx(0.9)
  table = "\n".join(benchmark.format_table(runs, peaks, gpu=False))
  assert "| 1x1 | bf16 | 20.00 | 20.00 | 1.00 (baseline) | 0.500 | 2.0000 | 50.0% |" in table
  assert "| T1-bfloat16 | 1 | 1 | bfloat16 | 64 | 4.0000 | 4.0000 | none |" in table
  lines = benchmark.comparisons(runs)
  assert lines[0].startswith("fp32: 2x1 vs 1x1 scaling efficiency: 90.0%")
  assert lines[1].startswith("bf16: 2x1 vs 1x1 scaling efficiency: 90.0%")
  assert lines[2:] == ["1x1 bf16 vs fp32: 2.00x (20.00 vs 10.00 examples/sec)",
                       "2x1 bf16 vs fp32: 2.00x (36.00 vs 18.00 examples/sec)"]


def test_gpu_fp16_run_is_measured_against_the_float16_peak():
  run = {"setting": "1", "processes": 1, "threads": 0, "precision": "fp16",
         "metrics": {"examples_per_sec_global": 40.0,
                     "examples_per_sec_per_process": 40.0, "step_time_p50_s": 0.5}}
  peaks = {key: {"processes": 1, "threads": 0, "dtype": dtype, "n": 64,
                 "per_process_best": [best], "aggregate_best": best}
           for key, dtype, best in (("GPU", "float32", 1.0), ("GPU-bfloat16", "bfloat16",
                                                               5.0),
                                    ("GPU-float16", "float16", 8.0))}
  (run,) = benchmark.derive([run], peaks, flops_per_example=1e11, gpu=True)
  assert run["derived"]["per_process_mfu"] == pytest.approx(0.5)  # 4 TFLOP/s of 8.0
  assert run["derived"]["per_process_mfu-bfloat16"] == pytest.approx(0.8)
  assert run["derived"]["global_mfu-float16"] == pytest.approx(0.5)


def test_onednn_kernels_are_read_from_verbose_lines():
  text = ("MATMUL_RESULT {}\n"
          "onednn_verbose,info,cpu,isa:Intel AMX with bfloat16\n"
          "onednn_verbose,create:dispatch,matmul,cpu,matmul,brg:avx512_core_amx_fp16,undef,"
          "src_bf16::blocked:ab::f0,,,unsupported isa\n"
          "onednn_verbose,create:cache_miss,cpu,matmul,brg:avx512_core_amx,undef,"
          "src_bf16::blocked:ab::f0 wei_bf16::blocked:ab::f0 dst_bf16::blocked:ab::f0,"
          "attr-scratchpad:user ,,256x256:256x256,0.41\n")
  assert benchmark_processes.onednn_matmul_kernels(text) == [
      "brg:avx512_core_amx src_bf16 wei_bf16 dst_bf16"]
  assert benchmark_processes.onednn_matmul_kernels("MATMUL_RESULT {}\n") == []


def test_launcher_output_split_reads_gloo_and_mpi_prefixes():
  text = ("[0]<stderr>:gloo line\n[1,0]<stderr>:mpi line\nother\n"
          "  Exit code:    3\n")
  worker, code = benchmark_processes.split_launcher_output(text)
  assert worker == ["[0]<stderr>:gloo line", "[1,0]<stderr>:mpi line"] and code == "3"


@requires("horovodrun")
def test_check_build_lists_the_controllers_setup_builds():
  available = benchmark.horovod_controllers(benchmark.find_horovodrun(None))
  assert "gloo" in available
  if os.environ.get("CI"):  # scripts/setup.sh builds Horovod with MPI too
    assert "mpi" in available


def test_missing_horovodrun_is_a_clear_error(capsys):
  assert benchmark.main(["--horovodrun", "/nonexistent/horovodrun"]) == 1
  assert "horovodrun not found at /nonexistent/horovodrun" in capsys.readouterr().err


@requires("horovodrun")
def test_failed_run_shows_exit_code_and_stderr_tail(tmp_path, capsys):
  bad = tmp_path / "bad_script.py"
  bad.write_text("import sys\nfor i in range(30):\n  sys.stderr.write('line %d\\n' % i)\n"
                 "sys.exit(3)\n")
  code = benchmark.main(["--script", str(bad), "--settings", "1x1", "--steps", "6",
                         "--controller", "gloo",
                         "--skip_peak", "--vocab_size", "20", "--max_seq_length", "8",
                         "--num_hidden_layers", "1", "--hidden_size", "8",
                         "--num_attention_heads", "2", "--intermediate_size", "8",
                         "--work_dir", str(tmp_path / "work")])
  err = capsys.readouterr().err
  assert code == 1
  assert "training run failed (exit code 1; first failed process exited with 3)" in err
  assert "last 20 lines" in err
  assert "<stderr>:line 29" in err and "<stderr>:line 10" in err
  assert "<stderr>:line 9\n" not in err and "Traceback" not in err


@requires("horovodrun")
def test_real_tiny_benchmark(tmp_path):
  work = tmp_path / "work"
  cmd = [sys.executable, SCRIPT, "--num_hidden_layers", "1", "--hidden_size", "32",
         "--num_attention_heads", "2", "--intermediate_size", "64",
         "--max_seq_length", "16", "--vocab_size", "200", "--settings", "2x1",
         "--steps", "8", "--batch", "4", "--work_dir", str(work), "--repeats", "2",
         "--independent",
         "--matmul_n", "256", "--peak_secs", "0.3", "--peak_repeats", "1"]
  proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400)
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.load(open(work / "benchmark.json"))
  runs = {r["setting"]: r for r in results["runs"]}
  assert set(runs) == {"2x1", "2x1 independent"}
  for name, r in runs.items():
    assert r["metrics"]["examples_per_sec_global"] > 0, name
    assert r["metrics"]["steps_timed"] == 3
    for m in r["metrics"].get("jobs", [r["metrics"]]):
      assert m["timed_start_unix"] < m["timed_end_unix"], name
    assert r["derived"]["achieved_tflops_global"] > 0
    assert r["derived"]["per_process_mfu"] > 0
    # Two interleaved runs of each setting; the table reports the faster.
    assert len(r["repeat_rates"]) == 2
    assert r["metrics"]["examples_per_sec_global"] == max(r["repeat_rates"])
    assert len(r["other_run_dirs"]) == 1 and os.path.isdir(r["other_run_dirs"][0])
  assert runs["2x1"]["metrics"]["global_batch"] == 8
  # Two plain single-process jobs, no launcher; their rates summed.
  independent = runs["2x1 independent"]
  jobs = independent["metrics"]["jobs"]
  assert [m["processes"] for m in jobs] == [1, 1]
  assert independent["metrics"]["examples_per_sec_global"] == pytest.approx(
      sum(m["examples_per_sec_global"] for m in jobs))
  assert independent["command"][:2] == [sys.executable, benchmark.ROOT + "/run_classifier.py"]
  assert "2x1 vs 2 independent 1x1 jobs at once" in proc.stdout
  assert results["peaks"]["T1"]["aggregate_best"] > 0
  assert len(results["peaks"]["P2xT1"]["per_process_best"]) == 2
  assert results["machine"]["nproc"] >= 1 and results["machine"]["tf_version"]
  assert "| processes x threads | precision | global examples/sec |" in proc.stdout
  assert "| 2x1 |" in proc.stdout
  # The default controller: MPI where Horovod has it (CI builds it), else Gloo.
  controller = results["config"]["args"]["controller"]
  assert controller in ("gloo", "mpi")
  if os.environ.get("CI"):
    assert controller == "mpi"
  assert runs["2x1"]["command"][3] == "--" + controller
  assert "Horovod controller: %s" % controller in proc.stdout


@requires("horovodrun")
def test_real_tiny_pretraining_benchmark(tmp_path):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  work = tmp_path / "work"
  cmd = [sys.executable, SCRIPT, "--task", "pretrain", "--num_hidden_layers", "1",
         "--hidden_size", "32", "--num_attention_heads", "2", "--intermediate_size",
         "64", "--max_seq_length", "16", "--vocab_size", "200", "--settings", "1x1,2x1",
         "--steps", "7", "--batch", "4", "--work_dir", str(work), "--repeats", "1",
         "--skip_peak"]
  proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400)
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.load(open(work / "benchmark.json"))
  runs = {r["setting"]: r for r in results["runs"]}
  assert set(runs) == {"1x1", "2x1"}
  for r in runs.values():
    assert r["command"][5] == os.path.join(ROOT, "run_pretraining.py")
    assert "--max_predictions_per_seq=3" in r["command"]
    assert r["metrics"]["examples_per_sec_global"] > 0 and r["metrics"]["steps_timed"] == 2
    # It really pretrained: run_pretraining.py's checkpoint has the masked-LM head.
    output = os.path.join(r["run_dir"], "output")
    names = [n for n, _ in tf.train.list_variables(tf.train.latest_checkpoint(output))]
    assert "cls/predictions/output_bias" in names
  assert runs["2x1"]["metrics"]["global_batch"] == 8
  assert results["flops"]["forward_mlm_head"] == 2 * 3 * (32 * 32 + 32 * 200)
  assert "2x1 vs 1x1 scaling efficiency:" in proc.stdout


@requires("horovodrun")
def test_real_tiny_benchmark_in_two_precisions(tmp_path):
  import distributed  # pylint: disable=import-outside-toplevel
  if not distributed.cpu_supports_bfloat16():
    pytest.skip("this CPU has no avx512_bf16 or amx_bf16")
  work = tmp_path / "work"
  cmd = [sys.executable, SCRIPT, "--num_hidden_layers", "1", "--hidden_size", "32",
         "--num_attention_heads", "2", "--intermediate_size", "64",
         "--max_seq_length", "16", "--vocab_size", "200", "--settings", "1x1",
         "--precision", "fp32,bf16", "--steps", "6", "--batch", "4", "--repeats", "1",
         "--work_dir", str(work),
         "--matmul_n", "128", "--peak_secs", "0.2", "--peak_repeats", "1"]
  proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400)
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.load(open(work / "benchmark.json"))
  assert results["config"]["precisions"] == ["fp32", "bf16"]
  runs = results["runs"]
  assert [(r["setting"], r["precision"]) for r in runs] == [("1x1", "fp32"),
                                                            ("1x1", "bf16")]
  assert ["--use_amp" in r["command"] for r in runs] == [False, True]
  for r in runs:
    assert r["metrics"]["examples_per_sec_global"] > 0
    assert r["derived"]["per_process_mfu"] > 0
  fp32, bf16 = results["peaks"]["T1"], results["peaks"]["T1-bfloat16"]
  assert (fp32["dtype"], bf16["dtype"]) == ("float32", "bfloat16")
  assert bf16["aggregate_best"] > 0
  # The bfloat16 peak ran a bfloat16 oneDNN kernel (on AMX where the CPU has it).
  assert any("src_bf16" in k and "dst_bf16" in k for k in bf16["onednn_matmul"])
  if "amx_bf16" in open("/proc/cpuinfo").read():
    assert any("amx" in k for k in bf16["onednn_matmul"]), bf16["onednn_matmul"]
  # Each run's MFU is against its own precision's peak.
  for r, peak in zip(runs, (fp32, bf16)):
    assert r["derived"]["per_process_mfu"] == pytest.approx(
        r["derived"]["achieved_tflops_per_process"] / max(peak["per_process_best"]))
  assert "| 1x1 | bf16 |" in proc.stdout and "| T1-bfloat16 |" in proc.stdout
  assert "1x1 bf16 vs fp32: " in proc.stdout
