// RUN: cpc-opt %s -split-input-file --canonicalize | FileCheck %s

// Tests that a sum over the classes of a cross-entropy's scattered gradient (one element per
// row) is the gradient itself, and that a sum of a negation becomes the negation of the (smaller)
// sum: the backward of log-softmax then needs no sum over the classes.
// CHECK-LABEL: func.func @sum_of_scattered_rows
// CHECK-NOT: cpc.reduce_sum
// CHECK: %[[N:.*]] = cpc.neg %arg0 : tensor<8x1xf32>
// CHECK: return %[[N]]
func.func @sum_of_scattered_rows(%g: tensor<8x1xf32>, %t: tensor<8x1xi64>) -> tensor<8x1xf32> {
  %s = cpc.gather_elements_grad %g, %t {axis = 1 : i64} : (tensor<8x1xf32>, tensor<8x1xi64>) -> tensor<8x16xf32>
  %n = cpc.neg %s : tensor<8x16xf32>
  %r = cpc.reduce_sum %n {axes = array<i64: 1>, keepdims = true} : tensor<8x16xf32> -> tensor<8x1xf32>
  return %r : tensor<8x1xf32>
}

// -----

// Tests that the rows are not folded when the indices pick several elements per row.
// CHECK-LABEL: func.func @several_per_row
// CHECK: cpc.reduce_sum
func.func @several_per_row(%g: tensor<8x2xf32>, %t: tensor<8x2xi64>) -> tensor<8x1xf32> {
  %s = cpc.gather_elements_grad %g, %t {axis = 1 : i64} : (tensor<8x2xf32>, tensor<8x2xi64>) -> tensor<8x16xf32>
  %r = cpc.reduce_sum %s {axes = array<i64: 1>, keepdims = true} : tensor<8x16xf32> -> tensor<8x1xf32>
  return %r : tensor<8x1xf32>
}

// -----

// Tests that stop_gradient is kept (autodiff reads it; canonicalization must not fold it).
// CHECK-LABEL: func.func @stop_gradient
// CHECK: cpc.stop_gradient
func.func @stop_gradient(%x: tensor<8x1xf32>) -> tensor<8x1xf32> {
  %s = cpc.stop_gradient %x : tensor<8x1xf32>
  return %s : tensor<8x1xf32>
}

// -----

// Tests that x ^ 1 folds to x (the VJP of a square writes one), and that neither another
// exponent nor an exponent that broadcasts x to a larger result folds.
// CHECK-LABEL: func.func @pow_one
// CHECK-SAME: (%[[X:.*]]: tensor<4x3xf32>
// CHECK-NEXT: %[[TWO:.*]] = cpc.constant dense<2.000000e+00>
// CHECK-NEXT: %[[ONES:.*]] = cpc.constant dense<1.000000e+00> : tensor<2x4x3xf32>
// CHECK-NEXT: %[[SQ:.*]] = cpc.pow %[[X]], %[[TWO]]
// CHECK-NEXT: %[[WIDE:.*]] = cpc.pow %[[X]], %[[ONES]]
// CHECK-NEXT: return %[[X]], %[[SQ]], %[[WIDE]]
func.func @pow_one(%x: tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<2x4x3xf32>) {
  %one = cpc.constant dense<1.0> : tensor<f32>
  %two = cpc.constant dense<2.0> : tensor<f32>
  %ones = cpc.constant dense<1.0> : tensor<2x4x3xf32>
  %a = cpc.pow %x, %one : (tensor<4x3xf32>, tensor<f32>) -> tensor<4x3xf32>
  %b = cpc.pow %x, %two : (tensor<4x3xf32>, tensor<f32>) -> tensor<4x3xf32>
  %c = cpc.pow %x, %ones : (tensor<4x3xf32>, tensor<2x4x3xf32>) -> tensor<2x4x3xf32>
  return %a, %b, %c : tensor<4x3xf32>, tensor<4x3xf32>, tensor<2x4x3xf32>
}

// -----

// Tests that the VJP of a square folds to a product: 2 - 1 folds for f32 scalars, then x ^ 1 to
// x; a difference of tensors or of bf16 scalars stays (the kernels compute 16-bit types in f32).
// CHECK-LABEL: func.func @square_vjp
// CHECK-SAME: (%[[X:.*]]: tensor<4x3xf32>, %[[H:.*]]: tensor<bf16>
// CHECK-DAG: %[[BTWO:.*]] = cpc.constant dense<2.000000e+00> : tensor<bf16>
// CHECK-DAG: %[[BONE:.*]] = cpc.constant dense<1.000000e+00> : tensor<bf16>
// CHECK-NOT: cpc.pow
// CHECK: %[[B:.*]] = cpc.sub %[[BTWO]], %[[BONE]] : (tensor<bf16>, tensor<bf16>) -> tensor<bf16>
// CHECK-NEXT: return %[[X]], %[[B]]
func.func @square_vjp(%x: tensor<4x3xf32>, %h: tensor<bf16>) -> (tensor<4x3xf32>, tensor<bf16>) {
  %one = cpc.constant dense<1.0> : tensor<f32>
  %two = cpc.constant dense<2.0> : tensor<f32>
  %e = cpc.sub %two, %one : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %p = cpc.pow %x, %e : (tensor<4x3xf32>, tensor<f32>) -> tensor<4x3xf32>
  %bone = cpc.constant dense<1.0> : tensor<bf16>
  %btwo = cpc.constant dense<2.0> : tensor<bf16>
  %b = cpc.sub %btwo, %bone : (tensor<bf16>, tensor<bf16>) -> tensor<bf16>
  return %p, %b : tensor<4x3xf32>, tensor<bf16>
}
