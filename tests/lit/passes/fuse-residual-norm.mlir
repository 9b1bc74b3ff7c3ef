// RUN: cpc-opt %s --pass-pipeline='builtin.module(func.func(cpc-fuse-residual-norm))' --split-input-file | FileCheck %s

// Tests a transformer block's residual: x + h normalized becomes one cpc.add_layer_norm whose
// sum carries the residual stream on (the next add reads it).
// CHECK-LABEL: func.func @block
// CHECK-SAME: (%[[X:.*]]: tensor<2x5x8xf32>, %[[H:.*]]: tensor<2x5x8xf32>, %[[S:.*]]: tensor<8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[SUM:.*]], %[[N:.*]] = cpc.add_layer_norm %[[X]], %[[H]], %[[S]], %[[B]] {axis = 2 : i64, epsilon = 9.9999999999999995E-7 : f64} : (tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x5x8xf32>, tensor<2x5x8xf32>)
// CHECK-NEXT: %[[NEXT:.*]] = cpc.add %[[SUM]], %[[N]]
// CHECK-NEXT: return %[[NEXT]]
func.func @block(%x: tensor<2x5x8xf32>, %h: tensor<2x5x8xf32>, %s: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x5x8xf32> {
  %r = cpc.add %x, %h : (tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  %n = cpc.layer_norm %r, %s, %b {axis = 2 : i64, epsilon = 1.0e-6 : f64} : (tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x5x8xf32>
  %next = cpc.add %r, %n : (tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> tensor<2x5x8xf32>
  return %next : tensor<2x5x8xf32>
}

// -----

// Tests the backward: the residual stream's gradient added to the LayerNorm's input gradient
// (either operand order) becomes one cpc.layer_norm_grad_add; the scale and bias gradients keep
// their readers.
// CHECK-LABEL: func.func @block_backward
// CHECK-SAME: (%[[X:.*]]: tensor<10x8xf64>, %[[S:.*]]: tensor<8xf64>, %[[G:.*]]: tensor<10x8xf64>, %[[R:.*]]: tensor<10x8xf64>)
// CHECK-NEXT: %[[DX:.*]], %[[DS:.*]], %[[DB:.*]] = cpc.layer_norm_grad_add %[[X]], %[[S]], %[[G]], %[[R]] {axis = 1 : i64, epsilon = 1.000000e-05 : f64} : (tensor<10x8xf64>, tensor<8xf64>, tensor<10x8xf64>, tensor<10x8xf64>) -> (tensor<10x8xf64>, tensor<8xf64>, tensor<8xf64>)
// CHECK-NEXT: return %[[DX]], %[[DS]], %[[DB]]
func.func @block_backward(%x: tensor<10x8xf64>, %s: tensor<8xf64>, %g: tensor<10x8xf64>, %r: tensor<10x8xf64>)
    -> (tensor<10x8xf64>, tensor<8xf64>, tensor<8xf64>) {
  %dx, %ds, %db = cpc.layer_norm_grad %x, %s, %g {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<10x8xf64>, tensor<8xf64>, tensor<10x8xf64>) -> (tensor<10x8xf64>, tensor<8xf64>, tensor<8xf64>)
  %t = cpc.add %r, %dx : (tensor<10x8xf64>, tensor<10x8xf64>) -> tensor<10x8xf64>
  return %t, %ds, %db : tensor<10x8xf64>, tensor<8xf64>, tensor<8xf64>
}

// -----

// Tests what stays separate: a broadcast add, bf16 (its kernels compute in f32), a sum read
// before the LayerNorm, an input gradient with another reader, and an addend computed after
// the layer_norm_grad.
// CHECK-LABEL: func.func @unfused
// CHECK-NOT: cpc.add_layer_norm
// CHECK-NOT: cpc.layer_norm_grad_add
// CHECK: return
func.func @unfused(%x: tensor<4x8xf32>, %row: tensor<8xf32>, %s: tensor<8xf32>, %h: tensor<4x8xbf16>, %hs: tensor<8xbf16>,
                   %g: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %a = cpc.add %x, %row : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %na = cpc.layer_norm %a, %s, %s {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %b = cpc.add %h, %h : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %nb = cpc.layer_norm %b, %hs, %hs {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>) -> tensor<4x8xbf16>
  %c = cpc.add %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %early = cpc.neg %c : tensor<4x8xf32>
  %nc = cpc.layer_norm %c, %s, %s {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %dx, %ds, %db = cpc.layer_norm_grad %x, %s, %g {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %t = cpc.add %dx, %g : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %u = cpc.mul %dx, %g : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %dx2, %ds2, %db2 = cpc.layer_norm_grad %x, %s, %g {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %late = cpc.neg %g : tensor<4x8xf32>
  %v = cpc.add %dx2, %late : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w = cpc.add %early, %u : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %na, %nb, %nc, %t, %v, %w : tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
