// Tests that the registered training pipeline refuses the option combinations it cannot build,
// in one line naming the options, before any pass runs (cpc compile refuses the same ones on
// its flags).
// RUN: not cpc-opt %s --cpc-training-pipeline='zero=1' 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not cpc-opt %s --cpc-training-pipeline='tp=6 tp-mode=2d' 2>&1 | FileCheck %s --check-prefix=GRID
// RUN: not cpc-opt %s --cpc-training-pipeline='tp=4 tp-mode=2d tp-depth=2' 2>&1 | FileCheck %s --check-prefix=DEPTH
// RUN: not cpc-opt %s --cpc-training-pipeline='tp=4 tp-mode=2d sp=true' 2>&1 | FileCheck %s --check-prefix=SP
// RUN: not cpc-opt %s --cpc-training-pipeline='sp=true' 2>&1 | FileCheck %s --check-prefix=SPTP
// RUN: not cpc-opt %s --cpc-training-pipeline='accumulation=0' 2>&1 | FileCheck %s --check-prefix=ACC
// RUN: cpc-opt %s --cpc-training-pipeline='tp=8 tp-mode=2.5d tp-depth=2' | FileCheck %s --check-prefix=FITS

// ZERO: cpc-training-pipeline: zero=1 shards over data-parallel ranks: it needs dp > 1
// GRID: cpc-training-pipeline: tp-mode=2d needs tp = q*q ranks with q >= 2, got tp=6
// DEPTH: cpc-training-pipeline: tp-depth belongs to tp-mode=2.5d, not to tp-mode=2d
// SP: cpc-training-pipeline: sp is Megatron's sequence parallelism: it needs tp-mode=1d
// SPTP: cpc-training-pipeline: sp splits the sequence over the tensor-parallel ranks: it needs tp > 1
// ACC: cpc-training-pipeline: accumulation must be >= 1, got 0
// FITS: cpc.phase = #cpc.phase<train_step>

cpc.variable @w trainable : tensor<4x4xf32>
func.func @main(%x: tensor<8x4xf32> {cpc.name = "x"}) -> (tensor<f32> {cpc.name = "loss"}) {
  %w = cpc.parameter @w : tensor<4x4xf32>
  %y = cpc.matmul %x, %w : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  %loss = cpc.reduce_sum %y {axes = array<i64: 0, 1>} : tensor<8x4xf32> -> tensor<f32>
  return %loss : tensor<f32>
}
