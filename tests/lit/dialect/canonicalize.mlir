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
