#!/usr/bin/env bash
# Proof (1) of the layout step: every stack renders byte-identical manifests.yaml, resources.json and figures.json
# before and after. usage (from the checkout's root):
#   tools/relayout/compare_renders.sh render OUTDIR      render every Pulumi.<stack>.yaml of this checkout into OUTDIR
#   tools/relayout/compare_renders.sh diff BEFORE AFTER  compare two such directories (exit 1 on any difference)
# PYTHON (default .venv/bin/python) runs `python -m kimi_k3 render`; PYTHONPATH is set to this checkout so a venv
# installed editable from another checkout still renders this one.
set -euo pipefail
mode=${1:?render OUTDIR | diff BEFORE AFTER}
case "$mode" in
  render)
    out=${2:?OUTDIR}
    stacks=$(ls Pulumi.*.yaml | sed -E 's/^Pulumi\.(.*)\.yaml$/\1/')
    mkdir -p "$out"
    # shellcheck disable=SC2086
    PYTHONPATH="$PWD" "${PYTHON:-.venv/bin/python}" -m kimi_k3 render --out "$out" --no-critical-path $stacks >/dev/null
    ls "$out"
    ;;
  diff)
    before=${2:?BEFORE} after=${3:?AFTER}
    status=0
    for dir in "$before"/*/; do
      stack=$(basename "$dir")
      for f in manifests.yaml resources.json figures.json; do
        if [ ! -e "$after/$stack/$f" ] && [ ! -e "$dir$f" ]; then continue; fi
        if cmp -s "$dir$f" "$after/$stack/$f"; then echo "identical: $stack/$f ($(wc -c < "$dir$f") bytes)"
        else echo "DIFFERENT: $stack/$f"; diff <(head -c 2000000 "$dir$f") <(head -c 2000000 "$after/$stack/$f") | head -40; status=1; fi
      done
    done
    [ "$(ls "$before" | wc -l)" = "$(ls "$after" | wc -l)" ] || { echo "DIFFERENT: stack count"; status=1; }
    exit $status
    ;;
  *) echo "usage: $0 render OUTDIR | diff BEFORE AFTER" >&2; exit 2 ;;
esac
