// RUN: cpc-opt %s --cpc-autodiff --cpc-build-train-step='clip-grad-norm=1.0 weight-decay=0.05' | FileCheck %s
// RUN: cpc-opt %s --cpc-autodiff --cpc-build-train-step='accumulation=2' | FileCheck %s --check-prefix=ACC

// Tests that the step marks its function, its runtime inputs and its optimizer states with
// role attributes (never roles by name), and clips by the global norm before AdamW.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: {cpc.name = "lr", cpc.runtime = #cpc.runtime_input<learning_rate>}
// CHECK-SAME: {cpc.name = "step", cpc.runtime = #cpc.runtime_input<step>}
// CHECK-SAME: attributes {cpc.phase = #cpc.phase<train_step>}
// CHECK: cpc.min
// CHECK: %[[M:.*]] = cpc.state @adamw.exp_avg.w : tensor<4x3xf32>
// CHECK: %[[V:.*]] = cpc.state @adamw.exp_avg_sq.w : tensor<4x3xf32>
// CHECK: cpc.adamw
// CHECK: cpc.assign %{{.*}} to @w

// Tests that with accumulation the gradients go into gradient-accumulator states, read back
// and zeroed by the apply phase.
// ACC-LABEL: func.func @accumulate
// ACC-SAME: attributes {cpc.phase = #cpc.phase<accumulate>}
// ACC: %[[OLD:.*]] = cpc.state @grad_acc.w : tensor<4x3xf32>
// ACC: cpc.assign %{{.*}} to @grad_acc.w
// ACC-LABEL: func.func @apply
// ACC-SAME: cpc.runtime = #cpc.runtime_input<learning_rate>
// ACC-SAME: attributes {cpc.phase = #cpc.phase<apply>}
// ACC: cpc.state @grad_acc.w
// ACC: cpc.adamw
// ACC: cpc.assign %{{.*}} to @grad_acc.w
cpc.variable @w trainable : tensor<4x3xf32>
func.func @main(%x: tensor<2x4xf32> {cpc.name = "x"}) -> tensor<f32> {
  %w = cpc.parameter @w : tensor<4x3xf32>
  %y = cpc.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %l = cpc.reduce_mean %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}
