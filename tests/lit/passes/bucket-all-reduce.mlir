// RUN: cpc-opt %s --pass-pipeline='builtin.module(func.func(cpc-bucket-all-reduce))' --split-input-file | FileCheck %s

// Tests that all-reduces of values produced one after another go out as one bucket, issued where
// the last member stood, and that a use of a member that has effects (an assign) closes the
// bucket before it.
// CHECK-LABEL: func.func @grads
// CHECK: %[[B:.*]]:2 = cpc.all_reduce %{{.*}}, %{{.*}} over @mesh ["dp"] : tensor<4x3xf32>, tensor<3xf32>
// CHECK: cpc.assign %[[B]]#0 to @w
// CHECK: cpc.all_reduce %{{.*}} over @mesh ["dp"] : tensor<5xf32>
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @w trainable : tensor<4x3xf32>
func.func @grads(%a: tensor<4x3xf32>, %b: tensor<3xf32>, %c: tensor<5xf32>) -> (tensor<3xf32>, tensor<5xf32>) {
  %w = cpc.parameter @w : tensor<4x3xf32>
  %ra = cpc.all_reduce %a over @mesh ["dp"] : tensor<4x3xf32>
  %rb = cpc.all_reduce %b over @mesh ["dp"] : tensor<3xf32>
  cpc.assign %ra to @w : tensor<4x3xf32>
  %rc = cpc.all_reduce %c over @mesh ["dp"] : tensor<5xf32>
  return %rb, %rc : tensor<3xf32>, tensor<5xf32>
}

// -----

// Tests that a pure op reading a member (a reduced 16-bit gradient cast to f32) moves down to
// right before its first user, so that the bucket stays open: the bf16 gradients go out in one
// bucket and the f32 ones beside them in another, whatever their interleaving.
// CHECK-LABEL: func.func @mixed
// CHECK: %[[H:.*]]:2 = cpc.all_reduce %{{.*}}, %{{.*}} over @mesh ["dp"] : tensor<4x3xbf16>, tensor<3xbf16>
// CHECK: cpc.all_reduce %{{.*}}, %{{.*}} over @mesh ["dp"] : tensor<4xf32>, tensor<5xf32>
// CHECK: cpc.cast %[[H]]#0 : tensor<4x3xbf16> -> tensor<4x3xf32>
// CHECK: cpc.mul
// CHECK: cpc.cast %[[H]]#1 : tensor<3xbf16> -> tensor<3xf32>
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @mixed(%a: tensor<4x3xbf16>, %b: tensor<3xbf16>, %c: tensor<4xf32>, %d: tensor<5xf32>) -> (tensor<4x3xf32>, tensor<3xf32>, tensor<4xf32>, tensor<5xf32>) {
  %ra = cpc.all_reduce %a over @mesh ["dp"] : tensor<4x3xbf16>
  %wa = cpc.cast %ra : tensor<4x3xbf16> -> tensor<4x3xf32>
  %rc = cpc.all_reduce %c over @mesh ["dp"] : tensor<4xf32>
  %rb = cpc.all_reduce %b over @mesh ["dp"] : tensor<3xbf16>
  %wb = cpc.cast %rb : tensor<3xbf16> -> tensor<3xf32>
  %rd = cpc.all_reduce %d over @mesh ["dp"] : tensor<5xf32>
  %sq = cpc.mul %wa, %wa : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  return %sq, %wb, %rc, %rd : tensor<4x3xf32>, tensor<3xf32>, tensor<4xf32>, tensor<5xf32>
}

// -----

// Tests that an all-reduce of kind max is never merged into a bucket of sums: it stays alone,
// and the sums around it still share one call.
// CHECK-LABEL: func.func @max_stays_alone
// CHECK: cpc.all_reduce %{{.*}} over @mesh ["tp"] {kind = #cpc.reduction<max>} : tensor<4xf32>
// CHECK: cpc.all_reduce %{{.*}}, %{{.*}} over @mesh ["tp"] : tensor<4xf32>, tensor<4xf32>
cpc.mesh @mesh shape = [2] axes = ["tp"]
func.func @max_stays_alone(%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %ra = cpc.all_reduce %a over @mesh ["tp"] : tensor<4xf32>
  %rb = cpc.all_reduce %b over @mesh ["tp"] {kind = #cpc.reduction<max>} : tensor<4xf32>
  %rc = cpc.all_reduce %c over @mesh ["tp"] : tensor<4xf32>
  return %ra, %rb, %rc : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that 1-D reduce-scatters (ZeRO-2/3 gradients) share one call: each input viewed as
// [ranks, block], the views side by side along dim 1, one reduce-scatter, and each member's
// block sliced out of this rank's part.
// CHECK-LABEL: func.func @shards
// CHECK: %[[A2:.*]] = cpc.reshape %{{.*}} : tensor<12xf32> -> tensor<2x6xf32>
// CHECK: %[[B2:.*]] = cpc.reshape %{{.*}} : tensor<4xf32> -> tensor<2x2xf32>
// CHECK: %[[SIDE:.*]] = cpc.concat %[[A2]], %[[B2]] {axis = 1 : i64} : (tensor<2x6xf32>, tensor<2x2xf32>) -> tensor<2x8xf32>
// CHECK: %[[FLAT:.*]] = cpc.reshape %[[SIDE]] : tensor<2x8xf32> -> tensor<16xf32>
// CHECK: %[[MINE:.*]] = cpc.reduce_scatter %[[FLAT]] over @mesh ["dp"] : tensor<16xf32> -> tensor<8xf32>
// CHECK: %[[SA:.*]] = cpc.slice %[[MINE]] {limits = array<i64: 6>, starts = array<i64: 0>, strides = array<i64: 1>} : tensor<8xf32> -> tensor<6xf32>
// CHECK: %[[SB:.*]] = cpc.slice %[[MINE]] {limits = array<i64: 8>, starts = array<i64: 6>, strides = array<i64: 1>} : tensor<8xf32> -> tensor<2xf32>
// CHECK: return %[[SA]], %[[SB]]
cpc.mesh @mesh shape = [2] axes = ["dp"]
func.func @shards(%a: tensor<12xf32>, %b: tensor<4xf32>) -> (tensor<6xf32>, tensor<2xf32>) {
  %sa = cpc.reduce_scatter %a over @mesh ["dp"] : tensor<12xf32> -> tensor<6xf32>
  %sb = cpc.reduce_scatter %b over @mesh ["dp"] : tensor<4xf32> -> tensor<2xf32>
  return %sa, %sb : tensor<6xf32>, tensor<2xf32>
}

// -----

// Tests that an op reading a member closes only that member's bucket: the tp all-reduce an
// assign reads at once (as the backward reads a row-parallel layer's, or a recompute copy of a
// forward one) goes out alone, and the dp gradients before and after it still share one call.
// CHECK-LABEL: func.func @other_axis
// CHECK-NOT: ["dp"]
// CHECK: %[[T:.*]] = cpc.all_reduce %{{.*}} over @mesh ["tp"] : tensor<4xf32>
// CHECK-NEXT: cpc.assign %[[T]] to @v
// CHECK: cpc.all_reduce %{{.*}}, %{{.*}} over @mesh ["dp"] : tensor<3xf32>, tensor<5xf32>
cpc.mesh @mesh shape = [2, 2] axes = ["dp", "tp"]
cpc.variable @v : tensor<4xf32>
func.func @other_axis(%a: tensor<3xf32>, %t: tensor<4xf32>, %c: tensor<5xf32>) -> (tensor<3xf32>, tensor<5xf32>) {
  %ra = cpc.all_reduce %a over @mesh ["dp"] : tensor<3xf32>
  %rt = cpc.all_reduce %t over @mesh ["tp"] : tensor<4xf32>
  cpc.assign %rt to @v : tensor<4xf32>
  %rc = cpc.all_reduce %c over @mesh ["dp"] : tensor<5xf32>
  return %ra, %rc : tensor<3xf32>, tensor<5xf32>
}
