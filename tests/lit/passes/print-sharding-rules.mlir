// RUN: cpc-opt %s --cpc-print-sharding-rules | FileCheck %s

// Tests each op's factor rule (ShardingRuleOpInterface) in Shardy's notation: dims as factor
// lists (a dim of several factors printed together, major first), sizes, and the kinds that
// are not pass-through.
// CHECK-LABEL: func.func @rules
// A matmul with a transposed weight: batch, rows and columns pass through, K is reduced.
// CHECK: cpc.matmul {{.*}}cpc.sharding_rule = "([i, j, l], [k, l]) -> ([i, j, k]) {i=2, j=4, k=24, l=8} reduction={l}"
// The fused qkv reshape [B, N, 3D] -> [B, N, 3, H, Dh]: the input's last dim is 3, H, Dh.
// CHECK: cpc.reshape {{.*}}cpc.sharding_rule = "([i, j, klm]) -> ([i, j, k, l, m]) {i=2, j=4, k=3, l=2, m=4}"
// [6, 4] -> [4, 6]: only the common major factor 2 may split; the coprime rests stay whole.
// CHECK: cpc.reshape {{.*}}cpc.sharding_rule = "([ij, l]) -> ([ik, m]) {i=2, j=3, k=2, l=4, m=6} need_replication={j, k, l, m}"
// A max over a dim reduces it with max; a min (no min collective) keeps it whole.
// CHECK: cpc.reduce_max {{.*}}cpc.sharding_rule = "([i, j, k]) -> ([i, k]) {i=2, j=4, k=8} reduction={j(max)}"
// CHECK: cpc.reduce_min {{.*}}cpc.sharding_rule = "([i, j, k]) -> ([i, k]) {i=2, j=4, k=8} need_replication={j}"
// CHECK: cpc.softmax {{.*}}cpc.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8} need_replication={k}"
// A broadcast operand joins the factors of the dims it aligns with.
// CHECK: cpc.add {{.*}}cpc.sharding_rule = "([i, j, k], [k]) -> ([i, j, k]) {i=2, j=4, k=8}"
// A sliced dim and a concat axis would move data between ranks: permutations.
// CHECK: cpc.slice {{.*}}cpc.sharding_rule = "([i, k, j]) -> ([i, l, j]) {i=2, j=8, k=4, l=2} permutation={k, l}"
// CHECK: cpc.concat {{.*}}cpc.sharding_rule = "([i, k, j], [i, l, j]) -> ([i, m, j]) {i=2, j=8, k=4, l=4, m=8} permutation={k, l, m}"
// CHECK: cpc.layer_norm {{.*}}cpc.sharding_rule = "([i, j, k], [l], [m]) -> ([i, j, n]) {i=2, j=4, k=8, l=8, m=8, n=8} need_replication={k, l, m, n}"
// CHECK: cpc.transpose {{.*}}cpc.sharding_rule = "([i, k, j]) -> ([i, j, k]) {i=2, j=8, k=4}"
cpc.variable @tok.weight trainable : tensor<16x8xf32>
func.func @rules(%x: tensor<2x4x8xf32>, %w: tensor<24x8xf32>, %b: tensor<8xf32>, %m: tensor<6x4xf32>, %s: tensor<4x6xf32>) -> (tensor<2x4x3x2x4xf32>, tensor<4x6xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x2x8xf32>, tensor<2x8x8xf32>, tensor<2x4x8xf32>, tensor<2x8x4xf32>) {
  %qkv = cpc.matmul %x, %w {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<24x8xf32>) -> tensor<2x4x24xf32>
  %heads = cpc.reshape %qkv : tensor<2x4x24xf32> -> tensor<2x4x3x2x4xf32>
  %r = cpc.reshape %m : tensor<6x4xf32> -> tensor<4x6xf32>
  %mx = cpc.reduce_max %x {axes = array<i64: 1>} : tensor<2x4x8xf32> -> tensor<2x8xf32>
  %mn = cpc.reduce_min %x {axes = array<i64: 1>} : tensor<2x4x8xf32> -> tensor<2x8xf32>
  %sm = cpc.softmax %x {axis = 2 : i64} : tensor<2x4x8xf32>
  %a = cpc.add %x, %b : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %sl = cpc.slice %x {starts = array<i64: 0, 1, 0>, limits = array<i64: 2, 3, 8>, strides = array<i64: 1, 1, 1>} : tensor<2x4x8xf32> -> tensor<2x2x8xf32>
  %c = cpc.concat %x, %x {axis = 1 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x8x8xf32>
  %ln = cpc.layer_norm %x, %b, %b {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %t = cpc.transpose %x {permutation = array<i64: 0, 2, 1>} : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
  return %heads, %r, %mx, %mn, %sm, %a, %sl, %c, %ln, %t : tensor<2x4x3x2x4xf32>, tensor<4x6xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x2x8xf32>, tensor<2x8x8xf32>, tensor<2x4x8xf32>, tensor<2x8x4xf32>
}

// Tests the gathers' indexed dim: a stored table's rows (vocab parallelism) and a cross-entropy's
// classes (the picked logits are under half the data) may stay split, each rank gathering from
// its block: a reduction, the results partial sums; the indices' dims pass through (a batch
// split of the token ids splits the lookups; in the gradient, the scatters are partial sums).
// An activation whose gather keeps most of it needs the dim whole.
// CHECK-LABEL: func.func @gathers
// CHECK: cpc.gather {{.*}}cpc.sharding_rule = "([i, l], [j, k]) -> ([j, k, l]) {i=16, j=2, k=4, l=8} reduction={i}"
// CHECK: cpc.gather_elements {{.*}}cpc.sharding_rule = "([i, j], [i, ]) -> ([i, ]) {i=8, j=16} reduction={j}"
// CHECK: cpc.gather_grad {{.*}}cpc.sharding_rule = "([j, k, l], [j, k]) -> ([i, l]) {i=16, j=2, k=4, l=8} reduction={j, k}"
// CHECK: cpc.gather_elements {{.*}}cpc.sharding_rule = "([i, k, j], [i, l, j]) -> ([i, m, j]) {i=2, j=8, k=4, l=3, m=3} need_replication={k, l, m}"
func.func @gathers(%ids: tensor<2x4xi64>, %tgt: tensor<8x1xi64>, %logits: tensor<8x16xf32>, %g: tensor<2x4x8xf32>, %act: tensor<2x4x8xf32>, %pos: tensor<2x3x8xi64>) -> (tensor<2x4x8xf32>, tensor<8x1xf32>, tensor<16x8xf32>, tensor<2x3x8xf32>) {
  %t = cpc.parameter @tok.weight : tensor<16x8xf32>
  %e = cpc.gather %t, %ids {axis = 0 : i64} : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %p = cpc.gather_elements %logits, %tgt {axis = 1 : i64} : (tensor<8x16xf32>, tensor<8x1xi64>) -> tensor<8x1xf32>
  %dt = cpc.gather_grad %g, %ids {axis = 0 : i64, dim_size = 16 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<16x8xf32>
  %k = cpc.gather_elements %act, %pos {axis = 1 : i64} : (tensor<2x4x8xf32>, tensor<2x3x8xi64>) -> tensor<2x3x8xf32>
  return %e, %p, %dt, %k : tensor<2x4x8xf32>, tensor<8x1xf32>, tensor<16x8xf32>, tensor<2x3x8xf32>
}

// Tests attention's rule and its gradient's: the batch and head dims pass through every operand
// and result; queries, keys and head dims stay whole.
// CHECK-LABEL: func.func @attention
// CHECK: cpc.attention {{.*}}cpc.sharding_rule = "([i, j, k, l], [i, j, m, n], [i, j, o, p]) -> ([i, j, q, r], [i, j, s, t]) {i=2, j=4, k=5, l=8, m=7, n=8, o=7, p=3, q=5, r=3, s=5, t=7} need_replication={k, l, m, n, o, p, q, r, s, t}"
// CHECK: cpc.attention_grad {{.*}}cpc.sharding_rule = "([i, j, k, l], [i, j, m, n], [i, j, o, p], [i, j, q, r], [i, j, s, t]) -> ([i, j, u, v], [i, j, w, x], [i, j, y, z]) {i=2, j=4, k=5, l=8, m=7, n=8, o=7, p=3, q=5, r=7, s=5, t=3, u=5, v=8, w=7, x=8, y=7, z=3} need_replication={k, l, m, n, o, p, q, r, s, t, u, v, w, x, y, z}"
func.func @attention(%q: tensor<2x4x5x8xf32>, %k: tensor<2x4x7x8xf32>, %v: tensor<2x4x7x3xf32>, %g: tensor<2x4x5x3xf32>)
    -> (tensor<2x4x5x8xf32>, tensor<2x4x7x8xf32>, tensor<2x4x7x3xf32>) {
  %o, %p = cpc.attention %q, %k, %v {scale = 0.25 : f64} : (tensor<2x4x5x8xf32>, tensor<2x4x7x8xf32>, tensor<2x4x7x3xf32>) -> (tensor<2x4x5x3xf32>, tensor<2x4x5x7xf32>)
  %dq, %dk, %dv = cpc.attention_grad %q, %k, %v, %p, %g {scale = 0.25 : f64} : (tensor<2x4x5x8xf32>, tensor<2x4x7x8xf32>, tensor<2x4x7x3xf32>, tensor<2x4x5x7xf32>, tensor<2x4x5x3xf32>) -> (tensor<2x4x5x8xf32>, tensor<2x4x7x8xf32>, tensor<2x4x7x3xf32>)
  return %dq, %dk, %dv : tensor<2x4x5x8xf32>, tensor<2x4x7x8xf32>, tensor<2x4x7x3xf32>
}

// Tests the token-major rule (layout "bnhd"): the heads factor j sits at dim 2 of q, k, v, the
// result and the gradients, and at dim 1 of the probabilities [B, H, N, M].
// CHECK-LABEL: func.func @attention_token_major
// CHECK: cpc.attention {{.*}}cpc.sharding_rule = "([i, k, j, l], [i, m, j, n], [i, o, j, p]) -> ([i, q, j, r], [i, j, s, t]) {i=2, j=4, k=5, l=8, m=7, n=8, o=7, p=3, q=5, r=3, s=5, t=7} need_replication={k, l, m, n, o, p, q, r, s, t}"
// CHECK: cpc.attention_grad {{.*}}cpc.sharding_rule = "([i, k, j, l], [i, m, j, n], [i, o, j, p], [i, j, q, r], [i, s, j, t]) -> ([i, u, j, v], [i, w, j, x], [i, y, j, z]) {i=2, j=4, k=5, l=8, m=7, n=8, o=7, p=3, q=5, r=7, s=5, t=3, u=5, v=8, w=7, x=8, y=7, z=3} need_replication={k, l, m, n, o, p, q, r, s, t, u, v, w, x, y, z}"
func.func @attention_token_major(%q: tensor<2x5x4x8xf32>, %k: tensor<2x7x4x8xf32>, %v: tensor<2x7x4x3xf32>, %g: tensor<2x5x4x3xf32>)
    -> tensor<2x5x4x8xf32> {
  %o, %p = cpc.attention %q, %k, %v {layout = #cpc.attention_layout<bnhd>, scale = 0.25 : f64} : (tensor<2x5x4x8xf32>, tensor<2x7x4x8xf32>, tensor<2x7x4x3xf32>) -> (tensor<2x5x4x3xf32>, tensor<2x4x5x7xf32>)
  %dq, %dk, %dv = cpc.attention_grad %q, %k, %v, %p, %g {layout = #cpc.attention_layout<bnhd>, scale = 0.25 : f64} : (tensor<2x5x4x8xf32>, tensor<2x7x4x8xf32>, tensor<2x7x4x3xf32>, tensor<2x4x5x7xf32>, tensor<2x5x4x3xf32>) -> (tensor<2x5x4x8xf32>, tensor<2x7x4x8xf32>, tensor<2x7x4x3xf32>)
  return %dq : tensor<2x5x4x8xf32>
}
