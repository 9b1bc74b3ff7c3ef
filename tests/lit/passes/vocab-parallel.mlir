// RUN: cpc-opt %s --cpc-propagate-sharding --cpc-partition | FileCheck %s

// Tests vocab parallelism: the table split by rows over tp is looked up from blocks (each rank
// its rows, zeros elsewhere: a partial sum, all-reduced before the head), the tied head's logits
// are split over the vocabulary, their max and the picked target logits are partial values
// (max and sum) all-reduced as such, and the lookup's gradient scatters into this rank's block
// only (dim_size becomes the block's).
// CHECK: cpc.variable @tok.weight trainable {global_shape = array<i64: 16, 8>, sharding = #cpc.sharding<@mesh, {{\[\[}}"tp"], []]>} : tensor<8x8xf32>
// CHECK-LABEL: func.func @vocab_parallel
// CHECK: %[[T:.*]] = cpc.parameter @tok.weight : tensor<8x8xf32>
// CHECK: %[[E:.*]] = cpc.gather %[[T]], %arg0 {axis = 0 : i64, block_axes = ["tp"], {{.*}}partial = ["tp"]
// CHECK: %[[H:.*]] = cpc.reshape %[[E]]
// CHECK: %[[HR:.*]] = cpc.all_reduce %[[H]] over @mesh ["tp"] : tensor<8x8xf32>
// CHECK: %[[L:.*]] = cpc.matmul %[[HR]], %[[T]] {{.*}} -> tensor<8x8xf32>
// CHECK: %[[M:.*]] = cpc.reduce_max %[[L]]
// CHECK: %[[MR:.*]] = cpc.all_reduce %[[M]] over @mesh ["tp"] {kind = #cpc.reduction<max>} : tensor<8x1xf32>
// CHECK: %[[P:.*]] = cpc.gather_elements %[[L]], %arg1 {axis = 1 : i64, block_axes = ["tp"]
// CHECK: %[[PR:.*]] = cpc.all_reduce %[[P]] over @mesh ["tp"] : tensor<8x1xf32>
// CHECK: cpc.sub %[[PR]], %[[MR]]
// CHECK: cpc.gather_grad %arg2, %arg0 {axis = 0 : i64, block_axes = ["tp"], {{.*}}dim_size = 8 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<8x8xf32>
cpc.mesh @mesh shape = [2] axes = ["tp"]
cpc.variable @tok.weight trainable : tensor<16x8xf32>
func.func @vocab_parallel(%ids: tensor<2x4xi64>, %tgt: tensor<8x1xi64>, %dy: tensor<2x4x8xf32>) -> (tensor<8x1xf32>, tensor<16x8xf32>) {
  %t = cpc.parameter @tok.weight {cpc.shardings = [#cpc.sharding<@mesh, [["tp"], []]>]} : tensor<16x8xf32>
  %e = cpc.gather %t, %ids {axis = 0 : i64} : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %h = cpc.reshape %e : tensor<2x4x8xf32> -> tensor<8x8xf32>
  %logits = cpc.matmul %h, %t {transpose_rhs = true} : (tensor<8x8xf32>, tensor<16x8xf32>) -> tensor<8x16xf32>
  %m = cpc.reduce_max %logits {axes = array<i64: 1>, keepdims = true} : tensor<8x16xf32> -> tensor<8x1xf32>
  %p = cpc.gather_elements %logits, %tgt {axis = 1 : i64} : (tensor<8x16xf32>, tensor<8x1xi64>) -> tensor<8x1xf32>
  %d = cpc.sub %p, %m : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x1xf32>
  %dt = cpc.gather_grad %dy, %ids {axis = 0 : i64, dim_size = 16 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<16x8xf32>
  %n = cpc.mul %dt, %t : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
  return %d, %n : tensor<8x1xf32>, tensor<16x8xf32>
}
