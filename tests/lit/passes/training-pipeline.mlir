// RUN: cpc-opt %s --cpc-training-pipeline='dp=2 zero=1 clip-grad-norm=1.0' | FileCheck %s
// RUN: cpc-opt %s --cpc-training-pipeline='accumulation=2 dp=2' | FileCheck %s --check-prefix=ACC

// Tests that the registered pipeline builds the step, splits the batch over dp and shards the
// update (ZeRO-1), finding the training function by its phase.
// CHECK: cpc.mesh @mesh shape = [2] axes = ["dp"]
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tensor<2x4xf32> {cpc.name = "x"
// CHECK-SAME: attributes {cpc.phase = #cpc.phase<train_step>}
// CHECK: cpc.all_reduce
// CHECK: cpc.state @adamw.exp_avg.w {{.*}}: tensor<2x3xf32>
// CHECK: cpc.all_gather

// Tests that with accumulation both phases are partitioned: the accumulators stay partial sums
// until apply reduces them.
// ACC-LABEL: func.func @accumulate
// ACC-SAME: tensor<2x4xf32>
// ACC: cpc.all_reduce %{{.*}} over @mesh ["dp"] : tensor<f32>
// ACC-NOT: cpc.all_reduce
// ACC-LABEL: func.func @apply
// ACC: cpc.state @grad_acc.w
// ACC: cpc.all_reduce
cpc.variable @w trainable : tensor<4x3xf32>
func.func @main(%x: tensor<4x4xf32> {cpc.name = "x"}) -> tensor<f32> {
  %w = cpc.parameter @w : tensor<4x3xf32>
  %y = cpc.matmul %x, %w : (tensor<4x4xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %l = cpc.reduce_mean %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}
