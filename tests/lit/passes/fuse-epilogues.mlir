// RUN: cpc-opt %s --pass-pipeline='builtin.module(func.func(cpc-fuse-epilogues))' --split-input-file | FileCheck %s

// Tests that a Linear (matmul whose only use adds a bias along the last dim) becomes one
// cpc.matmul_bias, with the bias on either side of the add.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.*]]: tensor<2x5x8xf32>, %[[W:.*]]: tensor<16x8xf32>, %[[B:.*]]: tensor<16xf32>)
// CHECK-NEXT: %[[Y:.*]] = cpc.matmul_bias %[[X]], %[[W]], %[[B]] {transpose_rhs = true} : (tensor<2x5x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x5x16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @linear(%x: tensor<2x5x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>) -> tensor<2x5x16xf32> {
  %0 = cpc.matmul %x, %w {transpose_rhs = true} : (tensor<2x5x8xf32>, tensor<16x8xf32>) -> tensor<2x5x16xf32>
  %1 = cpc.add %b, %0 : (tensor<16xf32>, tensor<2x5x16xf32>) -> tensor<2x5x16xf32>
  return %1 : tensor<2x5x16xf32>
}

// -----

// Tests that the GELU after the bias joins, and that the sum stays a result (preactivation)
// for gelu_grad, the backward's other reader.
// CHECK-LABEL: func.func @linear_gelu_training
// CHECK-NEXT: %[[Y:.*]], %[[P:.*]] = cpc.matmul_bias %{{.*}}, %{{.*}}, %{{.*}} {activation = #cpc.activation<gelu>} : (tensor<10x8xbf16>, tensor<8x32xbf16>, tensor<32xbf16>) -> (tensor<10x32xbf16>, tensor<10x32xbf16>)
// CHECK-NEXT: %[[G:.*]] = cpc.gelu_grad %[[P]], %{{.*}} : tensor<10x32xbf16>
// CHECK-NEXT: return %[[Y]], %[[G]]
func.func @linear_gelu_training(%x: tensor<10x8xbf16>, %w: tensor<8x32xbf16>, %b: tensor<32xbf16>,
                                %dy: tensor<10x32xbf16>) -> (tensor<10x32xbf16>, tensor<10x32xbf16>) {
  %0 = cpc.matmul %x, %w : (tensor<10x8xbf16>, tensor<8x32xbf16>) -> tensor<10x32xbf16>
  %1 = cpc.add %0, %b : (tensor<10x32xbf16>, tensor<32xbf16>) -> tensor<10x32xbf16>
  %2 = cpc.gelu %1 : tensor<10x32xbf16>
  %3 = cpc.gelu_grad %1, %dy : tensor<10x32xbf16>
  return %2, %3 : tensor<10x32xbf16>, tensor<10x32xbf16>
}

// -----

// Tests that an inference GELU (nothing else reads the sum) has no preactivation result, and
// that the tanh form is kept.
// CHECK-LABEL: func.func @linear_gelu_inference
// CHECK-NEXT: %[[Y:.*]] = cpc.matmul_bias %{{.*}}, %{{.*}}, %{{.*}} {activation = #cpc.activation<gelu>, approximate = #cpc.gelu_approximation<tanh>} : (tensor<10x8xf32>, tensor<8x32xf32>, tensor<32xf32>) -> tensor<10x32xf32>
// CHECK-NEXT: return %[[Y]]
func.func @linear_gelu_inference(%x: tensor<10x8xf32>, %w: tensor<8x32xf32>, %b: tensor<32xf32>) -> tensor<10x32xf32> {
  %0 = cpc.matmul %x, %w : (tensor<10x8xf32>, tensor<8x32xf32>) -> tensor<10x32xf32>
  %1 = cpc.add %0, %b : (tensor<10x32xf32>, tensor<32xf32>) -> tensor<10x32xf32>
  %2 = cpc.gelu %1 {approximate = #cpc.gelu_approximation<tanh>} : tensor<10x32xf32>
  return %2 : tensor<10x32xf32>
}

// -----

// Tests what stays apart: a product read twice, a bias that is not a vector along the last
// dim, a batched weight (attention's products), and a residual add of two matrices.
// CHECK-LABEL: func.func @not_linears
// CHECK-NOT: cpc.matmul_bias
// CHECK: return
func.func @not_linears(%x: tensor<10x8xf32>, %w: tensor<8x32xf32>, %b: tensor<32xf32>, %c: tensor<10x1xf32>,
                       %q: tensor<2x4x6xf32>, %k: tensor<2x6x4xf32>, %r: tensor<10x32xf32>)
    -> (tensor<10x32xf32>, tensor<10x32xf32>, tensor<10x32xf32>, tensor<2x4x4xf32>, tensor<10x32xf32>) {
  %0 = cpc.matmul %x, %w : (tensor<10x8xf32>, tensor<8x32xf32>) -> tensor<10x32xf32>
  %1 = cpc.add %0, %b : (tensor<10x32xf32>, tensor<32xf32>) -> tensor<10x32xf32>
  %2 = cpc.matmul %x, %w : (tensor<10x8xf32>, tensor<8x32xf32>) -> tensor<10x32xf32>
  %3 = cpc.add %2, %c : (tensor<10x32xf32>, tensor<10x1xf32>) -> tensor<10x32xf32>
  %4 = cpc.matmul %q, %k : (tensor<2x4x6xf32>, tensor<2x6x4xf32>) -> tensor<2x4x4xf32>
  %5 = cpc.add %4, %4 : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %6 = cpc.matmul %x, %w : (tensor<10x8xf32>, tensor<8x32xf32>) -> tensor<10x32xf32>
  %7 = cpc.add %6, %r : (tensor<10x32xf32>, tensor<10x32xf32>) -> tensor<10x32xf32>
  return %1, %0, %3, %5, %7 : tensor<10x32xf32>, tensor<10x32xf32>, tensor<10x32xf32>, tensor<2x4x4xf32>, tensor<10x32xf32>
}
