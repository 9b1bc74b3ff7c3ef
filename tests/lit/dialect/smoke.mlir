// RUN: cpc-opt %s | cpc-opt | FileCheck %s

// Tests that a small function round-trips through the textual format.
// CHECK-LABEL: func.func @f
// CHECK: cpc.add %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
func.func @f(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  %0 = cpc.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
