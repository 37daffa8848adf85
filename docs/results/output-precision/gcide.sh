#!/usr/bin/env bash
# GCIDE's CBOW language model (217k classes, full softmax) on flex's tensor path: the output
# layer's products in f32, f16 and bf16 operands, the same seed and steps.
cd "$(dirname "$0")/../../.."   # the repository root
G=(--config configs/gcide-headtail.toml --set 'model.output="full"' --set 'model.input_bands.cutoffs=[]' --set 'model.output_bands.cutoffs=[]' --set 'train.cpu_kernels="tensor"' --set train.steps=${STEPS:-400})
for p in f32 f16 bf16; do
  "${WIDEBAG_BIN:-target/release/widebag}" train "${G[@]}" --set "model.output_precision=\"$p\"" --json > ${OUT:-.}/gcide-$p.json 2> ${OUT:-.}/gcide-$p.log
  echo "$p rc=$?" >> ${OUT:-.}/steps.txt
done
