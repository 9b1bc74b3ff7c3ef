// RUN: cpc-opt %s -split-input-file --cpc-tensor-parallel="tp=2 search=true" | FileCheck %s
// RUN: cpc-opt %s -split-input-file --cpc-tensor-parallel="tp=2 search=true shard=w2=-:-" | FileCheck %s --check-prefix=OVERRIDE

// Tests that the search finds Megatron's MLP with no pattern: both weights must be split (they
// feed contractions), and of the ways to split them the cheapest is the first column-parallel
// (its result split by hidden features, the GELU on each rank's block) and the second
// row-parallel (its result a partial sum), reduce-scattered by rows for the softmax, which
// needs whole rows (half the bytes of an all-reduce). Every op's result layout is written as a
// seed, the reshard as a cpc.shard, and the search's prediction on the function.
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: cpc.sharding_search = {axis = "tp", bytes = 64 : i64, collectives = 1 : i64
// CHECK: cpc.parameter @w1 {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}"tp"], []], priority = 1>]} : tensor<16x8xf32>
// CHECK: cpc.parameter @w2 {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], ["tp"]], priority = 1>]} : tensor<8x16xf32>
// CHECK: cpc.matmul {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], ["tp"]], priority = 1>]
// CHECK: cpc.gelu {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], ["tp"]], priority = 1>]
// CHECK: %[[Y:.*]] = cpc.matmul {{.*}}cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], []], priority = 1>]
// CHECK: %[[ROWS:.*]] = cpc.shard %[[Y]] to <@mesh, {{\[\[}}"tp"], []], priority = 1>
// CHECK: cpc.softmax %[[ROWS]]
// A --shard override is a fixed choice the search works around: with w2 stored whole, one
// collective of 64 bytes still does (the hidden activations moved to a row split by one
// all-to-all, or the row-parallel product reduce-scattered: the two cost the same).
// OVERRIDE-LABEL: func.func @mlp
// OVERRIDE-SAME: cpc.sharding_search = {axis = "tp", bytes = 64 : i64, collectives = 1 : i64
// OVERRIDE: cpc.parameter @w2 {cpc.shardings = [#cpc.sharding<@mesh, {{\[\[}}], []]>]}
cpc.variable @w1 trainable : tensor<16x8xf32>
cpc.variable @w2 trainable : tensor<8x16xf32>
func.func @mlp(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {cpc.phase = #cpc.phase<train_step>} {
  %w1 = cpc.parameter @w1 : tensor<16x8xf32>
  %w2 = cpc.parameter @w2 : tensor<8x16xf32>
  %h = cpc.matmul %x, %w1 {transpose_rhs = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a = cpc.gelu %h : tensor<4x16xf32>
  %y = cpc.matmul %a, %w2 {transpose_rhs = true} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %p = cpc.softmax %y {axis = 1 : i64} : tensor<4x8xf32>
  return %p : tensor<4x8xf32>
}

