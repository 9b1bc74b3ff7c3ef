// RUN: cpc-opt %s --cpc-mixed-precision=precision=fp16 --cpc-autodiff=loss-scale=1024 --cpc-build-train-step='loss-scale=1024 growth-interval=3 hysteresis=2' | FileCheck %s
// RUN: cpc-opt %s --cpc-mixed-precision=precision=fp16 --cpc-autodiff=loss-scale=1024 --cpc-build-train-step='loss-scale=1024 accumulation=2' | FileCheck %s --check-prefix=ACC
// RUN: not cpc-opt %s --cpc-autodiff --cpc-build-train-step='loss-scale=1024 backoff-factor=2' 2>&1 | FileCheck %s --check-prefix=BAD

// Tests that the backward starts from the loss-scale state (not 1), that the update unscales
// the gradients by it, skips on a non-finite global norm (every assign keeps the old value),
// updates the scaler's state and returns the scale it used and the overflow flag.
// CHECK: cpc.variable @amp.loss_scale state <loss_scale> {init = 1.024000e+03 : f64} : tensor<f32>
// CHECK-NOT: func.func @main
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32> {cpc.name = "loss"}, tensor<f32> {cpc.name = "grad_norm"}, tensor<f32> {cpc.name = "loss_scale"}, tensor<f32> {cpc.name = "overflow"})
// CHECK: %[[SEED:.*]] = cpc.state @amp.loss_scale : tensor<f32>
// CHECK: cpc.reshape %[[SEED]]
// CHECK: cpc.broadcast
// CHECK: cpc.matmul {{.*}} -> tensor<4x3xf16>
// CHECK: %[[GRAD:.*]] = cpc.cast %{{.*}} : tensor<4x3xf16> -> tensor<4x3xf32>
// CHECK: %[[SCALE:.*]] = cpc.state @amp.loss_scale
// CHECK: %[[INV:.*]] = cpc.div %{{.*}}, %[[SCALE]]
// CHECK: %[[G:.*]] = cpc.mul %[[GRAD]], %[[INV]]
// CHECK: %[[SQ:.*]] = cpc.reduce_sum
// CHECK: %[[INF:.*]] = cpc.constant dense<0x7F800000> : tensor<f32>
// CHECK: %[[FINITE:.*]] = cpc.less %[[SQ]], %[[INF]]
// CHECK: %[[W:.*]] = cpc.parameter @w
// CHECK: %[[NEW:.*]], %{{.*}}, %{{.*}} = cpc.adamw
// CHECK: %[[KEPT:.*]] = cpc.where %[[FINITE]], %[[NEW]], %[[W]]
// CHECK: cpc.assign %[[KEPT]] to @w
// CHECK: cpc.where %[[FINITE]]
// CHECK: cpc.assign {{.*}} to @adamw.exp_avg.w
// CHECK: cpc.where %[[FINITE]]
// CHECK: cpc.assign {{.*}} to @adamw.exp_avg_sq.w
// CHECK: cpc.state @amp.growth_tracker
// CHECK: cpc.state @amp.overflow_tracker
// CHECK: cpc.constant dense<3.000000e+00>
// CHECK: cpc.constant dense<2.000000e+00>
// CHECK: cpc.assign {{.*}} to @amp.loss_scale
// CHECK: cpc.assign {{.*}} to @amp.growth_tracker
// CHECK: cpc.assign {{.*}} to @amp.overflow_tracker
// CHECK: %[[NOT:.*]] = cpc.not %[[FINITE]]
// CHECK: %[[OVER:.*]] = cpc.cast %[[NOT]] : tensor<i1> -> tensor<f32>
// CHECK: return %{{.*}}, %{{.*}}, %[[SCALE]], %[[OVER]]

// Tests that with accumulation the scaled gradients accumulate in f32 and @apply unscales
// them together with the average over the microbatches.
// ACC-LABEL: func.func @accumulate
// ACC: cpc.state @grad_acc.w : tensor<4x3xf32>
// ACC-LABEL: func.func @apply
// ACC-SAME: -> (tensor<f32> {cpc.name = "grad_norm"}, tensor<f32> {cpc.name = "loss_scale"}, tensor<f32> {cpc.name = "overflow"})
// ACC: %[[HALF:.*]] = cpc.constant dense<5.000000e-01>
// ACC: %[[SCALE:.*]] = cpc.state @amp.loss_scale
// ACC: cpc.div %[[HALF]], %[[SCALE]]

// Tests that a backoff factor outside (0, 1) is refused.
// BAD: bad loss scaling
cpc.variable @w trainable : tensor<4x3xf32>
func.func @main(%x: tensor<2x4xf32> {cpc.name = "x"}) -> tensor<f32> {
  %w = cpc.parameter @w : tensor<4x3xf32>
  %y = cpc.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %l = cpc.reduce_mean %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}
