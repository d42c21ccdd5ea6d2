#!/usr/bin/env bash
# Every user-visible output of one trained run, written to files, so two commits can be
# compared on the same checkpoint with `diff -r`: a refactor must leave them identical.
#
#   benchmarks/behaviour_snapshot.sh RUN_DIR OUT_DIR [ATTNKIT]
#   diff -r before/ after/        # nothing printed = the same behaviour
#
# Uses only the command line (stable across module moves): evaluate (greedy and beam 5,
# the translations and the scores), translate with every sink at once (stdout,
# --show-attention, --attention-json with --n-best, --plot), align on the first 200 test
# pairs, and inspect. Timings and progress go to OUT_DIR/*.log, which diff -r should skip
# (`diff -r -x '*.log' before after`).
set -euo pipefail
run=$1
out=$2
attnkit=${3:-attnkit}
mkdir -p "$out"
data=$(python3 - "$run" <<'EOF'
import sys, yaml
from pathlib import Path
print(yaml.safe_load(Path(sys.argv[1], "config.yaml").read_text())["data"].get("bundled") or "")
EOF
)
if [ "$data" != "multi30k" ]; then
    echo "behaviour_snapshot: needs a run on the bundled multi30k data" >&2
    exit 2
fi
src_dir=$(python3 -c 'import attnkit, pathlib; print(pathlib.Path(attnkit.__file__).parent / "data" / "multi30k")')
test_de=$(ls "$src_dir"/test_2016_flickr.de* | head -1)
test_en=$(ls "$src_dir"/test_2016_flickr.en* | head -1)
cat_any() { case "$1" in *.gz) gzip -dc "$1" ;; *) cat "$1" ;; esac; }

"$attnkit" evaluate "$run" --split test --beam 1 --output "$out/test.greedy.en" \
    >"$out/evaluate.greedy.txt" 2>"$out/evaluate.greedy.log"
"$attnkit" evaluate "$run" --split test --beam 5 --output "$out/test.beam5.en" \
    >"$out/evaluate.beam5.txt" 2>"$out/evaluate.beam5.log"

cat_any "$test_de" >"$out/test.de"
cat_any "$test_en" >"$out/test.en"
head -40 "$out/test.de" >"$out/input.de"
"$attnkit" translate "$run" --beam 5 --show-attention --attention-out "$out/show_attention.txt" \
    --attention-json "$out/attention.jsonl" --n-best 3 --plot "$out/plots" \
    <"$out/input.de" >"$out/translate.en" 2>"$out/translate.log"
(cd "$out/plots" && md5sum ./*.png >../plots.md5 && rm -f ./*.png)

paste -d '\t' <(head -200 "$out/test.de") <(head -200 "$out/test.en") |
    sed 's/\t/ ||| /' >"$out/bitext.txt"
"$attnkit" align "$run" --bitext "$out/bitext.txt" --out "$out/align.txt" \
    >"$out/align.stdout.txt" 2>"$out/align.log"
"$attnkit" inspect "$run" --split test --json "$out/inspect.json" \
    >"$out/inspect.txt" 2>"$out/inspect.log"
echo "behaviour_snapshot: wrote $out"
