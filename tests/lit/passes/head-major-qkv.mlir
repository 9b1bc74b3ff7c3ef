// RUN: cpc-opt %s -split-input-file -verify-diagnostics --cpc-head-major-qkv="tp=2" | FileCheck %s

// Tests that a fused qkv Linear (a transposed [3D, D] weight and a bias, reshaped to
// [B, N, 3, H, Dh]) is kept in head-major order: both parameters record the stored order, and
// the reshape becomes [B, N, H, 3, Dh] plus a transpose back to the model's [B, N, 3, H, Dh].
// CHECK: cpc.variable @qkv.weight trainable {stored_perm = array<i64: 1, 0, 2, 3>, stored_view = array<i64: 3, 2, 4, 8>} : tensor<24x8xf32>
// CHECK: cpc.variable @qkv.bias trainable {stored_perm = array<i64: 1, 0, 2>, stored_view = array<i64: 3, 2, 4>} : tensor<24xf32>
// CHECK-LABEL: func.func @qkv
// CHECK: cpc.parameter @qkv.weight : tensor<24x8xf32>
// CHECK: cpc.parameter @qkv.bias : tensor<24xf32>
// CHECK: %[[G:.*]] = cpc.reshape %{{.*}} : tensor<2x5x24xf32> -> tensor<2x5x2x3x4xf32>
// CHECK: %[[T:.*]] = cpc.transpose %[[G]] {permutation = array<i64: 0, 1, 3, 2, 4>} : tensor<2x5x2x3x4xf32> -> tensor<2x5x3x2x4xf32>
// CHECK: return %[[T]]
cpc.variable @qkv.weight trainable : tensor<24x8xf32>
cpc.variable @qkv.bias trainable : tensor<24xf32>
func.func @qkv(%x: tensor<2x5x8xf32>) -> tensor<2x5x3x2x4xf32> {
  %w = cpc.parameter @qkv.weight : tensor<24x8xf32>
  %b = cpc.parameter @qkv.bias : tensor<24xf32>
  %y = cpc.matmul %x, %w {transpose_rhs = true} : (tensor<2x5x8xf32>, tensor<24x8xf32>) -> tensor<2x5x24xf32>
  %yb = cpc.add %b, %y : (tensor<24xf32>, tensor<2x5x24xf32>) -> tensor<2x5x24xf32>
  %h = cpc.reshape %yb : tensor<2x5x24xf32> -> tensor<2x5x3x2x4xf32>
  return %h : tensor<2x5x3x2x4xf32>
}

// -----

// Tests the pre-transposed weight form ([D, 3D], no bias): the stored order swaps the [3, H]
// pair of dim 1.
// CHECK: cpc.variable @"onnx::MatMul_7" trainable {stored_perm = array<i64: 0, 2, 1, 3>, stored_view = array<i64: 8, 3, 2, 4>} : tensor<8x24xf32>
// CHECK-LABEL: func.func @qkv_pretransposed
// CHECK: cpc.parameter @"onnx::MatMul_7" : tensor<8x24xf32>
// CHECK: cpc.transpose
cpc.variable @"onnx::MatMul_7" trainable : tensor<8x24xf32>
func.func @qkv_pretransposed(%x: tensor<2x5x8xf32>) -> tensor<2x5x3x2x4xf32> {
  %w = cpc.parameter @"onnx::MatMul_7" : tensor<8x24xf32>
  %y = cpc.matmul %x, %w : (tensor<2x5x8xf32>, tensor<8x24xf32>) -> tensor<2x5x24xf32>
  %h = cpc.reshape %y : tensor<2x5x24xf32> -> tensor<2x5x3x2x4xf32>
  return %h : tensor<2x5x3x2x4xf32>
}

// -----

// Tests that heads that do not divide by tp (3 heads, tp=2) leave the projection as it is, with
// a note.
// CHECK: cpc.variable @w trainable : tensor<36x8xf32>{{$}}
// CHECK-LABEL: func.func @odd_heads
// CHECK: cpc.parameter @w : tensor<36x8xf32>
// CHECK: cpc.reshape %{{.*}} : tensor<2x5x36xf32> -> tensor<2x5x3x3x4xf32>
// CHECK-NOT: cpc.transpose
cpc.variable @w trainable : tensor<36x8xf32>
func.func @odd_heads(%x: tensor<2x5x8xf32>) -> tensor<2x5x3x3x4xf32> {
  %w = cpc.parameter @w : tensor<36x8xf32>
  %y = cpc.matmul %x, %w {transpose_rhs = true} : (tensor<2x5x8xf32>, tensor<36x8xf32>) -> tensor<2x5x36xf32>
  // expected-remark @+1 {{attention with 3 heads stays replicated: they do not split over tp=2}}
  %h = cpc.reshape %y : tensor<2x5x36xf32> -> tensor<2x5x3x3x4xf32>
  return %h : tensor<2x5x3x3x4xf32>
}

// -----

// Tests that a weight read elsewhere too is left alone (permuting it would change that use).
// CHECK: cpc.variable @w trainable : tensor<24x8xf32>{{$}}
// CHECK-LABEL: func.func @shared_weight
// CHECK: cpc.parameter @w : tensor<24x8xf32>
// CHECK-NOT: stored_perm
cpc.variable @w trainable : tensor<24x8xf32>
func.func @shared_weight(%x: tensor<2x5x8xf32>) -> (tensor<2x5x3x2x4xf32>, tensor<24x8xf32>) {
  %w = cpc.parameter @w : tensor<24x8xf32>
  %y = cpc.matmul %x, %w {transpose_rhs = true} : (tensor<2x5x8xf32>, tensor<24x8xf32>) -> tensor<2x5x24xf32>
  %h = cpc.reshape %y : tensor<2x5x24xf32> -> tensor<2x5x3x2x4xf32>
  %e = cpc.exp %w : tensor<24x8xf32>
  return %h, %e : tensor<2x5x3x2x4xf32>, tensor<24x8xf32>
}

// -----

// Tests Hugging Face GPT-2's form: a Conv1D (x @ W[D, 3D] + b) on flattened rows, reshaped back
// to [B, N, 3D] and taken apart by three equal slices, each reshaped into [B, N, H, Dh]. The
// parameters are stored head-major, and each slice becomes part j of the features reshaped to
// [B, N, H, 3, Dh] and transposed to [B, N, 3, H, Dh]: a slice of the 3 dim, whose heads stay a
// block split.
// CHECK: cpc.variable @c_attn.weight trainable {stored_perm = array<i64: 0, 2, 1, 3>, stored_view = array<i64: 8, 3, 2, 4>} : tensor<8x24xf32>
// CHECK: cpc.variable @c_attn.bias trainable {stored_perm = array<i64: 1, 0, 2>, stored_view = array<i64: 3, 2, 4>} : tensor<24xf32>
// CHECK-LABEL: func.func @gpt2_split
// CHECK: %[[F:.*]] = cpc.reshape %{{.*}} : tensor<10x24xf32> -> tensor<2x5x24xf32>
// CHECK: %[[G:.*]] = cpc.reshape %[[F]] : tensor<2x5x24xf32> -> tensor<2x5x2x3x4xf32>
// CHECK: %[[T:.*]] = cpc.transpose %[[G]] {permutation = array<i64: 0, 1, 3, 2, 4>} : tensor<2x5x2x3x4xf32> -> tensor<2x5x3x2x4xf32>
// CHECK: %[[Q:.*]] = cpc.slice %[[T]] {limits = array<i64: 2, 5, 1, 2, 4>, starts = array<i64: 0, 0, 0, 0, 0>
// CHECK: cpc.reshape %[[Q]] : tensor<2x5x1x2x4xf32> -> tensor<2x5x8xf32>
// CHECK: %[[K:.*]] = cpc.slice %[[T]] {limits = array<i64: 2, 5, 2, 2, 4>, starts = array<i64: 0, 0, 1, 0, 0>
// CHECK: %[[V:.*]] = cpc.slice %[[T]] {limits = array<i64: 2, 5, 3, 2, 4>, starts = array<i64: 0, 0, 2, 0, 0>
// CHECK-NOT: cpc.slice %[[F]]
cpc.variable @c_attn.weight trainable : tensor<8x24xf32>
cpc.variable @c_attn.bias trainable : tensor<24xf32>
func.func @gpt2_split(%x: tensor<10x8xf32>) -> (tensor<2x5x2x4xf32>, tensor<2x5x2x4xf32>, tensor<2x5x2x4xf32>) {
  %w = cpc.parameter @c_attn.weight : tensor<8x24xf32>
  %b = cpc.parameter @c_attn.bias : tensor<24xf32>
  %y = cpc.matmul %x, %w : (tensor<10x8xf32>, tensor<8x24xf32>) -> tensor<10x24xf32>
  %yb = cpc.add %y, %b : (tensor<10x24xf32>, tensor<24xf32>) -> tensor<10x24xf32>
  %f = cpc.reshape %yb : tensor<10x24xf32> -> tensor<2x5x24xf32>
  %q = cpc.slice %f {limits = array<i64: 2, 5, 8>, starts = array<i64: 0, 0, 0>, strides = array<i64: 1, 1, 1>} : tensor<2x5x24xf32> -> tensor<2x5x8xf32>
  %k = cpc.slice %f {limits = array<i64: 2, 5, 16>, starts = array<i64: 0, 0, 8>, strides = array<i64: 1, 1, 1>} : tensor<2x5x24xf32> -> tensor<2x5x8xf32>
  %v = cpc.slice %f {limits = array<i64: 2, 5, 24>, starts = array<i64: 0, 0, 16>, strides = array<i64: 1, 1, 1>} : tensor<2x5x24xf32> -> tensor<2x5x8xf32>
  %qh = cpc.reshape %q : tensor<2x5x8xf32> -> tensor<2x5x2x4xf32>
  %kh = cpc.reshape %k : tensor<2x5x8xf32> -> tensor<2x5x2x4xf32>
  %vh = cpc.reshape %v : tensor<2x5x8xf32> -> tensor<2x5x2x4xf32>
  return %qh, %kh, %vh : tensor<2x5x2x4xf32>, tensor<2x5x2x4xf32>, tensor<2x5x2x4xf32>
}
