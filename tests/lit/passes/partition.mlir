// RUN: cpc-opt %s -split-input-file -verify-diagnostics --cpc-partition | FileCheck %s

// The cases follow the ops of MAE's training step. Their inputs are what cpc-propagate-sharding
// writes for them (see propagate-sharding.mlir), with the layouts as attribute aliases; the
// output is the program of one of the 2 ranks.

// Tests that the patch embedding takes this rank's half of the batch: conv2d, reshape, transpose
// and the add of a whole positional parameter get local types; whole parameters are used as
// they are (no slice), and the recorded layouts stay.
// CHECK-LABEL: func.func @patch_embed
// CHECK-SAME: (%[[IMGS:[^:]*]]: tensor<2x3x8x8xf32> {cpc.sharding = #cpc.sharding<@mesh, {{\[\[}}"dp"], [], [], []]>}) -> tensor<2x4x6xf32>
// CHECK-NOT: cpc.shard_slice
// CHECK: %[[C:.*]] = cpc.conv2d %[[IMGS]], {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], [], [], []]>]{{.*}} : (tensor<2x3x8x8xf32>, tensor<6x3x4x4xf32>, tensor<6xf32>) -> tensor<2x6x2x2xf32>
// CHECK: %[[R:.*]] = cpc.reshape %[[C]] {{.*}} : tensor<2x6x2x2xf32> -> tensor<2x6x4xf32>
// CHECK: %[[T:.*]] = cpc.transpose %[[R]] {{.*}} : tensor<2x6x4xf32> -> tensor<2x4x6xf32>
// CHECK: %[[A:.*]] = cpc.add %[[T]], %{{.*}} {{.*}} : (tensor<2x4x6xf32>, tensor<1x4x6xf32>) -> tensor<2x4x6xf32>
// CHECK: return %[[A]] : tensor<2x4x6xf32>
#batch3 = #cpc.sharding<@mesh, [["dp"], [], []]>
#batch4 = #cpc.sharding<@mesh, [["dp"], [], [], []]>
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @w trainable : tensor<6x3x4x4xf32>
cpc.variable @b trainable : tensor<6xf32>
cpc.variable @pos : tensor<1x4x6xf32>
func.func @patch_embed(%imgs: tensor<4x3x8x8xf32> {cpc.sharding = #batch4}) -> tensor<4x4x6xf32> {
  %w = cpc.parameter @w : tensor<6x3x4x4xf32>
  %b = cpc.parameter @b : tensor<6xf32>
  %pos = cpc.parameter @pos : tensor<1x4x6xf32>
  %c = cpc.conv2d %imgs, %w, %b {cpc.shardings = [#batch4], strides = array<i64: 4, 4>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<4x3x8x8xf32>, tensor<6x3x4x4xf32>, tensor<6xf32>) -> tensor<4x6x2x2xf32>
  %r = cpc.reshape %c {cpc.shardings = [#batch3]} : tensor<4x6x2x2xf32> -> tensor<4x6x4xf32>
  %t = cpc.transpose %r {cpc.shardings = [#batch3], permutation = array<i64: 0, 2, 1>} : tensor<4x6x4xf32> -> tensor<4x4x6xf32>
  %a = cpc.add %t, %pos {cpc.shardings = [#batch3]} : (tensor<4x4x6xf32>, tensor<1x4x6xf32>) -> tensor<4x4x6xf32>
  return %a : tensor<4x4x6xf32>
}

// -----

// Tests that the random masking is local: topk, a slice over the whole batch whose limit
// becomes the local batch, Tile's reshapes with the batch at dim 1, broadcasts (of the whole cls
// token to the local batch), gather_elements and concat; a whole constant (the mask's ones)
// that meets the split indices is sliced to this rank's rows.
// CHECK-LABEL: func.func @masking
// CHECK: %[[ONES:.*]] = cpc.constant dense<1.000000e+00> : tensor<4x8xf32>
// CHECK: %{{.*}}, %[[SHUFFLE:.*]] = cpc.topk {{.*}} : tensor<2x8xf32> -> tensor<2x8xf32>, tensor<2x8xi64>
// CHECK: %{{.*}}, %[[RESTORE:.*]] = cpc.topk %[[SHUFFLE]] {{.*}} : tensor<2x8xi64> -> tensor<2x8xi64>, tensor<2x8xi64>
// CHECK: cpc.slice %[[SHUFFLE]] {{.*}}limits = array<i64: 2, 2>{{.*}} : tensor<2x8xi64> -> tensor<2x2xi64>
// CHECK: cpc.reshape {{.*}} : tensor<2x2xi64> -> tensor<2x2x1xi64>
// CHECK: cpc.reshape {{.*}} : tensor<2x2x1xi64> -> tensor<1x2x1x2x1x1xi64>
// CHECK: cpc.broadcast {{.*}} : tensor<1x2x1x2x1x1xi64> -> tensor<1x2x1x2x6x1xi64>
// CHECK: %[[IDX:.*]] = cpc.reshape {{.*}} : tensor<1x2x1x2x6x1xi64> -> tensor<2x2x6xi64>
// CHECK: %[[KEPT:.*]] = cpc.gather_elements %{{.*}}, %[[IDX]] {{.*}} : (tensor<2x8x6xf32>, tensor<2x2x6xi64>) -> tensor<2x2x6xf32>
// CHECK: %[[CLS:.*]] = cpc.broadcast {{.*}} : tensor<1x1x6xf32> -> tensor<2x1x6xf32>
// CHECK: cpc.concat %[[CLS]], %[[KEPT]] {{.*}} : (tensor<2x1x6xf32>, tensor<2x2x6xf32>) -> tensor<2x3x6xf32>
// CHECK: %[[MINE:.*]] = cpc.shard_slice %[[ONES]] to <@mesh, {{\[\[}}"dp"], []]> : tensor<4x8xf32> -> tensor<2x8xf32>
// CHECK: cpc.gather_elements %[[MINE]], %[[RESTORE]] {{.*}} : (tensor<2x8xf32>, tensor<2x8xi64>) -> tensor<2x8xf32>
#batch2 = #cpc.sharding<@mesh, [["dp"], []]>
#batch3 = #cpc.sharding<@mesh, [["dp"], [], []]>
#dim1of6 = #cpc.sharding<@mesh, [[], ["dp"], [], [], [], []]>
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @cls trainable : tensor<1x1x6xf32>
func.func @masking(%x: tensor<4x8x6xf32> {cpc.sharding = #batch3}, %noise: tensor<4x8xf32> {cpc.sharding = #batch2}) -> (tensor<4x3x6xf32>, tensor<4x8xf32>) {
  %cls = cpc.parameter @cls : tensor<1x1x6xf32>
  %ones = cpc.constant {cpc.shardings = [#batch2]} dense<1.0> : tensor<4x8xf32>
  %sorted, %shuffle = cpc.topk %noise {cpc.shardings = [#batch2, #batch2], axis = 1 : i64, k = 8 : i64, largest = false} : tensor<4x8xf32> -> tensor<4x8xf32>, tensor<4x8xi64>
  %unused, %restore = cpc.topk %shuffle {cpc.shardings = [#batch2, #batch2], axis = 1 : i64, k = 8 : i64, largest = false} : tensor<4x8xi64> -> tensor<4x8xi64>, tensor<4x8xi64>
  %keep = cpc.slice %shuffle {cpc.shardings = [#batch2], starts = array<i64: 0, 0>, limits = array<i64: 4, 2>, strides = array<i64: 1, 1>} : tensor<4x8xi64> -> tensor<4x2xi64>
  %k3 = cpc.reshape %keep {cpc.shardings = [#batch3]} : tensor<4x2xi64> -> tensor<4x2x1xi64>
  %k6 = cpc.reshape %k3 {cpc.shardings = [#dim1of6]} : tensor<4x2x1xi64> -> tensor<1x4x1x2x1x1xi64>
  %tiled = cpc.broadcast %k6 {cpc.shardings = [#dim1of6]} : tensor<1x4x1x2x1x1xi64> -> tensor<1x4x1x2x6x1xi64>
  %idx = cpc.reshape %tiled {cpc.shardings = [#batch3]} : tensor<1x4x1x2x6x1xi64> -> tensor<4x2x6xi64>
  %kept = cpc.gather_elements %x, %idx {cpc.shardings = [#batch3], axis = 1 : i64} : (tensor<4x8x6xf32>, tensor<4x2x6xi64>) -> tensor<4x2x6xf32>
  %clsb = cpc.broadcast %cls {cpc.shardings = [#batch3]} : tensor<1x1x6xf32> -> tensor<4x1x6xf32>
  %tokens = cpc.concat %clsb, %kept {cpc.shardings = [#batch3], axis = 1 : i64} : (tensor<4x1x6xf32>, tensor<4x2x6xf32>) -> tensor<4x3x6xf32>
  %mask = cpc.gather_elements %ones, %restore {cpc.shardings = [#batch2], axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xi64>) -> tensor<4x8xf32>
  return %tokens, %mask : tensor<4x3x6xf32>, tensor<4x8xf32>
}

// -----

// Tests that a transformer block is local and needs no collective: layer_norm, matmuls with
// whole weights, the head reshape, the transpose with the batch at dim 1 and the gathers of
// q/k/v along dim 0, the batched attention matmuls, softmax, gelu; the scalar constant stays
// whole (a broadcast operand has no batch dim to slice).
// CHECK-LABEL: func.func @block
// CHECK-NOT: cpc.shard_slice
// CHECK-NOT: cpc.all_
// CHECK: cpc.layer_norm {{.*}} : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
// CHECK: cpc.matmul {{.*}} : (tensor<2x3x8xf32>, tensor<24x8xf32>) -> tensor<2x3x24xf32>
// CHECK: cpc.reshape {{.*}} : tensor<2x3x24xf32> -> tensor<2x3x3x2x4xf32>
// CHECK: %[[T:.*]] = cpc.transpose {{.*}} : tensor<2x3x3x2x4xf32> -> tensor<3x2x2x3x4xf32>
// CHECK-COUNT-3: cpc.gather %[[T]], {{.*}} : (tensor<3x2x2x3x4xf32>, tensor<i64>) -> tensor<2x2x3x4xf32>
// CHECK: cpc.matmul {{.*}} : (tensor<2x2x3x4xf32>, tensor<2x2x3x4xf32>) -> tensor<2x2x3x3xf32>
// CHECK: cpc.mul {{.*}} : (tensor<2x2x3x3xf32>, tensor<f32>) -> tensor<2x2x3x3xf32>
// CHECK: cpc.softmax {{.*}} : tensor<2x2x3x3xf32>
// CHECK: cpc.matmul {{.*}} : (tensor<2x2x3x3xf32>, tensor<2x2x3x4xf32>) -> tensor<2x2x3x4xf32>
// CHECK: cpc.transpose {{.*}} : tensor<2x2x3x4xf32> -> tensor<2x3x2x4xf32>
// CHECK: cpc.reshape {{.*}} : tensor<2x3x2x4xf32> -> tensor<2x3x8xf32>
// CHECK: cpc.matmul {{.*}} : (tensor<2x3x8xf32>, tensor<16x8xf32>) -> tensor<2x3x16xf32>
// CHECK: cpc.gelu {{.*}} : tensor<2x3x16xf32>
// CHECK: cpc.matmul {{.*}} : (tensor<2x3x16xf32>, tensor<8x16xf32>) -> tensor<2x3x8xf32>
#batch3 = #cpc.sharding<@mesh, [["dp"], [], []]>
#batch4 = #cpc.sharding<@mesh, [["dp"], [], [], []]>
#batch5 = #cpc.sharding<@mesh, [["dp"], [], [], [], []]>
#dim1of5 = #cpc.sharding<@mesh, [[], ["dp"], [], [], []]>
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @norm.weight trainable : tensor<8xf32>
cpc.variable @norm.bias trainable : tensor<8xf32>
cpc.variable @qkv.weight trainable : tensor<24x8xf32>
cpc.variable @fc1.weight trainable : tensor<16x8xf32>
cpc.variable @fc2.weight trainable : tensor<8x16xf32>
func.func @block(%x: tensor<4x3x8xf32> {cpc.sharding = #batch3}) -> tensor<4x3x8xf32> {
  %s = cpc.parameter @norm.weight : tensor<8xf32>
  %b = cpc.parameter @norm.bias : tensor<8xf32>
  %wqkv = cpc.parameter @qkv.weight : tensor<24x8xf32>
  %w1 = cpc.parameter @fc1.weight : tensor<16x8xf32>
  %w2 = cpc.parameter @fc2.weight : tensor<8x16xf32>
  %scale = cpc.constant dense<0.5> : tensor<f32>
  %i0 = cpc.constant dense<0> : tensor<i64>
  %i1 = cpc.constant dense<1> : tensor<i64>
  %i2 = cpc.constant dense<2> : tensor<i64>
  %n = cpc.layer_norm %x, %s, %b {cpc.shardings = [#batch3], axis = 2 : i64, epsilon = 1.0e-6 : f64} : (tensor<4x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x3x8xf32>
  %qkv = cpc.matmul %n, %wqkv {cpc.shardings = [#batch3], transpose_rhs = true} : (tensor<4x3x8xf32>, tensor<24x8xf32>) -> tensor<4x3x24xf32>
  %r = cpc.reshape %qkv {cpc.shardings = [#batch5]} : tensor<4x3x24xf32> -> tensor<4x3x3x2x4xf32>
  %t = cpc.transpose %r {cpc.shardings = [#dim1of5], permutation = array<i64: 2, 0, 3, 1, 4>} : tensor<4x3x3x2x4xf32> -> tensor<3x4x2x3x4xf32>
  %q = cpc.gather %t, %i0 {cpc.shardings = [#batch4], axis = 0 : i64} : (tensor<3x4x2x3x4xf32>, tensor<i64>) -> tensor<4x2x3x4xf32>
  %k = cpc.gather %t, %i1 {cpc.shardings = [#batch4], axis = 0 : i64} : (tensor<3x4x2x3x4xf32>, tensor<i64>) -> tensor<4x2x3x4xf32>
  %v = cpc.gather %t, %i2 {cpc.shardings = [#batch4], axis = 0 : i64} : (tensor<3x4x2x3x4xf32>, tensor<i64>) -> tensor<4x2x3x4xf32>
  %qk = cpc.matmul %q, %k {cpc.shardings = [#batch4], transpose_rhs = true} : (tensor<4x2x3x4xf32>, tensor<4x2x3x4xf32>) -> tensor<4x2x3x3xf32>
  %qks = cpc.mul %qk, %scale {cpc.shardings = [#batch4]} : (tensor<4x2x3x3xf32>, tensor<f32>) -> tensor<4x2x3x3xf32>
  %p = cpc.softmax %qks {cpc.shardings = [#batch4], axis = 3 : i64} : tensor<4x2x3x3xf32>
  %o = cpc.matmul %p, %v {cpc.shardings = [#batch4]} : (tensor<4x2x3x3xf32>, tensor<4x2x3x4xf32>) -> tensor<4x2x3x4xf32>
  %ot = cpc.transpose %o {cpc.shardings = [#batch4], permutation = array<i64: 0, 2, 1, 3>} : tensor<4x2x3x4xf32> -> tensor<4x3x2x4xf32>
  %attn = cpc.reshape %ot {cpc.shardings = [#batch3]} : tensor<4x3x2x4xf32> -> tensor<4x3x8xf32>
  %h = cpc.matmul %attn, %w1 {cpc.shardings = [#batch3], transpose_rhs = true} : (tensor<4x3x8xf32>, tensor<16x8xf32>) -> tensor<4x3x16xf32>
  %g = cpc.gelu %h {cpc.shardings = [#batch3]} : tensor<4x3x16xf32>
  %y = cpc.matmul %g, %w2 {cpc.shardings = [#batch3], transpose_rhs = true} : (tensor<4x3x16xf32>, tensor<8x16xf32>) -> tensor<4x3x8xf32>
  return %y : tensor<4x3x8xf32>
}

// -----

// Tests the loss: elementwise ops and means over a whole dim are local; a sum over the split
// batch is a partial sum, all-reduced where an op is not linear in it (the denominator of a div)
// and only once for its two users; the div is linear in its numerator, so the loss stays a
// partial sum until the return; a mean over the split batch is the local mean scaled by 1/2
// (the partial sums then add up to the global mean) and all-reduced at the return.
// CHECK-LABEL: func.func @loss
// CHECK: cpc.reduce_mean {{.*}}axes = array<i64: 2>{{.*}} : tensor<2x3x8xf32> -> tensor<2x3x1xf32>
// CHECK: cpc.sub {{.*}} : (tensor<2x3x8xf32>, tensor<2x3x1xf32>) -> tensor<2x3x8xf32>
// CHECK: cpc.pow {{.*}} : (tensor<2x3x1xf32>, tensor<f32>) -> tensor<2x3x1xf32>
// CHECK: cpc.div {{.*}} : (tensor<2x3x8xf32>, tensor<2x3x1xf32>) -> tensor<2x3x8xf32>
// CHECK: %[[PER:.*]] = cpc.reduce_mean {{.*}} : tensor<2x3x8xf32> -> tensor<2x3xf32>
// CHECK: %[[NUM:.*]] = cpc.reduce_sum {{.*}}partial = ["dp"]>]} : tensor<2x3xf32> -> tensor<f32>
// CHECK: %[[DEN:.*]] = cpc.reduce_sum {{.*}}partial = ["dp"]>]} : tensor<2x3xf32> -> tensor<f32>
// CHECK: %[[DENALL:.*]] = cpc.all_reduce %[[DEN]] over @mesh ["dp"] : tensor<f32>
// CHECK: %[[LOSS:.*]] = cpc.div %[[NUM]], %[[DENALL]] {cpc.shardings = [#cpc.sharding<@mesh, [], partial = ["dp"]>]}
// CHECK: %[[LOSSALL:.*]] = cpc.all_reduce %[[LOSS]] over @mesh ["dp"] : tensor<f32>
// CHECK: %[[MEAN:.*]] = cpc.reduce_mean %[[PER]] {{.*}}partial = ["dp"]>]} : tensor<2x3xf32> -> tensor<f32>
// CHECK: %[[HALF:.*]] = cpc.constant dense<5.000000e-01> : tensor<f32>
// CHECK: %[[SCALED:.*]] = cpc.mul %[[MEAN]], %[[HALF]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK: %[[MEANALL:.*]] = cpc.all_reduce %[[SCALED]] over @mesh ["dp"] : tensor<f32>
// CHECK: %[[GRAD:.*]] = cpc.div %{{.*}}, %[[DENALL]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK: return %[[LOSSALL]], %[[MEANALL]], %[[GRAD]]
#batch2 = #cpc.sharding<@mesh, [["dp"], []]>
#batch3 = #cpc.sharding<@mesh, [["dp"], [], []]>
#partial0 = #cpc.sharding<@mesh, [], partial = ["dp"]>
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @loss(%pred: tensor<4x3x8xf32> {cpc.sharding = #batch3}, %target: tensor<4x3x8xf32> {cpc.sharding = #batch3}, %mask: tensor<4x3xf32> {cpc.sharding = #batch2}) -> (tensor<f32>, tensor<f32>, tensor<f32>) {
  %two = cpc.constant dense<2.0> : tensor<f32>
  %half = cpc.constant dense<0.5> : tensor<f32>
  %mu = cpc.reduce_mean %target {cpc.shardings = [#batch3], axes = array<i64: 2>, keepdims = true} : tensor<4x3x8xf32> -> tensor<4x3x1xf32>
  %c = cpc.sub %target, %mu {cpc.shardings = [#batch3]} : (tensor<4x3x8xf32>, tensor<4x3x1xf32>) -> tensor<4x3x8xf32>
  %var = cpc.reduce_mean %c {cpc.shardings = [#batch3], axes = array<i64: 2>, keepdims = true} : tensor<4x3x8xf32> -> tensor<4x3x1xf32>
  %std = cpc.pow %var, %half {cpc.shardings = [#batch3]} : (tensor<4x3x1xf32>, tensor<f32>) -> tensor<4x3x1xf32>
  %norm = cpc.div %c, %std {cpc.shardings = [#batch3]} : (tensor<4x3x8xf32>, tensor<4x3x1xf32>) -> tensor<4x3x8xf32>
  %d = cpc.sub %pred, %norm {cpc.shardings = [#batch3]} : (tensor<4x3x8xf32>, tensor<4x3x8xf32>) -> tensor<4x3x8xf32>
  %sq = cpc.pow %d, %two {cpc.shardings = [#batch3]} : (tensor<4x3x8xf32>, tensor<f32>) -> tensor<4x3x8xf32>
  %per = cpc.reduce_mean %sq {cpc.shardings = [#batch2], axes = array<i64: 2>} : tensor<4x3x8xf32> -> tensor<4x3xf32>
  %masked = cpc.mul %per, %mask {cpc.shardings = [#batch2]} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %num = cpc.reduce_sum %masked {cpc.shardings = [#partial0], axes = array<i64: 0, 1>} : tensor<4x3xf32> -> tensor<f32>
  %den = cpc.reduce_sum %mask {cpc.shardings = [#partial0], axes = array<i64: 0, 1>} : tensor<4x3xf32> -> tensor<f32>
  %loss = cpc.div %num, %den : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %mean = cpc.reduce_mean %per {cpc.shardings = [#partial0], axes = array<i64: 0, 1>} : tensor<4x3xf32> -> tensor<f32>
  %grad = cpc.div %two, %den : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %loss, %mean, %grad : tensor<f32>, tensor<f32>, tensor<f32>
}

// -----

// Tests that weight gradients are all-reduced right after they are produced, as backward makes
// them: the matmul contracting the local batch, the bias gradient after its reshape (the partial
// sum is passed through the linear reshape and reduced once, in its final shape) and
// conv2d_grad_weight; the input gradient stays local and is not reduced.
// CHECK-LABEL: func.func @weight_grads
// CHECK: %[[DX:.*]] = cpc.matmul {{.*}} : (tensor<2x3x16xf32>, tensor<16x8xf32>) -> tensor<2x3x8xf32>
// CHECK: cpc.reshape {{.*}} : tensor<2x3x8xf32> -> tensor<6x8xf32>
// CHECK: cpc.reshape {{.*}} : tensor<2x3x16xf32> -> tensor<6x16xf32>
// CHECK: %[[DW:.*]] = cpc.matmul {{.*}}partial = ["dp"]>]{{.*}} : (tensor<6x16xf32>, tensor<6x8xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: %[[DWALL:.*]] = cpc.all_reduce %[[DW]] over @mesh ["dp"] : tensor<16x8xf32>
// CHECK-NEXT: %[[DB1:.*]] = cpc.reduce_sum {{.*}} : tensor<2x3x16xf32> -> tensor<1x1x16xf32>
// CHECK-NEXT: %[[DB:.*]] = cpc.reshape %[[DB1]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}]], partial = ["dp"]>]} : tensor<1x1x16xf32> -> tensor<16xf32>
// CHECK-NEXT: %[[DBALL:.*]] = cpc.all_reduce %[[DB]] over @mesh ["dp"] : tensor<16xf32>
// CHECK-NEXT: %[[DK:.*]] = cpc.conv2d_grad_weight {{.*}} : (tensor<2x3x8x8xf32>, tensor<2x6x2x2xf32>) -> tensor<6x3x4x4xf32>
// CHECK-NEXT: %[[DKALL:.*]] = cpc.all_reduce %[[DK]] over @mesh ["dp"] : tensor<6x3x4x4xf32>
// CHECK-NEXT: return %[[DWALL]], %[[DBALL]], %[[DKALL]], %[[DX]]
#batch2 = #cpc.sharding<@mesh, [["dp"], []]>
#batch3 = #cpc.sharding<@mesh, [["dp"], [], []]>
#batch4 = #cpc.sharding<@mesh, [["dp"], [], [], []]>
#partial1 = #cpc.sharding<@mesh, [[]], partial = ["dp"]>
#partial2 = #cpc.sharding<@mesh, [[], []], partial = ["dp"]>
#partial3 = #cpc.sharding<@mesh, [[], [], []], partial = ["dp"]>
#partial4 = #cpc.sharding<@mesh, [[], [], [], []], partial = ["dp"]>
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @fc.weight trainable : tensor<16x8xf32>
func.func @weight_grads(%x: tensor<4x3x8xf32> {cpc.sharding = #batch3}, %dy: tensor<4x3x16xf32> {cpc.sharding = #batch3}, %imgs: tensor<4x3x8x8xf32> {cpc.sharding = #batch4}, %dc: tensor<4x6x2x2xf32> {cpc.sharding = #batch4}) -> (tensor<16x8xf32>, tensor<16xf32>, tensor<6x3x4x4xf32>, tensor<4x3x8xf32>) {
  %w = cpc.parameter @fc.weight : tensor<16x8xf32>
  %dx = cpc.matmul %dy, %w {cpc.shardings = [#batch3]} : (tensor<4x3x16xf32>, tensor<16x8xf32>) -> tensor<4x3x8xf32>
  %x2 = cpc.reshape %x {cpc.shardings = [#batch2]} : tensor<4x3x8xf32> -> tensor<12x8xf32>
  %dy2 = cpc.reshape %dy {cpc.shardings = [#batch2]} : tensor<4x3x16xf32> -> tensor<12x16xf32>
  %dw = cpc.matmul %dy2, %x2 {cpc.shardings = [#partial2], transpose_lhs = true} : (tensor<12x16xf32>, tensor<12x8xf32>) -> tensor<16x8xf32>
  %db1 = cpc.reduce_sum %dy {cpc.shardings = [#partial3], axes = array<i64: 0, 1>, keepdims = true} : tensor<4x3x16xf32> -> tensor<1x1x16xf32>
  %db = cpc.reshape %db1 {cpc.shardings = [#partial1]} : tensor<1x1x16xf32> -> tensor<16xf32>
  %dk = cpc.conv2d_grad_weight %imgs, %dc {cpc.shardings = [#partial4], strides = array<i64: 4, 4>, padding = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<4x3x8x8xf32>, tensor<4x6x2x2xf32>) -> tensor<6x3x4x4xf32>
  return %dw, %db, %dk, %dx : tensor<16x8xf32>, tensor<16xf32>, tensor<6x3x4x4xf32>, tensor<4x3x8xf32>
}

// -----

// Tests that layer_norm_grad is local and its scale and bias gradients are all-reduced right
// after it, the input gradient not; softmax_grad and gelu_grad are local.
// CHECK-LABEL: func.func @fused_grads
// CHECK: %[[DX:.*]], %[[DS:.*]], %[[DB:.*]] = cpc.layer_norm_grad {{.*}} : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<2x3x8xf32>) -> (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>)
// CHECK-DAG: %[[DSALL:.*]] = cpc.all_reduce %[[DS]] over @mesh ["dp"] : tensor<8xf32>
// CHECK-DAG: %[[DBALL:.*]] = cpc.all_reduce %[[DB]] over @mesh ["dp"] : tensor<8xf32>
// CHECK-NOT: cpc.all_reduce %[[DX]]
// CHECK: cpc.softmax_grad {{.*}} : tensor<2x2x3x3xf32>
// CHECK: cpc.gelu_grad {{.*}} : tensor<2x3x8xf32>
// CHECK: return %[[DX]], %[[DSALL]], %[[DBALL]]
#batch3 = #cpc.sharding<@mesh, [["dp"], [], []]>
#batch4 = #cpc.sharding<@mesh, [["dp"], [], [], []]>
#partial1 = #cpc.sharding<@mesh, [[]], partial = ["dp"]>
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @norm.weight trainable : tensor<8xf32>
func.func @fused_grads(%x: tensor<4x3x8xf32> {cpc.sharding = #batch3}, %g: tensor<4x3x8xf32> {cpc.sharding = #batch3}, %p: tensor<4x2x3x3xf32> {cpc.sharding = #batch4}, %dp: tensor<4x2x3x3xf32> {cpc.sharding = #batch4}) -> (tensor<4x3x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<4x2x3x3xf32>, tensor<4x3x8xf32>) {
  %s = cpc.parameter @norm.weight : tensor<8xf32>
  %dx, %ds, %db = cpc.layer_norm_grad %x, %s, %g {cpc.shardings = [#batch3, #partial1, #partial1], axis = 2 : i64, epsilon = 1.0e-6 : f64} : (tensor<4x3x8xf32>, tensor<8xf32>, tensor<4x3x8xf32>) -> (tensor<4x3x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %dsm = cpc.softmax_grad %p, %dp {cpc.shardings = [#batch4], axis = 3 : i64} : tensor<4x2x3x3xf32>
  %dg = cpc.gelu_grad %x, %g {cpc.shardings = [#batch3]} : tensor<4x3x8xf32>
  return %dx, %ds, %db, %dsm, %dg : tensor<4x3x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<4x2x3x3xf32>, tensor<4x3x8xf32>
}

// -----

// Tests the scatter-like gradients: gather_grad yields the local batch at dim 1,
// gather_elements_grad and a zero pad of a split value are local, and a zero pad of a partial sum
// (the positional-embedding gradient) would pass it on, but the sum is reduced before the pad,
// where it holds fewer bytes: one all-reduce of [1, 1, 6], not of the padded [1, 3, 6].
// CHECK-LABEL: func.func @scatter_grads
// CHECK: cpc.gather_grad {{.*}} : (tensor<2x2x3x4xf32>, tensor<i64>) -> tensor<3x2x2x3x4xf32>
// CHECK: cpc.gather_elements_grad {{.*}} : (tensor<2x2x6xf32>, tensor<2x2x6xi64>) -> tensor<2x8x6xf32>
// CHECK: %[[DCLS:.*]] = cpc.slice {{.*}} : tensor<2x3x6xf32> -> tensor<2x1x6xf32>
// CHECK: cpc.pad %[[DCLS]] {{.*}} : tensor<2x1x6xf32> -> tensor<2x3x6xf32>
// CHECK: %[[SUM:.*]] = cpc.reduce_sum %[[DCLS]] {{.*}} : tensor<2x1x6xf32> -> tensor<1x1x6xf32>
// CHECK-NEXT: %[[SUMALL:.*]] = cpc.all_reduce %[[SUM]] over @mesh ["dp"] : tensor<1x1x6xf32>
// CHECK-NEXT: %[[DPOS:.*]] = cpc.pad %[[SUMALL]] {high_padding = {{.*}} : tensor<1x1x6xf32> -> tensor<1x3x6xf32>
// CHECK-NOT: cpc.all_reduce
#batch3 = #cpc.sharding<@mesh, [["dp"], [], []]>
#batch4 = #cpc.sharding<@mesh, [["dp"], [], [], []]>
#dim1of5 = #cpc.sharding<@mesh, [[], ["dp"], [], [], []]>
#partial3 = #cpc.sharding<@mesh, [[], [], []], partial = ["dp"]>
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @scatter_grads(%dq: tensor<4x2x3x4xf32> {cpc.sharding = #batch4}, %dt: tensor<4x2x6xf32> {cpc.sharding = #batch3}, %idx: tensor<4x2x6xi64> {cpc.sharding = #batch3}, %dtok: tensor<4x3x6xf32> {cpc.sharding = #batch3}) -> (tensor<3x4x2x3x4xf32>, tensor<4x8x6xf32>, tensor<4x3x6xf32>, tensor<1x3x6xf32>) {
  %i0 = cpc.constant dense<0> : tensor<i64>
  %dqkv = cpc.gather_grad %dq, %i0 {cpc.shardings = [#dim1of5], axis = 0 : i64, dim_size = 3 : i64} : (tensor<4x2x3x4xf32>, tensor<i64>) -> tensor<3x4x2x3x4xf32>
  %dx = cpc.gather_elements_grad %dt, %idx {cpc.shardings = [#batch3], axis = 1 : i64} : (tensor<4x2x6xf32>, tensor<4x2x6xi64>) -> tensor<4x8x6xf32>
  %dcls = cpc.slice %dtok {cpc.shardings = [#batch3], starts = array<i64: 0, 0, 0>, limits = array<i64: 4, 1, 6>, strides = array<i64: 1, 1, 1>} : tensor<4x3x6xf32> -> tensor<4x1x6xf32>
  %padded = cpc.pad %dcls {cpc.shardings = [#batch3], low_padding = array<i64: 0, 0, 0>, high_padding = array<i64: 0, 2, 0>, interior_padding = array<i64: 0, 0, 0>} : tensor<4x1x6xf32> -> tensor<4x3x6xf32>
  %dpos1 = cpc.reduce_sum %dcls {cpc.shardings = [#partial3], axes = array<i64: 0>, keepdims = true} : tensor<4x1x6xf32> -> tensor<1x1x6xf32>
  %dpos = cpc.pad %dpos1 {cpc.shardings = [#partial3], low_padding = array<i64: 0, 0, 0>, high_padding = array<i64: 0, 2, 0>, interior_padding = array<i64: 0, 0, 0>} : tensor<1x1x6xf32> -> tensor<1x3x6xf32>
  return %dqkv, %dx, %padded, %dpos : tensor<3x4x2x3x4xf32>, tensor<4x8x6xf32>, tensor<4x3x6xf32>, tensor<1x3x6xf32>
}

// -----

// Tests the optimizer step: the weight gradient is all-reduced once, right after its matmul,
// because its square (the clipping norm) is not linear in it; the clipped gradient then reuses
// the reduced value, so adamw, states, parameters and assigns are whole and nothing else is
// reduced (not even the norm).
// CHECK-LABEL: func.func @optimizer
// CHECK: %[[DW:.*]] = cpc.matmul {{.*}} : (tensor<2x16xf32>, tensor<2x8xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: %[[DWALL:.*]] = cpc.all_reduce %[[DW]] over @mesh ["dp"] : tensor<16x8xf32>
// CHECK-NEXT: cpc.mul %[[DWALL]], %[[DWALL]] : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
// CHECK: cpc.sqrt
// CHECK: cpc.min
// CHECK: %[[CLIPPED:.*]] = cpc.mul %[[DWALL]], %{{.*}} : (tensor<16x8xf32>, tensor<f32>) -> tensor<16x8xf32>
// CHECK: cpc.adamw %{{.*}}, %[[CLIPPED]], {{.*}} -> (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>)
// CHECK-NOT: cpc.all_reduce
// CHECK: return
#batch2 = #cpc.sharding<@mesh, [["dp"], []]>
#partial2 = #cpc.sharding<@mesh, [[], []], partial = ["dp"]>
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @fc.weight trainable : tensor<16x8xf32>
cpc.variable @adamw.exp_avg.fc.weight state <exp_avg> : tensor<16x8xf32>
cpc.variable @adamw.exp_avg_sq.fc.weight state <exp_avg_sq> : tensor<16x8xf32>
func.func @optimizer(%x: tensor<4x8xf32> {cpc.sharding = #batch2}, %dy: tensor<4x16xf32> {cpc.sharding = #batch2}, %lr: tensor<f32> {cpc.runtime = #cpc.runtime_input<learning_rate>}, %step: tensor<f32> {cpc.runtime = #cpc.runtime_input<step>}) -> tensor<f32> {
  %w = cpc.parameter @fc.weight : tensor<16x8xf32>
  %m = cpc.state @adamw.exp_avg.fc.weight : tensor<16x8xf32>
  %v = cpc.state @adamw.exp_avg_sq.fc.weight : tensor<16x8xf32>
  %one = cpc.constant dense<1.0> : tensor<f32>
  %dw = cpc.matmul %dy, %x {cpc.shardings = [#partial2], transpose_lhs = true} : (tensor<4x16xf32>, tensor<4x8xf32>) -> tensor<16x8xf32>
  %sq = cpc.mul %dw, %dw : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
  %ss = cpc.reduce_sum %sq {axes = array<i64: 0, 1>} : tensor<16x8xf32> -> tensor<f32>
  %norm = cpc.sqrt %ss : tensor<f32>
  %inv = cpc.div %one, %norm : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %coef = cpc.min %inv, %one : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %clipped = cpc.mul %dw, %coef {cpc.shardings = [#partial2]} : (tensor<16x8xf32>, tensor<f32>) -> tensor<16x8xf32>
  %nw, %nm, %nv = cpc.adamw %w, %clipped, %m, %v, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.05 : f64} : (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<f32>, tensor<f32>) -> (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>)
  cpc.assign %nw to @fc.weight : tensor<16x8xf32>
  cpc.assign %nm to @adamw.exp_avg.fc.weight : tensor<16x8xf32>
  cpc.assign %nv to @adamw.exp_avg_sq.fc.weight : tensor<16x8xf32>
  return %norm : tensor<f32>
}

// -----

// Tests gradient accumulation: the accumulator state is annotated as holding partial sums over
// dp (as cpc-data-parallel marks it), so a microbatch adds its local (partial) gradient to it
// and assigns the partial sum; the update all-reduces the accumulator once, after the linear
// 1/k scaling.
// CHECK-LABEL: func.func @accumulate
// CHECK: %[[ACC:.*]] = cpc.state @grad_acc.fc.weight {{.*}}: tensor<16x8xf32>
// CHECK: %[[DW:.*]] = cpc.matmul {{.*}} : (tensor<2x16xf32>, tensor<2x8xf32>) -> tensor<16x8xf32>
// CHECK: %[[SUM:.*]] = cpc.add %[[ACC]], %[[DW]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], []], partial = ["dp"]>]}
// CHECK: cpc.assign %[[SUM]] to @grad_acc.fc.weight
// CHECK-LABEL: func.func @apply
// CHECK: %[[ACC:.*]] = cpc.state @grad_acc.fc.weight {{.*}}: tensor<16x8xf32>
// CHECK: %[[AVG:.*]] = cpc.mul %[[ACC]], %{{.*}} {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], []], partial = ["dp"]>]}
// CHECK-NEXT: %[[AVGALL:.*]] = cpc.all_reduce %[[AVG]] over @mesh ["dp"] : tensor<16x8xf32>
// CHECK: cpc.adamw %{{.*}}, %[[AVGALL]],
// CHECK-NOT: cpc.all_reduce
// CHECK: return
#batch2 = #cpc.sharding<@mesh, [["dp"], []]>
#partial2 = #cpc.sharding<@mesh, [[], []], partial = ["dp"]>
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @grad_acc.fc.weight state <gradient_accumulator> : tensor<16x8xf32>
cpc.variable @fc.weight trainable : tensor<16x8xf32>
cpc.variable @adamw.exp_avg.fc.weight state <exp_avg> : tensor<16x8xf32>
cpc.variable @adamw.exp_avg_sq.fc.weight state <exp_avg_sq> : tensor<16x8xf32>
func.func @accumulate(%x: tensor<4x8xf32> {cpc.sharding = #batch2}, %dy: tensor<4x16xf32> {cpc.sharding = #batch2}) {
  %acc = cpc.state @grad_acc.fc.weight {cpc.shardings = [#partial2]} : tensor<16x8xf32>
  %dw = cpc.matmul %dy, %x {cpc.shardings = [#partial2], transpose_lhs = true} : (tensor<4x16xf32>, tensor<4x8xf32>) -> tensor<16x8xf32>
  %sum = cpc.add %acc, %dw : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
  cpc.assign %sum to @grad_acc.fc.weight : tensor<16x8xf32>
  return
}
func.func @apply(%lr: tensor<f32> {cpc.runtime = #cpc.runtime_input<learning_rate>}, %step: tensor<f32> {cpc.runtime = #cpc.runtime_input<step>}) -> tensor<f32> {
  %w = cpc.parameter @fc.weight : tensor<16x8xf32>
  %m = cpc.state @adamw.exp_avg.fc.weight : tensor<16x8xf32>
  %v = cpc.state @adamw.exp_avg_sq.fc.weight : tensor<16x8xf32>
  %acc = cpc.state @grad_acc.fc.weight {cpc.shardings = [#partial2]} : tensor<16x8xf32>
  %k = cpc.constant dense<0.5> : tensor<f32>
  %zero = cpc.constant dense<0.0> : tensor<16x8xf32>
  %avg = cpc.mul %acc, %k : (tensor<16x8xf32>, tensor<f32>) -> tensor<16x8xf32>
  %sq = cpc.mul %avg, %avg : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
  %ss = cpc.reduce_sum %sq {axes = array<i64: 0, 1>} : tensor<16x8xf32> -> tensor<f32>
  %norm = cpc.sqrt %ss : tensor<f32>
  %nw, %nm, %nv = cpc.adamw %w, %avg, %m, %v, %lr, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.05 : f64} : (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<f32>, tensor<f32>) -> (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>)
  cpc.assign %nw to @fc.weight : tensor<16x8xf32>
  cpc.assign %nm to @adamw.exp_avg.fc.weight : tensor<16x8xf32>
  cpc.assign %nv to @adamw.exp_avg_sq.fc.weight : tensor<16x8xf32>
  cpc.assign %zero to @grad_acc.fc.weight : tensor<16x8xf32>
  return %norm : tensor<f32>
}

// -----

// Tests the resharding rule: a split value that an op needs whole along a dim is all-gathered
// along that dim, once for all such users: softmax over the split batch (dim 0); softmax and
// argsort along dim 1 of a transposed value (the batch at dim 1, gathered with dim = 1); a
// reshape whose result dim does not split evenly ([4, 6] to [3, 8]) reuses the dim-0 gather.
// CHECK-LABEL: func.func @gather_whole
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x6xf32>
// CHECK: %[[G0:.*]] = cpc.all_gather %[[X]] over @mesh ["dp"] : tensor<2x6xf32> -> tensor<4x6xf32>
// CHECK: cpc.softmax %[[G0]] {axis = 0 : i64} : tensor<4x6xf32>
// CHECK: %[[T:.*]] = cpc.transpose %[[X]] {{.*}} : tensor<2x6xf32> -> tensor<6x2xf32>
// CHECK: %[[E:.*]] = cpc.exp %[[T]] {{.*}} : tensor<6x2xf32>
// CHECK: %[[G1:.*]] = cpc.all_gather %[[E]] over @mesh ["dp"] {dim = 1 : i64} : tensor<6x2xf32> -> tensor<6x4xf32>
// CHECK: cpc.softmax %[[G1]] {axis = 1 : i64} : tensor<6x4xf32>
// CHECK: cpc.argsort %[[G1]] {axis = 1 : i64} : tensor<6x4xf32> -> tensor<6x4xi64>
// CHECK: cpc.reshape %[[G0]] : tensor<4x6xf32> -> tensor<3x8xf32>
// CHECK-NOT: cpc.all_gather
#batch2 = #cpc.sharding<@mesh, [["dp"], []]>
#dim1of2 = #cpc.sharding<@mesh, [[], ["dp"]]>
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @gather_whole(%x: tensor<4x6xf32> {cpc.sharding = #batch2}) -> (tensor<4x6xf32>, tensor<6x4xf32>, tensor<6x4xi64>, tensor<3x8xf32>) {
  %p = cpc.softmax %x {axis = 0 : i64} : tensor<4x6xf32>
  %t = cpc.transpose %x {cpc.shardings = [#dim1of2], permutation = array<i64: 1, 0>} : tensor<4x6xf32> -> tensor<6x4xf32>
  %e = cpc.exp %t {cpc.shardings = [#dim1of2]} : tensor<6x4xf32>
  %s = cpc.softmax %e {axis = 1 : i64} : tensor<6x4xf32>
  %i = cpc.argsort %e {axis = 1 : i64} : tensor<6x4xf32> -> tensor<6x4xi64>
  %r = cpc.reshape %x : tensor<4x6xf32> -> tensor<3x8xf32>
  return %p, %s, %i, %r : tensor<4x6xf32>, tensor<6x4xf32>, tensor<6x4xi64>, tensor<3x8xf32>
}

// -----

// Tests that an op without a sharding rule (scatter_nd) gets its split operand whole.
// CHECK-LABEL: func.func @no_rule
// CHECK: %[[E:.*]] = cpc.exp {{.*}} : tensor<2x6xf32>
// CHECK: %[[G:.*]] = cpc.all_gather %[[E]] over @mesh ["dp"] : tensor<2x6xf32> -> tensor<4x6xf32>
// CHECK: cpc.scatter_nd %[[G]], {{.*}} : (tensor<4x6xf32>, tensor<1x1xi64>, tensor<1x6xf32>) -> tensor<4x6xf32>
#batch2 = #cpc.sharding<@mesh, [["dp"], []]>
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @no_rule(%x: tensor<4x6xf32> {cpc.sharding = #batch2}, %u: tensor<1x6xf32>) -> tensor<4x6xf32> {
  %e = cpc.exp %x {cpc.shardings = [#batch2]} : tensor<4x6xf32>
  %idx = cpc.constant dense<[[1]]> : tensor<1x1xi64>
  %s = cpc.scatter_nd %e, %idx, %u : (tensor<4x6xf32>, tensor<1x1xi64>, tensor<1x6xf32>) -> tensor<4x6xf32>
  return %s : tensor<4x6xf32>
}

// -----

// Tests that cpc.shard ops become the collectives their layouts need and disappear: a whole
// argument annotated as split is sliced, a split value annotated as whole is gathered.
// CHECK-LABEL: func.func @shard_ops
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4x6xf32>, %[[Y:[^:]*]]: tensor<2x6xf32>
// CHECK-NOT: cpc.shard %
// CHECK: %[[XS:.*]] = cpc.shard_slice %[[X]] to <@mesh, {{\[\[}}"dp"], []]> : tensor<4x6xf32> -> tensor<2x6xf32>
// CHECK: %[[A:.*]] = cpc.add %[[XS]], %[[Y]] {{.*}} : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
// CHECK: %[[W:.*]] = cpc.all_gather %[[A]] over @mesh ["dp"] : tensor<2x6xf32> -> tensor<4x6xf32>
// CHECK: cpc.neg %[[W]] : tensor<4x6xf32>
// CHECK-NOT: cpc.shard %
#batch2 = #cpc.sharding<@mesh, [["dp"], []]>
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @shard_ops(%x: tensor<4x6xf32>, %y: tensor<4x6xf32> {cpc.sharding = #batch2}) -> (tensor<4x6xf32>, tensor<4x6xf32>) {
  %xs = cpc.shard %x to <@mesh, [["dp"], []]> : tensor<4x6xf32>
  %a = cpc.add %xs, %y {cpc.shardings = [#batch2]} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %w = cpc.shard %a to <@mesh, [[], []]> : tensor<4x6xf32>
  %n = cpc.neg %w : tensor<4x6xf32>
  return %n, %a : tensor<4x6xf32>, tensor<4x6xf32>
}

// -----

// Tests an all-to-all reshard: in x + transpose(x), the transposed operand is split along dim 1
// where the add needs it split along dim 0, so its split moves there in one all-to-all (each
// rank sends half its block) instead of a gather and a slice.
// CHECK-LABEL: func.func @all_to_all_reshard
// CHECK: %[[T:.*]] = cpc.transpose {{.*}} : tensor<2x4xf32> -> tensor<4x2xf32>
// CHECK: %[[M:.*]] = cpc.all_to_all %[[T]] over @mesh ["dp"] {concat_dim = 1 : i64, split_dim = 0 : i64} : tensor<4x2xf32> -> tensor<2x4xf32>
// CHECK-NOT: cpc.all_gather
// CHECK: cpc.add %{{.*}}, %[[M]] {{.*}} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
#batch2 = #cpc.sharding<@mesh, [["dp"], []]>
#dim1of2 = #cpc.sharding<@mesh, [[], ["dp"]]>
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @all_to_all_reshard(%x: tensor<4x4xf32> {cpc.sharding = #batch2}) -> tensor<4x4xf32> {
  %t = cpc.transpose %x {cpc.shardings = [#dim1of2], permutation = array<i64: 1, 0>} : tensor<4x4xf32> -> tensor<4x4xf32>
  %a = cpc.add %x, %t {cpc.shardings = [#batch2]} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %a : tensor<4x4xf32>
}

// -----

// Tests that a max over the split batch is a partial max, reduced by a max all-reduce where a
// result needs it whole; the reshape in between passes the partial max on. A min over the
// split batch (no min collective) gathers its operand instead.
// CHECK-LABEL: func.func @max_over_batch
// CHECK: %[[M:.*]] = cpc.reduce_max %{{.*}} {axes = array<i64: 0>, cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}]], partial = ["dp"], reduction = max>]} : tensor<2x6xf32> -> tensor<6xf32>
// CHECK: %[[R:.*]] = cpc.reshape %[[M]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], []], partial = ["dp"], reduction = max>]} : tensor<6xf32> -> tensor<2x3xf32>
// CHECK: %[[ALL:.*]] = cpc.all_reduce %[[R]] over @mesh ["dp"] {kind = #cpc.reduction<max>} : tensor<2x3xf32>
// CHECK: %[[G:.*]] = cpc.all_gather %{{.*}} over @mesh ["dp"] : tensor<2x6xf32> -> tensor<4x6xf32>
// CHECK: %[[MIN:.*]] = cpc.reduce_min %[[G]] {axes = array<i64: 0>} : tensor<4x6xf32> -> tensor<6xf32>
// CHECK: return %[[ALL]], %[[MIN]]
#batch2 = #cpc.sharding<@mesh, [["dp"], []]>
#partialmax = #cpc.sharding<@mesh, [[]], partial = ["dp"], reduction = max>
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @max_over_batch(%x: tensor<4x6xf32> {cpc.sharding = #batch2}) -> (tensor<2x3xf32>, tensor<6xf32>) {
  %m = cpc.reduce_max %x {cpc.shardings = [#partialmax], axes = array<i64: 0>} : tensor<4x6xf32> -> tensor<6xf32>
  %r = cpc.reshape %m : tensor<6xf32> -> tensor<2x3xf32>
  %n = cpc.reduce_min %x {axes = array<i64: 0>} : tensor<4x6xf32> -> tensor<6xf32>
  return %r, %n : tensor<2x3xf32>, tensor<6xf32>
}

// -----

// Tests that a split value assigned to a variable stored whole (not read split here) is
// gathered first.
// CHECK-LABEL: func.func @assign_split
// CHECK: %[[G:.*]] = cpc.all_gather %{{.*}} over @mesh ["dp"] : tensor<2x6xf32> -> tensor<4x6xf32>
// CHECK: cpc.assign %[[G]] to @v : tensor<4x6xf32>
#batch2 = #cpc.sharding<@mesh, [["dp"], []]>
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @v : tensor<4x6xf32>
func.func @assign_split(%x: tensor<4x6xf32> {cpc.sharding = #batch2}) {
  %e = cpc.exp %x {cpc.shardings = [#batch2]} : tensor<4x6xf32>
  cpc.assign %e to @v : tensor<4x6xf32>
  return
}

// -----

// Tests a reshard between splits over different axes: y is split over tp where the add needs
// it split over dp, like x; it is gathered over tp and sliced over dp.
// CHECK-LABEL: func.func @other_axes
// CHECK: %[[G:.*]] = cpc.all_gather %arg1 over @mesh ["tp"] : tensor<2x6xf32> -> tensor<4x6xf32>
// CHECK: %[[S:.*]] = cpc.shard_slice %[[G]] to <@mesh, {{\[\[}}"dp"], []]> : tensor<4x6xf32> -> tensor<2x6xf32>
// CHECK: cpc.add %arg0, %[[S]]
cpc.mesh @mesh shape = [2, 2] axes = ["dp", "tp"]
func.func @other_axes(%x: tensor<4x6xf32> {cpc.sharding = #cpc.sharding<@mesh, [["dp"], []]>}, %y: tensor<4x6xf32> {cpc.sharding = #cpc.sharding<@mesh, [["tp"], []]>}) -> tensor<4x6xf32> {
  %a = cpc.add %x, %y {cpc.shardings = [#cpc.sharding<@mesh, [["dp"], []]>]} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  return %a : tensor<4x6xf32>
}

// -----

// Tests that a partial sum is not sliced as it is: the weight-gradient-like %g is a partial sum
// the mul may take (it is linear in it), but the mul wants its rows split like x, so %g is
// reduce-scattered into this rank's rows of the sum (half an all-reduce's traffic); the product
// is then whole.
// CHECK-LABEL: func.func @slice_partial
// CHECK: %[[G:.*]] = cpc.matmul
// CHECK: %[[S:.*]] = cpc.reduce_scatter %[[G]] over @mesh ["dp"] : tensor<4x4xf32> -> tensor<2x4xf32>
// CHECK: %[[M:.*]] = cpc.mul %[[S]], %arg0 {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"dp"], []]>]}
// CHECK-NOT: cpc.all_reduce
// CHECK: return %[[M]]
#batch2 = #cpc.sharding<@mesh, [["dp"], []]>
#partial2 = #cpc.sharding<@mesh, [[], []], partial = ["dp"]>
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @slice_partial(%x: tensor<4x4xf32> {cpc.sharding = #batch2}) -> tensor<4x4xf32> {
  %g = cpc.matmul %x, %x {cpc.shardings = [#partial2], transpose_lhs = true} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %m = cpc.mul %g, %x {cpc.shardings = [#batch2]} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %m : tensor<4x4xf32>
}

// -----

// Tests that a cpc.shard cannot turn a whole value into a partial sum.
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @shard_to_partial(%x: tensor<4x6xf32>) -> tensor<4x6xf32> {
  // expected-error @+1 {{cannot turn [-, -] into [-, -] partial(dp): only ops make partial sums}}
  %p = cpc.shard %x to <@mesh, [[], []], partial = ["dp"]> : tensor<4x6xf32>
  return %p : tensor<4x6xf32>
}

// -----

// Tests a dim split over two axes: the input's 8 rows become 2 on each of the 4 ranks, and the
// reshape's local result keeps dp on the major factor and tp on the next.
// CHECK-LABEL: func.func @two_axes
// CHECK-SAME: tensor<2x6xf32>
// CHECK: cpc.reshape {{.*}} : tensor<2x6xf32> -> tensor<1x2x6xf32>
// CHECK: cpc.exp {{.*}} : tensor<1x2x6xf32>
cpc.mesh @mesh2d shape = [2, 2] axes = ["dp", "tp"]
func.func @two_axes(%x: tensor<8x6xf32> {cpc.sharding = #cpc.sharding<@mesh2d, [["dp", "tp"], []]>}) -> tensor<2x4x6xf32> {
  %r = cpc.reshape %x : tensor<8x6xf32> -> tensor<2x4x6xf32>
  %e = cpc.exp %r : tensor<2x4x6xf32>
  return %e : tensor<2x4x6xf32>
}

// -----

// Tests the head split of a fused qkv (rows in head-major order): each rank holds whole heads
// ([1 head, 3, Dh] of [2, 3, Dh]), so the reshape and transpose need no communication.
// CHECK-LABEL: func.func @heads
// CHECK-SAME: tensor<1x4x12xf32>
// CHECK: cpc.reshape {{.*}} : tensor<1x4x12xf32> -> tensor<1x4x1x3x4xf32>
// CHECK: cpc.transpose {{.*}} : tensor<1x4x1x3x4xf32> -> tensor<1x4x3x1x4xf32>
// CHECK-NOT: cpc.all_
// CHECK: return
cpc.mesh @mesh2d shape = [2, 2] axes = ["dp", "tp"]
func.func @heads(%qkv: tensor<2x4x24xf32> {cpc.sharding = #cpc.sharding<@mesh2d, [["dp"], [], ["tp"]]>}) -> tensor<2x4x3x2x4xf32> {
  %r = cpc.reshape %qkv : tensor<2x4x24xf32> -> tensor<2x4x2x3x4xf32>
  %t = cpc.transpose %r {permutation = array<i64: 0, 1, 3, 2, 4>} : tensor<2x4x2x3x4xf32> -> tensor<2x4x3x2x4xf32>
  %e = cpc.exp %t : tensor<2x4x3x2x4xf32>
  return %e : tensor<2x4x3x2x4xf32>
}

// -----

// Tests a log-sum-exp over columns split over tp (vocab-parallel cross-entropy): the row max is
// a partial max, all-reduced with max before the subtraction; the sum of exponentials is a
// partial sum, all-reduced with sum before the log.
// CHECK-LABEL: func.func @softmax_split_columns
// CHECK: %[[M:.*]] = cpc.reduce_max {{.*}} : tensor<4x4xf32> -> tensor<4x1xf32>
// CHECK: %[[MAX:.*]] = cpc.all_reduce %[[M]] over @mesh2d ["tp"] {kind = #cpc.reduction<max>} : tensor<4x1xf32>
// CHECK: cpc.sub %{{.*}}, %[[MAX]]
// CHECK: %[[Z:.*]] = cpc.reduce_sum
// CHECK: %[[SUM:.*]] = cpc.all_reduce %[[Z]] over @mesh2d ["tp"] : tensor<4x1xf32>
// CHECK: cpc.log %[[SUM]]
// CHECK: cpc.add %{{.*}}, %[[MAX]]
cpc.mesh @mesh2d shape = [2, 2] axes = ["dp", "tp"]
func.func @softmax_split_columns(%x: tensor<4x8xf32> {cpc.sharding = #cpc.sharding<@mesh2d, [[], ["tp"]]>}) -> tensor<4x1xf32> {
  %m = cpc.reduce_max %x {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %s = cpc.sub %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %e = cpc.exp %s : tensor<4x8xf32>
  %z = cpc.reduce_sum %e {axes = array<i64: 1>, keepdims = true} : tensor<4x8xf32> -> tensor<4x1xf32>
  %l = cpc.log %z : tensor<4x1xf32>
  %lse = cpc.add %l, %m : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  return %lse : tensor<4x1xf32>
}

// -----

// Tests that a dim split over axes in another order than the mesh's (blocks numbered major to
// minor in the dim's order, as 3D weights are) is gathered one axis at a time, minor first: a
// collective numbers its group in the mesh's order, so one gather over both would misplace them.
// CHECK-LABEL: func.func @axes_out_of_order
// CHECK: %[[G1:.*]] = cpc.all_gather %{{.*}} over @mesh ["dp"] : tensor<1x6xf32> -> tensor<2x6xf32>
// CHECK: %[[G2:.*]] = cpc.all_gather %[[G1]] over @mesh ["tp"] : tensor<2x6xf32> -> tensor<4x6xf32>
// CHECK: cpc.softmax %[[G2]] {axis = 0 : i64} : tensor<4x6xf32>
cpc.mesh @mesh shape = [2, 2] axes = ["dp", "tp"]
func.func @axes_out_of_order(%x: tensor<4x6xf32> {cpc.sharding = #cpc.sharding<@mesh, [["tp", "dp"], []]>}) -> tensor<4x6xf32> {
  %s = cpc.softmax %x {axis = 0 : i64} : tensor<4x6xf32>
  return %s : tensor<4x6xf32>
}

// -----

// Tests that a partial sum an op wants split along a dim over its partial axes is
// reduce-scattered along that dim (sequence parallelism's row-parallel output meeting the
// sequence-split residual) rather than all-reduced and sliced.
// CHECK-LABEL: func.func @reduce_scatter_seq
// CHECK: %[[P:.*]] = cpc.matmul %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> tensor<2x4x4xf32>
// CHECK: %[[RS:.*]] = cpc.reduce_scatter %[[P]] over @mesh ["tp"] {dim = 1 : i64} : tensor<2x4x4xf32> -> tensor<2x2x4xf32>
// CHECK-NOT: cpc.all_reduce
// CHECK: cpc.add %arg1, %[[RS]] {{.*}} : (tensor<2x2x4xf32>, tensor<2x2x4xf32>) -> tensor<2x2x4xf32>
cpc.mesh @mesh shape = [2] axes = ["tp"]
cpc.variable @w trainable : tensor<16x4xf32>
func.func @reduce_scatter_seq(%h: tensor<2x4x16xf32> {cpc.sharding = #cpc.sharding<@mesh, [[], [], ["tp"]]>}, %res: tensor<2x4x4xf32> {cpc.sharding = #cpc.sharding<@mesh, [[], ["tp"], []]>}) -> tensor<2x4x4xf32> {
  %w = cpc.parameter @w {cpc.shardings = [#cpc.sharding<@mesh, [["tp"], []]>]} : tensor<16x4xf32>
  %p = cpc.matmul %h, %w {cpc.shardings = [#cpc.sharding<@mesh, [[], [], []], partial = ["tp"]>]} : (tensor<2x4x16xf32>, tensor<16x4xf32>) -> tensor<2x4x4xf32>
  %o = cpc.add %res, %p {cpc.shardings = [#cpc.sharding<@mesh, [[], ["tp"], []]>]} : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  return %o : tensor<2x4x4xf32>
}

// -----

// Tests that scalar partial sums over different axes (the global norm's terms of tp-split,
// dp-split and replicated gradients) add up as one partial sum over all the axes: a term
// replicated over some of them is scaled by 1/their size, and the total is all-reduced once.
// CHECK-LABEL: func.func @norm_terms
// CHECK: %[[HALF:.*]] = cpc.constant dense<5.000000e-01>
// CHECK: %[[B:.*]] = cpc.mul %arg1, %[[HALF]]
// CHECK: %[[S:.*]] = cpc.add %arg0, %[[B]] {cpc.shardings = [#cpc.sharding<@mesh, [], partial = ["dp", "tp"]>]}
// CHECK: %[[QUARTER:.*]] = cpc.constant dense<2.500000e-01>
// CHECK: %[[C:.*]] = cpc.mul %arg2, %[[QUARTER]]
// CHECK: %[[T:.*]] = cpc.add %[[S]], %[[C]]
// CHECK: %[[R:.*]] = cpc.all_reduce %[[T]] over @mesh ["dp", "tp"] : tensor<f32>
// CHECK: cpc.sqrt %[[R]]
cpc.mesh @mesh shape = [2, 2] axes = ["dp", "tp"]
func.func @norm_terms(%a: tensor<f32> {cpc.sharding = #cpc.sharding<@mesh, [], partial = ["dp", "tp"]>}, %b: tensor<f32> {cpc.sharding = #cpc.sharding<@mesh, [], partial = ["dp"]>}, %c: tensor<f32>) -> tensor<f32> {
  %s = cpc.add %a, %b : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %t = cpc.add %s, %c : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %r = cpc.sqrt %t : tensor<f32>
  return %r : tensor<f32>
}

// -----

// Tests that tensors partial over different axes are reduced over the axes the others lack
// only: the sum stays partial over the common axis and is all-reduced once there.
// CHECK-LABEL: func.func @partial_vectors
// CHECK: %[[A:.*]] = cpc.all_reduce %arg0 over @mesh ["tp"] : tensor<4xf32>
// CHECK: %[[S:.*]] = cpc.add %[[A]], %arg1 {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}]], partial = ["dp"]>]}
// CHECK: %[[R:.*]] = cpc.all_reduce %[[S]] over @mesh ["dp"] : tensor<4xf32>
// CHECK: cpc.sqrt %[[R]]
cpc.mesh @mesh shape = [2, 2] axes = ["dp", "tp"]
func.func @partial_vectors(%a: tensor<4xf32> {cpc.sharding = #cpc.sharding<@mesh, [[]], partial = ["dp", "tp"]>}, %b: tensor<4xf32> {cpc.sharding = #cpc.sharding<@mesh, [[]], partial = ["dp"]>}) -> tensor<4xf32> {
  %s = cpc.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %r = cpc.sqrt %s : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// Tests that no value is both split and partial over one axis: a partial [8, 1] that the
// broadcast would pass on into a result split over the same axis (a cross-entropy's row
// statistic meeting vocab-split logits) is all-reduced first.
// CHECK-LABEL: func.func @partial_into_split
// CHECK: %[[R:.*]] = cpc.all_reduce %arg0 over @mesh ["tp"] : tensor<8x1xf32>
// CHECK: %[[B:.*]] = cpc.broadcast %[[R]] {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], ["tp"]]>]} : tensor<8x1xf32> -> tensor<8x8xf32>
// CHECK: cpc.mul %[[B]], %arg1
// CHECK-NOT: cpc.all_reduce
cpc.mesh @mesh shape = [2] axes = ["tp"]
func.func @partial_into_split(%p: tensor<8x1xf32> {cpc.sharding = #cpc.sharding<@mesh, [[], []], partial = ["tp"]>}, %x: tensor<8x16xf32> {cpc.sharding = #cpc.sharding<@mesh, [[], ["tp"]]>}) -> tensor<8x16xf32> {
  %b = cpc.broadcast %p {cpc.shardings = [#cpc.sharding<@mesh, [[], ["tp"]]>]} : tensor<8x1xf32> -> tensor<8x16xf32>
  %m = cpc.mul %b, %x {cpc.shardings = [#cpc.sharding<@mesh, [[], ["tp"]]>]} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %m : tensor<8x16xf32>
}
