// RUN: cpc-opt %s --cpc-propagate-sharding --cpc-partition | FileCheck %s

// Tests tensor-parallel storage: a parameter annotated as split over tp is stored as this rank's
// block (global_shape and sharding on the op, local type); the state updated with it is split
// alike by propagation and stored the same way; assigns of the updated blocks need no
// communication, while a variable stored whole gets the gathered value.
// CHECK: cpc.variable @w trainable {global_shape = array<i64: 4, 6>, sharding = #cpc.sharding<@mesh, {{\[\[}}"tp"], []]>} : tensor<2x6xf32>
// CHECK: cpc.variable @m state <exp_avg> {global_shape = array<i64: 4, 6>, sharding = #cpc.sharding<@mesh, {{\[\[}}"tp"], []]>} : tensor<2x6xf32>
// CHECK-LABEL: func.func @update
// CHECK: %[[W:.*]] = cpc.parameter @w : tensor<2x6xf32>
// CHECK: %[[M:.*]] = cpc.state @m : tensor<2x6xf32>
// CHECK: %[[M2:.*]] = cpc.add %[[M]], %{{.*}} : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
// CHECK: %[[W2:.*]] = cpc.sub %[[W]], %[[M2]]
// CHECK-NEXT: cpc.assign %[[M2]] to @m : tensor<2x6xf32>
// CHECK-NEXT: cpc.assign %[[W2]] to @w : tensor<2x6xf32>
// CHECK: %[[G:.*]] = cpc.all_gather %[[W2]] over @mesh ["tp"] : tensor<2x6xf32> -> tensor<4x6xf32>
// CHECK: cpc.assign %[[G]] to @whole : tensor<4x6xf32>
cpc.mesh @mesh shape = [2] axes = ["tp"]
cpc.variable @w trainable : tensor<4x6xf32>
cpc.variable @m state <exp_avg> : tensor<4x6xf32>
cpc.variable @whole : tensor<4x6xf32>
func.func @update(%lr: tensor<f32>) {
  %w = cpc.parameter @w {cpc.shardings = [#cpc.sharding<@mesh, [["tp"], []], priority = 1>]} : tensor<4x6xf32>
  %m = cpc.state @m : tensor<4x6xf32>
  %d = cpc.mul %w, %lr : (tensor<4x6xf32>, tensor<f32>) -> tensor<4x6xf32>
  %m2 = cpc.add %m, %d : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %w2 = cpc.sub %w, %m2 : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  cpc.assign %m2 to @m : tensor<4x6xf32>
  cpc.assign %w2 to @w : tensor<4x6xf32>
  cpc.assign %w2 to @whole : tensor<4x6xf32>
  return
}
