// RUN: cpc-opt %s --pass-pipeline='builtin.module(func.func(cpc-bucket-all-gather))' --split-input-file | FileCheck %s

// Tests that the all-gathers of updated parameter blocks (ZeRO-1/2), used only by assigns, become
// one gather of the concatenated blocks; each parameter is a column range of the [ranks, bucket]
// result, and the assigns move after the bucket.
// CHECK-LABEL: func.func @update
// CHECK: %[[PACKED:.*]] = cpc.concat %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<6xf32>, tensor<2xf32>) -> tensor<8xf32>
// CHECK: %[[ALL:.*]] = cpc.all_gather %[[PACKED]] over @mesh ["dp"] : tensor<8xf32> -> tensor<16xf32>
// CHECK: %[[BY_RANK:.*]] = cpc.reshape %[[ALL]] : tensor<16xf32> -> tensor<2x8xf32>
// CHECK: %[[W:.*]] = cpc.slice %[[BY_RANK]] {limits = array<i64: 2, 6>, starts = array<i64: 0, 0>, strides = array<i64: 1, 1>} : tensor<2x8xf32> -> tensor<2x6xf32>
// CHECK: %[[WFLAT:.*]] = cpc.reshape %[[W]] : tensor<2x6xf32> -> tensor<12xf32>
// CHECK: %[[W2:.*]] = cpc.reshape %[[WFLAT]] : tensor<12xf32> -> tensor<4x3xf32>
// CHECK: cpc.assign %[[W2]] to @w : tensor<4x3xf32>
// CHECK: %[[B:.*]] = cpc.slice %[[BY_RANK]] {limits = array<i64: 2, 8>, starts = array<i64: 0, 6>, strides = array<i64: 1, 1>} : tensor<2x8xf32> -> tensor<2x2xf32>
// CHECK: %[[BFLAT:.*]] = cpc.reshape %[[B]] : tensor<2x2xf32> -> tensor<4xf32>
// CHECK: cpc.assign %[[BFLAT]] to @b : tensor<4xf32>
// CHECK-NOT: cpc.all_gather
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @w : tensor<4x3xf32>
cpc.variable @b : tensor<4xf32>
func.func @update(%w: tensor<6xf32>, %b: tensor<2xf32>) {
  %gw = cpc.all_gather %w over @mesh ["dp"] : tensor<6xf32> -> tensor<12xf32>
  %rw = cpc.reshape %gw : tensor<12xf32> -> tensor<4x3xf32>
  cpc.assign %rw to @w : tensor<4x3xf32>
  %gb = cpc.all_gather %b over @mesh ["dp"] : tensor<2xf32> -> tensor<4xf32>
  cpc.assign %gb to @b : tensor<4xf32>
  return
}

// -----

// Tests that a gather whose result feeds a computation (not only assigns) stays as it is.
// CHECK-LABEL: func.func @used
// CHECK-COUNT-2: cpc.all_gather
// CHECK-NOT: cpc.concat
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @b : tensor<4xf32>
func.func @used(%w: tensor<6xf32>, %b: tensor<2xf32>) -> tensor<12xf32> {
  %gw = cpc.all_gather %w over @mesh ["dp"] : tensor<6xf32> -> tensor<12xf32>
  %gb = cpc.all_gather %b over @mesh ["dp"] : tensor<2xf32> -> tensor<4xf32>
  cpc.assign %gb to @b : tensor<4xf32>
  %y = cpc.add %gw, %gw : (tensor<12xf32>, tensor<12xf32>) -> tensor<12xf32>
  return %y : tensor<12xf32>
}

// -----

// Tests that an assign standing after a read of its variable is not moved before that read: only
// ops that stood before the bucket move after it.
// CHECK-LABEL: func.func @late_assign
// CHECK: cpc.all_gather {{.*}} : tensor<8xf32> -> tensor<16xf32>
// CHECK: %[[Y:.*]] = cpc.add %[[P:.*]], %[[P]]
// CHECK: cpc.assign %{{.*}} to @w
// CHECK: cpc.assign %{{.*}} to @b
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @w : tensor<12xf32>
cpc.variable @b : tensor<4xf32>
func.func @late_assign(%w: tensor<6xf32>, %b: tensor<2xf32>) -> tensor<12xf32> {
  %gw = cpc.all_gather %w over @mesh ["dp"] : tensor<6xf32> -> tensor<12xf32>
  %gb = cpc.all_gather %b over @mesh ["dp"] : tensor<2xf32> -> tensor<4xf32>
  %p = cpc.parameter @w : tensor<12xf32>
  %y = cpc.add %p, %p : (tensor<12xf32>, tensor<12xf32>) -> tensor<12xf32>
  cpc.assign %gw to @w : tensor<12xf32>
  cpc.assign %gb to @b : tensor<4xf32>
  return %y : tensor<12xf32>
}

// -----

// Tests that blocks gathered along other dims (ZeRO's rows or columns of a 2-D parameter) join
// the bucket: each is flattened with its gather dim first (a transpose for dim 1), and turned
// back from its columns of the gathered buffer.
// CHECK-LABEL: func.func @dims
// CHECK: %[[T:.*]] = cpc.transpose %arg0 {permutation = array<i64: 1, 0>} : tensor<4x3xf32> -> tensor<3x4xf32>
// CHECK: %[[FW:.*]] = cpc.reshape %[[T]] : tensor<3x4xf32> -> tensor<12xf32>
// CHECK: %[[FB:.*]] = cpc.reshape %arg1 : tensor<2x4xf32> -> tensor<8xf32>
// CHECK: %[[ALL:.*]] = cpc.all_gather {{.*}} : tensor<20xf32> -> tensor<40xf32>
// CHECK: %[[RANKS:.*]] = cpc.reshape %[[ALL]] : tensor<40xf32> -> tensor<2x20xf32>
// CHECK: %[[CW:.*]] = cpc.slice %[[RANKS]] {{.*}} : tensor<2x20xf32> -> tensor<2x12xf32>
// CHECK: %[[RW:.*]] = cpc.reshape %[[CW]] : tensor<2x12xf32> -> tensor<6x4xf32>
// CHECK: %[[W:.*]] = cpc.transpose %[[RW]] {permutation = array<i64: 1, 0>} : tensor<6x4xf32> -> tensor<4x6xf32>
// CHECK: %[[CB:.*]] = cpc.slice %[[RANKS]] {{.*}} : tensor<2x20xf32> -> tensor<2x8xf32>
// CHECK: %[[B:.*]] = cpc.reshape %[[CB]] : tensor<2x8xf32> -> tensor<4x4xf32>
// CHECK: cpc.assign %[[W]] to @w : tensor<4x6xf32>
// CHECK: cpc.assign %[[B]] to @b : tensor<4x4xf32>
cpc.mesh @mesh shape = [2] axes = ["dp"]
cpc.variable @w : tensor<4x6xf32>
cpc.variable @b : tensor<4x4xf32>
func.func @dims(%w: tensor<4x3xf32>, %b: tensor<2x4xf32>) {
  %gw = cpc.all_gather %w over @mesh ["dp"] {dim = 1 : i64} : tensor<4x3xf32> -> tensor<4x6xf32>
  %gb = cpc.all_gather %b over @mesh ["dp"] : tensor<2x4xf32> -> tensor<4x4xf32>
  cpc.assign %gw to @w : tensor<4x6xf32>
  cpc.assign %gb to @b : tensor<4x4xf32>
  return
}
