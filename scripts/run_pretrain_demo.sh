#!/usr/bin/env bash
# The pretraining job, end to end: pretrain a small Chinese BERT with Horovod on
# People's Daily 1998-01 + the training reviews, fine-tune it on the review
# sentiment task, and print one summary beside the same model fine-tuned from
# random weights and the character n-gram baseline.
#
#   bash scripts/run_pretrain_demo.sh -- --use_amp       # ~61 min pretraining + fine-tuning
#   bash scripts/run_pretrain_demo.sh --seeds 1,2,3      # fine-tune 3 seeds, report the mean
#   bash scripts/run_pretrain_demo.sh --force_pretrain   # rebuild the cached checkpoint
#   bash scripts/run_pretrain_demo.sh --curve_steps 3000,6000 -- --use_amp
#                                    # also fine-tune those checkpoints: accuracy
#                                    # against pretraining time
#
# Stages: (1) review split (data/prepare_sentiment.py), (2) corpus, vocab and
# bert_config.json (data/prepare_pretraining_corpus.py), (3) pretraining records
# (create_pretraining_data.py), (4) pretraining (run_pretraining.py under
# horovodrun), (4b) phase 2: records of the training reviews alone at the
# fine-tuning length, and more pretraining on them from (4)'s checkpoint (the
# in-domain phase; --phase2_steps 0 skips it), (5) fine-tuning from that checkpoint and (6) from random weights
# (run_classifier.py under horovodrun, both with the corpus vocab and config),
# (7) the n-gram baseline (data/baseline_ngram.py), (8) the summary, also written
# to OUTPUT_DIR/pretrain_summary.txt.
#
# Caching: stages 3 to 7 are skipped when their result exists for the same
# inputs and settings. The checkpoint lives in OUTPUT_DIR/pretrain-KEY, KEY being
# a hash of the records (itself a hash of corpus.txt, vocab.txt and the record
# settings), bert_config.json, the pretraining settings, the process count and
# the flags after `--`. So a re-run with other fine-tuning settings or --seeds
# only fine-tunes, and the same command again redoes only stages 1 and 2 (seconds)
# and prints the summary. An
# interrupted pretraining resumes from its last checkpoint.
#
# Options (each also as an environment variable, e.g. NP=2 PRETRAIN_STEPS=100):
#   --np N                    processes (default: CPU cores, or GPUs with --gpu)
#   --gpu                     one process per GPU; needs a CUDA build (see README)
#   --controller C            auto (default: horovodrun's choice), mpi or gloo
#   --output_dir D            default output/pretrain-demo
#   --force_pretrain          delete the cached checkpoint of these settings and
#                             pretrain again
#   Pretraining (the defaults: 12000 steps of 2 x 32 sequences of 64, 46 minutes
#   on a 2-core Xeon with -- --use_amp, ~280 sequences/sec, then phase 2, 15
#   minutes; see docs/pretraining.md):
#   --pretrain_steps K        global steps (default 12000)
#   --pretrain_batch B        sequences per process and step (default 32)
#   --pretrain_lr R           peak learning rate of one process, scaled by N (default 5e-3)
#   --pretrain_warmup K       warmup steps (default: 2.5% of --pretrain_steps)
#   --optimizer O             lamb (default) or adamw
#   --pretrain_seq_length L   sequence length of the records (default 64)
#   --max_predictions_per_seq P  masked positions per sequence (default: 15% of L + 1)
#   --dupe_factor D           masked copies of the corpus (default 5)
#   --whole_word_mask 0|1     1 masks whole space-separated words (default 0: characters)
#   --phase2_steps K          steps of phase 2 (default 2000, 15 min; 0: none). It
#                             trains on the training reviews alone, at sequence
#                             --max_seq_length, twice --dupe_factor, half the
#                             learning rate, K/20 warmup steps, same batch
#   --pretrain_save_steps K   keep a checkpoint every K steps (default 1000)
#   --max_documents K         pretrain on the first K corpus documents only (smoke tests)
#   --init_from DIR           start phase 1 from a Hugging Face BERT model folder
#                             (model.safetensors, config.json, vocab.txt; e.g.
#                             all-MiniLM-L6-v2, see docs/pretraining.md) instead of
#                             random weights: its layers and size, the corpus vocab
#                             (rows of shared tokens copied, the others from
#                             their contexts in the corpus, see
#                             scripts/convert_hf_checkpoint.py --new_rows_corpus).
#                             Fine-tuning from random weights uses that size too
#   Fine-tuning (both models, as scripts/run_demo.sh):
#   --seeds S[,S...]          fine-tuning seeds (default 1); the summary gives the mean
#   --curve_steps K[,K...]    also fine-tune the checkpoints of these pretraining steps
#                             (multiples of --pretrain_save_steps below
#                             --pretrain_steps, or equal to it with phase 2:
#                             phase 1's end); the summary adds the curve of test
#                             accuracy against pretraining steps and minutes
#   --epochs E                default 3
#   --pooling P               cls (default, BERT's pooler over [CLS]) or mean (the
#                             mean of the last layer over the tokens; see
#                             run_classifier.py --pooling)
#   --batch B                 per-process batch (default 32)
#   --lr R                    peak learning rate of one process, scaled by N (default 2e-4)
#   --max_seq_length L        default 128
#   --group_by_length 0|1     1 (default) batches reviews of similar length and
#                             cuts each batch after its longest (run_classifier.py
#                             --group_by_length); 0 pads every batch to L
#   --max_examples K          use only K reviews in all (smoke tests)
#   --max_train_steps K       stop each fine-tuning after K steps (smoke tests)
#   Other:
#   --python PATH             interpreter (default: $VENV/bin/python, else the repo's
#                             .venv/bin/python, else python3)
#   --skip_setup              do not run scripts/setup.sh
#   -- FLAGS...               more flags for run_pretraining.py (e.g. --use_amp,
#                             --gradient_accumulation_steps=2); part of the cache key
#   -h, --help                this help
#
# The model is the demo's (2 layers, hidden 256); HIDDEN, LAYERS, HEADS, FFN in the
# environment change it. Without scikit-learn (requirements-extra.txt) the baseline
# is skipped with a message.
set -euo pipefail
# shellcheck source=scripts/launch_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh"

NP="${NP:-}"; GPU="${GPU:-0}"; CONTROLLER="${CONTROLLER:-auto}"
OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/output/pretrain-demo}"; FORCE_PRETRAIN=0
PRETRAIN_STEPS="${PRETRAIN_STEPS:-12000}"; PRETRAIN_BATCH="${PRETRAIN_BATCH:-32}"
PRETRAIN_LR="${PRETRAIN_LR:-5e-3}"; PRETRAIN_WARMUP="${PRETRAIN_WARMUP:-}"
OPTIMIZER="${OPTIMIZER:-lamb}"; PRETRAIN_SEQ_LENGTH="${PRETRAIN_SEQ_LENGTH:-64}"
MAX_PREDICTIONS_PER_SEQ="${MAX_PREDICTIONS_PER_SEQ:-}"; DUPE_FACTOR="${DUPE_FACTOR:-5}"
WHOLE_WORD_MASK="${WHOLE_WORD_MASK:-0}"; PRETRAIN_SAVE_STEPS="${PRETRAIN_SAVE_STEPS:-1000}"
CURVE_STEPS="${CURVE_STEPS:-}"; PHASE2_STEPS="${PHASE2_STEPS:-2000}"
MAX_DOCUMENTS="${MAX_DOCUMENTS:-0}"; INIT_FROM="${INIT_FROM:-}"; SEEDS="${SEEDS:-1}"; EPOCHS="${EPOCHS:-3}"
POOLING="${POOLING:-cls}"
BATCH="${BATCH:-32}"; LR="${LR:-2e-4}"; MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-128}"
GROUP_BY_LENGTH="${GROUP_BY_LENGTH:-1}"
MAX_EXAMPLES="${MAX_EXAMPLES:-0}"; MAX_TRAIN_STEPS="${MAX_TRAIN_STEPS:-0}"
SKIP_SETUP="${SKIP_SETUP:-0}"; PY="${VENV:+$VENV/bin/python}"
HIDDEN="${HIDDEN:-256}"; LAYERS="${LAYERS:-2}"; HEADS="${HEADS:-4}"; FFN="${FFN:-1024}"
# Record shards: enough for 8 processes to read by file (fewer ranks share them).
NUM_SHARDS=8

# The options with a value set the variable of the same name: --pretrain_steps K
# sets PRETRAIN_STEPS.
VALUE_OPTIONS="python=PY optimizer np controller output_dir pretrain_steps
  pretrain_batch pretrain_lr pretrain_warmup pretrain_seq_length
  max_predictions_per_seq dupe_factor whole_word_mask pretrain_save_steps phase2_steps
  max_documents init_from
  seeds curve_steps epochs pooling batch lr max_seq_length group_by_length max_examples
  max_train_steps"
SWITCH_OPTIONS="gpu skip_setup force_pretrain"
DASHES_FOR=run_pretraining.py
parse_options "$@"
PRETRAIN_EXTRA=(${ARGS[@]+"${ARGS[@]}"})

if [ -z "$NP" ]; then
  if [ "$GPU" = 1 ]; then NP="$(nvidia-smi -L 2>/dev/null | wc -l)"; else NP="$(nproc)"; fi
fi
for opt in np pretrain_steps pretrain_batch pretrain_seq_length pretrain_save_steps \
    dupe_factor epochs batch max_seq_length; do
  var="${opt^^}"; positive "--$opt" "${!var}"
done
for opt in phase2_steps max_documents max_examples max_train_steps; do
  var="${opt^^}"; [[ "${!var}" =~ ^[0-9]+$ ]] || die "--$opt must be a whole number, got '${!var}'"
done
PRETRAIN_WARMUP="${PRETRAIN_WARMUP:-$(( PRETRAIN_STEPS / 40 ))}"
[[ "$PRETRAIN_WARMUP" =~ ^[0-9]+$ ]] || die "--pretrain_warmup must be a whole number, got '$PRETRAIN_WARMUP'"
MAX_PREDICTIONS_PER_SEQ="${MAX_PREDICTIONS_PER_SEQ:-$(( PRETRAIN_SEQ_LENGTH * 15 / 100 + 1 ))}"
positive --max_predictions_per_seq "$MAX_PREDICTIONS_PER_SEQ"
[[ "$POOLING" =~ ^(cls|mean)$ ]] || die "--pooling must be cls or mean, got '$POOLING'"
[[ "$SEEDS" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--seeds must be whole numbers separated by commas, got '$SEEDS'"
CURVE_LIMIT=$(( PHASE2_STEPS > 0 ? PRETRAIN_STEPS + 1 : PRETRAIN_STEPS ))
for step in ${CURVE_STEPS//,/ }; do
  [[ "$step" =~ ^[1-9][0-9]*$ ]] && (( step % PRETRAIN_SAVE_STEPS == 0 )) && \
    (( step < CURVE_LIMIT )) || die "--curve_steps must be multiples of" \
    "--pretrain_save_steps ($PRETRAIN_SAVE_STEPS) below --pretrain_steps ($PRETRAIN_STEPS)" \
    "(or equal to it with phase 2), got '$CURVE_STEPS'"
done
if [ -n "$INIT_FROM" ]; then
  for f in model.safetensors config.json vocab.txt; do
    [ -f "$INIT_FROM/$f" ] || die "--init_from $INIT_FROM has no $f (a Hugging Face BERT model folder)"
  done
  INIT_FROM="$(cd "$INIT_FROM" && pwd)"
fi
case "$WHOLE_WORD_MASK" in 0|1) ;; *) die "--whole_word_mask must be 0 or 1, got '$WHOLE_WORD_MASK'" ;; esac
case "$GROUP_BY_LENGTH" in
  1) GROUPING=--group_by_length ;;
  0) GROUPING=--nogroup_by_length ;;
  *) die "--group_by_length must be 0 or 1, got '$GROUP_BY_LENGTH'" ;;
esac
case "$OPTIMIZER" in lamb|adamw) ;; *) die "--optimizer must be lamb or adamw, got '$OPTIMIZER'" ;; esac
case "$CONTROLLER" in auto|gloo|mpi) ;; *) die "--controller must be auto, gloo or mpi, got '$CONTROLLER'" ;; esac

[ "$SKIP_SETUP" = 1 ] || bash "$ROOT/scripts/setup.sh"
PY="${PY:-$(default_python)}"
PY_PATH="$(command -v "$PY")" || die "python '$PY' not found (run scripts/setup.sh or pass --python)"
PY="$PY_PATH"
export PATH="$(dirname "$PY"):$PATH"
[ "$GPU" = 1 ] || export CUDA_VISIBLE_DEVICES=""

mkdir -p "$OUTPUT_DIR"
OUTPUT_DIR="$(cd "$OUTPUT_DIR" && pwd)"
# A subset (smoke) run keeps its data apart, so that it never replaces the full data.
if [ "$MAX_EXAMPLES" -gt 0 ] || [ "$MAX_DOCUMENTS" -gt 0 ]; then
  DATA_DIR="$OUTPUT_DIR/data/sentiment"; CORPUS_DIR="$OUTPUT_DIR/data/pretrain"
else
  DATA_DIR="$ROOT/data/sentiment"; CORPUS_DIR="$ROOT/data/pretrain"
fi
TIMES="$OUTPUT_DIR/stage_times.tsv"
: > "$TIMES"

# `stage NAME STATUS SECONDS [NOTE]`: one line of the stage table of this run.
stage() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >> "$TIMES"; }
# `timed NAME CMD...`: runs CMD (in its own process group, so Ctrl-C stops a
# whole horovodrun job) and records its wall time; exits with CMD's failure.
timed() {
  local name="$1" start rc=0
  shift
  echo "[pretrain-demo] stage $name: $(quote "$@")"
  start=$(date +%s)
  run_child "$@" || rc=$?
  [ "$rc" = 0 ] || { echo "[pretrain-demo] stage $name failed (exit $rc)" >&2; exit "$rc"; }
  stage "$name" ran "$(( $(date +%s) - start ))"
}
# `build_once NAME DIR CMD...`: runs CMD as stage NAME unless DIR/done exists;
# DIR is removed first, so a half-built DIR is never reused.
build_once() {
  local name="$1" dir="$2"
  shift 2
  if [ -f "$dir/done" ]; then
    stage "$name" cached 0 "$dir"
    return
  fi
  rm -rf "$dir"
  timed "$name" "$@"
  touch "$dir/done"
}
# `key WORD...`: a short hash of the words; a word that is an absolute path stands
# for the file's contents.
key() {
  local w
  for w in "$@"; do
    if [ "${w:0:1}" = / ]; then sha256sum < "$w"; else printf '%s\n' "$w"; fi
  done | sha256sum | cut -c1-12
}
# Horovod: each training stage runs under horovodrun via scripts/run_horovodrun.sh.
LAUNCH=(bash "$ROOT/scripts/run_horovodrun.sh" --np "$NP" --python "$PY")
[ "$CONTROLLER" = auto ] || LAUNCH+=("--$CONTROLLER")

# (1) The review split that fine-tuning and the baseline read.
timed data "$PY" "$ROOT/data/prepare_sentiment.py" --output_dir "$DATA_DIR" \
  --max_examples "$MAX_EXAMPLES"

# (2) The corpus, its vocab (for pretraining AND fine-tuning) and the model config.
timed corpus "$PY" "$ROOT/data/prepare_pretraining_corpus.py" \
  --sentiment_dir "$DATA_DIR" --max_examples "$MAX_EXAMPLES" \
  --output_file "$CORPUS_DIR/corpus.txt" --reviews_file "$CORPUS_DIR/reviews.txt" \
  --vocab_file "$CORPUS_DIR/vocab.txt" \
  --bert_config_file "$CORPUS_DIR/bert_config.json"
VOCAB="$CORPUS_DIR/vocab.txt"; CONFIG="$CORPUS_DIR/bert_config.json"
"$PY" "$ROOT/scripts/pretrain_demo.py" config --bert_config_file "$CONFIG" \
  --hidden_size "$HIDDEN" --num_hidden_layers "$LAYERS" --num_attention_heads "$HEADS" \
  --intermediate_size "$FFN" --min_positions "$(( PRETRAIN_SEQ_LENGTH > MAX_SEQ_LENGTH ? \
  PRETRAIN_SEQ_LENGTH : MAX_SEQ_LENGTH ))"
# (2b) With --init_from: that model converted to Google's format for the corpus
# vocab (new tokens' rows from their contexts in the corpus), cached by its
# files, the vocab and the corpus; its config replaces the demo's.
INIT_ARGS=(); INIT_KEY=""
if [ -n "$INIT_FROM" ]; then
  INIT_KEY="$(key "$INIT_FROM/model.safetensors" "$INIT_FROM/config.json" \
    "$INIT_FROM/vocab.txt" "$VOCAB" "$CORPUS_DIR/corpus.txt" new_rows=corpus)"
  INIT_DIR="$OUTPUT_DIR/init-$INIT_KEY"
  build_once convert "$INIT_DIR" "$PY" "$ROOT/scripts/convert_hf_checkpoint.py" \
    --model_dir "$INIT_FROM" --output_dir "$INIT_DIR" --target_vocab_file "$VOCAB" \
    --new_rows_corpus "$CORPUS_DIR/corpus.txt" --allow_missing_pooler
  CONFIG="$INIT_DIR/bert_config.json"
  INIT_ARGS=(--init_checkpoint="$INIT_DIR/bert_model.ckpt")
fi
CORPUS="$CORPUS_DIR/corpus.txt"
if [ "$MAX_DOCUMENTS" -gt 0 ]; then
  CORPUS="$CORPUS_DIR/corpus-first$MAX_DOCUMENTS.txt"
  awk -v RS= -v ORS='\n\n' -v n="$MAX_DOCUMENTS" 'NR <= n' "$CORPUS_DIR/corpus.txt" > "$CORPUS"
fi

# (3) Masked-LM / next-sentence records, cached by corpus, vocab and settings.
# `make_records STAGE CORPUS SEQ PREDICTIONS DUPE` sets RECORD_KEY and RECORDS.
make_records() {
  local name="$1" corpus="$2" seq="$3" predictions="$4" dupe="$5" dir
  RECORD_KEY="$(key "$corpus" "$VOCAB" "seq=$seq" "predictions=$predictions" \
    "dupe=$dupe" "shards=$NUM_SHARDS" "whole_word_mask=$WHOLE_WORD_MASK")"
  dir="$CORPUS_DIR/records-$RECORD_KEY"
  RECORDS="$dir/seq$seq.tfrecord"
  build_once "$name" "$dir" "$PY" "$ROOT/create_pretraining_data.py" --input_file="$corpus" \
    --output_file="$RECORDS" --num_output_shards="$NUM_SHARDS" --num_workers="$(nproc)" \
    --vocab_file="$VOCAB" --do_whole_word_mask="$([ "$WHOLE_WORD_MASK" = 1 ] && echo true || echo false)" \
    --max_seq_length="$seq" --max_predictions_per_seq="$predictions" --dupe_factor="$dupe"
}
make_records records "$CORPUS" "$PRETRAIN_SEQ_LENGTH" "$MAX_PREDICTIONS_PER_SEQ" "$DUPE_FACTOR"

# (4) Pretraining, cached by records, config and settings; resumes if interrupted.
PRETRAIN_SETTINGS=("records=$RECORD_KEY" "$CONFIG" "processes=$NP" "steps=$PRETRAIN_STEPS"
  "batch=$PRETRAIN_BATCH" "lr=$PRETRAIN_LR" "warmup=$PRETRAIN_WARMUP" "optimizer=$OPTIMIZER"
  ${PRETRAIN_EXTRA[@]+"${PRETRAIN_EXTRA[@]}"})
[ -z "$INIT_KEY" ] || PRETRAIN_SETTINGS+=("init=$INIT_KEY")
PRETRAIN_KEY="$(key "${PRETRAIN_SETTINGS[@]}")"
PRETRAIN_DIR="$OUTPUT_DIR/pretrain-$PRETRAIN_KEY"
CHECKPOINT="$PRETRAIN_DIR/model.ckpt-$PRETRAIN_STEPS"
if [ "$FORCE_PRETRAIN" = 1 ]; then
  # The fine-tunings of the old checkpoint go with it, whatever their seed.
  rm -rf "$PRETRAIN_DIR" "$PRETRAIN_DIR-phase2-"* "$OUTPUT_DIR/finetune-pretrained-$PRETRAIN_KEY-"*
fi
# `pretrain STAGE DIR STEPS SETTINGS_FILE_LINES... -- RUN_PRETRAINING_FLAGS...`:
# one cached pretraining run of STEPS steps into DIR, ending with DIR/model.ckpt-STEPS.
pretrain() {
  local name="$1" dir="$2" steps="$3" settings=()
  shift 3
  while [ "$1" != -- ]; do settings+=("$1"); shift; done
  shift
  if [ -f "$dir/done" ]; then
    stage "$name" cached 0 "$dir (built in $(cat "$dir/done") s)"
    return
  fi
  mkdir -p "$dir"
  # The checkpoint folder holds its config, vocab and settings, as Google's releases do.
  cp "$CONFIG" "$VOCAB" "$dir/"
  printf '%s\n' "${settings[@]}" > "$dir/settings.txt"
  timed "$name" "${LAUNCH[@]}" --script "$ROOT/run_pretraining.py" -- \
    --bert_config_file="$CONFIG" --output_dir="$dir" --do_train --do_eval \
    --train_batch_size="$PRETRAIN_BATCH" --optimizer="$OPTIMIZER" \
    --save_checkpoints_steps="$PRETRAIN_SAVE_STEPS" --keep_checkpoint_max=0 \
    --num_train_steps="$steps" --log_every_secs=60 "$@" \
    ${PRETRAIN_EXTRA[@]+"${PRETRAIN_EXTRA[@]}"}
  [ -f "$dir/model.ckpt-$steps.index" ] || die "pretraining ended without $dir/model.ckpt-$steps"
  tail -n 1 "$TIMES" | cut -f3 > "$dir/done"
}
pretrain pretrain "$PRETRAIN_DIR" "$PRETRAIN_STEPS" "${PRETRAIN_SETTINGS[@]}" -- \
  --input_file="$RECORDS-*" --max_seq_length="$PRETRAIN_SEQ_LENGTH" \
  --max_predictions_per_seq="$MAX_PREDICTIONS_PER_SEQ" \
  --num_warmup_steps="$PRETRAIN_WARMUP" --learning_rate="$PRETRAIN_LR" \
  ${INIT_ARGS[@]+"${INIT_ARGS[@]}"}
FINAL_KEY="$PRETRAIN_KEY"; FINAL_CHECKPOINT="$CHECKPOINT"; PHASE2_DIR=""

# (4b) Phase 2: the training reviews alone at the fine-tuning length, from (4)'s
# checkpoint; cached by its records, (4)'s key and its settings.
if [ "$PHASE2_STEPS" -gt 0 ]; then
  PHASE2_PREDICTIONS=$(( MAX_SEQ_LENGTH * 15 / 100 + 1 ))
  make_records records-phase2 "$CORPUS_DIR/reviews.txt" "$MAX_SEQ_LENGTH" \
    "$PHASE2_PREDICTIONS" "$(( DUPE_FACTOR * 2 ))"
  PHASE2_LR="$(awk -v r="$PRETRAIN_LR" 'BEGIN { printf "%g", r / 2 }')"
  PHASE2_SETTINGS=("records=$RECORD_KEY" "from=$PRETRAIN_KEY" "steps=$PHASE2_STEPS"
    "lr=$PHASE2_LR")
  PHASE2_KEY="$(key "${PHASE2_SETTINGS[@]}")"
  PHASE2_DIR="$PRETRAIN_DIR-phase2-$PHASE2_KEY"
  pretrain pretrain-phase2 "$PHASE2_DIR" "$PHASE2_STEPS" "${PHASE2_SETTINGS[@]}" -- \
    --input_file="$RECORDS-*" --init_checkpoint="$CHECKPOINT" \
    --max_seq_length="$MAX_SEQ_LENGTH" --max_predictions_per_seq="$PHASE2_PREDICTIONS" \
    --num_warmup_steps="$(( PHASE2_STEPS / 20 ))" \
    --learning_rate="$PHASE2_LR"
  FINAL_KEY="$PRETRAIN_KEY-phase2-$PHASE2_KEY"
  FINAL_CHECKPOINT="$PHASE2_DIR/model.ckpt-$PHASE2_STEPS"
fi

# (5, 6) Fine-tuning from the checkpoint and from random weights, per seed; a
# finished fine-tuning of the same settings is reused.
FINETUNE_KEY="$(key "$DATA_DIR/train.tsv" "$VOCAB" "$CONFIG" "processes=$NP" \
  "epochs=$EPOCHS" "pooling=$POOLING" "batch=$BATCH" "lr=$LR" "seq=$MAX_SEQ_LENGTH" \
  "steps=$MAX_TRAIN_STEPS" "grouping=$GROUPING")"
finetune() {
  local name="$1" dir="$2"
  shift 2
  if [ -f "$dir/eval_results.txt" ] && [ -f "$dir/test_results.tsv" ]; then
    stage "$name" cached 0 "$dir"
    return
  fi
  timed "$name" "${LAUNCH[@]}" -- --task_name=tsv --do_train --do_eval --do_predict \
    --data_dir="$DATA_DIR" --vocab_file="$VOCAB" --bert_config_file="$CONFIG" \
    --output_dir="$dir" --max_seq_length="$MAX_SEQ_LENGTH" --train_batch_size="$BATCH" \
    --eval_batch_size=64 --predict_batch_size=64 --learning_rate="$LR" \
    --num_train_epochs="$EPOCHS" --warmup_proportion=0.1 --seed="$seed" \
    --max_train_steps="$MAX_TRAIN_STEPS" --save_checkpoints_steps=500 \
    --pooling="$POOLING" --log_every_secs=60 "$GROUPING" "$@"
}
PRETRAINED_DIRS=(); SCRATCH_DIRS=()
for seed in ${SEEDS//,/ }; do
  dir="$OUTPUT_DIR/finetune-pretrained-$FINAL_KEY-$FINETUNE_KEY-seed$seed"
  finetune "finetune-pretrained-seed$seed" "$dir" --init_checkpoint="$FINAL_CHECKPOINT"
  PRETRAINED_DIRS+=("$dir")
  dir="$OUTPUT_DIR/finetune-scratch-$FINETUNE_KEY-seed$seed"
  finetune "finetune-scratch-seed$seed" "$dir"
  SCRATCH_DIRS+=("$dir")
done
# The curve: the same fine-tunings from earlier checkpoints of the same pretraining.
CURVE_ARGS=()
for step in ${CURVE_STEPS//,/ }; do
  [ -f "$PRETRAIN_DIR/model.ckpt-$step.index" ] || die "--curve_steps $step: no" \
    "$PRETRAIN_DIR/model.ckpt-$step (the cached pretraining kept other steps; run with" \
    "--force_pretrain to rebuild it)"
  dirs=()
  for seed in ${SEEDS//,/ }; do
    dir="$OUTPUT_DIR/finetune-pretrained-$PRETRAIN_KEY-step$step-$FINETUNE_KEY-seed$seed"
    finetune "finetune-step$step-seed$seed" "$dir" \
      --init_checkpoint="$PRETRAIN_DIR/model.ckpt-$step"
    dirs+=("$dir")
  done
  CURVE_ARGS+=(--curve "$step=$(IFS=,; echo "${dirs[*]}")")
done

# (7) The n-gram baseline on the same split (needs scikit-learn).
BASELINE="$OUTPUT_DIR/baseline-$(key "$DATA_DIR/train.tsv" "$DATA_DIR/dev.tsv" \
  "$DATA_DIR/test.tsv").txt"
if [ -f "$BASELINE" ]; then
  stage baseline cached 0 "$BASELINE"
elif ! "$PY" -c 'import sklearn' 2>/dev/null; then
  echo "[pretrain-demo] baseline skipped: scikit-learn is not installed" \
    "(pip install -r requirements-extra.txt)"
  stage baseline skipped 0 "no scikit-learn"
  BASELINE=""
else
  timed baseline bash -c '"$1" "$2" --data_dir "$3" > "$4.tmp" && mv "$4.tmp" "$4"' _ \
    "$PY" "$ROOT/data/baseline_ngram.py" "$DATA_DIR" "$BASELINE"
fi

# (8) One summary of everything above.
IFS=,
"$PY" "$ROOT/scripts/pretrain_demo.py" summary --test_file "$DATA_DIR/test.tsv" \
  --pretrain_dir "$PRETRAIN_DIR" --pretrained_dirs "${PRETRAINED_DIRS[*]}" \
  --scratch_dirs "${SCRATCH_DIRS[*]}" --baseline_file "$BASELINE" --times_file "$TIMES" \
  --output_file "$OUTPUT_DIR/pretrain_summary.txt" --pretrain_steps "$PRETRAIN_STEPS" \
  --phase2_dir "$PHASE2_DIR" \
  ${CURVE_ARGS[@]+"${CURVE_ARGS[@]}"}
