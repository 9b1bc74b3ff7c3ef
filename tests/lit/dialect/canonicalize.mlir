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

// -----

// Tests that the gradients of q, k and v gathered from one tensor (scalar gathers of slots 0, 1
// and 2 of one axis; the index -1 is slot 2) sum as one concat of the slot gradients instead of
// three zero tensors and two adds.
// CHECK-LABEL: func.func @qkv_gradients
// CHECK-SAME: (%[[DQ:.*]]: tensor<2x4x8xf32>, %[[DK:.*]]: tensor<2x4x8xf32>, %[[DV:.*]]: tensor<2x4x8xf32>)
// CHECK-NOT: cpc.gather_grad
// CHECK-DAG: %[[Q:.*]] = cpc.reshape %[[DQ]] : tensor<2x4x8xf32> -> tensor<2x1x4x8xf32>
// CHECK-DAG: %[[K:.*]] = cpc.reshape %[[DK]] : tensor<2x4x8xf32> -> tensor<2x1x4x8xf32>
// CHECK-DAG: %[[V:.*]] = cpc.reshape %[[DV]] : tensor<2x4x8xf32> -> tensor<2x1x4x8xf32>
// CHECK: %[[C:.*]] = cpc.concat %[[Q]], %[[K]], %[[V]] {axis = 1 : i64} : (tensor<2x1x4x8xf32>, tensor<2x1x4x8xf32>, tensor<2x1x4x8xf32>) -> tensor<2x3x4x8xf32>
// CHECK-NOT: cpc.add
// CHECK: return %[[C]]
func.func @qkv_gradients(%dq: tensor<2x4x8xf32>, %dk: tensor<2x4x8xf32>, %dv: tensor<2x4x8xf32>) -> tensor<2x3x4x8xf32> {
  %i0 = cpc.constant dense<0> : tensor<i64>
  %i1 = cpc.constant dense<1> : tensor<i64>
  %i2 = cpc.constant dense<-1> : tensor<i64>
  %gv = cpc.gather_grad %dv, %i2 {axis = 1 : i64, dim_size = 3 : i64} : (tensor<2x4x8xf32>, tensor<i64>) -> tensor<2x3x4x8xf32>
  %gk = cpc.gather_grad %dk, %i1 {axis = 1 : i64, dim_size = 3 : i64} : (tensor<2x4x8xf32>, tensor<i64>) -> tensor<2x3x4x8xf32>
  %s = cpc.add %gv, %gk : (tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  %gq = cpc.gather_grad %dq, %i0 {axis = 1 : i64, dim_size = 3 : i64} : (tensor<2x4x8xf32>, tensor<i64>) -> tensor<2x3x4x8xf32>
  %t = cpc.add %s, %gq : (tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  return %t : tensor<2x3x4x8xf32>
}

// -----

// Tests that a slot nobody gathered is zeros in the concat, and that a slot gathered twice (a
// real sum) keeps its adds.
// CHECK-LABEL: func.func @missing_and_repeated_slots
// CHECK: %[[Z:.*]] = cpc.constant dense<0.000000e+00> : tensor<1x4xf32>
// CHECK: cpc.concat %{{.*}}, %[[Z]], %{{.*}} {axis = 0 : i64} : (tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>) -> tensor<3x4xf32>
// CHECK: %[[R0:.*]] = cpc.gather_grad
// CHECK: %[[R1:.*]] = cpc.gather_grad
// CHECK: cpc.add %[[R0]], %[[R1]]
func.func @missing_and_repeated_slots(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>) {
  %i0 = cpc.constant dense<0> : tensor<i64>
  %i2 = cpc.constant dense<2> : tensor<i64>
  %ga = cpc.gather_grad %a, %i0 {axis = 0 : i64, dim_size = 3 : i64} : (tensor<4xf32>, tensor<i64>) -> tensor<3x4xf32>
  %gb = cpc.gather_grad %b, %i2 {axis = 0 : i64, dim_size = 3 : i64} : (tensor<4xf32>, tensor<i64>) -> tensor<3x4xf32>
  %s = cpc.add %ga, %gb : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %r0 = cpc.gather_grad %a, %i2 {axis = 0 : i64, dim_size = 3 : i64} : (tensor<4xf32>, tensor<i64>) -> tensor<3x4xf32>
  %r1 = cpc.gather_grad %b, %i2 {axis = 0 : i64, dim_size = 3 : i64} : (tensor<4xf32>, tensor<i64>) -> tensor<3x4xf32>
  %t = cpc.add %r0, %r1 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %s, %t : tensor<3x4xf32>, tensor<3x4xf32>
}
