// RUN: cpc-opt %s --pass-pipeline='builtin.module(func.func(cpc-group-adamw))' --split-input-file | FileCheck %s

// Tests that the updates of a step become one multi-tensor op at the first of them: the later
// members' variable reads are hoisted there, each tensor keeps its weight decay, the missing
// grad scale is a constant 1, and every assign takes its tensor's result.
// CHECK-LABEL: func.func @step
// CHECK-DAG: %[[W:.*]] = cpc.parameter @w
// CHECK-DAG: %[[B:.*]] = cpc.parameter @b
// CHECK-DAG: %[[MW:.*]] = cpc.state @m.w
// CHECK-DAG: %[[MB:.*]] = cpc.state @m.b
// CHECK-DAG: %[[VW:.*]] = cpc.state @v.w
// CHECK-DAG: %[[VB:.*]] = cpc.state @v.b
// CHECK-DAG: %[[ONE:.*]] = cpc.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[U:.*]]:6 = cpc.multi_tensor_adamw %arg2, %arg3, %[[ONE]], [%[[W]], %[[B]], %arg0, %arg1, %[[MW]], %[[MB]], %[[VW]], %[[VB]]] {beta1 = 9.000000e-01 : f64, beta2 = {{.*}}, epsilon = 1.000000e-08 : f64, weight_decays = array<f64: 5.000000e-02, 0.000000e+00>}
// CHECK-NOT: cpc.adamw
// CHECK: cpc.assign %[[U]]#0 to @w
// CHECK: cpc.assign %[[U]]#2 to @m.w
// CHECK: cpc.assign %[[U]]#4 to @v.w
// CHECK: cpc.assign %[[U]]#1 to @b
// CHECK: cpc.assign %[[U]]#3 to @m.b
// CHECK: cpc.assign %[[U]]#5 to @v.b
cpc.variable @w trainable : tensor<4x6xf32>
cpc.variable @m.w state <exp_avg> : tensor<4x6xf32>
cpc.variable @v.w state <exp_avg_sq> : tensor<4x6xf32>
cpc.variable @b trainable : tensor<6xf32>
cpc.variable @m.b state <exp_avg> : tensor<6xf32>
cpc.variable @v.b state <exp_avg_sq> : tensor<6xf32>
func.func @step(%gw: tensor<4x6xf32>, %gb: tensor<6xf32>, %lr: tensor<f32>, %t: tensor<f32>) {
  %w = cpc.parameter @w : tensor<4x6xf32>
  %mw = cpc.state @m.w : tensor<4x6xf32>
  %vw = cpc.state @v.w : tensor<4x6xf32>
  %nw, %nmw, %nvw = cpc.adamw %w, %gw, %mw, %vw, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.05 : f64} : (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<f32>, tensor<f32>) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>)
  cpc.assign %nw to @w : tensor<4x6xf32>
  cpc.assign %nmw to @m.w : tensor<4x6xf32>
  cpc.assign %nvw to @v.w : tensor<4x6xf32>
  %b = cpc.parameter @b : tensor<6xf32>
  %mb = cpc.state @m.b : tensor<6xf32>
  %vb = cpc.state @v.b : tensor<6xf32>
  %nb, %nmb, %nvb = cpc.adamw %b, %gb, %mb, %vb, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<f32>, tensor<f32>) -> (tensor<6xf32>, tensor<6xf32>, tensor<6xf32>)
  cpc.assign %nb to @b : tensor<6xf32>
  cpc.assign %nmb to @m.b : tensor<6xf32>
  cpc.assign %nvb to @v.b : tensor<6xf32>
  return
}

// -----

// Tests what stays single: an update whose result feeds something besides assigns (the loss
// scaler's where keeps the old value on overflow), one whose read of a variable would move
// past an assign to it, and one with other betas.
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-3: cpc.adamw
// CHECK-NOT: cpc.multi_tensor_adamw
cpc.variable @a trainable : tensor<6xf32>
cpc.variable @x state <exp_avg> : tensor<6xf32>
cpc.variable @c trainable : tensor<6xf32>
cpc.variable @y : tensor<6xf32>
func.func @kept(%g: tensor<6xf32>, %lr: tensor<f32>, %t: tensor<f32>, %ok: tensor<i1>) {
  %a = cpc.parameter @a : tensor<6xf32>
  %na, %nma, %nva = cpc.adamw %a, %g, %g, %g, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<f32>, tensor<f32>) -> (tensor<6xf32>, tensor<6xf32>, tensor<6xf32>)
  cpc.assign %na to @a : tensor<6xf32>
  cpc.assign %nma to @x : tensor<6xf32>
  %x = cpc.state @x : tensor<6xf32>
  %nx, %nmx, %nvx = cpc.adamw %x, %g, %g, %g, %lr, %t {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<f32>, tensor<f32>) -> (tensor<6xf32>, tensor<6xf32>, tensor<6xf32>)
  cpc.assign %nx to @y : tensor<6xf32>
  %c = cpc.parameter @c : tensor<6xf32>
  %nc, %nmc, %nvc = cpc.adamw %c, %g, %g, %g, %lr, %t {beta1 = 0.8 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<f32>, tensor<f32>) -> (tensor<6xf32>, tensor<6xf32>, tensor<6xf32>)
  %kept = cpc.where %ok, %nc, %c : (tensor<i1>, tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  cpc.assign %kept to @c : tensor<6xf32>
  return
}
