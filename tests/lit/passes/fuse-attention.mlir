// RUN: cpc-opt %s --pass-pipeline='builtin.module(func.func(cpc-fuse-attention))' --split-input-file | FileCheck %s

// Tests that scores q k^T, a scale (mul by a scalar constant), softmax over the keys and the
// product with v become one cpc.attention with that scale.
// CHECK-LABEL: func.func @scaled
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x5x8xf32>, %[[K:.*]]: tensor<2x4x7x8xf32>, %[[V:.*]]: tensor<2x4x7x3xf32>)
// CHECK: %[[O:.*]], %{{.*}} = cpc.attention %[[Q]], %[[K]], %[[V]] {scale = 2.500000e-01 : f64} : (tensor<2x4x5x8xf32>, tensor<2x4x7x8xf32>, tensor<2x4x7x3xf32>) -> (tensor<2x4x5x3xf32>, tensor<2x4x5x7xf32>)
// CHECK-NEXT: return %[[O]]
func.func @scaled(%q: tensor<2x4x5x8xf32>, %k: tensor<2x4x7x8xf32>, %v: tensor<2x4x7x3xf32>) -> tensor<2x4x5x3xf32> {
  %c = cpc.constant dense<2.500000e-01> : tensor<f32>
  %s = cpc.matmul %q, %k {transpose_rhs = true} : (tensor<2x4x5x8xf32>, tensor<2x4x7x8xf32>) -> tensor<2x4x5x7xf32>
  %x = cpc.mul %c, %s : (tensor<f32>, tensor<2x4x5x7xf32>) -> tensor<2x4x5x7xf32>
  %p = cpc.softmax %x {axis = 3 : i64} : tensor<2x4x5x7xf32>
  %o = cpc.matmul %p, %v : (tensor<2x4x5x7xf32>, tensor<2x4x7x3xf32>) -> tensor<2x4x5x3xf32>
  return %o : tensor<2x4x5x3xf32>
}

// -----

// Tests that a division by a constant is a scale of its inverse, and that scores without a
// scale have scale 1.
// CHECK-LABEL: func.func @divided_and_unscaled
// CHECK: cpc.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.250000e-01 : f64}
// CHECK: cpc.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.000000e+00 : f64}
// CHECK-NOT: cpc.softmax
func.func @divided_and_unscaled(%q: tensor<3x6x4xf32>, %k: tensor<3x6x4xf32>, %v: tensor<3x6x4xf32>) -> (tensor<3x6x4xf32>, tensor<3x6x4xf32>) {
  %c = cpc.constant dense<8.0> : tensor<1x1x1xf32>
  %s = cpc.matmul %q, %k {transpose_rhs = true} : (tensor<3x6x4xf32>, tensor<3x6x4xf32>) -> tensor<3x6x6xf32>
  %x = cpc.div %s, %c : (tensor<3x6x6xf32>, tensor<1x1x1xf32>) -> tensor<3x6x6xf32>
  %p = cpc.softmax %x {axis = 2 : i64} : tensor<3x6x6xf32>
  %o = cpc.matmul %p, %v : (tensor<3x6x6xf32>, tensor<3x6x4xf32>) -> tensor<3x6x4xf32>
  %s2 = cpc.matmul %q, %k {transpose_rhs = true} : (tensor<3x6x4xf32>, tensor<3x6x4xf32>) -> tensor<3x6x6xf32>
  %p2 = cpc.softmax %s2 {axis = 2 : i64} : tensor<3x6x6xf32>
  %o2 = cpc.matmul %p2, %v : (tensor<3x6x6xf32>, tensor<3x6x4xf32>) -> tensor<3x6x4xf32>
  return %o, %o2 : tensor<3x6x4xf32>, tensor<3x6x4xf32>
}

// -----

// Tests that the pattern stays when the probabilities have another use (a graph that returns
// its attention maps), so nothing is computed twice.
// CHECK-LABEL: func.func @probabilities_returned
// CHECK-NOT: cpc.attention
// CHECK: cpc.softmax
func.func @probabilities_returned(%q: tensor<2x5x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> (tensor<2x5x4xf32>, tensor<2x5x5xf32>) {
  %s = cpc.matmul %q, %k {transpose_rhs = true} : (tensor<2x5x4xf32>, tensor<2x5x4xf32>) -> tensor<2x5x5xf32>
  %p = cpc.softmax %s {axis = 2 : i64} : tensor<2x5x5xf32>
  %o = cpc.matmul %p, %v : (tensor<2x5x5xf32>, tensor<2x5x4xf32>) -> tensor<2x5x4xf32>
  return %o, %p : tensor<2x5x4xf32>, tensor<2x5x5xf32>
}

// -----

// Tests the shapes that are not attention: softmax over the queries, a scale that is not a
// scalar constant (a mask or bias added), k not transposed, batch dims that broadcast.
// CHECK-LABEL: func.func @not_attention
// CHECK-NOT: cpc.attention
// CHECK: return
func.func @not_attention(%q: tensor<2x5x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>, %m: tensor<2x5x5xf32>,
                         %kt: tensor<2x4x5xf32>, %kb: tensor<1x5x4xf32>)
    -> (tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x5x4xf32>) {
  %s = cpc.matmul %q, %k {transpose_rhs = true} : (tensor<2x5x4xf32>, tensor<2x5x4xf32>) -> tensor<2x5x5xf32>
  %p = cpc.softmax %s {axis = 1 : i64} : tensor<2x5x5xf32>
  %o = cpc.matmul %p, %v : (tensor<2x5x5xf32>, tensor<2x5x4xf32>) -> tensor<2x5x4xf32>
  %s1 = cpc.matmul %q, %k {transpose_rhs = true} : (tensor<2x5x4xf32>, tensor<2x5x4xf32>) -> tensor<2x5x5xf32>
  %x1 = cpc.add %s1, %m : (tensor<2x5x5xf32>, tensor<2x5x5xf32>) -> tensor<2x5x5xf32>
  %p1 = cpc.softmax %x1 {axis = 2 : i64} : tensor<2x5x5xf32>
  %o1 = cpc.matmul %p1, %v : (tensor<2x5x5xf32>, tensor<2x5x4xf32>) -> tensor<2x5x4xf32>
  %s2 = cpc.matmul %q, %kt : (tensor<2x5x4xf32>, tensor<2x4x5xf32>) -> tensor<2x5x5xf32>
  %p2 = cpc.softmax %s2 {axis = 2 : i64} : tensor<2x5x5xf32>
  %o2 = cpc.matmul %p2, %v : (tensor<2x5x5xf32>, tensor<2x5x4xf32>) -> tensor<2x5x4xf32>
  %s3 = cpc.matmul %q, %kb {transpose_rhs = true} : (tensor<2x5x4xf32>, tensor<1x5x4xf32>) -> tensor<2x5x5xf32>
  %p3 = cpc.softmax %s3 {axis = 2 : i64} : tensor<2x5x5xf32>
  %o3 = cpc.matmul %p3, %v : (tensor<2x5x5xf32>, tensor<2x5x4xf32>) -> tensor<2x5x4xf32>
  return %o, %o1, %o2, %o3 : tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x5x4xf32>, tensor<2x5x4xf32>
}

// -----

// Tests that a scale that is not finite (a division by zero) keeps the ops.
// CHECK-LABEL: func.func @infinite_scale
// CHECK-NOT: cpc.attention
// CHECK: cpc.softmax
func.func @infinite_scale(%q: tensor<2x5x4xf32>, %k: tensor<2x5x4xf32>, %v: tensor<2x5x4xf32>) -> tensor<2x5x4xf32> {
  %c = cpc.constant dense<0.0> : tensor<f32>
  %s = cpc.matmul %q, %k {transpose_rhs = true} : (tensor<2x5x4xf32>, tensor<2x5x4xf32>) -> tensor<2x5x5xf32>
  %x = cpc.div %s, %c : (tensor<2x5x5xf32>, tensor<f32>) -> tensor<2x5x5xf32>
  %p = cpc.softmax %x {axis = 2 : i64} : tensor<2x5x5xf32>
  %o = cpc.matmul %p, %v : (tensor<2x5x5xf32>, tensor<2x5x4xf32>) -> tensor<2x5x4xf32>
  return %o : tensor<2x5x4xf32>
}

// -----

// Tests that q, k and v transposed from [B, N, H, D] with the result transposed back become a
// token-major attention (layout "bnhd") on the untransposed operands: no transpose is left.
// CHECK-LABEL: func.func @token_major
// CHECK-SAME: (%[[Q:.*]]: tensor<2x5x4x8xf32>, %[[K:.*]]: tensor<2x7x4x8xf32>, %[[V:.*]]: tensor<2x7x4x3xf32>)
// CHECK-NOT: cpc.transpose
// CHECK: %[[O:.*]], %{{.*}} = cpc.attention %[[Q]], %[[K]], %[[V]] {layout = #cpc.attention_layout<bnhd>, scale = 2.500000e-01 : f64} : (tensor<2x5x4x8xf32>, tensor<2x7x4x8xf32>, tensor<2x7x4x3xf32>) -> (tensor<2x5x4x3xf32>, tensor<2x4x5x7xf32>)
// CHECK-NOT: cpc.transpose
// CHECK: return %[[O]]
func.func @token_major(%q: tensor<2x5x4x8xf32>, %k: tensor<2x7x4x8xf32>, %v: tensor<2x7x4x3xf32>) -> tensor<2x5x4x3xf32> {
  %c = cpc.constant dense<2.500000e-01> : tensor<f32>
  %qh = cpc.transpose %q {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x5x4x8xf32> -> tensor<2x4x5x8xf32>
  %kh = cpc.transpose %k {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x7x4x8xf32> -> tensor<2x4x7x8xf32>
  %vh = cpc.transpose %v {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x7x4x3xf32> -> tensor<2x4x7x3xf32>
  %s = cpc.matmul %qh, %kh {transpose_rhs = true} : (tensor<2x4x5x8xf32>, tensor<2x4x7x8xf32>) -> tensor<2x4x5x7xf32>
  %x = cpc.mul %s, %c : (tensor<2x4x5x7xf32>, tensor<f32>) -> tensor<2x4x5x7xf32>
  %p = cpc.softmax %x {axis = 3 : i64} : tensor<2x4x5x7xf32>
  %o = cpc.matmul %p, %vh : (tensor<2x4x5x7xf32>, tensor<2x4x7x3xf32>) -> tensor<2x4x5x3xf32>
  %t = cpc.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x5x3xf32> -> tensor<2x5x4x3xf32>
  return %t : tensor<2x5x4x3xf32>
}

// -----

// Tests the fused qkv projection of a ViT (timm's Attention, MAE's blocks): reshape to
// [B, N, 3, H, D], one transpose to [3, B, H, N, D] and scalar gathers of q, k and v become
// gathers of dim 2 of the reshaped projection, read token-major by the attention: neither the
// transpose of the projection nor that of the result is left.
// CHECK-LABEL: func.func @fused_qkv
// CHECK-SAME: (%[[QKV:.*]]: tensor<2x5x24xf32>)
// CHECK-NOT: cpc.transpose
// CHECK: %[[R:.*]] = cpc.reshape %[[QKV]] : tensor<2x5x24xf32> -> tensor<2x5x3x2x4xf32>
// CHECK-DAG: %[[Q:.*]] = cpc.gather %[[R]], %{{.*}} {axis = 2 : i64} : (tensor<2x5x3x2x4xf32>, tensor<i64>) -> tensor<2x5x2x4xf32>
// CHECK-DAG: %[[K:.*]] = cpc.gather %[[R]], %{{.*}} {axis = 2 : i64} : (tensor<2x5x3x2x4xf32>, tensor<i64>) -> tensor<2x5x2x4xf32>
// CHECK-DAG: %[[V:.*]] = cpc.gather %[[R]], %{{.*}} {axis = 2 : i64} : (tensor<2x5x3x2x4xf32>, tensor<i64>) -> tensor<2x5x2x4xf32>
// CHECK: %[[O:.*]], %{{.*}} = cpc.attention %[[Q]], %[[K]], %[[V]] {layout = #cpc.attention_layout<bnhd>, scale = 5.000000e-01 : f64}
// CHECK-NEXT: %[[M:.*]] = cpc.reshape %[[O]] : tensor<2x5x2x4xf32> -> tensor<2x5x8xf32>
// CHECK-NEXT: return %[[M]]
func.func @fused_qkv(%qkv: tensor<2x5x24xf32>) -> tensor<2x5x8xf32> {
  %c = cpc.constant dense<5.000000e-01> : tensor<f32>
  %i0 = cpc.constant dense<0> : tensor<i64>
  %i1 = cpc.constant dense<1> : tensor<i64>
  %i2 = cpc.constant dense<2> : tensor<i64>
  %r = cpc.reshape %qkv : tensor<2x5x24xf32> -> tensor<2x5x3x2x4xf32>
  %t = cpc.transpose %r {permutation = array<i64: 2, 0, 3, 1, 4>} : tensor<2x5x3x2x4xf32> -> tensor<3x2x2x5x4xf32>
  %q = cpc.gather %t, %i0 {axis = 0 : i64} : (tensor<3x2x2x5x4xf32>, tensor<i64>) -> tensor<2x2x5x4xf32>
  %k = cpc.gather %t, %i1 {axis = 0 : i64} : (tensor<3x2x2x5x4xf32>, tensor<i64>) -> tensor<2x2x5x4xf32>
  %v = cpc.gather %t, %i2 {axis = 0 : i64} : (tensor<3x2x2x5x4xf32>, tensor<i64>) -> tensor<2x2x5x4xf32>
  %s = cpc.matmul %q, %k {transpose_rhs = true} : (tensor<2x2x5x4xf32>, tensor<2x2x5x4xf32>) -> tensor<2x2x5x5xf32>
  %x = cpc.mul %s, %c : (tensor<2x2x5x5xf32>, tensor<f32>) -> tensor<2x2x5x5xf32>
  %p = cpc.softmax %x {axis = 3 : i64} : tensor<2x2x5x5xf32>
  %o = cpc.matmul %p, %v : (tensor<2x2x5x5xf32>, tensor<2x2x5x4xf32>) -> tensor<2x2x5x4xf32>
  %ot = cpc.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x2x5x4xf32> -> tensor<2x5x2x4xf32>
  %m = cpc.reshape %ot : tensor<2x5x2x4xf32> -> tensor<2x5x8xf32>
  return %m : tensor<2x5x8xf32>
}

// -----

// Tests that the head-major layout stays when the result has another reader than the transpose
// back, or when an operand is not a head transpose (here k is another permutation).
// CHECK-LABEL: func.func @stays_head_major
// CHECK: cpc.attention
// CHECK-NOT: layout
// CHECK-SAME: -> (tensor<2x4x5x8xf32>, tensor<2x4x5x5xf32>)
// CHECK: cpc.attention
// CHECK-NOT: layout
// CHECK-SAME: -> (tensor<2x4x5x8xf32>, tensor<2x4x5x5xf32>)
// CHECK: return
func.func @stays_head_major(%a: tensor<2x5x4x8xf32>, %b: tensor<4x5x2x8xf32>) -> (tensor<2x5x4x8xf32>, tensor<2x4x5x8xf32>, tensor<2x5x4x8xf32>) {
  %ah = cpc.transpose %a {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x5x4x8xf32> -> tensor<2x4x5x8xf32>
  %s = cpc.matmul %ah, %ah {transpose_rhs = true} : (tensor<2x4x5x8xf32>, tensor<2x4x5x8xf32>) -> tensor<2x4x5x5xf32>
  %p = cpc.softmax %s {axis = 3 : i64} : tensor<2x4x5x5xf32>
  %o = cpc.matmul %p, %ah : (tensor<2x4x5x5xf32>, tensor<2x4x5x8xf32>) -> tensor<2x4x5x8xf32>
  %t = cpc.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x5x8xf32> -> tensor<2x5x4x8xf32>
  %bh = cpc.transpose %b {permutation = array<i64: 2, 0, 1, 3>} : tensor<4x5x2x8xf32> -> tensor<2x4x5x8xf32>
  %s2 = cpc.matmul %ah, %bh {transpose_rhs = true} : (tensor<2x4x5x8xf32>, tensor<2x4x5x8xf32>) -> tensor<2x4x5x5xf32>
  %p2 = cpc.softmax %s2 {axis = 3 : i64} : tensor<2x4x5x5xf32>
  %o2 = cpc.matmul %p2, %ah : (tensor<2x4x5x5xf32>, tensor<2x4x5x8xf32>) -> tensor<2x4x5x8xf32>
  %t2 = cpc.transpose %o2 {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x5x8xf32> -> tensor<2x5x4x8xf32>
  return %t, %o, %t2 : tensor<2x5x4x8xf32>, tensor<2x4x5x8xf32>, tensor<2x5x4x8xf32>
}

// -----

// Tests self-attention on one transposed value (q, k and v the same transpose): it folds, and
// the shared transpose is erased once.
// CHECK-LABEL: func.func @shared_operands
// CHECK-SAME: (%[[X:.*]]: tensor<2x5x4x8xf32>)
// CHECK-NEXT: %[[O:.*]], %{{.*}} = cpc.attention %[[X]], %[[X]], %[[X]] {layout = #cpc.attention_layout<bnhd>, scale = 1.000000e+00 : f64}
// CHECK-NEXT: return %[[O]]
func.func @shared_operands(%x: tensor<2x5x4x8xf32>) -> tensor<2x5x4x8xf32> {
  %h = cpc.transpose %x {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x5x4x8xf32> -> tensor<2x4x5x8xf32>
  %s = cpc.matmul %h, %h {transpose_rhs = true} : (tensor<2x4x5x8xf32>, tensor<2x4x5x8xf32>) -> tensor<2x4x5x5xf32>
  %p = cpc.softmax %s {axis = 3 : i64} : tensor<2x4x5x5xf32>
  %o = cpc.matmul %p, %h : (tensor<2x4x5x5xf32>, tensor<2x4x5x8xf32>) -> tensor<2x4x5x8xf32>
  %t = cpc.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x5x8xf32> -> tensor<2x5x4x8xf32>
  return %t : tensor<2x5x4x8xf32>
}
