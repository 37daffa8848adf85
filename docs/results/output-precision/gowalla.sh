#!/usr/bin/env bash
# Gowalla's Mult-DAE (configs/gowalla.toml: 40,981 items, multinomial output) on flex's tensor
# path, 3 epochs, the output layer's products in f32, f16 and bf16 operands; Recall@20 at the end.
cd "$(dirname "$0")/../../.."   # the repository root
for p in f32 f16 bf16; do
  "${WIDEBAG_BIN:-target/release/widebag}" train --config configs/gowalla.toml --set 'train.cpu_kernels="tensor"' \
    --set train.epochs=3 --set train.eval_every=0 --set "model.output_precision=\"$p\"" --json \
    > ${OUT:-.}/gowalla-$p.json 2> ${OUT:-.}/gowalla-$p.log
  echo "gowalla $p rc=$?" >> ${OUT:-.}/steps.txt
done
