// RUN: cpc-opt %s -split-input-file -verify-diagnostics --cpc-propagate-sharding | FileCheck %s

// The cases follow the ops of MAE's training step (forward, backward, optimizer). Inputs carry
// seeds only; every other `cpc.shardings` below comes from propagation. Types stay global.

// Tests that a batch split spreads through the patch embedding: conv2d (batch factor), a
// reshape merging trailing dims, a transpose and the add of a whole positional parameter, while
// the parameters themselves stay whole.
// CHECK-LABEL: func.func @patch_embed
// CHECK-SAME: %[[IMGS:[^:]*]]: tensor<4x3x8x8xf32> {cpc.sharding = #cpc.sharding<@mesh, {{\[\[}}"dp"], [], [], []]>}
// CHECK: cpc.parameter @w : tensor<6x3x4x4xf32>{{$}}
// CHECK: cpc.parameter @b : tensor<6xf32>{{$}}
// CHECK: %[[POS:.*]] = cpc.parameter @pos : tensor<1x4x6xf32>{{$}}
// CHECK: %[[C:.*]] = cpc.conv2d %[[IMGS]], {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], [], []]>]{{.*}} -> tensor<4x6x2x2xf32>
// CHECK: %[[R:.*]] = cpc.reshape %[[C]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>]} : tensor<4x6x2x2xf32> -> tensor<4x6x4xf32>
// CHECK: %[[T:.*]] = cpc.transpose %[[R]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>]{{.*}} -> tensor<4x4x6xf32>
// CHECK: cpc.add %[[T]], %[[POS]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>]}
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @w trainable : tensor<6x3x4x4xf32>
cpc.variable @b trainable : tensor<6xf32>
cpc.variable @pos : tensor<1x4x6xf32>
func.func @patch_embed(%imgs: tensor<4x3x8x8xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], [], []]>}) -> tensor<4x4x6xf32> {
  %w = cpc.parameter @w : tensor<6x3x4x4xf32>
  %b = cpc.parameter @b : tensor<6xf32>
  %pos = cpc.parameter @pos : tensor<1x4x6xf32>
  %c = cpc.conv2d %imgs, %w, %b {strides = array<i64: 4, 4>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<4x3x8x8xf32>, tensor<6x3x4x4xf32>, tensor<6xf32>) -> tensor<4x6x2x2xf32>
  %r = cpc.reshape %c : tensor<4x6x2x2xf32> -> tensor<4x6x4xf32>
  %t = cpc.transpose %r {permutation = array<i64: 0, 2, 1>} : tensor<4x6x4xf32> -> tensor<4x4x6xf32>
  %a = cpc.add %t, %pos : (tensor<4x4x6xf32>, tensor<1x4x6xf32>) -> tensor<4x4x6xf32>
  return %a : tensor<4x4x6xf32>
}

// -----

// Tests that MAE's random masking splits along the batch: both topk results, a slice over the
// whole batch, the index reshapes of torch's Tile that move the batch to dim 1 and back, the
// broadcast of the indices and of the whole cls token, gather_elements and concat.
// CHECK-LABEL: func.func @masking
// CHECK: %{{.*}}, %[[SHUFFLE:.*]] = cpc.topk %{{.*}} {axis = 1 : i64, cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>, #cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]
// CHECK: cpc.topk %[[SHUFFLE]] {axis = 1 : i64, cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>, #cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]
// CHECK: cpc.slice %[[SHUFFLE]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]{{.*}} -> tensor<4x2xi64>
// CHECK: cpc.reshape {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>{{.*}} -> tensor<4x2x1xi64>
// CHECK: cpc.reshape {{.*}}#cpc.sharding<@mesh, {{\[\[}}], ["dp"], [], [], [], []]>{{.*}} -> tensor<1x4x1x2x1x1xi64>
// CHECK: cpc.broadcast {{.*}}#cpc.sharding<@mesh, {{\[\[}}], ["dp"], [], [], [], []]>{{.*}} -> tensor<1x4x1x2x6x1xi64>
// CHECK: cpc.reshape {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>{{.*}} -> tensor<4x2x6xi64>
// CHECK: cpc.gather_elements {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>{{.*}} -> tensor<4x2x6xf32>
// CHECK: cpc.broadcast {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>{{.*}} : tensor<1x1x6xf32> -> tensor<4x1x6xf32>
// CHECK: cpc.concat {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>{{.*}} -> tensor<4x3x6xf32>
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @cls trainable : tensor<1x1x6xf32>
func.func @masking(%x: tensor<4x8x6xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], []]>}, %noise: tensor<4x8xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], []]>}) -> (tensor<4x3x6xf32>, tensor<4x8xi64>) {
  %cls = cpc.parameter @cls : tensor<1x1x6xf32>
  %sorted, %shuffle = cpc.topk %noise {axis = 1 : i64, k = 8 : i64, largest = false} : tensor<4x8xf32> -> tensor<4x8xf32>, tensor<4x8xi64>
  %unused, %restore = cpc.topk %shuffle {axis = 1 : i64, k = 8 : i64, largest = false} : tensor<4x8xi64> -> tensor<4x8xi64>, tensor<4x8xi64>
  %keep = cpc.slice %shuffle {starts = array<i64: 0, 0>, limits = array<i64: 4, 2>, strides = array<i64: 1, 1>} : tensor<4x8xi64> -> tensor<4x2xi64>
  %k3 = cpc.reshape %keep : tensor<4x2xi64> -> tensor<4x2x1xi64>
  %k6 = cpc.reshape %k3 : tensor<4x2x1xi64> -> tensor<1x4x1x2x1x1xi64>
  %tiled = cpc.broadcast %k6 : tensor<1x4x1x2x1x1xi64> -> tensor<1x4x1x2x6x1xi64>
  %idx = cpc.reshape %tiled : tensor<1x4x1x2x6x1xi64> -> tensor<4x2x6xi64>
  %kept = cpc.gather_elements %x, %idx {axis = 1 : i64} : (tensor<4x8x6xf32>, tensor<4x2x6xi64>) -> tensor<4x2x6xf32>
  %clsb = cpc.broadcast %cls : tensor<1x1x6xf32> -> tensor<4x1x6xf32>
  %tokens = cpc.concat %clsb, %kept {axis = 1 : i64} : (tensor<4x1x6xf32>, tensor<4x2x6xf32>) -> tensor<4x3x6xf32>
  return %tokens, %restore : tensor<4x3x6xf32>, tensor<4x8xi64>
}

// -----

// Tests that a transformer block splits along the batch: layer_norm, the qkv matmul with a
// transposed whole weight, the head reshape and the transpose that moves the batch to dim 1,
// gather of q/k/v along dim 0 (the batch back at dim 0), batched matmuls, the scaling mul by a
// whole scalar constant (which stays whole), softmax over the last dim and gelu.
// CHECK-LABEL: func.func @block
// CHECK: cpc.constant dense<5.000000e-01> : tensor<f32>{{$}}
// CHECK: cpc.layer_norm {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>]{{.*}} -> tensor<4x3x8xf32>
// CHECK: cpc.matmul {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>], transpose_rhs = true} : (tensor<4x3x8xf32>, tensor<24x8xf32>)
// CHECK: cpc.reshape {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], [], [], [], []]>{{.*}} -> tensor<4x3x3x2x4xf32>
// CHECK: %[[T:.*]] = cpc.transpose {{.*}}#cpc.sharding<@mesh, {{\[\[}}], ["dp"], [], [], []]>{{.*}} -> tensor<3x4x2x3x4xf32>
// CHECK-COUNT-3: cpc.gather %[[T]], %{{.*}} {axis = 0 : i64, cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], [], []]>]}
// CHECK: cpc.matmul {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], [], [], []]>{{.*}} -> tensor<4x2x3x3xf32>
// CHECK: cpc.mul {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], [], [], []]>{{.*}} : (tensor<4x2x3x3xf32>, tensor<f32>)
// CHECK: cpc.softmax {{.*}}{axis = 3 : i64, cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], [], []]>]}
// CHECK: cpc.matmul {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], [], [], []]>{{.*}} -> tensor<4x2x3x4xf32>
// CHECK: cpc.transpose {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], [], [], []]>{{.*}} -> tensor<4x3x2x4xf32>
// CHECK: cpc.reshape {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>{{.*}} -> tensor<4x3x8xf32>
// CHECK: cpc.matmul {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>{{.*}} -> tensor<4x3x16xf32>
// CHECK: cpc.gelu {{.*}}{cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>]} : tensor<4x3x16xf32>
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @norm.weight trainable : tensor<8xf32>
cpc.variable @norm.bias trainable : tensor<8xf32>
cpc.variable @qkv.weight trainable : tensor<24x8xf32>
cpc.variable @fc1.weight trainable : tensor<16x8xf32>
cpc.variable @fc2.weight trainable : tensor<8x16xf32>
func.func @block(%x: tensor<4x3x8xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], []]>}) -> tensor<4x3x8xf32> {
  %s = cpc.parameter @norm.weight : tensor<8xf32>
  %b = cpc.parameter @norm.bias : tensor<8xf32>
  %wqkv = cpc.parameter @qkv.weight : tensor<24x8xf32>
  %w1 = cpc.parameter @fc1.weight : tensor<16x8xf32>
  %w2 = cpc.parameter @fc2.weight : tensor<8x16xf32>
  %scale = cpc.constant dense<0.5> : tensor<f32>
  %i0 = cpc.constant dense<0> : tensor<i64>
  %i1 = cpc.constant dense<1> : tensor<i64>
  %i2 = cpc.constant dense<2> : tensor<i64>
  %n = cpc.layer_norm %x, %s, %b {axis = 2 : i64, epsilon = 1.0e-6 : f64} : (tensor<4x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x3x8xf32>
  %qkv = cpc.matmul %n, %wqkv {transpose_rhs = true} : (tensor<4x3x8xf32>, tensor<24x8xf32>) -> tensor<4x3x24xf32>
  %r = cpc.reshape %qkv : tensor<4x3x24xf32> -> tensor<4x3x3x2x4xf32>
  %t = cpc.transpose %r {permutation = array<i64: 2, 0, 3, 1, 4>} : tensor<4x3x3x2x4xf32> -> tensor<3x4x2x3x4xf32>
  %q = cpc.gather %t, %i0 {axis = 0 : i64} : (tensor<3x4x2x3x4xf32>, tensor<i64>) -> tensor<4x2x3x4xf32>
  %k = cpc.gather %t, %i1 {axis = 0 : i64} : (tensor<3x4x2x3x4xf32>, tensor<i64>) -> tensor<4x2x3x4xf32>
  %v = cpc.gather %t, %i2 {axis = 0 : i64} : (tensor<3x4x2x3x4xf32>, tensor<i64>) -> tensor<4x2x3x4xf32>
  %qk = cpc.matmul %q, %k {transpose_rhs = true} : (tensor<4x2x3x4xf32>, tensor<4x2x3x4xf32>) -> tensor<4x2x3x3xf32>
  %qks = cpc.mul %qk, %scale : (tensor<4x2x3x3xf32>, tensor<f32>) -> tensor<4x2x3x3xf32>
  %p = cpc.softmax %qks {axis = 3 : i64} : tensor<4x2x3x3xf32>
  %o = cpc.matmul %p, %v : (tensor<4x2x3x3xf32>, tensor<4x2x3x4xf32>) -> tensor<4x2x3x4xf32>
  %ot = cpc.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : tensor<4x2x3x4xf32> -> tensor<4x3x2x4xf32>
  %attn = cpc.reshape %ot : tensor<4x3x2x4xf32> -> tensor<4x3x8xf32>
  %h = cpc.matmul %attn, %w1 {transpose_rhs = true} : (tensor<4x3x8xf32>, tensor<16x8xf32>) -> tensor<4x3x16xf32>
  %g = cpc.gelu %h : tensor<4x3x16xf32>
  %y = cpc.matmul %g, %w2 {transpose_rhs = true} : (tensor<4x3x16xf32>, tensor<8x16xf32>) -> tensor<4x3x8xf32>
  return %y : tensor<4x3x8xf32>
}

// -----

// Tests that MAE's normalized-pixel loss splits along the batch (means over a whole dim, sub,
// pow, div, mul by the mask) and that reductions over the split batch are partial sums: both
// sums of the masked mean and a mean; the div of two partial sums is not one.
// CHECK-LABEL: func.func @loss
// CHECK: cpc.reduce_mean %{{.*}} {axes = array<i64: 2>, cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>], keepdims = true}
// CHECK: cpc.sub {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>{{.*}} -> tensor<4x3x8xf32>
// CHECK: cpc.pow {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>{{.*}} -> tensor<4x3x1xf32>
// CHECK: cpc.div {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>{{.*}} -> tensor<4x3x8xf32>
// CHECK: %[[PER:.*]] = cpc.reduce_mean %{{.*}} {axes = array<i64: 2>, cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]} : tensor<4x3x8xf32> -> tensor<4x3xf32>
// CHECK: cpc.mul %[[PER]], {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>
// CHECK: %[[NUM:.*]] = cpc.reduce_sum %{{.*}} {axes = array<i64: 0, 1>, cpc.shardings = [#cpc.sharding<@mesh, [], partial = ["dp"]>]}
// CHECK: %[[DEN:.*]] = cpc.reduce_sum %{{.*}} {axes = array<i64: 0, 1>, cpc.shardings = [#cpc.sharding<@mesh, [], partial = ["dp"]>]}
// CHECK: cpc.div %[[NUM]], %[[DEN]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK: cpc.reduce_mean %[[PER]] {axes = array<i64: 0, 1>, cpc.shardings = [#cpc.sharding<@mesh, [], partial = ["dp"]>]}
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @loss(%pred: tensor<4x3x8xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], []]>}, %target: tensor<4x3x8xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], []]>}, %mask: tensor<4x3xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], []]>}) -> (tensor<f32>, tensor<f32>) {
  %two = cpc.constant dense<2.0> : tensor<f32>
  %half = cpc.constant dense<0.5> : tensor<f32>
  %mu = cpc.reduce_mean %target {axes = array<i64: 2>, keepdims = true} : tensor<4x3x8xf32> -> tensor<4x3x1xf32>
  %c = cpc.sub %target, %mu : (tensor<4x3x8xf32>, tensor<4x3x1xf32>) -> tensor<4x3x8xf32>
  %var = cpc.reduce_mean %c {axes = array<i64: 2>, keepdims = true} : tensor<4x3x8xf32> -> tensor<4x3x1xf32>
  %std = cpc.pow %var, %half : (tensor<4x3x1xf32>, tensor<f32>) -> tensor<4x3x1xf32>
  %norm = cpc.div %c, %std : (tensor<4x3x8xf32>, tensor<4x3x1xf32>) -> tensor<4x3x8xf32>
  %d = cpc.sub %pred, %norm : (tensor<4x3x8xf32>, tensor<4x3x8xf32>) -> tensor<4x3x8xf32>
  %sq = cpc.pow %d, %two : (tensor<4x3x8xf32>, tensor<f32>) -> tensor<4x3x8xf32>
  %per = cpc.reduce_mean %sq {axes = array<i64: 2>} : tensor<4x3x8xf32> -> tensor<4x3xf32>
  %masked = cpc.mul %per, %mask : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %num = cpc.reduce_sum %masked {axes = array<i64: 0, 1>} : tensor<4x3xf32> -> tensor<f32>
  %den = cpc.reduce_sum %mask {axes = array<i64: 0, 1>} : tensor<4x3xf32> -> tensor<f32>
  %loss = cpc.div %num, %den : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %mean = cpc.reduce_mean %per {axes = array<i64: 0, 1>} : tensor<4x3xf32> -> tensor<f32>
  return %loss, %mean : tensor<f32>, tensor<f32>
}

// -----

// Tests that weight gradients are partial sums: a matmul contracting the split (flattened)
// batch, a bias gradient summed over the batch and reshaped (linear: still partial) and
// conv2d_grad_weight; the input gradient (a matmul with the whole weight) stays split.
// CHECK-LABEL: func.func @weight_grads
// CHECK: cpc.matmul {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>]} : (tensor<4x3x16xf32>, tensor<16x8xf32>)
// CHECK: cpc.reshape {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>{{.*}} -> tensor<12x8xf32>
// CHECK: cpc.reshape {{.*}}#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>{{.*}} -> tensor<12x16xf32>
// CHECK: cpc.matmul {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], []], partial = ["dp"]>], transpose_lhs = true} : (tensor<12x16xf32>, tensor<12x8xf32>) -> tensor<16x8xf32>
// CHECK: cpc.reduce_sum {{.*}}#cpc.sharding<@mesh, {{\[\[}}], [], []], partial = ["dp"]>{{.*}} -> tensor<1x1x16xf32>
// CHECK: cpc.reshape {{.*}}{cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}]], partial = ["dp"]>]} : tensor<1x1x16xf32> -> tensor<16xf32>
// CHECK: cpc.conv2d_grad_weight {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], [], [], []], partial = ["dp"]>]{{.*}} -> tensor<6x3x4x4xf32>
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @fc.weight trainable : tensor<16x8xf32>
func.func @weight_grads(%x: tensor<4x3x8xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], []]>}, %dy: tensor<4x3x16xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], []]>}, %imgs: tensor<4x3x8x8xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], [], []]>}, %dc: tensor<4x6x2x2xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], [], []]>}) -> (tensor<16x8xf32>, tensor<16xf32>, tensor<6x3x4x4xf32>, tensor<4x3x8xf32>) {
  %w = cpc.parameter @fc.weight : tensor<16x8xf32>
  %dx = cpc.matmul %dy, %w : (tensor<4x3x16xf32>, tensor<16x8xf32>) -> tensor<4x3x8xf32>
  %x2 = cpc.reshape %x : tensor<4x3x8xf32> -> tensor<12x8xf32>
  %dy2 = cpc.reshape %dy : tensor<4x3x16xf32> -> tensor<12x16xf32>
  %dw = cpc.matmul %dy2, %x2 {transpose_lhs = true} : (tensor<12x16xf32>, tensor<12x8xf32>) -> tensor<16x8xf32>
  %db1 = cpc.reduce_sum %dy {axes = array<i64: 0, 1>, keepdims = true} : tensor<4x3x16xf32> -> tensor<1x1x16xf32>
  %db = cpc.reshape %db1 : tensor<1x1x16xf32> -> tensor<16xf32>
  %dk = cpc.conv2d_grad_weight %imgs, %dc {strides = array<i64: 4, 4>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<4x3x8x8xf32>, tensor<4x6x2x2xf32>) -> tensor<6x3x4x4xf32>
  return %dw, %db, %dk, %dx : tensor<16x8xf32>, tensor<16xf32>, tensor<6x3x4x4xf32>, tensor<4x3x8xf32>
}

// -----

// Tests that layer_norm_grad keeps the input gradient split and makes the scale and bias
// gradients (sums over the batch) partial; softmax_grad and gelu_grad stay split.
// CHECK-LABEL: func.func @fused_grads
// CHECK: cpc.layer_norm_grad {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>, #cpc.sharding<@mesh, {{\[\[}}]], partial = ["dp"]>, #cpc.sharding<@mesh, {{\[\[}}]], partial = ["dp"]>]
// CHECK: cpc.softmax_grad {{.*}}{axis = 3 : i64, cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], [], []]>]}
// CHECK: cpc.gelu_grad {{.*}}{cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>]}
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @norm.weight trainable : tensor<8xf32>
func.func @fused_grads(%x: tensor<4x3x8xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], []]>}, %g: tensor<4x3x8xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], []]>}, %p: tensor<4x2x3x3xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], [], []]>}, %dp: tensor<4x2x3x3xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], [], []]>}) -> (tensor<4x3x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<4x2x3x3xf32>, tensor<4x3x8xf32>) {
  %s = cpc.parameter @norm.weight : tensor<8xf32>
  %dx, %ds, %db = cpc.layer_norm_grad %x, %s, %g {axis = 2 : i64, epsilon = 1.0e-6 : f64} : (tensor<4x3x8xf32>, tensor<8xf32>, tensor<4x3x8xf32>) -> (tensor<4x3x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %dsm = cpc.softmax_grad %p, %dp {axis = 3 : i64} : tensor<4x2x3x3xf32>
  %dg = cpc.gelu_grad %x, %g : tensor<4x3x8xf32>
  return %dx, %ds, %db, %dsm, %dg : tensor<4x3x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<4x2x3x3xf32>, tensor<4x3x8xf32>
}

// -----

// Tests the scatter-like gradients: gather_grad moves the batch to dim 1 (the inverse of the
// qkv gather), gather_elements_grad stays split, a zero pad of a split gradient stays split and
// a zero pad of a partial sum (the positional-embedding gradient) stays partial.
// CHECK-LABEL: func.func @scatter_grads
// CHECK: cpc.gather_grad {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], ["dp"], [], [], []]>]{{.*}} -> tensor<3x4x2x3x4xf32>
// CHECK: cpc.gather_elements_grad {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>]{{.*}} -> tensor<4x8x6xf32>
// CHECK: %[[DCLS:.*]] = cpc.slice
// CHECK: cpc.pad %[[DCLS]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], []]>]{{.*}} -> tensor<4x3x6xf32>
// CHECK: %[[SUM:.*]] = cpc.reduce_sum %[[DCLS]] {axes = array<i64: 0>, cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], [], []], partial = ["dp"]>]
// CHECK: cpc.pad %[[SUM]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], [], []], partial = ["dp"]>]{{.*}} -> tensor<1x3x6xf32>
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @scatter_grads(%dq: tensor<4x2x3x4xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], [], []]>}, %dt: tensor<4x2x6xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], []]>}, %idx: tensor<4x2x6xi64> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], []]>}, %dtok: tensor<4x3x6xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], [], []]>}) -> (tensor<3x4x2x3x4xf32>, tensor<4x8x6xf32>, tensor<4x3x6xf32>, tensor<1x3x6xf32>) {
  %i0 = cpc.constant dense<0> : tensor<i64>
  %dqkv = cpc.gather_grad %dq, %i0 {axis = 0 : i64, dim_size = 3 : i64} : (tensor<4x2x3x4xf32>, tensor<i64>) -> tensor<3x4x2x3x4xf32>
  %dx = cpc.gather_elements_grad %dt, %idx {axis = 1 : i64} : (tensor<4x2x6xf32>, tensor<4x2x6xi64>) -> tensor<4x8x6xf32>
  %dcls = cpc.slice %dtok {starts = array<i64: 0, 0, 0>, limits = array<i64: 4, 1, 6>, strides = array<i64: 1, 1, 1>} : tensor<4x3x6xf32> -> tensor<4x1x6xf32>
  %padded = cpc.pad %dcls {low_padding = array<i64: 0, 0, 0>, high_padding = array<i64: 0, 2, 0>, interior_padding = array<i64: 0, 0, 0>} : tensor<4x1x6xf32> -> tensor<4x3x6xf32>
  %dpos1 = cpc.reduce_sum %dcls {axes = array<i64: 0>, keepdims = true} : tensor<4x1x6xf32> -> tensor<1x1x6xf32>
  %dpos = cpc.pad %dpos1 {low_padding = array<i64: 0, 0, 0>, high_padding = array<i64: 0, 2, 0>, interior_padding = array<i64: 0, 0, 0>} : tensor<1x1x6xf32> -> tensor<1x3x6xf32>
  return %dqkv, %dx, %padded, %dpos : tensor<3x4x2x3x4xf32>, tensor<4x8x6xf32>, tensor<4x3x6xf32>, tensor<1x3x6xf32>
}

// -----

// Tests the optimizer: parameters, states and runtime inputs stay whole; the weight gradient is
// partial, its square (not linear) and what follows (sum, sqrt, div, min of the clip factor) are
// not; the clipped gradient (a partial sum times a whole factor) is partial again, and adamw
// (not linear) and the assigns get no layout.
// CHECK-LABEL: func.func @optimizer
// CHECK-SAME: %{{[^:]*}}: tensor<f32> {cpc.runtime = #cpc.runtime_input<learning_rate>}, %{{[^:]*}}: tensor<f32> {cpc.runtime = #cpc.runtime_input<step>}
// CHECK: cpc.state @adamw.exp_avg.fc.weight : tensor<16x8xf32>{{$}}
// CHECK: %[[DW:.*]] = cpc.matmul {{.*}}partial = ["dp"]>], transpose_lhs = true}
// CHECK: %[[SQ:.*]] = cpc.mul %[[DW]], %[[DW]] : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
// CHECK: cpc.reduce_sum %[[SQ]] {axes = array<i64: 0, 1>} : tensor<16x8xf32> -> tensor<f32>
// CHECK: cpc.sqrt %{{.*}} : tensor<f32>
// CHECK: cpc.div %{{.*}}, %{{.*}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK: %[[COEF:.*]] = cpc.min %{{.*}}, %{{.*}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK: %[[CLIPPED:.*]] = cpc.mul %[[DW]], %[[COEF]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], []], partial = ["dp"]>]}
// CHECK: cpc.adamw %{{.*}}, %[[CLIPPED]], %{{.*}} {beta1 = 9.000000e-01 : f64, beta2 = {{[^,]*}}, epsilon
// CHECK: cpc.assign %{{.*}} to @fc.weight : tensor<16x8xf32>
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @fc.weight trainable : tensor<16x8xf32>
cpc.variable @adamw.exp_avg.fc.weight state <exp_avg> : tensor<16x8xf32>
cpc.variable @adamw.exp_avg_sq.fc.weight state <exp_avg_sq> : tensor<16x8xf32>
func.func @optimizer(%x: tensor<4x8xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], []]>}, %dy: tensor<4x16xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], []]>}, %lr: tensor<f32> {cpc.runtime = #cpc.runtime_input<learning_rate>}, %step: tensor<f32> {cpc.runtime = #cpc.runtime_input<step>}) -> tensor<f32> {
  %w = cpc.parameter @fc.weight : tensor<16x8xf32>
  %m = cpc.state @adamw.exp_avg.fc.weight : tensor<16x8xf32>
  %v = cpc.state @adamw.exp_avg_sq.fc.weight : tensor<16x8xf32>
  %one = cpc.constant dense<1.0> : tensor<f32>
  %dw = cpc.matmul %dy, %x {transpose_lhs = true} : (tensor<4x16xf32>, tensor<4x8xf32>) -> tensor<16x8xf32>
  %sq = cpc.mul %dw, %dw : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
  %ss = cpc.reduce_sum %sq {axes = array<i64: 0, 1>} : tensor<16x8xf32> -> tensor<f32>
  %norm = cpc.sqrt %ss : tensor<f32>
  %inv = cpc.div %one, %norm : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %coef = cpc.min %inv, %one : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %clipped = cpc.mul %dw, %coef : (tensor<16x8xf32>, tensor<f32>) -> tensor<16x8xf32>
  %nw, %nm, %nv = cpc.adamw %w, %clipped, %m, %v, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.05 : f64} : (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<f32>, tensor<f32>) -> (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>)
  cpc.assign %nw to @fc.weight : tensor<16x8xf32>
  cpc.assign %nm to @adamw.exp_avg.fc.weight : tensor<16x8xf32>
  cpc.assign %nv to @adamw.exp_avg_sq.fc.weight : tensor<16x8xf32>
  return %norm : tensor<f32>
}

// -----

// Tests that ops whose results nothing else reads get the split from their operands alone
// (forward): broadcast, softmax, pow, div; and that linear ops pass partial sums on: the add of
// two partial sums (the gradients of a parameter used twice) and a div by a whole value.
// CHECK-LABEL: func.func @forward_only
// CHECK: cpc.broadcast {{.*}}{cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]} : tensor<4x1xf32> -> tensor<4x3xf32>
// CHECK: cpc.softmax {{.*}}{axis = 1 : i64, cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]}
// CHECK: cpc.pow {{.*}}{cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]}
// CHECK: cpc.div {{.*}}{cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]}
// CHECK: %[[DW1:.*]] = cpc.matmul {{.*}}partial = ["dp"]>]
// CHECK: %[[DW2:.*]] = cpc.matmul {{.*}}partial = ["dp"]>]
// CHECK: cpc.add %[[DW1]], %[[DW2]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], []], partial = ["dp"]>]}
// CHECK: cpc.div %[[DW1]], %{{.*}} {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], []], partial = ["dp"]>]}
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @forward_only(%x: tensor<4x3xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], []]>}, %m: tensor<4x1xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], []]>}, %y: tensor<4x5xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], []]>}) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<3x5xf32>, tensor<3x5xf32>) {
  %two = cpc.constant dense<2.0> : tensor<f32>
  %b = cpc.broadcast %m : tensor<4x1xf32> -> tensor<4x3xf32>
  %s = cpc.softmax %x {axis = 1 : i64} : tensor<4x3xf32>
  %p = cpc.pow %x, %two : (tensor<4x3xf32>, tensor<f32>) -> tensor<4x3xf32>
  %d = cpc.div %x, %two : (tensor<4x3xf32>, tensor<f32>) -> tensor<4x3xf32>
  %dw1 = cpc.matmul %x, %y {transpose_lhs = true} : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  %dw2 = cpc.matmul %x, %y {transpose_lhs = true} : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  %sum = cpc.add %dw1, %dw2 : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
  %half = cpc.div %dw1, %two : (tensor<3x5xf32>, tensor<f32>) -> tensor<3x5xf32>
  return %b, %s, %p, %d, %sum, %half : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<3x5xf32>, tensor<3x5xf32>
}

// -----

// Tests the other seeds and both directions: a cpc.shard op seeds its result (the argument it
// annotates stays whole) and propagation reaches a constant backward through neg; an annotated
// result (here on a transpose) is a seed that spreads backward to nothing (the argument is
// fixed) and forward through exp and transpose; a cpc.shard to whole stops a split.
// CHECK-LABEL: func.func @seeds
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4x3xf32>, %[[Y:[^:]*]]: tensor<4x3xf32>)
// CHECK: cpc.constant {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]} dense<1.000000e+00>
// CHECK: cpc.neg {{.*}}{cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]}
// CHECK: %[[XS:.*]] = cpc.shard %[[X]] to <@mesh, {{\[\[}}"dp"], []]> : tensor<4x3xf32>
// CHECK: %[[A:.*]] = cpc.add %{{.*}}, %[[XS]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]}
// CHECK: cpc.transpose %[[Y]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], ["dp"]]>]
// CHECK: cpc.exp {{.*}}{cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], ["dp"]]>]} : tensor<3x4xf32>
// CHECK: cpc.transpose {{.*}}{cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]{{.*}} -> tensor<4x3xf32>
// CHECK: cpc.shard %[[A]] to <@mesh, {{\[\[}}], []]> : tensor<4x3xf32>
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @seeds(%x: tensor<4x3xf32>, %y: tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>) {
  %c = cpc.constant dense<1.0> : tensor<4x3xf32>
  %e = cpc.neg %c : tensor<4x3xf32>
  %xs = cpc.shard %x to <@mesh, [["dp"], []]> : tensor<4x3xf32>
  %a = cpc.add %e, %xs : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %t = cpc.transpose %y {permutation = array<i64: 1, 0>, cpc.shardings = [#cpc.sharding<@mesh, [[], ["dp"]]>]} : tensor<4x3xf32> -> tensor<3x4xf32>
  %u = cpc.exp %t : tensor<3x4xf32>
  %b = cpc.transpose %u {permutation = array<i64: 1, 0>} : tensor<3x4xf32> -> tensor<4x3xf32>
  %w = cpc.shard %a to <@mesh, [[], []]> : tensor<4x3xf32>
  return %a, %b, %w : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>
}

// -----

// Tests that a dim that does not split evenly stays whole: the split [4, 3] reshaped to [3, 4]
// (partitioning then gathers the operand), and a sum kept over the batch as a dim of size 1.
// CHECK-LABEL: func.func @indivisible
// CHECK: cpc.reshape %{{.*}} : tensor<4x3xf32> -> tensor<3x4xf32>
// CHECK: cpc.reduce_sum %{{.*}} {axes = array<i64: 0>, cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], []], partial = ["dp"]>], keepdims = true} : tensor<4x3xf32> -> tensor<1x3xf32>
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @indivisible(%x: tensor<4x3xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], []]>}) -> (tensor<3x4xf32>, tensor<1x3xf32>) {
  %r = cpc.reshape %x : tensor<4x3xf32> -> tensor<3x4xf32>
  %s = cpc.reduce_sum %x {axes = array<i64: 0>, keepdims = true} : tensor<4x3xf32> -> tensor<1x3xf32>
  return %r, %s : tensor<3x4xf32>, tensor<1x3xf32>
}

// -----

// Tests that one mesh axis splits only one factor of an op: in x + transpose(x) the second
// operand's split (dim 1) would split the result twice over dp, so only the first one counts.
// CHECK-LABEL: func.func @axis_once
// CHECK: cpc.add {{.*}}{cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]} : (tensor<4x4xf32>, tensor<4x4xf32>)
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @axis_once(%x: tensor<4x4xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], []]>}) -> tensor<4x4xf32> {
  %t = cpc.transpose %x {permutation = array<i64: 1, 0>} : tensor<4x4xf32> -> tensor<4x4xf32>
  %a = cpc.add %x, %t : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %a : tensor<4x4xf32>
}

// -----

// Tests that a function without seeds is left alone.
// CHECK-LABEL: func.func @no_seeds
// CHECK-NOT: cpc.shardings
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @no_seeds(%x: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %e = cpc.exp %x : tensor<4x3xf32>
  return %e : tensor<4x3xf32>
}

// -----

// Tests that a seed must name an existing mesh.
// expected-error @+1 {{sharding refers to unknown mesh @nope}}
func.func @unknown_mesh(%x: tensor<4x3xf32> {cpc.sharding = #cpc.sharding<@nope, [["dp"], []]>}) {
  return
}

// -----

// Tests that seeds over two meshes are refused.
cpc.mesh @a shape = [2] axes = ["dp"]
cpc.mesh @b shape = [2] axes = ["dp"]
func.func @two_meshes(%x: tensor<4x3xf32> {cpc.sharding = #cpc.sharding<@a, [["dp"], []]>}) -> tensor<4x3xf32> {
  // expected-error @+1 {{shardings over two meshes, @a and @b, are not supported}}
  %e = cpc.exp %x {cpc.shardings = [#cpc.sharding<@b, [["dp"], []]>]} : tensor<4x3xf32>
  return %e : tensor<4x3xf32>
}

// -----

// Tests that a seed needs one entry per dim of its value.
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @seed_rank(%x: tensor<4x3xf32>) -> tensor<4x3xf32> {
  // expected-error @+1 {{does not match the type 'tensor<4x3xf32>'}}
  %e = cpc.exp %x {cpc.shardings = [#cpc.sharding<@mesh, [["dp"]]>]} : tensor<4x3xf32>
  return %e : tensor<4x3xf32>
}

// -----

// Tests that a seed must split its dims evenly.
cpc.mesh @mesh shape = [2] axes = ["dp"]
// expected-error @+1 {{dim 0 of size 3 does not split into 2 blocks}}
func.func @seed_uneven(%x: tensor<3x4xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], []]>}) {
  return
}

// -----

// Tests that a seed may only use axes of its mesh.
cpc.mesh @mesh shape = [2] axes = ["dp"]
// expected-error @+1 {{mesh 'mesh' has no axis 'tp'}}
func.func @seed_axis(%x: tensor<4x4xf32> {cpc.sharding = #cpc.sharding<@mesh, [[], ["tp"]]>}) {
  return
}

// -----

// Tests propagation through reshapes with split factors (the fused qkv, its rows in head-major
// order): the split of the input's last dim over tp goes to the major factor H of [H, 3, Dh],
// which the transpose carries to dim 3. Backward, a split H in [3, H, Dh] cannot become a block
// of the merged dim (3 is whole), so the reshape's result stays whole.
// CHECK-LABEL: func.func @heads
// CHECK: cpc.reshape {{.*}}#cpc.sharding<@mesh2d, {{\[\[}}"dp"], [], ["tp"], [], []]>{{.*}} -> tensor<2x4x2x3x4xf32>
// CHECK: cpc.transpose {{.*}}#cpc.sharding<@mesh2d, {{\[\[}}"dp"], [], [], ["tp"], []]>{{.*}} -> tensor<2x4x3x2x4xf32>
// CHECK: cpc.exp
// CHECK: cpc.reshape %{{[^ ]*}} : tensor<2x4x3x2x4xf32> -> tensor<2x4x24xf32>
cpc.mesh @mesh2d shape = [2, 2] axes = ["dp", "tp"]
func.func @heads(%qkv: tensor<2x4x24xf32> {cpc.sharding = #cpc.sharding<@mesh2d, [["dp"], [], ["tp"]]>}, %h: tensor<2x4x3x2x4xf32> {cpc.sharding = #cpc.sharding<@mesh2d, [[], [], [], ["tp"], []]>}) -> (tensor<2x4x3x2x4xf32>, tensor<2x4x24xf32>) {
  %r = cpc.reshape %qkv : tensor<2x4x24xf32> -> tensor<2x4x2x3x4xf32>
  %t = cpc.transpose %r {permutation = array<i64: 0, 1, 3, 2, 4>} : tensor<2x4x2x3x4xf32> -> tensor<2x4x3x2x4xf32>
  %e = cpc.exp %h : tensor<2x4x3x2x4xf32>
  %back = cpc.reshape %e : tensor<2x4x3x2x4xf32> -> tensor<2x4x24xf32>
  return %t, %back : tensor<2x4x3x2x4xf32>, tensor<2x4x24xf32>
}

// -----

// Tests a dim split over two axes (in mesh order): through a reshape that splits the dim, dp
// covers the major factor 2 exactly and tp goes on to the next one; a transpose moves both.
// CHECK-LABEL: func.func @two_axes
// CHECK: cpc.reshape {{.*}}#cpc.sharding<@mesh2d, {{\[\[}}"dp"], ["tp"], []]>{{.*}} -> tensor<2x4x6xf32>
// CHECK: cpc.neg {{.*}}#cpc.sharding<@mesh2d, {{\[\[}}"dp", "tp"], []]>
// CHECK: cpc.transpose {{.*}}#cpc.sharding<@mesh2d, {{\[\[}}], ["dp", "tp"]]>{{.*}} -> tensor<6x8xf32>
cpc.mesh @mesh2d shape = [2, 2] axes = ["dp", "tp"]
func.func @two_axes(%x: tensor<8x6xf32> {cpc.sharding = #cpc.sharding<@mesh2d, [["dp", "tp"], []]>}) -> (tensor<2x4x6xf32>, tensor<6x8xf32>) {
  %r = cpc.reshape %x : tensor<8x6xf32> -> tensor<2x4x6xf32>
  %n = cpc.neg %x : tensor<8x6xf32>
  %t = cpc.transpose %n {permutation = array<i64: 1, 0>} : tensor<8x6xf32> -> tensor<6x8xf32>
  return %r, %t : tensor<2x4x6xf32>, tensor<6x8xf32>
}

// -----

// Tests that splits over two axes meet in one value: the batch over dp from the input and the
// columns over tp from a column-split weight (annotated at priority 1).
// CHECK-LABEL: func.func @dp_and_tp
// CHECK: cpc.matmul {{.*}}#cpc.sharding<@mesh2d, {{\[\[}}"dp"], ["tp"]]>{{.*}} -> tensor<4x16xf32>
// CHECK: cpc.gelu {{.*}}#cpc.sharding<@mesh2d, {{\[\[}}"dp"], ["tp"]]>
cpc.mesh @mesh2d shape = [2, 2] axes = ["dp", "tp"]
cpc.variable @fc1.weight trainable : tensor<16x8xf32>
func.func @dp_and_tp(%x: tensor<4x8xf32> {cpc.sharding = #cpc.sharding<@mesh2d, [["dp"], []]>}) -> tensor<4x16xf32> {
  %w = cpc.parameter @fc1.weight : tensor<16x8xf32>
  %ws = cpc.shard %w to <@mesh2d, [["tp"], []], priority = 1> : tensor<16x8xf32>
  %y = cpc.matmul %x, %ws {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %g = cpc.gelu %y : tensor<4x16xf32>
  return %g : tensor<4x16xf32>
}

// -----

// Tests priorities: two seeds want tp on different dims of the sum; the one of priority 0
// propagates first and wins, whichever operand it is.
// CHECK-LABEL: func.func @priority(
// CHECK: cpc.add {{.*}}#cpc.sharding<@mesh2d, {{\[\[}}], ["tp"]]>
// CHECK: cpc.exp {{.*}}#cpc.sharding<@mesh2d, {{\[\[}}], ["tp"]]>
cpc.mesh @mesh2d shape = [2, 2] axes = ["dp", "tp"]
func.func @priority(%a: tensor<4x4xf32> {cpc.sharding = #cpc.sharding<@mesh2d, [["tp"], []], priority = 1>}, %b: tensor<4x4xf32> {cpc.sharding = #cpc.sharding<@mesh2d, [[], ["tp"]]>}) -> tensor<4x4xf32> {
  %c = cpc.add %a, %b : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %d = cpc.exp %c : tensor<4x4xf32>
  return %d : tensor<4x4xf32>
}

// -----

// CHECK-LABEL: func.func @priority_swapped
// CHECK: cpc.add {{.*}}#cpc.sharding<@mesh2d, {{\[\[}}"tp"], []]>
// CHECK: cpc.exp {{.*}}#cpc.sharding<@mesh2d, {{\[\[}}"tp"], []]>
cpc.mesh @mesh2d shape = [2, 2] axes = ["dp", "tp"]
func.func @priority_swapped(%a: tensor<4x4xf32> {cpc.sharding = #cpc.sharding<@mesh2d, [["tp"], []]>}, %b: tensor<4x4xf32> {cpc.sharding = #cpc.sharding<@mesh2d, [[], ["tp"]], priority = 1>}) -> tensor<4x4xf32> {
  %c = cpc.add %a, %b : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %d = cpc.exp %c : tensor<4x4xf32>
  return %d : tensor<4x4xf32>
}

// -----

// Tests a partial max: a max over a dim split over tp (a softmax over split columns) is partial
// of kind max; the sum of the exponentials is partial of kind sum.
// CHECK-LABEL: func.func @partial_max
// CHECK: cpc.reduce_max {{.*}}#cpc.sharding<@mesh2d, {{\[\[}}], []], partial = ["tp"], reduction = max>
// CHECK: cpc.sub {{.*}}#cpc.sharding<@mesh2d, {{\[\[}}], ["tp"]]>
// CHECK: cpc.reduce_sum {{.*}}#cpc.sharding<@mesh2d, {{\[\[}}], []], partial = ["tp"]>
cpc.mesh @mesh2d shape = [2, 2] axes = ["dp", "tp"]
func.func @partial_max(%x: tensor<4x8xf32> {cpc.sharding = #cpc.sharding<@mesh2d, [[], ["tp"]]>}) -> tensor<4x1xf32> {
  %m = cpc.reduce_max %x {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %s = cpc.sub %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %e = cpc.exp %s : tensor<4x8xf32>
  %z = cpc.reduce_sum %e {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  return %z : tensor<4x1xf32>
}
